"""HH-RLHF loading: plain and gzip files, rows that differ earlier, equal rows, malformed rows, sampling."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from prereqs import SHARED_HH, requires

from evaluator.hh_data import (
    SUBSETS,
    HHFormatError,
    find_subset_file,
    load_hh,
    load_hh_file,
    parse_row,
    parse_transcript,
)


def transcript(*turns: str) -> str:
    roles = ["Human", "Assistant"]
    return "".join(f"\n\n{roles[i % 2]}: {t}" for i, t in enumerate(turns))


ROWS = [
    # ordinary: shared history, different final answer
    {"chosen": transcript("How do I sleep better?", "Keep a regular schedule."),
     "rejected": transcript("How do I sleep better?", "Just stay up.")},
    # multi-turn
    {"chosen": transcript("Hi", "Hello!", "Any budgeting tips?", "Track every expense for a month."),
     "rejected": transcript("Hi", "Hello!", "Any budgeting tips?", "Spend less.")},
    # differs earlier: the second assistant turn is already different
    {"chosen": transcript("Q1", "A1 good", "Q2", "final good"),
     "rejected": transcript("Q1", "A1 bad", "Q2", "final bad")},
    # chosen == rejected
    {"chosen": transcript("Same?", "Same."), "rejected": transcript("Same?", "Same.")},
]


def write_jsonl(path: Path, rows: list, *, gz: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_parse_transcript_splits_on_turn_markers_only():
    msgs = parse_transcript("\n\nHuman: drag kings?  Human: more text\n\nAssistant:  An answer. \n\nHuman: ok")
    assert msgs == [
        {"role": "user", "content": "drag kings?  Human: more text"},  # no blank line: it is text
        {"role": "assistant", "content": "An answer."},
        {"role": "user", "content": "ok"},
    ]


def test_parse_transcript_rejects_text_before_first_turn():
    with pytest.raises(HHFormatError, match="must begin"):
        parse_transcript("hello\n\nHuman: hi\n\nAssistant: yo")


def test_parse_row_ordinary_pair():
    pair = parse_row(ROWS[1]["chosen"], ROWS[1]["rejected"])
    assert [m["role"] for m in pair.prompt] == ["user", "assistant", "user"]
    assert pair.chosen == "Track every expense for a month."
    assert pair.rejected == "Spend less."
    assert not pair.differs_earlier and not pair.is_equal


def test_parse_row_differs_earlier_keeps_each_sides_own_prompt():
    pair = parse_row(ROWS[2]["chosen"], ROWS[2]["rejected"])
    assert pair.differs_earlier
    assert pair.prompt[1]["content"] == "A1 good"
    assert pair.rejected_prompt[1]["content"] == "A1 bad"
    assert (pair.chosen, pair.rejected) == ("final good", "final bad")


@pytest.mark.parametrize("gz", [True, False])
def test_load_file_counts_every_kind_of_row(tmp_path, gz):
    bad = [
        "{not json",
        {"chosen": transcript("only a question"), "rejected": transcript("only a question")},
        {"chosen": transcript("q", "a")},  # no rejected key
    ]
    path = write_jsonl(tmp_path / "helpful-base" / ("test.jsonl.gz" if gz else "test.jsonl"), ROWS + bad, gz=gz)
    subset = load_hh_file(path)
    assert subset.name == "helpful-base"
    assert subset.stats.as_dict() == {"rows": 7, "differ_earlier": 1, "equal": 1, "ends_with_human": 0, "malformed": 3}
    assert subset.stats.malformed_rows == [4, 5, 6]
    assert len(subset.pairs) == 4  # equal and differ-earlier rows are kept, not dropped
    assert [p.row for p in subset.pairs] == [0, 1, 2, 3]


def test_trailing_human_turn_is_dropped_and_counted(tmp_path):
    row = {"chosen": transcript("Plan a trip?", "Go to Oaxaca."),
           "rejected": transcript("Plan a trip?", "Go to Cabo.", "Thanks! More tips?")}
    subset = load_hh_file(write_jsonl(tmp_path / "helpful-online" / "test.jsonl", [row], gz=False))
    (pair,) = subset.pairs
    assert (pair.chosen, pair.rejected, pair.ends_with_human) == ("Go to Oaxaca.", "Go to Cabo.", True)
    assert subset.stats.ends_with_human == 1 and subset.stats.malformed == 0


def test_gzip_detected_by_content_not_name(tmp_path):
    plain = load_hh_file(write_jsonl(tmp_path / "a" / "test.jsonl", ROWS, gz=False))
    gz_named_plain = load_hh_file(write_jsonl(tmp_path / "b" / "test.jsonl", ROWS, gz=True))
    assert [p.chosen for p in plain.pairs] == [p.chosen for p in gz_named_plain.pairs]


def test_limit_samples_with_a_fixed_seed(tmp_path):
    rows = [{"chosen": transcript(f"q{i}", f"good {i}"), "rejected": transcript(f"q{i}", f"bad {i}")} for i in range(50)]
    path = write_jsonl(tmp_path / "harmless-base" / "test.jsonl.gz", rows, gz=True)
    a = load_hh_file(path, limit=10, seed=1)
    b = load_hh_file(path, limit=10, seed=1)
    c = load_hh_file(path, limit=10, seed=2)
    assert [p.row for p in a.pairs] == [p.row for p in b.pairs]
    assert [p.row for p in a.pairs] != [p.row for p in c.pairs]
    assert len(a.pairs) == 10 and a.stats.rows == 10
    assert [p.row for p in a.pairs] == sorted(p.row for p in a.pairs)  # file order kept
    assert len(load_hh_file(path, limit=500).pairs) == 50
    late = load_hh_file(path, limit=10, seed=1, first_row=40)  # the reserved rows never enter the sample
    assert sorted(p.row for p in late.pairs) == list(range(40, 50))


def test_load_hh_finds_subsets_and_explains_a_missing_one(tmp_path):
    for s in SUBSETS[:3]:
        write_jsonl(tmp_path / s / "test.jsonl.gz", ROWS, gz=True)
    assert set(load_hh(tmp_path, SUBSETS[:3])) == set(SUBSETS[:3])
    with pytest.raises(FileNotFoundError, match="helpful-rejection-sampled.*test.jsonl.gz"):
        find_subset_file(tmp_path, "helpful-rejection-sampled")
    with pytest.raises(ValueError, match="unknown HH-RLHF subset"):
        load_hh(tmp_path, ["harmless"])


@requires(SHARED_HH.is_dir(), f"the shared HH-RLHF data is not at {SHARED_HH}")
def test_shared_hh_test_split_parses_completely():
    subsets = load_hh(SHARED_HH)
    stats = {name: s.stats.as_dict() for name, s in subsets.items()}
    assert sum(s["rows"] for s in stats.values()) == 8552
    assert all(s["malformed"] == 0 for s in stats.values())
    assert sum(len(s.pairs) for s in subsets.values()) == 8552
    # The data README warns of these; they are counted, not dropped.
    assert sum(s["equal"] for s in stats.values()) > 0
    assert sum(s["differ_earlier"] for s in stats.values()) > 0
