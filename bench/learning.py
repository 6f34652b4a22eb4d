"""The learning loop on the real model (SmolLM2-135M-Instruct) on this CPU: simulated users who want
short (or long) answers, one KTO or DPO run with LoRA, and what it changed on prompts none of them asked.

    .venv/bin/python bench/learning.py [--model-dir .cache/test/models/smollm2-135m-instruct]
        [--prefer short|long] [--method kto|dpo] [--rate regenerate=0.6 ...]
        [--users 16] [--turns 5] [--train-steps 30] [--max-tokens 128] [--relative] [--kto-attributes asked|has]
        [--safety-anchors 0.25] [--dpo-sft-weight 1.0]
        [--gate] [--out bench/results/learning-smollm2.json]
    .venv/bin/python bench/learning.py --gate-root /tmp/advisor-learning-XXXX --out RESULT.json

Steps, each timed:
1. vLLM's CPU build serves the model (runtime LoRA on); the advisor service runs on it (the
   `openai` backend, `instruct` steering, as `advisor serve` does with `advisor serve-model`).
2. The base model answers the 10 held-out questions (chat.builtin.check.HELD_OUT_QUESTIONS; no
   simulated user asks them) greedily at each verbosity 0-4 (complexity 2). The users'
   short/long threshold is the base model's mean length over those five positions, so "short"
   means shorter than this model usually writes; with `--relative`, its length at the position
   the user chose (a taste relative to the slider instead of one that ignores it).
3. Held-out pairs, drawn as the training pairs are made: the base model samples two answers per
   question and slider position (the service's sampling settings), and the users' own rule
   (`Preference.score`) picks the one they keep; equal lengths are left out.
4. Simulated users (real people's phrasing, deploy/loop/real_reactions.jsonl) chat through the
   service's REST API, move the verbosity slider at random, and react; the service's extraction
   job mines their reactions.
5. vLLM is stopped (two cores: training gets both), the KTO or DPO set is built with the
   moderator as the safety filter (and, with `--safety-anchors`, labelled answers to risky
   requests mixed in, `feedback.datasets.anchors`) and a LoRA is trained on it (`launch_training`, steering
   "instruct", so each prompt reads as the model saw it). DPO's pairs are the siblings a user
   regenerated and kept, and rephrases: `--rate regenerate=0.6` makes users regenerate more.
6. vLLM again, the adapter loaded at run time: the candidate answers the held-out questions at
   the same five positions; then the implicit reward β·(log π − log π_ref) of each held-out pair
   (transformers, the adapter disabled for π_ref), under the prompt its answers were sampled for.
7. With `--gate`, the release gate on the candidate in the run's own store, against the base
   model, every gate setting at its default. `--gate-root` does this step alone, later, for a run
   made without `--gate`: the run's directory (printed as 'data') and its result file (`--out`).

Printed and written as JSON: the machine, every step's time, the training set, base → candidate
mean words (per slider position too), Spearman ρ of verbosity and words over the held-out
answers (do the sliders still steer?), the reward margin and share of pairs won with a 95 %
bootstrap interval. A benchmark, not a test: 21-26 minutes a run here (9-15 of them training); the figures are in
docs/learning.md. Why vLLM for generation: the 200 held-out answers of up to 128 tokens take minutes batched
there and over half an hour one at a time through transformers (bench/serve.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))  # after the repo, so bench/store.py does not shadow the store package
sys.path.insert(0, str(REPO / "tests"))

from _machine import cpu_model, emit  # noqa: E402
from hh_models import interval  # noqa: E402

from feedback.datasets.build import KTO_ATTRIBUTES  # noqa: E402

VERBOSITIES = (0, 1, 2, 3, 4)
# Every answer's cap, held-out and simulated alike, unless `--max-tokens` says otherwise. At 128
# the base model's answers at verbosity 3-4 already reach it, so "long" learning shows as a floor.
MAX_NEW_TOKENS = 128


def _messages(question: str, verbosity: int) -> list[dict]:
    from chat.steering import render
    from store.attributes import Attributes

    return render([{"role": "user", "content": question}], Attributes(verbosity=verbosity), "instruct")[0]


def _chat(url: str, model: str, messages: list[dict], max_tokens: int, **sampling) -> list[str]:
    import httpx

    body = {"model": model, "messages": messages, "max_tokens": max_tokens, **sampling}
    r = httpx.post(f"{url}/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    return [c["message"]["content"].strip() for c in r.json()["choices"]]


def answers_by_verbosity(url: str, model: str, max_tokens: int) -> dict[int, list[str]]:
    """Greedy answers to the held-out questions at each slider position, 16 requests at a time."""
    from chat.builtin.check import HELD_OUT_QUESTIONS

    jobs = [(v, q) for v in VERBOSITIES for q in HELD_OUT_QUESTIONS]
    with ThreadPoolExecutor(16) as pool:
        out = list(pool.map(lambda job: _chat(url, model, _messages(job[1], job[0]), max_tokens, temperature=0)[0], jobs))
    by_v: dict[int, list[str]] = {v: [] for v in VERBOSITIES}
    for (v, _), answer in zip(jobs, out):
        by_v[v].append(answer)
    return by_v


def sampled_pairs(url: str, model: str, max_tokens: int) -> list[dict]:
    """Two sampled answers per held-out question and slider position, with the service's sampling."""
    from chat.backends import SamplingParams
    from chat.builtin.check import HELD_OUT_QUESTIONS

    params = SamplingParams()
    jobs = [(v, i, q) for v in VERBOSITIES for i, q in enumerate(HELD_OUT_QUESTIONS)]

    def two(job):
        v, i, q = job
        return _chat(url, model, _messages(q, v), max_tokens, n=2, temperature=params.temperature, top_p=params.top_p,
                     seed=1000 * v + i)

    with ThreadPoolExecutor(16) as pool:
        out = list(pool.map(two, jobs))
    return [{"question": q, "verbosity": v, "answers": tuple(a)} for (v, _, q), a in zip(jobs, out)]


