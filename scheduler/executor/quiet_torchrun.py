"""``python -m scheduler.executor.quiet_torchrun ARGS``: ``torchrun`` (``torch.distributed.run``) for a job on
several GPUs, stopped in one line.

Stopping such a job sends SIGTERM to torchrun's agent; the agent stops its workers (each checkpoints on
SIGTERM, :mod:`scheduler.executor.train`) and then raises ``SignalException``, which torchrun lets escape as
a traceback into the job's ``train.log`` — for what is a normal stop by the scheduler. Here that exception
becomes one line on stderr and exit status 128 + signal; torchrun's elastic-agent warnings about the
shutdown are silenced. Every other outcome (a worker failing, …) is torchrun's own.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
    try:
        torchrun(list(argv) if argv is not None else None)
    except SignalException as stop:
        name = signal.Signals(int(stop.sigval)).name
        print(f"stopped by {name}: workers stopped", file=sys.stderr, flush=True)
        return 128 + int(stop.sigval)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
