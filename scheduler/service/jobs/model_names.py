"""The model names a job file may use, known without importing torch (``colocate submit`` stays fast).

``models`` imports torch (over a second); a submit only needs the names. :data:`BUILTIN_MODELS` repeats the
zoo's names (a test keeps it equal to ``models.MODEL_NAMES``); a process that already imported ``models``
(and may have registered its own) asks the registry.
"""

from __future__ import annotations

import sys

BUILTIN_MODELS: tuple[str, ...] = ("resnet18", "resnet50", "vgg11", "vgg19", "se_resnet18", "tiny_cnn", "gpt2_small",
                                   "bert_base")


def known_models() -> tuple[str, ...]:
    """Names of the models a job can train: the registry's when loaded, else the built-in zoo's."""
    if "models" in sys.modules:
        from models import registered_names

        return tuple(registered_names())
    return BUILTIN_MODELS
