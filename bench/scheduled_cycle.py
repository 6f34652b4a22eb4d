"""One full scheduled cycle, with the gate at its defaults: time per step.

    .venv/bin/python bench/scheduled_cycle.py [--data-dir DIR] [--users 16] [--turns 8] [--train-steps 120]
    .venv/bin/python bench/scheduled_cycle.py --model pretrained --users 16 --turns 5 --train-steps 30 \
        [--data-dir DIR_OF_AN_EARLIER_GATE] [--safety-anchors 0.25] [--canary-rounds 12]

What runs is the service as `advisor serve` runs it (the model through transformers, the scheduler
inside). `--model builtin` (the default) is the 1.4M-parameter toy with the guard off, as the tests
run it; `--model pretrained` is the served SmolLM2-135M-Instruct with everything else at the
service's defaults (guard and safety policy on, the validated judges, the gate's defaults), so a
data dir where a gate already ran against the same live release reuses that release's cached
answers and HH scores. Simulated users who want short answers (`--short-words`, 35) chat through
the REST API (`deploy.loop.simulate`), then the periodic trainer — its interval shortened to 6
seconds by `schedule.train_every_minutes`, the only change from the defaults besides the step cap
and `--safety-anchors` — finds enough new feedback and runs extract → training sets → train (KTO)
→ gate → canary or reject with nobody pressing a button. The gate runs at its defaults: the
shipped HH sample (100 pairs per subset, both sides), 243 advice requests, 171 risky prompts, the
20 × 5 × 2 steering grid (verbosity answers up to 256 tokens), 64 new tokens otherwise. Printed:
the machine, the simulation, and each step's wall time from its job row, plus the gate's decision
with every axis's interval. Not a pass/fail test.

`--probe-every S` adds one user who asks an everyday question (a new conversation each time,
streamed through the REST API, the simulation's `--max-tokens`, sampled at the service's defaults)
every S seconds: `--probe-idle` turns back to back on the idle service before the simulation,
then from the simulation's end until the cycle ends, each turn tagged with the cycle step that was
running when it was sent. Printed: time to first token and to the end per step, p50 and p95, and
each step's p95 over the idle p95. The probe is load too (a turn takes a few seconds of both cores
every S seconds), so a probed cycle's step times are not those of an unprobed one.

`--max-tokens` caps every answer the bench asks for (64 by default, where most of SmolLM2's answers
reach the cap; 128 leaves room for a change in length to show). `--train-after-simulation` keeps
the periodic trainer off while the users chat, then restarts the service on the same store with
it on: the default trigger (50 new feedback items) otherwise fires part-way through the
simulation, and the cycle trains on what came before it.

`--canary-rounds N`: when the gate promotes, the cycle starts the canary, and rounds of
`--users-per-round` new users of the simulation's taste chat with the service, each round followed
by the operator's check (`bench/canary_smollm2.py`'s rounds), until the rule promotes or rolls
back, N rounds or `--canary-minutes`. Two settings change for it: `canary.share` 0.5, so both arms
fill at one pace, and no check on a timer (the bench checks after each round, as an operator would).
`--resume` goes on with a canary a run left undecided: the same `--data-dir`, `--out` and options,
new users, the checks appended.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _machine import cpu_model  # noqa: E402
from chat_load import QUESTIONS, streamed_turn  # noqa: E402


def cycle_settings(args, data: Path, trainer_on: bool = True):
    """The service's defaults but a schedule that trains as soon as there is feedback, KTO, at most
    `args.train_steps` steps, `args.safety_anchors` anchors per user row; with `--canary-rounds`,
    the canary serves half the users and is checked after each round rather than on a timer.
    `trainer_on` False: no periodic trainer at all (the simulation's service under
    `--train-after-simulation`)."""
    from service_helpers import ADMIN_TOKEN, tiny_settings

    from deploy.settings import load_settings

    cache = args.model_cache.resolve()
    schedule = {"schedule.train_every_minutes": 0.1 if trainer_on else 0.0, "schedule.train_method": "kto",
                "schedule.train_max_steps": args.train_steps, "schedule.extract_every_minutes": 0,
                "schedule.safety_anchors": args.safety_anchors}
    if not trainer_on:
        schedule["schedule.train_cron"] = ""
    if args.canary_rounds:
        schedule.update({"canary.share": 0.5, "canary.check_every_minutes": 0})
    if args.model == "builtin":
        from chat.builtin import build_builtin_model

        return tiny_settings(data, build_builtin_model(cache), **{"backend.max_new_tokens": args.max_tokens, **schedule})
    smollm2 = str(cache / "models" / "smollm2-135m-instruct")
    # Extraction on its own schedule, as the service's default runs it (every 10 minutes there): the
    # trigger counts mined feedback, and a slower model's few answers bring fewer ratings alone.
    return load_settings(environ={}, overrides={
        "data_dir": str(data), "backend.kind": "transformers", "backend.model": smollm2, "backend.device": "cpu",
        "judges.model_dir": smollm2, "server.admin_token": ADMIN_TOKEN,
        **schedule, "schedule.extract_every_minutes": 0.5})


def probe_turn(url: str, question: str, max_tokens: int) -> dict:
    """One streamed turn in a new conversation, sampled at the service's defaults: seconds to the
    first text shown and to the end, and the guard's verdict."""
    import httpx

    with httpx.Client(base_url=url, timeout=600) as client:
        turn = streamed_turn(client, {"content": question, "stream": True, "max_new_tokens": max_tokens})
    return {"ttft": turn["ttft"], "total": turn["latency"],
            "verdict": ((turn["answer"] or {}).get("safety") or {}).get("verdict")}


