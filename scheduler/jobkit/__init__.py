"""The job library: a training script keeps ``colocate serve``'s job contract in a few lines.

Public as :mod:`colocate.job` (``from colocate import job``). It lives here, in the scheduler's room, because the
built-in trainer (:mod:`scheduler.executor.train`) is written on it and the import arrows point down
(colocate → scheduler → profiler → models → common); importing it loads torch and nothing of the scheduler's
planning (no pandas, SciPy, HiGHS or PuLP).

* :mod:`.environment` — the variables ``serve`` and ``launch`` set (and torchrun's), checked: :class:`JobEnv`;
* :mod:`.run` — :func:`attach` → :class:`Run`: checkpoint restored, micro-batches, DDP, learning rate scaled,
  progress, SIGTERM, memory limit, out-of-memory record; :class:`JobConfig`;
* :mod:`.gradients` — the gradient noise scale (|G|², tr Σ) and the learning-rate scalings (AdaScale's gain);
* :mod:`.checkpoint` — a checkpoint that loads at any batch size and GPU count; :mod:`.progress` — the
  progress record; :mod:`.memory` — the memory limit and the out-of-memory record;
* :mod:`.lightning` and :mod:`.huggingface` — callbacks for PyTorch Lightning and the Hugging Face Trainer.
"""

from common.lr_scaling import LR_SCALINGS  # the names, declared with the job file's validator
from scheduler.jobkit.environment import JobEnv, read_env
from scheduler.jobkit.gradients import GradientNoise, lr_factor
from scheduler.jobkit.memory import OOM_EXIT
from scheduler.jobkit.run import JobConfig, Run, attach

__all__ = ["LR_SCALINGS", "OOM_EXIT", "GradientNoise", "JobConfig", "JobEnv", "Run", "attach", "lr_factor",
           "read_env"]
