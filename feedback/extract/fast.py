"""The fast extractor: no LLM, thousands of conversations a second on one CPU core.

How a window is read:
1. The user turn is cut into sentences (`cues.py`).
2. By default (`FastConfig.classifier`) the rules do not run: each sentence's features
   (`features.py`: its words, the cues firing in it and its neighbours, its overlap with the
   previous request and with the answer, what the answer did: asked back, dodged) go to a sentence
   classifier trained on real chats (`classifier.py`, weights in `feedback/data/fast_classifier.json`,
   rebuilt by `train_classifier.py`, which also records its dev cross-validation and test figures).
   Each sentence gets none or a category; a few settled cues veto or change a category outright
   (`features.settle`), a re-ask needs a previous request, a span takes in a neighbour the model
   gives its category with enough probability (`classifier.grow_spans`), a correction next to a
   re-ask is one correction, and adjacent sentences of the same category form one span.
3. Text about feedback (an instruction to the extractor, a pasted verdict, a role-played system
   message; `hostile.py`) is never a span, in either mode.
4. With `reranker=` (the service's default, `extraction.reranker`), a cross-encoder that reads
   each sentence with the request and the answer (`rerank.py`) is mixed into the classifier's
   probabilities before step 2's decisions: more precise on chats it was not fitted to, and a
   hundred times slower. This class takes it as an argument; the shipped one is packed in
   `feedback/data/reranker`.

The rules on their own (`FastConfig.rules_only()`, no classifier):
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

The classifier path does not call the embedding model: on the real dev split, the MiniLM
similarity between a doubtful request and the previous one separates re-asks from follow-ups
hardly better than chance (AUC 0.55: in real chats a follow-up stays on the topic of the
request), and as classifier features (similarity to the previous request and to the answer) it
moved cross-validated span F1 by at most 0.006 at the thresholds in use (tried on an earlier
feature set), while one embedded window costs as much as a hundred or more classified ones.

Every rules threshold is in `FastConfig`, tuned on the dev split by `tune.py`; the values in use
and the score they got are in `feedback/data/fast_thresholds.json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from feedback.extract import cues
from feedback.extract.classifier import MODEL_PATH, SentenceClassifier, grow_spans, runs, softmax
from feedback.extract.features import TurnContext, features, join_adjacent, sentence_features, settle, settles
from feedback.extract.hostile import meta_ranges, touches
from feedback.extract.rerank import Reranker, pair
from feedback.extract.types import BatchResult, Span, Window, make_span
from store.taxonomy import (
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
    # Decide with the sentence classifier (`classifier.py`, trained on real chats) over the rules'
    # reading; False: the rules alone decide, with the embedding model for doubtful rephrases.
    classifier: bool = True

    def rules_only(self) -> "FastConfig":
        return replace(self, classifier=False)

    @classmethod
    def tuned(cls, path: Path = TUNED_PATH) -> "FastConfig":
        """The thresholds chosen by `tune.py` on the dev split (defaults if the file is missing)."""
        if not path.is_file():
            return cls()
        values = json.loads(path.read_text())["config"]
        # The file holds the rules' thresholds; whether the classifier decides is not tuned there.
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values and f.name != "classifier"})

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


@dataclass
class Reading:
    sents: list[cues.Sentence]
    labels: list[str]  # each sentence's cue label: pos neg clar marker req info skip other
    spans: list[Span]  # what the rules decide
    pending: _Deferred | None  # a request whose rephrase status the rules leave to the embedding


class FastExtractor:
    name = "fast"

    def __init__(self, config: FastConfig | None = None, *, embedder: Embedder | None = None,
                 use_embeddings: bool = True, model: SentenceClassifier | Path | None = None,
                 reranker: Reranker | None = None):
        self.config = config or FastConfig.tuned()
        self.use_embeddings = use_embeddings
        self._embedder = embedder
        self.model: SentenceClassifier | None = None
        if self.config.classifier:
            self.model = model if isinstance(model, SentenceClassifier) else _load_model(model or MODEL_PATH)
        elif reranker is not None:
            raise ValueError("the reranker mixes with the sentence classifier; the rules-only reading has none")
        self.reranker = reranker  # the slower cross-encoder tier (`rerank.py`), mixed into the classifier
        # Stored with every event: which reading (and which trained models) found it.
        self.version = f"fast-2+{self.model.meta.get('version', 'custom')}" if self.model else "fast-1"
        if reranker is not None:
            self.version += f"+{reranker.version}"

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from feedback.extract.embed import MiniLMEmbedder

            self._embedder = MiniLMEmbedder()
        return self._embedder

    # ---- batch entry point

    def extract(self, windows: Sequence[Window]) -> BatchResult:
        result = BatchResult(spans=[[] for _ in windows])
        if self.model is not None:
            self._classify(windows, result)
        else:
            deferred: list[_Deferred] = []
            for i, window in enumerate(windows):
                reading = self.reading(window, i, self.sentences(window.user, result.stats))
                meta = meta_ranges(window.user)
                if meta:  # a span of the rules may run across a sentence left out between two kept ones
                    reading.spans = [s for s in reading.spans if not touches(meta, s.start, s.end)]
                    if reading.pending is not None and touches(meta, reading.pending.start, reading.pending.end):
                        reading.pending = None
                result.spans[i] = reading.spans
                if reading.pending is not None:
                    deferred.append(reading.pending)
            if deferred:
                self._resolve(deferred, windows, result)
        for spans in result.spans:
            for s in spans:
                result.stats[f"found_{s.category}"] += 1
        return result

    @staticmethod
    def sentences(text: str, stats=None) -> list[cues.Sentence]:
        """The turn's sentences, without those inside text about feedback (`hostile.py`): an
        injected instruction or a pasted verdict is not part of what the user said to the answer,
        so it can neither be a span nor colour how the rest is read."""
        sents = cues.sentences(text)
        meta = meta_ranges(text)
        if meta:
            kept = [s for s in sents if not touches(meta, s.start, s.end)]
            if stats is not None:
                stats["sentences_about_feedback"] += len(sents) - len(kept)
            return kept
        return sents

    def featurize(self, window: Window, index: int = 0, stats=None) -> tuple[list[cues.Sentence],
                                                                            list[list[tuple[str, float]]]]:
        """The window's sentences (text about feedback left out) and each one's full feature list."""
        sents = self.sentences(window.user, stats)
        if not sents:
            return sents, []
        return sents, features(TurnContext(window.assistant, window.previous_user), sents)

    def _classify(self, windows: Sequence[Window], result: BatchResult) -> None:
        """Every sentence of the batch scored in one sparse product (the features a turn's sentences
        share in another, added to each), then vetoes, joins and spans."""
        per_window, own, shared, turn_of = [], [], [], []
        for i, window in enumerate(windows):
            sents = self.sentences(window.user, result.stats)
            if sents:
                turn, mine = sentence_features(TurnContext(window.assistant, window.previous_user), sents)
                shared.append(turn)
                turn_of += [len(shared) - 1] * len(sents)
            else:
                mine = []
            per_window.append((sents, len(own)))
            own += mine
        if not own:
            return
        scores = self.model.scores(own) + self.model.scores(shared, intercept=False)[turn_of]
        none_bias, grow = self.model.none_bias, self.model.grow
        if self.reranker is not None:  # the same sentences, in the same order as `own`
            scores = self.reranker.mix(scores, [pair(w, s) for w, (sents, _) in zip(windows, per_window) for s in sents])
            none_bias, grow = self.reranker.settings.none_bias, self.reranker.settings.grow
            result.stats["reranked_sentences"] += len(own)
        labels = self.model.decide(scores, none_bias)
        labels = [settle(label, f) if label != "none" else label for label, f in zip(labels, own)]
        probabilities = softmax(scores) if grow > 0 else None
        for i, (window, (sents, offset)) in enumerate(zip(windows, per_window)):
            if not sents:
                continue
            mine = labels[offset:offset + len(sents)]
            if not window.previous_user:  # nothing was asked before: nothing can be asked again
                mine = ["none" if label == REPEAT_REPHRASE else label for label in mine]
            if probabilities is not None:
                mine = grow_spans(mine, probabilities[offset:offset + len(sents)], self.model.classes,
                                  grow, settles(own[offset:offset + len(sents)]))
            mine = join_adjacent(mine)
            spans = []
            for first, last, category in runs(mine):
                # Sentences left out as text about feedback may sit between two kept ones: a span
                # never runs across them.
                while first <= last:
                    end = first
                    while end < last and _adjacent(window.user, sents[end], sents[end + 1]):
                        end += 1
                    spans.append(make_span(window.user, sents[first].start, sents[end].end, category, self.name))
                    first = end + 1
            result.spans[i] = spans

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
        reading = self.reading(window, index)
        return reading.spans, reading.pending

    def reading(self, window: Window, index: int = 0, sents: list[cues.Sentence] | None = None,
                context: "_Context | None" = None) -> "Reading":
        """The rules' reading of a window: its sentences, each sentence's cue label (before the
        rules group them), the spans they decide and the request left for the embedding model."""
        text = window.user
        if sents is None:
            sents = cues.sentences(text)
        if not sents:
            return Reading(sents, [], [], None)
        context = context or _Context(window)
        asked_back = window.assistant.rstrip().endswith("?")
        labels = [self._label(s, k, asked_back, context) for k, s in enumerate(sents)]
        original = list(labels)
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
        return Reading(sents, original, spans, pending)

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

    def __init__(self, window: Window, previous: set[str] | None = None, answer_only: set[str] | None = None):
        self._window = window
        self._previous = previous
        self._answer_only = answer_only

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


def _adjacent(text: str, a: cues.Sentence, b: cues.Sentence) -> bool:
    """Nothing but whitespace and punctuation between two sentences (none was left out)."""
    return not any(ch.isalnum() for ch in text[a.end:b.start])


_MODELS: dict[Path, SentenceClassifier] = {}


def _load_model(path: Path) -> SentenceClassifier:
    """The shipped classifier, read once per process."""
    path = Path(path).resolve()
    if path not in _MODELS:
        _MODELS[path] = SentenceClassifier.load(path)
    return _MODELS[path]


def _runs(labels: list[str]):
    """(first, last, label) for each maximal run of equal labels."""
    k = 0
    while k < len(labels):
        j = k
        while j + 1 < len(labels) and labels[j + 1] == labels[k]:
            j += 1
        yield k, j, labels[k]
        k = j + 1
