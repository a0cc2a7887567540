"""The training step every profiled job runs: SGD with momentum, cross-entropy, a synthetic on-device batch.

One definition, so timed campaign runs and kernel profiles measure exactly the same work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def make_training_step(model_name: str, batch_size: int, *, image_size: int, num_classes: int, device: Any,
                       seed: int) -> Callable[[], None]:
    """Build model, optimizer and batch on ``device``; return a function running one training iteration."""
    import torch

    from models import build_model, synthetic_batch

    torch.manual_seed(seed)
    target = torch.device(device)
    if target.type == "cuda":
        torch.cuda.set_device(target)
        torch.backends.cudnn.benchmark = True  # autotuned during warm-up, before the jobs meet
    model = build_model(model_name, num_classes=num_classes, image_size=image_size).to(target)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs, labels = synthetic_batch(batch_size, image_size=image_size, num_classes=num_classes, device=target,
                                     seed=seed)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()

    return step