def steering(by_v: dict[int, list[str]]) -> tuple[dict[int, float], float]:
    """Mean words at each slider position, and Spearman ρ of the slider with each answer's words
    (evaluator.steerability, as the gate measures it)."""
    from evaluator.steerability import SteerRow, level_means, rho

    rows = [SteerRow(i, "verbosity", v, a) for v, answers in by_v.items() for i, a in enumerate(answers)]
    return level_means(rows, "verbosity"), round(rho(rows, "verbosity"), 3)


def held_out_pairs(samples: list[dict], prefer: str, length_words: int) -> list[dict]:
    from deploy.loop.simulate import Preference

    judge = Preference(prefer, length_words=length_words)
    picks = [(s, judge.pick(*s["answers"])) for s in samples]
    return [{**s, "chosen": pick[0], "rejected": pick[1]} for s, pick in picks if pick]


def reward_margins(model_dir: Path, adapter_dir: Path, pairs: list[dict]) -> list[float]:
    """β·(log π − log π_ref) of chosen minus rejected, each pair under its own rendered prompt."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaluator.scoring import ImplicitRewardScorer

    tok = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    policy = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    scorer = ImplicitRewardScorer(policy, tok, beta=0.1)
    prompts = [_messages(p["question"], p["verbosity"]) for p in pairs]
    chosen = scorer.score(prompts, [p["chosen"] for p in pairs])
    rejected = scorer.score(prompts, [p["rejected"] for p in pairs])
    return [c - r for c, r in zip(chosen, rejected)]


def served_settings(data: Path, model_dir: Path, url: str, served: str, max_tokens: int, **extra):
    """The service on a vLLM endpoint as the learning runs serve it: the `openai` backend,
    `instruct` steering, `max_tokens` per answer, the test settings otherwise (guard off)."""
    from service_helpers import tiny_settings

    return tiny_settings(data, model_dir, **{
        "backend.kind": "openai", "backend.base_url": url, "backend.model": served, "backend.steering": "instruct",
        "backend.max_new_tokens": max_tokens, "backend.timeout_s": 600, **extra})


def simulate_users(args, url: str, served: str, data: Path, length_words: int,
                   relative: tuple[int, ...] = ()) -> dict:
    """Start the service on vLLM, let the users chat and the service mine their reactions
    (`relative`: a threshold per slider position instead of `length_words` at every one)."""
    from service_helpers import ADMIN_TOKEN, start_service

    from deploy.cli.simulate import parse_rates
    from deploy.loop.simulate import Preference, SimulationConfig, simulate

    settings = served_settings(data, Path(args.model_dir), url, served, args.max_tokens, **{
        "canary.enabled": False, "schedule.safety_anchors": args.safety_anchors})
    service = start_service(settings)
    try:
        summary = simulate(SimulationConfig(
            url=service.url, users=args.users, turns=args.turns, seed=7, admin_token=ADMIN_TOKEN, extract=True,
            preference=Preference(args.prefer, length_words=length_words, length_by_verbosity=relative),
            verbosities=VERBOSITIES,
            rates=parse_rates(args.rate), concurrency=8, timeout_s=900, extract_timeout_s=900))
    finally:
        service.stop()
    return {"settings": settings, "summary": summary.as_dict()}


def train(args, settings, data: Path):
    """The KTO or DPO set (moderator as safety filter) and a LoRA run on it, as `advisor train` does."""
    from conftest import cache_dir

    from deploy.loop.safety import make_safety_filter, safety_anchors
    from deploy.release.judges import moderator_dir
    from feedback.datasets import read_card
    from store import Store
    from trainer.launch import LaunchRequest, launch_training, poll_training
    from trainer.process import wait_for

    cached = cache_dir() / "moderator"  # the tests' trained moderator; else it is trained on first use
    if cached.is_dir():
        shutil.copytree(cached, moderator_dir(settings.data_dir), dirs_exist_ok=True)
    overrides = {"max_steps": args.train_steps, "learning_rate": args.lr, "lora_alpha": args.lora_alpha,
                 "batch_size": args.batch_size, "save_steps": 1000,
                 **({"sft_weight": args.dpo_sft_weight} if args.method == "dpo" else {})}
    with Store(settings.db_path) as store:
        run = launch_training(store, LaunchRequest(method=args.method, runs_dir=data / "runs", base_model=str(args.model_dir),
                                            overrides=overrides, safety_filter=make_safety_filter(settings, True),
                                            eval_fraction=0.0, trigger="bench", steering="instruct",
                                            kto_attributes=args.kto_attributes,
                                            anchors=safety_anchors(settings, args.method)))
        if run.status != "running":
            raise SystemExit(f"training did not start: {run.error}")
        wait_for(run.run_dir, timeout=4 * 3600)
        status = poll_training(store, run.id)
    if status.run.status != "succeeded":
        raise SystemExit(f"training {status.run.status}: {status.run.error}")
    card = read_card(status.run.run_dir)
    return status, {"method": args.method, "rows": card.n_train, "kto_attributes": card.kto_attributes,
                    "labeller": card.labeller, "relabelled": card.relabelled, "labels": card.labels,
                    "removed_by_filter": card.removed_by_filter, "counts_by_source": card.counts_by_source,
                    "safety_anchors": {"share": args.safety_anchors, "from": card.anchors,
                                       "mean_words": anchor_words(Path(status.run.run_dir))},
                    "steps": args.train_steps,
                    "final_loss": status.state.loss, "overrides": overrides}


def anchor_words(run_dir: Path) -> dict[str, float]:
    """Mean words of the set's safety anchors by label (length-matched pairs: about equal)."""
    import pyarrow.parquet as pq

    from evaluator.text import words
    from feedback.datasets.anchors import ANCHOR_SOURCE

    by_label: dict[str, list[int]] = {"desirable": [], "undesirable": []}
    for r in pq.read_table(run_dir / "train.parquet").to_pylist():
        if r["source"] == ANCHOR_SOURCE:
            by_label["desirable" if r["label"] else "undesirable"].append(words(r["completion"][0]["content"]))
    return {label: round(statistics.mean(n), 1) for label, n in by_label.items() if n}


