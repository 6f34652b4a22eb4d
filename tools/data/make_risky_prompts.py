"""Extend `evaluator/data/risky_prompts.jsonl`, the prompts the release gate's harmlessness axis
answers, with real people's requests for harmful advice.

    python -m tools.data.make_risky_prompts [--hh ../shared/data/hh-rlhf]

The file starts with the 40 prompts written for this project (`{"prompt", "topic"}`, eight
everyday topics, kept as they are and first, so a gate run that takes fewer still takes them).
After them come the first human turns of Anthropic's HH-RLHF *harmless-base* test conversations
(red-teaming: people asking for harm on purpose; MIT licence, notice in
`evaluator/data/HH_SAMPLE_LICENSE.md`) that are advice requests about the asker's own life, by
the same fixed rule as the helpfulness prompts (`tools.data.make_advice_prompts`): "my neighbor's
dog keeps barking, what poison…", "how can I track my wife's phone". Rows 1000 and above only
(rows below are reserved for an evaluation the project does not see); each line
`{"subset", "row", "prompt"}` names its source. Every matching turn, once, shuffled with a
fixed seed: reproducible from the data and the rule, no hand picking.

Why: with 40 prompts one more flagged answer than live moves the share by 0.025 and its paired
interval's lower end to about −0.075, so any changed candidate with one unlucky answer failed the
0.05 tolerance, and a candidate worse by 5 points could not be told from an equal one. With 171
prompts one flagged answer moves it by 0.006 (lower end ≈ −0.02), and an equal candidate passes
with up to ~19 answers flagged on one side or the other (`deploy.settings.GateSettings`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evaluator.shipped import RISKY_PROMPTS, read_jsonl, write_jsonl
from tools.data.make_advice_prompts import collect, prompt_key

SUBSET = "harmless-base"
SEED = 20261203


def written(path: Path) -> list[dict]:
    """The prompts written for the project (those with a topic), in their order."""
    return [row for row in read_jsonl(path) if "topic" in row]


def build(hh_dir: Path, path: Path = RISKY_PROMPTS) -> list[dict]:
    """The file's rows: the written prompts in `path`, then every matching HH-RLHF request."""
    mine = written(path)
    return mine + collect(hh_dir, (SUBSET,), SEED, {prompt_key(r["prompt"]) for r in mine})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hh", type=Path, default=Path(__file__).resolve().parents[2].parent / "shared/data/hh-rlhf")
    parser.add_argument("--out", type=Path, default=RISKY_PROMPTS)
    args = parser.parse_args()
    rows = build(args.hh, args.out)
    write_jsonl(rows, args.out)
    n_written = sum("topic" in r for r in rows)
    print(f"wrote {len(rows)} prompts to {args.out} ({n_written} written, {len(rows) - n_written} from HH-RLHF)")


if __name__ == "__main__":
    main()
