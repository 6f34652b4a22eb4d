"""The Presidio analyzer behind `feedback.pii.Redactor`: which recognizers, which NLP engine.

Kept apart from `feedback.pii` so that the policy (types, placeholders, overlaps) reads on its own
and this file is only Presidio configuration. Every recognizer here is Presidio's own or a thin
adapter of a maintained library; the adapters exist only where Presidio needs telling something:
- e-mail: Presidio validates the domain with tldextract, whose default first fetches the public
  suffix list from the internet. Offline, that is a stall per process; ours reads the snapshot
  tldextract ships (the list changes slowly; a new TLD costs at most one missed e-mail domain).
- phone: libphonenumber matches national formats only for the regions it is told; ours adds the
  countries whose numbers the test set plants (AU, IE, ES, IT, NL) to Presidio's default list and
  drops Canada, whose numbers are the same plan as the US (one scan fewer per text).
- card and URL: two patterns Presidio lacks, next to its own (see `_CARD_2_SERIES`,
  `_URL_WITH_CREDENTIALS`); the card one goes through Presidio's Luhn check like the others.
- address: pyap2 parses US, UK and Canadian addresses; a match must start and end on a word
  boundary (its UK grammar otherwise takes "NL51AB" inside an IBAN for a postcode), and it scans
  a line at a time (its regexes are superlinear in the length they scan).
- the model sees long unbroken runs split by spaces (spaCy's tokenizer is quadratic in them).
- birth date: Presidio's numeric date patterns and the model's DATE entities, both typed
  DATE_OF_BIRTH with birth words as context; `feedback.pii` keeps only those the context raised.
"""

from __future__ import annotations

import re

import tldextract
from presidio_analyzer import AnalyzerEngine, EntityRecognizer, Pattern, RecognizerRegistry, RecognizerResult
from presidio_analyzer.context_aware_enhancers import LemmaContextAwareEnhancer
from presidio_analyzer.nlp_engine import NerModelConfiguration, NlpArtifacts, SpacyNlpEngine
from presidio_analyzer.predefined_recognizers import (
    CreditCardRecognizer,
    DateRecognizer,
    EmailRecognizer,
    IbanRecognizer,
    IpRecognizer,
    PhoneRecognizer,
    SpacyRecognizer,
    UkNinoRecognizer,
    UrlRecognizer,
    UsSsnRecognizer,
)

BIRTH_WORDS = ["born", "bear", "birth", "birthday", "dob", "d.o.b", "b."]  # "bear": the lemma of "born"
PHONE_REGIONS = ("US", "GB", "DE", "FR", "IL", "IN", "BR", "AU", "IE", "ES", "IT", "NL")  # US covers Canada (+1)
# The two patterns Presidio lacks (it has all the validation): Mastercard's 2-series (2221-2720,
# issued since 2017; Presidio's card pattern knows only 51-55), Luhn-checked like every card; and a
# URL with credentials (scheme://user:password@host), which Presidio's URL pattern cannot start on,
# so it found only "password@host" as an e-mail and left the user name and password in.
_CARD_2_SERIES = Pattern("Mastercard 2-series", r"\b2(?:2[2-9]\d|[3-6]\d\d|7[01]\d|720)[- ]?\d{4}[- ]?\d{4}[- ]?\d{4}\b",
                         0.3)
_URL_WITH_CREDENTIALS = Pattern("URL with credentials", r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s:/@]+:[^\s/@]+@[^\s()<>\"']+",
                                0.7)
# spaCy labels we do not use: places, organisations and numbers are not personal on their own.
_IGNORED_LABELS = ["ORG", "GPE", "LOC", "NORP", "FAC", "PRODUCT", "EVENT", "WORK_OF_ART", "LAW", "LANGUAGE",
                   "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"]


class _OfflineEmailRecognizer(EmailRecognizer):
    _tld = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)  # the shipped snapshot, no fetch

    def validate_result(self, pattern_text: str) -> bool:
        return self._tld(pattern_text).fqdn != ""


class _AddressRecognizer(EntityRecognizer):
    """Street addresses found by pyap2 (US, GB, CA grammars).

    pyap's regexes grow worse than linearly with the length of what they scan (26 s for a run of
    20,000 digits), so they see one line at a time, at most `SEGMENT` characters, and only lines
    with a digit in them: every address its grammars know has a house number or a postcode.
    """

    COUNTRIES = ("US", "GB", "CA")
    SEGMENT = 500

    def __init__(self):
        super().__init__(supported_entities=["ADDRESS"], name="Pyap2AddressRecognizer", supported_language="en")

    def load(self) -> None:
        pass

    def analyze(self, text: str, entities, nlp_artifacts=None) -> list[RecognizerResult]:
        import pyap

        results = []
        for offset, segment in _segments(text, self.SEGMENT):
            if not any(c.isdigit() for c in segment):
                continue
            for country in self.COUNTRIES:
                for address in pyap.parse(segment, country=country):
                    span = _trimmed(text, offset + address.match_start, offset + address.match_end)
                    if span:
                        results.append(RecognizerResult("ADDRESS", *span, 0.6, recognition_metadata={
                            RecognizerResult.RECOGNIZER_NAME_KEY: self.name,
                            RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id}))
        return results


