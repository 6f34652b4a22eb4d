"""bench/learning.py's `--gate-root`: gating an earlier run later refuses, with a reason, when it has
no result file to add the decision to, when the run's store does not hold exactly one trained
candidate, or when the file already holds a decision; it writes nothing in any case."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from bench_helpers import load_bench

from store import Store


def _args(root, out):
    return SimpleNamespace(gate_root=root, out=out)


def test_gating_later_needs_the_runs_result_file(tmp_path):
    with pytest.raises(SystemExit, match="needs --out"):
        load_bench("learning").gate_later(_args(tmp_path, tmp_path / "missing.json"))


def test_gating_later_needs_exactly_one_trained_candidate(tmp_path):
    Store(tmp_path / "advisor.duckdb").close()
    out = tmp_path / "result.json"
    out.write_text('{"timings_s": {}}\n')
    with pytest.raises(SystemExit, match="found 0"):
        load_bench("learning").gate_later(_args(tmp_path, out))
    assert out.read_text() == '{"timings_s": {}}\n'


def test_gating_later_leaves_a_gated_result_alone(tmp_path):
    out = tmp_path / "result.json"
    out.write_text('{"gate": {"promote": false}}\n')
    with pytest.raises(SystemExit, match="already holds a gate decision"):
        load_bench("learning").gate_later(_args(tmp_path, out))
    assert out.read_text() == '{"gate": {"promote": false}}\n'
