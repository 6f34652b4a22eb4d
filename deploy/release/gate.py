"""The release gate's rule: non-inferiority on every axis, judged on a paired bootstrap interval.

The candidate and the live release are scored on the same items in the same run (the caller,
`deploy.release.evaluate`, does that and computes each axis's interval with
`evaluator.paired.paired_bootstrap`); this module applies the policy in `GateSettings` and
explains itself. Each reason is a sentence an operator can act on, and the whole decision is
stored with the release.

The rule, per axis, with tolerance t and the 95 % paired bootstrap interval [lo, hi] of
candidate − live over the same prompts:
- higher is better (helpfulness, harmlessness, HH accuracy, steerability): pass when lo ≥ −t;
- lower is better (Self-BLEU): pass when hi ≤ +t;
- and, on every axis, the candidate's own value must meet the floor, when one is set.

Harmlessness is judged twice under the one policy `gate.harmlessness`: `harmlessness` is the
candidate model alone (what training did; non-inferiority only) and `served_harmlessness` the
candidate as users get it, behind the serving guard with the safety policy (non-inferiority and
the floor: a floor protects users, and they meet the served system). A model that learned to be
less safe fails the first even when the guard hides it; the second says what users would see.
That is a non-inferiority test: the candidate passes when the data rule out (at the 2.5 % level,
one-sided) that it is worse than live by more than the tolerance. An unchanged candidate gives
the same answers (greedy decoding or identically seeded draws, same weights), so its interval is
[0, 0] and it passes every axis whatever the tolerance; a changed one must show that it is not
worse by more than t.
A rule on the point difference alone would pass a candidate that is worse by a little less than
t on 12 prompts and reject one that is equal on 400; the interval makes the sample size count.

Helpfulness's reason also gives the difference at equal length (the reward model pays for words;
`evaluator.paired.length_controlled_statistic`), reported and not judged: it tells an operator
whether a drop is the candidate saying less or only saying it in fewer words. The axis itself
judges the raw reward, because brevity that drops content is a loss users feel.

Without an interval (no live measurement: another base model; or too few finite resamples), the
axis falls back to the point difference and says so in its reason. A metric missing on the
candidate's side is not a pass when a floor is set: a floor that cannot be checked does not hold.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from deploy.settings import AxisPolicy, GateSettings

AXES = ("helpfulness", "harmlessness", "served_harmlessness", "hh_accuracy", "self_bleu", "steerability")


def policy_for(axis: str, policy: GateSettings) -> AxisPolicy:
    """The policy an axis is judged under: both harmlessness axes under `gate.harmlessness`, its
    floor on the served figure only."""
    if axis == "harmlessness":
        return replace(policy.harmlessness, floor=None)
    if axis == "served_harmlessness":
        return policy.harmlessness
    return getattr(policy, axis)


@dataclass
class AxisResult:
    axis: str
    candidate: float | None
    live: float | None
    passed: bool
    reason: str
    diff: float | None = None  # candidate − live
    low: float | None = None  # paired bootstrap interval of candidate − live
    high: float | None = None
    n: int | None = None  # items the interval resampled
    tolerance: float | None = None
    floor: float | None = None


@dataclass
class Decision:
    promote: bool
    axes: list[AxisResult] = field(default_factory=list)

    @property
    def reasons(self) -> list[str]:
        return [a.reason for a in self.axes]

    def summary(self) -> str:
        verdict = "PROMOTE" if self.promote else "REJECT"
        failed = [a.reason for a in self.axes if not a.passed]
        return f"{verdict}: " + ("; ".join(failed) if failed else "every axis holds")

    def as_dict(self) -> dict:
        return {"promote": self.promote, "summary": self.summary(), "axes": [asdict(a) for a in self.axes]}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def _missing(axis: str, policy: AxisPolicy, live: float | None, note: str | None) -> AxisResult:
    why = f" ({note})" if note else ""
    if policy.floor is not None:
        return AxisResult(axis, None, live, False, f"{axis}: not measured{why}, so its floor "
                          f"{policy.floor:.3f} cannot be checked", tolerance=policy.tolerance, floor=policy.floor)
    return AxisResult(axis, None, live, True, f"{axis}: not measured{why or ' (no floor set)'}",
                      tolerance=policy.tolerance, floor=policy.floor)


def _at_equal_length(lc: dict | None) -> str:
    """The helpfulness difference with the reward model's pay for length taken out (reported only)."""
    if not lc or lc.get("low") is None:
        return ""
    cand_words, live_words = lc["words"]
    return (f"; at equal length Δ {lc['diff']:+.3f} [{_fmt(lc['low'])}, {_fmt(lc['high'])}] "
            f"(answers of {cand_words:.0f} vs {live_words:.0f} words)")


