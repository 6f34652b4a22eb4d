"""The training-set filter: on by default in `advisor dataset build`, `--no-safety-filter` switches
to the named accept-everything filter, the card records what was removed, and nothing flagged is
ever a desirable example. With the trained judges (the default) the moderator and the
harmlessness judge both vote; with `judges.kind = "fallback"` the moderator alone."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
from conftest import cache_dir
from typer.testing import CliRunner

from deploy.loop.safety import JudgeSafetyFilter, ModeratorSafetyFilter, make_safety_filter
from deploy.settings import load_settings
from deploy.wiring import build_cli
from evaluator.moderation import load_safety_examples
from feedback.datasets import AcceptEverythingFilter
from store import GenerationMeta, Store
from store.attributes import Attributes


def _populate(data_dir, liked: list[str], disliked: list[str]) -> None:
    with Store(data_dir / "advisor.duckdb") as store:
        store.users.ensure("u1")
        for text, value in [(t, 1) for t in liked] + [(t, -1) for t in disliked]:
            conv = store.conversations.create("u1", source="api")
            q = store.conversations.add_message(conv.id, "user", "Any tips for saving money?")
            a = store.conversations.add_message(conv.id, "assistant", text, parent_id=q.id,
                                                generation=GenerationMeta(backend="test", model="m", attributes=Attributes()))
            store.conversations.rate(a.id, "u1", value)


def _build(data_dir, out, *flags: str) -> dict:
    result = CliRunner(env={"ADVISOR_JUDGES__KIND": "fallback"}).invoke(
        build_cli(), ["--data-dir", str(data_dir), "dataset", "build", "--kind", "kto", "--out", str(out), "--json", *flags],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout[result.stdout.index("{"):])


def test_moderator_filters_desirable_rows_by_default_and_can_be_switched_off(tmp_path):
    examples = load_safety_examples()
    safe = [e.text for e in examples if not e.unsafe][:8]
    unsafe = [e.text for e in examples if e.unsafe][:4]
    _populate(tmp_path, liked=safe[:4] + unsafe, disliked=safe[4:])
    if (cache_dir() / "moderator").is_dir():  # the trained moderator, shared with the other slow tests
        shutil.copytree(cache_dir() / "moderator", tmp_path / "models" / "moderator", dirs_exist_ok=True)

    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path), "judges.kind": "fallback"})
    moderator = make_safety_filter(settings)
    assert isinstance(moderator, ModeratorSafetyFilter)
    expected = sum(moderator.flags(safe[:4] + unsafe))
    assert expected >= 3  # the shipped unsafe tips are what the moderator was trained to flag

    card = _build(tmp_path, tmp_path / "filtered")
    assert card["safety_filter"].startswith("moderator") and card["removed_by_filter"] == expected
    desirable = [r["completion"][0]["content"] for r in pq.read_table(tmp_path / "filtered" / "train.parquet").to_pylist()
                 + pq.read_table(tmp_path / "filtered" / "eval.parquet").to_pylist() if r["label"]]
    assert not set(desirable) & set(moderator.last_flagged)

    card = _build(tmp_path, tmp_path / "unfiltered", "--no-safety-filter")
    assert card["safety_filter"].startswith("accept-everything") and card["removed_by_filter"] == 0
    assert "removed 0" in (tmp_path / "unfiltered" / "dataset_card.md").read_text()


def test_switched_off_filter_is_the_named_accept_everything():
    off = make_safety_filter(load_settings(environ={}), enabled=False)
    assert isinstance(off, AcceptEverythingFilter) and "off" in off.name
    assert off.flags(["anything"]) == [False]


class _Words:
    """A moderator or judge stand-in that flags (or scores 1 for) texts with one word."""

    name = "words"

    def __init__(self, word: str):
        self.word, self.seen = word, []

    def flags(self, texts, prompts=None):
        return [self.word in t for t in texts]

    def answer_risk(self, requests, answers):
        self.seen.append(list(requests))
        return [1.0 if self.word in a else 0.0 for a in answers]


def test_judge_filter_drops_what_either_the_moderator_or_the_judge_flags_and_reads_the_request():
    judge = _Words("poison")
    flt = JudgeSafetyFilter(_Words("knife"), judge, threshold=0.5)
    prompts = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]
    assert flt.flags(["use a knife", "use poison", "use a towel"], prompts) == [True, True, False]
    assert flt.last_flagged == ["use a knife", "use poison"]
    assert judge.seen == [prompts]  # the judge read each answer under its own conversation
    assert "trained harmlessness judge" in flt.name and flt.name.startswith("words")


def test_default_settings_filter_with_the_moderator_and_the_trained_judge(tmp_path):
    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path)})
    assert isinstance(make_safety_filter(settings), JudgeSafetyFilter)
    fallback = load_settings(environ={}, overrides={"data_dir": str(tmp_path), "judges.kind": "fallback"})
    assert isinstance(make_safety_filter(fallback), ModeratorSafetyFilter)


@pytest.mark.slow
def test_judge_filter_flags_real_unsafe_answers_it_never_saw_and_passes_everyday_ones(tmp_path, pretrained_model_dir):
    """On the labelled safety set's held-out part: SmolLM2's answers marked unsafe by careful reading
    mostly flagged, answers to everyday requests mostly not (the judge's held-out precision and
    recall are in docs/judges.md; these bounds are far below them, to catch a broken filter)."""
    from evaluator.judges.safety import load_safety_set

    held = [it for it in load_safety_set() if it.split == "held_out"]
    unsafe = [it for it in held if it.answer_unsafe]
    everyday = [it for it in held if it.kind == "everyday" and it.model == "smollm2"][:20]
    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path),
                                                    "judges.model_dir": str(pretrained_model_dir)})
    flt = make_safety_filter(settings)
    moderator_dir = cache_dir() / "moderator"
    if moderator_dir.is_dir():
        shutil.copytree(moderator_dir, tmp_path / "models" / "moderator", dirs_exist_ok=True)
    items = unsafe + everyday
    flags = flt.flags([it.answer for it in items], [[{"role": "user", "content": it.request}] for it in items])
    caught, wrong = sum(flags[: len(unsafe)]), sum(flags[len(unsafe):])
    assert len(unsafe) >= 10 and caught >= 0.5 * len(unsafe), (caught, len(unsafe))
    assert wrong <= 0.2 * len(everyday), (wrong, len(everyday))
