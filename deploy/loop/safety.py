"""The training-set safety filter: what may never be a desirable, chosen or SFT example.

`make_safety_filter(settings, enabled=True)` is what every path that builds a training set calls
(`advisor dataset build`, `advisor train`, the training job, the cycle). Enabled, it is the
moderator-backed `ModeratorSafetyFilter`, joined - when `judges.kind` is "trained" - by the
validated harmlessness judge reading each answer with its conversation (`JudgeSafetyFilter`): an
answer either flags is dropped. The two fail differently: the moderator knows the written unsafe
advice it was trained on, the judge real requests for harmful help (HH-RLHF red-team answers and
the labelled safety set; precision and recall in docs/judges.md). Dropping a safe example costs
little, training on an unsafe one costs a release. Switched off, it is
`feedback.datasets.AcceptEverythingFilter`, whose name says on the dataset card that nothing was
moderated.

`safety_anchors(settings, method)` is the other side of the same concern: labelled answers to risky requests
mixed into a KTO set (`feedback.datasets.anchors`), so training on users' taste does not wear
away the model's own safety, which the gate holds to non-inferiority.

Design choices:
- It lives in `deploy`, the composition root: `feedback` defines the `SafetyFilter` protocol and
  may not import `evaluator`, `evaluator` may not import `feedback`; this module joins the two.
- The moderator is the offline default of the evaluation suite (`evaluator.moderation`:
  sentence embeddings + TF-IDF into a logistic regression on the shipped safe/unsafe advice
  set), cached under `<data_dir>/models/moderator` — the same cache the gate's harmlessness
  axis uses, so the filter and the gate judge with the same classifier.
- Loaded lazily, on the first `flags` call: a build with nothing to guard (no desirable rows)
  or a switched-off filter costs nothing.
- Threshold 0.5 on the unsafe probability, as the gate's harmlessness score uses (the
  classifier's class weights are balanced, so 0.5 means the same at any class ratio).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.release.judges import judge_threshold, load_judges, load_moderator, moderator_dir
from feedback.datasets import AcceptEverythingFilter, SafetyFilter
from feedback.datasets.anchors import Anchor, SafetyAnchors
from store.attributes import Attributes


@dataclass(frozen=True)
class SafetyFilterConfig:
    threshold: float = 0.5  # unsafe probability at or above which a text is flagged
    cache_dir: str = ""  # empty: <data_dir>/models/moderator


class ModeratorSafetyFilter:
    """`SafetyFilter` over an `evaluator.moderation` moderator (anything with `score(texts)`)."""

    def __init__(self, cache_dir: str | Path, config: SafetyFilterConfig = SafetyFilterConfig(),
                 moderator: Any = None) -> None:
        self.cache_dir = Path(cache_dir)
        self.config = config
        self._moderator = moderator
        self.name = f"moderator (embeddings + TF-IDF logistic regression, unsafe p >= {config.threshold:g})"
        self.last_flagged: list[str] = []  # the texts the last call flagged, for reports and tests

    @property
    def moderator(self) -> Any:
        if self._moderator is None:
            self._moderator = load_moderator(self.cache_dir)
        return self._moderator

    def flags(self, texts: Sequence[str], prompts: Sequence[list[dict]] | None = None) -> list[bool]:
        if not texts:
            return []
        flagged = [p >= self.config.threshold for p in self.moderator.score(list(texts))]
        self.last_flagged = [t for t, f in zip(texts, flagged) if f]
        return flagged


class JudgeSafetyFilter:
    """The moderator's flags, or-ed with the harmlessness judge's: answer risk at or above its threshold
    (shipped with its weights), the answer read under the conversation it answers."""

    def __init__(self, moderator: ModeratorSafetyFilter, judge: Any, threshold: float) -> None:
        self.moderator, self._judge, self.threshold = moderator, judge, threshold
        self.name = f"{moderator.name} + trained harmlessness judge (answer risk >= {threshold:.3f})"
        self.last_flagged: list[str] = []

    @property
    def judge(self) -> Any:
        if callable(self._judge):  # a loader: the judge reads a 135M-parameter model, load it when needed
            self._judge = self._judge()
        return self._judge

    def flags(self, texts: Sequence[str], prompts: Sequence[list[dict]] | None = None) -> list[bool]:
        if not texts:
            return []
        requests = list(prompts) if prompts is not None else [""] * len(texts)
        risk = self.judge.answer_risk(requests, list(texts))
        flagged = [m or r >= self.threshold for m, r in zip(self.moderator.flags(texts, prompts), risk)]
        self.last_flagged = [t for t, f in zip(texts, flagged) if f]
        return flagged


def make_safety_filter(settings: Any, enabled: bool = True,
                       config: SafetyFilterConfig = SafetyFilterConfig()) -> SafetyFilter:
    """The filter for training-set builds: the moderator (and the trained judge, when the settings'
    judges are the trained ones), or (switched off) the named no-op."""
    if not enabled:
        return AcceptEverythingFilter()
    cache = Path(config.cache_dir) if config.cache_dir else moderator_dir(settings.data_path)
    moderator = ModeratorSafetyFilter(cache, config)
    if settings is None or settings.judges.kind != "trained":
        return moderator
    # The judge's own cut (5 % of all safe answers to harmless requests flagged, in cross-validation),
    # not the guard's stricter-on-false-positives one: dropping a safe example costs little.
    return JudgeSafetyFilter(moderator, lambda: load_judges(settings)[1], judge_threshold())


def anchor_pool() -> list[Anchor]:
    """The served model's own answers to real risky requests from the labelled safety set, as
    careful reading marked them: greedy without a system prompt, and as served under the safety
    policy (trained on without it, so the policy's effect is learnt by the model alone). The set's
    fitting split only: its held-out third measures the judges, and the gate's requests are not
    in the set."""
    from evaluator.judges.safety import SERVED, load_safety_set

    return [Anchor(i.id, i.request, i.answer, safe=not i.answer_unsafe) for i in load_safety_set()
            if i.kind == "risky" and i.model in ("smollm2", SERVED) and i.split == "train"]


def safety_anchors(settings: Any, method: str) -> SafetyAnchors | None:
    """The anchors a `method` set takes by the settings (`schedule.safety_anchors` per user row,
    under the chat's default sliders); None unless the set is KTO and the share above 0."""
    share = settings.schedule.safety_anchors
    if method != "kto" or share <= 0:
        return None
    return SafetyAnchors(anchor_pool(), share, Attributes().steerlm())
