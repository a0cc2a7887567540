"""A job's GPU-memory limit and what it records when it runs out (the job library, :mod:`scheduler.jobkit`).

``colocate serve`` gives every member of a group a hard limit (``COLOCATE_MEMORY_LIMIT_BYTES``, per GPU: its
planned footprint plus headroom plus one CUDA context, :mod:`scheduler.service.contract`). A job on the library holds itself
to it:

* **on a GPU**, its caching allocator is capped at the limit less the context
  (``torch.cuda.set_per_process_memory_fraction``), so an allocation past it raises
  ``torch.cuda.OutOfMemoryError`` in this process alone while the partner's memory stays free (under MPS the
  client limit its supervisor set, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, holds it as well);
* **on the CPU** (``--device cpu``, the logical GPUs of tests and smoke runs) there is no device allocator, so the
  library counts what a GPU would hold for its step — parameters, gradients and optimizer state, and the tensors
  autograd saves for the backward pass (counted once, by a saved-tensors hook on the first step: the step's
  memory does not change with a fixed batch) — and fails the same way when that passes the cap. The limit stands
  for a GPU's memory there, not the host's: a zoo model's planned footprint is never below that count
  (:func:`scheduler.service.contract.model_footprint_gb`), so only a footprint declared too small fails.

``reached_bytes`` in the record is what the job allocated, its context not counted; ``limit_bytes`` counts it.

Either way it writes an out-of-memory record (``COLOCATE_OOM_FILE``, :func:`write_oom_record`: what it reached, the
limit, its local batch) and exits with :data:`OOM_EXIT`; the server reads the record bounded and checked
(:func:`scheduler.executor.job_files.check_oom`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common.files import atomic_write_text

CONTEXT_BYTES = 512 * 2**20  # the CUDA context the limit includes (scheduler.model.memory.CONTEXT_GB)
OOM_EXIT = 3  # exit status of a job that ran out of memory (any non-zero is a failure; the record says why)
_TRIED = re.compile(r"Tried to allocate ([0-9.]+) ([KMGT]i?B)")
_UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


class MemoryLimitExceeded(RuntimeError):
    """The CPU stand-in of a device allocation past the cap: the step needs ``reached`` bytes, the cap allows
    ``cap``."""

    def __init__(self, reached: int, cap: int) -> None:
        super().__init__(f"out of memory: the step needs {reached / 2**20:.1f} MiB, its limit leaves "
                         f"{cap / 2**20:.1f} MiB after the {CONTEXT_BYTES / 2**20:.0f} MiB CUDA context")
        self.reached, self.cap = reached, cap


def allocator_cap(limit: int) -> int:
    """What the job's own allocations may use of ``limit``: the limit less its context (at least 1 MiB)."""
    return max(limit - CONTEXT_BYTES, 2**20)


class MemoryCap:
    """The limit in force for one training process (see the module docstring)."""

    def __init__(self, limit: int | None, device: Any) -> None:
        self.limit, self.device = limit, device
        self.cap = allocator_cap(limit) if limit else None
        self._saved: dict[int, int] | None = None
        self.checked = False
        if self.cap is not None and device.type == "cuda":
            import torch

            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, self.cap / total), device)

    @contextmanager
    def first_step(self) -> Iterator[None]:
        """Around the first forward pass on the CPU: count the tensors autograd saves (each storage once)."""
        if self.cap is None or self.device.type == "cuda" or self.checked:
            yield
            return
        import torch

        saved: dict[int, int] = {}

        def pack(tensor: Any) -> Any:
            storage = tensor.untyped_storage()
            saved[storage.data_ptr()] = storage.nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield
        self._saved = saved

    def check(self, model: Any, optimizer: Any) -> None:
        """After the first step on the CPU: raise :class:`MemoryLimitExceeded` when the step needs more than the cap."""
        if self.cap is None or self.device.type == "cuda" or self.checked or self._saved is None:
            return
        self.checked = True
        params = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
        grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
        state = sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
                    if hasattr(t, "numel"))
        activations = sum(n for ptr, n in self._saved.items() if ptr not in params)
        reached = sum(params.values()) + grads + state + activations
        if reached > self.cap:
            raise MemoryLimitExceeded(reached, self.cap)

    def reached(self, err: BaseException) -> int | None:
        """What the process had when ``err`` (an allocation failure) struck: the CPU meter's count, or the CUDA
        allocator's reserved peak plus the allocation that failed (from its message)."""
        if isinstance(err, MemoryLimitExceeded):
            return err.reached
        if self.device.type != "cuda":
            return None
        import torch

        tried = _TRIED.search(str(err))
        extra = float(tried.group(1)) * _UNITS.get(tried.group(2), 1) if tried else 0.0
        return int(torch.cuda.max_memory_reserved(self.device) + extra)


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation failure (the CPU stand-in, torch's OOM types, CUDA/cuBLAS/cuDNN messages)."""
    from profiler.measure.worker import is_out_of_memory as device_oom

    return isinstance(err, MemoryLimitExceeded) or device_oom(err)


def write_oom_record(path: Path | None, cap: MemoryCap, err: BaseException, local_batch: int) -> Path | None:
    """Write the out-of-memory record at ``path`` (``COLOCATE_OOM_FILE``; nothing when None); returns its path."""
    if path is None:
        return None
    record = {"reached_bytes": cap.reached(err), "limit_bytes": cap.limit, "local_batch": max(int(local_batch), 1),
              "message": str(err).splitlines()[0][:300] if str(err) else type(err).__name__}
    try:
        atomic_write_text(path, json.dumps(record), durable=False)
    except OSError:
        return None
    return path


__all__ = ["CONTEXT_BYTES", "MemoryCap", "MemoryLimitExceeded", "OOM_EXIT", "allocator_cap", "is_out_of_memory",
           "write_oom_record"]
