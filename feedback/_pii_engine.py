"""The Presidio analyzer behind `feedback.pii.Redactor`: which recognizers, which NLP engine.

Kept apart from `feedback.pii` so that the policy (types, placeholders, overlaps) reads on its own
and this file is only Presidio configuration. Every recognizer here is Presidio's own or a thin
adapter of a maintained library; the adapters exist only where Presidio needs telling something:
- e-mail: Presidio validates the domain with tldextract, whose default first fetches the public
  suffix list from the internet. Offline, that is a stall per process; ours reads the snapshot
  tldextract ships (the list changes slowly; a new TLD costs at most one missed e-mail domain).
- phone: libphonenumber matches national formats only for the regions it is told; ours adds the
  countries whose numbers the test set plants (AU, IE, ES, IT, NL) to Presidio's default list.
- address: pyap2 parses US, UK and Canadian addresses; a match must start and end on a word
  boundary (its UK grammar otherwise takes "NL51AB" inside an IBAN for a postcode).
- birth date: Presidio's numeric date patterns and the model's DATE entities, both typed
  DATE_OF_BIRTH with birth words as context; `feedback.pii` keeps only those the context raised.
"""

from __future__ import annotations

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
PHONE_REGIONS = ("US", "GB", "DE", "FR", "IL", "IN", "CA", "BR", "AU", "IE", "ES", "IT", "NL")
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
    """Street addresses found by pyap2 (US, GB, CA grammars)."""

    COUNTRIES = ("US", "GB", "CA")

    def __init__(self):
        super().__init__(supported_entities=["ADDRESS"], name="Pyap2AddressRecognizer", supported_language="en")

    def load(self) -> None:
        pass

    def analyze(self, text: str, entities, nlp_artifacts=None) -> list[RecognizerResult]:
        import pyap

        results = []
        for country in self.COUNTRIES:
            for address in pyap.parse(text, country=country):
                start, end = address.match_start, address.match_end
                while start < end and not text[start].isalnum():  # pyap keeps the space before
                    start += 1
                while end > start and not text[end - 1].isalnum():  # ... and the comma after
                    end -= 1
                if _word_bounded(text, start, end):
                    results.append(RecognizerResult("ADDRESS", start, end, 0.6, recognition_metadata={
                        RecognizerResult.RECOGNIZER_NAME_KEY: self.name,
                        RecognizerResult.RECOGNIZER_IDENTIFIER_KEY: self.id}))
        return results


class _WrittenDateRecognizer(SpacyRecognizer):
    """The model's DATE entities that are written with a month name ("March 2, 2015").

    Numeric dates are left to Presidio's date patterns, which know the formats; the model also
    calls digit runs such as "48 83 95" dates, and next to "DOB" those would beat the phone number.
    """

    def analyze(self, text: str, entities, nlp_artifacts=None):
        return [r for r in super().analyze(text, entities, nlp_artifacts)
                if any(c.isalpha() for c in text[r.start:r.end]) and any(c.isdigit() for c in text[r.start:r.end])]


def _word_bounded(text: str, start: int, end: int) -> bool:
    return (end > start and text[start].isalnum() and (start == 0 or not text[start - 1].isalnum())
            and (end == len(text) or not text[end].isalnum()))


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
