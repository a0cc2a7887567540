"""Torch models the profiler trains, a registry by name, and synthetic on-device batches.

No I/O happens here. ``build_model(name, num_classes=..., image_size=...)`` picks the CIFAR-style variant
for ``image_size < 96`` and the ImageNet-style one otherwise.
"""

from __future__ import annotations

from models.data import synthetic_batch
from models.registry import (
    CIFAR_STYLE_MAX_IMAGE_SIZE,
    MIN_IMAGE_SIZE,
    MODEL_INFO,
    ModelBuilder,
    ModelInfo,
    build_model,
    count_parameters,
    is_cifar_style,
    register_model,
    registered_names,
)
from models.resnet import resnet18, resnet50, se_resnet18
from models.tiny import tiny_cnn
from models.vgg import vgg11, vgg19

# Parameter counts of the ImageNet-style models with 1000 classes, from torchvision's model documentation.
_BUILTINS: tuple[tuple[ModelBuilder, ModelInfo], ...] = (
    (resnet18, ModelInfo("resnet18", "resnet", "ResNet-18, basic blocks (2, 2, 2, 2)", 11_689_512)),
    (resnet50, ModelInfo("resnet50", "resnet", "ResNet-50, bottleneck blocks (3, 4, 6, 3)", 25_557_032)),
    (vgg11, ModelInfo("vgg11", "vgg", "VGG-11 (configuration A)", 132_863_336)),
    (vgg19, ModelInfo("vgg19", "vgg", "VGG-19 (configuration E)", 143_667_240)),
    (se_resnet18, ModelInfo("se_resnet18", "se-resnet", "ResNet-18 with squeeze-excitation, reduction 16")),
    (tiny_cnn, ModelInfo("tiny_cnn", "tiny", "3-conv CNN for CPU tests and demos")),
)
for _builder, _info in _BUILTINS:
    register_model(_info.name, _builder, _info)

MODEL_NAMES: tuple[str, ...] = tuple(info.name for _, info in _BUILTINS)
THESIS_MODELS: tuple[str, ...] = ("resnet18", "resnet50", "vgg11", "vgg19", "se_resnet18")

__all__ = [
    "CIFAR_STYLE_MAX_IMAGE_SIZE",
    "MIN_IMAGE_SIZE",
    "MODEL_INFO",
    "MODEL_NAMES",
    "THESIS_MODELS",
    "ModelBuilder",
    "ModelInfo",
    "build_model",
    "count_parameters",
    "is_cifar_style",
    "register_model",
    "registered_names",
    "synthetic_batch",
]