def gate(model_dir: Path, data: Path, run_id: str) -> dict:
    """The release gate on the candidate, in the run's own store, against the base model, with every
    gate setting at its default (judges, guard, safety policy), as `advisor release gate` runs it."""
    from gate_time import gate_settings

    from deploy.release.evaluate import gate_candidate
    from store import Store

    settings = gate_settings(data, model_dir)
    with Store(settings.db_path) as store:
        outcome = gate_candidate(store, settings, run_id)
    return {"promote": outcome.decision.promote, "reasons": outcome.decision.reasons,
            "candidate": outcome.candidate, "live": outcome.live, "steps": outcome.details.get("steps")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=REPO / ".cache/test/models/smollm2-135m-instruct")
    ap.add_argument("--prefer", choices=["short", "long"], default="short")
    ap.add_argument("--method", choices=["kto", "dpo"], default="kto")
    ap.add_argument("--rate", action="append", default=[],
                    help="a simulated user's reaction weight, NAME=P, as `advisor simulate --rate`")
    ap.add_argument("--users", type=int, default=16)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--train-steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    # A pretrained model: a gentler rate than the built-in model's 1e-3 (docs/learning.md), alpha = r.
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--lora-alpha", type=int, default=64)
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm/bin/python"))
    ap.add_argument("--gate", action="store_true", help="then gate the candidate against the base model (about 20 min)")
    ap.add_argument("--max-tokens", type=int, default=MAX_NEW_TOKENS, help="every answer's cap, held-out and simulated")
    ap.add_argument("--kto-attributes", choices=KTO_ATTRIBUTES, default="asked",
                    help="KTO rows under the slider values asked for, or liked answers under those their text has")
    ap.add_argument("--relative", action="store_true",
                    help="users whose short/long threshold is the base model's length at the slider position they chose")
    ap.add_argument("--dpo-sft-weight", type=float, default=0.0,
                    help="DPO only: weight of an NLL term on the chosen answers (RPO's form; 0 = plain DPO)")
    ap.add_argument("--safety-anchors", type=float, default=0.0,
                    help="labelled answers to risky requests mixed into a KTO set, per user row (0 = none)")
    ap.add_argument("--gate-root", type=Path, default=None,
                    help="gate an earlier run's candidate in its own store and add the decision to --out")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.gate_root:
        gate_later(args)
    else:
        run(args)


