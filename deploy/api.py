"""The REST API under `/api`: the same actions as the chat UI, for scripts and other front ends,
plus the operator's read-outs under `/api/admin`.

Routes (all JSON; errors are `{"error": {"message", "type", "code", "param"}}`):
  GET    /api/me                                  who am I (anonymous or named; admin?)
  POST   /api/signup | /api/login | /api/logout   named users (password), admin login
  DELETE /api/me?confirm=true                      delete my data (everything), new session
  GET    /api/feedback/reasons                     the fixed like/dislike reason chips
  GET    /api/conversations                        my conversations, newest first
  POST   /api/conversations                        start an empty one
  GET    /api/conversations/{id}[?leaf=]           its current branch (or the branch to `leaf`)
  POST   /api/conversations/{id}/messages          ask; `stream: true` → server-sent events
  POST   /api/messages                             ask in a new conversation (or `conversation_id`)
  POST   /api/messages/{id}/regenerate             another answer to the same question (a sibling)
  POST   /api/messages/{id}/edit                   a rewritten question (a sibling) and its answer
  POST   /api/messages/{id}/rating                 like / dislike with reasons and a comment
  POST   /api/messages/{id}/choose                 keep this sibling
  GET    /api/admin/stats | turns | jobs | releases | timeseries | reasons   (operator)
  POST   /api/admin/jobs/{kind}/run                start a registered job now
  POST   /api/admin/release/refresh                re-read the live release, hot-swap its adapter
  POST   /api/admin/releases/{id}/promote[?force=] make a release live (hot swap; in-flight answers keep theirs)
  POST   /api/admin/releases/rollback              make the previous live release live again

Design choices:
- Handlers are thin: validation and logging live in `chat.turns`, ownership in the store
  (`user_id=` on every lookup). Another user's id answers 404 exactly like an unknown one.
- Streaming uses server-sent events. The turn runs in its own thread and feeds the event
  stream through a queue; if the client goes away the turn is cancelled and stored as
  interrupted, never left running or half-logged.
- Error bodies have the OpenAI shape, so one client-side handler fits `/api` and `/v1`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, StreamingResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from chat import turns
from chat.backends import BackendError, BackendUnavailable
from chat.turns import Turn
from chat.ui_common import NEGATIVE_REASONS, POSITIVE_REASONS, ServiceClosing, thread_view
from chat.ui_reports import (counts_over_time, jobs_table, latest_turns, overview, ratings_by_reason,
                             releases_table)
from deploy.auth import AuthError, Identity
from deploy.service import Services, identity_of, set_session
from feedback.attributes import Attributes, InvalidAttributes
from feedback.store import InvalidInput, Message, NotFound, StoreError

log = logging.getLogger("advisor.api")


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, code: str, type_: str = "invalid_request_error",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.type, self.param = status, message, code, type_, param


def error_response(status: int, message: str, *, code: str, type_: str = "invalid_request_error",
                   param: str | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "code": code, "param": param}},
                        status_code=status, headers=headers)


def as_api_error(exc: Exception) -> ApiError:
    """Domain exceptions → HTTP status and a message written for the person calling."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, NotFound):
        return ApiError(404, str(exc), code="not_found")
    if isinstance(exc, (InvalidInput, InvalidAttributes)):
        too_long = "limit is" in str(exc)
        return ApiError(413 if too_long else 400, str(exc), code="too_long" if too_long else "invalid_input")
    if isinstance(exc, ServiceClosing):
        return ApiError(503, str(exc), code="closing", type_="server_error")
    if isinstance(exc, BackendUnavailable):
        return ApiError(503, f"The model is not available right now: {exc}", code="model_unavailable",
                        type_="server_error")
    if isinstance(exc, BackendError):
        return ApiError(502, f"The model failed to answer: {exc}", code="model_error", type_="server_error")
    if isinstance(exc, StoreError):
        return ApiError(500, str(exc), code="store_error", type_="server_error")
    if isinstance(exc, ValueError):  # e.g. SamplingParams' own checks
        return ApiError(400, str(exc), code="invalid_input")
    return ApiError(500, "Something went wrong on our side; it has been logged. Please try again.",
                    code="internal", type_="server_error")


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return "The request body is not valid JSON (UTF-8). Send a JSON object.", None
    parts, param = [], None
    for e in errors[:5]:
        loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path")]
        param = param or ".".join(loc) or None
        parts.append(f"{'.'.join(loc) or 'body'}: {e.get('msg')}")
    return "Invalid request — " + "; ".join(parts), param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, code=exc.code, type_=exc.type, param=exc.param)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        services: Services = request.app.state.services
        services.metrics.record_error("invalid_input")
        message, param = _validation_message(exc)
        return error_response(400, message, code="invalid_request", param=param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, str(exc.detail), code=code, headers=getattr(exc, "headers", None))

    async def _domain(request: Request, exc: Exception) -> JSONResponse:
        api_exc = as_api_error(exc)
        request.app.state.services.metrics.record_error(api_exc.code)
        return error_response(api_exc.status, api_exc.message, code=api_exc.code, type_=api_exc.type)

    # Domain errors are answered inside the app (ExceptionMiddleware); only true bugs reach the
    # catch-all below, which Starlette answers at the outermost layer and then logs.
    for cls in (StoreError, InvalidAttributes, BackendError, ServiceClosing):
        app.add_exception_handler(cls, _domain)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        api_exc = as_api_error(exc)
        if api_exc.status >= 500 and api_exc.code == "internal":
            log.exception("unhandled error on %s %s", request.method, request.url.path)
        request.app.state.services.metrics.record_error(api_exc.code)
        return error_response(api_exc.status, api_exc.message, code=api_exc.code, type_=api_exc.type)


