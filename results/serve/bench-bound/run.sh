#!/usr/bin/env bash
# Round time of colocate serve at 1,000 jobs, before (main 84ca689) and after (issue-39), alternating.
export COLOCATE_SHARED_DATA=/work/shared/data
OUT=/work/wt-39/results/serve/bench-bound
for i in ${RUNS:-1 2 3}; do
  for side in base new; do
    if [ $side = base ]; then dir=/tmp/base39; else dir=/work/wt-39; fi
    echo "=== run $i $side $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT/bench.log
    (cd $dir && PYTHONPATH=$dir nice -n 10 /work/venv/bin/python -m colocate.cli bench serve --jobs 1000 --rounds 6) >> $OUT/bench.log 2>&1
  done
done
echo "=== done $(date -u +%H:%M:%S)" >> $OUT/bench.log
