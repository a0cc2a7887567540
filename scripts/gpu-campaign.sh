#!/usr/bin/env bash
# One GPU window (at most 10 minutes) of the thesis campaign: preflight, the GPU test suite (in the results
# directory's first window only: later windows give their whole budget to the grid), then one chunk of the
# grid within the remaining time, resumed from the results already committed under results/<gpu>/.
#
#   OUT=/some/dir scripts/gpu-campaign.sh [--budget S] [--spec FILE] [--skip-tests|--tests] [--device D] [--dry-run]
#
# The device image has python3, not python: PYTHON overrides it. The preflight (and with it the MPS probe,
# a private daemon and a test client) runs once per window.
#
# Everything the window produced lands in $OUT as at most 8 files:
#   preflight.txt     the preflight's checks, one line each, and `colocate env` (versions, devices)
#   preflight.json    the preflight as JSON (`colocate env --check --json`)
#   gpu-tests.txt     `pytest -m gpu` output (first window only; --tests forces, --skip-tests skips it)
#   campaign.log      the campaign's own output (progress, δ table, efficiency)
#   summary.txt       what this window did: runs done / planned, next step
#   results-<gpu>.tar.gz   results/<gpu>/<campaign>/ after this window (runs/jobs parquet + CSV, meta.json)
# To resume in the next window, unpack the tarball over the repository (it holds results/<gpu>/<campaign>/),
# commit it, and run this script again: runs already recorded are never measured twice.
#
# The campaign stops itself (SIGTERM → the run in flight is abandoned cleanly, workers stopped, our MPS daemon
# quit) when the budget is spent; every run before that is committed. --dry-run prints the plan and runs
# nothing on the device.
set -uo pipefail

BUDGET=570            # seconds for the whole script (a device call allows 600)
SPEC="scripts/thesis-grid.yaml"
TESTS=auto            # auto: only when the results directory has no runs yet (its first window)
DEVICE="cuda"
DRY_RUN=0
RESULTS_ROOT="${RESULTS_ROOT:-results}"
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    --spec) SPEC="$2"; shift 2 ;;
    --skip-tests) TESTS=no; shift ;;
    --tests) TESTS=yes; shift ;;
    --device) DEVICE="$2"; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    *) echo "gpu-campaign.sh: unknown argument '$1' (valid: --budget S, --spec FILE, --skip-tests, --tests, --device D, --dry-run)" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-out}"
mkdir -p "$OUT"
START=$(date +%s)
export PYTHONPATH="${PYTHONPATH:-$PWD}"
PY="${PYTHON:-python3}"
elapsed() { echo $(( $(date +%s) - START )); }

GPU=$($PY -c "from profiler.gpu.devices import resolve_device; print(resolve_device('$DEVICE').gpu_type)" 2>/dev/null || echo unknown)
NAME=$($PY -c "from profiler.campaign.spec import load_spec; print(load_spec('$SPEC').name)") || exit 2
DIR="$RESULTS_ROOT/$GPU/$NAME"
echo "device $DEVICE ($GPU); campaign $NAME from $SPEC; results $DIR; budget ${BUDGET}s" | tee "$OUT/summary.txt"

if [ "$DRY_RUN" = 1 ]; then
  $PY -m colocate.cli profile "$SPEC" --out "$DIR" --dry-run | tail -n 3 | tee -a "$OUT/summary.txt"
  # the estimate needs assumptions for the GPU type: a machine without one (a dry run elsewhere) uses the H100's
  $PY -m colocate.cli bench profiler --estimate "$SPEC" --gpu "$GPU" 2>/dev/null | tee -a "$OUT/summary.txt" \
    || { echo "(no estimate assumptions for $GPU: the H100's)" | tee -a "$OUT/summary.txt"
         $PY -m colocate.cli bench profiler --estimate "$SPEC" --gpu h100 | tee -a "$OUT/summary.txt"; }
  exit 0
fi