# --------------------------------------------------------------------------- dependencies


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    if services.store is None or services.backend is None:
        raise ApiError(503, "The service is still starting; try again in a moment.", code="starting",
                       type_="server_error")
    return services


def me(request: Request) -> Identity:
    return identity_of(request)


def admin(request: Request) -> Identity:
    ident = identity_of(request)
    if not ident.is_admin:
        raise StarletteHTTPException(
            401, "Operator endpoints need the admin token (Authorization: Bearer <server.admin_token>) "
                 "or an admin login at /signin.", headers={"WWW-Authenticate": "Bearer"},
        )
    return ident


# --------------------------------------------------------------------------- request models


AttributesIn = dict[str, Any] | str | None


def parse_attributes(value: AttributesIn, *, default: Attributes | None = None) -> Attributes:
    """A dict of 0-4 integers or a SteerLM string; missing names keep their defaults."""
    if value is None or value == "" or value == {}:
        return default or Attributes()
    try:
        if isinstance(value, str):
            return Attributes.parse(value)
        if isinstance(value, dict):
            return Attributes.from_dict(value)
    except InvalidAttributes as exc:
        raise ApiError(400, f"Invalid attributes: {exc}", code="invalid_attributes", param="attributes") from None
    raise ApiError(400, "attributes must be an object like {\"verbosity\": 1} or a SteerLM string.",
                   code="invalid_attributes", param="attributes")


class Sampling(BaseModel):
    max_new_tokens: int | None = Field(default=None, ge=1, le=4096)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None

    def params(self, services: Services):
        return services.sampling(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                 top_p=self.top_p, seed=self.seed)


class AskIn(Sampling):
    content: str = Field(description="The question; plain text, Markdown allowed.")
    attributes: AttributesIn = None
    parent_id: str | None = Field(default=None, description="Answer under this message (default: end of the current branch).")
    stream: bool = False


class NewAskIn(AskIn):
    conversation_id: str | None = None


class RegenerateIn(Sampling):
    attributes: AttributesIn = None
    stream: bool = False


class EditIn(RegenerateIn):
    content: str


class RatingIn(BaseModel):
    value: Literal[1, -1, "like", "dislike"]
    reasons: list[str] = Field(default_factory=list, max_length=10)
    comment: str = Field(default="", max_length=2000)


class ConversationIn(BaseModel):
    title: str = Field(default="", max_length=200)


