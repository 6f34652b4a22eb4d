"""Which way of lowering its priority makes a training run yield the CPU to the service?

    .venv/bin/python bench/train_priority.py [--seconds 6]

Two busy loops pinned to one CPU, each in a session of its own, as the service and a training
run are (`trainer.start_run` starts the run with `start_new_session`). Loop A stands for the
service; loop B, the run, lowers its priority one way: not at all, niceness 19
(`setpriority`), its autogroup's niceness 19 (`/proc/self/autogroup`), or both, as
`trainer.run.lower_priority` does. Printed: the CPU seconds each loop got, and B's share.
With the kernel's per-session autogroups on, niceness alone leaves B its half.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

BUSY = r"""
import os, sys, time
mode, seconds = sys.argv[1], float(sys.argv[2])
os.sched_setaffinity(0, {0})
if mode in ("nice", "both"):
    os.setpriority(os.PRIO_PROCESS, 0, 19)
if mode in ("autogroup", "both"):
    open("/proc/self/autogroup", "w").write("19\n")
t = time.monotonic()
while time.monotonic() - t < seconds:
    pass
print(sum(os.times()[:2]))
"""


def share(mode: str, seconds: float) -> tuple[float, float]:
    loops = [subprocess.Popen([sys.executable, "-c", BUSY, m, str(seconds)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True) for m in ("none", mode)]
    a, b = (float(p.communicate()[0]) for p in loops)
    return a, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    try:
        print(f"autogroup on: {open('/proc/sys/kernel/sched_autogroup_enabled').read().strip() == '1'}")
    except OSError:
        print("autogroup: not in this kernel")
    for mode in ("none", "nice", "autogroup", "both"):
        a, b = share(mode, args.seconds)
        print(f"run lowered by {mode:9}: service {a:.2f} CPU s, run {b:.2f} CPU s, run's share {b / (a + b):.0%}",
              flush=True)


if __name__ == "__main__":
    main()
