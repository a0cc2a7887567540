"""The δ predictor's knobs (:mod:`scheduler.learning.predictor.ratio_model`), in a module light enough for the CLI to
import when it builds ``colocate predict``'s options from them."""

from __future__ import annotations

from dataclasses import dataclass

from common.options import option

RIDGE_RANGE = (1e-3, 1e4)  # ridge penalties (ridge_lambda, evidence_lambda): see __post_init__


@dataclass(frozen=True)
class PredictorConfig:
    """Knobs of the δ predictor; the defaults were chosen once on Gavel's V100 data (results/predictor/NOTES.md)."""

    ridge_lambda: float = option(1.0, "Ridge penalty of the feature and job-type terms, in [0.001, 10000].",
                                 experimental=True)
    nuclear_lambda: float = option(0.3, "Matrix-completion shrinkage (log-ratio units), in [0, 10000].",
                                   experimental=True)
    evidence_lambda: float = option(0.1, "Ridge penalty of the closer evidence's transfer factors, in "
                                         "[0.001, 10000].", experimental=True)
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
        from common.bounds import check_number

        # a ridge penalty of 0 (or one that underflows) leaves the normal equations singular; one past 1e4 only
        # shrinks every term to 0 (and near 1e308 overflows)
        for name in ("ridge_lambda", "evidence_lambda"):
            check_number(getattr(self, name), field=name, low=RIDGE_RANGE[0], high=RIDGE_RANGE[1], source="predictor")
        check_number(self.nuclear_lambda, field="nuclear_lambda", low=0, high=RIDGE_RANGE[1], source="predictor")
        check_number(self.level, field="level", low=0.5, high=1, high_open=True, source="predictor",
                     valid="a coverage in [0.5, 1), e.g. 0.8")



__all__ = ["PredictorConfig"]
