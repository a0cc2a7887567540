"""A job's checkpoint: written atomically, loadable at any batch size and GPU count.

It holds the model without its DDP wrapper (so it loads on one replica or many), the optimizer, the LR
scheduler, the step and sample counts since the job's first start, the gradient statistics, the batch the
learning rate was tuned for, the random-number generators' states (torch's CPU and CUDA, Python's, NumPy's when
the job uses it) and whatever the job adds (``extra``). Nothing in it depends on the batch size or the number of
replicas: a run restored at another allocation carries on at the same sample with the learning rate scaled to
its batch (:mod:`.gradients`). It is read with ``torch.load(weights_only=True)``: tensors and plain values only.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

FORMAT = 1


def rng_state() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # only when the job uses it: no import of NumPy for a job that does not
        name, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = {"name": name, "keys": torch.from_numpy(keys.astype("int64")), "pos": int(pos),
                          "has_gauss": int(has_gauss), "cached": float(cached)}
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][:torch.cuda.device_count()])
    numpy = sys.modules.get("numpy")
    if "numpy" in state and numpy is not None:
        saved = state["numpy"]
        numpy.random.set_state((saved["name"], saved["keys"].numpy().astype("uint32"), saved["pos"],
                                saved["has_gauss"], saved["cached"]))


def save(path: Path, model: Any, optimizer: Any, lr_scheduler: Any, counters: dict[str, Any],
         extra: dict[str, Any] | None = None) -> None:
    """Write everything atomically (a temporary file beside ``path``, then a rename)."""
    import torch

    inner = getattr(model, "module", model)
    state = {"format": FORMAT, "model": inner.state_dict(), "optimizer": optimizer.state_dict(),
             "lr_scheduler": lr_scheduler.state_dict() if lr_scheduler is not None else None,
             "rng": rng_state(), "extra": extra or {}, **counters}
    temp = path.with_name(f".{path.name}.tmp")
    torch.save(state, temp)
    os.replace(temp, path)


def load(path: Path, model: Any, optimizer: Any, lr_scheduler: Any) -> dict[str, Any] | None:
    """Restore ``model``, ``optimizer`` and ``lr_scheduler`` from ``path`` and return the rest (counters,
    statistics, ``extra``), or None when there is no checkpoint. The RNG state is restored too."""
    import torch

    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=True)
    getattr(model, "module", model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if lr_scheduler is not None and state.get("lr_scheduler") is not None:
        lr_scheduler.load_state_dict(state["lr_scheduler"])
    if state.get("rng"):
        set_rng_state(state["rng"])
    return {k: v for k, v in state.items() if k not in ("model", "optimizer", "lr_scheduler", "rng")}
