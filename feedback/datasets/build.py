"""Building one training set: read the store in chunks, collect candidates, de-duplicate,
filter, redact, split, write (the rules are in `feedback.datasets`).

People's data (docs/design.md, "People's data"): only conversations of users who let them train the
advisor (their own setting, else the deployment's `consent_default`) and who were not forgotten;
every text the set holds — prompts and answers — goes through the `redactor` (personal data
replaced by typed placeholders, `feedback.pii`) before it is written; each row names its user so a
run records whose data it trained on and a later forgetting can find the row. The card counts
what was left out and what was redacted, by reason and type.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from feedback.datasets.anchors import ANCHOR_SOURCE, SafetyAnchors, draw
from feedback.datasets.candidates import (
    Candidate,
    apply_filter,
    asked_lengths,
    dedupe,
    dpo_candidates,
    kto_candidates,
    load_chunk,
    relabel_desirable,
    sft_candidates,
)
from feedback.datasets.card import (
    CARD_JSON,
    CARD_MD,
    CHUNK_CONVERSATIONS,
    DEFAULT_EVAL_FRACTION,
    EVAL_FILE,
    KINDS,
    TRAIN_FILE,
    AcceptEverythingFilter,
    DatasetCard,
    DatasetError,
    SafetyFilter,
    kto_class_weights,
    rows_sha256,
    split_of,
    write_rows,
)
from feedback.labeller import HeuristicLabeller, Labeller, calibrated
from store.analytics import extractor_versions, training_conversation_ids

MESSAGE_LISTS = ("prompt", "completion", "chosen", "rejected")


class Redactor(Protocol):
    """Replaces personal data in texts (`feedback.pii.Redactor`)."""

    def redact_many(self, texts: Sequence[str]) -> list[Any]:  # results with `.text` and `.spans`
        ...


KTO_ATTRIBUTES = ("asked", "has")  # the attributes a KTO row trains under (`build_dataset`)


def _collect(store, kind: str, conv_ids: list[str], labeller: Labeller, dropped: Counter,
             chunk_conversations: int, lengths: list[tuple[int, int]] | None = None) -> list[Candidate]:
    """The candidates; with `lengths`, also (verbosity asked, words) of every model answer read."""
    cands: list[Candidate] = []
    for start in range(0, len(conv_ids), chunk_conversations):
        for conv in load_chunk(store, conv_ids[start:start + chunk_conversations]):
            if kind == "sft":
                cands.extend(sft_candidates(conv, labeller, dropped))
            elif kind == "kto":
                cands.extend(kto_candidates(conv, dropped))
            else:
                cands.extend(dpo_candidates(conv, dropped))
            if lengths is not None:
                lengths.extend(asked_lengths(conv))
    return cands


def redact_rows(rows: list[dict], redactor: Redactor | None) -> dict[str, int]:
    """Replace personal data in every message text of `rows`, in place; returns counts per type."""
    if redactor is None:
        return {}
    slots = [(msg, "content") for row in rows for key in MESSAGE_LISTS for msg in row.get(key) or ()]
    results = redactor.redact_many([msg[field] or "" for msg, field in slots])
    found: Counter = Counter()
    for (msg, field), result in zip(slots, results):
        msg[field] = result.text
        found.update(kind for kind, _, _ in result.spans)
    return dict(sorted(found.items()))


def build_dataset(
    store,
    kind: str,
    out_dir: str | Path,
    *,
    safety_filter: SafetyFilter | None = None,
    labeller: Labeller | None = None,
    eval_fraction: float = DEFAULT_EVAL_FRACTION,
    chunk_conversations: int = CHUNK_CONVERSATIONS,
    consent_default: bool = True,
    redactor: Redactor | None = None,
    kto_attributes: str = "asked",
    anchors: SafetyAnchors | None = None,
) -> DatasetCard:
    """Build one training set from `store` (a `store.Store`) into `out_dir`.

    Writes train/eval Parquet and the dataset card (JSON + Markdown); returns the card.
    `safety_filter` defaults to `AcceptEverythingFilter` (nothing moderated) and `redactor` to none
    — the card says so; `deploy.loop.safety` makes the moderator-backed filter and the redactor.
    `kto_attributes`: "asked" trains each KTO answer under the slider values it was written for;
    "has" gives desirable answers the verbosity and complexity their text has
    (`candidates.relabel_desirable`), read by `labeller` or, without one, by the heuristic
    labeller calibrated to the lengths of the answers in the set's conversations.
    `anchors` (KTO only): labelled answers to risky requests added to the train split,
    `anchors.share` per user train row (`feedback.datasets.anchors`).
    """
    if kind not in KINDS:
        raise DatasetError(f"unknown dataset kind {kind!r}; choose one of {', '.join(KINDS)}")
    if kto_attributes not in KTO_ATTRIBUTES:
        raise DatasetError(f"unknown kto_attributes {kto_attributes!r}; choose one of {', '.join(KTO_ATTRIBUTES)}")
    relabel = kind == "kto" and kto_attributes == "has"
    if anchors is not None and kind != "kto":
        raise DatasetError(f"safety anchors are KTO rows; a {kind} set cannot take them (leave them off)")
    if not 0.0 <= eval_fraction < 1.0:
        raise DatasetError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    safety_filter = safety_filter or AcceptEverythingFilter()
    lengths: list[tuple[int, int]] | None = [] if relabel and labeller is None else None
    labeller = labeller or HeuristicLabeller()
    dropped: Counter = Counter()

    convs = training_conversation_ids(store, consent_default=consent_default)
    dropped.update({k: v for k, v in convs.excluded.items() if v})
    cands = _collect(store, kind, convs.ids, labeller, dropped, chunk_conversations, lengths)
    cands = dedupe(cands, kind, dropped)  # identical and contradicting reactions, as people gave them
    relabelled: set[str] = set()
    if relabel:
        if lengths is not None:  # no labeller given: the heuristic one in the answers' own scale, if it can be
            labeller = calibrated(lengths, labeller) or labeller
        relabelled = relabel_desirable(cands, labeller)
        cands = dedupe(cands, kind, dropped)  # relabelled rows may now repeat or contradict others
    cands, removed = apply_filter(cands, safety_filter)
    rows = [c.row for c in cands]
    for row in rows:
        row["user_id"] = convs.user_of[row["conversation_id"]]
    redacted = redact_rows(rows, redactor)
    train = [r for r in rows if split_of(r["conversation_id"], eval_fraction) == "train"]
    evals = [r for r in rows if split_of(r["conversation_id"], eval_fraction) == "eval"]
    train += draw(anchors, len(train)) if anchors is not None else []

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_rows(train, kind, out_dir / TRAIN_FILE)
    write_rows(evals, kind, out_dir / EVAL_FILE)
    card = _card(store, kind, train, evals, eval_fraction, dropped, safety_filter, removed, labeller)
    if kind == "kto":
        card.kto_attributes = kto_attributes
        card.relabelled = sum(r["message_id"] in relabelled for r in train)
        card.labeller = labeller.name if relabel else None
    card.redaction = {"redactor": getattr(redactor, "name", type(redactor).__name__) if redactor else
                      "none (personal data not redacted)", "replaced": redacted}
    card.users = sorted({r["user_id"] for r in train + evals if r["source"] != ANCHOR_SOURCE})
    card.anchors = anchors.name if anchors is not None else None
    card.extractor_versions = extractor_versions(store, conversations=sorted({r["conversation_id"] for r in rows}))
    (out_dir / CARD_JSON).write_text(json.dumps(card.to_json(), indent=2) + "\n")
    (out_dir / CARD_MD).write_text(card.markdown())
    return card


def _card(store, kind: str, train: list[dict], evals: list[dict], eval_fraction: float, dropped: Counter,
          safety_filter: SafetyFilter, removed: int, labeller: Labeller) -> DatasetCard:
    kept = train + evals
    card = DatasetCard(
        kind=kind,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        n_train=len(train), n_eval=len(evals), eval_fraction=eval_fraction,
        counts_by_source=dict(sorted(Counter(r["source"] for r in kept).items())),
        counts_by_category=dict(sorted(Counter(c for r in kept for c in r["categories"]).items())),
        dropped=dict(sorted((k, v) for k, v in dropped.items() if v)),
        safety_filter=safety_filter.name, removed_by_filter=removed,
        rows_sha256=rows_sha256(kept),
        files={"train": TRAIN_FILE, "eval": EVAL_FILE},
        labeller=labeller.name if kind == "sft" else None,
        store=str(getattr(store, "path", "")) or None,
    )
    if kind == "kto":
        n_d = sum(1 for r in train if r["label"])
        card.labels = {"desirable": n_d, "undesirable": len(train) - n_d}
        card.class_weights = kto_class_weights(n_d, len(train) - n_d)
    return card