class Credentials(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    password: str = Field(min_length=1, max_length=1000)


# --------------------------------------------------------------------------- shapes


def message_dict(m: Message) -> dict:
    from chat.ui_common import generation_dict

    return {"id": m.id, "conversation_id": m.conversation_id, "parent_id": m.parent_id, "role": m.role,
            "content": m.content, "status": m.status, "created_at": m.created_at.isoformat(),
            "generation": generation_dict(m)}


def conversation_dict(c) -> dict:
    return {"id": c.id, "title": c.title or "New conversation", "source": c.source,
            "created_at": c.created_at.isoformat(), "updated_at": c.updated_at.isoformat()}


def me_dict(ident: Identity) -> dict:
    return {"user_id": ident.user_id, "name": ident.name, "is_admin": ident.is_admin, "via": ident.via}


# --------------------------------------------------------------------------- running a turn


def _finish(services: Services, source: str, turn: Turn) -> None:
    try:
        services.hooks().on_turn(source, turn)
    except Exception:  # metrics must never break a turn
        log.exception("turn hook failed")


def run_turn_blocking(services: Services, turn: Turn, source: str, key: str | None = None) -> dict:
    """Generate the whole answer (the caller is in a worker thread) and return both messages.
    A model failure is stored as an error answer and reported with its HTTP status."""
    services.inflight.add(turn, key)
    try:
        turn.run()
    except Exception as exc:
        err = as_api_error(exc)
        services.metrics.record_error("backend" if isinstance(exc, BackendError) else "internal")
        raise ApiError(err.status, err.message, code=err.code, type_=err.type) from exc
    finally:
        services.inflight.remove(turn)
        _finish(services, source, turn)
    return {"conversation_id": turn.conversation_id, "user_message": message_dict(turn.user_message),
            "answer": message_dict(turn.answer)}


def _sse(obj: dict) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def stream_turn(services: Services, turn: Turn, source: str, encode=None, start: dict | None = None,
                key: str | None = None) -> StreamingResponse:
    """Run `turn` in its own thread and stream its deltas as server-sent events. Call from the
    event loop (an `async def` endpoint): the thread starts now, so the turn is generated and
    stored even if the response never starts.

    `encode(kind, payload)` turns ('start'|'delta'|'done'|'error', payload) into the bytes to send
    (default: this API's event objects); the OpenAI API passes its own chunk format."""
    encode = encode or _api_event
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    services.inflight.add(turn, key)  # before the response starts: a closing service refuses with 503

    def put(item: tuple) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop is gone (shutdown); the turn still gets stored
            pass

    def work() -> None:
        try:
            for delta in turn:
                put(("delta", delta))
        except Exception as exc:  # stored as an error answer by the turn; tell the client
            put(("error", exc))
        finally:
            services.inflight.remove(turn)
            _finish(services, source, turn)
            put(("end", None))

    threading.Thread(target=work, name="advisor-turn", daemon=True).start()

    async def events() -> AsyncIterator[bytes]:
        finished = False
        try:
            yield encode("start", start or {"conversation_id": turn.conversation_id,
                                             "user_message": message_dict(turn.user_message)})
            while True:
                kind, value = await queue.get()
                if kind == "delta":
                    yield encode("delta", value)
                elif kind == "error":
                    err = as_api_error(value)
                    services.metrics.record_error("backend" if isinstance(value, BackendError) else "internal")
                    yield encode("error", {"message": err.message, "type": err.type, "code": err.code})
                else:
                    finished = True
                    if turn.answer is not None and turn.error is None:
                        yield encode("done", turn)
                    break
        finally:
            if not finished:  # the client went away mid-answer: stop the model; stored as interrupted
                turn.cancel()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                                      "X-Conversation-Id": turn.conversation_id})


def _api_event(kind: str, payload: Any) -> bytes:
    if kind == "start":
        return _sse({"type": "start", **payload})
    if kind == "delta":
        return _sse({"type": "delta", "text": payload})
    if kind == "done":
        return _sse({"type": "done", "answer": message_dict(payload.answer)})
    return _sse({"type": "error", "error": payload})


async def respond(services: Services, turn: Turn, source: str, stream: bool, key: str):
    if stream:
        return stream_turn(services, turn, source, key=key)
    return await run_in_threadpool(run_turn_blocking, services, turn, source, key)


async def submit(services: Services, fn, *args, **kwargs) -> Turn:
    """Validate and store the question off the event loop (DuckDB calls block)."""
    return await run_in_threadpool(guarded, services, fn, *args, **kwargs)


def guarded(services: Services, fn, *args, **kwargs):
    """Call a turn submit function, counting refused input as a user-facing error."""
    try:
        return fn(*args, **kwargs)
    except (InvalidInput, InvalidAttributes, NotFound) as exc:
        services.metrics.record_error("not_found" if isinstance(exc, NotFound) else "invalid_input")
        raise as_api_error(exc) from None


# --------------------------------------------------------------------------- routes: chat

router = APIRouter(prefix="/api")


@router.get("/me")
def get_me(ident: Identity = Depends(me)) -> dict:
    return me_dict(ident)


