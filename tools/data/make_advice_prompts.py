"""Write `evaluator/data/advice_prompts.jsonl`: the advice requests the release gate's helpfulness
axis answers, one per line `{"subset", "row", "prompt"}`.

    python -m tools.data.make_advice_prompts [--hh ../shared/data/hh-rlhf]

Source: the first human turn of Anthropic's HH-RLHF test conversations (MIT licence, Copyright
2022 Anthropic; notice in `evaluator/data/HH_SAMPLE_LICENSE.md`), from the three *helpful*
subsets (harmless-base asks for harm on purpose; the gate's harmlessness axis has its own
prompts). Only rows 1000 and above (rows below 1000 are reserved for an evaluation the project
does not see); every line names its subset and 0-based row, so it can be traced back.

Which turns: people asking for advice about their own life, found by a fixed pattern (a person
in the asker's life, "should I", "what should I do", "how do I deal/handle/tell/…", "advice"),
6 to 60 words, each distinct prompt once (the rejection-sampled subset repeats some base
prompts). No sampling and no hand picking: every matching turn is kept, in an order shuffled with
a fixed seed, so a gate run that takes the first N takes a random sample of all three subsets,
and the file is reproducible from the data and the rule.

Why a few hundred: the gate pairs candidate and live answer by answer, and the 95 % interval of
their mean difference shrinks with the square root of the number of prompts; 13 ranked-advice
questions gave a half-width near 0.17 for an equally good candidate, wider than any useful
tolerance (docs/release.md, "Helpfulness with power"). With the ~250 prompts here it is about four times narrower.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from pathlib import Path

from evaluator.hh_data import RESERVED_BELOW
from evaluator.shipped import write_jsonl

SUBSETS = ("helpful-base", "helpful-online", "helpful-rejection-sampled")
SEED = 20261201
OUT = Path(__file__).resolve().parents[2] / "evaluator" / "data" / "advice_prompts.jsonl"
PEOPLE = ("wife|husband|friend|friends|boss|son|daughter|mom|mother|dad|father|parents|girlfriend|boyfriend|"
          "roommate|neighbor|neighbour|coworker|co-worker|kid|kids|partner|family|sister|brother|teacher|"
          "landlord|child|children|baby|dog|cat")
ADVICE = re.compile(rf"\b(my ({PEOPLE})|should i|what should i do|any advice|advice|how do i (deal|handle|tell|"
                    r"talk|get my|stop|cope|ask|convince|make friends|approach))\b", re.IGNORECASE)


def first_turn(transcript: str) -> str:
    """The first human turn of an HH transcript ("\\n\\nHuman: … \\n\\nAssistant: …")."""
    return transcript.split("\n\nAssistant:")[0].replace("\n\nHuman:", "", 1).strip()


def is_advice_request(text: str) -> bool:
    return 6 <= len(text.split()) <= 60 and ADVICE.search(text) is not None


def prompt_key(prompt: str) -> str:
    """What makes two prompts the same one: case and spacing aside."""
    return " ".join(prompt.lower().split())


def collect(hh_dir: Path, subsets: tuple[str, ...] = SUBSETS, seed: int = SEED, skip: set[str] = frozenset()) -> list[dict]:
    """Every distinct advice request among the first human turns of `subsets` (rows ≥ 1000), not
    in `skip` (lower-cased, whitespace-normalised), shuffled with `seed`."""
    rows, seen = [], set(skip)
    for subset in subsets:
        with gzip.open(hh_dir / subset / "test.jsonl.gz", "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                if i < RESERVED_BELOW or not line.strip():
                    continue
                prompt = first_turn(json.loads(line)["chosen"])
                key = prompt_key(prompt)
                if is_advice_request(prompt) and key not in seen:
                    seen.add(key)
                    rows.append({"subset": subset, "row": i, "prompt": prompt})
    random.Random(seed).shuffle(rows)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hh", type=Path, default=Path(__file__).resolve().parents[2].parent / "shared/data/hh-rlhf")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = collect(args.hh)
    write_jsonl(rows, args.out)
    print(f"wrote {len(rows)} prompts to {args.out}")


if __name__ == "__main__":
    main()
