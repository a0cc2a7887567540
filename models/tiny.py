"""A deliberately small CNN for CPU tests and demos: one training iteration takes milliseconds."""

from __future__ import annotations

import torch
from torch import nn

TINY_WIDTHS = (16, 32, 64)


class TinyCNN(nn.Module):
    """Three strided 3x3 conv + BN + ReLU layers, global average pool, linear head (any input size)."""

    def __init__(self, *, num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = 3
        for width in TINY_WIDTHS:
            layers += [
                nn.Conv2d(in_channels, width, kernel_size=3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            ]
            in_channels = width
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def tiny_cnn(*, num_classes: int, image_size: int) -> TinyCNN:
    """Build the tiny CNN; ``image_size`` is accepted for the common builder signature but not needed."""
    del image_size
    return TinyCNN(num_classes=num_classes)
