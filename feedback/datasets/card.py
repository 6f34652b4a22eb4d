"""Dataset cards, row schemas, files, and the safety-filter hook of a training set.

A build writes `train.parquet`, `eval.parquet`, `dataset_card.json` and `dataset_card.md`; the
card records what went in, what was dropped and why (forgotten or opted-out users, conflicts,
the safety filter's removals, answers the serving guard wrote, redacted personal data). The split is by a hash of the
conversation id, stable across builds and machines.
"""

import hashlib
import json
import math
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

KINDS = ("sft", "kto", "dpo")
TRAIN_FILE, EVAL_FILE = "train.parquet", "eval.parquet"
CARD_JSON, CARD_MD = "dataset_card.json", "dataset_card.md"
DEFAULT_EVAL_FRACTION = 0.1
CHUNK_CONVERSATIONS = 2_000
# The `dropped` key for answers (or pairs holding one) the serving safety guard wrote: a refusal or a
# replacement is the guard's text, not the model's behaviour, so it is never a training answer.
GUARD_WRITTEN = "guard_written_answer"


class DatasetError(ValueError):
    """The build cannot run as asked (unknown kind, bad fraction…); the message says why."""


# --------------------------------------------------------------------------- safety hook


class SafetyFilter(Protocol):
    """Flags answers that must never be desirable, chosen or an SFT target."""

    name: str

    def flags(self, texts: Sequence[str], prompts: Sequence[list[dict]] | None = None) -> list[bool]:
        """One bool per text: True = unsafe. `prompts`, when given, holds the conversation each
        text answers (role/content messages), for filters that judge an answer with its request."""
        ...


class AcceptEverythingFilter:
    """Flags nothing: the filter of a build whose safety filter is switched off
    (`--no-safety-filter`) or not given. The moderator-backed filter is made in `deploy.loop.safety`
    (`feedback` may not import the evaluator). Named for what it does so no dataset card can
    pass it off as moderation."""

    name = "accept-everything (safety filter off: nothing moderated)"

    def flags(self, texts: Sequence[str], prompts: Sequence[list[dict]] | None = None) -> list[bool]:
        return [False] * len(texts)


# --------------------------------------------------------------------------- schemas

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string()), ("attributes", pa.string())])
_MESSAGES = pa.list_(_MESSAGE)
_KWARGS = pa.struct([("attributes", pa.string())])

SCHEMAS: dict[str, pa.Schema] = {
    "sft": pa.schema([
        ("prompt", _MESSAGES), ("completion", _MESSAGES), ("chat_template_kwargs", _KWARGS),
        ("conversation_id", pa.string()), ("message_id", pa.string()),
        ("source", pa.string()), ("categories", pa.list_(pa.string())), ("user_id", pa.string()),
    ]),
    "kto": pa.schema([
        ("prompt", _MESSAGES), ("completion", _MESSAGES), ("label", pa.bool_()),
        ("chat_template_kwargs", _KWARGS),
        ("conversation_id", pa.string()), ("message_id", pa.string()),
        ("source", pa.string()), ("categories", pa.list_(pa.string())), ("user_id", pa.string()),
    ]),
    "dpo": pa.schema([
        ("prompt", _MESSAGES), ("chosen", _MESSAGES), ("rejected", _MESSAGES),
        ("chat_template_kwargs", _KWARGS),
        ("conversation_id", pa.string()), ("chosen_id", pa.string()), ("rejected_id", pa.string()),
        ("source", pa.string()), ("categories", pa.list_(pa.string())), ("user_id", pa.string()),
    ]),
}
# The columns TRL trains on, per kind; the rest is bookkeeping.
TRAIN_COLUMNS = {
    "sft": ("prompt", "completion", "chat_template_kwargs"),
    "kto": ("prompt", "completion", "label", "chat_template_kwargs"),
    "dpo": ("prompt", "chosen", "rejected", "chat_template_kwargs"),
}


# --------------------------------------------------------------------------- the card


