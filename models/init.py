"""Weight initialisation shared by the model families."""

from __future__ import annotations

from torch import nn


def initialise(model: nn.Module) -> None:
    """He init for ReLU convs; BN starts as identity; small normal init for linear layers.

    Only timings matter to the profiler, but a sane init keeps activations finite so mixed-precision
    experiments do not hit inf/nan by accident.
    """
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.01)
            nn.init.zeros_(module.bias)
