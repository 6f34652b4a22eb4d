"""The service process: one FastAPI app with the Gradio UI at `/`, the REST API under `/api`, the
OpenAI-compatible API under `/v1`, `/healthz`, `/metrics`, and the job scheduler.

Design choices:
- `create_app(settings, backend=, store=)` only wires things; the lifespan opens the store
  (the service owns the DuckDB file), builds the backend, applies the live release and starts
  the scheduler. Objects passed in are used as they are and not closed: the caller owns them.
- Everything per-app hangs off `app.state` (`services`, `metrics`, `scheduler`, `jobs`), never
  module globals, so two apps can live in one process (tests).
- Identity is resolved once per request by `IdentityMiddleware` (pure ASGI, so streamed answers
  pass untouched): a bearer token, else the signed session cookie, else a new anonymous id
  whose cookie is set on the response. The Gradio UI resolves the same cookie with the same
  `Auth.from_cookies`, so a browser is one user across UI and API.
- Shutdown (SIGTERM through uvicorn): no new answers; answers in flight get `drain_s` to
  finish, then are cancelled, which the turn stores as `interrupted`; then the scheduler, the
  backend and the store close, in that order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chat.backends import Backend, BackendError, SamplingParams
from chat.turns import TurnContext
from chat.ui_common import ChatHooks, InFlight, ServiceClosing
from deploy.auth import COOKIE_MAX_AGE_S, COOKIE_NAME, Auth, Identity, session_secret
from deploy.backends import make_backend, sampling_params, turn_context, use_live_release
from deploy.jobs import JobContext, JobRegistry, make_scheduler, register_job_modules
from deploy.metrics import Metrics, MetricsMiddleware
from deploy.settings import Settings
from feedback.store import Store

log = logging.getLogger("advisor.service")

# Largest request body accepted by /api and /v1 (a message is at most max_message_chars; this
# only stops abuse before JSON parsing).
MAX_BODY_BYTES = 1_000_000
RELEASE_RETRY_S = 5.0


@dataclass
class Services:
    """The objects every handler needs. `store`/`backend` are set by the lifespan."""

    settings: Settings
    metrics: Metrics
    inflight: InFlight = field(default_factory=InFlight)
    store: Store | None = None
    backend: Backend | None = None
    auth: Auth | None = None
    jobs: JobRegistry | None = None
    release_id: str | None = None
    release_warning: str | None = None
    drain_s: float = 20.0
    extras: dict[str, Any] = field(default_factory=dict)  # later issues: release registry, serving hand-off
    # The live release could not be applied (model server down at start): retried by turns and
    # health checks, at most every RELEASE_RETRY_S, so the release comes back with the server.
    release_pending: bool = False
    _release_retry_at: float = 0.0
    _release_lock: threading.Lock = field(default_factory=threading.Lock)
    # The base model's adapter-less release id, looked up once per live-release change rather than
    # on every answer (`release_of` runs on the turn path); cleared by `refresh_release`.
    _no_adapter_release: str | None = None

    def turn_context(self, source: str) -> TurnContext:
        if self.store is None or self.backend is None:
            raise RuntimeError("The service is still starting; try again in a moment.")
        if self.inflight.closing:
            raise ServiceClosing("The service is restarting; send your message again in a moment.")
        self.retry_release()
        ctx = turn_context(self.settings, self.store, self.backend, source=source, release_id=self.release_id)
        ctx.release_of = self.release_of  # log the release the answer really came from (see TurnContext)
        return ctx

    def release_of(self, adapter: str | None) -> str | None:
        """The release behind a pinned adapter: the registry loads each release's adapter under the
        release id, and no adapter is this base model's adapter-less release."""
        if adapter:
            return adapter
        if self._no_adapter_release is None:  # None is not cached: the release may not exist yet
            from deploy.registry import no_adapter_release

            self._no_adapter_release = no_adapter_release(self.store, self.backend.model)
        return self._no_adapter_release

    def sampling(self, **overrides: Any) -> SamplingParams:
        return sampling_params(self.settings, **overrides)

    def hooks(self) -> ChatHooks:
        m = self.metrics

        def on_turn(source: str, turn: Any) -> None:
            answer, gen = turn.answer, turn.generation
            m.record_turn(
                source, answer.status if answer is not None else "error",
                prompt_tokens=getattr(gen, "prompt_tokens", None),
                completion_tokens=getattr(gen, "completion_tokens", None),
                latency_ms=getattr(gen, "latency_ms", None),
            )

        return ChatHooks(on_turn=on_turn, on_rating=m.record_rating, on_error=m.record_error)

    def refresh_release(self) -> str | None:
        """Re-read the live release and put its adapter on the backend (after a promotion or
        rollback). Answers already streaming keep the adapter they pinned."""
        with self._release_lock:
            self._no_adapter_release = None
            self.release_id, self.release_warning = use_live_release(self.store, self.backend)
            if self.release_warning:
                log.warning(self.release_warning)
            self.release_pending = False
            return self.release_id

    def retry_release(self) -> None:
        """Apply the live release if the model server was down when the service started."""
        if not self.release_pending or time.monotonic() < self._release_retry_at:
            return
        self._release_retry_at = time.monotonic() + RELEASE_RETRY_S
        try:
            self.refresh_release()
        except BackendError as exc:  # still down: the turn itself reports it to the user
            log.info("the live release is still not applied: %s", exc)


