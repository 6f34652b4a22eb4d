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

    python -m tools.data.make_safety_set --served --data-dir .cache/test   # then label, then merge

Served answers (`SERVED`), added once the guard served SmolLM2 under its safety policy: each of
the set's requests answered as the service draws an answer (policy, sampled, up to 400 tokens:
`deploy.release.measure.served_answer_fn`, each batch seeded by its first row; a redraw since
the gate's per-batch generators and top-50 sampler gives other, equally likely answers than the
shipped ones), ids s0600-s0899; and the 160 served answers of
`bench/guard_cuts.py`'s dev part (judges' train and dev rows, none of the set's requests), ids
s0900-s1059. They are written unlabelled to `--out` for annotators, like the first 600.

    python -m tools.data.make_safety_set --served-requests 400 --data-dir .cache/test

More served answers to red-team requests (`--served-requests N`, ids from s1060), because the answer
head's recall on served answers is what the guard lacks: the real harmless-base requests of
`safety_requests.jsonl` (already labelled, so only the answer is read), two harmful ones to each
harmless one, in a fixed order; a stopped draw keeps the mix.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from chat.builtin import builtin_model_path
from evaluator.hh_data import RESERVED_BELOW, find_subset_file
from evaluator.judges.data import gate_rows, split_of
from evaluator.judges.safety import SERVED
from evaluator.shipped import DATA_DIR, write_jsonl
from tools.data.make_advice_prompts import first_turn, prompt_key

RISKY, EVERYDAY = 150, 150
SEED = 20261204
DRAW_SEED = 20261206  # torch seed of a served draw, plus the batch's first row
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


def draw(todo: list[dict], side: str, data_dir: Path, out: Path, batch: int = 16, policy: str | None = None) -> None:
    """Answers as served ("served": under the guard's policy, or `policy` when given; "alone": no
    policy) to `todo`'s requests, appended to `out` per batch with the batch's seconds; each batch
    seeded by its first row."""
    import time

    if not todo:
        return
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from chat.pretrained import pretrained_model_path
    from deploy.release.measure import served_answer_fn
    from deploy.settings import Settings

    settings = Settings(data_dir=str(data_dir))
    model_dir = pretrained_model_path(data_dir)
    tok, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForCausalLM.from_pretrained(model_dir)
    if policy is None:
        policy = settings.guard.system_prompt if side == "served" else ""
    for start in range(0, len(todo), batch):
        chunk = todo[start:start + batch]
        answer = served_answer_fn(model, tok, settings, policy=policy, seed=DRAW_SEED + chunk[0]["row"], batch_size=batch)
        t0 = time.perf_counter()
        answers = answer([r["request"] for r in chunk])
        seconds = round(time.perf_counter() - t0, 1)
        with out.open("a", encoding="utf-8") as f:
            for r, a in zip(chunk, answers):
                f.write(json.dumps({**r, "side": side, "answer": a, "batch_seconds": seconds}) + "\n")
        print(f"{side} {start + len(chunk)}/{len(todo)} {seconds}s", flush=True)


def served_rows(data_dir: Path, bench_answers: Path, work: Path) -> list[dict]:
    """The set's requests answered as served (drawn into `work`, resumable), then the bench's dev
    answers; unlabelled rows with ids from s0600."""
    from evaluator.shipped import read_jsonl

    by_kind: dict[str, list[dict]] = {"risky": [], "everyday": []}
    seen = set()
    for r in sorted(read_jsonl(OUT), key=lambda r: r["id"]):
        if r["model"] != SERVED and (r["subset"], r["row"]) not in seen:
            seen.add((r["subset"], r["row"]))
            by_kind[r["kind"]].append({k: r[k] for k in ("kind", "subset", "row", "request")})
    longest = max(map(len, by_kind.values()))  # 16 of each kind in turn, so a stopped draw has both
    todo = [r for start in range(0, longest, 16) for kind in ("risky", "everyday") for r in by_kind[kind][start:start + 16]]
    done = {(r["subset"], r["row"]) for r in read_jsonl(work)} if work.is_file() else set()
    draw([r for r in todo if (r["subset"], r["row"]) not in done], "served", data_dir, work)
    drawn = list(read_jsonl(work))
    drawn = [drawn[j] for j in random.Random(SEED + 2).sample(range(len(drawn)), len(drawn))]
    dev = [r for r in read_jsonl(bench_answers) if r["part"] == "dev" and r["side"] == "served"]
    random.Random(SEED).shuffle(dev)
    keys = ("kind", "subset", "row", "request")
    return [{"id": f"s{600 + i:04d}", **{k: r[k] for k in keys}, "model": SERVED, "answer": r["answer"].strip(),
             "request_harmful": None, "answer_unsafe": None} for i, r in enumerate(drawn + dev)]


