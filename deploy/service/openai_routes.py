"""An OpenAI-compatible API (`/v1/models`, `/v1/chat/completions`, streaming and not), so any
OpenAI client or chat front end can talk to the advisor and be logged like the web UI.

Who: the bearer token (`api_key=` in the OpenAI client) names the user (see `deploy.service.auth`: the
admin token is the operator; any other value is a pseudonymous API user of its own), else the
session cookie. Each caller only ever reaches their own conversations.

Which conversation — OpenAI requests carry the whole history and no conversation id, so:
1. An explicit id wins: `metadata={"conversation_id": "…"}` or the `X-Conversation-Id` header
   (it must be one of the caller's conversations, else 404). The history is matched against
   that conversation's tree as far as it agrees; any part that differs is stored as a new
   branch from there.
2. Otherwise the history before the last user message is matched exactly against a path
   (root → some message) in the caller's recent API conversations; the new question continues
   that path. So a client that resends the growing history each turn builds one conversation,
   and a client that resends an older history (an edit) branches it.
3. No match: a new conversation, with the history stored first. Earlier assistant messages
   the client sends are stored without generation metadata (we did not generate them), so
   training-set builders can tell them apart.
If the last user message is identical to one already stored at that point, the request is a
regenerate: the new answer becomes a sibling of the old one (clients' "regenerate" button).
The response carries `conversation_id` and `message_id` as extra fields and the
`X-Conversation-Id` header, so a client can pin the conversation from then on.

Steering: an extra body field `attributes` (`extra_body={"attributes": {"verbosity": 1}}` or a
SteerLM string). OpenAI's own `verbosity` ("low"/"medium"/"high") maps to 1/2/3 when
`attributes` does not set verbosity. Sampling: `max_completion_tokens`/`max_tokens`,
`temperature`, `top_p`, `seed`. Not supported (400): `n` > 1, tools, non-text content.
The `model` field is accepted as is; what actually answered is stored with each answer.

Safety: the guard and the safety policy apply as on every surface; a caller's system messages are
kept and follow the policy in the prompt. A refused request or a replaced answer has
`finish_reason: "content_filter"` and an extra `safety` field; streamed, a replaced answer ends
with one chunk carrying the refusal (after a blank line) and that finish reason: an OpenAI client
cannot take back text it has shown, so the finish reason is the signal to discard the rest.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from chat import turns
from chat.backends import BackendError
from chat.guard import FINISH_FILTERED
from chat.threads import safety_dict
from chat.turns import Turn
from deploy.service.auth import Identity
from deploy.service.deps import me, services_of
from deploy.service.errors import ApiError, as_api_error
from deploy.service.shapes import parse_attributes
from deploy.service.state import Services
from deploy.service.streaming import guarded, run_turn_blocking, stream_turn
from store import InvalidInput, Message, NotFound, Store, clean_text

ADVISOR_MODEL = "advisor"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MATCH_RECENT = 50  # conversations searched for an implicit continuation


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class ChatCompletionIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ADVISOR_MODEL
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=1000)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=4096)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=4096)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = None
    n: int | None = Field(default=None, ge=1)
    tools: list[Any] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    # Advisor extension: SteerLM attributes (object of 0-4 integers, or a SteerLM string).
    attributes: dict[str, Any] | str | None = None


# --------------------------------------------------------------------------- request → turn


def _text(msg: ChatMessageIn, i: int) -> str:
    content = msg.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ApiError(400, f"messages[{i}]: only text content is supported.", code="unsupported_content",
                           param=f"messages[{i}].content")
        parts.append(part["text"])
    return "\n".join(parts)


def _norm(text: str) -> str:
    return _CONTROL.sub("", text).strip()


def _history(body: ChatCompletionIn, max_chars: int) -> tuple[list[tuple[str, str]], str]:
    """(earlier messages as (role, text), the new question), validated."""
    if body.n not in (None, 1):
        raise ApiError(400, "Only n=1 is supported.", code="unsupported", param="n")
    if body.tools:
        raise ApiError(400, "Tools are not supported by the advisor.", code="unsupported", param="tools")
    items = []
    for i, m in enumerate(body.messages):
        if m.role in ("tool", "function"):
            raise ApiError(400, f"messages[{i}]: {m.role} messages are not supported.", code="unsupported",
                           param=f"messages[{i}].role")
        role = "system" if m.role == "developer" else m.role
        items.append((role, _text(m, i)))
    if items[-1][0] != "user":
        raise ApiError(400, "The last message must be from the user.", code="invalid_input", param="messages")
    *prior, (_, question) = items
    try:
        question = clean_text(question, max_chars=max_chars)
        prior = [(r, clean_text(t, what=f"{r} message", max_chars=max(max_chars, 100_000)))
                 for r, t in prior if _norm(t)]
    except InvalidInput as exc:
        raise as_api_error(exc) from None
    return prior, question


def _tree(store: Store, conversation_ids: list[str]) -> dict[str, dict[str | None, list[tuple[str, str, str]]]]:
    """conversation → parent id → [(id, role, normalised text)] in creation order, in one query."""
    out: dict[str, dict[str | None, list]] = {c: {} for c in conversation_ids}
    if not conversation_ids:
        return out
    for m in store.conversations.message_nodes(conversation_ids):
        if m.status != "error":
            out[m.conversation_id].setdefault(m.parent_id, []).append((m.id, m.role, _norm(m.content)))
    return out


def _walk(children: dict, prior: list[tuple[str, str]]) -> tuple[int, str | None]:
    """How many of `prior` match a path from the root, and the last matched message id.
    Among identical siblings the newest wins (it is the one the client most likely saw)."""
    node, matched = None, 0
    for role, text in prior:
        hits = [mid for mid, r, t in children.get(node, []) if r == role and t == _norm(text)]
        if not hits:
            break
        node, matched = hits[-1], matched + 1
    return matched, node


def _locate(store: Store, user_id: str, prior: list[tuple[str, str]], explicit: str | None) -> tuple[str | None, int, str | None]:
    """(conversation id or None for new, how many prior messages already stored, parent id)."""
    if explicit:
        store.conversations.get(explicit, user_id=user_id)  # NotFound for others' and unknown ids
        matched, node = _walk(_tree(store, [explicit])[explicit], prior)
        return explicit, matched, node
    if not prior:
        return None, 0, None
    recent = [c.id for c in store.conversations.list(user_id, limit=_MATCH_RECENT) if c.source == "openai"]
    trees = _tree(store, recent)
    for conv in recent:  # newest first
        matched, node = _walk(trees[conv], prior)
        if matched == len(prior):
            return conv, matched, node
    return None, 0, None


def _existing_question(store: Store, conversation_id: str, parent_id: str | None, question: str) -> Message | None:
    children = _tree(store, [conversation_id])[conversation_id].get(parent_id, [])
    same = [mid for mid, role, text in children if role == "user" and text == _norm(question)]
    return store.conversations.get_message(same[-1]) if same else None


def submit(services: Services, ident: Identity, body: ChatCompletionIn, explicit: str | None) -> Turn:
    store = services.store
    prior, question = _history(body, services.settings.server.max_message_chars)
    attributes = parse_attributes(body.attributes)
    if body.verbosity and not (isinstance(body.attributes, dict) and "verbosity" in body.attributes):
        attributes = attributes.replace(verbosity={"low": 1, "medium": 2, "high": 3}[body.verbosity])
    params = services.sampling(
        max_new_tokens=body.max_completion_tokens or body.max_tokens, temperature=body.temperature,
        top_p=body.top_p, seed=body.seed,
    )
    ctx = services.turn_context("openai")
    with store.transaction():  # locating and storing the history is one step: no half-stored history
        conv_id, matched, parent = _locate(store, ident.user_id, prior, explicit)
        if conv_id is None:
            conv_id = store.conversations.create(ident.user_id, source="openai").id
        for role, text in prior[matched:]:
            parent = store.conversations.add_message(conv_id, role, text, parent_id=parent).id
        again = _existing_question(store, conv_id, parent, question) if matched == len(prior) else None
    if again is not None:
        return guarded(services, turns.regenerate, ctx, user_id=ident.user_id, message_id=again.id,
                        attributes=attributes, params=params)
    return guarded(services, turns.send, ctx, user_id=ident.user_id, text=question, conversation_id=conv_id,
                    parent_id=parent, attributes=attributes, params=params)


# --------------------------------------------------------------------------- response shapes


def _usage(turn: Turn) -> dict:
    gen = turn.generation
    p = (gen.prompt_tokens if gen else None) or 0
    c = (gen.completion_tokens if gen else None) or 0
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _finish_reason(turn: Turn) -> str:
    if turn.filtered:
        return FINISH_FILTERED
    reason = turn.generation.finish_reason if turn.generation else "stop"
    return "length" if reason == "length" else "stop"


def _model(services: Services, turn: Turn | None = None) -> str:
    if turn is not None and turn.generation is not None:
        return turn.generation.model
    try:
        return services.backend.model
    except BackendError:  # a server that is down cannot name its model; the answer will say why
        return ADVISOR_MODEL


def completion(services: Services, turn: Turn, created: int) -> dict:
    answer = turn.answer
    return {
        "id": f"chatcmpl-{answer.id}", "object": "chat.completion", "created": created,
        "model": _model(services, turn),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.content},
                     "finish_reason": _finish_reason(turn), "logprobs": None}],
        "usage": _usage(turn),
        "conversation_id": turn.conversation_id, "message_id": answer.id,
        "user_message_id": turn.user_message.id, "safety": safety_dict(answer),
    }


def _chunk_encoder(services: Services, turn: Turn, created: int, include_usage: bool):
    chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
    base = {"id": chunk_id, "object": "chat.completion.chunk", "created": created,
            "model": _model(services), "conversation_id": turn.conversation_id}

    def data(obj: dict) -> bytes:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()

    def encode(kind: str, payload: Any) -> bytes:
        if kind == "start":
            return data({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                              "finish_reason": None, "logprobs": None}]})
        if kind == "delta":
            return data({**base, "choices": [{"index": 0, "delta": {"content": payload},
                                              "finish_reason": None, "logprobs": None}]})
        if kind == "replace":  # the guard withdrew the answer: the refusal, then the finish reason says so
            return data({**base, "choices": [{"index": 0, "delta": {"content": f"\n\n{payload}"},
                                              "finish_reason": None, "logprobs": None}]})
        if kind == "done":
            out = data({**base, "model": _model(services, turn), "message_id": turn.answer.id,
                        "safety": safety_dict(turn.answer),
                        "choices": [{"index": 0, "delta": {}, "finish_reason": _finish_reason(turn),
                                     "logprobs": None}]})
            if include_usage:
                out += data({**base, "choices": [], "usage": _usage(turn)})
            return out + b"data: [DONE]\n\n"
        return data({"error": {**payload, "param": None}}) + b"data: [DONE]\n\n"

    return encode


# --------------------------------------------------------------------------- routes

router = APIRouter(prefix="/v1")


@router.get("/models")
def list_models(services: Services = Depends(services_of)) -> dict:
    created = int(time.time())
    served = _model(services)
    names = [ADVISOR_MODEL] + ([served] if served != ADVISOR_MODEL else [])
    return {"object": "list",
            "data": [{"id": n, "object": "model", "created": created, "owned_by": "advisor"} for n in names]}


@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionIn, request: Request, ident: Identity = Depends(me),
                           services: Services = Depends(services_of)):
    explicit = (body.metadata or {}).get("conversation_id") or request.headers.get("x-conversation-id")
    try:
        turn = await run_in_threadpool(submit, services, ident, body, explicit)
    except NotFound as exc:
        services.metrics.record_error("not_found")
        raise as_api_error(exc) from None
    created = int(time.time())
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return stream_turn(services, turn, "openai", encode=_chunk_encoder(services, turn, created, include_usage),
                           key=ident.user_id)
    await run_in_threadpool(run_turn_blocking, services, turn, "openai", ident.user_id)
    return JSONResponse(completion(services, turn, created), headers={"X-Conversation-Id": turn.conversation_id})


def install(app: FastAPI) -> None:
    app.include_router(router)
