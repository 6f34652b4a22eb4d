"""Run the release gate on a training run: register its adapter, measure it and the live release
side by side, decide, and store the numbers and the decision.

    outcome = gate_candidate(store, settings, run_id)      # never promotes; the caller does

Design choices:
- Same prompts, same run, scored the same way: each side is the same base model with its own
  adapter merged into the weights, loaded in turn (one copy in memory at a time), so the
  candidate and the live release answer greedily from the same base, prompts, template and token
  budget, and every axis is scored by the same code on both sides
  (`deploy.release.measure`, which also says why HH uses mean log-likelihood on both sides).
- Axes (`deploy.release.gate.AXES`): helpfulness (the helpfulness judge's score of each answer
  to the shipped advice requests, `evaluator/data/advice_prompts.jsonl`, read as a percentile of
  its scores of human answers); harmlessness (share of answers to the shipped risky prompts the
  harmlessness judge calls safe). The judges are those `judges.kind` names
  (`deploy.release.judges`); by default the validated ones, whose accuracy on people's
  judgements is in docs/judges.md. Every decision carries the judges' validity checks
  (`evaluator.judges.validity`): relevance and length correlation measured on this run's answers,
  and the judges' recipe figures.
  hh_accuracy (HH-RLHF, the sample shipped in the package unless `gate.hh_data` names the full
  splits or "off"); self_bleu (0-1); steerability (Spearman ρ over the steering grid).
- Every axis gets a paired bootstrap interval of candidate − live over its items, and the
  decision is non-inferiority on that interval (`deploy.release.gate`); the numbers, intervals
  and reasons are stored on the release and in `eval_results`.
- The live release's answers are cached in the data dir (`deploy.release.answer_cache`), so a
  gate against the same live release generates only the candidate's answers.
- In-process and in the caller's thread: the service calls this from a job thread, and only the
  service may hold the DuckDB file, so nothing here starts a process that opens the database.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from deploy.release.answer_cache import AnswerCache
from deploy.release.gate import Decision, decide
from deploy.release.judges import guard_over, load_judges
from deploy.release.measure import Inputs, Side, measure_side, paired_intervals, weights_dtype
from deploy.release.models import load_merged
from deploy.release.registry import ReleaseError, register_candidate
from evaluator.streams import side_by_side
from store import Release, Store

log = logging.getLogger("advisor.gate")

SUITE = "gate"
CANDIDATE, LIVE = "candidate", "live"
Progress = Callable[[str], None]


@dataclass
class GateOutcome:
    release_id: str
    decision: Decision
    candidate: dict  # axis -> value (None: not measured)
    live: dict
    live_release_id: str | None = None
    notes: dict = field(default_factory=dict)  # axis -> why it was not measured
    intervals: dict = field(default_factory=dict)  # axis -> paired bootstrap interval of candidate − live
    details: dict = field(default_factory=dict)  # per-side extras: HH subsets, flagged answers, counts

    def as_dict(self) -> dict:
        return {"release_id": self.release_id, "live_release_id": self.live_release_id,
                "decision": self.decision.as_dict(), "candidate": self.candidate, "live": self.live,
                "intervals": self.intervals, "notes": self.notes, "details": self.details}


# ---------------------------------------------------------------- finding what to compare


def candidate_release(store: Store, settings: Any, run_id: str) -> Release:
    """The release made from this training run, registered now if it is not yet."""
    from trainer.rundir import run_state

    run = store.jobs.get_training_run(run_id)  # NotFound says which id
    existing = [r for r in store.releases.list(limit=1000) if r.run_id == run_id]
    if existing:
        return existing[0]
    if run.status != "succeeded":
        raise ReleaseError(f"Training run {run_id} is {run.status}; only a run that succeeded has an adapter "
                           "to gate. See `advisor train status`.")
    adapter = run_state(Path(run.run_dir)).adapter_dir
    if adapter is None:
        raise ReleaseError(f"Training run {run_id} succeeded but {run.run_dir}/adapter holds no PEFT adapter; "
                           "was the run directory cleaned? Train again.")
    return register_candidate(store, run_id=run_id, adapter_path=Path(adapter), base_model=run.base_model,
                              data_dir=settings.data_path)


def live_side(store: Store, candidate: Release) -> tuple[Release | None, str | None]:
    """(the live release to compare with, its adapter path). With no live release, or one for
    another base model, the candidate's base model without an adapter is what would keep serving."""
    live = store.releases.live()
    if live is None or live.base_model != candidate.base_model:
        return None, None
    if live.id == candidate.id:
        raise ReleaseError(f"Release {candidate.id} is already live; the gate compares a candidate with the live release.")
    if live.adapter_path and not (Path(live.adapter_path) / "adapter_config.json").is_file():
        raise ReleaseError(f"The live release {live.id}'s adapter {live.adapter_path} is missing, so it cannot be "
                           "measured; roll back or promote a release whose adapter exists, then gate again.")
    return live, live.adapter_path


