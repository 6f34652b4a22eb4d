"""Local generation with Hugging Face transformers (also serves the built-in model).

Design choices:
- Streaming runs `model.generate` in a worker thread with a token-level streamer; a
  `StoppingCriteria` watching the generation's cancel event stops it at the next token, so
  the UI's stop button and a dropped client free the model promptly.
- Adapters go through PEFT's own `PeftModel` (load_adapter / set_adapter / disable_adapter),
  not transformers' adapter mixin, whose switching calls demand a newer PEFT than is released.
- One model object serves every request, and PEFT's active adapter is model-wide state, so
  `generate` calls are serialised by a lock and each request *pins* its adapter when it is
  submitted: the worker switches to that adapter under the lock. `set_adapter` loads a new
  adapter under the same lock (never while a forward pass runs) and only changes what later
  requests pin; a request already submitted finishes on the adapter it started with. Each load
  gets a fresh internal PEFT name, so reloading a name with new weights cannot change a pinned
  request; superseded adapters are deleted once nothing pins them.
- A prompt longer than the model's context drops its oldest turns (system prompt kept), then,
  if one message alone is too long, keeps its end: the answer should address what was said last.
- Sampling draws from `transformers`' own distribution (temperature, top-k 50, top-p) without
  sorting the vocabulary (`evaluator.sampling`): the same answers' distribution; on a 2-core CPU
  a third less time per answer in batches of 32, no measurable change for one streamed answer.
- `complete` pads left and runs one `generate` per (micro-)batch for the extractor/evaluators.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from chat.backends.base import NO_ADAPTER, BackendError, BackendUnavailable, Generation, SamplingParams
from chat.steering import render
from evaluator.sampling import generate_kwargs
from store.attributes import Attributes, SteeringMode


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailable(
            "The backend is set to device 'cuda' but no CUDA GPU is visible. "
            "Set backend.device to 'cpu' or 'auto'."
        )
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise BackendUnavailable(f"Unknown device {device!r}; use auto, cpu or cuda.")
    return device


class _CancelCriteria(StoppingCriteria):
    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


class _TokenStreamer(BaseStreamer):
    """Token-by-token text deltas through a queue (vLLM streams per token too).

    Byte-level BPE can split one character over several tokens, so a delta that ends in an
    incomplete character (decoded as U+FFFD) is held back until the next token completes it."""

    _END = object()

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.queue: queue.Queue = queue.Queue()
        self.ids: list[int] = []
        self._emitted = 0
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first passes the prompt
            self._prompt_seen = True
            return
        self.ids.extend(value.reshape(-1).tolist())
        self._emit(final=False)

    def end(self) -> None:
        self._emit(final=True)
        self.finish()

    def finish(self) -> None:
        self.queue.put(self._END)

    def _emit(self, final: bool) -> None:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not final and text.endswith("\ufffd"):
            return
        if len(text) > self._emitted:
            self.queue.put(text[self._emitted:])
            self._emitted = len(text)

    def __iter__(self) -> Iterator[str]:
        while (item := self.queue.get()) is not self._END:
            yield item


class TransformersBackend:
    """A causal LM from a local directory (or Hub id, where the network allows) on CPU or CUDA."""

    def __init__(
        self,
        model: str | Path,
        *,
        device: str = "auto",
        adapter: str | Path | None = None,
        adapter_name: str | None = None,
        kind: str = "transformers",
        name: str | None = None,
        max_batch_size: int = 16,
        local_files_only: bool = False,
    ) -> None:
        self.kind = kind
        self.model = name or str(model)
        self.device = resolve_device(device)
        self.max_batch_size = max_batch_size
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(model), local_files_only=local_files_only)
            dtype = torch.float32 if self.device == "cpu" else "auto"
            self._model = AutoModelForCausalLM.from_pretrained(
                str(model), dtype=dtype, local_files_only=local_files_only
            ).to(self.device)
        except (OSError, ValueError) as exc:
            raise BackendUnavailable(
                f"Cannot load the model {model}: {exc}. "
                "Give backend.model a local Hugging Face model directory (or an id that is in the local cache), "
                "or use backend.kind = 'builtin'."
            ) from exc
        self._model.eval()
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendUnavailable(f"The model {model} has no chat template; use a chat/instruct model.")
        self._eos_ids = self._eos_token_ids()
        self._max_context = int(
            getattr(self._model.config, "max_position_embeddings", None) or self.tokenizer.model_max_length or 2048
        )
        self._peft: PeftModel | None = None  # wraps _model once the first adapter is loaded
        self._lock = threading.Lock()  # one generate (or adapter load) at a time
        self._state_lock = threading.Lock()  # guards the adapter tables below
        self._adapters: dict[str, tuple[str, str]] = {}  # name -> (path, internal PEFT name)
        self._active: str | None = None
        self._pins: Counter[str] = Counter()  # internal name -> requests that pinned it
        self._counter = itertools.count()
        if adapter:
            self.set_adapter(adapter_name or Path(adapter).name, str(adapter))

    # ---- adapters

    @property
    def active_adapter(self) -> str | None:
        return self._active

    @property
    def adapters(self) -> dict[str, str]:
        """Loaded adapter names and their paths."""
        with self._state_lock:
            return {name: path for name, (path, _) in self._adapters.items()}

    def unload_adapter(self, name: str) -> None:
        """Forget a retired adapter; its weights go once no request pins them. Not the active one."""
        with self._state_lock:
            if name == self._active:
                raise BackendError(f"Adapter {name!r} is serving new requests; switch to another one first.")
            self._adapters.pop(name, None)
        self._collect_garbage()

    def set_adapter(self, name: str | None, path: str | None = None) -> None:
        """Make `name` the adapter later requests use (None: the base model). With `path`, load
        it first (again, if `name` was loaded from another path). Requests already submitted keep
        the adapter they pinned."""
        if name is None or name == NO_ADAPTER:
            with self._state_lock:
                self._active = None
            self._collect_garbage()
            return
        if path is not None:
            self.load_adapter(name, path)
        with self._state_lock:
            if name not in self._adapters:
                raise BackendError(f"No adapter named {name!r} is loaded; pass its path to load it.")
            self._active = name
        self._collect_garbage()

    def load_adapter(self, name: str, path: str) -> None:
        """Load `name` beside the others without making it active: a request can pin it by name
        (a canary arm) while new requests keep the active one. Idempotent for the same path."""
        with self._state_lock:
            loaded = self._adapters.get(name)
        if loaded is not None and loaded[0] == str(path):
            return
        if not (Path(path) / "adapter_config.json").is_file():  # adapters are local; never ask a hub
            raise BackendError(
                f"Cannot load the adapter {name!r} from {path}: no adapter_config.json there. "
                "Give the directory a PEFT adapter was saved to."
            )
        internal = f"adapter_{next(self._counter)}"
        with self._lock:  # never mutate the model during a forward pass
            try:
                if self._peft is None:
                    self._peft = PeftModel.from_pretrained(self._model, str(path), adapter_name=internal,
                                                           is_trainable=False)
                else:
                    self._peft.load_adapter(str(path), adapter_name=internal, is_trainable=False)
            except (OSError, ValueError, KeyError, RuntimeError, TypeError) as exc:
                raise BackendError(
                    f"Cannot load the adapter {name!r} from {path}: {exc}. "
                    "Check that the directory holds a PEFT adapter trained for this base model."
                ) from exc
        with self._state_lock:
            self._adapters[name] = (str(path), internal)

    def _pin(self, adapter: str | None) -> tuple[str | None, str | None]:
        """(public name, internal PEFT name) for a request, counted so the swap cannot delete it."""
        with self._state_lock:
            name = self._active if adapter is None else (adapter or None)
            if name is None:
                return None, None
            if name not in self._adapters:
                raise BackendError(f"No adapter named {name!r} is loaded.")
            internal = self._adapters[name][1]
            self._pins[internal] += 1
            return name, internal

    def _unpin(self, internal: str | None) -> None:
        if internal is None:
            return
        with self._state_lock:
            self._pins[internal] -= 1
        self._collect_garbage()

    def _collect_garbage(self) -> None:
        """Delete PEFT adapters that were superseded and that no request pins any more."""
        with self._state_lock:
            current = {internal for _, internal in self._adapters.values()}
            loaded = set(self._peft.peft_config) if self._peft is not None else set()
            stale = [a for a in loaded - current if self._pins[a] <= 0]
        if stale and self._lock.acquire(blocking=False):  # busy now: try again after the next request
            try:
                with warnings.catch_warnings():  # "was active, now deleted": we pick per request anyway
                    warnings.simplefilter("ignore", UserWarning)
                    for internal in stale:
                        self._peft.delete_adapter(internal)
            finally:
                self._lock.release()

    def _adapter_scope(self, internal: str | None) -> contextlib.AbstractContextManager:
        """Run the next generate on this adapter (None: the base model). Lock held by the caller."""
        if self._peft is None:
            return contextlib.nullcontext()
        if internal is None:
            return self._peft.disable_adapter()
        self._peft.set_adapter(internal)
        return contextlib.nullcontext()

    @property
    def _generator(self):
        """The module to call `generate` on: the PEFT wrapper once an adapter was loaded."""
        return self._peft if self._peft is not None else self._model

    # ---- prompts

    def _eos_token_ids(self) -> set[int]:
        eos = getattr(self._model.generation_config, "eos_token_id", None)
        ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def _render(self, messages: list[dict], template_attributes: str | None) -> list[int]:
        kwargs = {"attributes": template_attributes} if template_attributes else {}
        try:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
        except Exception as exc:  # jinja errors, e.g. a role the template refuses
            raise BackendError(f"The model's chat template cannot render this conversation: {exc}") from exc
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode(
        self, messages: list[dict], *, attributes: Attributes | None, steering: SteeringMode, max_new_tokens: int
    ) -> tuple[list[int], int]:
        """Prompt token ids that fit the context, and the number of new tokens that still fit."""
        if not messages:
            raise BackendError("Nothing to answer: the conversation is empty.")
        msgs, template_attributes = render(messages, attributes, steering)
        budget = max(self._max_context - max_new_tokens, self._max_context // 4)
        ids = self._render(msgs, template_attributes)
        system = msgs[:1] if msgs[0].get("role") == "system" else []
        rest = msgs[len(system):]
        while len(ids) > budget and len(rest) > 1:  # drop the oldest turns first
            rest = rest[1:]
            ids = self._render(system + rest, template_attributes)
        if len(ids) > budget:
            ids = ids[-budget:]
        return ids, max(1, min(max_new_tokens, self._max_context - len(ids)))

    def _generate_kwargs(self, params: SamplingParams, max_new_tokens: int) -> dict:
        kwargs: dict = {
            "max_new_tokens": max_new_tokens,
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        return {**kwargs, **generate_kwargs(params.temperature, params.top_p)}

    def _seed(self, seed: int | None) -> None:
        if seed is not None:  # global RNG, but only one generate runs at a time (the lock)
            torch.manual_seed(seed)

    # ---- the interface

    def stream(
        self,
        messages: list[dict],
        *,
        attributes: Attributes | None,
        steering: SteeringMode,
        params: SamplingParams,
        adapter: str | None = None,
    ) -> Generation:
        ids, max_new = self.encode(messages, attributes=attributes, steering=steering, max_new_tokens=params.max_new_tokens)
        name, internal = self._pin(adapter)
        return _TransformersGeneration(self, ids, max_new, params, name, internal)

    def complete(
        self,
        batch: list[list[dict]],
        *,
        attributes: Attributes | None,
        steering: SteeringMode,
        params: SamplingParams,
        adapter: str | None = None,
    ) -> list[str]:
        out: list[str] = []
        for start in range(0, len(batch), self.max_batch_size):
            out += self._complete_chunk(batch[start:start + self.max_batch_size], attributes, steering, params, adapter)
        return out

    def _complete_chunk(self, chunk, attributes, steering, params, adapter) -> list[str]:
        if not chunk:
            return []
        encoded = [self.encode(m, attributes=attributes, steering=steering, max_new_tokens=params.max_new_tokens)
                   for m in chunk]
        max_new = min(n for _, n in encoded)
        width = max(len(ids) for ids, _ in encoded)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids, _ in encoded], device=self.device)
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids, _ in encoded], device=self.device)
        _, internal = self._pin(adapter)
        try:
            with self._lock, torch.inference_mode(), self._adapter_scope(internal):
                self._seed(params.seed)
                out = self._generator.generate(input_ids=input_ids, attention_mask=mask,
                                           **self._generate_kwargs(params, max_new))
        except torch.cuda.OutOfMemoryError as exc:
            raise BackendError("The GPU ran out of memory; use a smaller batch or fewer new tokens.") from exc
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"The model failed to generate: {exc}") from exc
        finally:
            self._unpin(internal)
        return [self.tokenizer.decode(row[width:], skip_special_tokens=True).strip() for row in out]

    def health(self) -> dict:
        return {
            "ok": True,
            "kind": self.kind,
            "model": self.model,
            "device": self.device,
            "adapter": self._active,
            "adapters": sorted(self.adapters),
            "busy": self._lock.locked(),
            "max_context": self._max_context,
        }

    def close(self) -> None:
        with self._lock:
            self._model = self._peft = None  # type: ignore[assignment]
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()


class _TransformersGeneration(Generation):
    """`generate` in a worker thread, text through a streamer queue."""

    def __init__(self, backend: TransformersBackend, ids: list[int], max_new_tokens: int,
                 params: SamplingParams, adapter: str | None, internal: str | None) -> None:
        super().__init__(model=backend.model, adapter=adapter)
        self._backend = backend
        self._internal = internal
        self._max_new_tokens = max_new_tokens
        self.prompt_tokens = len(ids)
        self._streamer = _TokenStreamer(backend.tokenizer)
        self._exc: BaseException | None = None
        self._running = threading.Event()
        self._worker = threading.Thread(
            target=self._work, args=(ids, params), name="generate", daemon=True
        )
        self._worker.start()

    def _work(self, ids: list[int], params: SamplingParams) -> None:
        b = self._backend
        try:
            with b._lock:
                if self.cancelled:  # cancelled while queued behind another request
                    return
                self._running.set()
                b._seed(params.seed)
                input_ids = torch.tensor([ids], device=b.device)
                with torch.inference_mode(), b._adapter_scope(self._internal):
                    b._generator.generate(
                        input_ids=input_ids,
                        attention_mask=torch.ones_like(input_ids),
                        streamer=self._streamer,
                        stopping_criteria=StoppingCriteriaList([_CancelCriteria(self._cancel)]),
                        **b._generate_kwargs(params, self._max_new_tokens),
                    )
        except BaseException as exc:  # reported to the reader thread, never lost in this one
            self._exc = exc
        finally:
            self._streamer.finish()  # unblock the reader in every case (a second end marker is harmless)
            b._unpin(self._internal)

    def _deltas(self) -> Iterator[str]:
        try:
            for text in self._streamer:
                yield text
                if self.cancelled:
                    break
            if self._exc is not None:
                exc = self._exc
                if isinstance(exc, torch.cuda.OutOfMemoryError):
                    raise BackendError("The GPU ran out of memory; try a shorter message or fewer new tokens.") from exc
                raise BackendError(f"The model failed while answering: {exc}") from exc
        finally:
            # Cancelled while generating: the worker stops within one token, so wait for its counts.
            # Cancelled while still queued: do not wait for the request ahead of it.
            if self._running.is_set() or not self.cancelled:
                self._worker.join()
            self._count()

    def _count(self) -> None:
        ids = self._streamer.ids  # every token generated, also when cancelled part-way
        self.completion_tokens = len(ids)
        self._ended_on_eos = bool(ids) and ids[-1] in self._backend._eos_ids

    def _natural_finish(self) -> str:
        if getattr(self, "_ended_on_eos", False):
            return "stop"
        return "length" if (self.completion_tokens or 0) >= self._max_new_tokens else "stop"