@dataclass
class DatasetCard:
    kind: str
    created_at: str
    n_train: int
    n_eval: int
    eval_fraction: float
    counts_by_source: dict[str, int]
    counts_by_category: dict[str, int]
    dropped: dict[str, int]
    safety_filter: str
    removed_by_filter: int
    rows_sha256: str
    files: dict[str, str]
    labels: dict[str, int] = field(default_factory=dict)  # kto: desirable / undesirable (train split)
    class_weights: dict[str, float] = field(default_factory=dict)  # kto
    labeller: str | None = None  # sft, and kto with kto_attributes "has"
    kto_attributes: str | None = None  # kto: "asked" or "has" (`build_dataset`)
    relabelled: int = 0  # kto "has": desirable train rows whose verbosity or complexity the labeller changed
    store: str | None = None
    # {"redactor": name, "replaced": {type: count}}: personal data replaced before writing.
    redaction: dict[str, Any] = field(default_factory=dict)
    # Whose conversations the rows came from (pseudonymous ids): a run records them, so a release
    # trained on a user's data can be marked if the user is forgotten later.
    users: list[str] = field(default_factory=list)
    # Mined feedback events in the rows' conversations, by "<extractor> <version>": which extractor
    # version's reading the labels rest on (its estimated precision: the operator's review panel).
    extractor_versions: dict[str, int] = field(default_factory=dict)
    # KTO: where the safety anchors came from (`feedback.datasets.anchors`; their count is
    # counts_by_source["safety_anchor"]); None: no anchors.
    anchors: str | None = None

    @property
    def n_rows(self) -> int:
        return self.n_train + self.n_eval

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"n_rows": self.n_rows}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "DatasetCard":
        data = {k: v for k, v in data.items() if k != "n_rows"}
        return cls(**data)

    def markdown(self) -> str:
        lines = [
            f"# Dataset card: {self.kind}",
            "",
            f"Built {self.created_at} from `{self.store or 'the store'}`.",
            "",
            f"- rows: **{self.n_rows}** (train {self.n_train}, eval {self.n_eval}; split by conversation, "
            f"eval fraction {self.eval_fraction})",
            f"- rows SHA-256: `{self.rows_sha256}`",
            f"- safety filter: {self.safety_filter} — removed {self.removed_by_filter}",
            f"- answers the serving safety guard wrote (refusals, replacements; not the model's behaviour): "
            f"left out {self.dropped.get(GUARD_WRITTEN, 0)}",
            f"- personal data: {self.redaction.get('redactor', 'not recorded')}"
            + (" — replaced " + ", ".join(f"{k} {v}" for k, v in self.redaction.get("replaced", {}).items())
               if self.redaction.get("replaced") else ""),
            f"- from the conversations of {len(self.users)} user(s)",
            "- mined feedback by extractor version: "
            + (", ".join(f"{k} {v}" for k, v in self.extractor_versions.items()) or "none"),
        ]
        if self.labeller:
            lines.append(f"- attribute labeller: {self.labeller}")
        if self.kto_attributes:
            lines.append("- KTO rows train under the attributes " + (
                f"a liked answer's text has (desirable train rows relabelled: {self.relabelled})"
                if self.kto_attributes == "has" else "the answer was asked for"))
        if self.anchors:
            lines.append(f"- safety anchors (labelled answers to risky requests, train split only): "
                         f"{self.counts_by_source.get('safety_anchor', 0)} from the {self.anchors}")
        if self.labels:
            lines.append("- labels (train): " + ", ".join(f"{k} {v}" for k, v in self.labels.items()))
        if self.class_weights:
            lines.append("- class weights (TRL guidance, desirable×n_d : undesirable×n_u in [1, 4/3]): "
                         + ", ".join(f"{k} {v:g}" for k, v in self.class_weights.items()))
        for title, counts in (("By source", self.counts_by_source), ("By feedback category", self.counts_by_category),
                              ("Dropped", self.dropped)):
            lines += ["", f"## {title}", ""]
            lines += [f"- {k}: {v}" for k, v in sorted(counts.items())] or ["- (none)"]
        return "\n".join(lines) + "\n"


def copy_dataset(src: str | Path, dst: str | Path, kind: str) -> DatasetCard:
    """Copy a built set (Parquet files and card) into `dst` and return its card: a run trains on
    exactly the set its caller already built and reported, instead of building another."""
    src, dst = Path(src), Path(dst)
    card = read_card(src)
    if card.kind != kind:
        raise DatasetError(f"{src} holds a {card.kind} set, not {kind}")
    dst.mkdir(parents=True, exist_ok=True)
    for name in (TRAIN_FILE, EVAL_FILE, CARD_JSON, CARD_MD):
        shutil.copy2(src / name, dst / name)
    return card


def read_card(out_dir: Path) -> DatasetCard:
    return DatasetCard.from_json(json.loads((Path(out_dir) / CARD_JSON).read_text()))


def kto_class_weights(n_desirable: int, n_undesirable: int) -> dict[str, float]:
    """Weights that put desirable×n_d : undesirable×n_u at 1 (TRL's range is [1, 4/3], KTO paper
    eq. 8): the minority class is up-weighted, the majority keeps 1. The weight is rounded to 4
    decimals in the direction that keeps the ratio at or above 1."""
    dw = uw = 1.0
    if n_desirable and n_undesirable:
        if n_desirable < n_undesirable:
            dw = math.ceil(n_undesirable / n_desirable * 10_000) / 10_000
        elif n_undesirable < n_desirable:
            uw = math.floor(n_desirable / n_undesirable * 10_000) / 10_000
    ratio = (dw * n_desirable) / (uw * n_undesirable) if n_undesirable else float("nan")
    return {"desirable_weight": dw, "undesirable_weight": uw, "ratio": round(ratio, 6)}


def split_of(conversation_id: str, eval_fraction: float) -> str:
    """'train' or 'eval', from a hash of the conversation id: stable across builds and machines."""
    bucket = int(hashlib.sha256(conversation_id.encode()).hexdigest()[:8], 16) / 2**32
    return "eval" if bucket < eval_fraction else "train"


def rows_sha256(rows: Iterable[dict]) -> str:
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def write_rows(rows: list[dict], kind: str, path: Path) -> None:
    """Write rows of `kind` to Parquet with the kind's fixed schema (also when empty)."""
    schema = SCHEMAS[kind]
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    pq.write_table(table, path)
