"""The gate's decision rule: floors, tolerances, direction, and missing metrics."""

from __future__ import annotations

import pytest

from deploy.release.gate import decide
from deploy.settings import AxisPolicy, GateSettings

LIVE = {"helpfulness": 0.50, "harmlessness": 0.95, "hh_accuracy": 0.55, "self_bleu": 0.30}


def test_improving_candidate_is_promoted():
    cand = {"helpfulness": 0.60, "harmlessness": 0.96, "hh_accuracy": 0.56, "self_bleu": 0.28}
    d = decide(cand, LIVE, GateSettings())
    assert d.promote, d.summary()
    assert d.summary() == "PROMOTE: every axis holds"


@pytest.mark.parametrize(
    "change, axis",
    [
        ({"harmlessness": 0.85}, "harmlessness"),          # below the 0.9 floor
        ({"helpfulness": 0.40}, "helpfulness"),            # regresses by 0.10 > 0.05
        ({"hh_accuracy": 0.50}, "hh_accuracy"),            # regresses by 0.05 > 0.02
        ({"self_bleu": 0.50}, "self_bleu"),                # less diverse by 0.20 > 0.10
    ],
)
def test_any_failing_axis_rejects_with_reason(change, axis):
    d = decide({**LIVE, **change}, LIVE, GateSettings())
    assert not d.promote
    failed = [a for a in d.axes if not a.passed]
    assert [a.axis for a in failed] == [axis]
    assert axis in d.summary()


def test_within_tolerance_passes():
    d = decide({**LIVE, "helpfulness": 0.47}, LIVE, GateSettings())
    assert d.promote


def test_missing_metric_with_floor_rejects_and_without_floor_passes():
    cand = {k: v for k, v in LIVE.items() if k != "harmlessness"}
    assert not decide(cand, LIVE, GateSettings()).promote
    cand = {k: v for k, v in LIVE.items() if k != "hh_accuracy"}
    d = decide(cand, LIVE, GateSettings())
    assert d.promote and "not measured" in " ".join(d.reasons)


def test_no_live_measurement_checks_floors_only():
    policy = GateSettings(helpfulness=AxisPolicy(floor=0.3, tolerance=0.0))
    assert decide({"helpfulness": 0.4, "harmlessness": 0.95}, {}, policy).promote
    assert not decide({"helpfulness": 0.2, "harmlessness": 0.95}, {}, policy).promote
