"""The release registry: which adapter is live, and the hand-off to the serving backend.

A release is a trained adapter (or the base model itself, `adapter_path` NULL) with a status:
candidate → live → retired, or candidate → rejected. The store guarantees one live release
(making one live retires the previous in the same transaction); this module adds the serving
side, in the order that never drops a chat:

1. publish: copy the run's adapter into the adapter directory both the advisor and vLLM read
   (`<data_dir>/adapters/<release id>`), so a run directory can be cleaned without breaking serving;
2. load it into the backend under the release id (transformers: a PEFT adapter beside the others;
   vLLM: its runtime `load_lora_adapter` endpoint) and make it the active one for new requests —
   requests already streaming keep the adapter they started with;
3. only then mark it live in the store.
If loading fails, the store is untouched and the previous release keeps serving.

`promote_in_service` / `rollback_in_service` do the same in a running service (the admin API and
the operator panel call them): one swap at a time, then the service re-reads what it serves.
Each answer is logged with the release of the adapter its generation pinned (adapters are
loaded under their release id; `no_adapter_release` names the base model's release), so an
answer submitted just before a swap and generated just after it names the release that wrote it.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from chat.backends import BackendError
from store import InvalidInput, NotFound, Release, Store

BASE_RELEASE_PREFIX = "base-"


log = logging.getLogger("advisor.registry")


class ReleaseError(InvalidInput):
    """A promotion or rollback that cannot be done; the message says why."""


def adapter_dir(data_dir: Path) -> Path:
    return data_dir / "adapters"


def publish_adapter(adapter_path: Path, data_dir: Path, release_id: str) -> Path:
    """Copy an adapter into the shared adapter directory (idempotent) and return its new path."""
    src = Path(adapter_path)
    if not (src / "adapter_config.json").is_file():
        raise ReleaseError(f"{src} holds no PEFT adapter (adapter_config.json is missing).")
    dest = adapter_dir(data_dir) / release_id
    if not dest.exists():
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        tmp.rename(dest)  # atomic: vLLM never sees half an adapter
    return dest


def ensure_base_release(store: Store, base_model: str) -> Release:
    """The live release, creating a 'base' release (no adapter) when none is live yet, so every
    stored answer names the release that produced it."""
    live = store.releases.live()
    if live is not None:
        return live
    release_id = BASE_RELEASE_PREFIX + Path(base_model).name[:40]
    try:
        existing = store.releases.get(release_id)
    except NotFound:
        return store.releases.create(base_model=base_model, adapter_path=None, status="live", release_id=release_id,
                                             decision={"summary": "the base model, live until a trained release passes the gate"})
    return store.releases.set_status(existing.id, "live")


def no_adapter_release(store: Store, base_model: str) -> str | None:
    """The release that serves `base_model` without an adapter (the live one if it is live, else
    the one promoted last), or None when there is none."""
    release = store.releases.base(base_model)
    return release.id if release else None


def serves_base(backend, base_model: str) -> bool:
    """Whether `backend` runs the model `base_model` names: by its served name, or by the directory
    a model server was started on (what a trainer records as a run's base)."""
    return base_model in {backend.model, getattr(backend, "base_model_path", None)}


def activate(backend, release: Release) -> None:
    """Make the backend answer new requests with this release."""
    if release.adapter_path:
        backend.set_adapter(release.id, release.adapter_path)
    else:
        backend.set_adapter(None)


def register_candidate(store: Store, *, run_id: str, adapter_path: Path, base_model: str, data_dir: Path,
                       decision: dict | None = None) -> Release:
    """A finished training run becomes a candidate release with its adapter published."""
    from store import new_id

    release_id = "r-" + new_id()[:12]
    published = publish_adapter(adapter_path, data_dir, release_id)
    return store.releases.create(base_model=base_model, adapter_path=str(published), run_id=run_id,
                                         status="candidate", decision=decision, release_id=release_id)


def promote(store: Store, backend, release_id: str, *, force: bool = False) -> Release:
    """Load the release into the backend, switch new requests to it, then mark it live."""
    release = store.releases.get(release_id)
    if release.status == "live":
        return release
    if release.status == "rejected" and not force:
        reason = release.decision.get("summary", "see its decision")
        raise ReleaseError(f"Release {release_id} was rejected by the gate ({reason}); pass --force to promote anyway.")
    if backend is not None and not serves_base(backend, release.base_model):
        raise ReleaseError(
            f"Release {release_id} was trained on {release.base_model!r}, but the service runs {backend.model!r}."
        )
    if backend is not None:
        activate(backend, release)  # raises before the store changes if the adapter cannot load
    canary = dict((release.decision or {}).get("canary") or {})
    if canary.get("state") == "running":  # promoted by hand while it was the canary: the canary ends
        canary.update(state="promoted", ended_by="operator", outcome="promoted by hand during its canary")
        store.releases.set_status(release_id, release.status, decision={**release.decision, "canary": canary})
    promoted = store.releases.set_status(release_id, "live")
    retire_adapters(store, backend)
    return promoted


def previous_release(store: Store) -> Release | None:
    """The release that was live before the current one."""
    live = store.releases.live()
    candidates = [r for r in store.releases.list(limit=500)
                  if r.status == "retired" and r.promoted_at is not None and (live is None or r.id != live.id)]
    candidates.sort(key=lambda r: r.retired_at or r.promoted_at, reverse=True)
    return candidates[0] if candidates else None


def rollback(store: Store, backend) -> Release:
    """Make the previously live release live again; the current one is retired."""
    previous = previous_release(store)
    if previous is None:
        raise ReleaseError("There is no earlier live release to roll back to.")
    live = store.releases.live()
    if backend is not None:
        activate(backend, previous)
    restored = store.releases.set_status(previous.id, "live")
    if live is not None:
        store.releases.set_status(live.id, "retired", decision={**live.decision, "rolled_back_to": previous.id})
    retire_adapters(store, backend)
    return restored


def retire_adapters(store: Store, backend) -> list[str]:
    """Unload adapters of releases that are neither live nor the rollback target, so the server's
    adapter slots (vLLM `--max-loras`) and memory do not fill up over many cycles. Keeping the
    previous release loaded makes a rollback instant, and an answer still streaming on it (it
    started before the last swap) keeps its adapter. Returns the names unloaded; a failure to
    unload is logged, never raised: the swap itself already succeeded."""
    if backend is None or not hasattr(backend, "unload_adapter"):
        return []
    live, previous = store.releases.live(), previous_release(store)
    keep = {r.id for r in (live, previous) if r is not None}
    # A running canary's adapter serves its share of users (deploy.release.canary).
    keep |= {r.id for r in store.releases.list(limit=200)
             if r.status == "candidate" and ((r.decision or {}).get("canary") or {}).get("state") == "running"}
    unloaded = []
    for name in list(backend.adapters):
        if name in keep or name == backend.active_adapter:
            continue
        try:
            backend.unload_adapter(name)
            unloaded.append(name)
        except BackendError as exc:
            log.warning("could not unload the retired adapter %s: %s", name, exc)
    return unloaded


# ---------------------------------------------------------------- in the running service


def swap_lock(services: Any) -> threading.Lock:
    # One promotion or rollback at a time per service: two operators clicking at once must not
    # interleave "activate A, activate B, mark B live, mark A live".
    return services.extras.setdefault("release_swap_lock", threading.Lock())


def promote_in_service(services: Any, release_id: str, *, force: bool = False) -> Release:
    """Promote in a running service (`deploy.service.app.Services`): load and switch the adapter for new
    requests (answers in flight keep the one they pinned), mark it live, re-read what is served."""
    with swap_lock(services):
        release = promote(services.store, services.backend, release_id, force=force)
        services.refresh_release()
        services.refresh_canary()
    return release


def rollback_in_service(services: Any) -> Release:
    """Roll back in a running service, with the same hand-off as `promote_in_service`."""
    with swap_lock(services):
        release = rollback(services.store, services.backend)
        services.refresh_release()
        services.refresh_canary()
    return release
