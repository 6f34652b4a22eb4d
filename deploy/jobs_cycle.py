"""The "cycle" job: "Start cycle" in the operator tab (or `POST /api/admin/jobs/cycle/run`).

The registry's job row is the cycle's row; `deploy.cycle.run_cycle` adds one child row per step
(kind `cycle.<step>`, `parent_id` = this row). The cycle shares the service's extraction lock
and extractor factory (so it never races the scheduled extraction) and promotes with the
service's hot swap (`registry.promote_in_service`: the adapter is loaded into the running
backend, and new chats name the new release at once). A cycle that stopped at a step fails the
row with that step's message, after its partial result and report are written onto it.
"""

from __future__ import annotations

from deploy.cycle import CycleConfig, CycleDeps, run_cycle
from deploy.jobs import JobContext, JobRegistry
from deploy.registry import promote_in_service


# What a cycle started through the service may change about its training run (the trainer
# checks the values; anything else stays as the settings say).
CYCLE_OVERRIDES = frozenset({"max_steps", "learning_rate", "lora_alpha", "epochs", "batch_size"})


def register_jobs(registry: JobRegistry, ctx: JobContext) -> None:
    settings = ctx.settings

    def cycle(job: JobContext) -> dict:
        services = job.extras.get("services")
        runner = job.extras.get("extraction")
        deps = CycleDeps(
            backend=job.backend,
            extraction_lock=runner.lock if runner is not None else None,
            extractor_for=runner.make_extractor if runner is not None else None,
            promote=(lambda release_id: promote_in_service(services, release_id)) if services is not None else None,
        )
        params = {k: v for k, v in job.params.items() if k in ("method", "safety_filter")}
        overrides = job.params.get("overrides") or {}
        if not isinstance(overrides, dict) or set(overrides) - CYCLE_OVERRIDES:
            raise ValueError(f"a cycle's training overrides may set {', '.join(sorted(CYCLE_OVERRIDES))}; "
                             f"got {overrides!r}")
        config = CycleConfig.from_settings(settings, overrides=overrides, **params)
        result = run_cycle(job.store, settings, config, cycle_id=job.job.id, deps=deps)
        if result.status == "failed":
            raise RuntimeError(result.message)
        return result.as_dict()

    registry.add(
        "cycle", cycle,
        description="Extract → build sets → train → evaluate and gate → promote or reject, with a report.",
        button="Start cycle",
    )