def _segments(text: str, size: int):
    """(offset, segment): the lines of `text`, long ones cut at a space, none over `size` chars."""
    offset = 0
    for line in text.splitlines(keepends=True):
        start = 0
        while len(line) - start > size:
            cut = line.rfind(" ", start, start + size)
            cut = cut + 1 if cut > start else start + size
            yield offset + start, line[start:cut]
            start = cut
        yield offset + start, line[start:]
        offset += len(line)


def _trimmed(text: str, start: int, end: int) -> tuple[int, int] | None:
    """pyap keeps the space before and the comma after; None unless the match is whole words
    (its UK grammar otherwise takes "NL51AB" inside an IBAN for a postcode)."""
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and not text[end - 1].isalnum():
        end -= 1
    bounded = (end > start and (start == 0 or not text[start - 1].isalnum())
               and (end == len(text) or not text[end].isalnum()))
    return (start, end) if bounded else None


class _WrittenDateRecognizer(SpacyRecognizer):
    """The model's DATE entities that are written with a month name ("March 2, 2015").

    Numeric dates are left to Presidio's date patterns, which know the formats; the model also
    calls digit runs such as "48 83 95" dates, and next to "DOB" those would beat the phone number.
    """

    def analyze(self, text: str, entities, nlp_artifacts=None):
        return [r for r in super().analyze(text, entities, nlp_artifacts)
                if any(c.isalpha() for c in text[r.start:r.end]) and any(c.isdigit() for c in text[r.start:r.end])]


_LONG_RUN = re.compile(r"\S{200,}")


def _break_run(m: re.Match) -> str:
    run = m.group(0)
    return " ".join(run[i + (i > 0):i + 100] for i in range(0, len(run), 100))


class _Engine(SpacyNlpEngine):
    """SpacyNlpEngine that loads an installed model without its parser, or a bare tokenizer.

    Presidio's own loader would try to download a missing model; here a missing model is an
    error to fix at install time, not a network call at run time.
    """

    def __init__(self, model: str | None):
        config = NerModelConfiguration(model_to_presidio_entity_mapping={"PERSON": "PERSON", "PER": "PERSON",
                                                                         "DATE": "DATE_OF_BIRTH"},
                                       labels_to_ignore=_IGNORED_LABELS)
        super().__init__(models=[{"lang_code": "en", "model_name": model or "blank"}], ner_model_configuration=config)
        self.model = model

    def load(self) -> None:
        import spacy

        if self.model is None:
            self.nlp = {"en": spacy.blank("en")}
        else:
            # The parser and sentence splitter feed nothing Presidio uses; the tagger stays for lemmas.
            self.nlp = {"en": spacy.load(self.model, exclude=["parser", "senter"])}

    def process_batch(self, texts, language: str, batch_size: int = 1, n_process: int = 1, as_tuples: bool = False):
        """As SpacyNlpEngine's, on texts whose long unbroken runs are split for the model.

        spaCy's tokenizer is quadratic in the length of a run without spaces (10 s for 5,000
        emoji); no name or date is 200 characters without a space, so the model sees such runs
        with a space every 100 characters. Same length, so every offset still holds.
        """
        for text, artifacts in super().process_batch([_LONG_RUN.sub(_break_run, t) for t in texts], language,
                                                     batch_size=batch_size, n_process=n_process):
            yield text, artifacts

    def _doc_to_nlp_artifact(self, doc, language: str) -> NlpArtifacts:
        artifacts = super()._doc_to_nlp_artifact(doc, language)
        if self.model is None:  # a bare tokenizer has no lemmas: the lower-cased word stands in
            artifacts.lemmas = [t.lower_ for t in doc]
            artifacts.keywords = artifacts.set_keywords(self, artifacts.lemmas, language)
        return artifacts


def build_analyzer(model: str | None) -> AnalyzerEngine:
    """An AnalyzerEngine with our recognizers; `model` None = no NER model (bare tokenizer)."""
    engine = _Engine(model)
    engine.load()
    recognizers = [
        _OfflineEmailRecognizer(), PhoneRecognizer(supported_regions=PHONE_REGIONS), CreditCardRecognizer(patterns=CreditCardRecognizer.PATTERNS + [_CARD_2_SERIES]),
        IbanRecognizer(), IpRecognizer(),
        UrlRecognizer(patterns=UrlRecognizer.PATTERNS + [_URL_WITH_CREDENTIALS]), UsSsnRecognizer(), UkNinoRecognizer(),
        DateRecognizer(supported_entity="DATE_OF_BIRTH", context=BIRTH_WORDS), _AddressRecognizer(),
    ]
    if model is not None:
        recognizers += [SpacyRecognizer(supported_entities=["PERSON"], name="SpacyPerson"),
                        _WrittenDateRecognizer(supported_entities=["DATE_OF_BIRTH"], context=BIRTH_WORDS,
                                               name="SpacyBirthDate")]
    registry = RecognizerRegistry(recognizers=recognizers, supported_languages=["en"])
    return AnalyzerEngine(registry=registry, nlp_engine=engine, supported_languages=["en"],
                          context_aware_enhancer=LemmaContextAwareEnhancer(context_prefix_count=5,
                                                                           context_suffix_count=0))
