"""The REST API under `/api`: the same actions as the chat UI, for scripts and other front ends.

Routes (all JSON; errors are `{"error": {"message", "type", "code", "param"}}`):
  GET    /api/me                                  who am I (anonymous or named; admin?), my training consent
  PATCH  /api/me                                  {"training_consent": true|false|null}
  GET    /api/me/export                           everything stored about me, as one JSON document
  DELETE /api/me?confirm=true                      delete my data (everything), new session
  GET    /api/feedback/reasons                     the fixed like/dislike reason chips
  GET    /api/conversations                        my conversations, newest first
  POST   /api/conversations                        start an empty one
  PATCH  /api/conversations/{id}                   rename
  DELETE /api/conversations/{id}                   delete it and everything derived from it
  GET    /api/conversations/{id}[?leaf=]           its current branch (or the branch to `leaf`)
  POST   /api/conversations/{id}/messages          ask; `stream: true` → server-sent events
  POST   /api/messages                             ask in a new conversation (or `conversation_id`)
  POST   /api/messages/{id}/regenerate             another answer to the same question (a sibling)
  POST   /api/messages/{id}/edit                   a rewritten question (a sibling) and its answer
  POST   /api/messages/{id}/rating                 like / dislike with reasons and a comment
  POST   /api/messages/{id}/choose                 keep this sibling

Signing up, in and out, and changing a password: `account_routes`.

Design choices:
- Handlers are thin: validation and logging live in `chat.turns`, ownership in the store
  (`user_id=` on every lookup). Another user's id answers 404 exactly like an unknown one.
- Error bodies have the OpenAI shape, so one client-side handler fits `/api` and `/v1`.
"""

from __future__ import annotations

import json
from datetime import datetime

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from chat import turns
from chat.threads import NEGATIVE_REASONS, POSITIVE_REASONS, thread_view
from deploy.loop.privacy import delete_conversation_everywhere, forget_myself
from deploy.service.auth import Identity
from deploy.service.caller import set_session
from deploy.service.deps import me, services_of
from deploy.service.errors import ApiError, as_api_error
from deploy.service.shapes import (
    AskIn,
    ConversationIn,
    EditIn,
    MeIn,
    NewAskIn,
    RatingIn,
    RegenerateIn,
    RenameIn,
    conversation_dict,
    me_dict,
    parse_attributes,
)
from deploy.service.state import Services
from deploy.service.streaming import respond, submit
from feedback.export import user_export
from store import InvalidInput, NotFound

router = APIRouter(prefix="/api")


def _me_with_settings(ident: Identity, services: Services) -> dict:
    own = services.store.users.training_consent(ident.user_id)
    default = services.settings.privacy.training_default
    return {**me_dict(ident), "training_consent": own, "training_consent_effective": default if own is None else own,
            "retention_days": services.settings.privacy.retention_days}


@router.get("/me")
def get_me(ident: Identity = Depends(me), services: Services = Depends(services_of)) -> dict:
    """Who am I, and my settings: whether my conversations may train the advisor."""
    return _me_with_settings(ident, services)


@router.patch("/me")
def update_me(body: MeIn, ident: Identity = Depends(me), services: Services = Depends(services_of)) -> dict:
    """Change my settings: `{"training_consent": true|false|null}` (null: the deployment's default)."""
    services.store.users.set_training_consent(ident.user_id, body.training_consent)
    return _me_with_settings(ident, services)


@router.get("/me/export")
def export_me(ident: Identity = Depends(me), services: Services = Depends(services_of)) -> JSONResponse:
    """Everything stored about me, as I wrote it: conversations, answers, ratings, settings."""
    data = user_export(services.store, ident.user_id, settings=_me_with_settings(ident, services))
    return JSONResponse(json.loads(json.dumps(data, default=str)),
                        headers={"Content-Disposition": 'attachment; filename="advisor-my-data.json"'})


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
    out = forget_myself(services.store, services.settings, ident.user_id, surface="api")
    services.auth.forgotten(ident.user_id)  # their sessions are deleted: stop this process's cache too
    fresh = services.auth.new_anonymous()
    response = JSONResponse({"deleted": out["deleted"], "copies": out["copies"], "new_session": me_dict(fresh)})
    if ident.via != "api-key":  # a key-derived user cannot be re-keyed by us; the caller needs a new key
        set_session(response, services.auth, fresh, request)
    return response


@router.get("/feedback/reasons")
def feedback_reasons() -> dict:
    return {"like": list(POSITIVE_REASONS), "dislike": list(NEGATIVE_REASONS)}


@router.get("/conversations")
def list_conversations(limit: int = Query(100, ge=1, le=1000), q: str | None = Query(None, max_length=200),
                       before: datetime | None = None, ident: Identity = Depends(me),
                       services: Services = Depends(services_of)) -> dict:
    """My conversations, most recently active first; `q` searches titles and text; `before`
    (the `next_before` of the previous page) pages back."""
    convs = services.store.conversations.list(ident.user_id, limit=limit, query=q, before=before)
    nxt = convs[-1].updated_at.isoformat() if len(convs) == limit else None
    return {"conversations": [conversation_dict(c) for c in convs], "next_before": nxt}


@router.patch("/conversations/{conversation_id}")
def rename_conversation(conversation_id: str, body: RenameIn, ident: Identity = Depends(me),
                        services: Services = Depends(services_of)) -> dict:
    return conversation_dict(services.store.conversations.rename(conversation_id, ident.user_id, body.title))


@router.delete("/conversations/{conversation_id}")
def delete_conversation(conversation_id: str, ident: Identity = Depends(me),
                        services: Services = Depends(services_of)) -> dict:
    """Delete one of my conversations for good: its messages, ratings, mined feedback, and every
    copy under the data directory."""
    out = delete_conversation_everywhere(services.store, services.settings, conversation_id, ident.user_id)
    return {"deleted": out["deleted"], "copies": out["copies"]}


@router.post("/conversations", status_code=201)
def create_conversation(body: ConversationIn | None = None, ident: Identity = Depends(me),
                        services: Services = Depends(services_of)) -> dict:
    try:
        conv = services.store.conversations.create(ident.user_id, title=(body.title if body else "").strip(),
                                                                source="api")
    except InvalidInput as exc:
        raise as_api_error(exc) from None
    return conversation_dict(conv)


@router.get("/conversations/{conversation_id}")
def get_conversation(conversation_id: str, leaf: str | None = None, ident: Identity = Depends(me),
                     services: Services = Depends(services_of)) -> dict:
    store = services.store
    conv = store.conversations.get(conversation_id, user_id=ident.user_id)
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
    if value == 0:
        if reasons:
            raise ApiError(400, "Taking a rating back carries no reasons.", code="invalid_reason", param="reasons")
        return []
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
    value = {"like": 1, "dislike": -1, "withdraw": 0}.get(body.value, body.value)  # type: ignore[arg-type]
    reasons = check_reasons(value, body.reasons)
    try:
        rating = services.store.conversations.rate(message_id, ident.user_id, value, reasons=reasons, comment=body.comment)
    except (InvalidInput, NotFound) as exc:
        raise as_api_error(exc) from None
    services.metrics.record_rating(value)
    return {"id": rating.id, "message_id": rating.message_id, "value": rating.value,
            "reasons": list(rating.reasons), "comment": rating.comment}


@router.post("/messages/{message_id}/choose")
def choose(message_id: str, ident: Identity = Depends(me), services: Services = Depends(services_of)) -> dict:
    services.store.conversations.choose_sibling(message_id, ident.user_id)
    return {"chosen": message_id}
