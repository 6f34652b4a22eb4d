"""The canary on the served model: simulated users judge a SmolLM2 candidate online.

    .venv/bin/python bench/canary_smollm2.py --adapter RUN_DIR/adapter \
        --learning bench/results/learning-smollm2-short-kto-256-relative-gated.json --prefer short|long \
        [--vllm-python .venv-vllm/bin/python] [--users-per-round 8] [--max-rounds 12] [--max-minutes 120] [--out FILE.json]
    .venv/bin/python bench/canary_smollm2.py ... --resume DATA_DIR --out FILE.json   # more rounds for an undecided canary

The candidate is a LoRA adapter that `bench/learning.py` trained on SmolLM2-135M-Instruct; its
result file gives the users' taste (a length threshold per slider position, `--relative`), the
answer cap, and the gate's decision. Design choices:

- Served as the learning run's users met it: vLLM's CPU build with runtime LoRA, the advisor service
  on it (`openai` backend, `instruct` steering, guard off and no safety policy), so the canary
  judges the change training made and nothing else.
- The candidate is registered with the decision its gate stored. A rejected one is started with
  `force` (an audited operator action): this shows what the canary alone decides on the real
  model, it is not a release.
- The rule is the service's (`docs/canary.md`) at its defaults, except `canary.share` 0.5, so both
  arms fill at one pace, and no deadline of its own: rounds stop at `--max-rounds` or
  `--max-minutes`, which reads as the rule's inconclusive.
- `--resume` goes on with a canary a run left undecided: the same store and running canary, new
  users (the round numbers, which seed them, carry on), checks appended to the result file. The
  rule's intervals are valid at any number of checks, so more rounds add no false alarms.
- Rounds of new users (real people's phrasing, the slider moved at random, 5 answers each); after
  each, the operator's check, which mines the round's feedback first. Users who want shorter
  answers than the model writes at their slider position should prefer the short candidate; users
  who want longer ones should not.

Written as JSON: the machine, each check's verdict (answers, good and bad rates per arm, the
always-valid intervals), mean words per arm, the audit rows of the forced start, wall times.
A benchmark, not a test; figures in docs/learning.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))  # after the repo, so bench/store.py does not shadow the store package
sys.path.insert(0, str(REPO / "tests"))

from _machine import cpu_model, emit  # noqa: E402
from learning import VERBOSITIES, served_settings  # noqa: E402  the learning run's slider positions and service

SHARE = 0.5


def words_by_arm(answers: list[tuple[str | None, str]]) -> dict[str, dict]:
    """(arm, text) of each answer -> per arm: how many, and their mean and median words."""
    from evaluator.text import words

    out: dict[str, dict] = {}
    for arm in sorted({a for a, _ in answers if a}):
        counts = [words(text) for a, text in answers if a == arm]
        out[arm] = {"answers": len(counts), "mean_words": round(statistics.mean(counts), 1),
                    "median_words": statistics.median(counts)}
    return out


def stored_answers(store, since=None) -> list[tuple[str | None, str]]:
    """(arm, text) of every assistant answer in the store, or of those written from `since` (a
    timezone-aware datetime) on."""
    out = []
    for conv in store.conversations.all(limit=100_000):
        for m in store.conversations.get_messages(conv.id):
            if m.role == "assistant" and m.content and (since is None or m.created_at >= since):
                out.append((m.generation.arm if m.generation else None, m.content))
    return out


def check_summary(verdict: dict) -> dict:
    """The parts of an operator's check worth keeping per round."""
    arms = {arm: {"answers": s["answers"], "users": s["users"], "good": s["rates"].get("good"),
                  "bad": s["rates"].get("bad")} for arm, s in (verdict.get("arms") or {}).items()}
    ivs = {rate: {k: round(v[k], 3) for k in ("diff", "low", "high")} for rate, v in (verdict.get("intervals") or {}).items()}
    return {"action": verdict["action"], "reason": verdict["reason"], "arms": arms, "intervals": ivs}


def service_settings(data: Path, model_dir: Path, url: str, served: str, max_tokens: int):
    """As the learning run served the model, with the canary's share and no timer or deadline;
    `vllm.model` names the base the candidate's adapter was trained on."""
    return served_settings(data, model_dir, url, served, max_tokens, **{
        "vllm.model": str(model_dir), "canary.share": SHARE, "canary.check_every_minutes": 0,
        "canary.max_conversations": 100_000, "canary.max_hours": 240.0})


def run_rounds(args, service, preference, max_tokens: int, first: int = 0,
               verbosities: tuple[int, ...] = VERBOSITIES) -> list[dict]:
    """Rounds of `args.users_per_round` new users of `preference`, each round followed by the
    operator's check, until the rule decides, `args.max_rounds` or `args.max_minutes`; `first` is
    how many rounds an earlier run of this canary made."""
    from service_helpers import ADMIN_TOKEN

    from deploy.loop.simulate import SimulationConfig, simulate

    checks: list[dict] = []
    deadline = time.monotonic() + 60 * args.max_minutes
    with service.admin() as admin:
        for round_no in range(first, first + args.max_rounds):
            if time.monotonic() >= deadline:
                break
            t0 = time.monotonic()
            summary = simulate(SimulationConfig(
                url=service.url, users=args.users_per_round, turns=5, seed=1000 + round_no, admin_token=ADMIN_TOKEN,
                preference=preference, verbosities=verbosities,
                concurrency=args.users_per_round, max_new_tokens=max_tokens, timeout_s=900)).as_dict()
            verdict = admin.post("/api/admin/canary/check", timeout=900).json()
            row = {"round": round_no + 1, "seconds": round(time.monotonic() - t0, 1), "turns": summary["turns"],
                   "fitting": summary["fitting"], "judged": summary["judged"], "errors": summary["errors"],
                   "error_samples": summary["error_samples"],
                   **check_summary(verdict)}
            checks.append(row)
            print(json.dumps({k: row[k] for k in ("round", "seconds", "turns", "action", "reason")}), flush=True)
            if verdict["action"] != "continue":
                break
            if not row["arms"].get("canary", {}).get("answers"):
                raise SystemExit(f"the canary served none of {summary['turns']} answers: is its adapter loaded "
                                 "and its base model the served one (on vLLM: `vllm.model`)?")
    return checks