# ---------------------------------------------------------------- measuring


def _side_by_side(settings: Any):
    """The gate's batches `gate.streams` at a time, in threads `gate.niceness` lower (`evaluator.streams`)."""
    return side_by_side(settings.gate.streams, settings.gate.niceness)


def _measured(base_model: str, adapter: str | None, dtype: str, side: Side, inputs: Inputs):
    """`side` measured on the base with `adapter` merged in, in `dtype`, loaded here so that the
    model is garbage once this returns."""
    if not Path(base_model).exists():
        raise ReleaseError(f"The base model {base_model} is not on this machine; the gate needs it to answer. "
                           "Build or copy it there (`advisor model build` for the built-in one).")
    model, tokenizer = load_merged(base_model, adapter, dtype)
    with _side_by_side(inputs.settings):  # the judges' reads too
        scores = measure_side(model, tokenizer, side, inputs)
    scores.details["weights"] = dtype
    return scores


def _hh_subsets(settings: Any) -> tuple[dict | None, str | None]:
    """(the HH rows to score, or None with the reason the axis is skipped)."""
    from evaluator.hh_data import RESERVED_BELOW, load_hh, load_hh_sample

    gs = settings.gate
    if gs.hh_data.strip().lower() == "off":
        return None, "gate.hh_data is off; set it to \"\" (the shipped sample) or an hh-rlhf directory"
    try:
        if not gs.hh_data:
            return load_hh_sample(limit=gs.hh_limit or None), None
        return load_hh(Path(gs.hh_data).expanduser(), limit=gs.hh_limit or None, seed=0,
                       first_row=RESERVED_BELOW), None
    except (FileNotFoundError, ValueError) as exc:
        return None, f"HH data unusable: {exc}"


# ---------------------------------------------------------------- the entry point


def _inputs(settings: Any, say: Progress) -> tuple[Inputs, dict]:
    """What both sides are measured on, and notes on the axes that cannot be measured."""
    import numpy as np

    from evaluator.helpfulness import ReferenceScale
    from evaluator.moderation import load_risky_prompts
    from evaluator.shipped import load_advice_prompts
    from evaluator.steerability import PROMPTS

    hh_subsets, hh_note = _hh_subsets(settings)
    notes = {"hh_accuracy": hh_note} if hh_note else {}
    gs = settings.gate
    if not gs.steer_prompts:
        notes["steerability"] = "gate.steer_prompts is 0"
    say(f"loading the {settings.judges.kind} judges")
    helpful, harmless = load_judges(settings)
    inputs = Inputs(settings=settings, prompts=load_advice_prompts()[: gs.helpfulness_prompts or None],
                    risky=load_risky_prompts()[: gs.harmlessness_prompts or None], helpful_judge=helpful,
                    scale=ReferenceScale(np.sort(np.asarray(helpful.reference, dtype=float))),
                    harmless_judge=harmless, hh_subsets=hh_subsets,
                    steer_prompts=list(PROMPTS[: gs.steer_prompts]), say=say,
                    guard=guard_over(settings, harmless), policy=settings.guard.system_prompt.strip())
    return inputs, notes


def served_about(inputs: Inputs, served: dict | None = None) -> dict[str, str]:
    """What each harmlessness axis measured, for its reason; `served`: the candidate's served
    details (`deploy.release.measure`), whose guard counts the reason gives."""
    guard, policy = inputs.guard is not None, bool(inputs.policy)
    if not guard and not policy:
        return {"harmlessness": "the model alone",
                "served_harmlessness": "guard off and no safety policy: the same answers as harmlessness"}
    what = ("behind the serving guard" if guard else "guard off") + (", with the safety policy" if policy else
                                                                      ", no safety policy")
    if guard and served:
        what += (f"; the guard refused {served['refused']} and replaced {served['replaced']} "
                 f"of the candidate's {len(inputs.risky)}")
    return {"harmlessness": "the model alone", "served_harmlessness": what}


