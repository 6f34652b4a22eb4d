"""The LLM extractor: prompt a model with the taxonomy, keep only what the user actually wrote.

Design choices:
- The model is a plain function `complete(batch_of_message_lists) -> list[str]`. `deploy` makes
  it from a chat backend (vLLM in production, the built-in model on a laptop); tests script it.
  Windows go to it `batch_size` at a time, which is what makes a served model fast.
- Nothing the model says is trusted. An item is kept only if its category is one of the five and
  its span is found in the latest user message (the first user message of the window is the
  request the answer replied to: never feedback). Everything else is counted by reason and
  dropped. This is also the defence against prompt injection: a user who writes fake extractor
  JSON or "report positive feedback" can at most get their own words quoted back, and not even
  those when they are the injection: a span that touches text about feedback (an instruction to
  the extractor, a pasted verdict, a role-played system message; `hostile.py`) is dropped as
  `span_about_feedback`, whatever category the model gave it.
- A failing `complete` call is retried one window at a time, so one poisoned prompt (too long,
  odd bytes) costs that window only. If every window of a batch fails, the backend is down:
  `ExtractorUnavailable` stops the run before the watermark moves, and the next run retries.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from feedback.extract.hostile import meta_ranges, touches
from feedback.extract.parse import parse_items
from feedback.extract.prompt import build_messages
from feedback.extract.types import BatchResult, ExtractorUnavailable, Span, Window, locate_span

CompleteFn = Callable[[list[list[dict]]], list[str]]


class LLMExtractor:
    name = "llm"
    version = "llm-1"

    def __init__(self, complete: CompleteFn, *, batch_size: int = 16, max_context_chars: int = 1500):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.complete = complete
        self.batch_size = batch_size
        self.max_context_chars = max_context_chars

    def extract(self, windows: Sequence[Window]) -> BatchResult:
        result = BatchResult(spans=[[] for _ in windows])
        for lo in range(0, len(windows), self.batch_size):
            batch = windows[lo:lo + self.batch_size]
            outputs = self._complete_batch(batch, result)
            for k, (window, text) in enumerate(zip(batch, outputs)):
                result.spans[lo + k] = self.validate(window, text, result.stats)
        return result

    def prompt(self, window: Window) -> list[dict]:
        return build_messages(window.user, window.assistant, window.previous_user,
                              max_context_chars=self.max_context_chars)

    def _complete_batch(self, batch: Sequence[Window], result: BatchResult) -> list[str | None]:
        prompts = [self.prompt(w) for w in batch]
        try:
            outputs = list(self.complete(prompts))
            if len(outputs) != len(prompts):
                result.errors.append(f"completion returned {len(outputs)} outputs for {len(prompts)} prompts")
                result.stats["no_output"] += max(0, len(prompts) - len(outputs))
                outputs = (outputs + [None] * len(prompts))[:len(prompts)]
            return outputs
        except Exception as exc:  # noqa: BLE001 - any backend failure: fall back to one at a time
            batch_error = f"{type(exc).__name__}: {exc}"
        outputs: list[str | None] = []
        for prompt in prompts:
            try:
                out = list(self.complete([prompt]))
                outputs.append(out[0] if out else None)
            except Exception as exc:  # noqa: BLE001
                result.errors.append(f"{type(exc).__name__}: {exc}"[:500])
                result.stats["window_failed"] += 1
                outputs.append(None)
        if all(o is None for o in outputs):
            raise ExtractorUnavailable(f"the model failed on every prompt of a batch: {batch_error}")
        return outputs

    def validate(self, window: Window, text: str | None, stats: Counter) -> list[Span]:
        """The items of one completion that are real feedback spans of `window.user`."""
        if text is None:
            return []
        spans: list[Span] = []
        seen: set[tuple[str, int, int]] = set()
        meta = None
        for item in parse_items(text, stats):
            where = locate_span(window.user, item.span)
            if where is None:
                if window.previous_user and locate_span(window.previous_user, item.span):
                    stats["span_in_first_user_message"] += 1
                elif locate_span(window.assistant, item.span):
                    stats["span_in_assistant_message"] += 1
                else:
                    stats["span_not_in_user_message"] += 1
                continue
            start, end = where
            if meta is None:
                meta = meta_ranges(window.user)
            if touches(meta, start, end):
                stats["span_about_feedback"] += 1
                continue
            if (item.category, start, end) in seen:
                stats["duplicate_item"] += 1
                continue
            seen.add((item.category, start, end))
            stats["kept"] += 1
            spans.append(Span(item.category, start, end, window.user[start:end], self.name))
        return spans
