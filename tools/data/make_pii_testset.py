"""Write `pii_testset.jsonl`: advice-style sentences with planted personal data, and controls.

Run `python -m tools.data.make_pii_testset` to regenerate it (deterministic; a test checks that
the shipped file matches this script).

How the set is made, and why:
- Templated sentences (`TEMPLATES` x value pools, seeded): advice questions of the kind people
  type into the chat ("My landlord {PERSON} ({EMAIL}) won't return my deposit"), each planting
  one to three values. Every type is planted at least 30 times so that a recall of 0.95 means
  something. The values are NOT drawn from any recognizer's regexes: they are built from
  numbering plans and formats people actually write (national and international phones with
  spaces, dots, dashes and brackets; cards grouped by 4, dashed, run together, Amex 4-6-5; IBANs
  of nine countries, compact and grouped; lowercase and plus-addressed e-mails). Card numbers
  pass Luhn and IBANs their mod-97 checksum, as real ones do; SSNs and NINOs follow the issuing
  rules (no 000/666/9xx areas, no BG/GB/ZZ prefixes).
- Hand-written sentences (`HAND`) for what templates cannot express: lowercase names, names that
  are also words, addresses run into the sentence, several values of one type, values at the start
  or end of a message, typos in the surrounding text.
- Controls (`CONTROLS`): PII-free messages, many of them deliberately tricky ("I'm 34", "May I
  ask…", Jordan the country, version numbers that look like IPs, order numbers, prices, exam dates
  that are not birth dates, bare company domains). A detection on a control is a false positive.
- Split: each value pool is cut in two (even / odd index); `dev` items draw from one half and
  `test` items from the other, so the figures on `test` are on values the recognizers were not
  tuned against. Hand-written sentences and controls alternate between the splits.
- Span convention: the span is the value itself, without the words around it ("born on", "Mr."
  is inside a PERSON span only when written with the name: "Mr. Okafor" is one span).
- Types: EMAIL, PHONE, PERSON, ADDRESS, CARD, IBAN, URL, IP, NATIONAL_ID (US SSN, UK NINO),
  DATE_OF_BIRTH. URL means any link written with a scheme or "www." (profile pages, shared
  documents, links with credentials) or a domain followed by a path ("linkedin.com/in/…"); a bare
  company domain ("amazon.com") names a company, not a person, and is not planted.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "feedback" / "data" / "pii_testset.jsonl"
SEED = 20250116
TEMPLATED = 352

# ---------------------------------------------------------------------------- value pools

FIRST = ("John", "Sarah", "Priya", "Mohammed", "Emily", "Chen", "Oluwaseun", "Maria", "David", "Aisha",
         "Liam", "Sofia", "Kwame", "Hannah", "Diego", "Yuki", "Thomas", "Fatima", "Lukas", "Grace",
         "Rahul", "Chloe", "Mateo", "Ingrid", "Samuel", "Nadia", "Patrick", "Mei", "Carlos", "Zoe",
         "Ahmed", "Laura", "Tobias", "Anika", "Brendan", "Leila", "Marcus", "Olga", "Femi", "Rebecca")
LAST = ("Miller", "Okafor", "Patel", "Nguyen", "Kowalski", "Fernandez", "O'Brien", "Schmidt",
        "Haddad", "Johansson", "Tanaka", "Williams", "Mensah", "Rossi", "Dubois", "Kim", "Garcia",
        "Thompson", "Novak", "Ahmed", "Murphy", "Lindqvist", "Adeyemi", "Silva", "Van der Berg",
        "Kaur", "MacLeod", "Yilmaz", "Petrov", "Brennan", "Castillo", "Fischer", "Osei", "Moreau",
        "Hughes", "Sato", "Dimitriou", "Walsh", "Abdullah", "Larsen")
TITLES = ("Mr.", "Mrs.", "Ms.", "Dr.", "Mr", "Ms")
MAIL_DOMAINS = ("gmail.com", "yahoo.com", "outlook.com", "hotmail.co.uk", "icloud.com", "proton.me",
                "web.de", "orange.fr", "company.com", "uni-heidelberg.de", "mail.ru", "btinternet.com")

US_AREAS = ("212", "415", "617", "312", "206", "503", "713", "305", "404", "720", "602", "818")
US_STREETS = ("Maple", "Oak", "Cedar", "Elm", "Washington", "Lincoln", "Sunset", "Highland", "Pine",
              "Lakeview", "Park", "Hillcrest", "Willow", "Franklin", "Jefferson", "Church")
US_SUFFIX = ("Street", "St", "Avenue", "Ave", "Road", "Rd", "Drive", "Dr", "Lane", "Blvd", "Court", "Way")
US_CITIES = (("Springfield", "IL"), ("Portland", "OR"), ("Austin", "TX"), ("Columbus", "OH"),
             ("Denver", "CO"), ("Madison", "WI"), ("Raleigh", "NC"), ("Tucson", "AZ"),
             ("Boise", "ID"), ("Albany", "NY"))
UK_STREETS = ("Mill Lane", "Station Road", "Church Street", "Victoria Road", "Kings Road", "Park Avenue",
              "Queens Road", "The Crescent", "Green Lane", "Manor Close", "Baker Street", "High Street")
UK_TOWNS = (("London", "SW1A 2AA"), ("Leeds", "LS6 3HN"), ("Bristol", "BS8 1TH"), ("Manchester", "M14 5RL"),
            ("Glasgow", "G12 8QQ"), ("Cardiff", "CF10 3AT"), ("Oxford", "OX4 1DB"), ("Brighton", "BN2 0JY"))
EU_ADDRESSES = ("Hauptstraße 12, 10115 Berlin", "Lindenallee 7, 50968 Köln", "12 rue de la Paix, 75002 Paris",
                "Calle Mayor 23, 28013 Madrid", "Keizersgracht 141, 1015 CK Amsterdam",
                "Via Roma 45, 00184 Roma", "Bahnhofstrasse 3, 8001 Zürich", "Schillerstraße 28a, 80336 München")

URLS = ("https://www.facebook.com/{u}", "https://www.linkedin.com/in/{u}", "www.instagram.com/{u}",
        "https://docs.google.com/document/d/1xK9fQ{n}aZ/edit", "https://admin:{p}@192.168.0.{o}/config",
        "ftp://{u}:{p}@files.{u}.net/backup", "https://{u}:{p}@nas.home-cloud.org/share",
        "http://www.{u}-photography.com/about", "https://twitter.com/{u}", "https://github.com/{u}")
PASSWORDS = ("hunter2", "Summer2024!", "qwerty123", "s3cr3t", "letmein99", "Pa55word", "dragon7")

# ---------------------------------------------------------------------------- value makers


def luhn_complete(prefix: str, length: int, rng: random.Random) -> str:
    """A card number with `prefix`, random body and the Luhn check digit that makes it valid."""
    body = prefix + "".join(str(rng.randint(0, 9)) for _ in range(length - len(prefix) - 1))
    total = 0
    for i, ch in enumerate(reversed(body)):  # the check digit will sit at position 0, so body starts at 1
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return body + str((10 - total % 10) % 10)


def luhn_ok(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def make_card(rng: random.Random) -> str:
    kind = rng.choice(("visa", "visa", "mc", "mc2", "amex", "discover"))
    if kind == "amex":
        n = luhn_complete(rng.choice(("34", "37")), 15, rng)
        return rng.choice((f"{n[:4]} {n[4:10]} {n[10:]}", f"{n[:4]}-{n[4:10]}-{n[10:]}", n))
    prefix = {"visa": "4", "mc": str(rng.randint(51, 55)), "mc2": str(rng.randint(2221, 2720)),
              "discover": "6011"}[kind]
    n = luhn_complete(prefix, 16, rng)
    groups = [n[i:i + 4] for i in range(0, 16, 4)]
    return rng.choice((" ".join(groups), "-".join(groups), n, " ".join(groups)))


# Country: (length, BBAN maker). BBAN layouts from the IBAN registry: letters where banks have codes.
def _digits(rng: random.Random, k: int) -> str:
    return "".join(str(rng.randint(0, 9)) for _ in range(k))


def _letters(rng: random.Random, k: int) -> str:
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(k))


IBAN_BBAN = {
    "DE": lambda r: _digits(r, 18),
    "GB": lambda r: rng_choice(r, ("NWBK", "BARC", "HBUK", "LOYD", "MIDL")) + _digits(r, 14),
    "FR": lambda r: _digits(r, 10) + _letters(r, 1) + _digits(r, 10) + _digits(r, 2),
    "ES": lambda r: _digits(r, 20),
    "NL": lambda r: rng_choice(r, ("ABNA", "INGB", "RABO", "TRIO")) + _digits(r, 10),
    "IT": lambda r: _letters(r, 1) + _digits(r, 10) + _digits(r, 12),
    "BE": lambda r: _digits(r, 12),
    "IE": lambda r: rng_choice(r, ("AIBK", "BOFI")) + _digits(r, 14),
    "CH": lambda r: _digits(r, 17),
}


def rng_choice(rng: random.Random, seq):
    return rng.choice(seq)


def iban_check(country: str, bban: str) -> str:
    rearranged = bban + country + "00"
    numeric = "".join(str(int(c, 36)) for c in rearranged)
    return f"{98 - int(numeric) % 97:02d}"


def iban_ok(iban: str) -> bool:
    s = iban.replace(" ", "").upper()
    return int("".join(str(int(c, 36)) for c in s[4:] + s[:4])) % 97 == 1


def make_iban(rng: random.Random) -> str:
    country = rng.choice(sorted(IBAN_BBAN))
    bban = IBAN_BBAN[country](rng)
    iban = country + iban_check(country, bban) + bban
    if rng.random() < 0.5:
        return " ".join(iban[i:i + 4] for i in range(0, len(iban), 4))
    return iban


def make_phone(rng: random.Random) -> str:
    kind = rng.choice(("us", "us", "us", "uk_mobile", "uk_london", "de", "fr", "in", "au", "ie"))
    if kind == "us":
        a, x, s = rng.choice(US_AREAS), str(rng.randint(201, 989)), _digits(rng, 4)
        if x.endswith("11") or x == "555":
            x = "732"
        return rng.choice((f"({a}) {x}-{s}", f"{a}-{x}-{s}", f"{a}.{x}.{s}", f"+1 {a} {x} {s}",
                           f"+1-{a}-{x}-{s}", f"{a} {x} {s}"))
    if kind == "uk_mobile":
        n = "7" + rng.choice("45789") + _digits(rng, 8)
        return rng.choice((f"0{n[:4]} {n[4:]}", f"+44 {n[:4]} {n[4:]}", f"+44{n}", f"0{n}"))
    if kind == "uk_london":
        n = rng.choice("378") + _digits(rng, 7)
        return rng.choice((f"020 {n[:4]} {n[4:]}", f"+44 20 {n[:4]} {n[4:]}", f"(020) {n[:4]} {n[4:]}"))
    if kind == "de":
        pre, n = rng.choice(("151", "160", "170", "176", "157")), _digits(rng, 8)
        return rng.choice((f"+49 {pre} {n}", f"+49 {pre} {n[:4]} {n[4:]}", f"+49-{pre}-{n}"))
    if kind == "fr":  # allocated mobile blocks: 06 (but not 063 9, 069 0-4/6/7) and 073-079
        n = rng.choice(("6" + rng.choice("01245678"), "7" + rng.choice("3456789"))) + _digits(rng, 7)
        pairs = " ".join(n[i:i + 2] for i in range(1, 9, 2))
        return rng.choice((f"+33 {n[0]} {pairs}", f"+33{n}"))
    if kind == "in":
        n = rng.choice("6789") + _digits(rng, 9)
        return rng.choice((f"+91 {n[:5]} {n[5:]}", f"+91-{n}", f"+91{n}"))
    if kind == "au":
        n = "4" + rng.choice("01236") + _digits(rng, 7)  # allocated 04x mobile blocks
        return rng.choice((f"+61 {n[:3]} {n[3:6]} {n[6:]}", f"+61{n}"))
    n = "8" + rng.choice("3579") + _digits(rng, 7)
    return rng.choice((f"+353 {n[:2]} {n[2:5]} {n[5:]}", f"+353{n}"))


def make_ssn(rng: random.Random) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    group, serial = rng.randint(1, 99), rng.randint(1, 9999)
    s = f"{area:03d}{group:02d}{serial:04d}"
    return rng.choice((f"{s[:3]}-{s[3:5]}-{s[5:]}", f"{s[:3]}-{s[3:5]}-{s[5:]}", f"{s[:3]} {s[3:5]} {s[5:]}"))


def make_nino(rng: random.Random) -> str:
    first = rng.choice([c for c in "ABCEGHJKLMNOPRSTWXYZ"])
    second = rng.choice([c for c in "ABCEGHJKLMNPRSTWXYZ"])
    if first + second in ("BG", "GB", "NK", "KN", "TN", "NT", "ZZ"):
        second = "A"
    d = _digits(rng, 6)
    suffix = rng.choice("ABCD")
    return rng.choice((f"{first}{second} {d[:2]} {d[2:4]} {d[4:]} {suffix}", f"{first}{second}{d}{suffix}"))


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")


def make_dob(rng: random.Random) -> str:
    y, m, d = rng.randint(1940, 2006), rng.randint(1, 12), rng.randint(1, 28)
    return rng.choice((f"{d:02d}/{m:02d}/{y}", f"{m}/{d}/{y}", f"{y}-{m:02d}-{d:02d}", f"{MONTHS[m - 1]} {d}, {y}",
                       f"{d} {MONTHS[m - 1]} {y}", f"{d:02d}.{m:02d}.{y}", f"{d} {MONTHS[m - 1][:3]} {y}"))


def make_ip(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return f"2a02:c7f:{rng.randint(0x1000, 0xffff):x}:{rng.randint(0, 0xffff):x}::{rng.randint(1, 0xff):x}"
    first = rng.choice((81, 86, 92, 109, 151, 172, 185, 203, 212, 73, 98, 24))
    return f"{first}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


class Pools:
    """Value makers restricted to one half of each pool, so dev and test values differ."""

    def __init__(self, rng: random.Random, half: int):
        self.rng, self.half = rng, half

    def pick(self, seq):
        return self.rng.choice(seq[self.half::2])

    def first(self) -> str:
        return self.pick(FIRST)

    def full_name(self) -> str:
        return f"{self.first()} {self.pick(LAST)}"

    def titled(self) -> str:
        return f"{self.pick(TITLES)} {self.pick(LAST)}"

    def email(self) -> str:
        f, last = self.first().lower(), re.sub(r"[^a-z]", "", self.pick(LAST).lower())
        user = self.rng.choice((f"{f}.{last}", f"{f}{last}", f"{f[0]}{last}", f"{f}_{last}{self.rng.randint(1, 99)}",
                                f"{f}.{last}+bills", f"{last}.{f}", f"{f.upper()}.{last.capitalize()}"))
        return f"{user}@{self.pick(MAIL_DOMAINS)}"

    def address(self) -> str:
        r = self.rng
        kind = r.choice(("us", "us", "us_short", "uk", "uk", "eu", "apt"))
        if kind in ("us", "us_short", "apt"):
            street = f"{r.randint(2, 9899)} {self.pick(US_STREETS)} {self.pick(US_SUFFIX)}"
            if kind == "us_short":
                return street
            city, state = self.pick(US_CITIES)
            full = f"{street}, {city}, {state} {r.randint(10000, 99950)}"
            return f"Apt {r.randint(1, 40)}{r.choice('ABC')}, {full}" if kind == "apt" else full
        if kind == "uk":
            town, postcode = self.pick(UK_TOWNS)
            lead = r.choice((f"{r.randint(1, 180)}", f"Flat {r.randint(1, 12)}, {r.randint(1, 99)}"))
            return f"{lead} {self.pick(UK_STREETS)}, {town} {postcode}"
        return self.pick(EU_ADDRESSES)

    def url(self) -> str:
        u = f"{self.first().lower()}{self.rng.choice(('.', '-', '_', ''))}{self.pick(LAST).lower().replace(' ', '')}"
        u = re.sub(r"[^a-z._-]", "", u)
        return self.pick(URLS).format(u=u, p=self.pick(PASSWORDS), n=_digits(self.rng, 6),
                                      o=self.rng.randint(2, 250))


MAKERS = {
    "PERSON": lambda p: p.full_name(), "FIRSTNAME": lambda p: p.first(), "TITLED": lambda p: p.titled(),
    "EMAIL": lambda p: p.email(), "PHONE": lambda p: make_phone(p.rng), "CARD": lambda p: make_card(p.rng),
    "IBAN": lambda p: make_iban(p.rng), "ADDRESS": lambda p: p.address(), "URL": lambda p: p.url(),
    "IP": lambda p: make_ip(p.rng), "SSN": lambda p: make_ssn(p.rng), "NINO": lambda p: make_nino(p.rng),
    "DOB": lambda p: make_dob(p.rng),
}
# Slot name -> planted type.
SLOT_TYPE = {"PERSON": "PERSON", "FIRSTNAME": "PERSON", "TITLED": "PERSON", "EMAIL": "EMAIL", "PHONE": "PHONE",
             "CARD": "CARD", "IBAN": "IBAN", "ADDRESS": "ADDRESS", "URL": "URL", "IP": "IP",
             "SSN": "NATIONAL_ID", "NINO": "NATIONAL_ID", "DOB": "DATE_OF_BIRTH"}

# ---------------------------------------------------------------------------- templates

TEMPLATES = (
    "My landlord {PERSON} ({EMAIL}, {PHONE}) won't return my deposit. What can I do?",
    "How do I write a polite complaint to {TITLED}? His email is {EMAIL}.",
    "I think someone used my card {CARD} at a store I've never been to. Who do I call first?",
    "My bank says the transfer to {IBAN} bounced. Did I type the IBAN wrong?",
    "Is it safe to give my SSN {SSN} to a new employer over email?",
    "I moved to {ADDRESS} last month and my post still goes to the old place. How do I fix that?",
    "My ex keeps texting me from {PHONE}. Can I block them legally?",
    "Can you proofread this: 'Dear {TITLED}, please contact me at {EMAIL} or {PHONE}.'",
    "My router shows a login from {IP} that isn't mine. Should I worry?",
    "My national insurance number is {NINO}, but HMRC says it doesn't match. What now?",
    "I was born on {DOB} so am I old enough to rent a car in Spain?",
    "My sister {FIRSTNAME} wants to move in with me. How do we split the bills fairly?",
    "Here's my profile: {URL}. Does it look professional enough for recruiters?",
    "The seller {PERSON} asked me to pay to {IBAN} instead of through the app. Is that a scam?",
    "Should I send my card number {CARD} to a hotel by email to confirm a booking?",
    "Our neighbour at {ADDRESS} plays loud music every night. How do I complain without a fight?",
    "I shared my NAS link {URL} with a friend. Is that a security risk?",
    "My date of birth is {DOB} and the insurance form rejected it. Why?",
    "Please help me write a reference letter for {PERSON}, who worked for me for three years.",
    "Someone called me from {PHONE} claiming to be from my bank and asked for my PIN.",
    "I emailed {EMAIL} three times about my refund and nobody answers. What next?",
    "My coworker {FIRSTNAME} keeps taking credit for my work. How do I raise it with my manager?",
    "The tax office wrote to {ADDRESS} asking for my SSN {SSN}. Is that normal?",
    "I gave my DOB ({DOB}) and phone ({PHONE}) to a survey site. How bad is that?",
    "Can you draft a text to {FIRSTNAME} saying I can't make it to the wedding?",
    "Is it weird to add my manager {PERSON} on {URL}?",
    "My server at {IP} keeps getting brute-force attempts. What should I change first?",
    "{TITLED} told me to cut down on salt. What's a realistic plan?",
    "My son's teacher, {PERSON}, emailed from {EMAIL} about his grades. How should I reply?",
    "I paid the deposit into {IBAN} and the landlord {TITLED} now says he never got it.",
    "My credit card {CARD} was charged twice for the same flight. How do I dispute it?",
    "Mail for {PERSON} keeps arriving at {ADDRESS}, but nobody by that name lives here.",
    "my number is {PHONE} and my email {EMAIL}, is it ok to put both on my CV?",
    "When I applied for the visa I wrote my birthday as {DOB} by mistake. Can I correct it?",
    "{PERSON} from HR asked for my NI number {NINO} on WhatsApp. Legit?",
    "I want to surprise {FIRSTNAME} for our anniversary. Any ideas under $100?",
    "What should I do if my old employer still has my SSN, {SSN}, on file?",
    "The invoice says to wire the money to {IBAN} by Friday. How do I check the company is real?",
    "A stranger wrote to {EMAIL} pretending to be me. How do I report identity theft?",
    "Our home IP is {IP}; can a game server ban us by it?",
    "The shop took {CARD} and then called me on {PHONE} asking for the code on the back. Scam?",
    "I posted {URL} on a forum and now strangers message me. Should I take it down?",
    "A login from {IP} used the link {URL} while I was asleep. Was I hacked?",
    "I paid with {CARD} on a site that looked fake. Should I cancel the card?",
)

# ---------------------------------------------------------------------------- hand-written

# [[TYPE|value]] marks a planted value; the markup is removed and the span recorded.
HAND = (
    "hey so my roommate [[PERSON|jake]] owes me $400 and wont pay, his venmo is tied to "
    "[[PHONE|(917) 402-5531]], can i take him to small claims?",
    "[[PERSON|Amara Nwosu]] here. I need advice on asking my boss for a raise.",
    "Write a cover letter for me: [[PERSON|Daniel Kaczmarek]], [[ADDRESS|48 Hawthorn Road, Norwich NR2 3LP]], "
    "[[PHONE|07723 118904]], [[EMAIL|d.kaczmarek@gmail.com]].",
    "my mum [[PERSON|Margaret]] has dementia and keeps giving her card number "
    "([[CARD|4929 1538 2204 7715]]) to people on the phone. how do i stop this?",
    "The gym still charges me. Membership name [[PERSON|Ruth Abernathy]], account email "
    "[[EMAIL|ruthie.a@yahoo.co.uk]]. How do I cancel for good?",
    "I'm [[PERSON|Sebastián Herrera]], DOB [[DATE_OF_BIRTH|07/11/1992]], and my passport application "
    "keeps failing online. Ideas?",
    "Send the refund to [[IBAN|DE44 5001 0517 5407 3249 31]] please - is that how I should phrase the email?",
    "Is [[URL|https://bob:Winter2023@files.myfamily.net/photos]] safe to post in a group chat?",
    "My neighbour [[PERSON|Mrs. Gallagher]] at [[ADDRESS|17 Orchard Close]] cut down my hedge. Options?",
    "Both [[EMAIL|tom.h@outlook.com]] and [[EMAIL|tomhall1988@gmail.com]] got the phishing mail. Change both passwords?",
    "I texted [[PHONE|+44 7700 184512]] and [[PHONE|+44 7700 199034]] but neither my plumber nor his partner replied.",
    "ssn is [[NATIONAL_ID|512-48-3307]] - the mortgage broker wants it by text. ok?",
    "My brother [[PERSON|Kofi]] and I inherited a house at [[ADDRESS|2210 Riverside Drive, Columbus, OH 43221]]. "
    "Sell or rent?",
    "How do I tell Aunt [[PERSON|Linda]] I'm not coming for Christmas without hurting her?",
    "My IP [[IP|86.143.22.190]] got banned from a forum. Can I appeal?",
    "Can you check this message before I send it? 'Hi [[PERSON|Fiona]], the keys are with "
    "[[PERSON|Mr Dunmore]] at number [[ADDRESS|12 Station Road]].'",
    "I met [[PERSON|Rosa Delgado-Martín]] at a conference and want to follow up. Too pushy?",
    "Card [[CARD|5425-2334-3010-9903]] expires next month, will autopay break?",
    "Which is better for a kid born [[DATE_OF_BIRTH|March 2, 2015]], swimming or football?",
    "Transfer from [[IBAN|GB33BUKB20201555555555]] to my savings is stuck. Normal on weekends?",
    "my linkedin is [[URL|linkedin.com/in/priya-raman-87]] can you suggest a better headline",
    "Our nanny [[PERSON|Beatriz]] wants a raise after 6 months. What's fair?",
    "I keep getting silent calls from [[PHONE|(646) 709-3318]], how do I find out who that is?",
    "Help me reply to [[PERSON|Professor Ikeda]] ([[EMAIL|k.ikeda@u-tokyo.ac.jp]]) about my thesis deadline.",
    "Would it be rude to ask [[PERSON|Jordan]] to pay me back at his birthday party?",
    "my NINO [[NATIONAL_ID|JH 45 83 21 B]] shows the wrong name on the HMRC app",
    "The delivery keeps going to [[ADDRESS|1432 W Fullerton Ave, Chicago, IL 60614]] instead of my flat.",
    "Is it ok that my landlord [[PERSON|Gary Peterson]] entered the flat without telling me?",
    "The form asked for my date of birth ([[DATE_OF_BIRTH|1988-09-30]]) and mother's maiden name. Phishing?",
    "I ran nmap on [[IP|2001:41d0:302:2200::1c4a]] and my ISP sent a warning. Am I in trouble?",
    "[[PERSON|Will Thornton]] keeps cancelling our plans last minute. Is he losing interest?",
    "Please draft an email to [[EMAIL|accounts@bristolplumbing.co.uk]] disputing invoice 4471.",
    "Amex [[CARD|3714 496353 98431]] was declined abroad. Call them or use the app?",
    "Dear advisor, my name is [[PERSON|Hyun-woo Park]] and I'm anxious about my first job interview.",
    "I left my wallet at [[ADDRESS|Flat 2, 33 Canal Street, Manchester M1 3HE]], can the owner post it?",
    "The school asked for my child's SSN ([[NATIONAL_ID|401-62-8894]]). Do I have to give it?",
    "Got a text from [[PHONE|+1 415 239 8871]] saying my package is held. Real or scam?",
    "Shared doc: [[URL|https://docs.google.com/spreadsheets/d/1Qz8Lm0PxTq/edit]] - is my budget realistic?",
    "[[PERSON|Elena]] said she'd call at 7, it's 9 now. Should I call her or wait?",
    "Write a birthday message for my dad [[PERSON|Raymond]], born [[DATE_OF_BIRTH|14 August 1956]].",
    "The contractor wants payment to [[IBAN|NL91ABNA0417164300]] up front. Red flag?",
    "my email [[EMAIL|lucy_w92@hotmail.com]] got hacked and they're messaging my contacts",
    "What should I say to [[PERSON|Dr. Ramaswamy]] about switching medication?",
    "Can I use [[ADDRESS|221B Baker Street, London NW1 6XE]] as a business address if I sublet?",
    "My friend [[PERSON|Tyrone Jackson]] needs a lawyer in Atlanta, where to start?",
)

CONTROLS = (
    "I'm 34 and thinking about going back to university. Is it too late?",
    "Can you call me tomorrow? Just kidding, you're a bot. How do I stop procrastinating?",
    "May I ask how compound interest actually works?",
    "We're planning a trip to Jordan in April. Is Petra worth two days?",
    "Will I regret buying the iPhone 15 instead of waiting for the next one?",
    "My laptop runs Windows 11 and Python 3.12. Which IDE should I use?",
    "In 2019 I lost my job and I'm still anxious about money. How do I move on?",
    "How much should I save each month if I earn $4,500 after tax?",
    "Is 1.2.3.4 a valid semantic version or do I need three numbers?",
    "My order number is 7741-2093 and it never arrived. How do I chase a shop politely?",
    "My exam is on 12/05/2025. How should I plan my revision?",
    "Is Georgia a good place to retire, the US state I mean?",
    "Paris or Rome for a first trip to Europe?",
    "I bought something on amazon.com that broke after a week. Can I get a refund?",
    "How do I convince my team to adopt Jira instead of spreadsheets?",
    "What's a good weekly running plan to go from 5k to 10k?",
    "I have 3 kids, 2 dogs and 1 car. How do we plan a road trip?",
    "Is a credit score of 720 good enough for a mortgage?",
    "My rent went up by 15% this year. Is that legal?",
    "Should I learn Spanish or Mandarin for business?",
    "How many hours of sleep does a 16-year-old need?",
    "Is it better to pay off a 4.5% loan or invest in an index fund?",
    "The meeting is at 10:30 on Thursday. How do I prepare a 5 minute pitch?",
    "My flight BA 117 was delayed 6 hours. Am I owed compensation?",
    "What does error 404 mean on my website?",
    "Christian values matter to me; how do I talk to my partner about them?",
    "I want to bake a Victoria sponge for my mum's birthday. Any tips?",
    "Is a Mercedes worth the maintenance cost compared to a Toyota?",
    "The temperature dropped to -5 last night and my pipes froze. What now?",
    "I scored 1450 on the SAT. Which colleges should I apply to?",
    "How do I ask for a 10% raise without sounding greedy?",
    "My phone battery lasts only 4 hours. Should I replace it?",
    "Page 42 of the manual says to reset the router. How?",
    "Is April a good month to visit Japan?",
    "Grace under pressure is something I lack. How do I stay calm in meetings?",
    "I work 9 to 5 but want a side hustle. Ideas?",
    "Should I invest in Apple or Microsoft stock?",
    "Can I freeze cooked rice? For how long?",
    "What's the best way to learn the 12 times table?",
    "My son is turning 18 next month. Should he open his own bank account?",
    "How do I set up two-factor authentication on my email?",
    "I got a parking ticket for £70. Is it worth appealing?",
    "Is it rude to leave a party before 11pm?",
    "Best way to store passwords? I use the same one everywhere.",
    "Version 2.14.1 of the app crashes on startup. Reinstall or wait for a fix?",
    "Will it rain in London this weekend, do you think?",
    "How do I write a cover letter for a junior developer role?",
    "My dog ate chocolate an hour ago. Emergency?",
    "What is a fair split of chores between two flatmates?",
    "How do I say no to my manager without damaging the relationship?",
    "I'm moving from Texas to Ohio. What changes with taxes?",
    "Which is cheaper, a 30-year or a 15-year mortgage in the long run?",
    "Is the Nintendo Switch 2 worth it for a 10-year-old?",
    "My code has 3,000 lines in one file. How do I split it?",
    "What's the difference between a Roth IRA and a 401(k)?",
    "I earn 52,000 a year. How much house can I afford?",
    "Can you explain the 50/30/20 budgeting rule?",
    "Is it safe to use public Wi-Fi at the airport?",
    "I drink 4 coffees a day. Is that too much?",
    "How do I tell my friends I'm vegan now without a lecture?",
    "Should I buy a used car with 120,000 miles on it?",
    "My daughter wants to study medicine at Oxford. How competitive is it?",
    "How do I get my deposit back when I move out in June?",
    "What does APR 24.9% actually cost me on a £1,000 balance?",
    "Is a gap year between school and university a bad idea?",
    "Help me plan meals for a week on a budget of 60 euros.",
    "How can I stop checking Instagram 50 times a day?",
    "I'm a nurse working night shifts. How do I fix my sleep?",
    "Should my small business accept Bitcoin?",
    "What's the etiquette for tipping in the US, 15 or 20 percent?",
    "Is it normal that my cat sleeps 16 hours a day?",
    "How do I recover from burnout at 45?",
)

# ---------------------------------------------------------------------------- assembly

_SLOT = re.compile(r"\{([A-Z]+)\}")
_MARK = re.compile(r"\[\[([A-Z_]+)\|(.+?)\]\]")


def fill(template: str, pools: Pools) -> tuple[str, list[dict]]:
    text, spans, pos = "", [], 0
    for m in _SLOT.finditer(template):
        text += template[pos:m.start()]
        value = MAKERS[m.group(1)](pools)
        spans.append({"type": SLOT_TYPE[m.group(1)], "start": len(text), "end": len(text) + len(value),
                      "value": value})
        text += value
        pos = m.end()
    return text + template[pos:], spans


def unmark(marked: str) -> tuple[str, list[dict]]:
    text, spans, pos = "", [], 0
    for m in _MARK.finditer(marked):
        text += marked[pos:m.start()]
        spans.append({"type": m.group(1), "start": len(text), "end": len(text) + len(m.group(2)),
                      "value": m.group(2)})
        text += m.group(2)
        pos = m.end()
    return text + marked[pos:], spans


def build() -> list[dict]:
    rng = random.Random(SEED)
    items = []
    for i in range(TEMPLATED):
        half = (i + i // len(TEMPLATES)) % 2  # each template alternates between the splits round by round
        template = TEMPLATES[i % len(TEMPLATES)]
        text, spans = fill(template, Pools(rng, half))
        items.append({"id": f"tpl-{i:03d}", "split": ("dev", "test")[half], "kind": "template", "text": text,
                      "spans": spans})
    for i, marked in enumerate(HAND):
        text, spans = unmark(marked)
        items.append({"id": f"hand-{i:03d}", "split": ("dev", "test")[i % 2], "kind": "hand", "text": text,
                      "spans": spans})
    for i, text in enumerate(CONTROLS):
        items.append({"id": f"ctl-{i:03d}", "split": ("dev", "test")[i % 2], "kind": "control", "text": text,
                      "spans": []})
    check(items)
    return items


def check(items: list[dict]) -> None:
    """Refuse to write a set whose spans or planted values are wrong."""
    for item in items:
        for s in item["spans"]:
            assert item["text"][s["start"]:s["end"]] == s["value"], item["id"]
            if s["type"] == "CARD":
                assert luhn_ok(s["value"]), (item["id"], s["value"])
            if s["type"] == "IBAN":
                assert iban_ok(s["value"]), (item["id"], s["value"])


def write(path: Path = OUT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for item in build():
            fh.write(json.dumps(item, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    write()
    print(f"wrote {OUT}")
