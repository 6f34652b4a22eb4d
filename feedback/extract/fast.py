"""The fast extractor: no LLM, thousands of conversations a second on one CPU core.

How a window is read, sentence by sentence (`cues.py` has the patterns):
1. A bare "No, not yet." answering the assistant's question, and a user correcting their own
   earlier message ("oops, it's two hours, not one"), are set aside: not feedback.
2. Sarcasm and objections make a "make aware" sentence; praise not vetoed ("thanks in advance",
   thanking someone else) a positive one; a question about the answer's own words or a pronoun
   pointing at it a clarification.
3. An objection becomes `aware_with_correction` when the turn adds information beyond the
   negation: at least `correction_min_info` situation words in the objection and the statements
   after it. A statement with no objection but a constraint about the user ("I work nights, so a
   fixed bedtime is impossible") is a correction too.
4. The request left over is compared with the previous user message. An explicit marker ("let me
   rephrase") decides at once; otherwise the share of its content words taken from that message
   decides when it is clearly high or low, and in the doubtful middle band (only there: the model
   costs milliseconds) the MiniLM sentence embeddings decide. A request that mostly reuses the
   answer's own words is a follow-up, not a rephrase ("low novelty vs the answer" is required).
   A hard cap (`embedding_budget`, a share of the batch's windows) bounds the model's cost
   whatever the log looks like, so throughput has a floor.
Adjacent sentences of the same category form one span. Embedding calls are batched per `extract`
call and deduplicated.

Every threshold is in `FastConfig`, tuned on the dev split by `tune.py`; the values in use and the
score they got are in `feedback/data/fast_thresholds.json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from feedback.extract import cues
from feedback.extract.types import BatchResult, Span, Window, make_span
from feedback.taxonomy import (
    ASK_CLARIFICATION,
    AWARE_WITH_CORRECTION,
    AWARE_WITHOUT_CORRECTION,
    POSITIVE,
    REPEAT_REPHRASE,
)

TUNED_PATH = Path(__file__).resolve().parent.parent / "data" / "fast_thresholds.json"
Embedder = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class FastConfig:
    correction_min_info: int = 2  # situation words after an objection that make it a correction
    statement_min_info: int = 3  # ... in a constraint statement with no objection
    clarify_min_overlap: float = 0.5  # share of a named thing's words that must come from the answer
    rephrase_lexical_low: float = 0.2  # below: not a rephrase, no embedding
    rephrase_lexical_high: float = 0.7  # at or above: a rephrase, no embedding
    rephrase_embedding: float = 0.6  # cosine similarity to the previous request, in the middle band
    rephrase_max_answer_overlap: float = 0.5  # above: the request builds on the answer (a follow-up)
    # Cost cap, not tuned: at most this share of a batch's windows goes to the embedding model
    # (the most word-overlapping doubtful ones first; the rest count as not a rephrase).
    embedding_budget: float = 0.01

    @classmethod
    def tuned(cls, path: Path = TUNED_PATH) -> "FastConfig":
        """The thresholds chosen by `tune.py` on the dev split (defaults if the file is missing)."""
        if not path.is_file():
            return cls()
        values = json.loads(path.read_text())["config"]
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Deferred:
    """A request whose rephrase status needs the embedding model."""

    index: int  # window index in the batch
    start: int
    end: int
    text: str
    previous: str
    lexical: float  # share of its content words found in the previous request


class FastExtractor:
    name = "fast"
    version = "fast-1"

    def __init__(self, config: FastConfig | None = None, *, embedder: Embedder | None = None,
                 use_embeddings: bool = True):
        self.config = config or FastConfig.tuned()
        self.use_embeddings = use_embeddings
        self._embedder = embedder

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from feedback.extract.embed import MiniLMEmbedder

            self._embedder = MiniLMEmbedder()
        return self._embedder

    # ---- batch entry point

    def extract(self, windows: Sequence[Window]) -> BatchResult:
        result = BatchResult(spans=[[] for _ in windows])
        deferred: list[_Deferred] = []
        for i, window in enumerate(windows):
            spans, pending = self.read(window, i)
            result.spans[i] = spans
            if pending is not None:
                deferred.append(pending)
        if deferred:
            self._resolve(deferred, windows, result)
        for spans in result.spans:
            for s in spans:
                result.stats[f"found_{s.category}"] += 1
        return result

    def _resolve(self, deferred: list[_Deferred], windows: Sequence[Window], result: BatchResult) -> None:
        result.stats["doubtful_rephrases"] += len(deferred)
        if not self.use_embeddings:
            result.stats["embedding_off"] += len(deferred)
            return
        budget = max(1, int(self.config.embedding_budget * len(windows)))
        if len(deferred) > budget:
            result.stats["embedding_over_budget"] += len(deferred) - budget
            deferred = sorted(deferred, key=lambda d: -d.lexical)[:budget]
        texts = list(dict.fromkeys([d.text for d in deferred] + [d.previous for d in deferred]))
        result.stats["embedded_pairs"] += len(deferred)
        result.stats["embedded_texts"] += len(texts)
        vectors = self.embedder(texts)
        row = {t: k for k, t in enumerate(texts)}
        for d in deferred:
            similarity = float(vectors[row[d.text]] @ vectors[row[d.previous]])
            if similarity >= self.config.rephrase_embedding:
                spans = result.spans[d.index]
                spans.append(make_span(windows[d.index].user, d.start, d.end, REPEAT_REPHRASE, self.name))
                spans.sort(key=lambda s: s.start)

    # ---- one window

    def read(self, window: Window, index: int = 0) -> tuple[list[Span], _Deferred | None]:
        """Spans decided by cues alone, plus the request to embed when they leave doubt."""
        text = window.user
        sents = cues.sentences(text)
        if not sents:
            return [], None
        context = _Context(window)
        asked_back = window.assistant.rstrip().endswith("?")
        labels = [self._label(s, k, asked_back, context) for k, s in enumerate(sents)]
        spans: list[Span] = []
        # The request first: statements that lead up to a repeated request belong to it, and must
        # not be read as the information of a correction.
        pending = self._rephrase(window, sents, labels, context, spans, index)
        self._objections(text, sents, labels, spans)
        category_of = {"pos": POSITIVE, "clar": ASK_CLARIFICATION, "info": AWARE_WITH_CORRECTION}
        for first, last, label in _runs(labels):
            if label in category_of:
                spans.append(make_span(text, sents[first].start, sents[last].end, category_of[label], self.name))
        spans.sort(key=lambda s: s.start)
        return spans, pending

    def _objections(self, text: str, sents: list[cues.Sentence], labels: list[str], spans: list[Span]) -> None:
        """An objection, plus the statements right after it when together they carry enough
        information about the user's situation to be a correction."""
        for first, last, label in list(_runs(labels)):
            if label != "neg":
                continue
            info = sum(len(cues.info_words(sents[m].text)) for m in range(first, last + 1))
            end = last
            while end + 1 < len(sents) and labels[end + 1] in ("info", "other"):
                end += 1
                info += len(cues.info_words(sents[end].text))
            if info >= self.config.correction_min_info:
                category = AWARE_WITH_CORRECTION
            else:
                category, end = AWARE_WITHOUT_CORRECTION, last
            spans.append(make_span(text, sents[first].start, sents[end].end, category, self.name))
            for m in range(first, end + 1):
                labels[m] = "used"

    def _label(self, s: cues.Sentence, k: int, asked_back: bool, context: "_Context") -> str:
        if k == 0 and asked_back and cues.ANSWER_TO_QUESTION.search(s):
            return "skip"
        question = s.is_question
        if not question and cues.SELF_FIX.search(s):
            return "skip"
        if cues.SARCASM.search(s):
            return "neg"
        if cues.NEGATIVE.search(s) and not cues.NEGATIVE_VETO.search(s):
            return "neg"
        if cues.POSITIVE.search(s) and not cues.POSITIVE_VETO.search(s):
            return "pos"
        if (question or cues.CLARIFY_STATEMENT.search(s)) and self._clarifies(s, context):
            return "clar"
        if not question and cues.REPHRASE_MARKER.search(s):
            return "marker"
        if question or cues.REQUEST.search(s):
            return "req"
        if (cues.CONSTRAINT.search(s) and cues.SELF_REFERENCE.search(s)
                and len(cues.info_words(s.text)) >= self.config.statement_min_info):
            return "info"
        return "other"

    def _clarifies(self, s: cues.Sentence, context: "_Context") -> bool:
        if cues.CLARIFY_DEICTIC.search(s):
            return True
        m = cues.CLARIFY_OBJECT.search(s)
        if m is None:
            return False
        thing = next(g for g in m.groups() if g is not None)
        stems = {cues.stem(w) for w in cues.info_words(thing)} - cues.POINTER_WORDS
        if not stems:
            return False
        return len(stems & context.answer_only) / len(stems) >= self.config.clarify_min_overlap

    def _rephrase(self, window: Window, sents: list[cues.Sentence], labels: list[str], context: "_Context",
                  spans: list[Span], index: int) -> _Deferred | None:
        """The last request, with the marker and statements that lead up to it, checked against the
        previous user message. Reserves its sentences unless it is clearly not a rephrase."""
        if not window.previous_user or "req" not in labels:
            return None
        last = max(k for k, label in enumerate(labels) if label == "req")
        first = last
        while first > 0 and labels[first - 1] in ("req", "marker", "info", "other"):
            first -= 1
        lexical = 0.0
        if any(cues.REPHRASE_MARKER.search(sents[m]) for m in range(first, last + 1)):
            decision = "yes"
        elif cues.NEW_REQUEST.search(sents[first]):
            decision = "no"
        else:
            decision, lexical = self._rephrase_decision(window.user[sents[first].start:sents[last].end], context)
        if decision == "no":
            return None
        for m in range(first, last + 1):
            labels[m] = "used"
        start, end = sents[first].start, sents[last].end
        if decision == "yes":
            spans.append(make_span(window.user, start, end, REPEAT_REPHRASE, self.name))
            return None
        return _Deferred(index, start, end, window.user[start:end], window.previous_user, lexical)

    def _rephrase_decision(self, block: str, context: "_Context") -> tuple[str, float]:
        """yes | no | defer (to the embedding model), and the lexical overlap it was based on."""
        stems = cues.content_stems(block)
        previous = context.previous
        if not stems or not previous:
            return "no", 0.0
        cfg = self.config
        if len(stems & context.answer_only) / len(stems) > cfg.rephrase_max_answer_overlap:
            return "no", 0.0  # builds on the answer: a follow-up
        lexical = len(stems & previous) / len(stems)
        if lexical >= cfg.rephrase_lexical_high:
            return "yes", lexical
        if lexical < cfg.rephrase_lexical_low:
            return "no", lexical
        return "defer", lexical


class _Context:
    """Word sets of the answer and the previous request, computed only if a cue needs them."""

    def __init__(self, window: Window):
        self._window = window
        self._previous: set[str] | None = None
        self._answer_only: set[str] | None = None

    @property
    def previous(self) -> set[str]:
        if self._previous is None:
            self._previous = cues.content_stems(self._window.previous_user or "")
        return self._previous

    @property
    def answer_only(self) -> set[str]:
        """Content words of the answer that the previous request did not already contain."""
        if self._answer_only is None:
            self._answer_only = cues.content_stems(self._window.assistant) - self.previous
        return self._answer_only


def _runs(labels: list[str]):
    """(first, last, label) for each maximal run of equal labels."""
    k = 0
    while k < len(labels):
        j = k
        while j + 1 < len(labels) and labels[j + 1] == labels[k]:
            j += 1
        yield k, j, labels[k]
        k = j + 1
