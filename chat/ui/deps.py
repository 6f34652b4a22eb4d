"""`UIDeps`: what the web UI needs from the composition root, all late-bound."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chat.inflight import ChatHooks, InFlight
from chat.turns import TurnContext
from store import Store


@dataclass
class UIDeps:
    """What the UI needs from the composition root (deploy); all late-bound, because the store
    and backend are opened by the service's lifespan after the UI is built."""

    store: Callable[[], Store]
    turn_context: Callable[[str], TurnContext]  # source → context
    sampling: Callable[..., Any]  # overrides → chat.backends.SamplingParams
    identify: Callable[[Any], Any]  # gr.Request → Identity (user_id, name, is_admin) | None
    inflight: InFlight
    hooks: ChatHooks
    max_message_chars: int = 8000
    # People's data (docs/design.md, "People's data"): the notice a first visit shows, the deployment's default for
    # "use my conversations to improve the advisor", and deleting that reaches every copy under the
    # data directory (the composition root's `forget_everywhere` / `delete_conversation_everywhere`).
    privacy_notice: list[str] = field(default_factory=list)
    consent_default: bool = True
    forget: Callable[[str], dict] | None = None  # user id → what was deleted
    delete_conversation: Callable[[str, str], dict] | None = None  # (conversation id, user id) → ...