# --------------------------------------------------------------------------- identity middleware


class IdentityMiddleware:
    """Puts the caller's `Identity` on `request.state.identity`; mints an anonymous session cookie
    when there is none (or it is invalid, or names a user who deleted their data)."""

    def __init__(self, app: ASGIApp, services: Services) -> None:
        self.app = app
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.services.auth is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        identity = self.services.auth.resolve(request.headers, request.cookies)
        fresh = identity is None
        if fresh:
            identity = self.services.auth.new_anonymous()
        scope.setdefault("state", {})["identity"] = identity
        too_big = _declared_length(request) > MAX_BODY_BYTES and scope["path"].startswith(("/api/", "/v1/"))
        if too_big:
            resp = JSONResponse({"error": {"message": f"The request is larger than {MAX_BODY_BYTES:,} bytes.",
                                           "type": "invalid_request_error", "code": "too_large"}}, status_code=413)
            await resp(scope, receive, send)
            return

        async def send_wrapper(message: Message) -> None:
            if fresh and message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"set-cookie", cookie_header(self.services.auth, identity, scope).encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_wrapper)


def _declared_length(request: Request) -> int:
    try:
        return int(request.headers.get("content-length") or 0)
    except ValueError:
        return 0


def cookie_header(auth: Auth, identity: Identity, scope: Scope | None = None) -> str:
    """A Set-Cookie value: HTTP-only (no script can read it), SameSite=Lax (no cross-site POSTs),
    Secure when the request came over HTTPS."""
    secure = "; Secure" if scope is not None and scope.get("scheme") == "https" else ""
    return (f"{COOKIE_NAME}={auth.sign(identity)}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; HttpOnly; "
            f"SameSite=Lax{secure}")


def set_session(response: Response, auth: Auth, identity: Identity, request: Request) -> None:
    response.headers.append("set-cookie", cookie_header(auth, identity, request.scope))


def identity_of(request: Request) -> Identity:
    return request.state.identity


# --------------------------------------------------------------------------- lifespan


def _start(services: Services, app: FastAPI, store: Store | None, backend: Backend | None) -> None:
    s = services.settings
    services.store = store if store is not None else Store(s.db_path)
    services.auth = Auth(s.server, services.store, session_secret(s.server, s.data_path))
    if backend is None:
        log.info("loading the %s backend…", s.backend.kind)
        backend = make_backend(s, progress=_log_build_progress)
    services.backend = backend
    try:
        services.refresh_release()
    except BackendError as exc:  # the model server is down: serve (and say so) rather than not start
        services.release_id, services.release_warning = None, f"Could not apply the live release: {exc}"
        services.release_pending = True
        log.warning(services.release_warning)
    scheduler = make_scheduler()
    ctx = JobContext(store=services.store, settings=s, backend=services.backend,
                     extras={"services": services, **services.extras})
    services.jobs = JobRegistry(scheduler, ctx)
    loaded = register_job_modules(services.jobs)
    scheduler.start()
    app.state.scheduler = scheduler
    app.state.jobs = services.jobs
    log.info("service ready: backend %s (%s), release %s, job modules %s",
             backend.kind, backend.model, services.release_id or "base", loaded or "none")


