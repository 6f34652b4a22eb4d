"""The real model against the built-in one, on the same prompts in one run: relevance, helpfulness,
harmlessness, steerability.

    PYTHONPATH=. .venv/bin/python bench/quality.py --real DIR --builtin DIR
        [--data-dir data] [--max-new-tokens 300] [--batch-size 20] [--threads 1]
        [--bootstrap 1000] [--out-dir test-output/quality] [--limit N  (smoke runs only)]

`--real` is the converted SmolLM2-135M-Instruct directory (served with the `instruct` rendering),
`--builtin` the built-in model (`advisor model path`; served with `steerlm`). Writes
`quality.json` (every answer, every figure) and `quality.md` (the tables) to `--out-dir`.

Design choices:
- Like the app: every answer goes through `TransformersBackend.complete`, hence through
  `chat.steering.render` in the mode the app serves that model with, greedy (so a rerun gives the
  same answers on the same machine and thread count). One model is loaded at a time (a shared
  2-core box), both answer exactly the same prompts, and every model-level figure is computed
  the same way for both.
- Default sliders (`Attributes()`: verbosity 2, complexity 2, the rest 4) and 300 new tokens for
  the advice questions, the helpfulness threads and the risky prompts: what a chat user gets who
  moves nothing. The release gate answers with 64 tokens and, for an `instruct` model, no
  steering line, so its helpfulness and harmlessness figures are not comparable with these.
- Questions: `bench/data/quality_questions.jsonl`, 40 everyday dilemmas (roommates, money, work,
  family, health habits, friends, home) written for this bench. None is in
  `chat/builtin/corpus.jsonl`, the built-in model's whole training corpus (checked at start on
  normalised text; each question's most similar corpus question by MiniLM is recorded, the
  closest being 0.75: night shifts against "What can I do to sleep better?"). SmolLM2's
  training data is not published in a form we can search, so for the real model "unseen" only
  means "written here": it may have seen similar questions.
- Relevance: cosine similarity of the MiniLM embeddings (`evaluator.embeddings`, the encoder of
  the reward model and the moderator) of a question and its answer. Chance baseline: each answer
  against another question of the 40 (a seeded derangement), and, for percentiles, every
  mismatched (answer, question) pair. Mismatched questions are still advice questions, some on
  the same topic, so the baseline is "on advice, but not on this question", stricter than
  random text. An empty answer scores like any text, not 0.
- Helpfulness: the gate's Plackett–Luce reward model (`deploy.release.judges.load_reward_model`,
  cached under `<data-dir>/models/pl-reward`, trained on first use on the gate's training
  threads) on all 13 held-out threads of `deploy.release.judges.held_out_threads` (the gate
  takes the first 12): the share of each thread's human answers the model's answer out-scores.
- Harmlessness: the gate's moderator (`load_moderator`, cached under `<data-dir>/models/moderator`)
  on the answers to the shipped risky prompts (40 written, then 131 from HH-RLHF harmless-base
  since 2026-12-03): share judged safe (p_unsafe < 0.5).
- Steerability: `bench/steering.py`'s generation and analysis, imported, on all 20 of its prompts
  (dev and test) at verbosity 0..4 (complexity 2) and complexity 0..4 (verbosity 2).
- Intervals: 95% percentile bootstrap over prompts (questions, threads, risky prompts or
  steering prompts; 1,000 resamples, seed 0).
- The on-topic threshold for the browser test is chosen from the real model's relevance
  distribution and the mismatched pairs (`choose_threshold`), and written with its reasons.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))  # after the repo: bench/store.py must not shadow the store package

import numpy as np  # noqa: E402
import steering  # noqa: E402

from evaluator.judges.validity import derangement  # noqa: E402
from evaluator.paired import bootstrap_mean  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
QUESTIONS = Path(__file__).resolve().parent / "data" / "quality_questions.jsonl"
CORPUS = REPO / "chat" / "builtin" / "corpus.jsonl"
EXAMPLES = (0, 11, 27)  # a roommate, a work and a health-habit question


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())


def load_questions(limit: int | None = None) -> list[dict]:
    """The bench's advice questions; refuses any that is in the built-in model's corpus."""
    rows = read_jsonl(QUESTIONS)
    seen = {_norm(r["question"]) for r in read_jsonl(CORPUS)}
    clash = [r["id"] for r in rows if _norm(r["question"]) in seen]
    if clash:
        raise SystemExit(f"{QUESTIONS}: {', '.join(clash)} are in {CORPUS}; the bench needs unseen questions")
    return rows[:limit] if limit else rows


# ---------------------------------------------------------------- statistics


def relevance(embedder, questions: list[str], answers: list[str], *, n_boot: int) -> dict:
    """Cosine(question, own answer) and the chance baseline, per answer and summarised."""
    q, a = embedder.encode(questions), embedder.encode(answers)
    sim = a @ q.T  # sim[i, j]: answer i against question j (vectors are L2-normalised)
    own = np.diag(sim)
    perm = derangement(len(questions))
    shuffled = sim[np.arange(len(questions)), perm]
    mismatched = sim[~np.eye(len(questions), dtype=bool)]
    pct = lambda x, ps: {f"p{p}": float(np.percentile(x, p)) for p in ps}  # noqa: E731
    return {
        "own": bootstrap_mean(own, n_boot=n_boot),
        "shuffled": bootstrap_mean(shuffled, n_boot=n_boot),
        "own_percentiles": {**pct(own, (0, 5, 10, 50)), "min": float(own.min())},
        "mismatched_percentiles": {**pct(mismatched, (50, 95, 99)), "max": float(mismatched.max()),
                                   "pairs": int(mismatched.size)},
        "per_answer": [round(float(s), 4) for s in own],
        "per_answer_shuffled": [round(float(s), 4) for s in shuffled],
        "shuffle": perm.tolist(),
        "_mismatched": mismatched,  # dropped before writing; used by choose_threshold
    }


def choose_threshold(real: dict) -> dict:
    """The on-topic threshold for one real-model turn, from the real model's relevance.

    Between the mismatched pairs' 99th percentile (an answer to another advice question clears
    it 1 time in 100) and the real answers' 5th percentile (a real answer misses it about 1 time
    in 20): their midpoint, rounded down to 0.05 while that stays above the chance 99th
    percentile (else to 0.01). A failure then says much more likely "off topic" than "unlucky"."""
    chance99 = real["mismatched_percentiles"]["p99"]
    own5 = real["own_percentiles"]["p5"]
    own = np.array(real["per_answer"])
    mismatched = real["_mismatched"]
    if own5 <= chance99:
        value = round(own5, 2)
        why = (f"the real answers' 5th percentile ({own5:.3f}) is not above the mismatched pairs' 99th "
               f"({chance99:.3f}): relevance barely separates this model's answers from chance, so "
               f"{value} is only its 5th percentile and a failure is weak evidence")
    else:
        mid = (own5 + chance99) / 2
        value = math.floor(mid * 20) / 20
        if value <= chance99:
            value = math.floor(mid * 100) / 100
        why = (f"midpoint of the mismatched pairs' 99th percentile ({chance99:.3f}) and the real answers' "
               f"5th percentile ({own5:.3f}), rounded down")
    return {
        "value": value, "reason": why,
        "real_answers_below": int((own < value).sum()), "real_answers": int(own.size),
        "mismatched_pairs_at_or_above": int((mismatched >= value).sum()), "mismatched_pairs": int(mismatched.size),
    }


# ---------------------------------------------------------------- generation


def answer_all(label: str, path: str, mode: str, *, sets: dict[str, list[str]], steering_questions: list[str],
               max_new_tokens: int, batch_size: int, say) -> dict:
    """Load one model, answer every set at the default sliders, then the steering grid; timed."""
    from chat.backends.base import SamplingParams
    from chat.backends.transformers_backend import TransformersBackend
    from store.attributes import Attributes

    t0 = time.monotonic()
    backend = TransformersBackend(path, device="cpu", kind="transformers", max_batch_size=batch_size,
                                  local_files_only=True)
    t_load = time.monotonic() - t0
    prompts = [p for texts in sets.values() for p in texts]
    say(f"{label}: {len(prompts)} prompts at the default sliders ({', '.join(f'{k} {len(v)}' for k, v in sets.items())})")
    t1 = time.monotonic()
    out = backend.complete([[{"role": "user", "content": p}] for p in prompts], attributes=Attributes(),
                           steering=mode, params=SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0))
    t_default = time.monotonic() - t1
    tokens = [len(backend.tokenizer(a, add_special_tokens=False)["input_ids"]) for a in out]
    default, at = {}, 0
    for name, texts in sets.items():
        default[name] = out[at: at + len(texts)]
        at += len(texts)
    t2 = time.monotonic()
    grid, grid_tokens = {}, {}
    if steering_questions:  # empty with --skip-steering
        say(f"{label}: {t_default:.0f} s; steering grid {len(steering_questions)} prompts x {len(steering.settings())} settings")
        grid, _, grid_tokens = steering.generate(path, mode, steering_questions, max_new_tokens=max_new_tokens,
                                                 batch_size=batch_size, backend=backend, progress=say)
    t_grid = time.monotonic() - t2
    backend.close()
    limit = max_new_tokens - 2
    return {
        "model": path, "mode": mode, "default": default,
        "default_at_token_limit": sum(t >= limit for t in tokens), "default_answers": len(tokens),
        "grid": grid, "grid_at_token_limit": sum(t >= limit for ts in grid_tokens.values() for t in ts),
        "grid_answers": sum(len(ts) for ts in grid_tokens.values()),
        "wall_s": {"load": round(t_load, 1), "default_answers": round(t_default, 1), "steering_grid": round(t_grid, 1),
                   "total": round(time.monotonic() - t0, 1)},
    }


# ---------------------------------------------------------------- scoring


def score(run: dict, *, questions: list[str], threads: list, risky: list[str], n_steer: int, embedder,
          reward_model, moderator, n_boot: int) -> dict:
    from evaluator.helpfulness import helpfulness
    from evaluator.moderation import harmlessness
    from evaluator.text import words

    d = run["default"]
    help_result = helpfulness(reward_model, threads, d["threads"])
    harm = harmlessness(risky, d["risky"], moderator)
    safe = [0.0 if any(f["prompt"] == p for f in harm.flagged) else 1.0 for p in risky]
    answer_words = [words(a) for a in d["questions"]]
    return {
        "relevance": relevance(embedder, questions, d["questions"], n_boot=n_boot),
        "helpfulness": {**bootstrap_mean(help_result.per_question, n_boot=n_boot),
                        "per_thread": help_result.per_question},
        "harmlessness": {**bootstrap_mean(safe, n_boot=n_boot), "unsafe": harm.unsafe,
                         "flagged": [{**f, "answer": f["answer"][:300], "p_unsafe": round(float(f["p_unsafe"]), 3)}
                                     for f in harm.flagged]},
        "steering": steering.analyse(*steering.matrices(run["grid"], n_steer), n_boot=n_boot) if run["grid"] else None,
        "answer_words": {"mean": float(np.mean(answer_words)), "median": float(np.median(answer_words))},
    }


# ---------------------------------------------------------------- reporting


def _ci(stat: dict | None, fmt: str = "{:.2f}") -> str:
    if stat is None:
        return "not run (--skip-steering; bench/steering.py)"
    lo, hi = stat["ci95"]
    return f"{fmt.format(stat['value'])} [{fmt.format(lo)}, {fmt.format(hi)}]"


def _first_words(text: str, n: int = 40) -> str:
    words = text.split()
    s = " ".join(words[:n]) + (" …" if len(words) > n else "")
    return s.replace("|", "\\|") or "(empty)"


def markdown(result: dict) -> str:
    labels = list(result["models"])
    m = result["models"]
    n_q, n_t, n_r, n_s = (result["sizes"][k] for k in ("questions", "threads", "risky", "steering_prompts"))
    rows = [
        (f"relevance: cos(question, answer), {n_q} questions", lambda s: _ci(s["relevance"]["own"])),
        ("chance: cos(answer, another question)", lambda s: _ci(s["relevance"]["shuffled"])),
        (f"helpfulness: share of human references beaten, {n_t} held-out threads", lambda s: _ci(s["helpfulness"])),
        (f"harmlessness: share of {n_r} risky prompts judged safe", lambda s: _ci(s["harmlessness"])),
        (f"Spearman ρ(verbosity, words), {n_s} × 5", lambda s: _ci(s["steering"] and s["steering"]["rho_verbosity_words"])),
        ("mean words verbosity 4 / 0", lambda s: _ci(s["steering"] and s["steering"]["ratio_words_v4_v0"])),
        (f"Spearman ρ(complexity, FK grade), {n_s} × 5", lambda s: _ci(s["steering"] and s["steering"]["rho_complexity_grade"])),
    ]
    head = " | ".join(f"{k}: {Path(m[k]['model']).name} ({m[k]['mode']})" for k in labels)
    lines = [f"| figure (95% CI, bootstrap over prompts) | {head} |", "|---|" + "---|" * len(labels)]
    lines += [f"| {name} | " + " | ".join(f(m[k]["scores"]) for k in labels) + " |" for name, f in rows]
    lines.append("| words per answer at the default sliders (mean / median) | " + " | ".join(
        f"{m[k]['scores']['answer_words']['mean']:.0f} / {m[k]['scores']['answer_words']['median']:.0f}" for k in labels) + " |")
    lines.append(f"| answers at the {result['max_new_tokens']}-token limit (default sliders; steering grid) | " + " | ".join(
        f"{m[k]['default_at_token_limit']} of {m[k]['default_answers']}; {m[k]['grid_at_token_limit']} of "
        f"{m[k]['grid_answers']}" for k in labels) + " |")
    lines.append("| wall time: load + default answers + steering grid (s) | " + " | ".join(
        f"{w['total']:.0f} = {w['load']:.0f} + {w['default_answers']:.0f} + {w['steering_grid']:.0f}"
        for w in (m[k]["wall_s"] for k in labels)) + " |")
    mc = result["machine"]
    t = result["threshold"]
    lines += [
        "",
        f"Machine: {mc['cpu']}, {mc['cores']} cores, torch {mc['torch']} on {mc['torch_threads']} thread(s), "
        f"load average {mc['load_avg_start']} at start, {mc['load_avg_end']} at the end; greedy, "
        f"{result['max_new_tokens']} new tokens, batches of {result['batch_size']}; scoring {result['scoring_s']:.0f} s.",
        "",
        f"On-topic threshold for one real-model turn: **{t['value']}** — {t['reason']}. "
        f"{t['real_answers_below']} of {t['real_answers']} real answers fall below it; "
        f"{t['mismatched_pairs_at_or_above']} of {t['mismatched_pairs']} mismatched (answer, question) pairs reach it.",
        "",
        "| question | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for ex in result["examples"]:
        lines.append(f"| {ex['question']} | " + " | ".join(_first_words(ex['answers'][k]) for k in labels) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", required=True, help="the pretrained model directory (served with `instruct`)")
    ap.add_argument("--builtin", required=True, help="the built-in model directory (served with `steerlm`)")
    ap.add_argument("--data-dir", type=Path, default=REPO / "data",
                    help="where the reward model and the moderator are cached (<data-dir>/models/…)")
    ap.add_argument("--max-new-tokens", type=int, default=300)
    # Larger batches answer faster per answer on one thread (SmolLM2, 40 new tokens, load 6-7:
    # 98 ms a token per answer in batches of 10, 70 in 20, 44 in 40), but a batch runs until its
    # longest answer ends; the steering grid sends 20 prompts per setting, so 20.
    ap.add_argument("--batch-size", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (see bench/steering.py)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--limit", type=int, default=None, help="first N of every prompt set (smoke runs only)")
    ap.add_argument("--skip-steering", action="store_true",
                    help="leave out the steering grid (200 answers per model; bench/steering.py measures it alone)")
    ap.add_argument("--out-dir", type=Path, default=REPO / "test-output" / "quality")
    args = ap.parse_args(argv)

    import os

    import torch

    from deploy.release.judges import held_out_threads, load_moderator, load_reward_model, moderator_dir
    from evaluator.embeddings import SentenceEmbedder
    from evaluator.moderation import load_risky_prompts

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    torch.set_num_threads(args.threads)
    load_start = round(os.getloadavg()[0], 2)
    rows = load_questions(args.limit)
    questions = [r["question"] for r in rows]
    train_threads, threads = held_out_threads()
    threads = threads[: args.limit] if args.limit else threads
    risky = load_risky_prompts()[: args.limit] if args.limit else load_risky_prompts()
    steer = [] if args.skip_steering else steering.load_prompts("all", args.limit)
    sets = {"questions": questions, "threads": [t.question for t in threads], "risky": risky}

    runs = {}
    for label, path, mode in (("builtin", args.builtin, "steerlm"), ("pretrained", args.real, "instruct")):
        runs[label] = answer_all(label, path, mode, sets=sets, steering_questions=[p["question"] for p in steer],
                                 max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, say=say)
    runs = {"pretrained": runs["pretrained"], "builtin": runs["builtin"]}  # the real model's column first

    say("scoring: MiniLM relevance, reward model, moderator, steering statistics")
    t0 = time.monotonic()
    embedder = SentenceEmbedder()
    reward_model = load_reward_model(args.data_dir, train_threads)
    moderator = load_moderator(moderator_dir(args.data_dir))
    for run in runs.values():
        run["scores"] = score(run, questions=questions, threads=threads, risky=risky, n_steer=len(steer),
                              embedder=embedder, reward_model=reward_model, moderator=moderator,
                              n_boot=args.bootstrap)
    scoring_s = time.monotonic() - t0
    corpus_q = sorted({r["question"] for r in read_jsonl(CORPUS)})
    nearest = embedder.encode(questions) @ embedder.encode(corpus_q).T
    threshold = choose_threshold(runs["pretrained"]["scores"]["relevance"])
    for run in runs.values():
        run["scores"]["relevance"].pop("_mismatched")

    result = _result(args, rows, questions, threads, risky, steer, runs, threshold, scoring_s, load_start, nearest,
                     corpus_q)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "quality.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    md = markdown(result)
    (args.out_dir / "quality.md").write_text(md)
    print(md)
    return 0


def _result(args, rows, questions, threads, risky, steer, runs, threshold, scoring_s, load_start, nearest,
            corpus_q) -> dict:
    """Everything `quality.json` holds: settings, sizes, the threshold, the machine, examples, answers."""
    import os

    return {
        "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size, "limit": args.limit,
        "attributes": "default sliders: verbosity 2, complexity 2, helpfulness/correctness/coherence 4",
        "sizes": {"questions": len(questions), "threads": len(threads), "risky": len(risky),
                  "steering_prompts": len(steer)},
        "bootstrap": {"samples": args.bootstrap, "seed": 0, "unit": "prompt"},
        "threshold": threshold,
        "machine": {**steering.machine(), "load_avg_start": load_start, "load_avg_end": round(os.getloadavg()[0], 2)},
        "scoring_s": round(scoring_s, 1),
        "examples": [{"id": rows[i]["id"], "question": questions[i],
                      "answers": {k: r["default"]["questions"][i] for k, r in runs.items()}}
                     for i in EXAMPLES if i < len(questions)],
        "questions": [{**r, "nearest_corpus_question": corpus_q[int(nearest[i].argmax())],
                       "nearest_corpus_similarity": round(float(nearest[i].max()), 3)} for i, r in enumerate(rows)],
        "threads": [t.question for t in threads],
        "steering_prompt_ids": [p["id"] for p in steer],
        "models": {k: {**{key: v for key, v in r.items() if key != "grid"},
                       "grid": {f"v{v}c{c}": a for (v, c), a in r["grid"].items()}} for k, r in runs.items()},
    }


if __name__ == "__main__":
    raise SystemExit(main())
