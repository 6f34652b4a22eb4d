"""The release gate: promote a candidate only if no axis regresses and every floor holds.

The candidate and the live release are scored on the same prompts in the same run (the caller
does that); this module only compares the two sets of numbers against the policy in the settings
and explains itself. Each reason is a sentence an operator can act on, and the whole decision is
stored with the release.

A metric missing on either side is not a pass: the axis is reported as "not measured" and, when
the policy sets a floor for it, the candidate is rejected, because a floor that cannot be checked
is a floor that does not hold.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from deploy.settings import AxisPolicy, GateSettings

AXES = ("helpfulness", "harmlessness", "hh_accuracy", "self_bleu")


@dataclass
class AxisResult:
    axis: str
    candidate: float | None
    live: float | None
    passed: bool
    reason: str


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


def _check(axis: str, policy: AxisPolicy, cand: float | None, live: float | None, note: str | None = None) -> AxisResult:
    if cand is None:
        why = f" ({note})" if note else ""
        if policy.floor is not None:
            return AxisResult(axis, cand, live, False,
                              f"{axis}: not measured{why}, so its floor {policy.floor:.3f} cannot be checked")
        return AxisResult(axis, cand, live, True, f"{axis}: not measured{why or ' (no floor set)'}")
    sign = 1 if policy.higher_is_better else -1
    better = "higher" if policy.higher_is_better else "lower"
    if policy.floor is not None and sign * (cand - policy.floor) < 0:
        bound = "at least" if policy.higher_is_better else "at most"
        return AxisResult(axis, cand, live, False,
                          f"{axis}: {cand:.3f} misses the floor ({bound} {policy.floor:.3f})")
    if live is not None:
        drop = sign * (live - cand)  # > 0: the candidate is worse than live
        if drop > policy.tolerance + 1e-12:
            return AxisResult(axis, cand, live, False,
                              f"{axis}: {cand:.3f} vs live {live:.3f} regresses by {drop:.3f} "
                              f"(tolerance {policy.tolerance:.3f}; {better} is better)")
        return AxisResult(axis, cand, live, True,
                          f"{axis}: {cand:.3f} vs live {live:.3f} (change {-drop:+.3f}, within tolerance {policy.tolerance:.3f})")
    return AxisResult(axis, cand, live, True, f"{axis}: {cand:.3f} (no live measurement to compare)")


def decide(candidate: dict[str, float | None], live: dict[str, float | None], policy: GateSettings,
           notes: dict[str, str] | None = None) -> Decision:
    """Compare metric dicts keyed by axis name (see AXES) under `policy`. `notes` says why an
    axis was not measured (e.g. no HH data configured), so the stored reason explains the gap."""
    notes = notes or {}
    results = [_check(axis, getattr(policy, axis), candidate.get(axis), live.get(axis), notes.get(axis))
               for axis in AXES]
    return Decision(promote=all(r.passed for r in results), axes=results)
