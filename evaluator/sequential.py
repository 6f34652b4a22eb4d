"""Always-valid confidence sequences for a difference of two rates, with answers clustered by user.

A canary is checked again and again while its answers come in. A fixed-sample interval checked
at every look is wrong more often than it says (each look is another chance for noise to cross
the line). A confidence sequence is an interval at every look that covers the true difference at
*all* looks at once with probability ≥ 1 − α, so a rule may act at any look it likes.

Design choices:
- The normal-mixture sequence: the interval of the mixture sequential probability ratio test
  (Robbins 1970; Johari et al., "Always valid inference", with a N(0, τ²) mixture on the
  difference). With estimate θ̂ of canary − live and its variance V at a look,
      θ̂ ± sqrt(2 V (V + τ²) / τ² · log(sqrt((V + τ²) / V) / α)).
  Exact for Gaussian increments of known variance, and asymptotically valid with a consistent
  variance estimate (Waudby-Smith et al. 2021, "time-uniform central limit theory"). Chosen over
  an empirical-Bernstein sequence, which is exact for bounded data but wants one i.i.d. stream:
  ours are two arms of user clusters of unequal size. The mixture scale τ reads directly: the
  interval is narrowest relative to the standard error (about 3.0 of them at α = 0.05, against
  1.96 for one fixed look) when V ≈ τ²/8, i.e. τ ≈ 2.8 × the standard error expected when it
  matters.
  Nothing to install: the boundary is one line of numpy (no maintained package fits better).
- Clustered by user: an arm's rate is Σ events / Σ answers over its users, and its variance the
  cluster (ratio-estimator, delta-method) one, n/(n−1) · Σ_u (e_u − r a_u)² / (Σ a)², so a user
  who reacts the same way to all their answers counts nearer one observation than many. Fewer
  than two users: no variance, an infinite interval. Floor: the binomial variance at the rate
  shrunk towards ½ by half an event, so an arm with no events yet is not given a zero width.
- Computed from per-user sums (users, Σe, Σa, Σe², Σa², Σea), numpy-broadcast: the service passes
  one look, the simulation (bench/canary_sim.py) thousands of sequences at once, through the
  same code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ArmSums:
    """Sums over one arm's users of per-user events e and answers a (scalars or arrays)."""

    users: np.ndarray | float
    events: np.ndarray | float  # Σ e
    answers: np.ndarray | float  # Σ a
    events_sq: np.ndarray | float  # Σ e²
    answers_sq: np.ndarray | float  # Σ a²
    cross: np.ndarray | float  # Σ e·a

    @classmethod
    def of(cls, events: np.ndarray, answers: np.ndarray) -> ArmSums:
        """From one arm's per-user events and answers."""
        e, a = np.asarray(events, dtype=float), np.asarray(answers, dtype=float)
        return cls(float(len(e)), e.sum(), a.sum(), (e * e).sum(), (a * a).sum(), (e * a).sum())


def rate(s: ArmSums) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(np.asarray(s.answers) > 0, np.asarray(s.events) / np.maximum(s.answers, 1), np.nan)


def rate_variance(s: ArmSums) -> np.ndarray:
    """Variance of the arm's rate, clustered by user, floored by the binomial one (docstring)."""
    n, total = np.asarray(s.users, dtype=float), np.maximum(np.asarray(s.answers, dtype=float), 1.0)
    r = np.asarray(s.events) / total
    residual = np.maximum(np.asarray(s.events_sq) - 2 * r * s.cross + r * r * s.answers_sq, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        clustered = np.where(n >= 2, n / np.maximum(n - 1, 1) * residual / total**2, np.inf)
    shrunk = (np.asarray(s.events) + 0.5) / (total + 1.0)
    return np.maximum(clustered, shrunk * (1 - shrunk) / total)


def mixture_halfwidth(variance: np.ndarray | float, alpha: float, tau: float) -> np.ndarray:
    """Half-width of the two-sided normal-mixture confidence sequence at variance V (docstring)."""
    v = np.asarray(variance, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        width = np.sqrt(2 * v * (v + tau**2) / tau**2 * np.log(np.sqrt((v + tau**2) / v) / alpha))
    return np.where(np.isfinite(v) & (v > 0), width, np.inf)


def difference_sequence(canary: ArmSums, live: ArmSums, *, alpha: float, tau: float) -> dict:
    """canary − live rate: estimate, the always-valid interval's ends (clipped to [−1, 1]) and V."""
    diff = rate(canary) - rate(live)
    variance = rate_variance(canary) + rate_variance(live)
    half = mixture_halfwidth(variance, alpha, tau)
    return {"diff": diff, "low": np.maximum(diff - half, -1.0), "high": np.minimum(diff + half, 1.0),
            "variance": variance}
