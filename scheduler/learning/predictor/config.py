"""The δ predictor's knobs (:mod:`scheduler.learning.predictor.ratio_model`), in a module light enough for the CLI to
import when it builds ``colocate predict``'s options from them."""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import InputError
from common.options import option


@dataclass(frozen=True)
class PredictorConfig:
    """Knobs of the δ predictor; the defaults were chosen once on Gavel's V100 data (results/predictor/NOTES.md)."""

    ridge_lambda: float = option(1.0, "Ridge penalty of the feature and job-type terms.", experimental=True)
    nuclear_lambda: float = option(0.3, "Matrix-completion shrinkage (log-ratio units).", experimental=True)
    evidence_lambda: float = option(0.1, "Ridge penalty of the closer evidence's transfer factors.",
                                    experimental=True)
    level: float = option(0.8, "Coverage of the prediction intervals (split conformal, per evidence level).",
                          flag="--interval")
    use_job_effects: bool = True
    use_interactions: bool = True
    use_completion: bool = True
    use_evidence: bool = True
    use_solo_mixture: bool = True  # a model never paired: mixture of measured types alike alone (new_model.py)
    completion_iters: int = 300
    completion_tol: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("ridge_lambda", "nuclear_lambda", "evidence_lambda"):
            if not getattr(self, name) >= 0:
                raise InputError(f"{name} {getattr(self, name)}", source="predictor", field=name,
                                 valid="a number >= 0")
        if not 0.5 <= self.level < 1:
            raise InputError(f"interval level {self.level}", source="predictor", field="level",
                             valid="a coverage in [0.5, 1), e.g. 0.8")



__all__ = ["PredictorConfig"]