@router.delete("/me")
def delete_me(request: Request, confirm: bool = Query(False), ident: Identity = Depends(me),
              services: Services = Depends(services_of)):
    """Delete everything this user wrote and everything derived from it. Needs `?confirm=true`."""
    if not confirm:
        raise ApiError(400, "This deletes all your conversations and ratings for good. "
                            "Repeat the request with ?confirm=true to go ahead.", code="confirm_required",
                       param="confirm")
    if ident.via == "admin-token" or ident.user_id == "admin":
        raise ApiError(400, "The operator account cannot delete itself this way; use `advisor forget`.",
                       code="invalid_input")
    services.inflight.cancel(ident.user_id)
    counts = services.store.forget_user(ident.user_id)
    fresh = services.auth.new_anonymous()
    response = JSONResponse({"deleted": counts, "new_session": me_dict(fresh)})
    if ident.via != "api-key":  # a key-derived user cannot be re-keyed by us; the caller needs a new key
        set_session(response, services.auth, fresh, request)
    return response


def _signed_in(sign_in, body: Credentials, request: Request, services: Services, status: int, code: str):
    try:
        ident = sign_in(body.name, body.password)
    except AuthError as exc:
        raise ApiError(status, str(exc), code=code) from None
    response = JSONResponse(me_dict(ident))
    set_session(response, services.auth, ident, request)
    return response


@router.post("/signup")
def signup(body: Credentials, request: Request, services: Services = Depends(services_of)):
    return _signed_in(services.auth.register, body, request, services, 400, "signup_failed")


@router.post("/login")
def login(body: Credentials, request: Request, services: Services = Depends(services_of)):
    return _signed_in(services.auth.login, body, request, services, 401, "login_failed")


@router.post("/logout")
def logout(request: Request, services: Services = Depends(services_of)):
    fresh = services.auth.new_anonymous()
    response = JSONResponse(me_dict(fresh))
    set_session(response, services.auth, fresh, request)
    return response


@router.get("/feedback/reasons")
def feedback_reasons() -> dict:
    return {"like": list(POSITIVE_REASONS), "dislike": list(NEGATIVE_REASONS)}


@router.get("/conversations")
def list_conversations(limit: int = Query(100, ge=1, le=1000), ident: Identity = Depends(me),
                       services: Services = Depends(services_of)) -> dict:
    convs = services.store.list_conversations(ident.user_id, limit=limit)
    return {"conversations": [conversation_dict(c) for c in convs]}


@router.post("/conversations", status_code=201)
def create_conversation(body: ConversationIn | None = None, ident: Identity = Depends(me),
                        services: Services = Depends(services_of)) -> dict:
    try:
        conv = services.store.create_conversation(ident.user_id, title=(body.title if body else "").strip(),
                                                  source="api")
    except InvalidInput as exc:
        raise as_api_error(exc) from None
    return conversation_dict(conv)


@router.get("/conversations/{conversation_id}")
def get_conversation(conversation_id: str, leaf: str | None = None, ident: Identity = Depends(me),
                     services: Services = Depends(services_of)) -> dict:
    store = services.store
    conv = store.get_conversation(conversation_id, user_id=ident.user_id)
    views = thread_view(store, conv.id, ident.user_id, leaf_id=leaf)
    return {**conversation_dict(conv), "messages": [v.as_dict() for v in views]}


@router.post("/conversations/{conversation_id}/messages")
async def ask_in_conversation(conversation_id: str, body: AskIn, ident: Identity = Depends(me),
                              services: Services = Depends(services_of)):
    ctx = services.turn_context("api")
    turn = await submit(services, turns.send, ctx, user_id=ident.user_id, text=body.content,
                    conversation_id=conversation_id, parent_id=body.parent_id,
                    attributes=parse_attributes(body.attributes), params=body.params(services))
    return await respond(services, turn, "api", body.stream, ident.user_id)


@router.post("/messages")
async def ask(body: NewAskIn, ident: Identity = Depends(me), services: Services = Depends(services_of)):
    ctx = services.turn_context("api")
    turn = await submit(services, turns.send, ctx, user_id=ident.user_id, text=body.content,
                    conversation_id=body.conversation_id, parent_id=body.parent_id,
                    attributes=parse_attributes(body.attributes), params=body.params(services))
    return await respond(services, turn, "api", body.stream, ident.user_id)


@router.post("/messages/{message_id}/regenerate")
async def regenerate(message_id: str, body: RegenerateIn | None = None, ident: Identity = Depends(me),
                     services: Services = Depends(services_of)):
    body = body or RegenerateIn()
    turn = await submit(services, turns.regenerate, services.turn_context("api"), user_id=ident.user_id,
                    message_id=message_id, attributes=parse_attributes(body.attributes),
                    params=body.params(services))
    return await respond(services, turn, "api", body.stream, ident.user_id)


