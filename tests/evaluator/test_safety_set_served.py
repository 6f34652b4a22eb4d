"""The safety set's served rows: every request of the first 600 rows answered once as served, then
the guard bench's dev answers, numbered from s0600, unlabelled, and nothing drawn again once drawn."""

from __future__ import annotations

import json

from evaluator.judges.safety import SERVED
from evaluator.shipped import read_jsonl
from tools.data import make_safety_set as m


def test_served_rows_follow_the_first_600_with_one_row_per_request(tmp_path):
    first = [r for r in read_jsonl(m.OUT) if r["model"] != SERVED]
    requests = {(r["subset"], r["row"]): r for r in first}
    work = tmp_path / "draws.jsonl"  # a finished draw: nothing is generated again
    work.write_text("".join(json.dumps({**{k: r[k] for k in ("kind", "subset", "row", "request")}, "side": "served",
                                        "answer": f" answer to {r['row']} ", "batch_seconds": 1.0}) + "\n"
                            for r in requests.values()))
    bench = tmp_path / "bench.jsonl"
    dev = [{"part": "dev", "side": "served", "kind": "everyday", "subset": "helpful-base", "row": 5000 + i,
            "request": f"q{i}", "answer": f"a{i}"} for i in range(3)]
    bench.write_text("".join(json.dumps(r) + "\n" for r in dev + [{**dev[0], "part": "test", "row": 9}]))
    rows = m.served_rows(tmp_path, bench, work)
    assert [r["id"] for r in rows] == [f"s{600 + i:04d}" for i in range(len(requests) + 3)]
    assert {(r["subset"], r["row"]) for r in rows[:len(requests)]} == set(requests)
    assert {r["row"] for r in rows[len(requests):]} == {5000, 5001, 5002}  # dev only, after the draws
    assert all(r["model"] == SERVED and r["answer_unsafe"] is None and r["answer"] == r["answer"].strip() for r in rows)


def test_red_team_draws_mix_two_harmful_to_one_harmless_and_number_from_s1060(tmp_path):
    order = m.red_team_order()
    assert all(r.source == "hh" and r.subset == "harmless-base" for r in order)
    assert [r.request_harmful for r in order[:6]] == [True, True, False, True, True, False]
    assert len({(r.subset, r.row) for r in order}) == len(order)
    work = tmp_path / "draws.jsonl"  # a finished draw of the first four: nothing is generated again
    work.write_text("".join(json.dumps({"kind": "risky", "subset": r.subset, "row": r.row, "request": r.request,
                                        "request_harmful": r.request_harmful, "side": "served",
                                        "answer": " an answer ", "batch_seconds": 1.0}) + "\n" for r in order[:4]))
    rows = m.request_draws(tmp_path, work, 4)
    assert [r["id"] for r in rows] == ["s1060", "s1061", "s1062", "s1063"]
    assert [r["request_harmful"] for r in rows] == [True, True, False, True]
    assert all(r["model"] == SERVED and r["answer_unsafe"] is None and r["answer"] == "an answer" for r in rows)
