"""`Services`: the objects every handler of one service needs, hung off `app.state.services`.

Never module globals, so two apps can live in one process (tests). The lifespan fills in the
store, the backend and the job registry; `refresh_release` puts the live release's adapter on
the backend after a promotion or rollback, and `retry_release` applies it once a model server
that was down at start comes back.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from chat.backends import Backend, BackendError, SamplingParams
from chat.guard import Guard
from chat.inflight import ChatHooks, InFlight, ServiceClosing
from chat.turns import TurnContext
from deploy.service.auth import Auth
from deploy.service.metrics import Metrics
from deploy.serving.factory import sampling_params, turn_context, use_live_release
from deploy.settings import Settings
from store import Store

log = logging.getLogger("advisor.service")

RELEASE_RETRY_S = 5.0
# How long a replica serves from its cached view of the running canary before re-reading it: a
# canary started or ended by another replica reaches this one within that time.
CANARY_REFRESH_S = 5.0


@dataclass
class Services:
    """The objects every handler needs. `store`/`backend` are set by the lifespan."""

    settings: Settings
    metrics: Metrics
    inflight: InFlight = field(default_factory=InFlight)
    store: Store | None = None
    backend: Backend | None = None
    guard: Guard | None = None  # the safety guard every turn runs through (None: switched off)
    auth: Auth | None = None
    jobs: Any = None  # deploy.loop.jobs.JobRegistry, once started
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
    # The running canary as (release id, key, share), or None; re-read every CANARY_REFRESH_S and
    # at once after this service starts, promotes, rolls back or ends one (`refresh_canary`).
    _canary: tuple[str, str, float] | None = None
    _canary_read_at: float = 0.0

    def turn_context(self, source: str) -> TurnContext:
        if self.store is None or self.backend is None:
            raise RuntimeError("The service is still starting; try again in a moment.")
        if self.inflight.closing:
            raise ServiceClosing("The service is restarting; send your message again in a moment.")
        self.retry_release()
        ctx = turn_context(self.settings, self.store, self.backend, source=source, release_id=self.release_id,
                           guard=self.guard)
        ctx.release_of = self.release_of  # log the release the answer really came from (see TurnContext)
        ctx.route = self.route  # which arm (live or canary) answers each user
        return ctx

    def route(self, user_id: str) -> tuple[str | None, str]:
        """(adapter to pin, arm) for a user: the canary's adapter for users in its share, else the
        active (live) one. A canary whose adapter is not loaded here routes nobody."""
        from deploy.release.canary import CANARY_ARM, LIVE_ARM, in_canary

        if time.monotonic() >= self._canary_read_at:
            self.refresh_canary()
        canary = self._canary
        if canary is not None and canary[0] in self.backend.adapters and in_canary(canary[1], user_id, canary[2]):
            return canary[0], CANARY_ARM
        return None, LIVE_ARM

    def refresh_canary(self) -> None:
        """Re-read the running canary and make sure its adapter is loaded beside the live one."""
        from deploy.release.canary import canary_state, load_canary, running_canary
        from deploy.release.registry import serves_base

        self._canary_read_at = time.monotonic() + CANARY_REFRESH_S
        release = running_canary(self.store) if self.store is not None else None
        if release is None or self.backend is None or not serves_base(self.backend, release.base_model):
            self._canary = None
            return
        try:
            if release.id not in self.backend.adapters:
                load_canary(self.backend, release)
        except Exception as exc:  # noqa: BLE001 - a canary that cannot load here serves nobody here
            log.warning("the canary %s cannot be served by this replica: %s", release.id, exc)
            self._canary = None
            return
        state = canary_state(release)
        self._canary = (release.id, state["key"], float(state["share"]))

    def release_of(self, adapter: str | None) -> str | None:
        """The release behind a pinned adapter: the registry loads each release's adapter under the
        release id, and no adapter is this base model's adapter-less release."""
        if adapter:
            return adapter
        if self._no_adapter_release is None:  # None is not cached: the release may not exist yet
            from deploy.release.registry import no_adapter_release

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
