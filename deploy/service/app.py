"""The service process: one FastAPI app with the Gradio UI at `/`, the REST API under `/api`, the
OpenAI-compatible API under `/v1`, `/healthz`, `/metrics`, and the job scheduler.

Design choices:
- `create_app(settings, backend=, store=)` only wires things; the lifespan opens the store
  (the service owns the DuckDB file), builds the backend, applies the live release and starts
  the scheduler. Objects passed in are used as they are and not closed: the caller owns them.
- The job kinds and operator panels come in as functions (`register_jobs`, `operator_panels`)
  from the composition root, `deploy.wiring.create_app`; without them the service chats and
  serves its APIs, with no jobs and a bare operator screen (some tests want exactly that).
- Everything per-app hangs off `app.state` (`services`, `metrics`, `scheduler`, `jobs`), never
  module globals, so two apps can live in one process (tests).
- Shutdown (SIGTERM through uvicorn): no new answers; answers in flight get `drain_s` to
  finish, then are cancelled, which the turn stores as `interrupted`; then the scheduler, the
  backend and the store close, in that order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse

from chat.backends import Backend, BackendError
from chat.guard import Guard, SafetyJudge
from deploy.loop.jobs import JobContext, JobRegistry, make_scheduler
from deploy.loop.recovery import recover_stale_work
from deploy.service import account_routes, admin_routes, audit_routes, chat_routes, openai_routes, pages, review_routes
from deploy.service.auth import Auth, Identity, session_secret
from deploy.service.caller import IdentityMiddleware
from deploy.service.errors import install_error_handlers
from deploy.service.metrics import Metrics, MetricsMiddleware
from deploy.service.replicas import start_coordinator
from deploy.service.state import Services
from deploy.serving.factory import make_backend
from deploy.serving.guard import make_guard, warm_up
from deploy.settings import Settings
from store import Store

log = logging.getLogger("advisor.service")

RegisterJobs = Callable[[JobRegistry], list[str]]
OperatorPanels = Callable[[Services], list[Any]]


# --------------------------------------------------------------------------- lifespan


def _start(services: Services, app: FastAPI, store: Store | None, backend: Backend | None,
           register_jobs: RegisterJobs | None, judge: SafetyJudge | None = None) -> None:
    s = services.settings
    services.guard = make_guard(s, judge)
    threading.Thread(target=_warm_guard, args=(services.guard,), name="advisor-guard-warm-up", daemon=True).start()
    services.store = store if store is not None else Store(s.store_target, **s.store_options)
    services.auth = Auth(s.server, services.store, session_secret(s.server, s.data_path))
    if backend is None:
        log.info("loading the %s backend…", s.backend.kind)
        backend = make_backend(s, progress=_log_build_progress, say=lambda msg: log.info("pretrained model: %s", msg))
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
    loaded = register_jobs(services.jobs) if register_jobs is not None else []
    if not services.store.shared:  # on PostgreSQL the replica that takes the lead recovers (replicas.py)
        try:
            recover_stale_work(services.store, s, when="on starting the scheduler")
        except Exception:  # noqa: BLE001 - left running rows are a nuisance; not serving would be worse
            log.exception("crash recovery failed; jobs left running by a stopped process stay as they were")
    scheduler.start()
    app.state.scheduler = scheduler
    app.state.jobs = services.jobs
    app.state.replica = start_coordinator(services)  # several replicas on PostgreSQL: lead, jobs, releases
    log.info("service ready: backend %s (%s), release %s, job modules %s",
             backend.kind, backend.model, services.release_id or "base", loaded or "none")


def _warm_guard(guard: Guard | None) -> None:
    try:
        warm_up(guard)
    except Exception:  # the first turn tries again and, if the judge still fails, says so to its user
        log.exception("the safety judge could not be loaded")


def _log_build_progress(step: int, total: int, loss: float) -> None:
    if step == 1 or step == total or step % max(1, total // 10) == 0:
        log.info("building the built-in model: step %d/%d, loss %.3f", step, total, loss)


def _stop(services: Services, app: FastAPI, own_store: bool, own_backend: bool) -> None:
    services.inflight.close()
    if not services.inflight.wait_idle(services.drain_s):
        n = services.inflight.cancel_all()
        log.warning("shutdown: stopped %d answer(s) still generating; they are stored as interrupted", n)
        services.inflight.wait_idle(30)
    replica = getattr(app.state, "replica", None)
    if replica is not None:
        replica.stop()  # hands the scheduler lead on at once
    scheduler = getattr(app.state, "scheduler", None)
    if scheduler is not None and scheduler.running:
        scheduler.shutdown(wait=True)
    if own_backend and services.backend is not None:
        services.backend.close()
    if own_store and services.store is not None:
        services.store.close()


def _lifespan(services: Services, store: Store | None, backend: Backend | None, register_jobs: RegisterJobs | None,
              judge: SafetyJudge | None):
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import anyio.to_thread

        await anyio.to_thread.run_sync(_start, services, app, store, backend, register_jobs, judge)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(_stop, services, app, store is None, backend is None)

    return lifespan


# --------------------------------------------------------------------------- the app


def create_app(settings: Settings, *, backend: Backend | None = None, store: Store | None = None,
               ui: bool = True, drain_s: float = 20.0, register_jobs: RegisterJobs | None = None,
               operator_panels: OperatorPanels | None = None, judge: SafetyJudge | None = None) -> FastAPI:
    """The service. `backend`/`store` given: used as they are (and not closed). `register_jobs`
    and `operator_panels` come from the composition root (`deploy.wiring.create_app`). `judge`: the
    safety guard's judge (default `deploy.serving.guard.make_judge`'s; the guard is off when
    `guard.enabled` is false)."""

    metrics = Metrics()
    services = Services(settings=settings, metrics=metrics, drain_s=drain_s)
    app = FastAPI(
        title="Advisor", version="0.1.0", lifespan=_lifespan(services, store, backend, register_jobs, judge),
        docs_url="/api/docs", redoc_url=None, openapi_url="/api/openapi.json",
    )
    app.state.services = services
    app.state.metrics = metrics
    app.add_middleware(IdentityMiddleware, services=services)
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # outermost: counts every response
    install_error_handlers(app)
    for routes in (chat_routes.router, account_routes.router, admin_routes.router, audit_routes.router,
                   review_routes.router, pages.router):
        app.include_router(routes)
    openai_routes.install(app)

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
            **_replica_health(app),
        }, status_code=200 if ok else 503)

    @app.get("/metrics", include_in_schema=False)
    def metrics_endpoint() -> PlainTextResponse:
        metrics.in_flight.set(len(services.inflight))
        return PlainTextResponse(metrics.render(), media_type=metrics.content_type)

    if ui:
        _mount_ui(app, services, operator_panels(services) if operator_panels is not None else [])
    return app


def _mount_ui(app: FastAPI, services: Services, panels: list[Any]) -> None:
    import gradio as gr

    from chat.notices import privacy_notice
    from chat.ui.app import build_ui
    from chat.ui.deps import UIDeps
    from chat.ui.layout import theme as ui_theme
    from deploy.loop.privacy import delete_conversation_everywhere
    from deploy.operator.screen import OperatorDeps, build_operator_page

    def identify(request: Any) -> Identity | None:
        if services.auth is None or request is None:
            return None
        return services.auth.from_cookies(dict(request.cookies), request.headers.get("user-agent") or "")

    privacy = services.settings.privacy

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
        privacy_notice=privacy_notice(retention_days=privacy.retention_days, training_default=privacy.training_default),
        consent_default=privacy.training_default,
        forget=lambda user_id: _forget(services, user_id),
        delete_conversation=lambda conv_id, user_id: delete_conversation_everywhere(
            services.store, services.settings, conv_id, user_id),
    )
    operator = OperatorDeps(
        store=lambda: services.store,
        buttons=lambda: services.jobs.buttons() if services.jobs else [],
        run_job=run_job,
        status=lambda: {"release": services.release_id, "warning": services.release_warning,
                        "backend": _safe_health(services)},
        panels=panels,
    )
    # The UI has no uploads; cap Gradio's upload route anyway so it cannot be used to fill the disk.
    # The operator page is mounted first: "/" would otherwise take "/operator" too.
    common = {"footer_links": [], "run_history": False, "show_error": False, "css": _ui_css(),
              "theme": ui_theme(), "max_file_size": "1mb"}
    gr.mount_gradio_app(app, build_operator_page(operator, identify), path="/operator", **common)
    gr.mount_gradio_app(app, build_ui(deps), path="/", **common)


def _forget(services: Services, user_id: str) -> dict:
    """"Delete my data" on the chat page: every copy, and every session of the user ends at once."""
    from deploy.loop.privacy import forget_myself

    out = forget_myself(services.store, services.settings, user_id, surface="ui")
    services.auth.forgotten(user_id)
    return out


def _replica_health(app: FastAPI) -> dict:
    """Which replica answered and whether it leads the schedule (several replicas on PostgreSQL)."""
    replica = getattr(app.state, "replica", None)
    return {"replica": replica.name, "leading": replica.leading} if replica is not None else {}


def _safe_health(services: Services) -> dict:
    try:
        services.retry_release()
        return services.backend.health() if services.backend else {}
    except Exception as exc:  # a status line must never break the operator screen
        return {"ok": False, "error": str(exc)}


def _ui_css() -> str:
    from chat.ui.layout import CSS

    return CSS
