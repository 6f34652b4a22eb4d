"""Make the requests and answers of the labelled safety set (`evaluator/data/safety_set.jsonl`).

    python -m tools.data.make_safety_set --models-dir .cache/test/models [--hh ../shared/data/hh-rlhf]

Requests: first human turns of HH-RLHF test conversations, rows >= 1000 of the judges' train and
dev splits only (`evaluator.judges.data.split_of`; the judges' test rows and every row the gate
measures with are never drawn): `RISKY` real requests from harmless-base (red-teaming: people
asking for harm on purpose, though some turns are harmless openers) and `EVERYDAY` from
helpful-base. Distinct by `prompt_key`, shuffled with a fixed seed.

Answers: each request answered greedily by the served model (SmolLM2-135M-Instruct, as the chat
renders a question at the default sliders, no system prompt) and by the built-in model, so each
request gives two (request, answer) rows. Rows are written unlabelled (`"answer_unsafe": null`);
annotators fill `request_harmful` and `answer_unsafe` by the conventions in
`docs/safety_conventions.md` (`tools/annotation/safety.py` merges their files).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from chat.builtin import builtin_model_path
from evaluator.hh_data import RESERVED_BELOW, find_subset_file
from evaluator.judges.data import gate_rows, split_of
from evaluator.shipped import DATA_DIR, write_jsonl
from tools.data.make_advice_prompts import first_turn, prompt_key

RISKY, EVERYDAY = 150, 150
SEED = 20261204
MAX_NEW_TOKENS = 128
OUT = DATA_DIR / "safety_set.jsonl"


def requests(hh_dir: Path, subset: str, n: int, seed: int = SEED,
             splits: tuple[str, ...] = ("train", "dev")) -> list[dict]:
    """`n` distinct first human turns of `subset` (rows >= 1000 of the judges' `splits`, none the
    gate measures with, at most 600 characters), shuffled with `seed`."""
    held = gate_rows()
    seen: set[str] = set()
    rows = []
    with __import__("gzip").open(find_subset_file(hh_dir, subset), "rt", encoding="utf-8") as f:
        for row, line in enumerate(f):
            if row < RESERVED_BELOW or (subset, row) in held or split_of(subset, row) not in splits:
                continue
            prompt = first_turn(json.loads(line)["chosen"])
            key = prompt_key(prompt)
            if prompt and key not in seen and len(prompt) <= 600:
                seen.add(key)
                rows.append({"subset": subset, "row": row, "request": prompt})
    random.Random(seed).shuffle(rows)
    return rows[:n]


def answer(model_dir: Path, mode: str, questions: list[str], max_new_tokens: int = MAX_NEW_TOKENS) -> list[str]:
    """Greedy answers of the model at `model_dir`, each question rendered as the chat renders it
    at the default sliders (`mode`: the model's steering rendering)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from chat.steering import render
    from evaluator.generation import hf_answer_fn
    from store.attributes import Attributes

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    steerlm = render([], Attributes(), mode)[1]
    fn = hf_answer_fn(model, tok, max_new_tokens=max_new_tokens, batch_size=16,
                      template_kwargs={"attributes": steerlm} if steerlm else None,
                      to_messages=lambda q: render([{"role": "user", "content": q}], Attributes(), mode)[0])
    return fn(questions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hh", type=Path, default=Path(__file__).resolve().parents[2].parent / "shared/data/hh-rlhf")
    ap.add_argument("--models-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (1 beside another model job)")
    args = ap.parse_args()
    if args.threads:
        __import__("torch").set_num_threads(args.threads)
    reqs = [{**r, "kind": "risky"} for r in requests(args.hh, "harmless-base", RISKY)]
    reqs += [{**r, "kind": "everyday"} for r in requests(args.hh, "helpful-base", EVERYDAY)]
    questions = [r["request"] for r in reqs]
    out = []
    for name, sub, mode in (("smollm2", "smollm2-135m-instruct", "instruct"), ("builtin", None, "steerlm")):
        model_dir = args.models_dir / sub if sub else builtin_model_path(args.models_dir.parent)
        for r, a in zip(reqs, answer(model_dir, mode, questions)):
            out.append({**r, "model": name, "answer": a.strip()})
    order = random.Random(SEED + 1).sample(range(len(out)), len(out))
    rows = [{"id": f"s{i:04d}", **out[j], "request_harmful": None, "answer_unsafe": None}
            for i, j in enumerate(order)]
    write_jsonl(rows, args.out)
    print(f"wrote {len(rows)} unlabelled rows to {args.out}")


if __name__ == "__main__":
    main()
