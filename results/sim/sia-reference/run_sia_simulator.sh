#!/bin/bash
# Runs Sia's own simulator (siasosp23/artifacts, commit aaf7a0de, sia-simulator/) OUTSIDE this repository,
# with the flags of its run_experiment.sh, one workload at a time, and summarises each log with
# `python -m scheduler.formats.sia_reference`. Usage: run_sia_simulator.sh SIA_SIMULATOR_DIR VENV_PYTHON OUT_DIR WORKLOAD...
# (WORKLOAD relative to SIA_SIMULATOR_DIR, e.g. workloads/philly/workload-1.csv; its traces/ and workloads/
# are the files under <shared data>/sia/.) The venv needs numpy 1.23-1.26, pandas<2 (the code uses
# DataFrame.append), scipy 1.11, cvxpy 1.3 with CBC (cylp), autograd, pymoo 0.4.2.1, rich, psutil.
set -euo pipefail
sim=$1; py=$2; out=$3; shift 3
repo=$(cd "$(dirname "$0")/../../.." && pwd)
mkdir -p "$out"
for w in "$@"; do
  tag=$(basename "$(dirname "$w")")-$(basename "$w" .csv)
  (cd "$sim" && "$py" multi_simulator.py "$w" --policy=sia --policy_p_val=-0.5 --mip_lambda_a=0.01 \
      --mip_lambda_n=1.1 --interval=60 --project_throughput --share_max_replicas --output="$out/sia-$tag.log" \
      > "$out/sia-$tag.stdout" 2>&1)
  (cd "$sim" && "$py" multi_simulator.py "$w" --policy=gavel --interval=360 --output="$out/gavel-$tag.log" \
      > "$out/gavel-$tag.stdout" 2>&1)
  PYTHONPATH="$repo" python -m scheduler.formats.sia_reference "$out/sia-$tag.log" "$out/gavel-$tag.log"
done