class Probe:
    """One user asking an everyday question every `every` seconds until stopped; each row keeps the
    time its turn was sent, and `report` tags it with the cycle step running then."""

    def __init__(self, url: str, every: float, max_tokens: int):
        self.url, self.every, self.max_tokens = url, every, max_tokens
        self.rows: list[dict] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="probe", daemon=True)

    def ask(self, idle: bool = False) -> None:
        question, sent = QUESTIONS[len(self.rows) % 10], time.time()
        try:
            row = probe_turn(self.url, question, self.max_tokens)
        except Exception as exc:  # kept as a row: an error during a step is a finding
            row = {"ttft": None, "total": None, "verdict": None, "error": str(exc)[:200]}
        self.rows.append({"sent": sent, "idle": idle, **row})

    def _loop(self) -> None:
        while not self.stop_event.is_set():
            started = time.monotonic()
            self.ask()
            self.stop_event.wait(max(0.0, self.every - (time.monotonic() - started)))

    def stop(self) -> None:
        """No new turn; waits for one in flight (a turn that never ends is the service's to time out)."""
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(timeout=120)

    def report(self, windows: list[tuple[str, float, float]]) -> dict:
        """Per phase (`idle`, each step's kind, `between steps`): turns, errors, guard verdicts other
        than allowed, first token and whole turn at p50 / p95, and the first token's p95 over idle."""
        return phases_report(self.rows, windows)


def phase_of(row: dict, windows: list[tuple[str, float, float]]) -> str:
    if row["idle"]:
        return "idle"
    return next((kind for kind, start, end in windows if start <= row["sent"] < end), "between steps")


def phases_report(rows: list[dict], windows: list[tuple[str, float, float]]) -> dict:
    def p(values: list[float], q: float) -> float | None:
        return round(float(sorted(values)[min(len(values) - 1, round(q * (len(values) - 1)))]), 3) if values else None

    tagged = [(phase_of(r, windows), r) for r in rows]
    phases: dict[str, dict] = {}
    for phase in dict.fromkeys(t for t, _ in tagged):
        mine = [r for t, r in tagged if t == phase]
        done = [r for r in mine if r["ttft"] is not None]
        ttft, total = [r["ttft"] for r in done], [r["total"] for r in done]
        phases[phase] = {"n": len(done), "errors": len(mine) - len(done),
                         "refused_or_replaced": sum(1 for r in done if r["verdict"] not in (None, "allowed")),
                         "ttft_p50": p(ttft, 0.5), "ttft_p95": p(ttft, 0.95),
                         "total_p50": p(total, 0.5), "total_p95": p(total, 0.95)}
    idle = (phases.get("idle") or {}).get("ttft_p95")
    for row in phases.values():
        row["ttft_p95_over_idle"] = round(row["ttft_p95"] / idle, 2) if idle and row["ttft_p95"] else None
    return phases


