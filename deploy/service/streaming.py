"""Running a turn for an HTTP request: the whole answer at once, or streamed as server-sent events.

Streaming: the turn runs in its own thread and feeds the event stream through a queue; if the
client goes away the turn is cancelled and stored as interrupted, never left running or
half-logged. `stream_turn` takes an encoder, so the OpenAI routes stream their own chunk format.
The safety guard runs in that thread too (off the event loop); when it withdraws an answer the
stream says so with a 'replace' event carrying the refusal (docs/service.md, "Safety guard").
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from chat.backends import BackendError
from chat.guard import Replace
from chat.notices import reference_for
from chat.turns import Turn
from deploy.service.errors import ApiError, as_api_error
from deploy.service.shapes import message_dict
from deploy.service.state import Services
from store import InvalidInput, NotFound
from store.attributes import InvalidAttributes


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
        err = as_api_error(exc, reference_for(turn))
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

    `encode(kind, payload)` turns ('start'|'delta'|'replace'|'done'|'error', payload) into the bytes to send
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
                put(("replace" if isinstance(delta, Replace) else "delta", delta))
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
                if kind in ("delta", "replace"):
                    yield encode(kind, str(value))
                elif kind == "error":
                    err = as_api_error(value, reference_for(turn))
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

log = logging.getLogger("advisor.api")


def _api_event(kind: str, payload: Any) -> bytes:
    if kind == "start":
        return _sse({"type": "start", **payload})
    if kind == "delta":
        return _sse({"type": "delta", "text": payload})
    if kind == "replace":  # the guard withdrew what was streamed: show this text instead
        return _sse({"type": "replace", "text": payload})
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
