"""Slurm: :mod:`.emit` writes one sbatch script per GPU group for ``colocate launch --emit slurm``; :mod:`.live`
is the executor behind ``colocate serve --backend slurm`` (one batch job per group, state read back from
Slurm); :mod:`.settings` reads the cluster file's ``slurm:`` section (GPU types → partitions, GRES types,
constraints) for it."""
