"""Plackett–Luce loss and gradients, NDCG on toy rankings, the helpfulness arithmetic, the shipped threads,
and (with the bundled MiniLM) a reward model trained on them that orders held-out answers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from evaluator.helpfulness import (
    PLConfig,
    RankedAnswer,
    ReferenceScale,
    Thread,
    helpfulness,
    helpfulness_on_prompts,
    load_threads,
    ndcg_at_k,
    plackett_luce_loss,
    ranking_report,
    split_threads,
    train_embedding_reward_model,
)
from evaluator.shipped import RANKED_ADVICE

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def thread(question: str, *answers: tuple[str, float]) -> Thread:
    return Thread(question, tuple(RankedAnswer(t, v) for t, v in answers))


class LookupRM:
    """Reward = a fixed number per answer text (or its length when unknown)."""

    def __init__(self, table: dict[str, float] | None = None) -> None:
        self.table = table or {}

    def score(self, questions, answers):
        return np.array([self.table.get(a, float(len(a))) for a in answers])


# ---------------------------------------------------------------- the loss


def test_pl_loss_matches_hand_computation_and_bradley_terry():
    s = torch.tensor([[2.0, 1.0, 0.0]])
    mask = torch.ones_like(s, dtype=torch.bool)
    want = -((2 - math.log(math.exp(2) + math.exp(1) + 1)) + (1 - math.log(math.exp(1) + 1)))
    assert plackett_luce_loss(s, mask).item() == pytest.approx(want, rel=1e-6)
    # K = 2: PL is Bradley–Terry, -log sigmoid(s1 - s2).
    pair = torch.tensor([[0.3, -0.4]])
    assert plackett_luce_loss(pair, torch.ones_like(pair, dtype=torch.bool)).item() == pytest.approx(
        -torch.nn.functional.logsigmoid(torch.tensor(0.7)).item(), rel=1e-6)


def test_pl_loss_prefers_the_true_order_and_its_gradient_points_there():
    mask = torch.ones(1, 4, dtype=torch.bool)
    right = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    assert plackett_luce_loss(right, mask) < plackett_luce_loss(right.flip(-1), mask)
    s = torch.zeros(1, 4, requires_grad=True)
    plackett_luce_loss(s, mask).backward()
    g = s.grad[0]
    assert g[0] < 0 < g[3]  # raise the best, lower the worst
    assert torch.all(g[:-1] < g[1:])  # monotone along the true ranking
    assert g.sum().item() == pytest.approx(0.0, abs=1e-6)  # shifting every score changes nothing


def test_pl_loss_ignores_padding():
    padded = torch.tensor([[1.0, 0.5, 9.0, 9.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False, False]])
    loss = plackett_luce_loss(padded, mask)
    loss.backward()
    assert loss.item() == pytest.approx(plackett_luce_loss(torch.tensor([[1.0, 0.5]]), mask[:, :2]).item())
    assert padded.grad[0, 2:].abs().sum() == 0


# ---------------------------------------------------------------- ranking metrics


def test_ndcg_on_toy_rankings():
    votes = [10, 5, 1, 0]
    assert ndcg_at_k([4, 3, 2, 1], votes, 3) == pytest.approx(1.0)
    dcg = 0 / math.log2(2) + 1 / math.log2(3)  # predicted order: 0-vote, 1-vote answers first
    idcg = 10 / math.log2(2) + 5 / math.log2(3)
    assert ndcg_at_k([1, 2, 3, 4], votes, 2) == pytest.approx(dcg / idcg)
    # Ties are broken pessimistically: equal predictions earn the worse order.
    assert ndcg_at_k([1, 1, 1, 1], votes, 2) == pytest.approx(dcg / idcg)
    assert ndcg_at_k([1, 2], [0, 0], 2) is None  # nothing to find


def test_ranking_report_accuracies_and_vote_ties():
    threads = [
        thread("q1", ("best", 9), ("mid", 5), ("worst", 1)),
        thread("q2", ("good", 9), ("also good", 9), ("bad", 1)),  # 1st vs 2nd tie in votes: skipped
        thread("q3", ("right", 7), ("wrong", 3)),
    ]
    rm = LookupRM({"best": 3, "mid": 2, "worst": 1, "good": 3, "also good": 3, "bad": 0, "right": 0, "wrong": 1})
    report = ranking_report(rm, threads)
    assert report.first_vs_second == pytest.approx(1 / 2)  # q1 right, q3 wrong
    assert report.first_vs_last == pytest.approx(2 / 3)
    assert report.vote_ties_skipped == {"first_vs_second": 1, "first_vs_last": 0}
    assert set(report.as_dict()["ndcg"]) == {"@2", "@3", "@5"}


def test_helpfulness_is_the_mean_share_of_references_beaten():
    threads = [thread("q1", ("aa", 3), ("aaaa", 2), ("aaaaaa", 1)), thread("q2", ("b", 2), ("bbb", 1))]
    result = helpfulness(LookupRM(), threads, ["xxxxx", "bbb"])  # length 5 beats 2 of 3; length 3 beats 1 of 2 (tie)
    assert result.per_question == pytest.approx([2 / 3, 1 / 2])
    assert result.score == pytest.approx((2 / 3 + 1 / 2) / 2)
    with pytest.raises(ValueError, match="one answer per question"):
        helpfulness(LookupRM(), threads, ["only one"])


def test_helpfulness_on_prompts_reads_scores_on_the_pooled_reference_scale():
    threads = [thread("q1", ("aa", 3), ("aaaa", 2), ("aaaaaa", 1)), thread("q2", ("b", 2), ("bbb", 1))]
    scale = ReferenceScale.from_threads(LookupRM(), threads)  # reference scores (lengths) 1, 2, 3, 4, 6
    assert scale.percentile(np.array([0.0, 3.0, 5.0, 9.0])) == pytest.approx([0.0, 0.5, 0.8, 1.0])  # tie: half
    result = helpfulness_on_prompts(LookupRM(), scale, ["any", "prompt"], ["xxxxx", "xxx"])
    assert result.per_question == pytest.approx([0.8, 0.5]) and result.score == pytest.approx(0.65)
    with pytest.raises(ValueError, match="one answer per prompt"):
        helpfulness_on_prompts(LookupRM(), scale, ["one"], ["a", "b"])
    with pytest.raises(ValueError, match="no reference threads"):
        ReferenceScale.from_threads(LookupRM(), [])


def test_shipped_advice_prompts_are_traceable_and_outside_the_reserved_rows():
    from evaluator.shipped import ADVICE_PROMPTS, load_advice_prompts, read_jsonl

    rows = list(read_jsonl(ADVICE_PROMPTS))
    assert len(rows) == len(load_advice_prompts()) >= 200
    assert all(r["row"] >= 1000 and r["subset"].startswith("helpful-") for r in rows)
    assert len({r["prompt"].lower() for r in rows}) == len(rows)


# ---------------------------------------------------------------- data


def test_load_threads_sorts_by_votes_and_skips_single_answers(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"question": "q", "answers": [{"text": "low", "votes": 1}, {"text": "high", "votes": 7}]},
            {"question": "lonely", "answers": [{"text": "only", "votes": 3}]}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    (t,) = load_threads(path)
    assert t.texts == ["high", "low"]
    path.write_text(json.dumps({"question": "q", "answers": [{"body": "x"}]}))
    with pytest.raises(ValueError, match="line 1"):
        load_threads(path)


def test_shipped_ranked_advice_set():
    threads = load_threads(RANKED_ADVICE)
    assert len(threads) >= 60
    assert all(3 <= len(t.answers) <= 6 for t in threads)
    assert all(t.votes == sorted(t.votes, reverse=True) for t in threads)
    train, test = split_threads(threads, 0.25, seed=0)
    assert not {t.question for t in train} & {t.question for t in test}


# ---------------------------------------------------------------- a real reward model (MiniLM)



@pytest.fixture(scope="module")
def embedder():
    from evaluator.embeddings import SentenceEmbedder

    return SentenceEmbedder()


def test_pl_reward_model_orders_held_out_advice(embedder, tmp_path):
    from evaluator.helpfulness import EmbeddingRewardModel

    train, test = split_threads(load_threads(), 0.25, seed=0)
    model, history = train_embedding_reward_model(train, embedder=embedder, config=PLConfig(epochs=40))
    assert history.losses[-1] < history.losses[0] / 2
    report = ranking_report(model, test)
    assert report.first_vs_last >= 0.8
    assert report.ndcg[3] >= 0.8
    # The best human answer beats most of its thread; a curt reply beats less.
    best = helpfulness(model, test, [t.answers[0].text for t in test]).score
    curt = helpfulness(model, test, ["Just deal with it."] * len(test)).score
    assert best > curt
    loaded = EmbeddingRewardModel.load(model.save(tmp_path / "rm"), embedder)
    assert np.allclose(loaded.score(["q"], ["an answer"]), model.score(["q"], ["an answer"]))


def test_any_hf_sequence_classifier_trains_with_the_same_loss(tiny_model_dir):
    from evaluator.helpfulness import HFRewardModel, train_plackett_luce

    threads = load_threads()[:6]
    rm = HFRewardModel(tiny_model_dir, max_length=64)
    history = train_plackett_luce(rm, threads, PLConfig(epochs=4, lr=1e-3, batch_threads=6))
    assert history.losses[-1] < history.losses[0]
    assert rm.score([t.question for t in threads], [t.texts[0] for t in threads]).shape == (6,)
