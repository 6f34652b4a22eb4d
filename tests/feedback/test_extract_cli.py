"""`advisor extract` and `advisor extract eval` end to end through the CLI, on a real store."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from deploy.wiring import build_cli
from store import Store


def _invoke(tmp_path, *args):
    return CliRunner().invoke(build_cli(), ["--data-dir", str(tmp_path), *args], catch_exceptions=False)


def test_extract_runs_once_and_records_a_job(tmp_path):
    with Store(tmp_path / "advisor.duckdb") as store:
        conv = store.conversations.create("u1")
        q = store.conversations.add_message(conv.id, "user", "How do I sleep better?")
        a = store.conversations.add_message(conv.id, "assistant", "Keep a wind-down routine.", parent_id=q.id)
        store.conversations.add_message(conv.id, "user", "Thanks, that's really helpful!", parent_id=a.id)
    result = _invoke(tmp_path, "extract", "--extractor", "fast", "--json")
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout.strip().splitlines()[-1])
    assert job["status"] == "succeeded" and job["per_category"]["positive"] == 1 and job["trigger"] == "cli"
    again = json.loads(_invoke(tmp_path, "extract", "--json").stdout.strip().splitlines()[-1])
    assert again["messages"] == 0 and again["new_events"] == 0


def test_eval_json_is_one_object_with_the_agreed_keys(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({
        "id": "c1",
        "messages": [{"role": "user", "content": "How do I sleep better?"},
                     {"role": "assistant", "content": "Keep a wind-down routine."},
                     {"role": "user", "content": "Thanks, that's really helpful! What do you mean by wind-down routine?"}],
        "feedback": [{"message": 2, "category": "positive", "span": "Thanks, that's really helpful!"},
                     {"message": 2, "category": "ask_clarification", "span": "What do you mean by wind-down routine?"}],
    }) + "\n")
    result = _invoke(tmp_path, "extract", "eval", "--gold", str(gold), "--json", "--bootstrap", "100")
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)  # exactly one JSON object on stdout
    for key in ("span_precision", "span_recall", "category_precision", "category_recall"):
        assert set(metrics[key]) == {"value", "low", "high"}
    assert metrics["span_precision"]["value"] == 1.0 and metrics["span_recall"]["value"] == 1.0
    assert (metrics["n_conversations"], metrics["n_gold"], metrics["n_predicted"]) == (1, 2, 2)


def test_eval_reports_a_broken_gold_file(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text("{not json\n")
    result = _invoke(tmp_path, "extract", "eval", "--gold", str(gold))
    assert result.exit_code == 2 and "gold.jsonl:1" in result.output
