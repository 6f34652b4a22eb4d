"""Training examples from the store, per kind: the conversation tree of each chunk of
conversations, and the SFT / KTO / DPO candidates read off it (see `feedback.datasets`).
"""

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from evaluator.text import words
from feedback.datasets.card import GUARD_WRITTEN, TRAIN_COLUMNS, DatasetError, SafetyFilter
from feedback.labeller import BAD, GOOD, MIXED, Labeller, Reception
from store.analytics import training_rows
from store.attributes import Attributes
from store.taxonomy import REPEAT_REPHRASE

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
    guard_written: bool = False  # the safety guard's refusal, not the model's answer
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


def load_chunk(store, conv_ids: list[str]) -> Iterator[_Conversation]:
    rows = training_rows(store, conv_ids)
    convs = {cid: _Conversation(cid, {}, {}, {}, {}) for cid in conv_ids}
    for cid, mid, parent, role, content, status, seq, attributes, guard_written in rows.messages:
        convs[cid].nodes[mid] = _Node(mid, parent, role, content, status, seq, attributes, guard_written)
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
class Candidate:
    row: dict
    guarded_text: str | None  # the text the safety filter must pass (desirable / chosen / SFT target)
    label: bool | None = None  # kto only, for conflict detection
    asked: Attributes | None = None  # kto only: the attributes the answer was asked for


def _answers(conv: _Conversation) -> Iterator[_Node]:
    for node in conv.nodes.values():
        if node.role == "assistant" and node.parent_id is not None:
            yield node


def _model_answer(node: _Node, dropped: Counter | None = None) -> bool:
    """Whether `node` may be a training answer: a complete answer the model wrote. A refusal the
    safety guard wrote in its place is not the model's behaviour (`GUARD_WRITTEN` on the card)."""
    reason = GUARD_WRITTEN if node.guard_written else "incomplete_answer" if node.status != "complete" else None
    if reason is not None and dropped is not None:
        dropped[reason] += 1
    return reason is None


def sft_candidates(conv: _Conversation, labeller: Labeller, dropped: Counter) -> Iterator[Candidate]:
    for node in _answers(conv):
        reception = conv.reception(node.id)
        if reception.verdict != GOOD or not _model_answer(node, dropped):
            continue
        attrs = labeller.label(node.content, reception).steerlm()
        yield Candidate(
            {
                "prompt": conv.prompt(node),
                "completion": [_message("assistant", node.content, attrs)],
                "chat_template_kwargs": {"attributes": attrs},
                "conversation_id": conv.id, "message_id": node.id,
                "source": reception.source, "categories": sorted(reception.categories),
            },
            guarded_text=node.content,
        )


def kto_candidates(conv: _Conversation, dropped: Counter) -> Iterator[Candidate]:
    for node in _answers(conv):
        reception = conv.reception(node.id)
        verdict = reception.verdict
        if verdict not in (GOOD, BAD):
            if verdict == MIXED:
                dropped["mixed_feedback"] += 1
            continue
        if not _model_answer(node, dropped):
            continue
        attrs = node.attributes.steerlm() if node.attributes else None
        desirable = verdict == GOOD
        yield Candidate(
            {
                "prompt": conv.prompt(node),
                "completion": [_message("assistant", node.content, attrs)],
                "label": desirable,
                "chat_template_kwargs": {"attributes": attrs},
                "conversation_id": conv.id, "message_id": node.id,
                "source": reception.source, "categories": sorted(reception.categories),
            },
            guarded_text=node.content if desirable else None,
            label=desirable, asked=node.attributes,
        )


def asked_lengths(conv: _Conversation) -> Iterator[tuple[int, int]]:
    """(verbosity asked for, words) of every answer the model wrote under a slider setting: how
    long the models that wrote them write at each level."""
    for node in _answers(conv):
        if node.attributes is not None and _model_answer(node):
            yield node.attributes.verbosity, words(node.content)


def relabel_desirable(cands: list[Candidate], labeller: Labeller) -> set[str]:
    """Desirable KTO answers carry the verbosity and complexity their text has, as SFT rows do
    (SteerLM's rule: an answer liked for being long, written at verbosity 0, teaches "at 0, write
    long" under the asked label, which flattens the slider); the quality values stay as asked,
    and undesirable answers keep what they were asked for. Returns the ids of the answers whose
    label changed."""
    changed = set()
    for c in cands:
        if not c.label or c.asked is None or c.guarded_text is None:
            continue
        has = labeller.label(c.guarded_text, Reception(1))
        attrs = replace(c.asked, verbosity=has.verbosity, complexity=has.complexity)
        if attrs != c.asked:
            changed.add(c.row["message_id"])
            c.row["completion"][0]["attributes"] = c.row["chat_template_kwargs"]["attributes"] = attrs.steerlm()
    return changed


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
    if chosen.guard_written or rejected.guard_written:
        dropped[GUARD_WRITTEN] += 1
        return False
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


def _sibling_pairs(conv: _Conversation, dropped: Counter) -> Iterator[Candidate]:
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
            yield Candidate(_dpo_row(conv, kept, other, source, kept, ()), guarded_text=kept.content)


def _rephrase_pairs(conv: _Conversation, dropped: Counter) -> Iterator[Candidate]:
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
                yield Candidate(_dpo_row(conv, winner, loser, "rephrase", loser, categories),
                                 guarded_text=winner.content)


def dpo_candidates(conv: _Conversation, dropped: Counter) -> Iterator[Candidate]:
    yield from _sibling_pairs(conv, dropped)
    yield from _rephrase_pairs(conv, dropped)


# --------------------------------------------------------------------------- the build


def _key(row: dict, kind: str) -> str:
    trained = {k: row[k] for k in TRAIN_COLUMNS[kind] if k != "label"}
    return hashlib.sha256(json.dumps(trained, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def dedupe(cands: list[Candidate], kind: str, dropped: Counter) -> list[Candidate]:
    """Keep the first (oldest) of identical examples; drop every copy of one that occurs with both labels."""
    groups: dict[str, list[Candidate]] = {}
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


def apply_filter(cands: list[Candidate], safety_filter: SafetyFilter) -> tuple[list[Candidate], int]:
    guarded = [i for i, c in enumerate(cands) if c.guarded_text is not None]
    prompts = [[{"role": m["role"], "content": m["content"]} for m in cands[i].row["prompt"]] for i in guarded]
    flags = safety_filter.flags([cands[i].guarded_text for i in guarded], prompts) if guarded else []
    if len(flags) != len(guarded):
        raise DatasetError(f"safety filter {safety_filter.name!r} returned {len(flags)} flags for {len(guarded)} texts")
    flagged = {i for i, f in zip(guarded, flags) if f}
    return [c for i, c in enumerate(cands) if i not in flagged], len(flagged)
