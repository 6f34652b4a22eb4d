"""`advisor` (deploy.wiring's command line) with one more job kind, for the topology test and bench:
"hold" keeps a running job row for `params.seconds` (default 600), so a replica can be killed
while it holds one, and what crash recovery makes of the row can be checked.

    python tests/topology_service.py serve --port 7861     # what deploy/ops/local_topology.py runs

The service is otherwise the production one: the extra kind is added to `wiring.register_jobs`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deploy import wiring  # noqa: E402

_production_jobs = wiring.register_jobs


def hold(job) -> dict:
    seconds = float(job.params.get("seconds", 600))
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        time.sleep(0.5)
    return {"held_s": round(time.monotonic() - t0, 1)}


def register_jobs(registry) -> list[str]:
    modules = _production_jobs(registry)
    registry.add("hold", hold, description="Test only: hold a running job row for params.seconds.")
    return [*modules, __name__]


wiring.register_jobs = register_jobs

if __name__ == "__main__":
    wiring.main()