@router.post("/messages/{message_id}/edit")
async def edit(message_id: str, body: EditIn, ident: Identity = Depends(me),
               services: Services = Depends(services_of)):
    turn = await submit(services, turns.edit, services.turn_context("api"), user_id=ident.user_id,
                    message_id=message_id, text=body.content, attributes=parse_attributes(body.attributes),
                    params=body.params(services))
    return await respond(services, turn, "api", body.stream, ident.user_id)


def check_reasons(value: int, reasons: list[str]) -> list[str]:
    allowed = POSITIVE_REASONS if value > 0 else NEGATIVE_REASONS
    bad = [r for r in reasons if r not in allowed]
    if bad:
        kind = "like" if value > 0 else "dislike"
        raise ApiError(400, f"Unknown reason(s) {bad} for a {kind}; choose from: {', '.join(allowed)}.",
                       code="invalid_reason", param="reasons")
    return list(dict.fromkeys(reasons))


@router.post("/messages/{message_id}/rating", status_code=201)
def rate(message_id: str, body: RatingIn, ident: Identity = Depends(me),
         services: Services = Depends(services_of)) -> dict:
    value = {"like": 1, "dislike": -1}.get(body.value, body.value)  # type: ignore[arg-type]
    reasons = check_reasons(value, body.reasons)
    try:
        rating = services.store.rate(message_id, ident.user_id, value, reasons=reasons, comment=body.comment)
    except (InvalidInput, NotFound) as exc:
        raise as_api_error(exc) from None
    services.metrics.record_rating(value)
    return {"id": rating.id, "message_id": rating.message_id, "value": rating.value,
            "reasons": list(rating.reasons), "comment": rating.comment}


@router.post("/messages/{message_id}/choose")
def choose(message_id: str, ident: Identity = Depends(me), services: Services = Depends(services_of)) -> dict:
    services.store.choose_sibling(message_id, ident.user_id)
    return {"chosen": message_id}


# --------------------------------------------------------------------------- routes: operator

admin_router = APIRouter(prefix="/api/admin", dependencies=[Depends(admin)])


@admin_router.get("/stats")
def admin_stats(services: Services = Depends(services_of)) -> dict:
    stats = overview(services.store)
    stats["in_flight"] = len(services.inflight)
    stats["serving_release"] = services.release_id
    stats["release_warning"] = services.release_warning
    return stats


@admin_router.get("/turns")
def admin_turns(limit: int = Query(50, ge=1, le=1000), services: Services = Depends(services_of)) -> dict:
    return {"turns": latest_turns(services.store, limit=limit)}


@admin_router.get("/jobs")
def admin_jobs(limit: int = Query(50, ge=1, le=1000), services: Services = Depends(services_of)) -> dict:
    registry = services.jobs
    kinds = [{"kind": s.kind, "description": s.description, "button": s.button,
              "next_run": registry.next_runs().get(s.kind)} for s in registry.specs()] if registry else []
    return {"jobs": jobs_table(services.store, limit=limit), "kinds": kinds}


class JobParams(BaseModel):
    """Optional parameters of a manual job run, e.g. `{"params": {"extractor": "llm"}}`; one level
    of nesting for groups such as a cycle's training `overrides`."""

    params: dict[str, str | int | float | bool | dict[str, str | int | float | bool]] = {}


@admin_router.post("/jobs/{kind}/run", status_code=202)
def admin_run_job(kind: str, body: JobParams | None = None, services: Services = Depends(services_of)) -> dict:
    try:
        job = services.jobs.run_now(kind, trigger="api", params=body.params if body else None)
    except KeyError as exc:
        raise ApiError(404, str(exc.args[0]), code="not_found") from None
    return {"job_id": job.id, "kind": job.kind, "status": job.status}


@admin_router.get("/releases")
def admin_releases(limit: int = Query(50, ge=1, le=1000), services: Services = Depends(services_of)) -> dict:
    return {"releases": releases_table(services.store, limit=limit), "serving": services.release_id}


class PromoteIn(BaseModel):
    force: bool = Field(default=False, description="Promote even a release the gate rejected.")


def _release_swap(fn, *args, **kwargs) -> dict:
    from deploy.registry import ReleaseError

    try:
        release = fn(*args, **kwargs)
    except ReleaseError as exc:  # refused (rejected by the gate, other base model, nothing to roll back to)
        raise ApiError(409, str(exc), code="release_refused") from None
    services = args[0]
    return {"id": release.id, "status": release.status, "serving": services.release_id,
            "warning": services.release_warning}


