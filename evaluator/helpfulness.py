"""Helpfulness (AdvisorQA): a Plackett–Luce reward model trained on answers ranked by votes.

Data: JSON lines `{"question", "answers": [{"text", "votes"}]}`, best first (we re-sort by votes,
stably, so a file in any order works). Threads with fewer than two answers teach nothing and are
skipped (counted).

Loss (Plackett 1975, Luce 1959; listwise as in AdvisorQA): for a thread whose answers are in vote
order with reward scores s_1..s_K,

    L = − Σ_{i=1..K'} [ s_i − log Σ_{j=i..K} exp(s_j) ]

the negative log-likelihood that the reward model would pick the best answer first, then the best
of the rest, and so on. `list_size` K sets how many answers of a thread form one list: each
epoch, a thread with more answers contributes K of them drawn at random, kept in vote order
(K = 2 is Bradley–Terry on a random pair; None uses every answer). Threads of different lengths
are batched with a mask.

Reward models share one interface, `score(questions, answers) -> np.ndarray`:
- `EmbeddingRewardModel` (offline default): frozen sentence embeddings of the question and the
  answer (bundled MiniLM) -> [q, a, q*a] -> a small MLP. Training touches only the head, so a
  few hundred threads train in seconds on a CPU and the embeddings are computed once.
- `HFRewardModel`: any `AutoModelForSequenceClassification` directory, fed (question, answer) as
  a text pair, fine-tuned end to end with the same loss (slow on CPU; meant for a GPU).

The metric's own quality on held-out threads: NDCG@2/3/5 (gain = votes, clamped at 0; ties in
predicted score broken pessimistically), 1st-vs-2nd and 1st-vs-last accuracy (strictly greater;
threads whose compared answers have equal votes are left out and counted).

Helpfulness of a model, two ways:
- on ranked threads (AdvisorQA's own measure, `helpfulness`): for each question, the share of its
  human reference answers that the model's advice out-scores (strictly), averaged over questions.
  It needs questions that come with human answers, and there are few (13 held out here), while
  each question's value moves in steps of a third or a quarter.
- on any advice prompt (`helpfulness_on_prompts`, the release gate's measure): the answer's
  reward-model score read as a percentile of the scores of *all* human reference answers of the
  ranked set (each scored with its own question; ties count half). It is the same scale for every
  prompt, fine-grained (219 references in the shipped set), in [0, 1] ("beats 60 % of human answers"), and a
  monotone transform of the score, so a paired comparison of two models over the same prompts
  compares their reward; prompts need no human answers, so a gate can use hundreds of them.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from evaluator.embeddings import Embedder, SentenceEmbedder
from evaluator.shipped import RANKED_ADVICE, read_jsonl

AnswerFn = Callable[[Sequence[str]], list[str]]


@dataclass(frozen=True)
class RankedAnswer:
    text: str
    votes: float


@dataclass(frozen=True)
class Thread:
    question: str
    answers: tuple[RankedAnswer, ...]  # best first

    @property
    def texts(self) -> list[str]:
        return [a.text for a in self.answers]

    @property
    def votes(self) -> list[float]:
        return [a.votes for a in self.answers]


def load_threads(path: str | Path = RANKED_ADVICE, *, min_answers: int = 2) -> list[Thread]:
    """Read ranked-answer JSON lines; threads with fewer than `min_answers` answers are skipped."""
    threads = []
    for n, obj in enumerate(read_jsonl(path), start=1):
        try:
            answers = [RankedAnswer(str(a["text"]), float(a["votes"])) for a in obj["answers"]]
            question = str(obj["question"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(
                f"{path} line {n}: expected {{'question': str, 'answers': [{{'text': str, 'votes': number}}]}} ({e})"
            ) from e
        answers.sort(key=lambda a: -a.votes)  # stable: equal votes keep the file's order
        if len(answers) >= min_answers:
            threads.append(Thread(question, tuple(answers)))
    if not threads:
        raise ValueError(f"{path} has no thread with at least {min_answers} answers")
    return threads


def split_threads(threads: Sequence[Thread], test_size: float = 0.2, seed: int = 0) -> tuple[list[Thread], list[Thread]]:
    """Seeded split by thread (never by answer: a thread's answers stay together)."""
    order = list(range(len(threads)))
    random.Random(seed).shuffle(order)
    n_test = max(1, round(len(threads) * test_size))
    test = set(order[:n_test])
    return [t for i, t in enumerate(threads) if i not in test], [t for i, t in enumerate(threads) if i in test]


# ---------------------------------------------------------------- the loss


def plackett_luce_loss(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean PL negative log-likelihood; `scores` [B, K] in true rank order, `mask` [B, K] real answers.

    Masked entries must come after the real ones in each row.
    """
    neg_inf = torch.finfo(scores.dtype).min
    s = scores.masked_fill(~mask, neg_inf)
    # log Σ_{j>=i} exp(s_j): reverse cumulative logsumexp.
    tail_lse = torch.logcumsumexp(s.flip(-1), dim=-1).flip(-1)
    terms = (s - tail_lse).masked_fill(~mask, 0.0)
    return -terms.sum(-1).mean()


# ---------------------------------------------------------------- reward models


class RewardModel(Protocol):
    def score(self, questions: Sequence[str], answers: Sequence[str]) -> np.ndarray: ...


class _Head(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3 * dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, 1))

    def forward(self, q: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([q, a, q * a], dim=-1)).squeeze(-1)


class EmbeddingRewardModel:
    """Frozen sentence embeddings + a trainable MLP head."""

    META = "reward_model.json"
    WEIGHTS = "head.pt"

    def __init__(self, embedder: Embedder, dim: int, hidden: int = 256, dropout: float = 0.1) -> None:
        self.embedder = embedder
        self.head = _Head(dim, hidden, dropout)
        self.dim, self.hidden, self.dropout = dim, hidden, dropout

    def _embed(self, texts: Sequence[str]) -> torch.Tensor:
        return torch.from_numpy(np.asarray(self.embedder.encode(texts), dtype=np.float32))

    def forward(self, questions: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
        return self.head(self._embed(questions), self._embed(answers))

    def parameters(self):
        return self.head.parameters()

    def train(self, mode: bool = True) -> None:
        self.head.train(mode)

    def score(self, questions: Sequence[str], answers: Sequence[str]) -> np.ndarray:
        if len(questions) != len(answers):
            raise ValueError(f"got {len(questions)} questions but {len(answers)} answers")
        self.head.eval()
        with torch.inference_mode():
            return self.forward(questions, answers).numpy().astype(np.float64)

    def save(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        torch.save(self.head.state_dict(), out / self.WEIGHTS)
        meta = {"kind": "embedding", "embedder": self.embedder.name, "dim": self.dim, "hidden": self.hidden,
                "dropout": self.dropout}
        (out / self.META).write_text(json.dumps(meta, indent=2))
        return out

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder | None = None) -> "EmbeddingRewardModel":
        path = Path(path)
        meta = json.loads((path / cls.META).read_text())
        embedder = embedder or SentenceEmbedder()
        if embedder.name != meta["embedder"]:
            raise ValueError(
                f"reward model at {path} was trained on {meta['embedder']} embeddings, got {embedder.name}; "
                "load it with the same sentence encoder"
            )
        model = cls(embedder, meta["dim"], meta["hidden"], meta["dropout"])
        model.head.load_state_dict(torch.load(path / cls.WEIGHTS, weights_only=True))
        return model


class HFRewardModel:
    """A Hugging Face sequence classifier scoring (question, answer) text pairs; logit 0 is the reward."""

    def __init__(self, path: str | Path, *, max_length: int = 512, batch_size: int = 16, device: str = "cpu") -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1).to(device)
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id or self.tokenizer.eos_token_id
        self.max_length, self.batch_size, self.device = max_length, batch_size, device

    def forward(self, questions: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
        enc = self.tokenizer(list(questions), list(answers), padding=True, truncation=True,
                             max_length=self.max_length, return_tensors="pt").to(self.device)
        return self.model(**enc).logits[:, 0].float()

    def parameters(self):
        return self.model.parameters()

    def train(self, mode: bool = True) -> None:
        self.model.train(mode)

    def score(self, questions: Sequence[str], answers: Sequence[str]) -> np.ndarray:
        self.model.eval()
        out = []
        with torch.inference_mode():
            for i in range(0, len(questions), self.batch_size):
                out.append(self.forward(questions[i: i + self.batch_size], answers[i: i + self.batch_size]).cpu())
        return torch.cat(out).numpy().astype(np.float64) if out else np.zeros(0)

    def save(self, out_dir: str | Path) -> Path:
        self.model.save_pretrained(out_dir)
        self.tokenizer.save_pretrained(out_dir)
        return Path(out_dir)


# ---------------------------------------------------------------- training


@dataclass(frozen=True)
class PLConfig:
    epochs: int = 60
    lr: float = 1e-3
    weight_decay: float = 1e-2
    batch_threads: int = 16
    list_size: int | None = None  # K answers per list, drawn each epoch (None = the whole thread)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.list_size is not None and self.list_size < 2:
            raise ValueError(f"list_size must be >= 2 (or None for whole threads), got {self.list_size}")


@dataclass
class PLHistory:
    losses: list[float] = field(default_factory=list)  # mean training loss per epoch


def _sample_list(thread: Thread, list_size: int | None, rng: random.Random) -> list[str]:
    """K answers of the thread, drawn at random, in vote order."""
    if list_size is None or len(thread.answers) <= list_size:
        return thread.texts
    keep = sorted(rng.sample(range(len(thread.answers)), list_size))
    return [thread.answers[i].text for i in keep]


def _batch_scores(model: Any, threads: Sequence[Thread], lists: Sequence[list[str]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(texts) for texts in lists)
    questions, answers, where = [], [], []
    for b, (t, texts) in enumerate(zip(threads, lists)):
        for k, text in enumerate(texts):
            questions.append(t.question)
            answers.append(text)
            where.append((b, k))
    flat = model.forward(questions, answers)
    scores = torch.zeros(len(threads), width, dtype=flat.dtype)
    mask = torch.zeros(len(threads), width, dtype=torch.bool)
    idx = torch.tensor(where)
    scores = scores.index_put((idx[:, 0], idx[:, 1]), flat)
    mask[idx[:, 0], idx[:, 1]] = True
    return scores, mask


def train_plackett_luce(model: Any, threads: Sequence[Thread], config: PLConfig = PLConfig(),
                        progress: Callable[[int, float], None] | None = None) -> PLHistory:
    """Fit `model` (EmbeddingRewardModel or HFRewardModel) with the PL loss; returns the loss curve."""
    if not threads:
        raise ValueError("no threads to train on")
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history = PLHistory()
    order = list(range(len(threads)))
    model.train(True)
    for epoch in range(config.epochs):
        rng.shuffle(order)
        total, batches = 0.0, 0
        for start in range(0, len(order), config.batch_threads):
            batch = [threads[i] for i in order[start: start + config.batch_threads]]
            lists = [_sample_list(t, config.list_size, rng) for t in batch]
            scores, mask = _batch_scores(model, batch, lists)
            loss = plackett_luce_loss(scores, mask)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        history.losses.append(total / batches)
        if progress:
            progress(epoch, history.losses[-1])
    model.train(False)
    return history


def train_embedding_reward_model(
    threads: Sequence[Thread], *, embedder: Embedder | None = None, config: PLConfig = PLConfig(),
    hidden: int = 256, dropout: float = 0.1,
) -> tuple[EmbeddingRewardModel, PLHistory]:
    embedder = embedder or SentenceEmbedder()
    # Encode every text once up front; the embedder's cache serves the epochs.
    embedder.encode([t.question for t in threads] + [a for t in threads for a in t.texts])
    dim = int(embedder.encode([threads[0].question]).shape[1])
    torch.manual_seed(config.seed)
    model = EmbeddingRewardModel(embedder, dim, hidden, dropout)
    return model, train_plackett_luce(model, threads, config)


# ---------------------------------------------------------------- the metric's own quality


def ndcg_at_k(predicted: Sequence[float], gains: Sequence[float], k: int) -> float | None:
    """NDCG@k of ranking by `predicted` (ties pessimistic); None when no answer has positive gain."""
    gains = [max(0.0, g) for g in gains]
    ideal = sorted(gains, reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    if idcg <= 0:
        return None
    # Pessimistic tie-break: among equal predictions, the lower-gain answer is ranked first.
    order = sorted(range(len(gains)), key=lambda i: (-predicted[i], gains[i]))[:k]
    return sum(gains[i] / math.log2(r + 2) for r, i in enumerate(order)) / idcg


@dataclass
class RankingReport:
    threads: int
    ndcg: dict[int, float]
    first_vs_second: float | None
    first_vs_last: float | None
    vote_ties_skipped: dict[str, int]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ndcg"] = {f"@{k}": v for k, v in self.ndcg.items()}
        return d


def ranking_report(model: RewardModel, threads: Sequence[Thread], ks: Sequence[int] = (2, 3, 5)) -> RankingReport:
    """How well the reward model orders human answers on (held-out) threads."""
    flat_q = [t.question for t in threads for _ in t.answers]
    flat_a = [a for t in threads for a in t.texts]
    flat = model.score(flat_q, flat_a).tolist()
    per_thread, at = [], 0
    for t in threads:
        per_thread.append(flat[at: at + len(t.answers)])
        at += len(t.answers)
    ndcg = {}
    for k in ks:
        values = [v for s, t in zip(per_thread, threads) if (v := ndcg_at_k(s, t.votes, k)) is not None]
        ndcg[k] = sum(values) / len(values) if values else float("nan")

    def pairwise(j: int) -> tuple[float | None, int]:
        kept = [(s[0], s[j]) for s, t in zip(per_thread, threads) if t.votes[0] > t.votes[j]]
        skipped = len(threads) - len(kept)
        return (sum(a > b for a, b in kept) / len(kept) if kept else None), skipped

    f2, skipped2 = pairwise(1)
    fl, skipped_last = pairwise(-1)
    return RankingReport(len(threads), ndcg, f2, fl, {"first_vs_second": skipped2, "first_vs_last": skipped_last})


# ---------------------------------------------------------------- helpfulness of a model


@dataclass
class HelpfulnessResult:
    score: float  # mean over questions of the share of references beaten
    questions: int
    per_question: list[float]


@dataclass(frozen=True)
class ReferenceScale:
    """The reward model's scores of human reference answers, sorted: the scale an answer is read on."""

    scores: np.ndarray

    @classmethod
    def from_threads(cls, model: RewardModel, threads: Sequence[Thread]) -> "ReferenceScale":
        if not threads:
            raise ValueError("no reference threads to build the helpfulness scale from")
        scores = model.score([t.question for t in threads for _ in t.answers], [a for t in threads for a in t.texts])
        return cls(np.sort(np.asarray(scores, dtype=float)))

    def percentile(self, scores: np.ndarray) -> np.ndarray:
        """Share of reference scores below each score, ties counting half."""
        below = np.searchsorted(self.scores, scores, side="left")
        not_above = np.searchsorted(self.scores, scores, side="right")
        return (below + not_above) / (2.0 * len(self.scores))


def helpfulness_on_prompts(model: RewardModel, scale: ReferenceScale, prompts: Sequence[str],
                           advice: Sequence[str]) -> HelpfulnessResult:
    """Each answer's reward read as a percentile of the human reference answers (`ReferenceScale`),
    averaged over prompts; `per_question` keeps the per-prompt values for a paired interval."""
    if len(prompts) != len(advice):
        raise ValueError(f"got {len(prompts)} prompts but {len(advice)} answers; pass one answer per prompt")
    if not prompts:
        raise ValueError("no prompts to evaluate")
    values = scale.percentile(np.asarray(model.score(list(prompts), list(advice)), dtype=float))
    return HelpfulnessResult(score=float(values.mean()), questions=len(prompts), per_question=values.tolist())


def helpfulness(model: RewardModel, threads: Sequence[Thread], advice: Sequence[str]) -> HelpfulnessResult:
    """Share of each thread's human answers that `advice[i]` out-scores, averaged over threads."""
    if len(threads) != len(advice):
        raise ValueError(f"got {len(threads)} threads but {len(advice)} answers; pass one answer per question")
    if not threads:
        raise ValueError("no threads to evaluate")
    questions = [t.question for t in threads]
    mine = model.score(questions, list(advice))
    refs = model.score([t.question for t in threads for _ in t.answers], [a for t in threads for a in t.texts])
    shares, at = [], 0
    for i, t in enumerate(threads):
        theirs = refs[at: at + len(t.answers)]
        at += len(t.answers)
        shares.append(float(np.mean(mine[i] > theirs)))
    return HelpfulnessResult(score=float(np.mean(shares)), questions=len(threads), per_question=shares)