# 1. Preflight, run once (its MPS probe starts a daemon): JSON for tools, one line per check for people.
#    A failed preflight still lets the tests run (they say more).
$PY -m colocate.cli env --check --device "$DEVICE" --json > "$OUT/preflight.json" 2> "$OUT/preflight.txt"
{ $PY -c "import json, sys
report = json.load(open(sys.argv[1]))
for c in report['checks']:
    print(f\"{c['name']:<14} {({True: 'ok', False: 'FAIL', None: 'info'})[c['ok']]:<5} {c['detail']}\")
print('ready for GPU campaigns' if report['ok'] else 'not ready: see the FAIL rows')" "$OUT/preflight.json"
  echo; $PY -m colocate.cli env; } >> "$OUT/preflight.txt" 2>&1
READY=$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['ok'])" "$OUT/preflight.json" 2>/dev/null || echo unknown)
echo "preflight ok: $READY ($(elapsed)s used)" | tee -a "$OUT/summary.txt"

# 2. The GPU suite in the directory's first window only, bounded so the campaign keeps half the budget.
if [ "$TESTS" = auto ]; then
  [ -f "$DIR/runs.parquet" ] || [ -f "$DIR/runs.csv" ] && TESTS=no || TESTS=yes
fi
if [ "$TESTS" = yes ]; then
  TEST_BUDGET=$(( (BUDGET - $(elapsed)) / 2 ))
  timeout --signal=TERM --kill-after=20 "$TEST_BUDGET" $PY -m pytest -m gpu -q -rs tests/test_profiler_gpu.py \
    > "$OUT/gpu-tests.txt" 2>&1
  echo "gpu tests: exit $? ($(tail -n 1 "$OUT/gpu-tests.txt")), $(elapsed)s used" | tee -a "$OUT/summary.txt"
else
  echo "gpu tests: not run (not the first window of $DIR; --tests runs them)" | tee -a "$OUT/summary.txt"
fi

# 3. One chunk of the grid: resume from $DIR, stop (SIGTERM) when the budget is spent, keep 30 s to pack.
CAMPAIGN_BUDGET=$(( BUDGET - $(elapsed) - 30 ))
if [ "$CAMPAIGN_BUDGET" -gt 20 ]; then
  mkdir -p "$DIR"
  timeout --signal=TERM --kill-after=30 "$CAMPAIGN_BUDGET" $PY -m colocate.cli profile "$SPEC" --out "$DIR" \
    > "$OUT/campaign.log" 2>&1
  STATUS=$?
  [ "$STATUS" = 124 ] && echo "campaign: budget of ${CAMPAIGN_BUDGET}s spent (stopped; resumable)" | tee -a "$OUT/summary.txt" \
                      || echo "campaign: exit $STATUS" | tee -a "$OUT/summary.txt"
else
  echo "campaign: no time left in this window (${CAMPAIGN_BUDGET}s)" | tee -a "$OUT/summary.txt"
fi

# 4. Pack: what is done, what is left, and the results directory as one tarball.
$PY -m colocate.cli profile "$SPEC" --out "$DIR" --dry-run 2>/dev/null | tail -n 1 | tee -a "$OUT/summary.txt"
$PY - "$DIR" <<'EOF' | tee -a "$OUT/summary.txt"
import sys
from profiler.results.store import ResultsStore
store = ResultsStore(sys.argv[1])
runs = store.runs()
sessions = store.read_meta().get("sessions", [])
print("status counts:", runs["status"].value_counts().to_dict() if len(runs) else {})
if sessions:
    last = sessions[-1]
    print(f"this window: {last.get('runs_executed')} runs in {last.get('wall_s')} s, "
          f"efficiency {last.get('efficiency')}")
EOF
[ -d "$DIR" ] && tar -czf "$OUT/results-$GPU.tar.gz" "$DIR"
echo "next: unpack $OUT/results-$GPU.tar.gz at the repository root, commit $DIR, run this script again" \
  | tee -a "$OUT/summary.txt"
echo "total $(elapsed)s" | tee -a "$OUT/summary.txt"
