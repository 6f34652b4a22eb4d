"""Any OpenAI-compatible server (vLLM in production) through the official `openai` client.

Design choices:
- Streaming chat completions with `stream_options.include_usage`, so token counts come from the
  server. Cancelling closes the HTTP stream; vLLM aborts a request whose client went away, so
  the GPU stops too.
- LoRA adapters are chosen by model name, as vLLM serves them: an active adapter means
  `model=<adapter name>`, none means the base model. A request pins the name when it starts,
  so a swap never changes a request in flight. `set_adapter(name, path)` loads an adapter the
  server does not list yet through vLLM's runtime LoRA endpoint; names must be unique per
  weights (use the release id), because vLLM will not replace an adapter under the same name.
- A restarted vLLM server has forgotten every runtime-loaded adapter. The backend remembers the
  path of each adapter it was given, and puts it back on its own: a request for a known adapter
  that the server answers with 404 loads it and is retried once, and `health()` re-loads the
  active adapter when the server no longer lists it. So the live release comes back with the
  server, without restarting the advisor.
- SteerLM attributes travel as `chat_template_kwargs`, which vLLM passes to the chat template
  (the same `attributes` kwarg the transformers backend uses).
- Timeouts (a short connect timeout, so a dead server is reported in seconds) and the client's
  own retries with backoff; every failure becomes a `BackendError`/`BackendUnavailable` naming
  the URL and what to do.
- A conversation longer than the server's context is not an error: it is sent again without its
  older half of turns until it fits (as the transformers backend drops the oldest turns), so
  the newest question is always answered; only a question too long on its own is refused.
- `complete` sends the batch as concurrent requests: the server batches them (continuous
  batching) better than any client-side grouping could.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai

from chat.backends.base import BackendError, BackendUnavailable, Generation, SamplingParams
from chat.steering import render
from store.attributes import Attributes, SteeringMode

_FINISH = {"stop": "stop", "length": "length", "abort": "cancelled"}


class OpenAICompatibleBackend:
    kind = "openai"

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "",
        api_key: str = "EMPTY",
        timeout_s: float = 60.0,
        connect_timeout_s: float = 5.0,
        max_retries: int = 2,
        max_concurrency: int = 8,
        adapter: str | None = None,
        base_model_path: str = "",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # Where the served model's weights live (vLLM's --model), when it is served under another
        # name: adapters trained on that path belong to this server.
        self.base_model_path = base_model_path
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or "EMPTY",
            timeout=httpx.Timeout(timeout_s, connect=min(connect_timeout_s, timeout_s)),
            max_retries=max_retries,
        )
        self._model = model
        self._active: str | None = None
        # name -> path of every adapter this backend was given: what to re-load into a restarted server.
        self._paths: dict[str, str] = {}
        self._lock = threading.Lock()
        self._load_lock = threading.Lock()  # one re-load at a time: concurrent 404s need only one
        if adapter:
            self.set_adapter(adapter)

    # ---- names

    @property
    def model(self) -> str:
        """The served base model's name; asked from the server when not configured."""
        if not self._model:
            with self._lock:
                if not self._model:
                    models = self._list_models()
                    bases = [m for m in models if not getattr(m, "parent", None)] or models
                    if not bases:
                        raise BackendUnavailable(f"The model server at {self.base_url} serves no model.")
                    self._model = bases[0].id
        return self._model

    @property
    def active_adapter(self) -> str | None:
        return self._active

    @property
    def adapters(self) -> dict[str, str]:
        """Adapters this backend loaded into the server (names → paths)."""
        return dict(self._paths)

    def _list_models(self) -> list:
        try:
            return list(self._client.models.list())
        except openai.APIError as exc:
            raise self._error(exc, "") from exc

    def set_adapter(self, name: str | None, path: str | None = None) -> None:
        if not name:
            self._active = None
            return
        path = str(path) if path is not None else self._paths.get(name)
        served = {m.id for m in self._list_models()}
        if name not in served:
            if path is None:
                raise BackendError(
                    f"The model server at {self.base_url} has no adapter named {name!r} "
                    f"(it serves: {', '.join(sorted(served)) or 'nothing'}). Load it first or pass its path."
                )
            self._load(name, path)
        if path is not None:
            self._paths[name] = path
        self._active = name

    def load_adapter(self, name: str, path: str) -> None:
        """Load `name` into the server without making it active: requests pin it by name (a
        canary arm), vLLM takes the adapter per request as the `model` field."""
        with self._load_lock:
            if name not in {m.id for m in self._list_models()}:
                self._load(name, str(path))
        self._paths[name] = str(path)

    def _load(self, name: str, path: str) -> None:
        """vLLM's runtime LoRA load; "already loaded" (a concurrent re-load won) counts as done."""
        try:
            self._client.post("/load_lora_adapter", cast_to=httpx.Response, body={"lora_name": name, "lora_path": path})
        except openai.APIStatusError as exc:
            if exc.status_code == 400 and name in {m.id for m in self._list_models()}:
                return
            raise BackendError(
                f"The model server at {self.base_url} could not load the adapter {name!r} from {path}: "
                f"{_detail(exc)}. The server needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True."
            ) from exc
        except openai.APIError as exc:
            raise self._error(exc, name) from exc

    def reload_adapter(self, name: str) -> bool:
        """Put a known adapter back into a server that no longer serves it (it was restarted).
        Returns False when this backend never had a path for `name` (nothing it can do)."""
        path = self._paths.get(name)
        if path is None:
            return False
        with self._load_lock:
            if name not in {m.id for m in self._list_models()}:
                self._load(name, path)
        return True

    def unload_adapter(self, name: str) -> None:
        """Free an adapter in the server (retirement). An absent adapter is not an error."""
        self._paths.pop(name, None)
        try:
            self._client.post("/unload_lora_adapter", cast_to=httpx.Response, body={"lora_name": name})
        except openai.NotFoundError:
            pass
        except openai.APIStatusError as exc:
            if exc.status_code != 400:  # vLLM answers 400 for an adapter it does not have
                raise BackendError(f"The model server at {self.base_url} could not unload {name!r}: {_detail(exc)}") from exc
        except openai.APIError as exc:
            raise self._error(exc, name) from exc

    def _create(self, request: dict, **kwargs):
        """`chat.completions.create`; a conversation that outgrew the server's context is sent
        again without its older half of turns, until it fits or only the new question is left."""
        while True:
            try:
                return self._create_reloading(request, **kwargs)
            except openai.BadRequestError as exc:
                shorter = without_older_turns(request["messages"]) if _context_exceeded(exc) else None
                if shorter is None:
                    raise self._error(exc, request["model"]) from exc
                request = {**request, "messages": shorter}

    def _create_reloading(self, request: dict, **kwargs):
        """`chat.completions.create`, re-loading a forgotten adapter once (the server was restarted).
        A 400 is left to the caller, which may trim the conversation."""
        for reloaded in (False, True):
            try:
                return self._client.chat.completions.create(**request, **kwargs)
            except openai.BadRequestError:
                raise
            except openai.NotFoundError as exc:
                if reloaded or not self.reload_adapter(request["model"]):
                    raise self._error(exc, request["model"]) from exc
            except openai.APIError as exc:
                raise self._error(exc, request["model"]) from exc
        raise AssertionError("unreachable: the second attempt returns or raises")

    # ---- errors

    def _error(self, exc: Exception, model: str) -> BackendError:
        url = self.base_url
        if isinstance(exc, openai.APITimeoutError):
            return BackendUnavailable(
                f"The model server at {url} did not answer within {self.timeout_s:g} s. It may be starting "
                "or overloaded: try again in a moment, or raise backend.timeout_s."
            )
        if isinstance(exc, openai.APIConnectionError):
            return BackendUnavailable(
                f"Cannot reach the model server at {url}. Start it (for vLLM: `advisor serve-model`, "
                "or your own `vllm serve` command) or point backend.base_url at a running one, then try again."
            )
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            return BackendUnavailable(f"The model server at {url} rejected the API key; set backend.api_key.")
        if isinstance(exc, openai.NotFoundError):
            return BackendError(
                f"The model server at {url} has no model named {model!r}. Check backend.model, "
                "or that the adapter is loaded."
            )
        if isinstance(exc, openai.APIStatusError):
            if exc.status_code >= 500:
                return BackendUnavailable(f"The model server at {url} failed ({exc.status_code}): {_detail(exc)}")
            return BackendError(f"The model server at {url} refused the request: {_detail(exc)}")
        return BackendError(f"The model server at {url} failed: {exc}")

    # ---- requests

    def _request(self, messages: list[dict], attributes: Attributes | None, steering: SteeringMode,
                 params: SamplingParams, model: str) -> dict:
        if not messages:
            raise BackendError("Nothing to answer: the conversation is empty.")
        msgs, template_attributes = render(messages, attributes, steering)
        request = {
            "model": model,
            # Only the standard keys: the attribute string of past turns is SteerLM training format,
            # which the server's template receives through the kwarg below for the new turn only.
            "messages": [{"role": m["role"], "content": m["content"]} for m in msgs],
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.seed is not None:
            request["seed"] = params.seed
        if template_attributes:
            request["extra_body"] = {"chat_template_kwargs": {"attributes": template_attributes}}
        return request

    def _pinned_model(self, adapter: str | None) -> tuple[str, str | None]:
        name = self._active if adapter is None else (adapter or None)
        return (name or self.model), name

    def stream(
        self,
        messages: list[dict],
        *,
        attributes: Attributes | None,
        steering: SteeringMode,
        params: SamplingParams,
        adapter: str | None = None,
    ) -> Generation:
        model, pinned = self._pinned_model(adapter)
        request = self._request(messages, attributes, steering, params, model)
        return _OpenAIGeneration(self, request, pinned)

    def complete(
        self,
        batch: list[list[dict]],
        *,
        attributes: Attributes | None,
        steering: SteeringMode,
        params: SamplingParams,
        adapter: str | None = None,
    ) -> list[str]:
        model, _ = self._pinned_model(adapter)
        requests = [self._request(m, attributes, steering, params, model) for m in batch]

        def one(request: dict) -> str:
            return (self._create(request).choices[0].message.content or "").strip()

        if len(requests) <= 1:
            return [one(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests))) as pool:
            return list(pool.map(one, requests))

    def health(self) -> dict:
        """Reachability, what the server serves (`adapters`: loaded LoRA name -> path), and the
        active adapter — re-loaded first if a restarted server forgot it (`reloaded`)."""
        down = {"ok": False, "kind": self.kind, "base_url": self.base_url, "adapter": self._active, "adapters": {}}
        try:
            listed = self._list_models()
        except BackendError as exc:
            return {**down, "error": str(exc)}
        extra: dict = {}
        active = self._active
        if active and active not in {m.id for m in listed}:
            try:
                if self.reload_adapter(active):
                    listed, extra["reloaded"] = self._list_models(), active
            except BackendError as exc:  # the server is up but the adapter would not load: say so
                extra["error"] = str(exc)
        adapters = {m.id: getattr(m, "root", None) or "" for m in listed if getattr(m, "parent", None)}
        return {"ok": "error" not in extra, "kind": self.kind, "base_url": self.base_url, "model": self._model or None,
                "adapter": active, "models": [m.id for m in listed], "adapters": adapters, **extra}

    def close(self) -> None:
        self._client.close()