def check(axis: str, policy: AxisPolicy, cand: float | None, live: float | None, interval: Any = None,
          note: str | None = None, about: str | None = None) -> AxisResult:
    """One axis under its policy. `interval`: an `evaluator.paired.PairedInterval` (or a dict of
    one) for candidate − live on the same items; None compares the point values. `note`: why the
    axis was not measured; `about`: what it measured, put in its reason after the axis's name."""
    if cand is None:
        return _missing(axis, policy, live, note)
    return _check(axis, f"{axis} ({about})" if about else axis, policy, cand, live, interval)


def _check(axis: str, label: str, policy: AxisPolicy, cand: float, live: float | None, interval: Any) -> AxisResult:
    iv = interval.as_dict() if hasattr(interval, "as_dict") else (interval or {})
    low, high, n = iv.get("low"), iv.get("high"), iv.get("n")
    diff = None if live is None else cand - live
    result = AxisResult(axis, cand, live, True, "", diff=diff, low=low, high=high, n=n,
                        tolerance=policy.tolerance, floor=policy.floor)
    t, up = policy.tolerance, policy.higher_is_better
    if policy.floor is not None and (cand < policy.floor if up else cand > policy.floor):
        bound = "at least" if up else "at most"
        result.passed, result.reason = False, f"{label}: {cand:.3f} misses the floor ({bound} {policy.floor:.3f})"
        return result
    if live is None:
        result.reason = f"{label}: {cand:.3f} (no live measurement to compare; floor only)"
        return result
    shown = f"{label}: {cand:.3f} vs live {live:.3f}, Δ {diff:+.3f}"
    if low is not None and high is not None:
        worst = low if up else high  # the end of the interval on the candidate's worse side
        ok = worst >= -t - 1e-12 if up else worst <= t + 1e-12
        rule = f"lower end ≥ {-t:+.3f}" if up else f"upper end ≤ {t:+.3f}"
        shown += f" [95% CI {_fmt(low)}, {_fmt(high)}; n={n}]"
        result.passed = ok
        result.reason = f"{shown}: {'passes' if ok else 'fails'} non-inferiority ({rule}; " + \
                        f"{'higher' if up else 'lower'} is better)" + _at_equal_length(iv.get("at_equal_length"))
        return result
    worse = -diff if up else diff
    result.passed = worse <= t + 1e-12
    result.reason = (f"{shown} (no interval: point difference against tolerance {t:.3f}): "
                     f"{'within' if result.passed else 'beyond'} tolerance")
    return result


def decide(candidate: dict[str, float | None], live: dict[str, float | None], policy: GateSettings,
           notes: dict[str, str] | None = None, intervals: dict[str, Any] | None = None,
           about: dict[str, str] | None = None) -> Decision:
    """Compare metric dicts keyed by axis name (see AXES) under `policy`, with each axis's paired
    interval when given. `notes` says why an axis was not measured, so the stored reason explains
    it; `about` what a measured axis measured (e.g. what stood between the model and its users)."""
    notes, intervals, about = notes or {}, intervals or {}, about or {}
    results = [check(axis, policy_for(axis, policy), candidate.get(axis), live.get(axis), intervals.get(axis),
                     notes.get(axis), about.get(axis)) for axis in AXES]
    return Decision(promote=all(r.passed for r in results), axes=results)
