"""The generation backend interface: stream one conversation, complete a batch, swap adapters.

Design choices:
- One small interface (`Backend`) with three implementations: local transformers, any
  OpenAI-compatible server (vLLM in production), and the built-in model (transformers on the
  project's own tiny model). Callers — the chat turn, the extractor, evaluators — never see
  which one they have.
- A streamed answer is a `Generation`: iterate it for text deltas; once exhausted it reports
  token counts, finish reason and latencies. `cancel()` may be called from any thread (stop
  button, client disconnect) and the generation stops at the next token. Abandoning the
  iterator cancels too, so a dropped HTTP stream never leaves the model running.
- Failures surface as `BackendError` (or `BackendUnavailable` when the model server cannot be
  reached) whose message is written for the person using the app, not as library tracebacks.
- Steering is a keyword (`steering`, a `store.attributes.SteeringMode`) plus the `Attributes`;
  how a backend renders them lives in `chat.steering`, so every backend does it the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

from store.attributes import Attributes, SteeringMode

FINISH_REASONS = ("stop", "length", "cancelled", "error")

# `stream(..., adapter=NO_ADAPTER)` asks for the base model even while an adapter is active
# (evaluation compares both); `adapter=None` means "the active one".
NO_ADAPTER = ""


class BackendError(RuntimeError):
    """Generation failed; the message can be shown to the user as is."""


class BackendUnavailable(BackendError):
    """The model (server) cannot be reached or loaded; the message says where and what to do."""


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 200
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if not 0.0 <= float(self.temperature) <= 2.0:
            raise ValueError(f"temperature must be between 0 and 2, got {self.temperature!r}")
        if not 0.0 < float(self.top_p) <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def as_dict(self) -> dict:
        return asdict(self)


class Generation:
    """One streamed answer. Iterate for text deltas (once); then read the counters.

    Subclasses implement `_deltas()`; this class does the bookkeeping that must be identical
    across backends (text, timing, cancellation, finish reason)."""

    def __init__(self, *, model: str, adapter: str | None) -> None:
        self.model = model
        self.adapter = adapter  # pinned when the request started
        self.text = ""
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.finish_reason: str | None = None
        self.error: BackendError | None = None
        self.first_token_ms: float | None = None
        self.latency_ms: float | None = None
        self._cancel = threading.Event()
        self._started = time.perf_counter()
        self._iterated = False

    # ---- what callers use

    def cancel(self) -> None:
        """Stop generating at the next token; safe from any thread, idempotent."""
        self._cancel.set()
        self._on_cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def __iter__(self) -> Iterator[str]:
        if self._iterated:
            raise RuntimeError("a Generation can be iterated only once")
        self._iterated = True
        inner = self._deltas()
        try:
            for delta in inner:
                if not delta:
                    continue
                if self.first_token_ms is None:
                    self.first_token_ms = (time.perf_counter() - self._started) * 1000
                self.text += delta
                yield delta
        except (GeneratorExit, KeyboardInterrupt, SystemExit):
            # The consumer walked away (closed stream, dropped client, Ctrl-C): stop the model.
            self.cancel()
            raise
        except BackendError as exc:
            self.error = exc
            self.finish_reason = "error"
            raise
        except Exception as exc:  # a library failure mid-stream: keep the cause, say it plainly
            self.error = BackendError(f"The model failed while answering: {exc}")
            self.finish_reason = "error"
            raise self.error from exc
        finally:
            inner.close()  # lets the backend join its worker and fill in the counters
            self._finish()

    def read(self) -> str:
        """Consume the whole stream and return the text."""
        for _ in self:
            pass
        return self.text

    # ---- for subclasses

    def _deltas(self) -> Iterator[str]:
        raise NotImplementedError

    def _on_cancel(self) -> None:
        """Hook: interrupt a blocking read (e.g. close an HTTP stream)."""

    def _natural_finish(self) -> str:
        """The finish reason when the stream ended without cancellation or error."""
        return "stop"

    def _finish(self) -> None:
        if self.latency_ms is None:
            self.latency_ms = (time.perf_counter() - self._started) * 1000
        if self.finish_reason is None:
            self.finish_reason = "cancelled" if self.cancelled else self._natural_finish()


@runtime_checkable
class Backend(Protocol):
    """What the chat turn, the extractor and the evaluators need from a model."""

    kind: str  # builtin | transformers | openai
    model: str  # the model's name as stored with every answer

    @property
    def active_adapter(self) -> str | None: ...

    def stream(
        self,
        messages: list[dict],
        *,
        attributes: Attributes | None,
        steering: SteeringMode,
        params: SamplingParams,
        adapter: str | None = None,
    ) -> Generation: ...

    def complete(
        self,
        batch: list[list[dict]],
        *,
        attributes: Attributes | None,
        steering: SteeringMode,
        params: SamplingParams,
    ) -> list[str]: ...

    def set_adapter(self, name: str | None, path: str | None = None) -> None: ...

    @property
    def adapters(self) -> dict[str, str]: ...  # loaded adapter names → paths

    def unload_adapter(self, name: str) -> None: ...  # free a retired adapter (not the active one)

    def health(self) -> dict: ...

    def close(self) -> None: ...
