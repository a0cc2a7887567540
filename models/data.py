"""Synthetic training batches, created directly on the target device.

The profiler measures GPU interference, not input pipelines, so each job trains on one fixed random batch
that never crosses the host-device link.
"""

from __future__ import annotations

import torch

IMAGE_CHANNELS = 3


def synthetic_batch(
    batch_size: int,
    *,
    image_size: int,
    num_classes: int,
    device: torch.device | str,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(inputs, labels)``: float32 ``(B, 3, H, W)`` standard-normal images and int64 labels.

    Both tensors are drawn on ``device`` from a ``torch.Generator`` living there and seeded with ``seed``,
    so the same seed and device give the same batch and nothing is copied from host memory.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise ValueError(f"image_size must be a positive integer, got {image_size!r}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    device = torch.device(device)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    inputs = torch.randn(
        (batch_size, IMAGE_CHANNELS, image_size, image_size),
        generator=generator,
        device=device,
        dtype=torch.float32,
    )
    labels = torch.randint(0, num_classes, (batch_size,), generator=generator, device=device, dtype=torch.int64)
    return inputs, labels


def synthetic_tokens(
    batch_size: int,
    *,
    seq_len: int,
    vocabulary: int,
    num_classes: int | None,
    device: torch.device | str,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(tokens, labels)`` drawn on ``device``: int64 ``(B, T)`` ids below ``vocabulary``; labels are
    the next tokens ``(B, T)`` (``num_classes`` None: a language model) or ``(B,)`` classes."""
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len), ("vocabulary", vocabulary)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    device = torch.device(device)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    stream = torch.randint(0, vocabulary, (batch_size, seq_len + 1), generator=generator, device=device)
    if num_classes is None:
        return stream[:, :-1].contiguous(), stream[:, 1:].contiguous()
    labels = torch.randint(0, num_classes, (batch_size,), generator=generator, device=device, dtype=torch.int64)
    return stream[:, :-1].contiguous(), labels


def synthetic_inputs(
    model_name: str,
    batch_size: int,
    *,
    image_size: int,
    num_classes: int,
    seq_len: int,
    device: torch.device | str,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The synthetic batch ``model_name`` trains on: images or token ids, as its :class:`ModelInfo` says."""
    from models.registry import MODEL_INFO

    info = MODEL_INFO[model_name]
    if info.inputs == "tokens":
        assert info.vocabulary is not None
        if info.max_positions is not None and seq_len > info.max_positions:
            raise ValueError(f"seq_len {seq_len} exceeds {model_name}'s {info.max_positions} positions")
        return synthetic_tokens(batch_size, seq_len=seq_len, vocabulary=info.vocabulary,
                                num_classes=None if info.language_model else num_classes, device=device, seed=seed)
    return synthetic_batch(batch_size, image_size=image_size, num_classes=num_classes, device=device, seed=seed)
