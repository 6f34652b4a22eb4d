"""The cycle: extract → build sets → train → gate → canary (or promote) or reject → report.

`advisor cycle` (deploy/cli/cycle.py), the service's "Start cycle" job and the periodic trainer
(`deploy.loop.cycle_jobs`) all call `run_cycle`.

Design choices:
- Every cycle has a job row of kind `cycle` (the registry's row in the service, one made by the
  CLI otherwise); its id is the cycle id. Each step is a job row of its own, kind
  `cycle.<step>`, with `parent_id` = the cycle's row: the jobs table shows each step with its
  own status, timing and error, and the cycle's steps are one query away. The train step's row
  is also the training run's row (`launch_training(job_id=…)`).
- A failing step stops the cycle with a message that names the step and says what to do; the
  rows after it are never created. Nothing before the release step changes which release is live
  (the gate step only adds a candidate), so a cycle on empty or malformed data, or one that
  fails anywhere, leaves the live release serving as it was.
- The build-sets step builds the training set into the report directory before anything
  trains, so "no usable examples" (and how many the safety filter removed) is reported without
  starting a subprocess; the train step snapshots the same build into its run directory.
- The safety filter is the harmlessness moderator (`deploy.loop.safety.make_safety_filter`);
  `safety_filter=False` swaps in the named accept-everything filter, which is how the poisoned-
  feedback demonstration shows the gate catching what the filter would have removed.
- Evaluate and gate are one step (`deploy.release.evaluate.gate_candidate`): candidate and live are
  scored in the same run. The release step follows a passing decision and `gate.auto_promote`:
  with `canary.enabled` it starts the candidate's canary (`deploy.release.canary`), which the
  service's canary check later promotes, rolls back or ends inconclusive on live feedback;
  otherwise it promotes.
- Cancellable between and inside steps (`CycleDeps.cancelled`): the training subprocess is
  cancelled, the gate stops at its next progress report, and a release the gate had registered
  but not yet decided is marked rejected ("cancelled"), so a cancelled cycle leaves no half release.
- The report is written for every cycle, failed ones included, so the operator screen always shows
  where the last cycle stopped.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from deploy.loop.privacy import training_data_rules
from deploy.loop.report import report_dir, write_report
from deploy.loop.safety import make_safety_filter, safety_anchors
from deploy.loop.training import follow_training, run_outcome, start_training
from deploy.release import registry
from deploy.release.canary import start_canary
from deploy.release.registry import ReleaseError
from deploy.settings import Settings
from feedback.datasets import build_dataset
from feedback.extract import make_extractor
from feedback.extract.runner import run_extraction
from store import Store
from trainer.launch import cancel_training

STEPS = ("extract", "dataset", "train", "gate", "release")


class CycleFailed(RuntimeError):
    """A step could not finish; the message names the step and the way out."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"cycle stopped at {step}: {message}")
        self.step = step


class Cancelled(RuntimeError):
    """An operator cancelled the cycle (raised inside a step, turned into `CycleCancelled`)."""


class CycleCancelled(CycleFailed):
    def __init__(self, step: str) -> None:
        RuntimeError.__init__(self, f"cycle cancelled at {step} by the operator; the live release is unchanged")
        self.step = step


@dataclass
class CycleConfig:
    method: str = "kto"
    safety_filter: bool = True  # False only to show what the gate does without it
    extractor: str = "fast"
    eval_fraction: float = 0.1
    auto_promote: bool = True
    overrides: dict[str, Any] = field(default_factory=dict)  # training config (max_steps, batch_size…)
    train_timeout_s: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings, **changes: Any) -> "CycleConfig":
        base = cls(method=settings.schedule.train_method, safety_filter=settings.schedule.safety_filter,
                   extractor=settings.schedule.extractor, auto_promote=settings.gate.auto_promote)
        return cls(**{**asdict(base), **{k: v for k, v in changes.items() if v is not None}})


@dataclass
class CycleDeps:
    """What the caller's process provides: the serving backend (None in the CLI: promotion then
    only changes the store, and the service applies it when it starts or refreshes), the
    service's extraction lock and extractor factory, and its promotion (the service's hot swap,
    `registry.promote_in_service`; default: `registry.promote` on `backend`)."""

    backend: Any = None
    extraction_lock: threading.Lock | None = None
    extractor_for: Callable[[str], Any] | None = None
    promote: Callable[[str], Any] | None = None
    start_canary: Callable[[str], Any] | None = None  # the service's `canary.start_in_service`
    cancelled: Callable[[], bool] | None = None  # True once an operator cancelled this cycle


