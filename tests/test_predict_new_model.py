"""Leave one model out, and a model never paired predicted from its solo run (scheduler/learning/predictor/new_model.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scheduler.learning.predictor import new_model
from scheduler.learning.predictor.config import PredictorConfig
from scheduler.learning.predictor.evidence import Dataset, Evidence, PairSet, Predictor, model_of
from scheduler.learning.predictor.folds import PROTOCOLS, folds

MODELS, BATCHES = 5, (16, 32, 64)
TYPES = [f"m{m}@{b}" for m in range(MODELS) for b in BATCHES]


def _dataset(name: str, types: list[str], seed: int, *, one_batch: bool = False) -> Dataset:
    """Pairs whose log ratios follow the solo feature ``util`` (a victim suffers from a busy partner)."""
    rng = np.random.default_rng(seed)
    kept = [t for t in types if not one_batch or t.endswith("@16")]
    util = pd.Series(rng.uniform(-1.5, 1.5, len(kept)), index=kept)
    rows = []
    for i, a in enumerate(kept):
        for b in kept[i:]:
            rows.append({"type_a": a, "type_b": b, "ratio_a": float(np.exp(-0.6 - 0.25 * util[b])),
                         "ratio_b": float(np.exp(-0.6 - 0.25 * util[a]))})
    return Dataset(name, pd.DataFrame(rows), pd.DataFrame({"util": util}))


SHAPES = {  # every dataset shape the evaluation meets: one dataset, several GPU types, one batch per model
    "one dataset": lambda: [_dataset("v100/timeslice", TYPES, 0)],
    "two datasets": lambda: [_dataset("k80/timeslice", TYPES, 1), _dataset("v100/timeslice", TYPES, 0)],
    "one batch per model": lambda: [_dataset("h100/mps", TYPES, 2, one_batch=True),
                                    _dataset("h100/timeslice", TYPES, 3)],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_leave_one_model_out_keeps_every_type_of_the_model_out_of_training(shape: str) -> None:
    pairs = PairSet(SHAPES[shape]())
    assert "model" in PROTOCOLS
    for d in range(len(pairs.names)):
        held_models = []
        for fold in folds(pairs, d, "model"):
            held_models.append(fold.name)
            mask = np.ones(len(pairs), dtype=bool)
            mask[fold.held] = False
            trained = {model_of(pairs.types[t]) for t in np.concatenate([pairs.victim[mask], pairs.aggressor[mask]])}
            assert fold.name not in trained  # in no dataset, at no batch size
            a_of, b_of = pairs.pair_types(d)
            predicted = {model_of(pairs.types[t]) for t in np.concatenate([a_of[fold.pairs], b_of[fold.pairs]])}
            assert fold.name in predicted and len(fold.pairs)
        assert sorted(held_models) == sorted({model_of(t) for t in pairs.types if pairs.local[d][pairs.index[t]] >= 0})


def _held_out_model(datasets: list[Dataset], model: str) -> tuple[PairSet, np.ndarray]:
    pairs = PairSet(datasets)
    mask = np.ones(len(pairs), dtype=bool)
    mask[pairs.of_model(model)] = False
    return pairs, mask


def _predict(pairs: PairSet, mask: np.ndarray, cells: list[tuple[str, str]]) -> np.ndarray:
    model = Predictor(Evidence(pairs, mask), 0, mask, PredictorConfig())
    v = np.array([pairs.index[a] for a, _ in cells])
    a = np.array([pairs.index[b] for _, b in cells])
    return model.predict(v, a)[0]


def test_a_model_with_no_pair_evidence_is_predicted_from_its_solo_features() -> None:
    data = _dataset("v100/timeslice", TYPES, 0)
    pairs, mask = _held_out_model([data], "m4")
    cells = [("m0@16", "m4@32"), ("m1@32", "m4@64")]  # the partner is the new model: its util sets the ratio
    truth = np.array([np.exp(-0.6 - 0.25 * data.features.loc[b, "util"]) for _, b in cells])
    before = _predict(pairs, mask, cells)
    assert np.abs(np.log(before) - np.log(truth)).max() < 0.15
    alike = {}
    for name, value in (("quiet", data.features["util"].min()), ("busy", data.features["util"].max())):
        features = data.features.copy()
        features.loc[["m4@16", "m4@32", "m4@64"], "util"] = value  # what the new model's solo run showed
        changed, changed_mask = _held_out_model([Dataset(data.name, data.pairs, features)], "m4")
        alike[name] = _predict(changed, changed_mask, cells)
    assert np.all(alike["quiet"] > alike["busy"] * 1.2)  # a partner quiet alone: a higher predicted ratio


def test_the_nested_choice_never_reads_the_held_out_model() -> None:
    """The candidate is chosen on the training mask only: changing the held-out model's pairs changes nothing."""
    data = _dataset("v100/timeslice", TYPES, 0)
    pairs, mask = _held_out_model([data], "m4")
    touched = data.pairs.assign(ratio_a=np.where(data.pairs["type_b"].str.startswith("m4"), 0.9, data.pairs["ratio_a"]))
    other, other_mask = _held_out_model([Dataset(data.name, touched, data.features)], "m4")
    seen_models: list[set[int]] = []

    def choices(p: PairSet, m: np.ndarray) -> new_model.Choice:
        model = Predictor(Evidence(p, m), 0, m, PredictorConfig())
        original = model._refit

        def spy(inner: np.ndarray, v: np.ndarray, a: np.ndarray, seen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            assert not (inner & ~m).any()  # an inner fit trains on a subset of the outer training data
            seen_models.append({int(x) for x in p.model[np.concatenate([v, a])]})
            return original(inner, v, a, seen)

        model._refit = spy  # type: ignore[method-assign]
        model.predict(np.array([p.index["m0@16"]]), np.array([p.index["m4@16"]]))
        assert model.choice is not None
        return model.choice

    first, second = choices(pairs, mask), choices(other, other_mask)
    assert first == second and first.errors  # a choice was made, from the same numbers
    held = pairs.model_names.index("m4")
    assert seen_models and all(held not in models for models in seen_models)  # never an inner validation target


def test_the_mixture_weighs_the_closest_solo_run_most() -> None:
    features = np.array([[0.0], [1.0], [3.0], [0.9]])
    seen = np.array([0, 1, 2])
    w = new_model.weights(features, np.array([3]), seen, 0.5)[0]
    assert w.argmax() == 1 and np.isclose(w.sum(), 1.0)
    flat = new_model.weights(features, np.array([3]), seen, np.inf)[0]
    assert np.allclose(flat, 1 / 3)  # an infinite bandwidth: every measured type alike


@pytest.mark.slow
def test_leave_one_model_out_beats_every_baseline_on_gavel_v100_and_k80(gavel_throughputs: Path) -> None:
    from colocate.analysis.gavel import gavel_results
    from colocate.prediction.predict import make_datasets
    from colocate.prediction.predict_eval import BASELINES, evaluate

    datasets = make_datasets(gavel_results(gavel_throughputs))
    for result in evaluate(datasets, only=["k80/timeslice", "v100/timeslice"], protocols=("model",)):
        table = result.summary.set_index("method")
        for baseline in BASELINES:
            assert table.loc["predictor", "mae_delta"] < table.loc[baseline, "mae_delta"], result.title
            assert table.loc["predictor", "balanced_accuracy"] >= table.loc[baseline, "balanced_accuracy"]
        assert set(result.predictions["evidence"]) == {"new model"}  # no pair of the model anywhere
        assert len(result.choices) == 7  # the nested choice of each held-out model's fold, stated in the report
