"""People's data across the whole data directory: forgetting a user, deleting one conversation,
and the retention sweep, each reaching every copy; and what training-set builds must respect.

Design choices:
- One function per action, called by every surface (the chat page, the REST API, the CLI, the
  retention job), so none can forget a step: take the footprint (ids and distinctive texts)
  while the rows exist; delete the rows in one transaction (`store`); purge the copies
  under the data directory (`feedback.purge`: training snapshots, dataset directories, reports,
  exports); reclaim the database's freed space (`Privacy.reclaim_space`: the DuckDB file is
  rewritten, PostgreSQL VACUUMs the touched tables). Exports recorded outside the data
  directory (`Privacy.record_export`) cannot be purged: forgetting names them instead.
- Synchronous: forgetting is rare, and "deleted" should mean deleted when the answer comes back.
  On a large data directory it takes seconds (compaction ≈ 2 s per 400k messages here).
- Adapter weights trained on a forgotten user's conversations cannot be un-trained: the store
  knows which releases those are (`run_users`), the registry shows "trained on data of N users
  since deleted", and the operator retires the release or runs a cycle, which trains without them.
- Training-set builds get `consent_default` (the deployment's default for users who did not
  choose) and the PII redactor from here, so every path that builds a set applies both.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from deploy.audit import audited
from deploy.loop.jobs import JobContext, JobRegistry
from deploy.settings import Settings
from feedback.purge import purge_copies
from store import Store
from store.privacy import STDOUT, Footprint

_REDACTOR: dict[str, Any] = {}
_REDACTOR_LOCK = threading.Lock()


def training_data_rules(settings: Settings) -> dict[str, Any]:
    """`consent_default` and `redactor` for `build_dataset` / `launch_training`."""
    return {"consent_default": settings.privacy.training_default, "redactor": redactor(settings)}


def redactor(settings: Settings) -> Any:
    """The PII redactor, built once per process (Presidio loads for seconds), or None when off."""
    if not settings.privacy.redact_training_data:
        return None
    with _REDACTOR_LOCK:
        if "spacy" not in _REDACTOR:
            from feedback.pii import Redactor

            _REDACTOR["spacy"] = Redactor()
        return _REDACTOR["spacy"]


def _purge(store: Store, settings: Settings, footprint: Footprint) -> dict[str, Any]:
    report = purge_copies(settings.data_path, footprint, exclude=[store.path])
    store.privacy.reclaim_space(full=settings.privacy.vacuum_full)
    return report.as_dict()


def unreached_exports(store: Store, settings: Settings, since: datetime | None) -> list[str]:
    """Paths of the exports written since `since` (the user's first conversation) that the purge
    of the data directory cannot reach: written elsewhere, or to stdout. They may still hold the
    user's data; the operator must delete them by hand."""
    if since is None:
        return []
    root = settings.data_path.resolve()
    return [e.path for e in store.privacy.exports_since(since)
            if e.path == STDOUT or not Path(e.path).resolve().is_relative_to(root)]


def unreached_sentence(paths: list[str]) -> str:
    """What forgetting says about the copies it could not reach (CLI output, audit entry)."""
    if not paths:
        return "no export written since the user's first conversation lies outside the data directory"
    return ("exports written before the forget that may still hold this user's data: " + ", ".join(paths)
            + " (outside the data directory: delete or re-export them by hand)")


def forget_everywhere(store: Store, settings: Settings, user_id: str) -> dict[str, Any]:
    """Forget a user: their rows, the copies of them under the data directory, the freed bytes;
    and name the exports outside the data directory that may hold them (`unreached_exports`)."""
    footprint = store.privacy.user_footprint(user_id)
    since = store.privacy.first_activity(user_id)
    deleted = store.privacy.forget_user(user_id)
    return {"deleted": deleted, "copies": _purge(store, settings, footprint),
            "unreached_exports": unreached_exports(store, settings, since)}


def forget_myself(store: Store, settings: Settings, user_id: str, *, surface: str) -> dict[str, Any]:
    """"Delete my data" (chat page, `DELETE /api/me`): `forget_everywhere`, audited with the user as
    actor, so the operator learns of exports outside the data directory that may hold their data
    (the person is not shown the operator's paths)."""
    with audited(store, user_id, "forget", user_id, surface=surface) as entry:
        out = forget_everywhere(store, settings, user_id)
        entry.details.update(deleted=out["deleted"], unreached_exports=out["unreached_exports"])
    return out


def delete_conversation_everywhere(store: Store, settings: Settings, conversation_id: str,
                                   user_id: str) -> dict[str, Any]:
    """Delete one of the user's conversations the same way (NotFound if it is not theirs)."""
    footprint = store.privacy.conversation_footprint(conversation_id, user_id)
    deleted = store.privacy.delete_conversation(conversation_id, user_id)
    return {"deleted": deleted, "copies": _purge(store, settings, footprint)}


def apply_retention(store: Store, settings: Settings, *, now: datetime | None = None) -> dict[str, Any]:
    """Delete every conversation last active more than `privacy.retention_days` ago."""
    days = settings.privacy.retention_days
    if days <= 0:
        return {"status": "skipped", "reason": "retention is off (privacy.retention_days = 0)"}
    cutoff = (now or datetime.now(timezone.utc)) - timedelta(days=days)
    footprint = store.privacy.expired_footprint(cutoff)
    if not footprint:
        return {"cutoff": cutoff.isoformat(), "deleted": {}, "copies": {}}
    deleted = store.privacy.delete_conversations_before(cutoff)
    return {"cutoff": cutoff.isoformat(), "deleted": deleted, "copies": _purge(store, settings, footprint)}


def register_jobs(registry: JobRegistry, ctx: JobContext) -> None:
    settings = ctx.settings

    def retention(job: JobContext) -> dict:
        return apply_retention(job.store, settings)

    registry.add(
        "retention", retention,
        description=(f"Delete conversations last active over {settings.privacy.retention_days} days ago, "
                     "and every copy of them." if settings.privacy.retention_days else
                     "Retention is off (privacy.retention_days = 0)."),
        cron=settings.privacy.retention_cron if settings.privacy.retention_days else None,
    )