@admin_router.post("/releases/{release_id}/promote")
def admin_promote_release(release_id: str, force: bool = Query(False), body: PromoteIn | None = None,
                          services: Services = Depends(services_of)) -> dict:
    """Make a release live in this service: new answers use it, answers in flight finish on theirs."""
    from deploy.registry import promote_in_service

    return _release_swap(promote_in_service, services, release_id, force=force or bool(body and body.force))


@admin_router.post("/releases/rollback")
def admin_rollback_release(services: Services = Depends(services_of)) -> dict:
    """Make the previously live release live again, hot-swapped like a promotion."""
    from deploy.registry import rollback_in_service

    return _release_swap(rollback_in_service, services)


@admin_router.post("/release/refresh")
def admin_refresh_release(services: Services = Depends(services_of)) -> dict:
    return {"serving": services.refresh_release(), "warning": services.release_warning}


@admin_router.get("/timeseries")
def admin_timeseries(days: int = Query(30, ge=1, le=3650), bucket: Literal["hour", "day", "week"] = "day",
                     services: Services = Depends(services_of)) -> dict:
    return {"bucket": bucket, "days": days, "points": counts_over_time(services.store, days=days, bucket=bucket)}


@admin_router.get("/reasons")
def admin_reasons(days: int = Query(30, ge=1, le=3650), services: Services = Depends(services_of)) -> dict:
    return {"days": days, "reasons": ratings_by_reason(services.store, days=days)}


# --------------------------------------------------------------------------- sign-in pages

pages = APIRouter(include_in_schema=False)

_SIGNIN_HTML = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in · Advisor</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:system-ui,sans-serif;max-width:26rem;margin:4rem auto;padding:0 1rem;color:#222}}
label{{display:block;margin:.8rem 0 .2rem}}input{{width:100%;padding:.5rem;font-size:1rem;box-sizing:border-box}}
button{{margin-top:1rem;padding:.5rem 1.2rem;font-size:1rem}}.err{{color:#b00020}}.muted{{color:#666;font-size:.9rem}}
fieldset{{border:1px solid #ddd;border-radius:8px;margin:1rem 0;padding:0 1rem 1rem}}</style></head><body>
<h1>Advisor</h1>{error}
<form method="post" action="/signin"><fieldset><legend>Sign in</legend>
<label for="name">User name</label><input id="name" name="name" autocomplete="username">
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password">
<label><input type="checkbox" name="create" value="1" style="width:auto"> Create this account</label>
<p class="muted">Operators: sign in as the admin user, or paste the admin token below.</p>
<label for="token">Admin token (optional)</label><input id="token" name="token" type="password">
<button type="submit">Continue</button></fieldset></form>
<p class="muted"><a href="/">Back to the chat</a> — you can also chat without an account.</p></body></html>"""


@pages.get("/signin")
def signin_page() -> HTMLResponse:
    return HTMLResponse(_SIGNIN_HTML.format(error=""))


@pages.post("/signin")
def signin_submit(request: Request, name: str = Form(""), password: str = Form(""), token: str = Form(""),
                  create: str = Form("")):
    services: Services = request.app.state.services
    try:
        if token.strip():
            if not services.auth.is_admin_token(token.strip()):
                raise AuthError("That admin token is not valid.")
            ident = services.auth.from_bearer(token.strip())
            ident = Identity(user_id=ident.user_id, name=ident.name, is_admin=True, via="cookie")
        elif create:
            ident = services.auth.register(name, password)
        else:
            ident = services.auth.login(name, password)
    except AuthError as exc:
        from html import escape

        return HTMLResponse(_SIGNIN_HTML.format(error=f'<p class="err" role="alert">{escape(str(exc))}</p>'),
                            status_code=401)
    response = RedirectResponse("/", status_code=303)
    set_session(response, services.auth, ident, request)
    return response


@pages.get("/signout")
def signout(request: Request):
    services: Services = request.app.state.services
    response = RedirectResponse("/", status_code=303)
    set_session(response, services.auth, services.auth.new_anonymous(), request)
    return response


def install(app: FastAPI) -> None:
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(admin_router)
    app.include_router(pages)


__all__ = ["install", "router", "admin_router", "ApiError", "stream_turn", "run_turn_blocking",
           "parse_attributes", "as_api_error", "error_response", "message_dict"]
