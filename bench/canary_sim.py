"""How often does the canary rule decide wrongly, and how often rightly? A seeded simulation.

    .venv/bin/python bench/canary_sim.py [--reps 2000] [--seed 0] [--out bench/results/canary_sim.json]

Simulated users, as the rule sees them (`deploy.release.canary.judge`): each answer is bad
(disliked, rephrased, corrected), good (liked or thanked) or neither. Each user has their own
rates, drawn from a Dirichlet around the arm's (bad 0.20, good 0.30 for live) with intra-user
correlation `--icc` (0.2), and 1 + Poisson(2) answers (3 on average). The canary gets 20 % of
users, so live has four times its answers. It is checked every `--every` (10) canary answers
from the first check with `min_answers` per arm, until the deadline: 60 canary answers (a small
deployment's day) or 600. At each check the rule runs on the answers so far, through the same
code as the service (`evaluator.sequential.difference_sequence`), and the first decision stands.

Canaries: equal to live; better (bad −0.05, good +0.05); slightly worse than the tolerance
allows (bad + 1.5 × the tolerance); clearly worse (bad +0.20, good −0.20); each at the
tolerances 0.05 and 0.10. Wrong decisions: rolling back an equal or better canary, promoting a
worse one.
Compared rules, same data:
- `always-valid`: the service's rule with its defaults (α 0.05, τ 0.1, `min_answers` 30, roll back
  when shown worse at all, `rollback_margin` 0), then one of them changed at a time: τ, α and
  `min_answers`, and rolling back only when shown worse beyond the tolerance;
- `fixed-95`: the same decisions from a fixed-sample 95 % interval checked at every look (what
  repeated looks at an ordinary interval do);
- `previous`: the rule this one replaced (95 % intervals, normal approximation of its bootstrap:
  roll back at any check when clearly worse, at the deadline promote if non-inferior, else roll
  back);
- `unclustered`: the new rule with a binomial variance that treats answers as independent.
Reports rates per outcome with their Monte-Carlo standard errors; nothing here asserts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))  # after the repo: bench/store.py must not shadow the store package

from _machine import cpu_model  # noqa: E402

from evaluator.sequential import ArmSums, difference_sequence, mixture_halfwidth, rate  # noqa: E402

LIVE = {"bad": 0.20, "good": 0.30}
TOLERANCES = (0.05, 0.10)
# canary − live (bad, good); "worse beyond tolerance" is 1.5 × the tolerance, in the bad rate only.
CANARIES = {"equal": (0.0, 0.0), "better": (-0.05, 0.05), "worse beyond tolerance": None,
            "clearly worse": (0.20, -0.20)}
WRONG = {"equal": "rollback", "better": "rollback", "worse beyond tolerance": "promote", "clearly worse": "promote"}
RIGHT = {"equal": "promote", "better": "promote", "worse beyond tolerance": "rollback", "clearly worse": "rollback"}
SHARE_RATIO = 4  # live answers per canary answer (share 0.2)
DEFAULT = "always-valid (defaults: alpha 0.05, tau 0.1, min 30, roll back when worse)"


def users(rng: np.random.Generator, reps: int, n_users: int, bad: float, good: float, icc: float) -> tuple:
    """Per user: (bad events, good events, answers), each (reps, n_users)."""
    kappa = (1 - icc) / icc if icc > 0 else None
    mean = np.array([bad, good, 1 - bad - good])
    probs = rng.dirichlet(kappa * mean, size=(reps, n_users)) if kappa else np.broadcast_to(mean, (reps, n_users, 3))
    answers = 1 + rng.poisson(2, size=(reps, n_users))
    bad_n = rng.binomial(answers, probs[..., 0])  # the multinomial, drawn as two binomials
    good_n = rng.binomial(answers - bad_n, np.clip(probs[..., 1] / np.maximum(1 - probs[..., 0], 1e-12), 0, 1))
    return bad_n, good_n, answers


def cumulative(events: np.ndarray, answers: np.ndarray) -> dict:
    e, a = events.astype(float), answers.astype(float)
    return {"users": np.cumsum(np.ones_like(a), 1), "events": np.cumsum(e, 1), "answers": np.cumsum(a, 1),
            "events_sq": np.cumsum(e * e, 1), "answers_sq": np.cumsum(a * a, 1), "cross": np.cumsum(e * a, 1)}


def sums_at(cum: dict, answers: int) -> ArmSums:
    """Sums over the whole users whose answers fit in the first `answers` (per replication)."""
    k = (cum["answers"] <= answers).sum(1)  # users included
    idx = np.maximum(k - 1, 0)[:, None]
    pick = {name: np.where(k > 0, np.take_along_axis(v, idx, 1)[:, 0], 0.0) for name, v in cum.items()}
    return ArmSums(**pick)


def looks(canary: dict, live: dict, deadline: int, every: int) -> list[dict]:
    """At each check: per rate, the canary − live estimate and variance (clustered and binomial)."""
    out = []
    for c in range(every, deadline + 1, every):
        check = {"answers": c}
        for rate_name in ("bad", "good"):
            cs, ls = sums_at(canary[rate_name], c), sums_at(live[rate_name], SHARE_RATIO * c)
            seq = difference_sequence(cs, ls, alpha=0.05, tau=0.1)  # variance only; widths per rule below
            binomial = sum(rate(s) * (1 - rate(s)) / np.maximum(s.answers, 1) for s in (cs, ls))
            check[rate_name] = (seq["diff"], seq["variance"], binomial, np.minimum(cs.answers, ls.answers))
        out.append(check)
    return out


def decide(checks: list[dict], *, half, min_answers: int, tol: float, margin: float | None = None,
           previous: bool = False, binomial: bool = False) -> dict:
    """Apply a rule at every check; the first decision stands. `half(variance)` is the interval's
    half-width; roll back when shown worse by more than `margin` (default: the tolerance).
    Returns the share of replications per outcome and the mean answers at decision."""
    margin = tol if margin is None else margin
    reps = len(checks[0]["bad"][0])
    outcome = np.full(reps, "", dtype=object)
    at = np.full(reps, checks[-1]["answers"], dtype=float)
    for i, check in enumerate(checks):
        ends = {}
        for rate_name in ("bad", "good"):
            diff, var, binom, n = check[rate_name]
            h = half(binom if binomial else var)
            ends[rate_name] = (np.maximum(diff - h, -1), np.minimum(diff + h, 1), n)
        (bl, bh, n), (gl, gh, _) = ends["bad"], ends["good"]
        ready = (n >= min_answers) & (outcome == "")
        last = i == len(checks) - 1
        if previous:
            worse, fine = (bl > 0) | (gh < 0), (bh <= tol) & (gl >= -tol)
            decided = {"rollback": ready & (worse | (last & ~fine)), "promote": ready & ~worse & last & fine}
        else:
            worse, fine = (bl > margin) | (gh < -margin), (bh <= tol) & (gl >= -tol)
            decided = {"rollback": ready & worse, "promote": ready & ~worse & fine}
        for name, mask in decided.items():
            outcome[mask], at[mask] = name, check["answers"]
    outcome[outcome == ""] = "rollback" if previous else "inconclusive"
    shares = {name: float(np.mean(outcome == name)) for name in ("promote", "rollback", "inconclusive")}
    decided_at = at[outcome != "inconclusive"]
    return {**shares, "mean_answers_at_decision": float(decided_at.mean()) if len(decided_at) else None}


def rules(args: argparse.Namespace) -> dict:
    """The rules compared; the first is the service's defaults (deploy/settings.py, CanarySettings)."""
    fixed = lambda v: 1.959964 * np.sqrt(v)
    valid = lambda alpha, tau: (lambda v: mixture_halfwidth(v, alpha, tau))
    out = {DEFAULT: dict(half=valid(0.05, args.tau), min_answers=30, margin=0.0)}
    out.update({f"always-valid tau={tau}": dict(half=valid(0.05, tau), min_answers=30, margin=0.0)
                for tau in args.taus if tau != args.tau})
    out.update({f"always-valid alpha={a} min={m}": dict(half=valid(a, args.tau), min_answers=m, margin=0.0)
                for a in (0.05, 0.1) for m in (20, 30, 60) if (a, m) != (0.05, 30)})
    out["always-valid, roll back only when worse beyond the tolerance"] = dict(half=valid(0.05, args.tau),
                                                                               min_answers=30)
    out["fixed-95"] = dict(half=fixed, min_answers=30, margin=0.0)
    out["previous"] = dict(half=fixed, min_answers=30, previous=True)
    out["unclustered"] = dict(half=valid(0.05, args.tau), min_answers=30, margin=0.0, binomial=True)
    return out


