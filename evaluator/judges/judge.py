"""The validated judges: helpfulness and harmlessness, trained on people's judgements, shipped as weights.

- `HelpfulnessJudge.score(prompts, answers)`: a Bradley-Terry score learned from HH-RLHF helpful
  preference pairs; higher = the answer people would prefer. `percentile` reads it on a fixed
  human scale: the share of human HH answers (dev split, each scored with its own conversation)
  that score below it, so "0.6" means "beats 60 % of human answers", whatever the prompt.
- `HarmlessnessJudge`: one linear score learned from HH-RLHF harmless-base pairs (the less
  harmful answer higher) and the labelled safety set (unsafe answers). `answer_risk` is the
  probability an answer is unsafe for its request; `score` is its negative, so the HH harness
  (higher = better) measures it like any scorer. `request_risk` is the probability a request
  seeks harmful help, from a head on the request alone, read after the model's first layers
  (`RequestEncoder`: the guard runs it before the first token). `threshold` and `request_threshold` are
  chosen on the safety set's training part and shipped with their measured precision and recall.
Both read `evaluator.judges.features` of the served base model, so one model load serves both;
`version` names the weights and the encoder, and is stored beside every score it produces;
`fingerprint` is a digest of the weights, the encoder and the feature recipe, for caches of scores.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluator.judges.features import FeatureConfig, Featurizer, Message, RequestEncoder, model_fingerprint, with_pmi
from evaluator.judges.head import LinearHead

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
RECIPE = WEIGHTS_DIR / "recipe.json"


class JudgeMismatch(RuntimeError):
    """The shipped weights were trained on another encoder or feature recipe than the one given."""


def _fingerprint(version: str, featurizer: Featurizer, *heads: LinearHead | None) -> str:
    h = hashlib.sha256(f"{version}|{model_fingerprint(featurizer.model_dir)}|{featurizer.config}".encode())
    for head in heads:
        if head is not None:
            for array in (head.mean, head.scale, head.weights, np.array([head.bias])):
                h.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    return h.hexdigest()


def _check(head: LinearHead, feat: Featurizer, name: str) -> None:
    want = head.meta.get("encoder")
    have = model_fingerprint(feat.model_dir)
    if want and want != have:
        raise JudgeMismatch(
            f"the {name} judge was trained on features of {want}, but the model at {feat.model_dir} is {have}; "
            "retrain the judges (`python -m evaluator.judges.train`) or point them at the model they were trained on")


@dataclass
class HelpfulnessJudge:
    featurizer: Featurizer
    head: LinearHead
    reference: np.ndarray  # sorted scores of human answers, the percentile scale

    @property
    def version(self) -> str:
        return f"helpful-{self.head.meta.get('version', '?')}"

    @property
    def fingerprint(self) -> str:
        return _fingerprint(self.version, self.featurizer, self.head)

    def raw(self, prompts: Sequence[str | Sequence[Message]], answers: Sequence[str]) -> np.ndarray:
        """Scores of answers to conversations (a plain string is a one-turn conversation)."""
        x = self.featurizer.encode(_conversations(prompts), answers)
        if "pmi" in self.head.spec.blocks:
            x = with_pmi(x, self.featurizer.alone(answers))
        return self.head.score(x)

    def score(self, prompts: Sequence[str | Sequence[Message]], answers: Sequence[str]) -> list[float]:
        return self.raw(prompts, answers).tolist()

    def percentile(self, scores: Sequence[float]) -> list[float]:
        ref = self.reference
        lo = np.searchsorted(ref, scores, side="left")
        hi = np.searchsorted(ref, scores, side="right")
        return ((lo + hi) / (2.0 * len(ref))).tolist()  # ties count half


@dataclass
class HarmlessnessJudge:
    featurizer: Featurizer
    head: LinearHead
    request_head: LinearHead | None
    threshold: float
    request_threshold: float
    request_encoder: RequestEncoder | None = None  # the first layers of the same model, for the request head

    @property
    def version(self) -> str:
        """`harmless-3`; with the request head's version when that head was refitted apart: `harmless-3.request-5`."""
        answer = self.head.meta.get("version", "?")
        request = self.request_head.meta.get("version", answer) if self.request_head else answer
        return f"harmless-{answer}" + (f".request-{request}" if request != answer else "")

    @property
    def fingerprint(self) -> str:
        return _fingerprint(self.version, self.featurizer, self.head, self.request_head)

    def answer_risk(self, requests: Sequence[str | Sequence[Message]], answers: Sequence[str]) -> list[float]:
        return self.head.probability(self.featurizer.encode(_conversations(requests), answers)).tolist()

    def score(self, prompts: Sequence[str | Sequence[Message]], answers: Sequence[str]) -> list[float]:
        """Higher = less harmful (the HH harness's convention)."""
        return (-self.head.score(self.featurizer.encode(_conversations(prompts), answers))).tolist()

    def is_unsafe(self, requests: Sequence[str], answers: Sequence[str]) -> list[bool]:
        return [p >= self.threshold for p in self.answer_risk(requests, answers)]

    def request_risk(self, requests: Sequence[str]) -> list[float]:
        if self.request_head is None or self.request_encoder is None:
            raise RuntimeError("these judge weights have no request head; retrain with the safety set")
        return self.request_head.probability(self.request_encoder.encode(list(requests))).tolist()


