"""The results directory of a campaign: :mod:`.store` (runs/jobs/kernels parquet, meta.json, CSV copies) and
:mod:`.schema` (the column names shared by the profiler, which writes, and the analysis, which reads)."""