def gate_candidate(store: Store, settings: Any, run_id: str, *, progress: Progress | None = None) -> GateOutcome:
    """Register `run_id`'s adapter as a candidate (if not yet), measure it and the live release on
    the same prompts, decide under `settings.gate`, and store the metrics (eval_results, suite
    "gate") and the decision with its reasons and intervals on the candidate's release row (status
    `rejected` when it fails; it stays `candidate` when it passes). Never promotes."""
    say, steps = _timed(progress or (lambda message: log.info("gate: %s", message)))
    candidate = candidate_release(store, settings, run_id)
    if candidate.status not in ("candidate", "rejected"):
        raise ReleaseError(f"Release {candidate.id} from run {run_id} is {candidate.status}; only a candidate "
                           "(or a rejected release, to re-check it) is gated.")
    live, live_adapter = live_side(store, candidate)
    live_id = live.id if live is not None else None
    inputs, notes = _inputs(settings, say)
    dtype = weights_dtype(settings)
    say(f"loading {candidate.base_model} with the candidate's adapter merged in ({dtype})")
    cand = _measured(candidate.base_model, candidate.adapter_path, dtype, Side(CANDIDATE), inputs)
    gc.collect()  # the merged model holds reference cycles: one copy of the weights at a time
    cache = AnswerCache.for_release(settings.data_path, live_id, [candidate.base_model, live_adapter]) \
        if live_id else None
    say(f"loading {candidate.base_model} " + ("with the live adapter merged in" if live_adapter else "alone")
        + f" ({dtype})")
    other = _measured(candidate.base_model, live_adapter, dtype, Side(LIVE, cache), inputs)
    if cache is not None:
        other.details["cached_answers"] = {"reused": cache.hits, "generated": cache.misses}
    say("paired bootstrap intervals and the judges' validity checks")
    intervals = paired_intervals(cand, other, settings)
    with _side_by_side(settings):
        validity = judge_validity(inputs, cand, other)
    decision = decide(cand.metrics, other.metrics, settings.gate, notes=notes, intervals=intervals,
                      about=served_about(inputs, cand.details.get("served")))
    gated_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    live_subject = live_id or candidate.base_model
    store.releases.add_eval_results(candidate.id, SUITE, {k: v for k, v in cand.metrics.items() if v is not None},
                                    details={"against": live_subject, "gated_at": gated_at, **cand.details})
    store.releases.add_eval_results(live_subject, SUITE, {k: v for k, v in other.metrics.items() if v is not None},
                                    details={"against": candidate.id, "gated_at": gated_at, **other.details})
    stored = {**decision.as_dict(), "reasons": decision.reasons, "run_id": run_id, "live_release": live_id,
              "candidate": cand.metrics, "live": other.metrics, "intervals": intervals, "notes": notes,
              "judges": validity, "gated_at": gated_at}
    store.releases.set_status(candidate.id, "candidate" if decision.promote else "rejected", decision=stored)
    say(decision.summary())
    return GateOutcome(release_id=candidate.id, decision=decision, candidate=cand.metrics, live=other.metrics,
                       live_release_id=live_id, notes=notes, intervals=intervals,
                       details={"candidate": cand.details, "live": other.details, "judges": validity, "steps": steps})


def _timed(say: Progress) -> tuple[Progress, list[dict]]:
    """`say`, and the list it fills with each message and the seconds since the first call (the
    gate's steps and where its time went, kept with its outcome)."""
    steps: list[dict] = []
    start = time.monotonic()

    def timed(message: str) -> None:
        steps.append({"at_s": round(time.monotonic() - start, 1), "step": message})
        say(message)

    return timed, steps


def judge_validity(inp: Inputs, cand: Any, live: Any) -> dict:
    """Which judges decided, what they were validated on, and this run's relevance and length checks."""
    import numpy as np

    from evaluator.judges.validity import length_correlation, relevance

    helpful, harmless = inp.helpful_judge, inp.harmless_judge
    answers = cand.items["advice_answers"]

    def on_scale(prompts: list[str], texts: list[str]) -> np.ndarray:
        return inp.scale.percentile(np.asarray(helpful.score(prompts, texts), dtype=float))

    both = cand.items["helpfulness"] + live.items["helpfulness"]
    validated = {}
    for judge in (helpful, harmless):  # the trained judges carry their held-out figures; the others none
        validated.update((getattr(getattr(judge, "head", None), "meta", None) or {}).get("validated", {}))
    return {"helpfulness_judge": getattr(helpful, "version", type(helpful).__name__),
            "harmlessness_judge": getattr(harmless, "version", type(harmless).__name__),
            "relevance": relevance(on_scale, inp.prompts, answers, cand.items["helpfulness"]),
            "length_spearman": length_correlation(both, answers + live.items["advice_answers"]),
            "validated": validated}
