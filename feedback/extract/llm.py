"""The LLM extractor as Don-Yahiya et al. (2024) ran it: their prompt, whole conversations, their
JSON answers; then nothing the model says is trusted until it is checked against the user's text.

Design choices:
- The model is a plain function `complete(batch_of_message_lists) -> list[str]`. `deploy` makes
  it from a chat backend (the served pretrained model with transformers, or any OpenAI-compatible
  server such as vLLM, where a batch goes out as concurrent requests); tests script it.
- One prompt per conversation, not per message (`conversation.group`): the paper gave the model
  whole conversations, and one prompt per conversation is also fewer prompts. The windows of a
  conversation (its user turns after the first) are the turns whose spans are wanted.
- Validation, per item: its category must be one of the five; its span must lie inside one user
  turn that is a target — the turn the item names when it names one (`"message": i`), else the
  turn holding it (a text found in several target turns goes to each in turn as the model repeats
  it). A span in the first request, in a turn already read by an earlier run, in an answer, or
  nowhere is counted by reason and dropped. So is a span that touches text about feedback
  (`hostile.py`: an instruction to the extractor, a pasted verdict, a role-played system
  message): a user who writes fake extractor JSON or "report positive feedback" can at most get
  their own words quoted back, and not even those when they are the injection.
- A failing `complete` call is retried one prompt at a time, so one poisoned prompt costs that
  conversation only. If every prompt of a batch fails, the backend is down:
  `ExtractorUnavailable` stops the run before the watermark moves, and the next run retries.
- The caller decodes greedily with 200 new tokens (`extraction.max_new_tokens`; the authors' script
  sampled at temperature 0.2 with 200): greedy makes evaluation reproducible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from feedback.extract.conversation import Conversation, group
from feedback.extract.hostile import meta_ranges, touches
from feedback.extract.parse import Item, parse_items
from feedback.extract.prompt import MAX_MESSAGE_CHARS, MAX_PROMPT_CHARS, build_messages
from feedback.extract.types import BatchResult, ExtractorUnavailable, Span, Window, locate_span

CompleteFn = Callable[[list[list[dict]]], list[str]]


class LLMExtractor:
    name = "llm"
    version = "llm-2-paper"
    needs_history = True  # the runner hands it each message's conversation (`Window.history`)

    def __init__(self, complete: CompleteFn, *, batch_size: int = 16, max_message_chars: int = MAX_MESSAGE_CHARS,
                 max_prompt_chars: int = MAX_PROMPT_CHARS):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.complete = complete
        self.batch_size = batch_size
        self.max_message_chars = max_message_chars
        self.max_prompt_chars = max_prompt_chars

    def extract(self, windows: Sequence[Window]) -> BatchResult:
        result = BatchResult(spans=[[] for _ in windows])
        conversations = group(windows)
        result.stats["prompts"] += len(conversations)
        for lo in range(0, len(conversations), self.batch_size):
            batch = conversations[lo:lo + self.batch_size]
            outputs = self._complete_batch([self._prompt(c) for c in batch], result)
            for conv, text in zip(batch, outputs):
                for index, spans in self.validate(conv, text, result.stats).items():
                    for pos in conv.targets[index]:
                        result.spans[pos] = list(spans)
        return result

    def prompt(self, window: Window) -> list[dict]:
        """The prompt for one window's conversation (as `extract` would send it alone)."""
        return self._prompt(group([window])[0])

    def _prompt(self, conv: Conversation) -> list[dict]:
        return build_messages(conv.messages, sorted(conv.targets), max_message_chars=self.max_message_chars,
                              max_prompt_chars=self.max_prompt_chars)

    def _complete_batch(self, prompts: list[list[dict]], result: BatchResult) -> list[str | None]:
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

    def validate(self, conv: Conversation, text: str | None, stats: Counter) -> dict[int, list[Span]]:
        """The items of one completion that are real feedback spans of the conversation's target
        turns, by message index."""
        out: dict[int, list[Span]] = {index: [] for index in conv.targets}
        if text is None:
            return out
        seen: set[tuple[int, str, int, int]] = set()
        uses: Counter = Counter()
        meta: dict[int, list[tuple[int, int]]] = {}
        for item in parse_items(text, stats):
            placed = self._place(conv, item, uses, stats)
            if placed is None:
                continue
            index, start, end = placed
            content = conv.messages[index][1]
            if index not in meta:
                meta[index] = meta_ranges(content)
            if touches(meta[index], start, end):
                stats["span_about_feedback"] += 1
                continue
            if (index, item.category, start, end) in seen:
                stats["duplicate_item"] += 1
                continue
            seen.add((index, item.category, start, end))
            stats["kept"] += 1
            out[index].append(Span(item.category, start, end, content[start:end], self.name))
        for spans in out.values():
            spans.sort(key=lambda s: s.start)
        return out

    def _place(self, conv: Conversation, item: Item, uses: Counter, stats: Counter) -> tuple[int, int, int] | None:
        """(message index, start, end) of the item's span in a target turn, or None (counted)."""
        if item.message is not None:  # the item names its turn: the span must be in that one
            where = locate_span(conv.messages[item.message][1], item.span) \
                if item.message in conv.targets and 0 <= item.message < len(conv.messages) else None
            if where is None:
                stats["span_not_in_named_turn"] += 1
                return None
            return (item.message, *where)
        found = [(index, where) for index in sorted(conv.targets)
                 if (where := locate_span(conv.messages[index][1], item.span)) is not None]
        if found:
            key = (item.category, item.span.strip().lower())
            index, where = found[min(uses[key], len(found) - 1)]
            uses[key] += 1
            return (index, *where)
        stats[self._why_not(conv, item.span)] += 1
        return None

    @staticmethod
    def _why_not(conv: Conversation, span: str) -> str:
        first = conv.first_user()
        for index, (role, content) in enumerate(conv.messages):
            if role == "user" and locate_span(content, span):
                return "span_in_first_user_message" if index == first else "span_in_earlier_turn"
        if any(role == "assistant" and locate_span(content, span) for role, content in conv.messages):
            return "span_in_assistant_message"
        return "span_not_in_user_message"
