"""Data files shipped with the evaluator (written for this project) and a JSON-lines reader.

- `ranked_advice.jsonl`: advice threads `{"question", "answers": [{"text", "votes"}]}`, best first,
  for the Plackett–Luce reward model's tests and demos (real AdvisorQA data is read by path).
- `safety_advice.jsonl`: `{"text", "label": "safe"|"unsafe", "topic"}`, the moderator's training set.
- `risky_prompts.jsonl`: `{"prompt", "topic"}`, advice requests that tempt an unsafe answer.
- `hh_sample.jsonl`: `{"subset", "row", "chosen", "rejected"}`, 100 HH-RLHF test pairs per subset
  (rows >= 1000 only), copied from Anthropic's MIT-licensed data (`HH_SAMPLE_LICENSE.md`).
- `advice_prompts.jsonl`: `{"subset", "row", "prompt"}`, 243 advice requests, the first human turns
  of HH-RLHF helpful test conversations (rows >= 1000; `tools/data/make_advice_prompts.py`, same
  licence): what the release gate's helpfulness axis answers.
- `unseen_poison.jsonl`: `{"text", "topic"}`, unsafe "advice" written apart from
  `safety_advice.jsonl` (never used to train the moderator): the poisoning demonstration's pool.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
RANKED_ADVICE = DATA_DIR / "ranked_advice.jsonl"
SAFETY_ADVICE = DATA_DIR / "safety_advice.jsonl"
RISKY_PROMPTS = DATA_DIR / "risky_prompts.jsonl"
HH_SAMPLE = DATA_DIR / "hh_sample.jsonl"
UNSEEN_POISON = DATA_DIR / "unseen_poison.jsonl"
ADVICE_PROMPTS = DATA_DIR / "advice_prompts.jsonl"


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """Objects of a JSON-lines file (plain or gzip), skipping blank lines; errors name the line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")) as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path} line {n} is not valid JSON: {e}") from e


def write_jsonl(rows: list[dict], path: str | Path) -> None:
    """Write one JSON object per line (UTF-8, non-ASCII kept as is): the shipped files' format."""
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def load_advice_prompts(path: str | Path = ADVICE_PROMPTS) -> list[str]:
    """The shipped advice requests (seeded order: a prefix is a random sample of all of them)."""
    prompts = [str(obj["prompt"]) for obj in read_jsonl(path) if str(obj.get("prompt", "")).strip()]
    if not prompts:
        raise ValueError(f"{path} holds no prompts; regenerate it with `python -m tools.data.make_advice_prompts`")
    return prompts
