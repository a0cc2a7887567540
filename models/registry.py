"""A small name -> builder registry for the models the profiler trains.

Builders take ``num_classes`` and ``image_size`` (keywords) and return a fresh ``torch.nn.Module``. The
built-in models register themselves from ``models/__init__.py``; other code may add more with
:func:`register_model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

# Inputs smaller than this get the CIFAR-style variant (3x3 stride-1 stem, no max-pool; VGG's single
# linear classifier); larger ones the ImageNet-style variant. 96 sits between CIFAR/STL sizes (32, 64)
# and the usual ImageNet crops (>= 112).
CIFAR_STYLE_MAX_IMAGE_SIZE = 95

# Every built-in model downsamples by 32 at most (VGG's five max-pools), so this is the smallest input
# all of them accept.
MIN_IMAGE_SIZE = 32


class ModelBuilder(Protocol):
    """Signature every registered builder follows."""

    def __call__(self, *, num_classes: int, image_size: int) -> torch.nn.Module: ...


@dataclass(frozen=True)
class ModelInfo:
    """Facts about a registered model, shown in tables and used by tests.

    ``published_params_imagenet`` is the parameter count of the ImageNet-style variant with 1000 classes
    as published (torchvision's model zoo documentation), or ``None`` when there is no reference figure.
    """

    name: str
    family: str
    description: str
    published_params_imagenet: int | None = None
    # "image": (B, 3, H, W) float inputs and (B,) class labels; "tokens": (B, seq_len) token ids, with
    # (B, seq_len) next-token labels over ``vocabulary`` (a language model) or (B,) class labels.
    inputs: str = "image"
    vocabulary: int | None = None  # token models: size of the embedding table
    max_positions: int | None = None  # token models: longest sequence the position table covers
    language_model: bool = False  # labels are next tokens (B, T), not classes (B,)


# Builders by name; MODEL_INFO holds the same names' infos (both written only by register_model).
_REGISTRY: dict[str, ModelBuilder] = {}
MODEL_INFO: dict[str, ModelInfo] = {}


def register_model(name: str, builder: ModelBuilder, info: ModelInfo, *, replace: bool = False) -> None:
    """Add a model to the registry under ``name``.

    Raises ``ValueError`` when the name is taken (unless ``replace``) or when ``info.name`` differs from
    ``name``, so a table can never show a model under two names.
    """
    if not name or not name.strip():
        raise ValueError("model name must be a non-empty string")
    if info.name != name:
        raise ValueError(f"ModelInfo.name '{info.name}' does not match the registered name '{name}'")
    if name in _REGISTRY and not replace:
        raise ValueError(f"model '{name}' is already registered (pass replace=True to override it)")
    _REGISTRY[name] = builder
    MODEL_INFO[name] = info


def registered_names() -> tuple[str, ...]:
    """Names of every registered model, built-ins first, in registration order."""
    return tuple(_REGISTRY)


def is_cifar_style(image_size: int) -> bool:
    """Whether ``image_size`` selects the CIFAR-style variant of a model."""
    return image_size <= CIFAR_STYLE_MAX_IMAGE_SIZE


def build_model(name: str, *, num_classes: int = 1000, image_size: int = 224) -> torch.nn.Module:
    """Build a fresh, randomly initialised model by name.

    ``image_size`` < 96 gives the CIFAR-style variant, otherwise the ImageNet-style one. Raises
    ``ValueError`` for an unknown name (listing the valid ones) or an out-of-range size or class count.
    """
    builder = _REGISTRY.get(name)
    if builder is None:
        valid = ", ".join(_REGISTRY)
        raise ValueError(f"unknown model '{name}' (valid: {valid})")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < MIN_IMAGE_SIZE:
        raise ValueError(f"image_size must be an integer >= {MIN_IMAGE_SIZE}, got {image_size!r}")
    return builder(num_classes=num_classes, image_size=image_size)


def count_parameters(model: torch.nn.Module, *, trainable_only: bool = False) -> int:
    """Number of scalar parameters in ``model`` (works on meta-device models too)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