TABLE_RULES = (DEFAULT, "always-valid, roll back only when worse beyond the tolerance", "fixed-95", "previous",
               "unclustered")


def table(grid: list[dict]) -> str:
    """The markdown table of docs/canary.md: promote / rollback / inconclusive per case."""
    lines = ["| canary answers | tolerance | canary | rule | promote | roll back | inconclusive |",
             "|---:|---:|---|---|---:|---:|---:|"]
    for r in grid:
        if r["rule"] in TABLE_RULES:
            lines.append(f"| {r['deadline']} | {r['tolerance']:.2f} | {r['canary']} | {r['rule']} | "
                         f"{100 * r['promote']:.1f} % | {100 * r['rollback']:.1f} % | {100 * r['inconclusive']:.1f} % |")
    return "\n".join(lines)


def simulate(args: argparse.Namespace) -> list[dict]:
    rng = np.random.default_rng(args.seed)
    grid = []
    n_users = lambda answers: int(answers / 3 * 1.2) + 15  # enough users at 3 answers each (> 8 sd)
    for deadline in (60, 600):
        live_raw = users(rng, args.reps, n_users(SHARE_RATIO * deadline), LIVE["bad"], LIVE["good"], args.icc)
        live = {"bad": cumulative(live_raw[0], live_raw[2]), "good": cumulative(live_raw[1], live_raw[2])}
        for tol in TOLERANCES:
            for name, shift in CANARIES.items():
                d_bad, d_good = shift if shift is not None else (1.5 * tol, 0.0)
                raw = users(rng, args.reps, n_users(deadline), LIVE["bad"] + d_bad, LIVE["good"] + d_good, args.icc)
                canary = {"bad": cumulative(raw[0], raw[2]), "good": cumulative(raw[1], raw[2])}
                checks = looks(canary, live, deadline, args.every)
                for rule, kw in rules(args).items():
                    r = decide(checks, tol=tol, **kw)
                    wrong = r[WRONG[name]]
                    r.update(deadline=deadline, tolerance=tol, canary=name, shift=[d_bad, d_good], rule=rule,
                             wrong=wrong, right=r[RIGHT[name]], mc_se=float(np.sqrt(wrong * (1 - wrong) / args.reps)))
                    grid.append(r)
    return grid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--icc", type=float, default=0.2, help="intra-user correlation of reactions")
    parser.add_argument("--every", type=int, default=10, help="check every N canary answers")
    parser.add_argument("--tau", type=float, default=0.1, help="mixture scale of the α / min_answers grid")
    parser.add_argument("--taus", type=float, nargs="+", default=[0.025, 0.05, 0.1, 0.2])
    parser.add_argument("--out", default="bench/results/canary_sim.json")
    args = parser.parse_args()
    started = time.time()
    grid = simulate(args)
    print(table(grid))
    report = {"config": {k: v for k, v in vars(args).items() if k != "out"}, "live": LIVE, "tolerances": TOLERANCES,
              "share_ratio": SHARE_RATIO, "machine": cpu_model(), "wall_s": round(time.time() - started, 1),
              "grid": grid}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"{args.out}: {len(grid)} rows, {report['wall_s']} s on {report['machine']}")


if __name__ == "__main__":
    main()
