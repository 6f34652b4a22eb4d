"""The operator audit log's one way in: every surface that lets an operator act — the admin API,
the command line, the operator screen — wraps the action in `audited(...)`, so each records the
same words and none can forget the outcome.

Vocabulary (the `action` column; `target` in brackets):
- promote [release id] (details: force), rollback [the release now live], refresh [release]
- job [job kind] — a job started by an operator (API, screen button; details: job_id, params)
- gate [run id], train [run id], cancel [run id], cycle, extract — the CLI's direct runs
  (through `--url` they go via the API and are recorded there as `job`)
- forget [user id] (details: rows deleted per table, unreached_exports: paths of exports outside
  the data directory that may still hold the user's data), export [format] (details: to, rows,
  export_id: every export is also an `exports` row, `note_export`, so forgetting can name it)
- review [feedback event id] — an operator's verdict on a mined event (details: verdict, category,
  review_id); surfaces: api, operator
- consent [user id] — a user's training consent changed by the service, not by them: signing in
  merges a guest session and the stricter consent is kept (details: old, new, reason, guest);
  the actor is the user who signed in; surfaces: api, ui
- safety_mark [answer id] — an operator's mark on an answer the safety guard refused or replaced
  (details: label wrong|right, mark_id); surface: operator
Actors: the signed-in admin's user id ("admin" for `server.admin_user`), "admin-token" for the
bearer token, "cli:<os user>" for a command run on the database directly; a person's own user
id for what happened to their own data at their request ("Delete my data": forget with surface
api | ui; signing in: consent). `details.surface` says
which surface it came through (api | operator | cli).

Design choices:
- Outcome is recorded, not only success: `details.outcome` is "ok", "refused" (the action said no:
  rejected by the gate, nothing to roll back to, unknown id) or "failed" (an error), with
  `details.error`. An operator trying to force something is worth knowing about too.
- A failure to write the audit row is logged loudly but does not undo or fail the action, which
  has already happened: turning a done promotion into an error would mislead more than help.
- Runtime settings: none of the loop's settings can be changed while the service runs (they are
  read at start), so there is nothing of that kind to record yet.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from store import InvalidInput, NotFound, Store, StoreError
from store.privacy import STDOUT

log = logging.getLogger("advisor.audit")

ACTIONS = ("promote", "rollback", "refresh", "job", "gate", "train", "cancel", "cycle", "extract", "forget",
           "export", "review", "consent", "safety_mark")


@dataclass
class Pending:
    """The entry being written: a surface may fill in the target or details once it knows them
    (a new run's id, how many rows went)."""

    target: str
    details: dict[str, Any] = field(default_factory=dict)


def actor_of(identity: Any) -> str:
    """The audit actor for a service caller (`deploy.service.auth.Identity`)."""
    if getattr(identity, "via", None) == "admin-token":
        return "admin-token"
    return str(getattr(identity, "user_id", None) or "unknown")


def cli_actor() -> str:
    """The audit actor for a command run on the database directly: the OS user running it."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no passwd entry (some containers)
        return "cli"


def _outcome(exc: BaseException) -> str:
    return "refused" if isinstance(exc, (InvalidInput, NotFound, LookupError)) else "failed"


@contextmanager
def audited(store: Store, actor: str, action: str, target: str = "", *, surface: str,
            **details: Any) -> Iterator[Pending]:
    """Run an operator action and record it with its outcome; the action's exception passes through."""
    pending = Pending(target=target, details={"surface": surface, **details})
    try:
        yield pending
    except Exception as exc:
        record(store, actor, action, pending.target,
               {**pending.details, "outcome": _outcome(exc), "error": str(exc)[:500]})
        raise
    record(store, actor, action, pending.target, {**pending.details, "outcome": "ok"})


def record(store: Store, actor: str, action: str, target: str, details: dict[str, Any]) -> None:
    """Append one entry; never raises (see the module docstring)."""
    try:
        store.audit.record(actor, action, target, details)
    except (StoreError, OSError, ValueError, TypeError):
        log.exception("could not write the audit entry %s %s %s %s", actor, action, target, details)


def note_export(store: Store, entry: Pending, actor: str, what: str, path: str | Path, rows: int) -> str:
    """Inside an audited "export": remember where it was written (`Privacy.record_export`, so that
    forgetting a user can name the copy) and put it in the audit entry. Returns the recorded path
    (absolute, or "stdout")."""
    where = STDOUT if str(path) == STDOUT else str(Path(path).resolve())
    export = store.privacy.record_export(actor, what, where, rows)
    entry.details.update(to=where, rows=rows, export_id=export.id)
    return where


def record_review(store: Store, actor: str, event_id: str, verdict: str, category: str | None, *,
                  surface: str) -> dict:
    """An operator's verdict on a mined feedback event (`Events.add_review`), audited with its
    outcome; the one way the admin API and the operator screen record one. Raises the store's
    NotFound / InvalidInput."""
    with audited(store, actor, "review", event_id, surface=surface, verdict=verdict,
                 category=category or None) as entry:
        review = store.events.add_review(event_id, actor, verdict, category or None)
        entry.details["review_id"] = review.id
    return review.as_dict()


def record_safety_mark(store: Store, actor: str, message_id: str, label: str, *, surface: str) -> dict:
    """An operator's mark on a refusal (`SafetyMarks.mark`: "wrong" = it should have been answered),
    audited with its outcome. Raises the store's NotFound / InvalidInput."""
    with audited(store, actor, "safety_mark", message_id, surface=surface, label=label) as entry:
        mark = store.safety.mark(message_id, actor, label)
        entry.details["mark_id"] = mark.id
    return mark.as_dict()
