"""Check any judge on any preference pairs: does it score the answer people chose above the other?

A pairs file holds JSON lines `{"prompt", "chosen", "rejected", "axis": "helpful"|"harmless"}`; the
prompt is the dialogue so far in HH-RLHF's form (`"\\n\\nHuman: ...\\n\\nAssistant: ..."`, with or
without a trailing empty `"\\n\\nAssistant:"`). Per axis: pairwise accuracy (a tie, or a NaN score,
is a miss: the published convention), its 95 % bootstrap interval over pairs, and the count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evaluator.hh_data import HHFormatError, parse_transcript
from evaluator.judges.data import AXES
from evaluator.paired import bootstrap_mean
from evaluator.shipped import read_jsonl


def read_pairs(path: str | Path) -> dict[str, list[tuple[list[dict], str, str]]]:
    """axis -> [(conversation so far, chosen answer, rejected answer)]; errors name the line."""
    out: dict[str, list] = {axis: [] for axis in AXES}
    for n, obj in enumerate(read_jsonl(path), start=1):
        axis = obj.get("axis")
        if axis not in AXES:
            raise ValueError(f"{path} line {n}: 'axis' must be one of {', '.join(AXES)}, got {axis!r}")
        try:
            text = str(obj["prompt"]).rstrip()
            if text.endswith("\n\nAssistant:"):
                text = text[: -len("\n\nAssistant:")]
            prompt = parse_transcript(text)
            chosen, rejected = str(obj["chosen"]).strip(), str(obj["rejected"]).strip()
        except KeyError as e:
            raise ValueError(f"{path} line {n}: missing field {e}; need prompt, chosen, rejected, axis") from e
        except HHFormatError as e:
            raise ValueError(f"{path} line {n}: {e}") from e
        out[axis].append((prompt, chosen, rejected))
    return {axis: pairs for axis, pairs in out.items() if pairs}


def pair_hits(judge: Any, pairs: list[tuple[list[dict], str, str]]) -> list[float]:
    prompts = [p for p, _, _ in pairs]
    chosen = judge.score(prompts, [c for _, c, _ in pairs])
    rejected = judge.score(prompts, [r for _, _, r in pairs])
    return [1.0 if (math.isfinite(c) and math.isfinite(r) and c > r) else 0.0 for c, r in zip(chosen, rejected)]


def check_judges(judges: Mapping[str, Any], pairs: Mapping[str, list]) -> dict[str, dict]:
    """Per axis with pairs: {"accuracy", "interval", "pairs", "judge"} for the judge of that axis."""
    out = {}
    for axis, rows in pairs.items():
        b = bootstrap_mean(pair_hits(judges[axis], rows))
        out[axis] = {"accuracy": round(b["value"], 4), "interval": [round(x, 4) for x in b["ci95"]],
                     "pairs": b["n"], "judge": getattr(judges[axis], "version", type(judges[axis]).__name__)}
    return out
