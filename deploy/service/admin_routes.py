"""The operator's REST API under `/api/admin` (admin token or an admin login):

  GET    /api/admin/stats | turns | jobs | releases | timeseries | reasons   (operator)
  POST   /api/admin/jobs/{kind}/run                start a registered job now
  POST   /api/admin/jobs/{job_id}/cancel           cancel a running training run or cycle (no half release)
  POST   /api/admin/release/refresh                re-read the live release, hot-swap its adapter
  POST   /api/admin/releases/{id}/promote[?force=] make a release live (hot swap; in-flight answers keep theirs)
  POST   /api/admin/releases/rollback              make the previous live release live again
  GET    /api/admin/canary                         the running (or last) canary, live and canary arms side by side
  POST   /api/admin/canary/start/{id}[?force=]     make a gated candidate the canary
  POST   /api/admin/canary/{check|promote|rollback|stop}   judge it now, or end it by hand

Every action here is written to the audit log (`deploy.audit.audited`) with the caller as actor;
the log itself and forgetting a user: `audit_routes`.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from deploy.audit import actor_of, audited
from deploy.service.auth import Identity
from deploy.service.deps import admin, services_of
from deploy.service.errors import ApiError
from deploy.service.state import Services
from store.reports import (
    counts_over_time,
    jobs_table,
    latest_turns,
    overview,
    ratings_by_reason,
    releases_table,
)

router = APIRouter(prefix="/api/admin", dependencies=[Depends(admin)])


@router.get("/stats")
def admin_stats(services: Services = Depends(services_of)) -> dict:
    stats = overview(services.store)
    stats["in_flight"] = len(services.inflight)
    stats["serving_release"] = services.release_id
    stats["release_warning"] = services.release_warning
    return stats


@router.get("/turns")
def admin_turns(limit: int = Query(50, ge=1, le=1000), services: Services = Depends(services_of)) -> dict:
    return {"turns": latest_turns(services.store, limit=limit)}


@router.get("/jobs")
def admin_jobs(limit: int = Query(50, ge=1, le=1000), services: Services = Depends(services_of)) -> dict:
    registry = services.jobs
    kinds = [{"kind": s.kind, "description": s.description, "button": s.button,
              "next_run": registry.next_runs().get(s.kind)} for s in registry.specs()] if registry else []
    return {"jobs": jobs_table(services.store, limit=limit), "kinds": kinds}


class JobParams(BaseModel):
    """Optional parameters of a manual job run, e.g. `{"params": {"extractor": "llm"}}`; one level
    of nesting for groups such as a cycle's training `overrides`."""

    params: dict[str, str | int | float | bool | dict[str, str | int | float | bool]] = {}


@router.post("/jobs/{kind}/run", status_code=202)
def admin_run_job(kind: str, body: JobParams | None = None, ident: Identity = Depends(admin),
                  services: Services = Depends(services_of)) -> dict:
    params = body.params if body else None
    try:
        with audited(services.store, actor_of(ident), "job", kind, surface="api", params=params or {}) as entry:
            job = services.jobs.run_now(kind, trigger="api", params=params)
            entry.details["job_id"] = job.id
    except KeyError as exc:
        raise ApiError(404, str(exc.args[0]), code="not_found") from None
    return {"job_id": job.id, "kind": job.kind, "status": job.status}


@router.post("/jobs/{job_id}/cancel", status_code=202)
def admin_cancel_job(job_id: str, services: Services = Depends(services_of)) -> dict:
    from deploy.loop.cycle_jobs import cancel_run_job
    from store import NotFound

    try:
        return cancel_run_job(services.store, services.jobs.ctx.extras, job_id)  # what the jobs see
    except NotFound as exc:
        raise ApiError(404, str(exc), code="not_found") from None
    except ValueError as exc:
        raise ApiError(409, str(exc), code="not_cancellable") from None


@router.get("/releases")
def admin_releases(limit: int = Query(50, ge=1, le=1000), services: Services = Depends(services_of)) -> dict:
    return {"releases": releases_table(services.store, limit=limit), "serving": services.release_id}


class PromoteIn(BaseModel):
    force: bool = Field(default=False, description="Promote even a release the gate rejected.")


