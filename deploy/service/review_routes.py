"""Operators audit what the extractors mine, under `/api/admin/feedback` (admin token or login):

  GET  /api/admin/feedback/sample[?limit=&category=&extractor=&seed=&include_reviewed=]
                                            mined events to review, with their message, answer and request
  POST /api/admin/feedback/{event_id}/review   {"verdict": "correct"|"wrong_category"|"not_feedback",
                                                "category": the right one, for wrong_category}
  GET  /api/admin/feedback/precision[?extractor=]
                                            estimated precision per category by week, Wilson 95% intervals

Design choices:
- The reviewer is the caller's audit actor (`deploy.audit.actor_of`), never a field of the body:
  whoever holds the token or the login is who reviewed.
- A review is an operator action like a promotion: it is written to the audit log with its
  outcome (`deploy.audit.record_review`: action "review", target the event id), so a flood of
  verdicts from one actor, or a refused one, shows there too.
- The same store reads and `feedback.extract.reviews.precision` are behind the operator panel
  (`deploy.operator.review`) and `advisor extract reviews`, so the three agree.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from deploy.audit import actor_of, record_review
from deploy.service.auth import Identity
from deploy.service.deps import admin, services_of
from deploy.service.state import Services
from feedback.extract.reviews import precision

router = APIRouter(prefix="/api/admin/feedback", dependencies=[Depends(admin)])


def _iso(row: dict) -> dict:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}


@router.get("/sample")
def feedback_sample(limit: int = Query(20, ge=1, le=500), category: str | None = None, extractor: str | None = None,
                    seed: str | None = None, include_reviewed: bool = False,
                    services: Services = Depends(services_of)) -> dict:
    """A random sample of mined events (unreviewed ones unless `include_reviewed`); `seed` makes
    it repeatable."""
    events = services.store.events.review_sample(limit, category=category, extractor=extractor, seed=seed,
                                                 include_reviewed=include_reviewed)
    return {"events": [_iso(e) for e in events]}


class ReviewIn(BaseModel):
    verdict: Literal["correct", "wrong_category", "not_feedback"]
    category: str | None = Field(default=None, description="The right category (only with wrong_category).")


@router.post("/{event_id}/review", status_code=201)
def feedback_review(event_id: str, body: ReviewIn, ident: Identity = Depends(admin),
                    services: Services = Depends(services_of)) -> dict:
    return record_review(services.store, actor_of(ident), event_id, body.verdict, body.category, surface="api")


@router.get("/precision")
def feedback_precision(extractor: str | None = None, services: Services = Depends(services_of)) -> dict:
    return precision(services.store.events.reviewed_events(extractor=extractor))