def _conversations(requests: Sequence[str | Sequence[Message]]) -> list[list[Message]]:
    return [[{"role": "user", "content": r}] if isinstance(r, str) else list(r) for r in requests]


@dataclass
class Judges:
    helpfulness: HelpfulnessJudge
    harmlessness: HarmlessnessJudge

    @property
    def recipe(self) -> dict:
        return json.loads(RECIPE.read_text()) if RECIPE.is_file() else {}


def shipped_threshold(name: str, key: str = "threshold", weights_dir: Path = WEIGHTS_DIR) -> float:
    """A cut from the shipped weights' metadata (`key`, else the head's own "threshold", else 0.5)."""
    path = weights_dir / f"{name}.json"
    meta = json.loads(path.read_text()) if path.is_file() else {}
    return float(meta.get(key, meta.get("threshold", 0.5)))


def shipped_thresholds(weights_dir: Path = WEIGHTS_DIR) -> tuple[float, float]:
    """(request, answer) thresholds the serving guard uses: the answer cut set on the served
    model's own answers (`guard_threshold`), else the judge's."""
    return (shipped_threshold("request", weights_dir=weights_dir),
            shipped_threshold("harmless", "guard_threshold", weights_dir))


def load_judges(model_dir: str | Path, weights_dir: Path = WEIGHTS_DIR) -> Judges:
    """Both judges on one featurizer of the served base model at `model_dir`."""
    if not (weights_dir / "helpful.json").is_file():
        raise FileNotFoundError(f"no judge weights in {weights_dir}; train them with `python -m evaluator.judges.train`")
    helpful = LinearHead.load(weights_dir / "helpful")
    harmless = LinearHead.load(weights_dir / "harmless")
    request = LinearHead.load(weights_dir / "request") if (weights_dir / "request.json").is_file() else None
    feat = Featurizer(model_dir, FeatureConfig(**helpful.meta.get("features", {})))
    for name, head in (("helpfulness", helpful), ("harmlessness", harmless), ("request", request)):
        if head is not None:
            _check(head, feat, name)
    requests = RequestEncoder(model_dir, int(request.meta["depth"]), FeatureConfig(**request.meta.get("features", {}))) \
        if request is not None else None
    with np.load(weights_dir / "helpful_reference.npz") as f:
        reference = np.sort(f["scores"])
    return Judges(
        helpfulness=HelpfulnessJudge(feat, helpful, reference),
        harmlessness=HarmlessnessJudge(feat, harmless, request, float(harmless.meta.get("threshold", 0.5)),
                                       float(request.meta.get("threshold", 0.5)) if request else 0.5, requests),
    )
