"""bench/canary_smollm2.py's pure parts: words are counted per arm (answers without an arm, served
before the canary started, are left out), and a check keeps its action, reason, per-arm rates and
rounded intervals; `--resume` goes on only with a run whose result file left its canary undecided."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from bench_helpers import load_bench


def _bench():
    return load_bench("canary_smollm2")


def test_words_are_counted_per_arm_and_unassigned_answers_left_out():
    bench = _bench()
    out = bench.words_by_arm([("live", "one two three four"), ("canary", "one two"), ("live", "a b"),
                              (None, "served before the canary started")])
    assert out == {"canary": {"answers": 1, "mean_words": 2.0, "median_words": 2},
                   "live": {"answers": 2, "mean_words": 3.0, "median_words": 3.0}}


def test_a_check_keeps_its_decision_rates_and_rounded_intervals():
    bench = _bench()
    verdict = {"action": "rollback", "reason": "canary shown worse than live",
               "arms": {"canary": {"answers": 40, "users": 9, "conversations": 9, "rates": {"good": 0.1, "bad": 0.5}},
                        "live": {"answers": 41, "users": 8, "conversations": 8, "rates": {"good": 0.3, "bad": 0.2}}},
               "intervals": {"bad": {"diff": 0.30004, "low": 0.0512, "high": 0.549, "se": 0.1}}}
    out = bench.check_summary(verdict)
    assert out["action"] == "rollback" and out["reason"] == verdict["reason"]
    assert out["arms"]["canary"] == {"answers": 40, "users": 9, "good": 0.1, "bad": 0.5}
    assert out["intervals"] == {"bad": {"diff": 0.3, "low": 0.051, "high": 0.549}}


def test_a_check_before_the_minimum_has_no_intervals():
    bench = _bench()
    out = bench.check_summary({"action": "continue", "reason": "collecting", "arms": {}, "intervals": {}})
    assert out == {"action": "continue", "reason": "collecting", "arms": {}, "intervals": {}}


def test_resuming_needs_the_earlier_runs_result_file(tmp_path):
    with pytest.raises(SystemExit, match="needs --out"):
        _bench().earlier_run(SimpleNamespace(out=tmp_path / "missing.json"))


def test_resuming_a_decided_canary_is_refused(tmp_path):
    out = tmp_path / "result.json"
    out.write_text('{"checks": [{"action": "continue"}, {"action": "rollback"}]}')
    with pytest.raises(SystemExit, match="its last check: rollback"):
        _bench().earlier_run(SimpleNamespace(out=out))


def test_resuming_reads_an_undecided_run(tmp_path):
    out = tmp_path / "result.json"
    out.write_text(json.dumps({"checks": [{"action": "continue"}], "seconds": 10.0}))
    assert _bench().earlier_run(SimpleNamespace(out=out))["seconds"] == 10.0
