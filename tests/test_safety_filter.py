"""The harmlessness moderator as the training-set filter: on by default in `advisor dataset build`,
`--no-safety-filter` switches to the named accept-everything filter, the card records what was
removed, and nothing flagged is ever a desirable example."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
from conftest import cache_dir
from typer.testing import CliRunner

from deploy.loop.safety import ModeratorSafetyFilter, make_safety_filter
from deploy.settings import load_settings
from deploy.wiring import build_cli
from evaluator.moderation import load_safety_examples
from feedback.datasets import AcceptEverythingFilter
from store import GenerationMeta, Store
from store.attributes import Attributes


def _populate(data_dir, liked: list[str], disliked: list[str]) -> None:
    with Store(data_dir / "advisor.duckdb") as store:
        store.users.ensure_user("u1")
        for text, value in [(t, 1) for t in liked] + [(t, -1) for t in disliked]:
            conv = store.conversations.create_conversation("u1", source="api")
            q = store.conversations.add_message(conv.id, "user", "Any tips for saving money?")
            a = store.conversations.add_message(conv.id, "assistant", text, parent_id=q.id,
                                                generation=GenerationMeta(backend="test", model="m", attributes=Attributes()))
            store.conversations.rate(a.id, "u1", value)


def _build(data_dir, out, *flags: str) -> dict:
    result = CliRunner().invoke(build_cli(), ["--data-dir", str(data_dir), "dataset", "build", "--kind", "kto",
                                              "--out", str(out), "--json", *flags], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout[result.stdout.index("{"):])


def test_moderator_filters_desirable_rows_by_default_and_can_be_switched_off(tmp_path):
    examples = load_safety_examples()
    safe = [e.text for e in examples if not e.unsafe][:8]
    unsafe = [e.text for e in examples if e.unsafe][:4]
    _populate(tmp_path, liked=safe[:4] + unsafe, disliked=safe[4:])
    if (cache_dir() / "moderator").is_dir():  # the trained moderator, shared with the other slow tests
        shutil.copytree(cache_dir() / "moderator", tmp_path / "models" / "moderator", dirs_exist_ok=True)

    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path)})
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
