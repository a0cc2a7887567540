"""Models: forward/backward at both input styles, published parameter counts, registry, synthetic batches."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

import models
from models import (
    IMAGE_MODELS,
    MODEL_INFO,
    MODEL_NAMES,
    THESIS_MODELS,
    TOKEN_MODELS,
    ModelInfo,
    build_model,
    count_parameters,
    register_model,
    registered_names,
    synthetic_batch,
    synthetic_inputs,
    synthetic_tokens,
)
from models import registry as registry_module

NUM_CLASSES = 7  # deliberately not 10 or 1000, so a hard-coded head width would show up

# Published ImageNet parameter counts (1000 classes), torchvision model documentation.
PUBLISHED_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "vgg11": 132_863_336,
    "vgg19": 143_667_240,
}


def _batch_size(name: str, image_size: int) -> int:
    # The 224 VGGs carry ~130 M parameters; one sample keeps the CPU test quick.
    return 1 if name.startswith("vgg") and image_size >= 96 else 2


@pytest.mark.parametrize("image_size", [32, pytest.param(224, marks=pytest.mark.slow)])  # 224: seconds per model
@pytest.mark.parametrize("name", IMAGE_MODELS)
def test_forward_backward_gives_logits_and_gradients(name: str, image_size: int) -> None:
    torch.manual_seed(0)
    model = build_model(name, num_classes=NUM_CLASSES, image_size=image_size)
    batch = _batch_size(name, image_size)
    inputs, labels = synthetic_batch(batch, image_size=image_size, num_classes=NUM_CLASSES, device="cpu", seed=1)

    logits = model(inputs)
    assert logits.shape == (batch, NUM_CLASSES)
    loss = nn.functional.cross_entropy(logits, labels)
    assert torch.isfinite(loss)
    loss.backward()

    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, f"parameters without gradient: {missing[:5]}"
    assert any(p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize("name", THESIS_MODELS)
def test_non_standard_small_input_size_is_accepted(name: str) -> None:
    model = build_model(name, num_classes=3, image_size=48).eval()
    inputs, _ = synthetic_batch(1, image_size=48, num_classes=3, device="cpu")
    with torch.no_grad():
        assert model(inputs).shape == (1, 3)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_imagenet_parameter_counts_equal_published(name: str) -> None:
    # Built on the meta device: shapes only, no memory or init time for 140 M parameters.
    with torch.device("meta"):
        model = build_model(name, num_classes=1000, image_size=224)
    assert count_parameters(model) == PUBLISHED_PARAMS[name]
    assert MODEL_INFO[name].published_params_imagenet == PUBLISHED_PARAMS[name]


def test_se_resnet18_adds_exactly_the_squeeze_excitation_parameters() -> None:
    with torch.device("meta"):
        plain = count_parameters(build_model("resnet18", num_classes=1000, image_size=224))
        se = count_parameters(build_model("se_resnet18", num_classes=1000, image_size=224))
    # Two basic blocks per stage, each with FC C -> C/16 and FC C/16 -> C, both with bias.
    expected_extra = sum(2 * (c * (c // 16) + c // 16 + (c // 16) * c + c) for c in (64, 128, 256, 512))
    assert se - plain == expected_extra
    assert PUBLISHED_PARAMS["resnet18"] < se < 12_000_000
    print(f"se_resnet18 (ImageNet, 1000 classes): {se:,} parameters")


def test_class_count_changes_only_the_head() -> None:
    with torch.device("meta"):
        counts = {k: count_parameters(build_model("resnet18", num_classes=k, image_size=224)) for k in (10, 1000)}
    assert counts[1000] - counts[10] == 990 * (512 + 1)


def _has(model: nn.Module, kind: type[nn.Module]) -> bool:
    return any(isinstance(m, kind) for m in model.modules())


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "se_resnet18"])
def test_resnet_stems_follow_the_input_style(name: str) -> None:
    with torch.device("meta"):
        cifar = build_model(name, num_classes=10, image_size=95)
        imagenet = build_model(name, num_classes=10, image_size=96)
    cifar_conv = next(m for m in cifar.modules() if isinstance(m, nn.Conv2d))
    imagenet_conv = next(m for m in imagenet.modules() if isinstance(m, nn.Conv2d))
    assert (cifar_conv.kernel_size, cifar_conv.stride) == ((3, 3), (1, 1))
    assert (imagenet_conv.kernel_size, imagenet_conv.stride) == ((7, 7), (2, 2))
    assert not _has(cifar, nn.MaxPool2d) and _has(imagenet, nn.MaxPool2d)


@pytest.mark.parametrize("name", ["vgg11", "vgg19"])
def test_vgg_classifiers_follow_the_input_style(name: str) -> None:
    with torch.device("meta"):
        cifar = build_model(name, num_classes=10, image_size=32)
        imagenet = build_model(name, num_classes=10, image_size=224)
    cifar_linears = [m for m in cifar.modules() if isinstance(m, nn.Linear)]
    imagenet_linears = [m for m in imagenet.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in cifar_linears] == [(512, 10)]
    assert [(m.in_features, m.out_features) for m in imagenet_linears] == [(512 * 7 * 7, 4096), (4096, 4096), (4096, 10)]
    assert _has(cifar, nn.BatchNorm2d) and not _has(imagenet, nn.BatchNorm2d)


def test_tiny_cnn_learns_a_fixed_batch() -> None:
    torch.manual_seed(0)
    model = build_model("tiny_cnn", num_classes=4, image_size=32)
    inputs, labels = synthetic_batch(8, image_size=32, num_classes=4, device="cpu", seed=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_synthetic_batch_shape_dtype_device_and_label_range() -> None:
    inputs, labels = synthetic_batch(5, image_size=40, num_classes=3, device=torch.device("cpu"), seed=0)
    assert inputs.shape == (5, 3, 40, 40) and inputs.dtype == torch.float32
    assert labels.shape == (5,) and labels.dtype == torch.int64
    assert inputs.device.type == "cpu" and labels.device.type == "cpu"
    assert int(labels.min()) >= 0 and int(labels.max()) < 3


def test_synthetic_batch_is_deterministic_per_seed() -> None:
    first = synthetic_batch(4, image_size=32, num_classes=1000, device="cpu", seed=11)
    again = synthetic_batch(4, image_size=32, num_classes=1000, device="cpu", seed=11)
    other = synthetic_batch(4, image_size=32, num_classes=1000, device="cpu", seed=12)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])


def test_synthetic_batch_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    synthetic_batch(2, image_size=32, num_classes=10, device="cpu", seed=0)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.gpu
def test_synthetic_batch_is_created_on_cuda() -> None:
    inputs, labels = synthetic_batch(2, image_size=32, num_classes=10, device="cuda", seed=0)
    assert inputs.is_cuda and labels.is_cuda
    again, _ = synthetic_batch(2, image_size=32, num_classes=10, device="cuda", seed=0)
    assert torch.equal(inputs, again)


@pytest.mark.parametrize("bad", [{"batch_size": 0}, {"image_size": 0}, {"num_classes": 0}])
def test_synthetic_batch_rejects_non_positive_sizes(bad: dict[str, int]) -> None:
    arguments = {"batch_size": 2, "image_size": 32, "num_classes": 10} | bad
    batch_size = arguments.pop("batch_size")
    with pytest.raises(ValueError, match=next(iter(bad))):
        synthetic_batch(batch_size, device="cpu", **arguments)


def test_unknown_model_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError) as caught:
        build_model("resnet1000")
    message = str(caught.value)
    assert "resnet1000" in message
    for name in MODEL_NAMES:
        assert name in message


@pytest.mark.parametrize(("num_classes", "image_size"), [(0, 32), (10, 16), (10, 31), (True, 32)])
def test_out_of_range_class_count_or_size_is_rejected(num_classes: int, image_size: int) -> None:
    with pytest.raises(ValueError):
        build_model("tiny_cnn", num_classes=num_classes, image_size=image_size)


def test_public_name_tuples() -> None:
    assert MODEL_NAMES == ("resnet18", "resnet50", "vgg11", "vgg19", "se_resnet18", "tiny_cnn", "gpt2_small",
                           "bert_base")
    assert IMAGE_MODELS + TOKEN_MODELS == MODEL_NAMES
    assert set(THESIS_MODELS) == set(IMAGE_MODELS) - {"tiny_cnn"}
    assert set(MODEL_INFO) >= set(MODEL_NAMES)
    assert all(MODEL_INFO[n].name == n for n in MODEL_NAMES)


@pytest.fixture
def restored_registry() -> Iterator[None]:
    entries = dict(registry_module._REGISTRY)
    infos = dict(MODEL_INFO)
    yield
    registry_module._REGISTRY.clear()
    registry_module._REGISTRY.update(entries)
    MODEL_INFO.clear()
    MODEL_INFO.update(infos)


def test_register_model_makes_a_new_model_buildable(restored_registry: None) -> None:
    def linear_probe(*, num_classes: int, image_size: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(1), nn.Linear(3 * image_size * image_size, num_classes))

    register_model("linear_probe", linear_probe, ModelInfo("linear_probe", "linear", "flatten + linear"))
    assert "linear_probe" in registered_names()
    assert models.MODEL_INFO["linear_probe"].family == "linear"
    model = build_model("linear_probe", num_classes=5, image_size=32)
    inputs, _ = synthetic_batch(2, image_size=32, num_classes=5, device="cpu")
    assert model(inputs).shape == (2, 5)

    with pytest.raises(ValueError, match="already registered"):
        register_model("linear_probe", linear_probe, ModelInfo("linear_probe", "linear", "again"))
    with pytest.raises(ValueError, match="does not match"):
        register_model("other", linear_probe, ModelInfo("linear_probe", "linear", "wrong name"))


def test_models_package_imports_no_other_project_package() -> None:
    forbidden = {"colocate", "profiler", "scheduler"}
    package_dir = Path(models.__file__).parent
    for path in package_dir.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert not roots & forbidden, f"{path.name} imports {roots & forbidden}"


# Published configurations: GPT-2 small (Radford et al. 2019; 124,439,808 with the LM head tied to the token
# embedding) and BERT-base (Devlin et al. 2019; 109,482,240 with the pooler, without a task head).
def test_transformer_parameter_counts_equal_the_published_configurations() -> None:
    with torch.device("meta"):
        gpt2 = build_model("gpt2_small")
        bert = build_model("bert_base", num_classes=NUM_CLASSES)
    assert count_parameters(gpt2) == 124_439_808 == MODEL_INFO["gpt2_small"].published_params_imagenet
    assert bert.backbone_parameters() == 109_482_240 == MODEL_INFO["bert_base"].published_params_imagenet
    assert count_parameters(bert) == 109_482_240 + 768 * NUM_CLASSES + NUM_CLASSES  # plus the task head


@pytest.mark.slow
@pytest.mark.parametrize("name", TOKEN_MODELS)
def test_transformers_train_on_synthetic_tokens(name: str) -> None:
    from profiler.measure.training import make_training_step

    torch.manual_seed(0)
    model = build_model(name, num_classes=NUM_CLASSES)
    tokens, labels = synthetic_inputs(name, 2, image_size=32, num_classes=NUM_CLASSES, seq_len=8, device="cpu")
    outputs = model(tokens)
    if MODEL_INFO[name].language_model:
        assert outputs.shape == (2, 8, 50_257) and labels.shape == (2, 8)
    else:
        assert outputs.shape == (2, NUM_CLASSES) and labels.shape == (2,)
    loss = nn.functional.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), labels.reshape(-1))
    loss.backward()
    assert not [n for n, p in model.named_parameters() if p.grad is None]
    step = make_training_step(name, 1, image_size=32, num_classes=NUM_CLASSES, device="cpu", seed=0,
                              precision="bf16", seq_len=8)
    step()  # bf16 autocast on CPU


def test_gpt2_attention_is_causal() -> None:
    torch.manual_seed(0)
    model = build_model("gpt2_small").eval()
    tokens, _ = synthetic_tokens(1, seq_len=6, vocabulary=50_257, num_classes=None, device="cpu")
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % 50_257
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert torch.allclose(a[0, :-1], b[0, :-1], atol=1e-5)  # earlier positions never see a later token
    assert not torch.allclose(a[0, -1], b[0, -1])


def test_synthetic_tokens_labels_are_the_next_tokens_for_a_language_model() -> None:
    tokens, labels = synthetic_tokens(3, seq_len=5, vocabulary=100, num_classes=None, device="cpu", seed=4)
    assert tokens.shape == labels.shape == (3, 5) and tokens.dtype == torch.int64
    assert torch.equal(tokens[:, 1:], labels[:, :-1])
    with pytest.raises(ValueError, match="exceeds"):
        synthetic_inputs("bert_base", 1, image_size=32, num_classes=2, seq_len=513, device="cpu")


def test_activation_memory_per_sample_scales_with_the_input_and_matches_the_readme_table() -> None:
    from models.memory import activation_mib_per_sample

    small = activation_mib_per_sample("tiny_cnn", image_size=112)
    large = activation_mib_per_sample("tiny_cnn", image_size=224)
    assert 3.5 < large / small < 4.5  # convolution activations grow with the image area
    assert large == pytest.approx(3.3, abs=0.05)  # the README's model table