@dataclass
class CycleResult:
    cycle_id: str
    status: str = "running"  # canary | promoted | rejected | passed (not promoted) | failed | cancelled
    message: str = ""
    method: str = "kto"
    steps: list[dict[str, Any]] = field(default_factory=list)
    dataset: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    release_id: str | None = None
    gate: dict[str, Any] = field(default_factory=dict)
    live_before: str | None = None
    live_after: str | None = None
    report_dir: str | None = None
    started_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    finished_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Cycle:
    """One cycle's state while it runs; steps are methods so each sees what the earlier made."""

    def __init__(self, store: Store, settings: Settings, config: CycleConfig, deps: CycleDeps, cycle_id: str):
        self.store, self.settings, self.config, self.deps = store, settings, config, deps
        live = store.releases.live()
        self.result = CycleResult(cycle_id=cycle_id, method=config.method, live_before=live.id if live else None)
        self.out = report_dir(settings.data_path, cycle_id)
        self.filter = make_safety_filter(settings, enabled=config.safety_filter)

    def is_cancelled(self) -> bool:
        return bool(self.deps.cancelled and self.deps.cancelled())

    def check_cancel(self) -> None:
        if self.is_cancelled():
            raise Cancelled()

    def record(self) -> None:
        self.store.jobs.update(self.result.cycle_id, result=self.result.as_dict())

    def step(self, name: str, fn: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        if self.is_cancelled():
            raise CycleCancelled(name)
        job = self.store.jobs.create(f"cycle.{name}", trigger="cycle", params={"cycle_id": self.result.cycle_id},
                                         parent_id=self.result.cycle_id)
        entry = {"step": name, "job_id": job.id, "status": "running"}
        self.result.steps.append(entry)
        self.record()
        try:
            out = fn(job.id) or {}
        except Cancelled:
            self.store.jobs.update(job.id, status="cancelled", error="cancelled by the operator")
            entry.update(status="cancelled")
            raise CycleCancelled(name) from None
        except Exception as exc:  # recorded on the step and the cycle, then the cycle stops
            message = str(exc) or type(exc).__name__
            self.store.jobs.update(job.id, status="failed", error=message)
            entry.update(status="failed", error=message)
            raise CycleFailed(name, message) from exc
        note = out.pop("note", "")
        self.store.jobs.update(job.id, status="succeeded", result=out)
        entry.update(status="succeeded", note=note)
        self.record()
        return out

    # ---- the steps

    def extract(self, job_id: str) -> dict[str, Any]:
        factory = self.deps.extractor_for or (lambda kind: make_extractor(kind))
        lock = self.deps.extraction_lock or threading.Lock()
        res = run_extraction(self.store, factory(self.config.extractor), lock=lock, trigger="cycle", job_id=job_id)
        if res.status == "failed":
            raise RuntimeError("; ".join(res.errors) or "extraction failed; see the extract job's error")
        return {**res.as_dict(), "note": f"{res.messages} new message(s), {res.new_events} feedback event(s)"}

    def dataset(self, job_id: str) -> dict[str, Any]:
        card = build_dataset(self.store, self.config.method, self.out / "dataset", safety_filter=self.filter,
                             eval_fraction=self.config.eval_fraction, **training_data_rules(self.settings),
                             anchors=safety_anchors(self.settings, self.config.method))
        self.result.dataset = card.to_json()
        if card.n_train == 0:
            raise RuntimeError(
                f"no training examples for {self.config.method}: the feedback so far yields {card.n_rows} usable "
                f"row(s) (dropped: {card.dropped or 'none'}). Collect more feedback (chat, rate, or "
                "`advisor simulate`) and start the cycle again; the live release is unchanged.")
        return {**card.to_json(), "note": f"{card.n_train} train + {card.n_eval} eval rows; "
                f"{card.removed_by_filter} removed by {card.safety_filter}"}

    def train(self, job_id: str) -> dict[str, Any]:
        run = start_training(self.store, self.settings, method=self.config.method, backend=self.deps.backend,
                             trigger="cycle", job_id=job_id, safety_filter=self.filter,
                             eval_fraction=self.config.eval_fraction, overrides=self.config.overrides,
                             dataset_dir=self.out / "dataset")
        self.result.run_id = run.id
        if run.status == "failed":
            raise RuntimeError(run.error)
        def progress(**kw: Any) -> None:
            self.store.jobs.merge_result(job_id, kw)  # keeps the outcome the run's end writes there
            if self.is_cancelled():
                cancel_training(self.store, run.id)
                raise Cancelled()

        status = follow_training(self.store, run.id, timeout_s=self.config.train_timeout_s, progress=progress)
        out = run_outcome(status)
        loss = out.get("loss")
        return {**out, "note": f"run {run.id}: {out['progress']} steps" + (f", loss {loss:.4f}" if loss else "")}

    def gate(self, job_id: str) -> dict[str, Any]:
        from deploy.release.evaluate import gate_candidate

        def progress(*args: Any, **kw: Any) -> None:
            self.store.jobs.update(job_id, result={**({"progress": args[0]} if args else {}), **kw})
            self.check_cancel()

        try:
            outcome = gate_candidate(self.store, self.settings, self.result.run_id, progress=progress)
        except BaseException:
            self._void_undecided_release()
            raise
        passed, reasons = outcome.decision.promote, outcome.decision.reasons
        self.result.release_id = outcome.release_id
        self.result.gate = {**outcome.as_dict(), "passed": passed, "reasons": reasons,
                            "live_release_id": self.result.live_before}
        verdict = "passed" if passed else "rejected"
        return {**self.result.gate, "note": f"{verdict}: " + "; ".join(reasons)}

    def _void_undecided_release(self) -> None:
        """A gate that stopped after registering the candidate leaves it rejected, not half made."""
        for release in self.store.releases.list(limit=50):
            if release.run_id == self.result.run_id and release.status == "candidate" and "promote" not in release.decision:
                self.store.releases.set_status(release.id, "rejected", decision={
                    "promote": False, "summary": "REJECT: the gate did not finish (cycle cancelled or failed)"})

    def release(self, job_id: str) -> dict[str, Any]:
        release_id, passed = self.result.release_id, self.result.gate["passed"]
        if not passed:
            release = self.store.releases.get(release_id)
            if release.status == "candidate":  # the gate run stores its decision; make the verdict explicit
                self.store.releases.set_status(release_id, "rejected", decision=release.decision)
            self.result.status = "rejected"
            self.result.message = (f"The gate rejected {release_id}; release {self.result.live_before or 'base'} "
                                   "keeps serving. Reasons: " + "; ".join(self.result.gate["reasons"]))
            return {"promoted": False, "release_id": release_id, "note": "rejected; the live release is unchanged"}
        if not self.config.auto_promote:
            self.result.status = "passed"
            self.result.message = (f"{release_id} passed the gate; gate.auto_promote is off, so start its canary "
                                   f"(`advisor release canary start {release_id}`) or promote it by hand.")
            return {"promoted": False, "release_id": release_id, "note": "passed; auto-promote is off"}
        if self.settings.canary.enabled:
            note = self._start_canary(release_id)
            if note is None:
                self.result.status = "canary"
                share = self.settings.canary.share
                self.result.message = (f"{release_id} passed the gate and serves {100 * share:.0f}% of users as a "
                                       "canary; its users' feedback decides whether it goes live.")
                return {"promoted": False, "canary": True, "release_id": release_id, "note": "canary started"}
        else:
            note = None
        if self.deps.promote is not None:
            self.deps.promote(release_id)
        else:
            registry.promote(self.store, self.deps.backend, release_id)
        self.result.status = "promoted"
        self.result.message = (f"{release_id} passed the gate and is live (was {self.result.live_before or 'none'})"
                               + (f"; no canary: {note}" if note else "") + ".")
        return {"promoted": True, "release_id": release_id, "note": "promoted" + (f" (no canary: {note})" if note else "")}

    def _start_canary(self, release_id: str) -> str | None:
        """Start the canary; None when it runs, else why it could not (then the release is promoted)."""
        try:
            if self.deps.start_canary is not None:
                self.deps.start_canary(release_id)
            else:
                start_canary(self.store, self.deps.backend, release_id, self.settings)
        except ReleaseError as exc:
            if "cannot serve two adapters" in str(exc):
                return str(exc)
            raise
        return None


def run_cycle(store: Store, settings: Settings, config: CycleConfig, *, cycle_id: str,
              deps: CycleDeps | None = None) -> CycleResult:
    """Run every step, recording each; returns the outcome (status 'failed' with the message when a
    step failed). `cycle_id` is the id of the caller's `cycle` job row."""
    cycle = _Cycle(store, settings, config, deps or CycleDeps(), cycle_id)
    try:
        for name in STEPS:
            cycle.step(name, getattr(cycle, name))
    except CycleCancelled as exc:
        cycle.result.status, cycle.result.message = "cancelled", str(exc)
    except CycleFailed as exc:
        cycle.result.status, cycle.result.message = "failed", str(exc)
    except Exception as exc:  # a bug outside a step: still report, never leave the row running
        cycle.result.status = "failed"
        cycle.result.message = f"cycle failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"
    live = store.releases.live()
    cycle.result.live_after = live.id if live else None
    cycle.result.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    cycle.result.report_dir = str(cycle.out)
    try:
        write_report(settings.data_path, cycle.result.as_dict(), store)
    except OSError as exc:
        cycle.result.message += f" (the report could not be written to {cycle.out}: {exc})"
        cycle.result.report_dir = None
    cycle.record()
    return cycle.result


def run_recorded_cycle(store: Store, settings: Settings, config: CycleConfig, *, trigger: str = "cli",
                       deps: CycleDeps | None = None) -> CycleResult:
    """A cycle outside the job registry (the CLI): makes its `cycle` row and records the outcome."""
    job = store.jobs.create("cycle", trigger=trigger, params=asdict(config))
    result = run_cycle(store, settings, config, cycle_id=job.id, deps=deps)
    failed = result.status in ("failed", "cancelled")
    store.jobs.update(job.id, status=result.status if failed else "succeeded", result=result.as_dict(),
                          error=result.message if failed else None)
    return result


def last_cycle(store: Store) -> tuple[Any, list[Any]]:
    """The latest cycle's job row and its step rows (oldest first); (None, []) before the first."""
    cycles = store.jobs.list(kind="cycle", limit=1)
    if not cycles:
        return None, []
    return cycles[0], store.jobs.children(cycles[0].id)


def report_path(result: CycleResult) -> Path | None:
    return Path(result.report_dir) / "report.html" if result.report_dir else None