def step_windows(store, cycle_id: str) -> list[tuple[str, float, float]]:
    return [(s.kind, s.started_at.timestamp(), s.finished_at.timestamp())
            for s in store.jobs.children(cycle_id) if s.started_at and s.finished_at]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--model-cache", type=Path, default=Path(".cache/test"))
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--train-steps", type=int, default=120)
    parser.add_argument("--max-wait-minutes", type=float, default=120,
                        help="give up when no scheduled cycle has ended this long after the simulation")
    parser.add_argument("--model", choices=("builtin", "pretrained"), default="builtin")
    parser.add_argument("--short-words", type=int, default=35,
                        help="the users want answers of at most this many words (64 new tokens give SmolLM2 about 45)")
    parser.add_argument("--safety-anchors", type=float, default=0.0,
                        help="schedule.safety_anchors: labelled answers to risky requests per KTO user row (0 = none)")
    parser.add_argument("--max-tokens", type=int, default=64,
                        help="new tokens for every answer the bench asks for: the simulation's, the probe's, the canary rounds'")
    parser.add_argument("--train-after-simulation", action="store_true",
                        help="no periodic trainer while the users chat; then the service restarts on the same store "
                             "with it on, so the cycle trains on the whole simulation")
    parser.add_argument("--probe-every", type=float, default=0, help="seconds between the probe's turns (0: no probe)")
    parser.add_argument("--probe-idle", type=int, default=12, help="probe turns on the idle service first")
    parser.add_argument("--canary-rounds", type=int, default=0,
                        help="if the cycle starts a canary: at most this many rounds of new users, each then checked")
    parser.add_argument("--canary-minutes", type=float, default=60, help="no new canary round after this long")
    parser.add_argument("--users-per-round", type=int, default=8, help="new simulated users in each canary round")
    parser.add_argument("--resume", action="store_true",
                        help="more canary rounds for the canary a run left undecided in --data-dir: its --out file "
                             "gets the new checks; the other options as that run had them")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write here (JSON) the step times, the gate's reasons, the probe's rows and the canary's checks")
    args = parser.parse_args()

    from service_helpers import start_service

    from deploy.loop.simulate import Preference, SimulationConfig, simulate

    users = Preference(kind="short", length_words=args.short_words)
    if args.resume:
        return resume(args, users)
    data = args.data_dir or Path(tempfile.mkdtemp(prefix="advisor-cycle-"))
    print(f"machine: {cpu_model()}; model {args.model}; data {data}")
    live = start_service(cycle_settings(args, data, trainer_on=not args.train_after_simulation))
    probe = Probe(live.url, args.probe_every, args.max_tokens) if args.probe_every else None
    try:
        for _ in range(args.probe_idle if probe else 0):
            probe.ask(idle=True)
        t0 = time.monotonic()
        summary = simulate(SimulationConfig(url=live.url, users=args.users, turns=args.turns, seed=3,
                                            preference=users, max_new_tokens=args.max_tokens))
        print(f"simulation: {summary.turns} answers, reactions {dict(summary.reactions)}, errors "
              f"{dict(summary.errors)} in {time.monotonic() - t0:.0f}s")
        if args.train_after_simulation:
            live.stop()
            live = start_service(cycle_settings(args, data))
            if probe:
                probe.url = live.url
            print("service restarted on the same store with the periodic trainer on")
        if probe:
            probe.thread.start()
        job = wait_for_cycle(live.store, args.max_wait_minutes)
        if probe:
            probe.stop()
        print_cycle(live.store, job)
        report = cycle_report(probe, live.store, job)
        write(report, args.out)
        if args.canary_rounds:
            report["canary"] = canary_rounds(args, live, users)
            write(report, args.out)
    finally:
        if probe:
            probe.stop()
        live.stop()


def write(report: dict, out: Path | None) -> None:
    """The report as JSON at `out`, if given (written after the cycle and again after the canary)."""
    if out:
        out.write_text(json.dumps(report, indent=1, default=str) + "\n")


def wait_for_cycle(store, max_wait_minutes: float):
    """The first scheduled cycle to end (succeeded, failed or cancelled), waited for from now."""
    t1 = time.monotonic()
    while True:
        done = [j for j in store.jobs.list(kind="cycle", limit=50)
                if j.trigger == "schedule" and j.status in ("succeeded", "failed", "cancelled")]
        if done:
            print(f"scheduled cycle {done[0].id[:8]}: {done[0].status} ({(done[0].result or {}).get('status')}) "
                  f"{time.monotonic() - t1:.0f}s after the simulation ended")
            return done[0]
        if time.monotonic() - t1 > 60 * max_wait_minutes:
            jobs = [(j.kind, j.trigger, j.status) for j in store.jobs.list(limit=10)]
            sys.exit(f"no scheduled cycle ended within {max_wait_minutes} min of the simulation; latest jobs: {jobs}")
        time.sleep(2)


