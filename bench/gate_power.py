"""How wide is the gate's helpfulness interval for a candidate exactly as good as live? An A/A run.

    .venv/bin/python bench/gate_power.py --model DIR --mode steerlm|instruct [--limit 0]
        [--max-new-tokens 64] [--draws 2] [--out bench/results/gate_power-NAME.json]

Two sides equally good by construction: the same model answers every prompt twice by sampling
(temperature 0.7, top-p 0.9, a different seed per draw), so any difference between the draws is
noise. For each pair of draws and each sample size n, the 95 % paired bootstrap interval of the
mean difference (the gate's own `evaluator.paired` code, 2,000 resamples) is what an equally good
but different candidate faces: a gate whose tolerance is below its half-width rejects equal
candidates; one far above it lets real drops through. Measured on
- the gate's measure: the answer's reward as a percentile of all 219 human reference answers, on
  the first n shipped advice prompts (`evaluator/data/advice_prompts.jsonl`), n = 13, 50, 100,
  200 and all;
- the old measure, for comparison: the share of each question's human answers beaten, on the 13
  held-out ranked-advice questions.
Answers are rendered as the chat renders them (`chat.steering.render`, default sliders). The
reward model is the gate's (trained on the ranked set's training threads, cached in --data-dir).
Reported with the machine and the wall time; nothing here is a pass/fail assertion.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))  # after the repo: bench/store.py must not shadow the store package

from _machine import cpu_model, emit  # noqa: E402

SIZES = (13, 50, 100, 200)


def answer_fn(model_dir: str, mode: str, max_new_tokens: int, seed: int):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from chat.steering import render
    from evaluator.generation import hf_answer_fn
    from store.attributes import Attributes

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    attributes = Attributes()
    steerlm = render([], attributes, mode)[1]
    answer = hf_answer_fn(model, tokenizer, max_new_tokens=max_new_tokens, batch_size=16,
                          template_kwargs={"attributes": steerlm} if steerlm else None,
                          to_messages=lambda q: render([{"role": "user", "content": q}], attributes, mode)[0],
                          sampling={"temperature": 0.7, "top_p": 0.9})

    def draw(questions: list[str], k: int) -> list[str]:
        torch.manual_seed(seed + k)
        return answer(questions)

    return draw


def interval(a: list[float], b: list[float]) -> dict:
    from evaluator.paired import mean_statistic, paired_bootstrap

    iv = paired_bootstrap(len(a), mean_statistic(a, b), n_boot=2000, seed=0).as_dict()
    return {"n": len(a), "diff": round(iv["diff"], 4), "low": round(iv["low"], 4), "high": round(iv["high"], 4),
            "half_width": round((iv["high"] - iv["low"]) / 2, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--mode", choices=("steerlm", "instruct"), required=True, help="how the chat steers this model")
    ap.add_argument("--limit", type=int, default=0, help="advice prompts (0 = all shipped)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="the gate's default budget")
    ap.add_argument("--draws", type=int, default=2, help="sampled answers per prompt (pairs compared: all)")
    ap.add_argument("--data-dir", default=".cache/bench", help="where the reward model is cached")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from deploy.release.judges import held_out_threads, load_reward_model
    from evaluator.helpfulness import ReferenceScale, helpfulness, helpfulness_on_prompts
    from evaluator.shipped import load_advice_prompts

    started = time.time()
    train, held = held_out_threads()
    rm = load_reward_model(args.data_dir, train)
    scale = ReferenceScale.from_threads(rm, train + held)
    prompts = load_advice_prompts()[: args.limit or None]
    draw = answer_fn(args.model, args.mode, args.max_new_tokens, seed=1234)
    new, old = [], []
    for k in range(args.draws):
        print(f"draw {k + 1}/{args.draws}: {len(prompts)} advice prompts, {len(held)} ranked questions", flush=True)
        new.append(helpfulness_on_prompts(rm, scale, prompts, draw(prompts, k)).per_question)
        old.append(helpfulness(rm, held, draw([t.question for t in held], 100 + k)).per_question)
    pairs = [(i, j) for i in range(args.draws) for j in range(i + 1, args.draws)]
    sizes = sorted({n for n in SIZES if n < len(prompts)} | {len(prompts)})
    report = {
        "machine": cpu_model(), "model": args.model, "mode": args.mode, "max_new_tokens": args.max_new_tokens,
        "wall_s": None, "mean_percentile": [round(sum(v) / len(v), 4) for v in new],
        "advice_prompts": {str(n): [interval(new[i][:n], new[j][:n]) for i, j in pairs] for n in sizes},
        "ranked_questions_share_beaten": [interval(old[i], old[j]) for i, j in pairs],
    }
    report["wall_s"] = round(time.time() - started, 1)
    emit(report, args.out)


if __name__ == "__main__":
    main()
