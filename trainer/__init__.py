"""Training runs: SFT (attribute-conditioned), KTO and DPO with LoRA (QLoRA on CUDA), in a subprocess.

- `trainer.config`: `SFTRunConfig`, `KTORunConfig`, `DPORunConfig` (AdvisorQA Table 9 defaults)
  and the CPU scaling rule.
- `trainer.process`: `start_run(run_dir, config) -> RunHandle`, `cancel_run`, `wait_for`.
- `trainer.rundir`: the run-directory contract, `read_progress`, `run_state`.
- `trainer.launch`: the store-facing API the CLI and the service call: `LaunchRequest`, `launch_training`,
  `poll_training`, `should_train`, `resume_training`, `cancel_training`.
- `python -m trainer.run RUN_DIR`: the run itself (the only module that imports torch/TRL).

Importing this package is cheap (no torch); the heavy imports happen in the subprocess.
"""

from trainer.config import DPORunConfig, KTORunConfig, RunConfig, SFTRunConfig, config_for
from trainer.process import RunError, RunHandle, cancel_run, start_run, wait_for
from trainer.rundir import RunState, read_progress, run_state

__all__ = [
    "DPORunConfig", "KTORunConfig", "RunConfig", "SFTRunConfig", "config_for",
    "RunError", "RunHandle", "cancel_run", "start_run", "wait_for",
    "RunState", "read_progress", "run_state",
]