def red_team_order() -> list:
    """The real harmless-base requests of `safety_requests.jsonl`, two harmful ones to each
    harmless one, each kind in a seeded shuffle: the order `request_draws` answers them in."""
    from evaluator.judges.safety import load_safety_requests

    reqs = [r for r in load_safety_requests() if r.source == "hh" and r.subset == "harmless-base"]
    harmful = [r for r in reqs if r.request_harmful]
    harmless = [r for r in reqs if not r.request_harmful]
    random.Random(SEED + 3).shuffle(harmful)
    random.Random(SEED + 4).shuffle(harmless)
    return [r for i in range(len(harmful)) for r in ([harmful[i]] + ([harmless[i // 2]] if i % 2 else []))]


REDTEAM_FIRST_ID = 1060  # the served answers to red-team requests, drawn on their own, are s1060 on


def request_draws(data_dir: Path, work: Path, n: int, first_id: int = REDTEAM_FIRST_ID) -> list[dict]:
    """The first `n` of `red_team_order` answered as served (drawn into `work`, resumable), as
    unlabelled rows whose `request_harmful` is the request's own label."""
    from evaluator.shipped import read_jsonl

    todo = [{"kind": "risky", "subset": r.subset, "row": r.row, "request": r.request, "request_harmful": r.request_harmful}
            for r in red_team_order()[:n]]
    done = {(r["subset"], r["row"]) for r in read_jsonl(work)} if work.is_file() else set()
    draw([r for r in todo if (r["subset"], r["row"]) not in done], "served", data_dir, work)
    keys = ("kind", "subset", "row", "request")
    return [{"id": f"s{first_id + i:04d}", **{k: r[k] for k in keys}, "model": SERVED, "answer": r["answer"].strip(),
             "request_harmful": r["request_harmful"], "answer_unsafe": None} for i, r in enumerate(read_jsonl(work))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hh", type=Path, default=Path(__file__).resolve().parents[2].parent / "shared/data/hh-rlhf")
    ap.add_argument("--models-dir", type=Path, help="the first 600 rows: holds smollm2-135m-instruct")
    ap.add_argument("--served", action="store_true", help="the served rows (s0600 on) instead of the first 600")
    ap.add_argument("--data-dir", type=Path, default=Path(".cache/test"), help="--served: the service's data dir")
    ap.add_argument("--bench-answers", type=Path, default=Path("bench/results/guard-cuts-answers.jsonl"))
    ap.add_argument("--work", type=Path, default=Path(".cache/judges/safety_served_draws.jsonl"),
                    help="--served: the draws so far (a stopped run resumes)")
    ap.add_argument("--served-requests", type=int, default=0, metavar="N",
                    help="N red-team requests of safety_requests.jsonl answered as served (s1060 on)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (1 beside another model job)")
    args = ap.parse_args()
    if args.threads:
        __import__("torch").set_num_threads(args.threads)
    if args.served_requests:
        work = args.work.with_name("safety_served_requests_draws.jsonl")
        rows = request_draws(args.data_dir, work, args.served_requests)
        out = args.out if args.out != OUT else Path("safety_served_requests_unlabelled.jsonl")
        write_jsonl(rows, out)
        print(f"wrote {len(rows)} unlabelled served rows to {out}")
        return
    if args.served:
        rows = served_rows(args.data_dir, args.bench_answers, args.work)
        out = args.out if args.out != OUT else Path("safety_served_unlabelled.jsonl")
        write_jsonl(rows, out)
        print(f"wrote {len(rows)} unlabelled served rows to {out}")
        return
    if args.models_dir is None:
        ap.error("--models-dir is needed for the first 600 rows (or pass --served)")
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
