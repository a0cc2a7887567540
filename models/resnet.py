"""ResNet-18/50 and SE-ResNet-18 (He et al. 2016; Hu et al. 2018), written for this project.

Two stems: the ImageNet one (7x7 stride-2 conv + 3x3 stride-2 max-pool) for large inputs and the CIFAR
one (3x3 stride-1 conv, no pooling) for small inputs, where the ImageNet stem would shrink a 32x32 image
to 8x8 before the first stage. Bottleneck blocks stride in their 3x3 conv ("ResNet v1.5"), which changes
speed and accuracy slightly but not the parameter count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from models.init import initialise
from models.registry import is_cifar_style

Stem = Literal["imagenet", "cifar"]

STAGE_WIDTHS = (64, 128, 256, 512)


class SqueezeExcitation(nn.Module):
    """Channel attention: global average pool -> FC (C/r) -> ReLU -> FC (C) -> sigmoid -> rescale."""

    def __init__(self, channels: int, reduction: int) -> None:
        super().__init__()
        hidden = max(1, channels // reduction)
        self.squeeze = nn.AdaptiveAvgPool2d(1)
        # 1x1 convs act as the two fully connected layers without reshaping (same parameters, with bias).
        self.reduce = nn.Conv2d(channels, hidden, kernel_size=1, bias=True)
        self.expand = nn.Conv2d(hidden, channels, kernel_size=1, bias=True)
        self.activation = nn.ReLU(inplace=True)
        self.gate = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.gate(self.expand(self.activation(self.reduce(self.squeeze(x)))))
        return x * scale


def _conv_bn(in_channels: int, out_channels: int, kernel_size: int, stride: int) -> list[nn.Module]:
    return [
        nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=kernel_size // 2, bias=False),
        nn.BatchNorm2d(out_channels),
    ]


def _shortcut(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    """Identity when shapes match, else a 1x1 projection (option B of the ResNet paper)."""
    if stride == 1 and in_channels == out_channels:
        return nn.Identity()
    return nn.Sequential(*_conv_bn(in_channels, out_channels, kernel_size=1, stride=stride))


class _ResidualBlock(nn.Module):
    """``relu(se(residual(x)) + shortcut(x))``; subclasses build the residual branch."""

    def __init__(self, residual: nn.Sequential, in_channels: int, out_channels: int, stride: int,
                 se_reduction: int | None) -> None:
        super().__init__()
        self.residual = residual
        self.se = SqueezeExcitation(out_channels, se_reduction) if se_reduction else nn.Identity()
        self.shortcut = _shortcut(in_channels, out_channels, stride)
        self.activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.se(self.residual(x)) + self.shortcut(x))


class BasicBlock(_ResidualBlock):
    """Two 3x3 convs; optional squeeze-excitation on the residual branch before the addition."""

    expansion = 1

    def __init__(self, in_channels: int, width: int, stride: int, se_reduction: int | None = None) -> None:
        out_channels = width * self.expansion
        residual = nn.Sequential(
            *_conv_bn(in_channels, width, 3, stride),
            nn.ReLU(inplace=True),
            *_conv_bn(width, out_channels, 3, 1),
        )
        super().__init__(residual, in_channels, out_channels, stride, se_reduction)


class Bottleneck(_ResidualBlock):
    """1x1 reduce, 3x3 (strided), 1x1 expand by 4; optional squeeze-excitation before the addition."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int, se_reduction: int | None = None) -> None:
        out_channels = width * self.expansion
        residual = nn.Sequential(
            *_conv_bn(in_channels, width, 1, 1),
            nn.ReLU(inplace=True),
            *_conv_bn(width, width, 3, stride),
            nn.ReLU(inplace=True),
            *_conv_bn(width, out_channels, 1, 1),
        )
        super().__init__(residual, in_channels, out_channels, stride, se_reduction)


@dataclass(frozen=True)
class ResNetConfig:
    """Architecture of one ResNet: block type, blocks per stage, and SE reduction (None = no SE)."""

    block: Literal["basic", "bottleneck"]
    blocks_per_stage: tuple[int, int, int, int]
    se_reduction: int | None = None


RESNET18 = ResNetConfig(block="basic", blocks_per_stage=(2, 2, 2, 2))
RESNET50 = ResNetConfig(block="bottleneck", blocks_per_stage=(3, 4, 6, 3))
SE_RESNET18 = ResNetConfig(block="basic", blocks_per_stage=(2, 2, 2, 2), se_reduction=16)


class ResNet(nn.Module):
    """Stem, four stages (widths 64..512, stride 2 from the second), global average pool, linear head."""

    def __init__(self, config: ResNetConfig, *, num_classes: int, stem: Stem) -> None:
        super().__init__()
        block_type = BasicBlock if config.block == "basic" else Bottleneck
        stem_width = STAGE_WIDTHS[0]
        if stem == "imagenet":
            self.stem = nn.Sequential(
                *_conv_bn(3, stem_width, kernel_size=7, stride=2),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
            )
        elif stem == "cifar":
            self.stem = nn.Sequential(*_conv_bn(3, stem_width, kernel_size=3, stride=1), nn.ReLU(inplace=True))
        else:
            raise ValueError(f"unknown stem '{stem}' (valid: imagenet, cifar)")

        stages: list[nn.Module] = []
        in_channels = stem_width
        for stage_index, (width, num_blocks) in enumerate(zip(STAGE_WIDTHS, config.blocks_per_stage)):
            blocks: list[nn.Module] = []
            for block_index in range(num_blocks):
                stride = 2 if stage_index > 0 and block_index == 0 else 1
                blocks.append(block_type(in_channels, width, stride, config.se_reduction))
                in_channels = width * block_type.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(in_channels, num_classes)
        initialise(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.pool(self.stages(self.stem(x)))
        return self.classifier(torch.flatten(features, 1))


def _stem_for(image_size: int) -> Stem:
    return "cifar" if is_cifar_style(image_size) else "imagenet"


def resnet18(*, num_classes: int, image_size: int) -> ResNet:
    """ResNet-18 (11,689,512 parameters with the ImageNet stem and 1000 classes)."""
    return ResNet(RESNET18, num_classes=num_classes, stem=_stem_for(image_size))


def resnet50(*, num_classes: int, image_size: int) -> ResNet:
    """ResNet-50 (25,557,032 parameters with the ImageNet stem and 1000 classes)."""
    return ResNet(RESNET50, num_classes=num_classes, stem=_stem_for(image_size))


def se_resnet18(*, num_classes: int, image_size: int) -> ResNet:
    """ResNet-18 with a squeeze-excitation block (reduction 16) in every basic block."""
    return ResNet(SE_RESNET18, num_classes=num_classes, stem=_stem_for(image_size))
