"""Natural-feedback extraction: find the feedback users give without being asked.

- `FastExtractor` (cues + MiniLM for doubtful rephrases; no LLM), `LLMExtractor` (Don-Yahiya et
  al.'s prompt over whole conversations, on any completion function), `CombinedExtractor` (both,
  each span labelled with its finder); `make_extractor`.
- `run_extraction` / `ExtractionRunner`: incremental, chunked, watermarked runs over the store,
  each a `jobs` row. (What the operator screen reads of their output: `store.reports`.)
- `load_gold`, `predict`, `evaluate`: the paper's span and category precision/recall with
  bootstrap intervals, on gold files such as the shipped `feedback/data/dev_gold.jsonl`.
- `tune`: the fast extractor's thresholds, fitted on the dev split.
- `rerank`: an optional cross-encoder tier mixed into the fast extractor (`Reranker`), and its training.
- `reviews`: what operators' reviews of mined events add up to (precision by week, a gold file).
"""

from __future__ import annotations

from collections.abc import Callable

from feedback.extract.combined import CombinedExtractor
from feedback.extract.fast import FastConfig, FastExtractor
from feedback.extract.gold import SHIPPED_GOLD, GoldConversation, load_gold, predict, windows_of
from feedback.extract.llm import CompleteFn, LLMExtractor
from feedback.extract.metrics import Prediction, evaluate, span_matches
from feedback.extract.rerank import Reranker
from feedback.extract.runner import ExtractionRunner, JobResult, run_extraction
from feedback.extract.types import BatchResult, Extractor, ExtractorUnavailable, Span, Window, locate_span

EXTRACTOR_KINDS = ("fast", "llm", "both")


def make_extractor(
    kind: str,
    *,
    complete: CompleteFn | None = None,
    fast_config: FastConfig | None = None,
    embedder: Callable | None = None,
    batch_size: int = 16,
    reranker: Reranker | None = None,
) -> Extractor:
    """An extractor by kind: fast | llm | both. The LLM kinds need `complete`; `reranker` (a
    trained `rerank.Reranker`) makes the fast one the slower, more precise tier."""
    if kind not in EXTRACTOR_KINDS:
        raise ValueError(f"unknown extractor {kind!r}; choose one of {', '.join(EXTRACTOR_KINDS)}")
    fast = FastExtractor(fast_config, embedder=embedder, reranker=reranker) if kind in ("fast", "both") else None
    if kind == "fast":
        return fast
    if complete is None:
        raise ValueError(f"the {kind!r} extractor needs a completion function (a model to prompt)")
    llm = LLMExtractor(complete, batch_size=batch_size)
    return llm if kind == "llm" else CombinedExtractor(fast, llm)


__all__ = [
    "EXTRACTOR_KINDS", "SHIPPED_GOLD", "BatchResult", "CombinedExtractor", "CompleteFn", "ExtractionRunner",
    "Extractor", "ExtractorUnavailable", "FastConfig", "FastExtractor", "GoldConversation", "JobResult",
    "LLMExtractor", "Prediction", "Reranker", "Span", "Window", "evaluate", "load_gold", "locate_span", "make_extractor",
    "predict", "run_extraction", "span_matches", "windows_of",
]
