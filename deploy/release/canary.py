"""Canary releases: a release that passed the gate serves a share of users and is judged online.

    start_canary(store, backend, release_id, settings)        # after the gate (the cycle does it)
    verdict = judge(store, canary, settings)                  # continue | promote | rollback | inconclusive
    finish(store, backend, canary, verdict.action, ...)       # or by hand: promote / rollback / stop

Design choices:
- State on the release row, no migration: a canary is a release with status `candidate` whose
  `decision["canary"]` says `state: running` (with its key, share, start, budget and the last
  check's numbers). Ending it writes the outcome there too: `promoted` (the release goes live),
  `rolled_back` (status `rejected`), `inconclusive` (the rule could not tell by the deadline; it
  stays a candidate) or `stopped` (by hand; it stays a candidate). Every replica
  reads the same row, so they route users alike.
- Sticky, unguessable assignment: a user is in the canary arm when HMAC-SHA256(key, user id),
  read as a number in [0, 1), is below `share`. The key is random per canary, so each canary
  draws a fresh set of users and nobody can pick their arm from the user id alone; the same user
  gets the same arm for the canary's whole life, so their reactions are to one release.
- Two arms in one server: the canary's adapter is loaded beside the live one under its release id
  (`backend.load_adapter`) and each request of a canary user pins it by name; everyone else gets
  the active (live) adapter. Each answer stores its release and arm (`generation.arm`).
- The rule (see `judge`; docs/canary.md): per answer, good = liked or followed by mined positive
  feedback; bad = disliked, or followed by a rephrase or a correction. For both rates, an
  always-valid 1 − α confidence sequence of canary − live (`evaluator.sequential`: normal mixture,
  variance clustered by user), so checking as often as we like does not add false alarms. Once
  both arms have `min_answers`, at any check: roll back when it shows the canary worse than live
  by more than `rollback_margin` (0: worse at all; bad-rate lower end above it, or good-rate upper
  end below minus it); else promote when it shows non-inferiority (bad-rate upper end ≤ tolerance
  and good-rate lower end ≥ −tolerance).
  When the budget is spent (`max_conversations` canary conversations or `max_hours`) with
  neither shown, or too few answers, the outcome is `inconclusive`: the live release stays, the
  canary stops serving and its release stays a candidate (its canary can be started again).
  α is split evenly between the two rates' sides, so the chance of rolling back a canary as good
  as live is ≤ α in all, however often it is checked (bench/canary_sim.py measures it).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from deploy.release.registry import ReleaseError, promote, swap_lock
from evaluator.sequential import ArmSums, difference_sequence
from store import Release, Store
from store.analytics import extractor_versions
from store.outcomes import AnswerOutcome, answer_outcomes

LIVE_ARM, CANARY_ARM = "live", "canary"
# How each ending is written on the release row (`decision.canary.state`).
ENDINGS = {"promote": "promoted", "rollback": "rolled_back", "inconclusive": "inconclusive", "stop": "stopped"}
INCONCLUSIVE_NEXT = ("the live release stays and this release stays a candidate: start its canary again for more "
                     "answers (a longer `canary.max_hours` or larger `canary.share`), or promote it by hand")
RATES = ("like", "dislike", "positive", "rephrase", "correction", "continued", "good", "bad")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def in_canary(key: str, user_id: str, share: float) -> bool:
    """Whether `user_id` is in the canary arm: HMAC-SHA256 under the canary's key, as [0, 1)."""
    digest = hmac.new(bytes.fromhex(key), user_id.encode("utf-8"), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def canary_state(release: Release | None) -> dict:
    return dict((release.decision or {}).get("canary") or {}) if release is not None else {}


def running_canary(store: Store) -> Release | None:
    """The release whose canary is running, if any (at most one at a time)."""
    for release in store.releases.list(limit=200):
        if release.status == "candidate" and canary_state(release).get("state") == "running":
            return release
    return None


def public_state(release: Release) -> dict:
    """The canary's state without its key (for the API, the panel and reports)."""
    return {k: v for k, v in canary_state(release).items() if k != "key"}


# --------------------------------------------------------------------------- starting


def start_canary(store: Store, backend: Any, release_id: str, settings: Any, *, force: bool = False) -> Release:
    """Make a gated candidate the canary: load its adapter beside the live one, record the state."""
    release = store.releases.get(release_id)
    if release.status != "candidate":
        raise ReleaseError(f"Release {release_id} is {release.status}; only a candidate becomes a canary.")
    if not force and not (release.decision or {}).get("promote"):
        raise ReleaseError(f"Release {release_id} has not passed the gate; gate it first (or pass --force).")
    other = running_canary(store)
    if other is not None and other.id != release_id:
        raise ReleaseError(f"Release {other.id} is already the canary; promote, roll back or stop it first.")
    if not release.adapter_path:
        raise ReleaseError(f"Release {release_id} has no adapter; a canary serves an adapter beside the live release.")
    if backend is not None:
        load_canary(backend, release)
    live = store.releases.live()
    cs = settings.canary
    started = _now()
    state = {"state": "running", "key": secrets.token_hex(16), "share": cs.share,
             "started_at": started.isoformat(timespec="seconds"),
             "ends_at": (started + timedelta(hours=cs.max_hours)).isoformat(timespec="seconds"),
             "max_conversations": cs.max_conversations, "min_answers": cs.min_answers,
             "tolerance": cs.tolerance, "alpha": cs.alpha, "mixture_scale": cs.mixture_scale,
             "rollback_margin": cs.rollback_margin,
             "live_release": live.id if live else None, "checks": 0}
    return store.releases.set_status(release_id, "candidate", decision={**release.decision, "canary": state})


def load_canary(backend: Any, release: Release) -> None:
    """Put the canary's adapter in the backend beside the active one (not activated)."""
    loader = getattr(backend, "load_adapter", None)
    if loader is None:
        raise ReleaseError(f"The {getattr(backend, 'kind', '?')} backend cannot serve two adapters at once, "
                           "so it cannot run a canary; promote the release directly instead.")
    loader(release.id, release.adapter_path)


# --------------------------------------------------------------------------- judging


@dataclass
class ArmStats:
    answers: int = 0
    users: int = 0
    conversations: int = 0
    rates: dict[str, float | None] = field(default_factory=dict)


@dataclass
class Verdict:
    action: str  # continue | promote | rollback | inconclusive
    reason: str
    arms: dict[str, dict] = field(default_factory=dict)
    intervals: dict[str, dict] = field(default_factory=dict)  # good / bad: canary − live, always valid
    # Per arm, the mined feedback events behind its rates by "<extractor> <version>": the rates are
    # only as precise as that version (the operator's review panel estimates it per version).
    extractors: dict[str, dict[str, int]] = field(default_factory=dict)
    checked_at: str = field(default_factory=lambda: _now().isoformat(timespec="seconds"))

    def as_dict(self) -> dict:
        return asdict(self)


def _flags(o: AnswerOutcome) -> dict[str, bool]:
    return {"like": o.liked, "dislike": o.disliked, "positive": o.positive, "rephrase": o.rephrase,
            "correction": o.correction, "continued": o.continued, "good": o.liked or o.positive,
            "bad": o.disliked or o.rephrase or o.correction}


def arm_stats(outcomes: list[AnswerOutcome]) -> ArmStats:
    flags = [_flags(o) for o in outcomes]
    n = len(outcomes)
    rates = {r: (sum(f[r] for f in flags) / n if n else None) for r in RATES}
    return ArmStats(answers=n, users=len({o.user_id for o in outcomes}),
                    conversations=len({o.conversation_id for o in outcomes}), rates=rates)


def _per_user(outcomes: list[AnswerOutcome], rate: str) -> tuple[np.ndarray, np.ndarray]:
    """(events, answers) per user: the clusters of the variance."""
    users: dict[str, list[int]] = {}
    for o in outcomes:
        cell = users.setdefault(o.user_id, [0, 0])
        cell[0] += _flags(o)[rate]
        cell[1] += 1
    arr = np.asarray(list(users.values()), dtype=float).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def rate_interval(canary: list[AnswerOutcome], live: list[AnswerOutcome], rate: str, *, alpha: float,
                  tau: float) -> dict:
    """The always-valid 1 − α interval of canary − live for `rate` (`evaluator.sequential`),
    answers clustered by user within each arm."""
    sums = [ArmSums.of(*_per_user(rows, rate)) for rows in (canary, live)]
    seq = difference_sequence(*sums, alpha=alpha, tau=tau)
    return {"diff": float(seq["diff"]), "low": float(seq["low"]), "high": float(seq["high"]),
            "se": float(np.sqrt(seq["variance"])), "users": [int(x.users) for x in sums],
            "answers": [int(x.answers) for x in sums], "alpha": alpha, "tau": tau}


def outcomes_by_arm(store: Store, canary: Release) -> dict[str, list[AnswerOutcome]]:
    state = canary_state(canary)
    live_id = state.get("live_release")
    since = datetime.fromisoformat(state["started_at"])
    rows = answer_outcomes(store, [canary.id] + ([live_id] if live_id else []), since)
    return {CANARY_ARM: [o for o in rows if o.arm == CANARY_ARM and o.release_id == canary.id],
            LIVE_ARM: [o for o in rows if o.arm == LIVE_ARM and o.release_id == live_id]}


def judge(store: Store, canary: Release, settings: Any, *, now: datetime | None = None) -> Verdict:
    """Apply the rule (module docstring) to the canary's answers so far."""
    arms = outcomes_by_arm(store, canary)
    verdict = _decide(canary, settings, arms, now)
    verdict.extractors = {arm: extractor_versions(store, answers=[o.id for o in rows]) for arm, rows in arms.items()}
    return verdict


def _decide(canary: Release, settings: Any, arms: dict[str, list[AnswerOutcome]], now: datetime | None) -> Verdict:
    state, cs = canary_state(canary), settings.canary
    stats = {arm: asdict(arm_stats(rows)) for arm, rows in arms.items()}
    ended_by = None
    if stats[CANARY_ARM]["conversations"] >= state.get("max_conversations", cs.max_conversations):
        ended_by = f"{stats[CANARY_ARM]['conversations']} canary conversations"
    elif (now or _now()) >= datetime.fromisoformat(state["ends_at"]):
        ended_by = f"{state['ends_at']} reached"
    need = state.get("min_answers", cs.min_answers)
    tol = state.get("tolerance", cs.tolerance)
    alpha, tau = state.get("alpha", cs.alpha), state.get("mixture_scale", cs.mixture_scale)
    margin = state.get("rollback_margin", cs.rollback_margin)
    counts = f"canary {stats[CANARY_ARM]['answers']}, live {stats[LIVE_ARM]['answers']} answers"
    if min(stats[CANARY_ARM]["answers"], stats[LIVE_ARM]["answers"]) < need:
        if ended_by:
            return Verdict("inconclusive", f"budget spent ({ended_by}) with too few answers to judge ({counts}; "
                                           f"need {need} per arm); {INCONCLUSIVE_NEXT}", stats)
        return Verdict("continue", f"collecting: {counts} (need {need} per arm)", stats)
    ivs = {rate: rate_interval(arms[CANARY_ARM], arms[LIVE_ARM], rate, alpha=alpha, tau=tau) for rate in ("bad", "good")}
    bad, good = ivs["bad"], ivs["good"]
    shown = (f"bad rate Δ {bad['diff']:+.3f} [{bad['low']:+.3f}, {bad['high']:+.3f}], good rate Δ "
             f"{good['diff']:+.3f} [{good['low']:+.3f}, {good['high']:+.3f}] (canary − live, always-valid "
             f"{100 * (1 - alpha):.0f}% interval; {counts})")
    if bad["low"] > margin or good["high"] < -margin:  # checked first: a canary shown worse is never promoted
        worse = f"by more than {margin:.2f}" if margin else "than live"
        return Verdict("rollback", f"canary shown worse {worse}: {shown}", stats, ivs)
    if bad["high"] <= tol and good["low"] >= -tol:
        return Verdict("promote", f"non-inferior within {tol:.2f}: {shown}", stats, ivs)
    if ended_by:
        return Verdict("inconclusive", f"neither worse nor non-inferior shown within {tol:.2f} after {ended_by}: "
                                       f"{shown}; {INCONCLUSIVE_NEXT}", stats, ivs)
    return Verdict("continue", f"not decided yet: {shown}", stats, ivs)


def record_check(store: Store, canary: Release, verdict: Verdict) -> Release:
    state = {**canary_state(canary), "last_check": verdict.as_dict()}
    state["checks"] = int(state.get("checks", 0)) + 1
    return store.releases.set_status(canary.id, canary.status, decision={**canary.decision, "canary": state})


# --------------------------------------------------------------------------- ending


def finish(store: Store, backend: Any, canary: Release, action: str, reason: str, *, by: str = "rule") -> Release:
    """End the canary: `promote` (it goes live), `rollback` (rejected), `inconclusive` (the rule
    could not tell by the deadline) or `stop` (by hand); after the last two it stays a candidate.
    The live release keeps serving everyone unless it is promoted."""
    if action not in ENDINGS:
        raise ValueError(f"unknown canary action {action!r}")
    state = canary_state(canary)
    if state.get("state") != "running":
        raise ReleaseError(f"Release {canary.id} has no running canary (state: {state.get('state', 'none')}).")
    ended = {**state, "state": ENDINGS[action],
             "ended_at": _now().isoformat(timespec="seconds"), "ended_by": by, "outcome": reason}
    decision = {**canary.decision, "canary": ended}
    if action == "promote":
        store.releases.set_status(canary.id, "candidate", decision=decision)
        return promote(store, backend, canary.id)
    # The adapter stays loaded: a replica that has not yet re-read the canary may still route a
    # user to it, and that request must not fail. The next promotion's `retire_adapters` frees it.
    return store.releases.set_status(canary.id, "rejected" if action == "rollback" else "candidate",
                                             decision=decision)


# --------------------------------------------------------------------------- in the running service


def start_in_service(services: Any, release_id: str, *, force: bool = False) -> Release:
    """Start a canary in a running service (`deploy.service.state.Services`): users are routed at once."""
    with swap_lock(services):
        release = start_canary(services.store, services.backend, release_id, services.settings, force=force)
        services.refresh_canary()
    return release


def finish_in_service(services: Any, action: str, reason: str, *, by: str = "rule",
                      release_id: str | None = None) -> Release:
    """End the running canary in a running service; routing changes before this returns."""
    with swap_lock(services):
        canary = running_canary(services.store)
        if canary is None or (release_id is not None and canary.id != release_id):
            raise ReleaseError(f"No running canary{' ' + release_id if release_id else ''} to {action}.")
        release = finish(services.store, services.backend, canary, action, reason, by=by)
        services.refresh_release()
        services.refresh_canary()
    return release


def check_canary(store: Store, settings: Any, end: Callable[[Release, Verdict], Any]) -> dict:
    """Judge the running canary, record the numbers and, unless the verdict is to continue, end it
    with `end(canary, verdict)` (the running service's hand-off, or `finish` on the store alone)."""
    canary = running_canary(store)
    if canary is None:
        return {"status": "skipped", "reason": "no canary is running"}
    verdict = judge(store, canary, settings)
    record_check(store, canary, verdict)
    if verdict.action != "continue":
        end(canary, verdict)
    return {"release_id": canary.id, **verdict.as_dict()}


def check_in_service(services: Any) -> dict:
    """One scheduled check in a running service; a verdict to end it changes routing at once."""
    return check_canary(services.store, services.settings, lambda canary, verdict: finish_in_service(
        services, verdict.action, verdict.reason, by="rule", release_id=canary.id))


def last_canary(store: Store) -> Release | None:
    """The running canary, else the release whose canary ended last; None before the first."""
    running = running_canary(store)
    if running is not None:
        return running
    ended = [r for r in store.releases.list(limit=200) if canary_state(r).get("ended_at")]
    return max(ended, key=lambda r: canary_state(r)["ended_at"]) if ended else None


def canary_overview(store: Store, settings: Any) -> dict:
    """What the operator sees: the canary's state and, side by side, both arms' numbers — judged
    now while it runs (nothing is acted on here), as last judged once it has ended."""
    release = last_canary(store)
    if release is None:
        return {"canary": None, "verdict": None}
    state = public_state(release)
    verdict = judge(store, release, settings).as_dict() if state.get("state") == "running" else state.get("last_check")
    return {"canary": {"release_id": release.id, "status": release.status, **state}, "verdict": verdict}