def _release_swap(services: Services, ident: Identity, action: str, target: str, swap, **details) -> dict:
    from deploy.release.registry import ReleaseError

    try:
        with audited(services.store, actor_of(ident), action, target, surface="api", **details) as entry:
            release = swap()
            entry.target = entry.target or release.id
    except ReleaseError as exc:  # refused (rejected by the gate, other base model, nothing to roll back to)
        raise ApiError(409, str(exc), code="release_refused") from None
    return {"id": release.id, "status": release.status, "serving": services.release_id,
            "warning": services.release_warning}


@router.post("/releases/{release_id}/promote")
def admin_promote_release(release_id: str, force: bool = Query(False), body: PromoteIn | None = None,
                          ident: Identity = Depends(admin), services: Services = Depends(services_of)) -> dict:
    """Make a release live in this service: new answers use it, answers in flight finish on theirs."""
    from deploy.release.registry import promote_in_service

    force = force or bool(body and body.force)
    return _release_swap(services, ident, "promote", release_id,
                         lambda: promote_in_service(services, release_id, force=force), force=force)


@router.post("/releases/rollback")
def admin_rollback_release(ident: Identity = Depends(admin), services: Services = Depends(services_of)) -> dict:
    """Make the previously live release live again, hot-swapped like a promotion."""
    from deploy.release.registry import rollback_in_service

    return _release_swap(services, ident, "rollback", "", lambda: rollback_in_service(services),
                         rolled_back_from=services.release_id)


@router.post("/release/refresh")
def admin_refresh_release(ident: Identity = Depends(admin), services: Services = Depends(services_of)) -> dict:
    with audited(services.store, actor_of(ident), "refresh", services.release_id or "", surface="api") as entry:
        entry.target = services.refresh_release() or ""
    return {"serving": services.release_id, "warning": services.release_warning}


@router.get("/timeseries")
def admin_timeseries(days: int = Query(30, ge=1, le=3650), bucket: Literal["hour", "day", "week"] = "day",
                     services: Services = Depends(services_of)) -> dict:
    return {"bucket": bucket, "days": days, "points": counts_over_time(services.store, days=days, bucket=bucket)}


@router.get("/reasons")
def admin_reasons(days: int = Query(30, ge=1, le=3650), services: Services = Depends(services_of)) -> dict:
    return {"days": days, "reasons": ratings_by_reason(services.store, days=days)}


# ---------------------------------------------------------------- the canary


@router.get("/canary")
def admin_canary(services: Services = Depends(services_of)) -> dict:
    """The running canary with both arms' online numbers (re-judged now), or the last one ended."""
    from deploy.release.canary import canary_overview

    return canary_overview(services.store, services.settings)


@router.post("/canary/start/{release_id}")
def admin_canary_start(release_id: str, force: bool = Query(False), ident: Identity = Depends(admin),
                       services: Services = Depends(services_of)) -> dict:
    from deploy.release.canary import public_state, start_in_service

    with audited(services.store, actor_of(ident), "canary", release_id, surface="api", step="start", force=force):
        release = _canary_call(start_in_service, services, release_id, force=force)
    return {"id": release.id, "status": release.status, "canary": public_state(release)}


@router.post("/canary/{action}")
def admin_canary_action(action: Literal["check", "promote", "rollback", "stop"], ident: Identity = Depends(admin),
                        services: Services = Depends(services_of)) -> dict:
    """`check`: judge it now by the rule (and act on the verdict); the others end it by hand."""
    from deploy.release.canary import finish_in_service, public_state, running_canary

    running = running_canary(services.store)
    with audited(services.store, actor_of(ident), "canary", running.id if running else "", surface="api", step=action):
        if action == "check":  # the "canary" job, here and now: mine the latest feedback, judge, act
            job = services.jobs.run_sync("canary", trigger="api")
            if job.status == "failed":
                raise ApiError(409, job.error or "the canary check failed", code="canary_refused")
            return {"job_id": job.id, "status": job.status, **(job.result or {})}
        release = _canary_call(finish_in_service, services, action, f"{action} by the operator", by="operator")
    return {"id": release.id, "status": release.status, "canary": public_state(release), "serving": services.release_id}


def _canary_call(fn, *args, **kwargs):
    from deploy.release.registry import ReleaseError

    try:
        return fn(*args, **kwargs)
    except ReleaseError as exc:
        raise ApiError(409, str(exc), code="canary_refused") from None