def print_cycle(store, job) -> None:
    """Each step's wall time from its job row, the gate's own steps, and every axis's reason."""
    for step in store.jobs.children(job.id):
        took = (step.finished_at - step.started_at).total_seconds() if step.finished_at and step.started_at else None
        print(f"  {step.kind:16s} {step.status:10s} {took if took is None else round(took, 1)} s")
    gate = (job.result or {}).get("gate") or {}
    for step in (gate.get("details") or {}).get("steps", []):
        print(f"    gate at {step['at_s']:7.1f} s: {step['step'][:100]}")
    for axis in (gate.get("decision") or {}).get("axes", []):
        print("  " + axis["reason"])
    print(json.dumps({"message": (job.result or {}).get("message") or job.error}, default=str))


def resume(args, users) -> None:
    """More rounds for the canary an earlier run of this bench left undecided in `data`: the same
    store and running canary, new users (the round numbers, which seed them, carry on), the checks
    appended to the earlier run's `--out` file. The rule's intervals are valid at any number of
    checks, so more rounds add no false alarms (`docs/canary.md`)."""
    if not (args.out and args.out.is_file() and args.data_dir):
        sys.exit("--resume needs the earlier run's --data-dir and its --out file")
    from service_helpers import start_service

    report = json.loads(args.out.read_text())
    earlier = report.get("canary") or {}
    print(f"machine: {cpu_model()}; model {args.model}; data {args.data_dir} (resumed)")
    live = start_service(cycle_settings(args, args.data_dir))
    try:
        more = canary_rounds(args, live, users, first=len(earlier.get("checks", [])))
    finally:
        live.stop()
    report["canary"] = {**more, "checks": earlier.get("checks", []) + more.get("checks", []),
                        "seconds": round(earlier.get("seconds", 0) + more.get("seconds", 0), 1),
                        "resumed_after_checks": len(earlier.get("checks", []))}
    write(report, args.out)


def canary_rounds(args, live, users, first: int = 0) -> dict:
    """The canary the cycle started, judged by rounds of new users of the simulation's taste (5
    turns each), each round followed by the operator's check (`bench/canary_smollm2.py`'s rounds),
    until the rule decides, `--canary-rounds` or `--canary-minutes`; then the words of the answers
    each arm gave since the canary started. `first`: rounds an earlier run made. Nothing when the
    cycle started none."""
    from canary_smollm2 import run_rounds, stored_answers, words_by_arm

    from deploy.release.canary import canary_state, running_canary

    release = running_canary(live.store)
    if release is None:
        print("no canary running: nothing for the canary's users to judge")
        return {}
    t0, started = time.monotonic(), datetime.fromisoformat(canary_state(release)["started_at"])
    rounds = SimpleNamespace(users_per_round=args.users_per_round, max_rounds=args.canary_rounds,
                             max_minutes=args.canary_minutes)
    checks = run_rounds(rounds, live, users, args.max_tokens, first)  # and the simulation's slider positions
    words = words_by_arm(stored_answers(live.store, since=started))
    release = live.store.releases.get(release.id)
    outcome = checks[-1]["action"] if checks else "continue"
    print(f"canary {release.id[:8]}: {outcome} after {len(checks)} checks, {time.monotonic() - t0:.0f}s; "
          f"release {release.status}; answers since its start {words}")
    return {"release": release.id, "checks": checks, "release_status": release.status, "words_by_arm": words,
            "outcome": outcome if outcome != "continue" else "undecided when the bench's budget ran out",
            "seconds": round(time.monotonic() - t0, 1)}


def cycle_report(probe: Probe | None, store, job) -> dict:
    """What `--out` writes: the cycle, the gate's reasons, each step's seconds, and the probe's figures per
    step, which it prints."""
    windows = step_windows(store, job.id)
    steps = {kind: round(end - start, 1) for kind, start, end in windows}
    phases = probe.report(windows) if probe else {}
    for phase, row in phases.items():
        print(f"  probe {phase:12s} n={row['n']:3d} first token p50 {row['ttft_p50']} s, p95 {row['ttft_p95']} s "
              f"({row['ttft_p95_over_idle']}x idle); whole turn p50 {row['total_p50']} s, p95 {row['total_p95']} s; "
              f"errors {row['errors']}, refused or replaced {row['refused_or_replaced']}")
    decision = ((job.result or {}).get("gate") or {}).get("decision") or {}
    return {"machine": cpu_model(), "cycle": job.id, "status": (job.result or {}).get("status"),
            "gate_reasons": [axis["reason"] for axis in decision.get("axes", [])], "steps_s": steps,
            "probe_every_s": probe.every if probe else None,
            "probe": phases, "probe_rows": probe.rows if probe else []}


if __name__ == "__main__":
    main()
