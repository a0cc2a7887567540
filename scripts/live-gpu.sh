#!/usr/bin/env bash
# The live loop (serve → pack → measure → learn → re-plan) on one GPU, in one device window: a fixed queue of six zoo
# jobs through `colocate serve`, once with --policy sia (no packing) and once with colocate (under MPS, starting from
# the bundled H100 pairs), then a report.
#
#   OUT=/some/dir scripts/live-gpu.sh [--budget S] [--policy both|sia|colocate] [--job-s S] [--device cuda|cpu] [--dry-run]
#
# The queue (scripts/live_gpu.py): two ResNet-18, an SE-ResNet-18, a VGG-19 and a ResNet-50 at 224 px, each sized from
# the bundled H100 solo times (scheduler/data/solo-h100.csv) to run --job-s seconds alone, and `hog`, a ResNet-50 at
# batch 256 that declares 6 GB but needs ~25 GB: packed, it runs past its memory limit and must fail alone (`oom`)
# while its partner runs on. Both policies in one 540-s window leave ~25 s per job (--dry-run prints the estimate);
# for 60-90 s jobs run one policy per window (--policy sia, then --policy colocate in the next).
# --device cpu is the CI smoke test: the same six jobs as tiny_cnn at 32 px on one logical GPU, time-sliced.
# The device image has python3, not python: PYTHON overrides it.
#
# Everything lands in $OUT as at most 8 files:
#   summary.txt          per run: each job's JCT, makespan, GPU-busy time, restarts, every group with its measured
#                        ratios against the bundled table's, the memory limits in force, every OOM and split
#   report.json          the same as JSON
#   preflight.txt        the device (`colocate env`; nvidia-smi on a GPU)
#   serve-sia.log        the sia server's output
#   serve-colocate.log   the colocate server's output
#   states.tar.gz        both state directories (state.db, the jobs' logs and records, the group documents)
# --dry-run prints the queue and the GPU time estimated from the bundled H100 solo times; it needs no device.
set -uo pipefail

BUDGET=540            # seconds for the whole script (a device call allows 600)
POLICY=both
JOB_S=""
DEVICE="cuda"
DRY_RUN=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    --policy) POLICY="$2"; shift 2 ;;
    --job-s) JOB_S="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    *) echo "live-gpu.sh: unknown argument '$1' (valid: --budget S, --policy both|sia|colocate, --job-s S, --device cuda|cpu, --dry-run)" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cuda|cpu) ;; *) echo "live-gpu.sh: --device cuda or cpu, not '$DEVICE'" >&2; exit 2 ;; esac
case "$POLICY" in both|sia|colocate) ;; *) echo "live-gpu.sh: --policy both, sia or colocate, not '$POLICY'" >&2; exit 2 ;; esac
if [ "$BUDGET" -gt 540 ] 2>/dev/null; then echo "live-gpu.sh: --budget is at most 540 s (one device call)" >&2; exit 2; fi
OUT="${OUT:-out}"
mkdir -p "$OUT"
START=$(date +%s)
export PYTHONPATH="${PYTHONPATH:-$PWD}"
PY="${PYTHON:-python3}"
ARGS=(--device "$DEVICE" --policy "$POLICY" --budget "$BUDGET")
[ -n "$JOB_S" ] && ARGS+=(--job-s "$JOB_S")

if [ "$DRY_RUN" = 1 ]; then
  $PY scripts/live_gpu.py plan "${ARGS[@]}"
  exit $?
fi

{ $PY -m colocate.cli env 2>&1; [ "$DEVICE" = cuda ] && nvidia-smi 2>&1; } > "$OUT/preflight.txt"
# the jobs are sized for the whole budget (as --dry-run shows); the runs stop at what is left of it, less 20 s to pack
RUN_BUDGET=$(( BUDGET - ($(date +%s) - START) - 20 ))
timeout --signal=TERM --kill-after=20 $(( RUN_BUDGET + 30 )) \
  $PY scripts/live_gpu.py run "${ARGS[@]}" --deadline-s "$RUN_BUDGET" --out "$OUT" > "$OUT/run.log" 2>&1
STATUS=$?
if [ "$STATUS" != 0 ] || [ ! -s "$OUT/summary.txt" ]; then
  { echo "live_gpu.py exit $STATUS; its output:"; cat "$OUT/run.log"; } >> "$OUT/summary.txt"
fi
rm -f "$OUT/run.log"
[ -d "$OUT/work" ] && tar -czf "$OUT/states.tar.gz" -C "$OUT/work" . && rm -rf "$OUT/work"
echo "live-gpu: exit $STATUS, total $(( $(date +%s) - START ))s" | tee -a "$OUT/summary.txt"
exit "$STATUS"
