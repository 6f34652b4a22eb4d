"""The "gate" job: gate one training run inside the service (`advisor release gate RUN --url`,
or `POST /api/admin/jobs/gate/run` with `{"params": {"run_id": RUN}}`).

The service holds the database, so a gate on a running system has to run in it; this is the
cycle's gate step on its own. It never promotes (`advisor release promote ID --url` does, after
the operator has read the decision), and it has no button: it needs a run id. The outcome
(axes, reasons, the candidate release id) is the job row's result.
"""

from __future__ import annotations

from deploy.gate_run import gate_candidate
from deploy.jobs import JobContext, JobRegistry


def register_jobs(registry: JobRegistry, ctx: JobContext) -> None:
    settings = ctx.settings

    def gate(job: JobContext) -> dict:
        run_id = job.params.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise ValueError('the gate job needs the training run to gate: {"params": {"run_id": "<run id>"}}')
        return gate_candidate(job.store, settings, run_id).as_dict()

    registry.add("gate", gate, description="Measure one training run's adapter against the live release "
                                           "and store the gate's decision (never promotes).")
