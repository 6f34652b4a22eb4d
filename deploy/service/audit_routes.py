"""The operator's audit log and forgetting a user, under `/api/admin` (admin token or an admin login):

  GET  /api/admin/audit[?format=json|jsonl&limit=&action=]   the log, newest first
  POST /api/admin/users/{user}/forget?confirm=true           delete everything a user wrote (id or name)

Design choices:
- `format=jsonl` streams one entry a line (`application/x-ndjson`) for piping into other tools;
  `json` is one document. Reading the log is not itself logged: it changes nothing.
- Forgetting is here so an operator can honour a deletion request while the service holds the
  database (`advisor forget --url` calls it); like `DELETE /api/me` it needs `?confirm=true`, stops
  the user's answers in flight and ends their sessions at once. It is audited (`deploy.audit`).
"""

from __future__ import annotations

import json
from typing import Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from deploy.audit import actor_of, audited
from deploy.loop.privacy import forget_everywhere
from deploy.service.auth import Identity
from deploy.service.deps import admin, services_of
from deploy.service.errors import ApiError
from deploy.service.state import Services

router = APIRouter(prefix="/api/admin", dependencies=[Depends(admin)])


@router.get("/audit")
def admin_audit(format: Literal["json", "jsonl"] = "json", limit: int = Query(200, ge=1, le=100_000),
                action: str | None = None, services: Services = Depends(services_of)):
    entries = [e.as_dict() for e in services.store.audit.list(limit=limit, action=action)]
    if format == "jsonl":
        body = "".join(json.dumps(e, default=str) + "\n" for e in entries)
        return Response(body, media_type="application/x-ndjson")
    return {"entries": entries}


@router.post("/users/{user}/forget")
def admin_forget_user(user: str, confirm: bool = Query(False), ident: Identity = Depends(admin),
                      services: Services = Depends(services_of)) -> dict:
    """Delete everything a user wrote and everything derived from it; `user` is an id or a name."""
    if not confirm:
        raise ApiError(400, "This deletes all of the user's conversations and ratings for good. "
                            "Repeat the request with ?confirm=true to go ahead.", code="confirm_required",
                       param="confirm")
    named = services.store.users.get_by_name(user)
    user_id = named.id if named else user
    if user_id == "admin":
        raise ApiError(400, "The operator account cannot be forgotten.", code="invalid_input")
    with audited(services.store, actor_of(ident), "forget", user_id, surface="api") as entry:
        services.inflight.cancel(user_id)
        out = forget_everywhere(services.store, services.settings, user_id)
        services.auth.forgotten(user_id)
        entry.details.update(deleted=out["deleted"], unreached_exports=out["unreached_exports"])
    return {"user_id": user_id, "deleted": out["deleted"], "copies": out["copies"],
            "unreached_exports": out["unreached_exports"]}
