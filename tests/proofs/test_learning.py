"""The learning loop's machinery, end to end on the CPU with the built-in model: simulated users'
feedback is mined into both training sets, KTO and DPO runs train on it, and a gated cycle
reaches a decision that agrees with the axes it measured. The built-in model is too small to
prove learning on; its figures are recorded beside the checks.

Per preference (users who want short answers, and the reverse, users who want long ones):
simulated users chat with the real service over HTTP (deploy.loop.simulate) → the service's
extraction job mines their reactions → `launch_training` builds the KTO set (with the moderator
as the safety filter, as `advisor train` does) and trains a LoRA adapter on it, and an operator's
cycle (`run_recorded_cycle`, as `advisor cycle` runs it: extract → DPO set → train → gate →
promote, the gate at its default policy) makes the DPO candidate → on held-out prompts
(chat.builtin.check.HELD_OUT_QUESTIONS, none of them a simulated question), each candidate's
mean answer length (greedy, at each of the five fixed verbosity settings the users chatted
with, averaged) and its implicit reward β·(log π − log π_ref) (reference = the same weights with
the adapter disabled) on held-out pairs are recorded, and the cycle's decision must agree with its
axes (promoted exactly when all passed).

Design choices:
- One module-scoped fixture per preference does the expensive part once (a service, a
  simulation, a training run, a cycle, the evaluation) and every test reads its figures.
- The held-out pairs are drawn the way the training pairs were made, on prompts no user asked:
  the base model samples two answers to a held-out prompt at one slider position (the
  service's sampling settings, fixed seeds), and the simulated users' own `Preference.score`
  picks the one they keep, as when they regenerate. Pairs whose answers are equally long are
  left out. They are scored as the model saw them: with the attribute line they were generated
  under (the implicit reward of a text depends on its prompt, and the policy learned under one).
- Deterministic: the users' choices and the service's sampling are seeded, training is seeded,
  so a run reproduces its figures (written to test-output/learning-<preference>.json; the
  demo in docs/learning.md quotes them). About 6 minutes per preference on a quiet 2-core box, 9 on a busy one.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import cache_dir, outputs_dir
from service_helpers import ADMIN_TOKEN, start_service, tiny_settings

from deploy.loop.simulate import ReactionRates

# A proof, not a CI test: a simulation, two training runs and a gated cycle per preference (6 min
# on a quiet 2-core box). `make proofs` runs it; docs/learning.md and docs/results.md quote its figures.
pytestmark = [pytest.mark.slow, pytest.mark.proof, pytest.mark.timeout(3600)]

USERS, TURNS = 24, 8
# (optimizer steps, learning rate, LoRA alpha) per method: few steps, so a high rate, and
# alpha = r (scale 1; the default alpha 16 of r 64 quarters every step). Measured here: 60 KTO
# steps of 2e-4 at the default scale moved the implicit reward (+0.39) but not one greedy
# held-out answer; KTO 40 steps of 1e-3 at scale 1 on 12 users' feedback moved length by -9 %,
# 80 steps on 24 users' by -16 %. DPO at 1e-3 over-fitted its 25-30 pairs: length moved
# (+44 % for long) but the held-out margin went negative (-0.32), the policy's drift on every
# token of a longer text outweighing what it learned about length; 5e-4 keeps both.
TRAINING = {"kto": (80, 1e-3, 64), "dpo": (40, 5e-4, 64)}
# Misfits are regenerated more often than the simulator's default, for more DPO sibling pairs.
RATES = ReactionRates(correct=0.2, rephrase=0.2, regenerate=0.6, clarify=0.0, dislike=0.1)
# The users move the verbosity slider (0-4 at random, independent of their preference), so they
# see answers from one line to several paragraphs and their verdicts contrast clearly. The
# candidates are measured at each of those five slider positions (complexity 2) and the mean
# taken: the held-out counterpart of what the users chatted with.
VERBOSITIES = (0, 1, 2, 3, 4)
LENGTH_WORDS = 35  # the users' short/long threshold: the base model's mean over the five positions
MAX_NEW_TOKENS = 160


def _overrides(method: str) -> dict:
    steps, lr, alpha = TRAINING[method]
    return {"max_steps": steps, "learning_rate": lr, "lora_alpha": alpha, "save_steps": 1000}


def _mean_words(answers: list[str]) -> float:
    return statistics.mean(len(a.split()) for a in answers)


def _words_by_verbosity(model, tok) -> dict[int, float]:
    from store.attributes import Attributes

    return {v: _mean_words(_answers(model, tok, Attributes(verbosity=v).steerlm())) for v in VERBOSITIES}


def _answers(model, tok, attributes: str) -> list[str]:
    """Greedy answers to the held-out prompts under `attributes` (batched, left-padded)."""
    from chat.builtin.check import HELD_OUT_QUESTIONS
    from evaluator.generation import hf_answer_fn

    answer = hf_answer_fn(model, tok, max_new_tokens=MAX_NEW_TOKENS, batch_size=len(HELD_OUT_QUESTIONS),
                          template_kwargs={"attributes": attributes})
    return answer(list(HELD_OUT_QUESTIONS))


@pytest.fixture(scope="module")
def base_answers(builtin_model_dir):
    from chat.builtin.check import load

    model, tok = load(builtin_model_dir)
    return {"words": _words_by_verbosity(model, tok), "samples": _sampled_pairs(model, tok)}


def _sampled_pairs(model, tok) -> list[dict]:
    """Two sampled base-model answers per held-out prompt and slider position, as the users saw
    them: {"question", "verbosity", "answers": (a, b)}."""
    import torch

    from chat.backends import SamplingParams
    from chat.builtin.check import HELD_OUT_QUESTIONS
    from store.attributes import Attributes

    params = SamplingParams()
    tok.padding_side = "left"
    out = []
    for v in VERBOSITIES:
        texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True,
                                         attributes=Attributes(verbosity=v).steerlm()) for q in HELD_OUT_QUESTIONS]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(1000 + v)
        with torch.inference_mode():
            gen = model.generate(**enc, do_sample=True, temperature=params.temperature, top_p=params.top_p,
                                 max_new_tokens=MAX_NEW_TOKENS, num_return_sequences=2,
                                 pad_token_id=tok.pad_token_id)
        answers = tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        for i, q in enumerate(HELD_OUT_QUESTIONS):
            out.append({"question": q, "verbosity": v, "answers": (answers[2 * i].strip(), answers[2 * i + 1].strip())})
    return out


def held_out_pairs(samples: list[dict], prefer: str) -> list[dict]:
    """The pairs a user with this preference would decide: (chosen, rejected) by their score."""
    from deploy.loop.simulate import Preference

    judge = Preference(prefer, length_words=LENGTH_WORDS)
    picks = [(s, judge.pick(*s["answers"])) for s in samples]
    return [{**s, "chosen": pick[0], "rejected": pick[1]} for s, pick in picks if pick]


def _text(messages) -> str:
    return messages[-1]["content"]


def label_agreement(run_dir, method: str, prefer: str) -> dict:
    """How far the training set agrees with the users' own rule, per source: for KTO, a row's
    label against `Preference.fits` of its completion; for DPO, the chosen answer scoring above
    the rejected one. What mining real phrasing costs the training data (the rule is the ground
    truth the simulator knows; the extractor never sees it)."""
    import pandas as pd

    from deploy.loop.simulate import Preference

    judge = Preference(prefer, length_words=LENGTH_WORDS)
    rows = pd.read_parquet(Path(run_dir) / "train.parquet")
    if method == "kto":
        agree = [judge.fits(_text(c)) == bool(label) for c, label in zip(rows["completion"], rows["label"])]
    else:
        agree = [judge.score(_text(c)) > judge.score(_text(r)) for c, r in zip(rows["chosen"], rows["rejected"])]
    total = Counter(rows["source"])
    good = Counter(source for source, ok in zip(rows["source"], agree) if ok)
    return {source: {"rows": n, "agree": good[source]} for source, n in sorted(total.items())}


def _evaluate(model_dir, adapter_dir, base_answers: dict, prefer: str) -> dict:
    from peft import PeftModel

    from chat.builtin.check import load
    from evaluator.scoring import ImplicitRewardScorer
    from store.attributes import Attributes

    base, tok = load(model_dir)
    policy = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    words = _words_by_verbosity(policy, tok)
    pairs = held_out_pairs(base_answers["samples"], prefer)
    margins = []
    for v in VERBOSITIES:
        group = [p for p in pairs if p["verbosity"] == v]
        if not group:
            continue
        scorer = ImplicitRewardScorer(policy, tok, beta=0.1, attributes=Attributes(verbosity=v).steerlm())
        prompts = [[{"role": "user", "content": p["question"]}] for p in group]
        margins += [c - r for c, r in zip(scorer.score(prompts, [p["chosen"] for p in group]),
                                          scorer.score(prompts, [p["rejected"] for p in group]))]
    return {"mean_words": statistics.mean(words.values()), "words_by_verbosity": words,
            "reward_margin": statistics.mean(margins),
            "pair_accuracy": sum(m > 0 for m in margins) / len(margins), "pairs": len(margins)}


@pytest.fixture(scope="module", params=["short", "long"])
def learned(request, builtin_model_dir, base_answers, tmp_path_factory):
    from deploy.loop.cycle import CycleConfig, run_recorded_cycle
    from deploy.loop.safety import make_safety_filter
    from deploy.loop.simulate import Preference, SimulationConfig, simulate
    from deploy.release.judges import load_moderator, moderator_dir
    from deploy.release.registry import ensure_base_release
    from feedback.datasets import read_card
    from store import Store
    from trainer.launch import LaunchRequest, launch_training, poll_training
    from trainer.process import wait_for

    prefer = request.param
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    data_dir = tmp_path_factory.mktemp(f"learning-{prefer}")
    # The gate decides alone here (no canary: tests/deploy/release/test_canary.py judges candidates online).
    settings = tiny_settings(data_dir, builtin_model_dir, **{"backend.max_new_tokens": MAX_NEW_TOKENS,
                                                             "canary.enabled": False})
    service = start_service(settings)
    try:
        summary = simulate(SimulationConfig(
            url=service.url, users=USERS, turns=TURNS, preference=Preference(prefer, length_words=LENGTH_WORDS),
            seed=7, admin_token=ADMIN_TOKEN, extract=True, verbosities=VERBOSITIES, rates=RATES))
    finally:
        service.stop()
    timings["simulate"] = time.monotonic() - t0

    out: dict = {"prefer": prefer, "simulation": summary.as_dict(), "runs": {}}
    # The cycle and the safety filter find the moderator where the service keeps it; it is trained
    # once into the test cache (on first use, so the proof also runs alone on a fresh cache).
    load_moderator(cache_dir() / "moderator")
    shutil.copytree(cache_dir() / "moderator", moderator_dir(settings.data_dir), dirs_exist_ok=True)
    with Store(settings.db_path) as store:
        live = ensure_base_release(store, str(builtin_model_dir))
        t1 = time.monotonic()
        run = launch_training(store, LaunchRequest(method="kto", runs_dir=data_dir / "runs", base_model=str(builtin_model_dir),
                                            overrides=_overrides("kto"), safety_filter=make_safety_filter(settings, True),
                                            eval_fraction=0.0, trigger="test"))
        assert run.status == "running", run.error
        wait_for(run.run_dir, timeout=2400)
        kto = poll_training(store, run.id)
        assert kto.run.status == "succeeded", kto.run.error
        timings["train_kto"] = time.monotonic() - t1
        # DPO runs as the operator's cycle does: extract -> build the set -> train -> gate -> promote,
        # with the gate's default policy.
        t1 = time.monotonic()
        cycle = run_recorded_cycle(store, settings, CycleConfig(method="dpo", eval_fraction=0.0,
                                                                overrides=_overrides("dpo")))
        timings["cycle_dpo"] = time.monotonic() - t1
        assert cycle.run_id is not None, cycle.message
        dpo = poll_training(store, cycle.run_id)
        out["cycle"] = {"status": cycle.status, "message": cycle.message, "release_id": cycle.release_id,
                        "live_before": live.id, "live_after": store.releases.live().id,
                        "gate": cycle.gate.get("decision"), "steps": [s["step"] for s in cycle.steps]}
    for method, status in (("kto", kto), ("dpo", dpo)):
        t1 = time.monotonic()
        card = read_card(status.run.run_dir)
        figures = _evaluate(builtin_model_dir, status.state.adapter_dir, base_answers, prefer)
        timings[f"eval_{method}"] = time.monotonic() - t1
        out["runs"][method] = {**figures, "rows": card.n_train, "counts_by_source": card.counts_by_source,
                               "labels": card.labels, "safety_filter": card.safety_filter,
                               "removed_by_filter": card.removed_by_filter, "final_loss": status.state.loss,
                               "label_agreement": label_agreement(status.run.run_dir, method, prefer)}
    out["base_mean_words"] = statistics.mean(base_answers["words"].values())
    out["base_words_by_verbosity"] = base_answers["words"]
    out["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    (outputs_dir() / f"learning-{prefer}.json").write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


def test_simulated_feedback_makes_both_training_sets(learned):
    sim = learned["simulation"]
    assert sim["errors"] == {} and sim["extraction"]["status"] == "succeeded"
    kto, dpo = learned["runs"]["kto"], learned["runs"]["dpo"]
    assert kto["labels"]["desirable"] > 0 and kto["labels"]["undesirable"] > 0
    assert dpo["rows"] > 0
    assert kto["safety_filter"].startswith("moderator")


@pytest.mark.parametrize("method", ["kto", "dpo"])
def test_each_run_records_the_learning_figures_it_is_judged_by(learned, method):
    """The built-in 1.4M model is too small to learn length from a few dozen rows reliably (its
    runs have moved length +0 % and the DPO margin below zero): on it this is a test of the
    machinery, and the proof of learning runs on SmolLM2 (docs/learning.md). Here the figures a
    proof reads must exist and be finite, and the run must have trained on both labels."""
    run = learned["runs"][method]
    for key in ("mean_words", "reward_margin"):
        assert isinstance(run[key], float) and run[key] == run[key], (key, run[key])
    base, new = learned["base_mean_words"], run["mean_words"]
    print(f"{method} ({learned['prefer']}): held-out length {base:.1f} -> {new:.1f} words "
          f"({(new - base) / base:+.0%}), implicit-reward margin {run['reward_margin']:+.3f}")


def test_the_cycle_decision_agrees_with_the_axes_it_measured(learned):
    """The DPO candidate came out of a cycle under the gate's default policy (no canary here): it
    went live exactly when every axis passed, and every failed axis is named in its reasons."""
    cycle = learned["cycle"]
    assert cycle["steps"][:4] == ["extract", "dataset", "train", "gate"], cycle
    axes = cycle["gate"]["axes"]
    failed = [a["axis"] for a in axes if not a["passed"]]
    if failed:
        assert cycle["status"] == "rejected" and cycle["live_after"] == cycle["live_before"], cycle
        reasons = " ".join(a["reason"] for a in axes if not a["passed"])
        assert all(axis in reasons for axis in failed), (failed, reasons)
    else:
        assert cycle["status"] == "promoted", cycle["message"]
        assert cycle["live_after"] == cycle["release_id"] != cycle["live_before"]
