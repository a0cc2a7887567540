"""Applications of public traces (Sia/Pollux names) and the model of our zoo that stands in for each.

One table, read by the executors (a trace's ``cifar10`` job trains ``resnet18`` on 32-pixel images) and by
``scheduler.formats.transfer`` (our measured ``resnet18`` pairs replace transferred ``cifar10`` ratios).
"""

from __future__ import annotations

from collections.abc import Mapping

# application → (model, image size)
APPLICATION_MODELS: Mapping[str, tuple[str, int]] = {
    "cifar10": ("resnet18", 32),
    "imagenet": ("resnet50", 224),
}