def earlier_run(args) -> dict:
    """The result file of the run `--resume` goes on with; it must have left its canary undecided."""
    if args.out is None or not args.out.exists():
        raise SystemExit("--resume needs --out: the earlier run's result file, to append its checks to")
    report = json.loads(args.out.read_text())
    if not report.get("checks") or report["checks"][-1]["action"] != "continue":
        raise SystemExit(f"{args.out} holds no undecided canary to go on with (its last check: "
                         f"{(report.get('checks') or [{}])[-1].get('action', 'none')})")
    return report


def start_canary(store, service, learning: dict, args) -> str:
    """Register the candidate with its gate's decision and start its canary (forced when rejected)."""
    from deploy.release.registry import register_candidate

    decision = {"promote": learning["gate"]["promote"], "reasons": learning["gate"]["reasons"]}
    candidate = register_candidate(store, run_id=None, adapter_path=args.adapter.resolve(),
                                   base_model=str(args.model_dir.resolve()), data_dir=service.services.settings.data_path,
                                   decision=decision)
    with service.admin() as admin:
        admin.post(f"/api/admin/canary/start/{candidate.id}", params={"force": not decision["promote"]},
                   timeout=300).raise_for_status()
    return candidate.id


def the_running_canary(store) -> str:
    from deploy.release.canary import running_canary

    release = running_canary(store)
    if release is None:
        raise SystemExit("--resume: the store holds no running canary")
    return release.id


def run(args) -> dict:
    from serve import vllm_endpoint
    from service_helpers import start_service

    from deploy.loop.simulate import Preference

    learning = json.loads(args.learning.read_text())
    taste = tuple(learning["length_by_verbosity"])
    max_tokens = int(learning["max_new_tokens"])
    earlier = earlier_run(args) if args.resume else {}
    earlier_checks, earlier_seconds = earlier.get("checks", []), earlier.get("seconds", 0.0)
    data = args.resume or Path(tempfile.mkdtemp(prefix="advisor-canary-"))
    report: dict = earlier or {"machine": cpu_model(), "learning": str(args.learning), "prefer": args.prefer,
                               "taste_words_by_verbosity": list(taste), "max_new_tokens": max_tokens, "share": SHARE,
                               "users_per_round": args.users_per_round, "gate_promote": learning["gate"]["promote"]}
    start = time.monotonic()
    vllm = SimpleNamespace(vllm_url="", served_model_name="advisor", vllm_python=args.vllm_python)
    with vllm_endpoint(vllm, args.model_dir.resolve()) as (url, served):
        service = start_service(service_settings(data, args.model_dir.resolve(), url, served, max_tokens))
        try:
            store = service.store
            candidate = the_running_canary(store) if args.resume else start_canary(store, service, learning, args)
            users = Preference(args.prefer, length_by_verbosity=taste)
            report["checks"] = earlier_checks + run_rounds(args, service, users, max_tokens, first=len(earlier_checks))
            last = report["checks"][-1]["action"] if report["checks"] else "continue"
            report["outcome"] = last if last != "continue" else "undecided when the bench's budget ran out"
            report["words_by_arm"] = words_by_arm(stored_answers(store))
            release = store.releases.get(candidate)
            report["release_status"] = release.status
            report["canary_state"] = (release.decision or {}).get("canary", {}).get("state")
            report["audit"] = [e.as_dict() for e in store.audit.list(limit=20, action="canary")]
        finally:
            service.stop()
    seconds = round(time.monotonic() - start, 1)
    if args.resume:
        report.setdefault("resumed", []).append({"after_round": len(earlier_checks), "machine": cpu_model(),
                                                 "seconds": seconds})
    report["seconds"] = round(earlier_seconds + seconds, 1)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", type=Path, required=True, help="the candidate's LoRA adapter (a learning run's)")
    ap.add_argument("--learning", type=Path, required=True, help="that run's bench/learning.py result (JSON)")
    ap.add_argument("--prefer", choices=["short", "long"], required=True, help="what the simulated users want")
    ap.add_argument("--model-dir", type=Path, default=REPO / ".cache/test/models/smollm2-135m-instruct")
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm/bin/python"))
    ap.add_argument("--users-per-round", type=int, default=8)
    ap.add_argument("--max-rounds", type=int, default=12)
    ap.add_argument("--max-minutes", type=float, default=120.0, help="no new round after this long")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--resume", type=Path, default=None,
                    help="an earlier run's data directory whose canary is undecided: more rounds, appended to --out")
    args = ap.parse_args()
    emit(run(args), args.out)


if __name__ == "__main__":
    main()
