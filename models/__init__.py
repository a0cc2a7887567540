"""Torch models the profiler trains, a registry by name, and synthetic on-device batches.

No I/O happens here. ``build_model(name, num_classes=..., image_size=...)`` picks the CIFAR-style variant
for ``image_size < 96`` and the ImageNet-style one otherwise.
"""

from __future__ import annotations

from models.data import synthetic_batch, synthetic_inputs, synthetic_tokens
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
from models.transformer import bert_base, gpt2_small
from models.vgg import vgg11, vgg19

# Parameter counts of the ImageNet-style models with 1000 classes, from torchvision's model documentation.
_BUILTINS: tuple[tuple[ModelBuilder, ModelInfo], ...] = (
    (resnet18, ModelInfo("resnet18", "resnet", "ResNet-18, basic blocks (2, 2, 2, 2)", 11_689_512)),
    (resnet50, ModelInfo("resnet50", "resnet", "ResNet-50, bottleneck blocks (3, 4, 6, 3)", 25_557_032)),
    (vgg11, ModelInfo("vgg11", "vgg", "VGG-11 (configuration A)", 132_863_336)),
    (vgg19, ModelInfo("vgg19", "vgg", "VGG-19 (configuration E)", 143_667_240)),
    (se_resnet18, ModelInfo("se_resnet18", "se-resnet", "ResNet-18 with squeeze-excitation, reduction 16")),
    (tiny_cnn, ModelInfo("tiny_cnn", "tiny", "3-conv CNN for CPU tests and demos")),
    # Transformers: published counts of GPT-2 small (tied LM head) and BERT-base (with pooler, no task head).
    (gpt2_small, ModelInfo("gpt2_small", "transformer", "GPT-2-small-style decoder, 12 x 768, LM on synthetic "
                           "tokens", 124_439_808, inputs="tokens", vocabulary=50_257, max_positions=1024,
                           language_model=True)),
    (bert_base, ModelInfo("bert_base", "transformer", "BERT-base-style encoder, 12 x 768, sequence "
                          "classification on synthetic tokens", 109_482_240, inputs="tokens", vocabulary=30_522,
                          max_positions=512)),
)
for _builder, _info in _BUILTINS:
    register_model(_info.name, _builder, _info)

MODEL_NAMES: tuple[str, ...] = tuple(info.name for _, info in _BUILTINS)
THESIS_MODELS: tuple[str, ...] = ("resnet18", "resnet50", "vgg11", "vgg19", "se_resnet18")
IMAGE_MODELS: tuple[str, ...] = tuple(info.name for _, info in _BUILTINS if info.inputs == "image")
TOKEN_MODELS: tuple[str, ...] = tuple(info.name for _, info in _BUILTINS if info.inputs == "tokens")

__all__ = [
    "CIFAR_STYLE_MAX_IMAGE_SIZE",
    "IMAGE_MODELS",
    "TOKEN_MODELS",
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
    "synthetic_inputs",
    "synthetic_tokens",
]
