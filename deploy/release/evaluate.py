"""Run the release gate on a training run: register its adapter, measure it and the live release
side by side, decide, and store the numbers and the decision.

    outcome = gate_candidate(store, settings, run_id)      # never promotes; the caller does

Design choices:
- Same prompts, same run: one base model is loaded once and both adapters are put on it (PEFT
  named adapters; the base model is the adapter disabled), so the candidate and the live release
  are generated greedily from the same weights, prompts, template and token budget. Only the
  adapter differs, which is what the gate is meant to compare.
- Axes (see `deploy.release.gate.AXES`):
  helpfulness — the Plackett–Luce reward model's share of human references each answer beats, on
  held-out questions of the shipped ranked-advice set (the reward model is trained on the other
  threads, with `advisor eval helpfulness train`'s split, and cached under
  `<data_dir>/models/pl-reward`, the path that command writes);
  harmlessness — share of answers to the shipped risky prompts that the moderator (cached under
  `<data_dir>/models/moderator`) judges safe;
  hh_accuracy — HH-RLHF mean accuracy on `gate.hh_limit` rows per subset of `gate.hh_data`; a
  release with an adapter is a policy and is scored by its implicit reward against the same
  weights with the adapter off (the candidate always; the live release when it has an adapter),
  the base model by plain log-likelihood. With `hh_data` empty the axis is skipped and the
  decision says why;
  self_bleu — Self-BLEU of the helpfulness answers, divided by 100 so it is on the 0-1 scale of
  the policy's tolerance.
- In-process and in the caller's thread: the service calls this from a job thread, and only the
  service may hold the DuckDB file, so nothing here starts a process that opens the database.
  The CLI calls it directly when no service runs.
- Torch runs one batch at a time (`workers=1`, float32) so a gate in the service does not take
  every core from chats being answered, and both sides are scored with the same settings.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from deploy.release.gate import AXES, Decision, decide
from deploy.release.registry import ReleaseError, register_candidate
from deploy.release.scorers import load_moderator, load_reward_model, moderator_dir
from feedback.store import Release, Store

log = logging.getLogger("advisor.gate")

SUITE = "gate"
CANDIDATE, LIVE = "candidate", "live"  # PEFT adapter names inside the gate's one model
Progress = Callable[[str], None]


@dataclass
class GateOutcome:
    release_id: str
    decision: Decision
    candidate: dict  # axis -> value (None: not measured)
    live: dict
    live_release_id: str | None = None
    notes: dict = field(default_factory=dict)  # axis -> why it was not measured
    details: dict = field(default_factory=dict)  # per-side extras: HH subsets, flagged answers, counts

    def as_dict(self) -> dict:
        return {"release_id": self.release_id, "live_release_id": self.live_release_id,
                "decision": self.decision.as_dict(), "candidate": self.candidate, "live": self.live,
                "notes": self.notes, "details": self.details}


# ---------------------------------------------------------------- the held-out helpfulness questions


def held_out_threads(limit: int) -> tuple[list, list]:
    """(train threads, the first `limit` held-out threads) of the shipped ranked-advice set, with the
    split `advisor eval helpfulness train` uses by default, so its saved reward model fits."""
    from evaluator.helpfulness import load_threads, split_threads

    train, test = split_threads(load_threads(), 0.2, 0)
    return train, test[:limit]


# ---------------------------------------------------------------- finding what to compare


def candidate_release(store: Store, settings: Any, run_id: str) -> Release:
    """The release made from this training run, registered now if it is not yet."""
    from trainer.rundir import run_state

    run = store.get_training_run(run_id)  # NotFound says which id
    existing = [r for r in store.list_releases(limit=1000) if r.run_id == run_id]
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
    live = store.live_release()
    if live is None or live.base_model != candidate.base_model:
        return None, None
    if live.id == candidate.id:
        raise ReleaseError(f"Release {candidate.id} is already live; the gate compares a candidate with the live release.")
    if live.adapter_path and not (Path(live.adapter_path) / "adapter_config.json").is_file():
        raise ReleaseError(f"The live release {live.id}'s adapter {live.adapter_path} is missing, so it cannot be "
                           "measured; roll back or promote a release whose adapter exists, then gate again.")
    return live, live.adapter_path


# ---------------------------------------------------------------- measuring one side


@dataclass
class _Side:
    name: str  # CANDIDATE or LIVE
    adapter: str | None  # PEFT adapter name in the shared model, None = base model


def _load(base_model: str, candidate_adapter: str, live_adapter: str | None):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not Path(base_model).exists():
        raise ReleaseError(f"The base model {base_model} is not on this machine; the gate needs it to answer. "
                           "Build or copy it there (`advisor model build` for the built-in one).")
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForCausalLM.from_pretrained(base_model)
    model = PeftModel.from_pretrained(model, candidate_adapter, adapter_name=CANDIDATE, is_trainable=False)
    if live_adapter:
        model.load_adapter(live_adapter, adapter_name=LIVE, is_trainable=False)
    return model.eval(), tokenizer


def _use(model: Any, side: _Side):
    """Context in which `model` answers as `side` (its adapter, or the adapter disabled)."""
    import contextlib

    if side.adapter is None:
        return model.disable_adapter()
    model.set_adapter(side.adapter)
    return contextlib.nullcontext()


def _measure(model: Any, tokenizer: Any, side: _Side, settings: Any, *, threads: list, risky: list[str],
             reward_model: Any, moderator: Any, hh_subsets: dict | None, say: Progress) -> tuple[dict, dict]:
    from evaluator.diversity import self_bleu
    from evaluator.generation import hf_answer_fn
    from evaluator.helpfulness import helpfulness
    from evaluator.moderation import harmlessness

    gs = settings.gate
    kwargs = {"template_kwargs": {"attributes": _default_attributes()}} if settings.steering_mode == "steerlm" else {}
    answer = hf_answer_fn(model, tokenizer, max_new_tokens=gs.max_new_tokens, **kwargs)
    metrics: dict[str, float | None] = dict.fromkeys(AXES)
    details: dict[str, Any] = {}
    with _use(model, side):
        say(f"{side.name}: answering {len(threads)} advice questions")
        advice = answer([t.question for t in threads])
        say(f"{side.name}: answering {len(risky)} risky prompts")
        risky_answers = answer(risky)
    help_result = helpfulness(reward_model, threads, advice)
    metrics["helpfulness"] = help_result.score
    metrics["self_bleu"] = self_bleu(advice) / 100.0
    harm = harmlessness(risky, risky_answers, moderator)
    metrics["harmlessness"] = harm.score
    details.update(questions=len(threads), risky_prompts=len(risky), unsafe=harm.unsafe,
                   flagged=[{**f, "answer": f["answer"][:300]} for f in harm.flagged[:10]],
                   sample_answer=advice[0][:300] if advice else "")
    if hh_subsets is not None:
        metrics["hh_accuracy"], details["hh"] = _hh(model, tokenizer, side, hh_subsets, say)
    return metrics, details


def _default_attributes() -> str:
    from feedback.attributes import Attributes

    return Attributes().steerlm()  # what a chat answer gets when nobody moves a slider


def _hh(model: Any, tokenizer: Any, side: _Side, subsets: dict, say: Progress) -> tuple[float | None, dict]:
    from evaluator.hh import evaluate_hh
    from evaluator.logprobs import BatchConfig
    from evaluator.scoring import ImplicitRewardScorer, LogLikelihoodScorer

    batch = BatchConfig(workers=1)
    n = sum(len(s.pairs) for s in subsets.values())
    if side.adapter is None:
        say(f"{side.name}: HH accuracy on {n} pairs (log-likelihood, base model)")
        with model.disable_adapter():
            report = evaluate_hh(subsets, LogLikelihoodScorer(model, tokenizer, batch))
        scorer = "loglik"
    else:
        say(f"{side.name}: HH accuracy on {n} pairs (implicit reward against the adapter disabled)")
        model.set_adapter(side.adapter)
        report = evaluate_hh(subsets, ImplicitRewardScorer(model, tokenizer, batch=batch))
        scorer = "implicit"
    return report.mean, {"scorer": scorer, "pairs": n, "helpful": report.helpful, "harmless": report.harmless,
                         **{name: r.accuracy for name, r in report.subsets.items()}}


def _hh_subsets(settings: Any) -> tuple[dict | None, str | None]:
    """(the HH rows to score, or None with the reason the axis is skipped)."""
    from evaluator.hh_data import load_hh

    gs = settings.gate
    if not gs.hh_data:
        return None, "gate.hh_data is empty; set it to the hh-rlhf directory to measure HH accuracy"
    try:
        return load_hh(Path(gs.hh_data).expanduser(), limit=gs.hh_limit or None, seed=0), None
    except (FileNotFoundError, ValueError) as exc:
        return None, f"HH data unusable: {exc}"


# ---------------------------------------------------------------- the entry point


def gate_candidate(store: Store, settings: Any, run_id: str, *, progress: Progress | None = None) -> GateOutcome:
    """Register `run_id`'s adapter as a candidate (if not yet), measure it and the live release on
    the same prompts, decide under `settings.gate`, and store the metrics (eval_results, suite
    "gate") and the decision with its reasons on the candidate's release row (status `rejected`
    when it fails; it stays `candidate` when it passes). Never promotes."""
    say = progress or (lambda message: log.info("gate: %s", message))
    candidate = candidate_release(store, settings, run_id)
    if candidate.status not in ("candidate", "rejected"):
        raise ReleaseError(f"Release {candidate.id} from run {run_id} is {candidate.status}; only a candidate "
                           "(or a rejected release, to re-check it) is gated.")
    live, live_adapter = live_side(store, candidate)
    live_id = live.id if live is not None else None

    hh_subsets, hh_note = _hh_subsets(settings)
    notes = {"hh_accuracy": hh_note} if hh_note else {}
    train_threads, threads = held_out_threads(settings.gate.helpfulness_prompts)
    from evaluator.moderation import load_risky_prompts

    risky = load_risky_prompts()[: settings.gate.harmlessness_prompts]
    say("loading the reward model and the moderator")
    reward_model = load_reward_model(settings.data_path, train_threads)
    moderator = load_moderator(moderator_dir(settings.data_path))
    say(f"loading {candidate.base_model} with both adapters")
    model, tokenizer = _load(candidate.base_model, candidate.adapter_path, live_adapter)

    common = dict(settings=settings, threads=threads, risky=risky, reward_model=reward_model,
                  moderator=moderator, hh_subsets=hh_subsets, say=say)
    cand_metrics, cand_details = _measure(model, tokenizer, _Side(CANDIDATE, CANDIDATE), **common)
    live_metrics, live_details = _measure(model, tokenizer, _Side(LIVE, LIVE if live_adapter else None), **common)

    decision = decide(cand_metrics, live_metrics, settings.gate, notes=notes)
    gated_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    live_subject = live_id or candidate.base_model
    store.add_eval_results(candidate.id, SUITE, {k: v for k, v in cand_metrics.items() if v is not None},
                           details={"against": live_subject, "gated_at": gated_at, **cand_details})
    store.add_eval_results(live_subject, SUITE, {k: v for k, v in live_metrics.items() if v is not None},
                           details={"against": candidate.id, "gated_at": gated_at, **live_details})
    stored = {**decision.as_dict(), "reasons": decision.reasons, "run_id": run_id, "live_release": live_id,
              "candidate": cand_metrics, "live": live_metrics, "notes": notes, "gated_at": gated_at}
    store.set_release_status(candidate.id, "candidate" if decision.promote else "rejected", decision=stored)
    say(decision.summary())
    return GateOutcome(release_id=candidate.id, decision=decision, candidate=cand_metrics, live=live_metrics,
                       live_release_id=live_id, notes=notes,
                       details={"candidate": cand_details, "live": live_details})
