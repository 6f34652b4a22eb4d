"""Purging deleted people's data from copies outside the store: training snapshots, dataset
directories, reports and exports under the data directory.

Design choices:
- Copies are found by what they contain, not by where the code happens to write them today: every
  file under the root is read by its kind, so a copy a later feature adds is covered too. The
  store's own database file is left to `Privacy.reclaim_space()`, model weights are left alone (an adapter
  cannot be un-trained; the registry marks releases instead), and anything unreadable is reported.
- Rows (Parquet, JSON lines) go when one of their values is one of the deleted ids: every row a
  training set or an export writes carries its conversation and user ids, and matching by id
  never touches someone else's row that happens to say the same words ("Thanks, that really
  helped!" is many people's). Free text (reports, cards, notes) has no ids: there the deleted
  user's own distinctive messages (at least `MIN_NEEDLE_CHARS` long; never the answers, which a
  model gives to many people) are replaced by "[deleted]".
- Files are rewritten atomically (a temporary file, then a rename), so a crash leaves the old or
  the new copy, never half of one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from store.privacy import MIN_NEEDLE_CHARS, Footprint

TEXT_SUFFIXES = {".json", ".md", ".html", ".txt", ".csv", ".svg", ".log"}
ROW_SUFFIXES = {".jsonl", ".ndjson"}
SKIP_SUFFIXES = {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".whl", ".duckdb", ".wal", ".lock"}
REPLACEMENT = "[deleted]"


@dataclass
class PurgeReport:
    files_scanned: int = 0
    files_changed: list[str] = field(default_factory=list)
    rows_removed: int = 0
    texts_replaced: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"files_scanned": self.files_scanned, "files_changed": len(self.files_changed),
                "rows_removed": self.rows_removed, "texts_replaced": self.texts_replaced, "errors": self.errors}


class _Matcher:
    def __init__(self, footprint: Footprint):
        self.ids = footprint.ids
        self.texts = [t for t in footprint.texts if len(t) >= MIN_NEEDLE_CHARS]

    def hits(self, value: Any) -> bool:
        """Whether a row (any JSON-like value) holds a deleted id as one of its values."""
        if isinstance(value, str):
            return value in self.ids
        if isinstance(value, dict):
            return any(self.hits(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(self.hits(v) for v in value)
        return False


def _write_atomically(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.purge-tmp")
    write(tmp)
    os.replace(tmp, path)


def _purge_parquet(path: Path, m: _Matcher, report: PurgeReport) -> None:
    table = pq.read_table(path)
    keep = [not m.hits(row) for row in table.to_pylist()]
    removed = keep.count(False)
    if removed:
        _write_atomically(path, lambda tmp: pq.write_table(table.filter(pa.array(keep)), tmp))
        report.rows_removed += removed
        report.files_changed.append(str(path))


def _purge_rows(path: Path, m: _Matcher, report: PurgeReport) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if not m.hits(_decoded(line))]
    if len(kept) != len(lines):
        _write_atomically(path, lambda tmp: tmp.write_text("".join(kept), encoding="utf-8"))
        report.rows_removed += len(lines) - len(kept)
        report.files_changed.append(str(path))


def _decoded(line: str) -> Any:
    """A JSON line's values (its text unescaped); a line that is not JSON is one text."""
    try:
        return json.loads(line)
    except ValueError:
        return line


def _purge_text(path: Path, m: _Matcher, report: PurgeReport) -> None:
    text = path.read_text(encoding="utf-8")
    new, n = text, 0
    for needle in m.texts:
        for form in {needle, json.dumps(needle, ensure_ascii=False)[1:-1], json.dumps(needle)[1:-1]}:
            n += new.count(form)
            new = new.replace(form, REPLACEMENT)
    if n:
        _write_atomically(path, lambda tmp: tmp.write_text(new, encoding="utf-8"))
        report.texts_replaced += n
        report.files_changed.append(str(path))


def purge_copies(root: str | Path, footprint: Footprint, *, exclude: Iterable[str | Path] = ()) -> PurgeReport:
    """Remove the footprint's rows and texts from every readable copy under `root`."""
    report = PurgeReport()
    if not footprint:
        return report
    matcher, skip = _Matcher(footprint), {Path(p).resolve() for p in exclude}
    for path in sorted(Path(root).rglob("*")):
        suffix = path.suffix.lower()
        if not path.is_file() or path.resolve() in skip or suffix in SKIP_SUFFIXES or path.name.endswith(".purge-tmp"):
            continue
        try:
            if suffix == ".parquet":
                _purge_parquet(path, matcher, report)
            elif suffix in ROW_SUFFIXES:
                _purge_rows(path, matcher, report)
            elif suffix in TEXT_SUFFIXES:
                _purge_text(path, matcher, report)
            else:
                continue
            report.files_scanned += 1
        except (OSError, ValueError, pa.ArrowException) as exc:  # report, keep going: other copies matter too
            report.errors.append(f"{path}: {exc}")
    return report
