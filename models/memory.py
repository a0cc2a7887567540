"""Activation memory per sample: the bytes one training step keeps for backward, measured on any device.

Autograd's saved-tensor hooks see every tensor stored for the backward pass; counting each storage once and
leaving out parameters gives the activation memory of a batch. The difference between batch sizes 2 and 1
is the memory per sample (weights, gradients and optimizer state do not grow with the batch). Measured on
CPU it is what a GPU needs as well, up to kernels that save less (fused attention) or workspaces.
"""

from __future__ import annotations

import torch

from models.data import synthetic_inputs
from models.registry import build_model


def _saved_bytes(model: torch.nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> int:
    parameters = {p.data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in parameters:
            storages[pointer] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        outputs = model(inputs)
        loss = torch.nn.functional.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), labels.reshape(-1))
    del outputs, loss
    return sum(storages.values())


def activation_mib_per_sample(name: str, *, image_size: int = 224, seq_len: int = 128,
                              num_classes: int = 1000) -> float:
    """MiB of activations (loss included) one more sample adds to a training step of ``name`` (float32)."""
    torch.manual_seed(0)
    model = build_model(name, num_classes=num_classes, image_size=image_size).train()
    sizes = []
    for batch in (1, 2):
        inputs, labels = synthetic_inputs(name, batch, image_size=image_size, num_classes=num_classes,
                                          seq_len=seq_len, device="cpu")
        sizes.append(_saved_bytes(model, inputs, labels))
    return (sizes[1] - sizes[0]) / 2**20