def _log_build_progress(step: int, total: int, loss: float) -> None:
    if step == 1 or step == total or step % max(1, total // 10) == 0:
        log.info("building the built-in model: step %d/%d, loss %.3f", step, total, loss)


def _stop(services: Services, app: FastAPI, own_store: bool, own_backend: bool) -> None:
    services.inflight.close()
    if not services.inflight.wait_idle(services.drain_s):
        n = services.inflight.cancel_all()
        log.warning("shutdown: stopped %d answer(s) still generating; they are stored as interrupted", n)
        services.inflight.wait_idle(30)
    scheduler = getattr(app.state, "scheduler", None)
    if scheduler is not None and scheduler.running:
        scheduler.shutdown(wait=True)
    if own_backend and services.backend is not None:
        services.backend.close()
    if own_store and services.store is not None:
        services.store.close()


def _lifespan(services: Services, store: Store | None, backend: Backend | None):
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import anyio.to_thread

        await anyio.to_thread.run_sync(_start, services, app, store, backend)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(_stop, services, app, store is None, backend is None)

    return lifespan


# --------------------------------------------------------------------------- the app


def create_app(settings: Settings, *, backend: Backend | None = None, store: Store | None = None,
               ui: bool = True, drain_s: float = 20.0) -> FastAPI:
    """The whole service. `backend`/`store` given: used as they are (and not closed)."""
    from deploy import api, openai_api

    metrics = Metrics()
    services = Services(settings=settings, metrics=metrics, drain_s=drain_s)
    app = FastAPI(
        title="Advisor", version="0.1.0", lifespan=_lifespan(services, store, backend),
        docs_url="/api/docs", redoc_url=None, openapi_url="/api/openapi.json",
    )
    app.state.services = services
    app.state.metrics = metrics
    app.add_middleware(IdentityMiddleware, services=services)
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # outermost: counts every response
    api.install(app)
    openai_api.install(app)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> JSONResponse:
        if services.store is None or services.backend is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        backend_health = _safe_health(services)
        ok = bool(backend_health.get("ok", True)) and not services.inflight.closing
        return JSONResponse({
            "status": "ok" if ok else "degraded",
            "backend": backend_health,
            "release": services.release_id,
            "in_flight": len(services.inflight),
            "schema_version": services.store.schema_version(),
        }, status_code=200 if ok else 503)

    @app.get("/metrics", include_in_schema=False)
    def metrics_endpoint() -> PlainTextResponse:
        metrics.in_flight.set(len(services.inflight))
        return PlainTextResponse(metrics.render(), media_type=metrics.content_type)

    if ui:
        _mount_ui(app, services)
    return app


def _mount_ui(app: FastAPI, services: Services) -> None:
    import gradio as gr

    from chat.ui import UIDeps, build_ui
    from chat.ui_operator import OperatorDeps
    from deploy.panels import operator_panels

    def identify(request: Any) -> Identity | None:
        if services.auth is None or request is None:
            return None
        return services.auth.from_cookies(dict(request.cookies))

    def run_job(kind: str) -> str:
        job = services.jobs.run_now(kind, trigger="manual")
        return f"Started {kind} (job {job.id[:8]})."

    deps = UIDeps(
        store=lambda: services.store,
        turn_context=services.turn_context,
        sampling=services.sampling,
        identify=identify,
        inflight=services.inflight,
        hooks=services.hooks(),
        max_message_chars=services.settings.server.max_message_chars,
        operator=OperatorDeps(
            store=lambda: services.store,
            buttons=lambda: services.jobs.buttons() if services.jobs else [],
            run_job=run_job,
            status=lambda: {"release": services.release_id, "warning": services.release_warning,
                            "backend": _safe_health(services)},
            panels=operator_panels(services),
        ),
    )
    blocks = build_ui(deps)
    # The UI has no uploads; cap Gradio's upload route anyway so it cannot be used to fill the disk.
    gr.mount_gradio_app(app, blocks, path="/", footer_links=[], run_history=False, show_error=False,
                        css=_ui_css(), theme=gr.themes.Soft(), max_file_size="1mb")


def _safe_health(services: Services) -> dict:
    try:
        services.retry_release()
        return services.backend.health() if services.backend else {}
    except Exception as exc:  # a status line must never break the operator tab
        return {"ok": False, "error": str(exc)}


def _ui_css() -> str:
    from chat.ui import CSS

    return CSS
