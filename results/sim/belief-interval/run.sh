#!/bin/bash
# The belief sweep at the new exploration rule's defaults (results/sim/belief-interval/NOTES.md), one process at a
# time. With RERUN=predicted,none the sia and truth runs already in w1/ and w2/ are read, not re-run (the rule
# does not touch them).
cd "$(dirname "$0")/../../.."
S=../shared/data/sia/workloads
export PYTHONPATH=$PWD
python=/work/venv/bin/python
rerun=${RERUN:+--rerun $RERUN}
$python scripts/belief_sweep.py --out results/sim/belief-interval/w1 --replicates 3 --loads 0.5,1,2,3 \
    --workloads $S/philly/workload-1.csv,$S/saturn/workload-1.csv --beliefs truth,predicted,none $rerun
$python scripts/belief_sweep.py --out results/sim/belief-interval/w2 --replicates 3 --loads 1,2 \
    --workloads $S/philly/workload-2.csv,$S/saturn/workload-2.csv --beliefs truth,predicted,none $rerun