def gate_later(args) -> None:
    """Step 7 alone, for a run made without `--gate`: its one succeeded training run is gated in its
    own store against the base model the run names, and the decision and the gate's time join the
    run's result file (once: a file that holds a decision is left alone)."""
    from store import Store

    if args.out is None or not args.out.exists():
        raise SystemExit("--gate-root needs --out: the result file the run wrote")
    report = json.loads(args.out.read_text())
    if "gate" in report:
        raise SystemExit(f"{args.out} already holds a gate decision: to gate again, pass a copy without its 'gate' key")
    with Store(args.gate_root / "advisor.duckdb") as store:
        runs = [r for r in store.jobs.list_training_runs() if r.status == "succeeded"]
    if len(runs) != 1:
        raise SystemExit(f"{args.gate_root}: expected one succeeded training run, found {len(runs)}")
    t0 = time.monotonic()
    report["gate"] = gate(Path(report["model"]), args.gate_root, runs[0].id)  # the base the run trained on
    report["timings_s"]["gate"] = round(time.monotonic() - t0, 1)
    report["gate"]["gated_later"] = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": cpu_model()}
    emit(report, args.out)


def run(args) -> None:
    from serve import vllm_endpoint

    from deploy.serving.vllm import load_adapter

    args.model_dir = args.model_dir.resolve()
    data = Path(tempfile.mkdtemp(prefix="advisor-learning-"))
    print(f"data: {data}", flush=True)
    report: dict = {"machine": cpu_model(), "model": str(args.model_dir), "prefer": args.prefer,
                    "method": args.method, "rates": args.rate, "users": args.users, "turns": args.turns,
                    "max_new_tokens": args.max_tokens,
                    "timings_s": {}}
    t = report["timings_s"]
    clock = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock
        t[name] = round(time.monotonic() - clock, 1)
        clock = time.monotonic()
        print(f"[{name}: {t[name]} s]", flush=True)

    vllm = SimpleNamespace(vllm_url="", served_model_name="advisor", vllm_python=args.vllm_python)
    with vllm_endpoint(vllm, args.model_dir) as (url, served):
        lap("vllm_start")
        base = answers_by_verbosity(url, served, args.max_tokens)
        base_words, base_rho = steering(base)
        length_words = round(statistics.mean(base_words.values()))
        lap("base_answers")
        samples = sampled_pairs(url, served, args.max_tokens)
        lap("held_out_samples")
        relative = tuple(round(base_words[v]) for v in VERBOSITIES) if args.relative else ()
        sim = simulate_users(args, url, served, data, length_words, relative)
        lap("simulate")
    status, training = train(args, sim["settings"], data)
    lap(f"train_{args.method}")
    with vllm_endpoint(vllm, args.model_dir) as (url, served):
        load_adapter(url.removesuffix("/v1"), "candidate", status.state.adapter_dir)
        cand = answers_by_verbosity(url, "candidate", args.max_tokens)
        cand_words, cand_rho = steering(cand)
        lap("candidate_answers")
    pairs = held_out_pairs(samples, args.prefer, length_words)
    margins = reward_margins(args.model_dir, Path(status.state.adapter_dir), pairs)
    lap("reward_margins")
    base_mean, cand_mean = statistics.mean(base_words.values()), statistics.mean(cand_words.values())
    report.update({
        "length_words": length_words, "length_by_verbosity": list(relative),
        "simulation": sim["summary"], "training": training,
        "base_mean_words": round(base_mean, 1), "candidate_mean_words": round(cand_mean, 1),
        "relative_change": round((cand_mean - base_mean) / base_mean, 3),
        "base_words_by_verbosity": {v: round(w, 1) for v, w in base_words.items()},
        "candidate_words_by_verbosity": {v: round(w, 1) for v, w in cand_words.items()},
        "verbosity_rho": {"base": base_rho, "candidate": cand_rho},
        "pairs": len(margins), "reward_margin": round(statistics.mean(margins), 3),
        "reward_margin_ci95": interval(margins),
        "pairs_won": round(sum(m > 0 for m in margins) / len(margins), 3),
        "pairs_won_ci95": interval([float(m > 0) for m in margins])})
    if args.gate:
        report["gate"] = gate(args.model_dir, data, status.run.id)
        lap("gate")
    emit(report, args.out)


if __name__ == "__main__":
    main()
