"""Request bodies and response shapes shared by the route modules."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from deploy.service.auth import Identity
from deploy.service.errors import ApiError
from deploy.service.state import Services
from store import Message
from store.attributes import Attributes, InvalidAttributes

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
    # 0 / "withdraw" takes back an earlier like or dislike (the latest rating counts).
    value: Literal[1, -1, 0, "like", "dislike", "withdraw"]
    reasons: list[str] = Field(default_factory=list, max_length=10)
    comment: str = Field(default="", max_length=2000)


class ConversationIn(BaseModel):
    title: str = Field(default="", max_length=200)


class RenameIn(BaseModel):
    title: str = Field(min_length=1, max_length=200)


class MeIn(BaseModel):
    # "Use my conversations to improve the advisor"; null: the deployment's default.
    training_consent: bool | None


class Credentials(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    password: str = Field(min_length=1, max_length=1000)


# --------------------------------------------------------------------------- shapes


def message_dict(m: Message) -> dict:
    from chat.threads import generation_dict, safety_dict

    return {"id": m.id, "conversation_id": m.conversation_id, "parent_id": m.parent_id, "role": m.role,
            "content": m.content, "status": m.status, "created_at": m.created_at.isoformat(),
            "generation": generation_dict(m), "safety": safety_dict(m)}


def conversation_dict(c) -> dict:
    return {"id": c.id, "title": c.title or "New conversation", "source": c.source,
            "created_at": c.created_at.isoformat(), "updated_at": c.updated_at.isoformat()}


def me_dict(ident: Identity) -> dict:
    return {"user_id": ident.user_id, "name": ident.name, "is_admin": ident.is_admin, "via": ident.via}
