"""The δ predictor, the prior of every pair nobody measured: one ridge model over every level of evidence
(:mod:`.evidence`, :mod:`.ratio_model`), fitted per pattern of evidence, with split-conformal intervals
(:mod:`.conformal`) calibrated on held-out folds (:mod:`.folds`); :mod:`.prior` answers the scheduler's questions
with it, :mod:`.config` holds its knobs."""
