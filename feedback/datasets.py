"""Training sets from the feedback store, in TRL's conversational prompt-completion formats.

Three kinds (DESIGN.md, "Training data from feedback"):
- `sft` (attribute-conditioned SFT, SteerLM): answers that went down well (liked, or followed by
  `positive` feedback), labelled with the attributes they have (`feedback.labeller`).
- `kto` (unpaired): desirable = liked or followed by `positive`; undesirable = disliked or followed
  by `aware_with_correction` / `aware_without_correction`. Class weights per TRL's guidance.
- `dpo` (pairs): (1) a regenerated sibling the user kept over the one(s) they left, kept meaning
  chosen with the "1 / 2" arrows or, failing that, the only sibling the conversation went on
  from; (2) rephrase chains: an answer that triggered `repeat_rephrase`, and every answer after
  it that triggered another rephrase, lose to the first later answer that went down well.

Row format (every kind):
- `prompt`: the conversation up to the answer, following `parent_id` (so the branch the answer
  is on, never a sibling's), as `{"role", "content", "attributes"}` dicts (`attributes` is None
  on history turns: only the trained turn carries a condition).
- `completion` (`chosen`, `rejected` for DPO): one assistant message whose `attributes` key holds
  the SteerLM string, and `chat_template_kwargs = {"attributes": same string}`. TRL renders the
  prompt with `add_generation_prompt=True` and these kwargs, so the attribute line belongs to
  the prompt and only the answer (with `<|end|>`) is trained — the condition is not an output.
  SFT uses the attributes the labeller reads off the answer; KTO and DPO the attributes it was
  generated with (what the model saw); a DPO pair shares the chosen answer's attributes.
- Bookkeeping columns (ids, source, categories) that the trainer drops.

Guarantees: deduplicated on everything trained on (an SFT/KTO example that occurs with both
labels is dropped as conflicting); split into train/eval by conversation with a hash of the
conversation id (stable across builds, no conversation on both sides); nothing from a user in
`forgotten_users` (their rows are deleted, but the build checks again); nothing a `SafetyFilter`
flags is ever desirable, chosen or an SFT target; only complete answers (not interrupted or
failed ones). Each build writes `train.parquet`, `eval.parquet`, `dataset_card.json` and
`dataset_card.md`.

The store is read in chunks of conversations, so memory follows the size of the output, not of
the log.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from feedback.attributes import Attributes
from feedback.labeller import BAD, GOOD, MIXED, HeuristicLabeller, Labeller, Reception
from feedback.store.analytics import training_conversation_ids, training_rows
from feedback.taxonomy import REPEAT_REPHRASE

KINDS = ("sft", "kto", "dpo")
TRAIN_FILE, EVAL_FILE = "train.parquet", "eval.parquet"
CARD_JSON, CARD_MD = "dataset_card.json", "dataset_card.md"
DEFAULT_EVAL_FRACTION = 0.1
CHUNK_CONVERSATIONS = 2_000


class DatasetError(ValueError):
    """The build cannot run as asked (unknown kind, bad fraction…); the message says why."""


# --------------------------------------------------------------------------- safety hook


class SafetyFilter(Protocol):
    """Flags answers that must never be desirable, chosen or an SFT target."""

    name: str

    def flags(self, texts: Sequence[str]) -> list[bool]:
        """One bool per text: True = unsafe."""
        ...


class AcceptEverythingFilter:
    """Flags nothing: the filter of a build whose safety filter is switched off
    (`--no-safety-filter`) or not given. The moderator-backed filter is made in `deploy.loop.safety`
    (`feedback` may not import the evaluator). Named for what it does so no dataset card can
    pass it off as moderation."""

    name = "accept-everything (safety filter off: nothing moderated)"

    def flags(self, texts: Sequence[str]) -> list[bool]:
        return [False] * len(texts)


# --------------------------------------------------------------------------- schemas

_MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string()), ("attributes", pa.string())])
_MESSAGES = pa.list_(_MESSAGE)
_KWARGS = pa.struct([("attributes", pa.string())])

SCHEMAS: dict[str, pa.Schema] = {
    "sft": pa.schema([
        ("prompt", _MESSAGES), ("completion", _MESSAGES), ("chat_template_kwargs", _KWARGS),
        ("conversation_id", pa.string()), ("message_id", pa.string()),
        ("source", pa.string()), ("categories", pa.list_(pa.string())),
    ]),
    "kto": pa.schema([
        ("prompt", _MESSAGES), ("completion", _MESSAGES), ("label", pa.bool_()),
        ("chat_template_kwargs", _KWARGS),
        ("conversation_id", pa.string()), ("message_id", pa.string()),
        ("source", pa.string()), ("categories", pa.list_(pa.string())),
    ]),
    "dpo": pa.schema([
        ("prompt", _MESSAGES), ("chosen", _MESSAGES), ("rejected", _MESSAGES),
        ("chat_template_kwargs", _KWARGS),
        ("conversation_id", pa.string()), ("chosen_id", pa.string()), ("rejected_id", pa.string()),
        ("source", pa.string()), ("categories", pa.list_(pa.string())),
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
    labeller: str | None = None  # sft
    store: str | None = None

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
        ]
        if self.labeller:
            lines.append(f"- attribute labeller: {self.labeller}")
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


# --------------------------------------------------------------------------- reading the store


@dataclass
class _Node:
    id: str
    parent_id: str | None
    role: str
    content: str
    status: str
    seq: int
    attributes: Attributes | None
    children: list["_Node"] = field(default_factory=list)


@dataclass
class _Conversation:
    id: str
    nodes: dict[str, _Node]
    ratings: dict[str, int]  # assistant message id -> latest rating
    choices: dict[str | None, str]  # parent id -> the child the user kept (latest choice)
    events: dict[str, set[str]]  # assistant message id -> categories of feedback about it
    # assistant message id -> the user turns (ids, oldest first) that rephrase its question
    rephrases: dict[str, list[str]] = field(default_factory=dict)

    def reception(self, message_id: str) -> Reception:
        return Reception(self.ratings.get(message_id), frozenset(self.events.get(message_id, ())))

    def path(self, node: _Node | None) -> list[_Node]:
        out = []
        while node is not None:
            out.append(node)
            node = self.nodes.get(node.parent_id) if node.parent_id else None
        return out[::-1]

    def prompt(self, answer: _Node) -> list[dict]:
        parent = self.nodes.get(answer.parent_id) if answer.parent_id else None
        return [_message(n.role, n.content) for n in self.path(parent)]

    def kept_child(self, parent_id: str, *, default_newest: bool) -> _Node | None:
        """The assistant answer under `parent_id` the user kept: their explicit choice, else the
        only one the conversation went on from, else (if `default_newest`) the newest."""
        kids = [k for k in self.nodes[parent_id].children if k.role == "assistant"]
        if not kids:
            return None
        by_id = {k.id: k for k in kids}
        if self.choices.get(parent_id) in by_id:
            return by_id[self.choices[parent_id]]
        continued = [k for k in kids if k.children]
        if len(continued) == 1 and len(kids) > 1:
            return continued[0]
        return kids[-1] if default_newest else None


def _message(role: str, content: str, attributes: str | None = None) -> dict:
    return {"role": role, "content": content, "attributes": attributes}


def _load_chunk(store, conv_ids: list[str]) -> Iterator[_Conversation]:
    rows = training_rows(store, conv_ids)
    convs = {cid: _Conversation(cid, {}, {}, {}, {}) for cid in conv_ids}
    for cid, mid, parent, role, content, status, seq, attributes in rows.messages:
        convs[cid].nodes[mid] = _Node(mid, parent, role, content, status, seq, attributes)
        if mid in rows.ratings:
            convs[cid].ratings[mid] = rows.ratings[mid]
    for cid, parent, mid in rows.kept:
        convs[cid].choices[parent] = mid
    for cid, target, category, user_msg in rows.feedback:
        conv = convs[cid]
        conv.events.setdefault(target, set()).add(category)
        if category == REPEAT_REPHRASE and user_msg in conv.nodes:
            conv.rephrases.setdefault(target, []).append(user_msg)
    for conv in convs.values():
        for users in conv.rephrases.values():
            users.sort(key=lambda u: conv.nodes[u].seq)
        for node in conv.nodes.values():  # seq order, so children end up oldest first
            if node.parent_id in conv.nodes:
                conv.nodes[node.parent_id].children.append(node)
        yield conv


# --------------------------------------------------------------------------- candidates per kind


@dataclass
class _Candidate:
    row: dict
    guarded_text: str | None  # the text the safety filter must pass (desirable / chosen / SFT target)
    label: bool | None = None  # kto only, for conflict detection


def _answers(conv: _Conversation) -> Iterator[_Node]:
    for node in conv.nodes.values():
        if node.role == "assistant" and node.parent_id is not None:
            yield node


def _sft_candidates(conv: _Conversation, labeller: Labeller, dropped: Counter) -> Iterator[_Candidate]:
    for node in _answers(conv):
        reception = conv.reception(node.id)
        if reception.verdict != GOOD:
            continue
        if node.status != "complete":
            dropped["incomplete_answer"] += 1
            continue
        attrs = labeller.label(node.content, reception).steerlm()
        yield _Candidate(
            {
                "prompt": conv.prompt(node),
                "completion": [_message("assistant", node.content, attrs)],
                "chat_template_kwargs": {"attributes": attrs},
                "conversation_id": conv.id, "message_id": node.id,
                "source": reception.source, "categories": sorted(reception.categories),
            },
            guarded_text=node.content,
        )


def _kto_candidates(conv: _Conversation, dropped: Counter) -> Iterator[_Candidate]:
    for node in _answers(conv):
        reception = conv.reception(node.id)
        verdict = reception.verdict
        if verdict not in (GOOD, BAD):
            if verdict == MIXED:
                dropped["mixed_feedback"] += 1
            continue
        if node.status != "complete":
            dropped["incomplete_answer"] += 1
            continue
        attrs = node.attributes.steerlm() if node.attributes else None
        desirable = verdict == GOOD
        yield _Candidate(
            {
                "prompt": conv.prompt(node),
                "completion": [_message("assistant", node.content, attrs)],
                "label": desirable,
                "chat_template_kwargs": {"attributes": attrs},
                "conversation_id": conv.id, "message_id": node.id,
                "source": reception.source, "categories": sorted(reception.categories),
            },
            guarded_text=node.content if desirable else None,
            label=desirable,
        )


def _dpo_row(conv: _Conversation, chosen: _Node, rejected: _Node, source: str, prompt_of: _Node,
             categories: Iterable[str]) -> dict:
    attrs = chosen.attributes.steerlm() if chosen.attributes else None
    return {
        "prompt": conv.prompt(prompt_of),
        "chosen": [_message("assistant", chosen.content, attrs)],
        "rejected": [_message("assistant", rejected.content, attrs)],
        "chat_template_kwargs": {"attributes": attrs},
        "conversation_id": conv.id, "chosen_id": chosen.id, "rejected_id": rejected.id,
        "source": source, "categories": sorted(set(categories)),
    }


def _usable_pair(conv: _Conversation, chosen: _Node, rejected: _Node, dropped: Counter) -> bool:
    if chosen.status != "complete" or rejected.status != "complete":
        dropped["incomplete_answer"] += 1
        return False
    if chosen.content.strip() == rejected.content.strip():
        dropped["identical_pair"] += 1
        return False
    # The pair must not contradict what the user said about either answer.
    if conv.reception(chosen.id).verdict == BAD or conv.reception(rejected.id).verdict == GOOD:
        dropped["contradicted_pair"] += 1
        return False
    return True


def _sibling_pairs(conv: _Conversation, dropped: Counter) -> Iterator[_Candidate]:
    for parent in conv.nodes.values():
        answers = [k for k in parent.children if k.role == "assistant"]
        if len(answers) < 2:
            continue
        kept = conv.kept_child(parent.id, default_newest=False)
        if kept is None:
            dropped["siblings_without_choice"] += 1
            continue
        source = "sibling_choice" if conv.choices.get(parent.id) == kept.id else "sibling_continued"
        for other in answers:
            if other is kept or not _usable_pair(conv, kept, other, dropped):
                continue
            yield _Candidate(_dpo_row(conv, kept, other, source, kept, ()), guarded_text=kept.content)


def _rephrase_pairs(conv: _Conversation, dropped: Counter) -> Iterator[_Candidate]:
    rephrasing_turns = {u for users in conv.rephrases.values() for u in users}
    for first in _answers(conv):
        # Start a chain only at its first answer: one whose question was not itself a rephrase.
        if first.id not in conv.rephrases or first.parent_id in rephrasing_turns:
            continue
        losers, user_id, winner = [first], conv.rephrases[first.id][-1], None
        while (answer := conv.kept_child(user_id, default_newest=True)) is not None:
            if conv.reception(answer.id).verdict == GOOD:
                winner = answer
                break
            if answer.id not in conv.rephrases:
                break
            losers.append(answer)
            user_id = conv.rephrases[answer.id][-1]
        if winner is None:
            dropped["rephrase_without_good_answer"] += 1
            continue
        categories = [REPEAT_REPHRASE, *conv.reception(winner.id).categories]
        for loser in losers:
            if _usable_pair(conv, winner, loser, dropped):
                yield _Candidate(_dpo_row(conv, winner, loser, "rephrase", loser, categories),
                                 guarded_text=winner.content)


def _dpo_candidates(conv: _Conversation, dropped: Counter) -> Iterator[_Candidate]:
    yield from _sibling_pairs(conv, dropped)
    yield from _rephrase_pairs(conv, dropped)


# --------------------------------------------------------------------------- the build


def _key(row: dict, kind: str) -> str:
    trained = {k: row[k] for k in TRAIN_COLUMNS[kind] if k != "label"}
    return hashlib.sha256(json.dumps(trained, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _dedupe(cands: list[_Candidate], kind: str, dropped: Counter) -> list[_Candidate]:
    """Keep the first (oldest) of identical examples; drop every copy of one that occurs with both labels."""
    groups: dict[str, list[_Candidate]] = {}
    for c in cands:
        groups.setdefault(_key(c.row, kind), []).append(c)
    out = []
    for group in groups.values():
        if len({c.label for c in group}) > 1:
            dropped["conflicting_labels"] += len(group)
            continue
        dropped["duplicates"] += len(group) - 1
        out.append(group[0])
    return out


def _apply_filter(cands: list[_Candidate], safety_filter: SafetyFilter) -> tuple[list[_Candidate], int]:
    guarded = [i for i, c in enumerate(cands) if c.guarded_text is not None]
    flags = safety_filter.flags([cands[i].guarded_text for i in guarded]) if guarded else []
    if len(flags) != len(guarded):
        raise DatasetError(f"safety filter {safety_filter.name!r} returned {len(flags)} flags for {len(guarded)} texts")
    flagged = {i for i, f in zip(guarded, flags) if f}
    return [c for i, c in enumerate(cands) if i not in flagged], len(flagged)


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


def build_dataset(
    store,
    kind: str,
    out_dir: str | Path,
    *,
    safety_filter: SafetyFilter | None = None,
    labeller: Labeller | None = None,
    eval_fraction: float = DEFAULT_EVAL_FRACTION,
    chunk_conversations: int = CHUNK_CONVERSATIONS,
) -> DatasetCard:
    """Build one training set from `store` (a `feedback.store.Store`) into `out_dir`.

    Writes train/eval Parquet and the dataset card (JSON + Markdown); returns the card.
    `safety_filter` defaults to `AcceptEverythingFilter` (nothing moderated) — the card says so;
    `deploy.loop.safety.make_safety_filter` gives the moderator-backed one.
    """
    if kind not in KINDS:
        raise DatasetError(f"unknown dataset kind {kind!r}; choose one of {', '.join(KINDS)}")
    if not 0.0 <= eval_fraction < 1.0:
        raise DatasetError(f"eval_fraction must be in [0, 1), got {eval_fraction}")
    safety_filter = safety_filter or AcceptEverythingFilter()
    labeller = labeller or HeuristicLabeller()
    dropped: Counter = Counter()

    conv_ids, n_forgotten = training_conversation_ids(store)
    if n_forgotten:
        dropped["forgotten_user_conversations"] = n_forgotten
    cands: list[_Candidate] = []
    for start in range(0, len(conv_ids), chunk_conversations):
        for conv in _load_chunk(store, conv_ids[start:start + chunk_conversations]):
            if kind == "sft":
                cands.extend(_sft_candidates(conv, labeller, dropped))
            elif kind == "kto":
                cands.extend(_kto_candidates(conv, dropped))
            else:
                cands.extend(_dpo_candidates(conv, dropped))

    cands = _dedupe(cands, kind, dropped)
    cands, removed = _apply_filter(cands, safety_filter)
    train = [c.row for c in cands if split_of(c.row["conversation_id"], eval_fraction) == "train"]
    evals = [c.row for c in cands if split_of(c.row["conversation_id"], eval_fraction) == "eval"]

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_rows(train, kind, out_dir / TRAIN_FILE)
    write_rows(evals, kind, out_dir / EVAL_FILE)

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
    (out_dir / CARD_JSON).write_text(json.dumps(card.to_json(), indent=2) + "\n")
    (out_dir / CARD_MD).write_text(card.markdown())
    return card
