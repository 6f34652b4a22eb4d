"""Steering learned: after attribute-conditioned SFT on store data, answer length follows
the verbosity value — Spearman ρ ≥ 0.6 over 20 prompts × 5 values — and more than before the run.

The honest "before": the built-in model already steers, so the run starts from a model whose
steering is absent by construction: the built-in recipe (same corpus answers, tokenizer,
architecture and training loop) with every example's attribute string replaced by one constant
string, so the condition carries no information during pre-training. Whatever steering the
candidate shows is therefore learned from the AC-SFT run. (The tiny random model would not do:
it cannot learn to write advice in minutes.) The variant is built once per cache directory,
like the built-in model, with fewer epochs (VARIANT_EPOCHS) to keep that one-time build short.

The AC-SFT set comes from the store, as in production: conversations in which users asked the
corpus questions and liked answers of every length (the answers carry the default attributes
the slider had, not their real verbosity); `build_dataset(kind="sft")` relabels each liked answer
with the attributes it has (feedback.labeller: verbosity from its word count), with the
moderator as the safety filter, and `launch_training` trains the LoRA adapter on it.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import cache_dir, outputs_dir

from evaluator.steerability import PROMPTS as STEER_PROMPTS

# A proof, not a CI test: 1,200 training steps (6 min on a quiet 2-core box, over 15 beside other
# work). `make proofs` runs it; its figures are in docs/results.md.
pytestmark = [pytest.mark.slow, pytest.mark.proof, pytest.mark.timeout(3600)]

VARIANT_EPOCHS = 8
CONSTANT_ATTRIBUTES = {"helpfulness": 4, "correctness": 4, "coherence": 4, "complexity": 2, "verbosity": 2}
# Measured here: 80 steps (0.8 epoch) at lr 1e-3 with the default LoRA scale (alpha/r = 0.25)
# made answers longer at every verbosity but taught no steering (rho -0.08); 300 steps (the CPU
# cap) at 2e-3 with alpha = r reached rho 0.18, at 5e-3 without dropout 0.10. Steering is learned
# from one digit's effect on where the answer stops, a weak signal: the built-in recipe needs
# about 20 epochs of full fine-tuning for it. 1,200 steps (about 20 epochs of this set; the CPU
# cap lifted for this run) at 3e-3, alpha = r, no dropout: rho 0.73 (12/32/38/50/53 words at
# verbosity 0-4), about 6 minutes on a quiet 2-core box.
SFT_STEPS, SFT_LR, LORA_ALPHA, LORA_DROPOUT = 1200, 3e-3, 64, 0.0
VERBOSITIES = (0, 1, 2, 3, 4)
MIN_RHO = 0.6
MAX_NEW_TOKENS = 200
# 20 held-out prompts: the steering check's 10 plus 10 more, none of them a corpus question.
EXTRA_PROMPTS = STEER_PROMPTS[:10]  # the gate's first 10 steering prompts: also none of them a corpus question


def spearman(x: list[float], y: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y).statistic)


def build_no_steering_model():
    """The built-in recipe with an uninformative (constant) attribute string; cached."""
    from chat.builtin.build import Recipe, build_builtin_model
    from chat.builtin.corpus import CORPUS_PATH
    from chat.builtin.sft import TrainConfig

    corpus = cache_dir() / "corpus-constant-attributes.jsonl"
    lines = []
    for line in CORPUS_PATH.read_text(encoding="utf-8").splitlines():
        if line.strip():
            lines.append(json.dumps({**json.loads(line), "attributes": CONSTANT_ATTRIBUTES}, sort_keys=True))
    text = "\n".join(lines) + "\n"
    if not corpus.is_file() or corpus.read_text(encoding="utf-8") != text:
        corpus.parent.mkdir(parents=True, exist_ok=True)
        corpus.write_text(text, encoding="utf-8")
    recipe = Recipe(corpus_path=corpus, train=replace(TrainConfig(), epochs=VARIANT_EPOCHS))
    return build_builtin_model(cache_dir(), recipe=recipe)


@pytest.fixture(scope="module")
def no_steering_model_dir():
    return build_no_steering_model()


def lengths_by_verbosity(model, tok, prompts: list[str]) -> tuple[list[int], list[int]]:
    """Greedy answers to every prompt at every verbosity (complexity 2): (verbosities, word counts)."""
    from evaluator.generation import hf_answer_fn
    from store.attributes import Attributes

    xs, ys = [], []
    for v in VERBOSITIES:
        answer = hf_answer_fn(model, tok, max_new_tokens=MAX_NEW_TOKENS, batch_size=len(prompts),
                              template_kwargs={"attributes": Attributes(verbosity=v).steerlm()})
        for text in answer(prompts):
            xs.append(v)
            ys.append(len(text.split()))
    return xs, ys


@pytest.fixture(scope="module")
def steering(no_steering_model_dir, tmp_path_factory):
    from peft import PeftModel

    from chat.builtin.check import HELD_OUT_QUESTIONS, load
    from chat.builtin.corpus import load_corpus
    from deploy.loop.safety import SafetyFilterConfig, make_safety_filter
    from feedback.datasets import read_card
    from store import GenerationMeta, Store
    from store.attributes import Attributes
    from trainer.launch import LaunchRequest, launch_training, poll_training
    from trainer.process import wait_for

    prompts = list(HELD_OUT_QUESTIONS) + list(EXTRA_PROMPTS)
    assert len(prompts) == 20
    base, tok = load(no_steering_model_dir)
    before = lengths_by_verbosity(base, tok, prompts)

    data_dir = tmp_path_factory.mktemp("acsft")
    safety = make_safety_filter(None, config=SafetyFilterConfig(cache_dir=str(cache_dir() / "moderator")))
    with Store(data_dir / "advisor.duckdb") as store:
        for i, ex in enumerate(load_corpus()):
            user = f"user-{i % 25}"
            store.users.ensure(user)
            conv = store.conversations.create(user, source="api")
            q = store.conversations.add_message(conv.id, "user", ex.question)
            a = store.conversations.add_message(conv.id, "assistant", ex.answer, parent_id=q.id,
                                                generation=GenerationMeta(backend="transformers", model="variant",
                                                            attributes=Attributes()))
            store.conversations.rate(a.id, user, 1, reasons=["clear"])
        overrides = {"max_steps": SFT_STEPS, "cpu_max_steps": SFT_STEPS, "learning_rate": SFT_LR,
                     "lora_alpha": LORA_ALPHA, "lora_dropout": LORA_DROPOUT, "save_steps": 1000}
        run = launch_training(store, LaunchRequest(method="sft", runs_dir=data_dir / "runs",
                                                   base_model=str(no_steering_model_dir), overrides=overrides,
                                                   safety_filter=safety, eval_fraction=0.0, trigger="test"))
        assert run.status == "running", run.error
        wait_for(run.run_dir, timeout=2400)
        status = poll_training(store, run.id)
        assert status.run.status == "succeeded", status.run.error
    card = read_card(run.run_dir)
    policy = PeftModel.from_pretrained(base, status.state.adapter_dir).eval()
    after = lengths_by_verbosity(policy, tok, prompts)
    out = {"rho_before": spearman(*before), "rho_after": spearman(*after), "rows": card.n_train,
           "removed_by_filter": card.removed_by_filter, "safety_filter": card.safety_filter,
           "mean_words_before": {v: sum(y for x, y in zip(*before) if x == v) / len(prompts) for v in VERBOSITIES},
           "mean_words_after": {v: sum(y for x, y in zip(*after) if x == v) / len(prompts) for v in VERBOSITIES},
           "steps": SFT_STEPS, "learning_rate": SFT_LR, "lora_alpha": LORA_ALPHA, "lora_dropout": LORA_DROPOUT}
    (outputs_dir() / "acsft-steering.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def test_training_set_is_relabelled_from_the_answers(steering):
    assert steering["rows"] > 300 and steering["safety_filter"].startswith("moderator")


def test_acsft_teaches_verbosity_steering(steering):
    assert steering["rho_after"] >= MIN_RHO, steering
    assert steering["rho_after"] > steering["rho_before"], steering
