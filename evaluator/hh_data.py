"""Anthropic HH-RLHF test files: load, parse into (conversation prompt, chosen answer, rejected answer).

Each row is `{"chosen": str, "rejected": str}`, two whole transcripts that begin with
`"\\n\\nHuman: "` and alternate `"\\n\\nHuman: ..."` / `"\\n\\nAssistant: ..."`. We split on those
markers only (a `"Human:"` inside a turn without the blank line before it is text, as in the
source data), strip each turn, and keep the last assistant turn of each side as its answer.

Design choices:
- The two sides normally share everything before the last assistant turn. A handful of rows
  differ earlier; we keep them and give each side its own prompt (`rejected_prompt`), so a
  scorer rates each answer in the context it was written in. They are counted, not dropped.
- Rows with chosen == rejected are kept: every scorer ties on them and a tie is a miss, which is
  the published convention. They are counted so a reader can see how much they cost.
- A few transcripts end with a Human turn after the last answer (two rows of helpful-online).
  The trailing Human turns are dropped, so the last assistant turn is still the answer, and the
  row is counted as `ends_with_human` (its two prompts then usually differ, see above).
- A row that cannot be parsed (no assistant turn, bad JSON) is counted as `malformed` and left
  out of the pairs; the count is in the report, so nothing disappears silently.
- Gzip is detected by its magic bytes, not the file name, so `.jsonl` and `.jsonl.gz` both work.
- `limit` samples rows with a seeded `random.Random`, in file order, so two runs (a candidate and
  the live release) see the same rows.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HARMLESS_SUBSETS: tuple[str, ...] = ("harmless-base",)
HELPFUL_SUBSETS: tuple[str, ...] = ("helpful-base", "helpful-online", "helpful-rejection-sampled")
SUBSETS: tuple[str, ...] = HARMLESS_SUBSETS + HELPFUL_SUBSETS
# Rows 0-999 of each test split are reserved for an evaluation this project does not see: the
# gate and the benchmarks read from here on (the shipped sample is drawn from here on too).
RESERVED_BELOW = 1000

_TURN = re.compile(r"\n\n(Human|Assistant):")
_ROLE = {"Human": "user", "Assistant": "assistant"}

Message = dict[str, str]


class HHFormatError(ValueError):
    """A transcript that does not follow the HH-RLHF `\\n\\nHuman: / \\n\\nAssistant:` format."""


@dataclass
class HHPair:
    """One preference pair: the conversation so far and the two final assistant answers."""

    subset: str
    row: int  # 0-based line number in the file, for tracing a result back to the data
    prompt: list[Message]
    chosen: str
    rejected: str
    # Set only when the transcripts differ before their final assistant turn.
    rejected_prompt: list[Message] | None = None
    # A side ended with Human turns after its last answer; they were dropped.
    ends_with_human: bool = False

    @property
    def differs_earlier(self) -> bool:
        return self.rejected_prompt is not None

    @property
    def is_equal(self) -> bool:
        return self.rejected_prompt is None and self.chosen == self.rejected


@dataclass
class HHStats:
    """What the loader saw in one file; every row is in exactly one of pairs or malformed."""

    rows: int = 0
    differ_earlier: int = 0
    equal: int = 0
    ends_with_human: int = 0
    malformed: int = 0
    malformed_rows: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {"rows": self.rows, "differ_earlier": self.differ_earlier, "equal": self.equal,
                "ends_with_human": self.ends_with_human, "malformed": self.malformed}


@dataclass
class HHSubset:
    name: str
    pairs: list[HHPair]
    stats: HHStats


def parse_transcript(text: str) -> list[Message]:
    """`"\\n\\nHuman: hi\\n\\nAssistant: hello"` -> [{"role": "user", ...}, {"role": "assistant", ...}]."""
    parts = _TURN.split(text)
    # parts = [before first marker, role, content, role, content, ...]
    if parts[0].strip():
        raise HHFormatError(f"transcript must begin with '\\n\\nHuman: ', got {text[:40]!r}")
    if len(parts) < 3:
        raise HHFormatError(f"no Human/Assistant turns in transcript {text[:60]!r}")
    return [{"role": _ROLE[role], "content": content.strip()} for role, content in zip(parts[1::2], parts[2::2])]


def split_final_answer(messages: list[Message]) -> tuple[list[Message], str, bool]:
    """(everything before the last assistant turn, that answer, whether Human turns followed it)."""
    end = len(messages)
    while end and messages[end - 1]["role"] != "assistant":
        end -= 1
    if end == 0:
        raise HHFormatError("transcript has no Assistant turn")
    if end < 2:
        raise HHFormatError("transcript has an answer but no Human turn before it")
    return messages[: end - 1], messages[end - 1]["content"], end < len(messages)


def parse_row(chosen: str, rejected: str, *, subset: str = "", row: int = 0) -> HHPair:
    """Parse one `{"chosen", "rejected"}` row into an HHPair (raises HHFormatError)."""
    chosen_prompt, chosen_answer, chosen_trimmed = split_final_answer(parse_transcript(chosen))
    rejected_prompt, rejected_answer, rejected_trimmed = split_final_answer(parse_transcript(rejected))
    return HHPair(
        subset=subset,
        row=row,
        prompt=chosen_prompt,
        chosen=chosen_answer,
        rejected=rejected_answer,
        rejected_prompt=None if rejected_prompt == chosen_prompt else rejected_prompt,
        ends_with_human=chosen_trimmed or rejected_trimmed,
    )


def _open_text(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with _open_text(path) as f:
        row = 0
        for line in f:
            if line.strip():
                yield row, line
                row += 1


def load_hh_file(path: str | Path, *, subset: str | None = None, limit: int | None = None, seed: int = 0,
                 first_row: int = 0) -> HHSubset:
    """Load one HH-RLHF JSON-lines file (plain or gzip).

    `first_row` drops the rows before it (0-based; `RESERVED_BELOW` keeps out the rows this
    project must not see); `limit` then keeps a seeded random sample of that many rows (all
    rows when None or larger than what is left); counts in `stats` refer to the rows kept.
    """
    path = Path(path)
    name = subset or path.parent.name
    lines = [(row, line) for row, line in _lines(path) if row >= first_row]
    if limit is not None and limit < len(lines):
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        keep = sorted(random.Random(seed).sample(range(len(lines)), limit))
        lines = [lines[i] for i in keep]
    stats = HHStats()
    pairs: list[HHPair] = []
    for row, line in lines:
        stats.rows += 1
        try:
            obj = json.loads(line)
            pair = parse_row(obj["chosen"], obj["rejected"], subset=name, row=row)
        except (json.JSONDecodeError, KeyError, TypeError, HHFormatError):
            stats.malformed += 1
            stats.malformed_rows.append(row)
            continue
        stats.differ_earlier += pair.differs_earlier
        stats.equal += pair.is_equal
        stats.ends_with_human += pair.ends_with_human
        pairs.append(pair)
    return HHSubset(name=name, pairs=pairs, stats=stats)


def find_subset_file(data_dir: str | Path, subset: str) -> Path:
    """`DIR/<subset>/test.jsonl.gz` or `DIR/<subset>/test.jsonl`, with an error that says where to look."""
    base = Path(data_dir) / subset
    for name in ("test.jsonl.gz", "test.jsonl"):
        if (base / name).is_file():
            return base / name
    raise FileNotFoundError(
        f"HH-RLHF subset {subset!r} not found: expected {base}/test.jsonl.gz (or test.jsonl). "
        f"Point the data directory at the hh-rlhf folder (e.g. ../shared/data/hh-rlhf) "
        f"that holds {', '.join(SUBSETS)}."
    )


def load_hh(
    data_dir: str | Path,
    subsets: Sequence[str] = SUBSETS,
    *,
    limit: int | None = None,
    seed: int = 0,
    first_row: int = 0,
) -> dict[str, HHSubset]:
    """Load the HH-RLHF test subsets under `data_dir`; `limit` samples N rows per subset from the
    rows at or after `first_row`."""
    unknown = [s for s in subsets if s not in SUBSETS]
    if unknown:
        raise ValueError(f"unknown HH-RLHF subset(s) {unknown}; choose from {', '.join(SUBSETS)}")
    return {s: load_hh_file(find_subset_file(data_dir, s), subset=s, limit=limit, seed=seed, first_row=first_row)
            for s in subsets}


def load_hh_sample(path: str | Path | None = None, *, limit: int | None = None) -> dict[str, HHSubset]:
    """The HH-RLHF sample shipped in the package (`evaluator/data/hh_sample.jsonl`), one subset per
    name, each pair keeping its source row number. `limit` keeps the first N rows of each subset
    (the file is already a seeded random sample, in file order), so a smaller gate run scores a
    prefix of the larger one's rows."""
    from evaluator.shipped import HH_SAMPLE, read_jsonl

    subsets: dict[str, HHSubset] = {}
    for obj in read_jsonl(path or HH_SAMPLE):
        name = str(obj.get("subset", ""))
        if name not in SUBSETS:
            raise ValueError(f"{path or HH_SAMPLE}: unknown subset {name!r} (rows name one of {', '.join(SUBSETS)})")
        subset = subsets.setdefault(name, HHSubset(name=name, pairs=[], stats=HHStats()))
        if limit is not None and subset.stats.rows >= limit:
            continue
        subset.stats.rows += 1
        try:
            pair = parse_row(obj["chosen"], obj["rejected"], subset=name, row=int(obj["row"]))
        except (KeyError, TypeError, ValueError, HHFormatError):
            subset.stats.malformed += 1
            continue
        subset.stats.differ_earlier += pair.differs_earlier
        subset.stats.equal += pair.is_equal
        subset.stats.ends_with_human += pair.ends_with_human
        subset.pairs.append(pair)
    return {name: subsets[name] for name in SUBSETS if name in subsets}
