"""How a polled job's records change its row (``colocate serve``'s collect step): progress and measured iteration
times folded in, and the end of a run settled — completed, cancelled, stopped for a change, out of memory, crashed.

Pure bookkeeping inside one transaction of :meth:`scheduler.service.server.Server.collect`; the records were read
bounded and checked (:mod:`scheduler.executor.job_files`).
"""

from __future__ import annotations

import time
from typing import Any

from common.bounds import MAX_SECONDS
from scheduler.learning import gradient_noise
from scheduler.learning.measured import job_type
from scheduler.service import contract
from scheduler.service.state.rows import MIN_ITER_TIME_S
from scheduler.service.state.store import CANCELLED, COMPLETED, FAILED, QUEUED, JobRow, Transaction

WARMUP_STEPS = 3  # steps of a fresh process not measured (the trainer's own warm-up)


def finished_but_lingering(db: Transaction, row: JobRow, progress: dict[str, Any] | None, grace_s: float) -> bool:
    """A job that reported "finished" but has not exited within the grace (a hung process-group teardown)
    is complete: its group is then released (killed) so it does not hold its GPUs."""
    if not progress or progress.get("state") != "finished":
        return False
    if row.finished_at is None:
        db.update_job(row.name, finished_at=time.time())  # first seen finished; still running
        return False
    return time.time() - row.finished_at > grace_s


def fold_progress(db: Transaction, row: JobRow, progress: dict[str, Any] | None, rows: dict[str, JobRow]) -> bool:
    """Fold a job's progress into its row; True when this poll took its first sample of this run."""
    if not progress:
        return False
    step, elapsed = int(progress["step"]), float(progress["elapsed_s"])  # checked: job_files.check_progress
    own = step - int(progress["restored_step"])
    fields: dict[str, Any] = {"step": step, "samples": int(progress["samples"])}
    if own >= WARMUP_STEPS:
        if (row.sample_step is not None and row.sample_elapsed is not None and step - row.sample_step >= 2
                and elapsed > row.sample_elapsed):
            iter_time = (elapsed - row.sample_elapsed) / (step - row.sample_step)
            if MIN_ITER_TIME_S <= iter_time <= MAX_SECONDS:  # else not a time anything trains at: not learned
                partner_type = group_type([rows[o] for o in row.others if o in rows])
                db.add_measurement(row.spec.app, row.gpu_type or "", row.num_gpus, row.batch_size or 0,
                                   partner_type, iter_time)
                fields["samples_per_s"] = (row.batch_size or 0) / iter_time
        if row.sample_step is None or step - row.sample_step >= 2:
            fields.update(sample_step=step, sample_elapsed=elapsed)
    db.update_job(row.name, **fields)
    fold_gradients(db, row.name, progress)
    return row.sample_step is None and "sample_step" in fields


def fold_gradients(db: Transaction, job: str, progress: dict[str, Any]) -> None:
    """The gradient statistics of a progress record folded into the job's smoothed ones
    (:func:`scheduler.learning.gradient_noise.fold`: each report once, a damaged stored row starts over)."""
    if gradient_noise.report(progress) is None:
        return
    stored = db.gradients_of(job)
    before = gradient_noise.from_row(stored) if stored is not None else None
    after = gradient_noise.fold(before, progress)
    if after is not None and after is not before:
        db.put_gradients(job, after.as_row())


def ended(db: Transaction, row: JobRow, exit: dict[str, Any], progress: dict[str, Any] | None,
          memory: dict[str, dict[str, Any]], oom: dict[str, Any] | None = None, limit: int | None = None,
          gpu_memory_gb: float | None = None) -> None:
    """Settle a job whose run ended: completed, cancelled, stopped for a change (back to the queue), out of
    memory under its limit (back to the queue, estimate raised: :func:`contract.record_oom`) or crashed. An
    out-of-memory record claiming more than its GPU (``gpu_memory_gb``) holds is a crash, not an estimate to learn:
    learnt, it would keep the job queued forever as fitting no GPU.

    A job that exits non-zero on its own crashed, whatever its progress file says (it may have failed in its
    teardown, or after writing "finished"); one the server stopped (killed past its grace) that had finished its
    work completed."""
    code, asked = exit.get("returncode"), bool(exit.get("stop_requested"))
    done = (progress or {}).get("state") == "finished" or bool(row.target and row.done >= row.target)
    finished = (done and (code in (0, None) or asked)) or (code == 0 and not asked)
    cleared = {"group_key": None, "sample_step": None, "sample_elapsed": None}
    if finished:
        db.update_job(row.name, state=COMPLETED, finished_at=time.time(), **cleared)
        db.event(row.name, "completed", f"step {(progress or {}).get('step', row.step)}")
    elif row.cancel_requested:
        db.update_job(row.name, state=CANCELLED, finished_at=time.time(), **cleared)
        db.event(row.name, "cancelled", f"at step {row.step}")
    elif exit.get("stop_requested"):
        db.update_job(row.name, state=QUEUED, restarts=row.restarts + 1, **cleared)
        db.event(row.name, "stopped", f"checkpointed at step {(progress or {}).get('step', row.step)}")
    elif contract.is_oom(exit, oom) and gpu_memory_gb and ((oom or {}).get("reached_bytes") or 0) > gpu_memory_gb * GIB:
        reached = float((oom or {})["reached_bytes"]) / GIB
        crashed(db, row, f"oom.json claims {reached:.4g} GiB, more than the {gpu_memory_gb:g} GB of a {row.gpu_type} "
                         "GPU: not a memory need to learn from")
    elif contract.is_oom(exit, oom):  # under its limit it failed alone: queued with a raised estimate
        text = contract.record_oom(db, row, oom, limit, memory)
        if limit is None:
            crashed(db, row, f"oom: {text}"[:1000])
        else:
            db.update_job(row.name, state=QUEUED, error=f"oom: {text}"[:1000], **cleared)
    else:
        crashed(db, row, f"exit status {exit.get('returncode')}: {exit.get('last_line', '')}")


GIB = 1024 ** 3


def crashed(db: Transaction, row: JobRow, reason: str) -> None:
    """A crash: retried up to the job's ``max_retries``, then failed with ``reason``."""
    crashes = row.crashes + 1
    cleared = {"group_key": None, "sample_step": None, "sample_elapsed": None}
    if crashes > row.spec.max_retries:
        db.update_job(row.name, state=FAILED, crashes=crashes, finished_at=time.time(), error=reason, **cleared)
        db.event(row.name, "failed", reason)
    else:
        db.update_job(row.name, state=QUEUED, crashes=crashes, error=reason, **cleared)
        db.event(row.name, "crashed", f"retry {crashes} of {row.spec.max_retries}: {reason}")


def group_type(others: list[JobRow]) -> str:
    """What a measurement is recorded against: ``""`` alone, the partner's job type in a pair, and in a group
    of three both others' types joined by ``+`` (sorted), so each member's ratio is kept against its group."""
    return "+".join(sorted(job_type(o.spec.app, o.batch_size or 0) for o in others))


__all__ = ["WARMUP_STEPS", "crashed", "ended", "finished_but_lingering", "fold_gradients", "fold_progress", "group_type"]