def _context_exceeded(exc: openai.BadRequestError) -> bool:
    """vLLM and OpenAI both say "maximum context length" when a prompt does not fit."""
    return "maximum context length" in _detail(exc).lower()


def without_older_turns(messages: list[dict]) -> list[dict] | None:
    """The conversation without the older half of its turns (the leading system messages and the
    newest message always kept; it starts again at a user turn), or None when only the newest
    message is left to keep."""
    system = 0
    while system < len(messages) and messages[system]["role"] == "system":
        system += 1
    rest = messages[system:]
    if len(rest) <= 1:
        return None
    cut = len(rest) // 2
    while cut < len(rest) - 1 and rest[cut]["role"] != "user":
        cut += 1
    return messages[:system] + rest[cut:]


def _detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error")
        msg = err.get("message") if isinstance(err, dict) else body.get("message")
        if msg:
            return str(msg)
    return exc.message


class _OpenAIGeneration(Generation):
    def __init__(self, backend: OpenAICompatibleBackend, request: dict, adapter: str | None) -> None:
        super().__init__(model=backend.model, adapter=adapter)
        self._backend = backend
        self._server_finish: str | None = None
        try:
            self._stream = backend._create(request, stream=True, stream_options={"include_usage": True})
        except BackendError:
            self.finish_reason = "error"
            raise
        self._model_name = request["model"]

    def _on_cancel(self) -> None:
        try:
            self._stream.close()  # unblocks the reading thread; vLLM aborts the request
        except Exception:  # closing twice or from another thread: nothing to recover
            pass

    def _deltas(self) -> Iterator[str]:
        try:
            for chunk in self._stream:
                if chunk.usage is not None:
                    self.prompt_tokens = chunk.usage.prompt_tokens
                    self.completion_tokens = chunk.usage.completion_tokens
                if chunk.choices:
                    choice = chunk.choices[0]
                    if choice.finish_reason:
                        self._server_finish = choice.finish_reason
                    if choice.delta and choice.delta.content:
                        yield choice.delta.content
                if self.cancelled:
                    break
        except (openai.APIError, httpx.HTTPError) as exc:
            if self.cancelled:
                return
            if isinstance(exc, httpx.HTTPError):
                raise BackendUnavailable(
                    f"The connection to the model server at {self._backend.base_url} broke mid-answer: {exc}. Try again."
                ) from exc
            raise self._backend._error(exc, self._model_name) from exc
        finally:
            self._on_cancel()  # release the connection whether we read to the end or not

    def _natural_finish(self) -> str:
        return _FINISH.get(self._server_finish or "stop", "stop")
