"""The training step every profiled job runs: SGD with momentum, cross-entropy, a synthetic on-device batch.

One definition, so timed campaign runs and kernel profiles measure exactly the same work.

Precision (a campaign dimension, recorded per run and in the job type key ``model@batch:bf16``):

* ``fp32`` — full float32: TF32 tensor-core math is switched *off* for matmuls and convolutions;
* ``tf32`` — float32 storage, TF32 math for matmuls and convolutions (Ampere and newer; on a CPU it is fp32);
* ``bf16`` — automatic mixed precision with bfloat16 autocast (float32 master weights, so plain SGD is the
  optimizer path; bf16 needs no loss scaling); image models use channels-last memory format on CUDA, the
  layout tensor-core convolutions want. bf16 autocast exists on CPUs too, so CPU campaigns run it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

PRECISIONS = ("fp32", "tf32", "bf16")
DEFAULT_PRECISION = "fp32"
DEFAULT_SEQ_LEN = 128


def set_math_mode(precision: str) -> None:
    """Process-wide float32 math for ``precision`` (each job has its own process)."""
    import torch

    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision '{precision}' (valid: {', '.join(PRECISIONS)})")
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


def make_training_step(model_name: str, batch_size: int, *, image_size: int, num_classes: int, device: Any,
                       seed: int, precision: str = DEFAULT_PRECISION,
                       seq_len: int = DEFAULT_SEQ_LEN) -> Callable[[], None]:
    """Build model, optimizer and batch on ``device``; return a function running one training iteration."""
    import torch

    from models import MODEL_INFO, build_model, synthetic_inputs

    set_math_mode(precision)
    torch.manual_seed(seed)
    target = torch.device(device)
    if target.type == "cuda":
        torch.cuda.set_device(target)
        torch.backends.cudnn.benchmark = True  # autotuned during warm-up, before the jobs meet
    model = build_model(model_name, num_classes=num_classes, image_size=image_size).to(target)
    inputs, labels = synthetic_inputs(model_name, batch_size, image_size=image_size, num_classes=num_classes,
                                      seq_len=seq_len, device=target, seed=seed)
    if precision == "bf16" and target.type == "cuda" and MODEL_INFO[model_name].inputs == "image":
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def autocast() -> Any:
        if precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(device_type=target.type, dtype=torch.bfloat16)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            outputs = model(inputs)
            # (B, C) vs (B,) for classifiers, (B, T, V) vs (B, T) for a language model: one flattened loss
            loss = loss_fn(outputs.reshape(-1, outputs.shape[-1]).float(), labels.reshape(-1))
        loss.backward()
        optimizer.step()

    return step
