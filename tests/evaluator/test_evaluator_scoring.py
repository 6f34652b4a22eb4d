"""Scorers on pairs whose right answer is known, and the batching tricks that must not change a number.

Known answers come from training, not from luck: a tiny random model briefly overfit on one
answer of each pair must prefer it under the log-likelihood scorer, and a LoRA adapter trained on
those answers must give them the higher implicit reward against its own disabled-adapter base.
A fresh adapter (lora_B = 0) is the base exactly, so every implicit reward is 0: all ties, all misses.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from evaluator.hh import evaluate_hh
from evaluator.hh_data import HHPair, HHStats, HHSubset
from evaluator.logprobs import BatchConfig, encode_rows, render
from evaluator.scoring import ImplicitRewardScorer, LogLikelihoodScorer, RewardModelScorer

# (question, answer the model is trained on, distractor of similar length)
PAIRS = [
    ("How do I fall asleep faster?", "Keep the same bedtime and dim the lights an hour before.",
     "Paint the fence blue and sell the old bicycle on Sunday."),
    ("How can I save money on food?", "Plan meals for the week and shop with a list.",
     "Whistle loudly near the river when the moon rises."),
    ("My friend is ignoring me. What do I do?", "Send a kind message asking if everything is okay.",
     "Count the stairs twice and then eat a raw onion."),
    ("How do I prepare for an exam?", "Test yourself with past papers and sleep well.",
     "Hide the remote control inside the washing machine."),
]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def messages(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]



@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
def model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir)


def train_on(model, tok, items, *, steps: int = 30, lr: float = 3e-3) -> None:
    """A few Adam steps of next-token loss on the answers only (the prompt is context)."""
    batches = []
    for question, answer in items:
        prompt, completion = render(tok, messages(question), answer)
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        c = tok(completion, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([p + c])
        labels = ids.clone()
        labels[0, : len(p)] = -100
        batches.append((ids, labels))
    torch.manual_seed(0)
    optimizer = torch.optim.Adam([w for w in model.parameters() if w.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        sum(model(input_ids=i, labels=l).loss for i, l in batches).backward()
        optimizer.step()
    model.eval()


def hh_subsets() -> dict[str, HHSubset]:
    pairs = [HHPair("helpful-base", i, messages(q), good, bad) for i, (q, good, bad) in enumerate(PAIRS)]
    return {"helpful-base": HHSubset("helpful-base", pairs, HHStats(rows=len(pairs)))}


def test_render_conditions_on_the_attribute_line_as_training_sets_do(tok):
    """With `attributes`, the prompt ends with the SteerLM line the answer was generated under,
    the scored answer is unchanged, and prompt + answer is what a training row renders."""
    attrs = "helpfulness:4,correctness:4,coherence:4,complexity:2,verbosity:0"
    plain_prompt, plain_answer = render(tok, messages("How do I rest?"), "Sleep early.")
    prompt, answer = render(tok, messages("How do I rest?"), "Sleep early.", attributes=attrs)
    assert prompt.startswith(plain_prompt) and prompt.endswith(attrs + "\n") and answer == plain_answer
    row = tok.apply_chat_template(
        messages("How do I rest?") + [{"role": "assistant", "content": "Sleep early.", "attributes": attrs}],
        tokenize=False)
    assert row.startswith(prompt + answer)


def test_loglik_prefers_the_answers_the_model_was_overfit_on(model, tok):
    train_on(model, tok, [(q, good) for q, good, _ in PAIRS])
    report = evaluate_hh(hh_subsets(), LogLikelihoodScorer(model, tok))
    assert report.helpful == 1.0
    # ...and the model was not simply taught to like every sentence: swap the roles and it fails.
    swapped = {"helpful-base": HHSubset("helpful-base", [HHPair("helpful-base", 0, messages(q), bad, good)
                                                          for q, good, bad in PAIRS], HHStats())}
    assert evaluate_hh(swapped, LogLikelihoodScorer(model, tok)).helpful == 0.0


def test_implicit_reward_of_a_trained_adapter_and_ties_of_a_fresh_one(model, tok):
    from peft import LoraConfig, get_peft_model

    policy = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    fresh = ImplicitRewardScorer(policy, tok, beta=0.1)
    scores = fresh.score([messages(q) for q, _, _ in PAIRS], [good for _, good, _ in PAIRS])
    assert scores == [0.0] * len(PAIRS)  # lora_B starts at zero: policy == reference exactly
    assert evaluate_hh(hh_subsets(), fresh).helpful == 0.0  # every pair a tie, every tie a miss

    train_on(policy, tok, [(q, good) for q, good, _ in PAIRS], steps=30, lr=1e-2)
    assert evaluate_hh(hh_subsets(), ImplicitRewardScorer(policy, tok, beta=0.1)).helpful == 1.0
    # β only scales the rewards.
    a = ImplicitRewardScorer(policy, tok, beta=0.1).score([messages(PAIRS[0][0])], [PAIRS[0][1]])[0]
    b = ImplicitRewardScorer(policy, tok, beta=1.0).score([messages(PAIRS[0][0])], [PAIRS[0][1]])[0]
    assert b == pytest.approx(10 * a, rel=1e-5) and a > 0


def test_implicit_reward_needs_an_adapter_or_a_reference(model, tok):
    with pytest.raises(TypeError, match="PEFT"):
        ImplicitRewardScorer(model, tok)
    same = ImplicitRewardScorer(model, tok, reference=copy.deepcopy(model))
    assert same.score([messages("q")], ["an answer"]) == [0.0]


def reference_logprob(model, tok, question: str, answer: str, max_length: int | None = None) -> float:
    """The slow, obviously-right computation: one unpadded sequence, full logits."""
    prompt, completion = render(tok, messages(question), answer)
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    c = tok(completion, add_special_tokens=False)["input_ids"]
    if max_length is not None and len(p) + len(c) > max_length:
        p = p[-(max_length - len(c)):]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([p + c])).logits[0, :-1].float(), -1)
    return sum(logp[len(p) - 1 + j, t].item() for j, t in enumerate(c))


def conversation_items():
    long_q = "I have a question about my budget. " * 8 + "What should I do?"
    questions = [q for q, _, _ in PAIRS] + [long_q]
    prompts = [messages(q) for q in questions for _ in range(2)]
    answers = [a for q, good, bad in PAIRS + [(long_q, "Track spending.", "Spend less, really.")] for a in (good, bad)]
    return prompts, answers


@pytest.mark.parametrize(("share", "workers"), [(True, 1), (False, 1), (True, 2)])
def test_batched_shared_prompt_scores_equal_one_by_one_scores(model, tok, share, workers):
    prompts, answers = conversation_items()
    # Small budget: several batches (scored concurrently when workers > 1).
    cfg = BatchConfig(max_length=512, max_tokens=600, share_prompts=share, workers=workers)
    scorer = LogLikelihoodScorer(model, tok, cfg)
    got = scorer.score(prompts, answers)
    want = [reference_logprob(model, tok, p[0]["content"], a) for p, a in zip(prompts, answers)]
    assert got == pytest.approx(want, abs=1e-3)
    assert scorer.stats.batches > 1
    rows, _ = encode_rows(tok, prompts, answers, cfg, share=share)
    assert len(rows) == (len(prompts) // 2 if share else len(prompts))


def test_eager_attention_gives_the_same_shared_scores(tiny_model_dir, tok):
    prompts, answers = conversation_items()
    sdpa = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="sdpa")
    eager = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="eager")
    a = LogLikelihoodScorer(sdpa, tok).score(prompts, answers)
    b = LogLikelihoodScorer(eager, tok).score(prompts, answers)
    assert a == pytest.approx(b, abs=1e-3)


def test_long_prompts_lose_their_start_never_the_answer(model, tok):
    prompts, answers = conversation_items()
    long_prompt, answer = prompts[-1], answers[-1]
    n_answer = len(tok(render(tok, long_prompt, answer)[1], add_special_tokens=False)["input_ids"])
    max_length = n_answer + 10
    scorer = LogLikelihoodScorer(model, tok, BatchConfig(max_length=max_length, max_tokens=max_length))
    got = scorer.score([long_prompt], [answer])[0]
    assert scorer.stats.truncated == 1
    assert got == pytest.approx(reference_logprob(model, tok, long_prompt[0]["content"], answer, max_length), abs=1e-3)


def test_reward_model_scores_do_not_depend_on_batching(tiny_model_dir, tok):
    rm = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1)
    prompts, answers = conversation_items()
    batched = RewardModelScorer(rm, tok).score(prompts, answers)
    single = [RewardModelScorer(rm, tok).score([p], [a])[0] for p, a in zip(prompts, answers)]
    assert batched == pytest.approx(single, abs=1e-4)
    assert len(set(round(s, 5) for s in batched)) > 1
