"""VGG-11 and VGG-19 (Simonyan & Zisserman 2015, configurations A and E), written for this project.

ImageNet style: the plain convolutional stack (no batch norm, as in the paper and the published parameter
counts), adaptive average pooling to 7x7 and the 4096-4096 classifier with dropout. CIFAR style: the same
stack with batch norm after each conv (deep VGGs do not train from scratch without it), global pooling to
1x1 and a single linear layer from 512 features — the classifier commonly used for CIFAR.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from models.init import initialise
from models.registry import is_cifar_style

MAX_POOL = "M"


@dataclass(frozen=True)
class VGGConfig:
    """Conv layer widths in order, with ``"M"`` marking a 2x2 stride-2 max-pool."""

    layers: tuple[int | str, ...]


VGG11 = VGGConfig(layers=(64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"))
VGG19 = VGGConfig(
    layers=(
        64, 64, "M",
        128, 128, "M",
        256, 256, 256, 256, "M",
        512, 512, 512, 512, "M",
        512, 512, 512, 512, "M",
    )
)  # fmt: skip

IMAGENET_POOLED_SIZE = 7
IMAGENET_HIDDEN_WIDTH = 4096


def _feature_stack(config: VGGConfig, *, batch_norm: bool) -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = []
    in_channels = 3
    for item in config.layers:
        if item == MAX_POOL:
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            continue
        assert isinstance(item, int)
        # The conv bias is redundant in front of batch norm, so drop it there.
        layers.append(nn.Conv2d(in_channels, item, kernel_size=3, padding=1, bias=not batch_norm))
        if batch_norm:
            layers.append(nn.BatchNorm2d(item))
        layers.append(nn.ReLU(inplace=True))
        in_channels = item
    return nn.Sequential(*layers), in_channels


class VGG(nn.Module):
    """Convolutional stack + pooling + classifier; ``cifar_style`` picks the head (see module docstring)."""

    def __init__(
        self,
        config: VGGConfig,
        *,
        num_classes: int,
        cifar_style: bool,
        batch_norm: bool | None = None,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        use_batch_norm = cifar_style if batch_norm is None else batch_norm
        self.features, feature_channels = _feature_stack(config, batch_norm=use_batch_norm)
        if cifar_style:
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Flatten(1), nn.Linear(feature_channels, num_classes))
        else:
            self.pool = nn.AdaptiveAvgPool2d(IMAGENET_POOLED_SIZE)
            pooled_features = feature_channels * IMAGENET_POOLED_SIZE * IMAGENET_POOLED_SIZE
            self.classifier = nn.Sequential(
                nn.Flatten(1),
                nn.Linear(pooled_features, IMAGENET_HIDDEN_WIDTH),
                nn.ReLU(inplace=True),
                nn.Dropout(dropout),
                nn.Linear(IMAGENET_HIDDEN_WIDTH, IMAGENET_HIDDEN_WIDTH),
                nn.ReLU(inplace=True),
                nn.Dropout(dropout),
                nn.Linear(IMAGENET_HIDDEN_WIDTH, num_classes),
            )
        initialise(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.pool(self.features(x)))


def vgg11(*, num_classes: int, image_size: int) -> VGG:
    """VGG-11 (132,863,336 parameters ImageNet-style with 1000 classes)."""
    return VGG(VGG11, num_classes=num_classes, cifar_style=is_cifar_style(image_size))


def vgg19(*, num_classes: int, image_size: int) -> VGG:
    """VGG-19 (143,667,240 parameters ImageNet-style with 1000 classes)."""
    return VGG(VGG19, num_classes=num_classes, cifar_style=is_cifar_style(image_size))
