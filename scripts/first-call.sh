#!/usr/bin/env bash
# The first call on a GPU machine, in one 10-minute device call: what the GPU is set to, whether MPS and the
# workers' isolation really work there, then the five thesis models at batch 64 (solos and every pair,
# time-sliced and MPS, 2 repeats). Run from the repository root; see docs/profiler-first-call.md.
#
#   OUT=/some/dir scripts/first-call.sh [--budget S] [--spec FILE] [--device D]
#
# It installs nothing from the network. Missing optional packages are handled:
#   * pyarrow missing: the results are written as CSV only (the store converts them to Parquet on the next
#     read where pyarrow is installed);
#   * pytest missing: the GPU tests are skipped (said in summary.txt), unless its wheels were carried in
#     .whl/ (git-ignored; pass carry: [".whl"] to the device call): they are unpacked into a private folder.
# Everything lands in $OUT as at most 8 files:
#   nvidia-smi.txt   nvidia-smi -q -d COMPUTE,CLOCK (compute mode, clocks, applications clocks)
#   preflight.json   colocate env --check --json (the one MPS probe of this call)
#   env.txt          colocate env --json (versions, devices) and the preflight's error output
#   gpu-tests.txt    the MPS and isolation GPU tests (pytest -m gpu -k ...)
#   campaign.log     the campaign's output (progress, δ table)
#   summary.txt      what this call did, with the time each step took
#   results.tar.gz   results/<gpu>/first-call/ (tables, meta.json with the session's GPU UUID, host, driver)
set -uo pipefail

BUDGET=570
SPEC="scripts/first-call.yaml"
DEVICE="cuda"
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET="$2"; shift 2 ;;
    --spec) SPEC="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    *) echo "first-call.sh: unknown argument '$1' (valid: --budget S, --spec FILE, --device D)" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-out}"
RESULTS_ROOT="${RESULTS_ROOT:-results}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
START=$(date +%s)
elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
: > "$OUT/summary.txt"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

# 0. Carried wheels (optional): unpacked into a private folder put on PYTHONPATH (a wheel is a zip of what
#    pip would copy into site-packages; no pip, no network), never into the image's own Python.
if [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then
  SITE="${TMPDIR:-/tmp}/first-call-site"
  mkdir -p "$SITE"
  for wheel in .whl/*.whl; do $PY -m zipfile -e "$wheel" "$SITE" || say "could not unpack $wheel"; done
  export PYTHONPATH="$PYTHONPATH:$SITE"
  say "wheels unpacked from .whl/: $(cd .whl && ls *.whl | tr '\n' ' ')"
fi
HAVE=$($PY -c "
import importlib
present = []
for name in ('pytest', 'pyarrow', 'pynvml'):
    try:
        importlib.import_module(name)
        present.append(name)
    except ImportError:
        pass
print(' '.join(present))")
say "python: $($PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1); optional packages present: ${HAVE:-none}"

# 1. What the GPU is set to (compute mode, clocks), before anything of ours runs on it.
{ nvidia-smi -q -d COMPUTE,CLOCK; echo; nvidia-smi; } > "$OUT/nvidia-smi.txt" 2>&1
say "compute mode: $(grep -m1 'Compute Mode' "$OUT/nvidia-smi.txt" | sed 's/.*: //') ($(elapsed)s)"

# 2. Preflight, with the call's one MPS probe (a private daemon and a tiny client proven to join it).
$PY -m colocate.cli env --check --device "$DEVICE" --json > "$OUT/preflight.json" 2> "$OUT/env.txt"
READY=$($PY -c "import json, sys; r = json.load(open(sys.argv[1])); print(r['ok'], '|', '; '.join(
    c['name'] + ': ' + c['detail'] for c in r['checks'] if c['ok'] is False) or 'all checks passed')" \
    "$OUT/preflight.json" 2>&1 | head -c 600)
$PY -m colocate.cli env --json >> "$OUT/env.txt" 2>&1
say "preflight ok: $READY ($(elapsed)s)"

# 3. The MPS and isolation GPU tests (bounded: the campaign keeps the larger part of the call).
if case " $HAVE " in *" pytest "*) true ;; *) false ;; esac; then
  timeout --signal=TERM --kill-after=15 180 $PY -m pytest -m gpu -q -rs -p no:cacheprovider \
    tests/test_profiler_gpu.py -k "(mps or daemon) and not preflight" > "$OUT/gpu-tests.txt" 2>&1
  say "gpu tests: exit $? ($(tail -n 1 "$OUT/gpu-tests.txt")) ($(elapsed)s)"
else
  echo "pytest is not installed on this machine and no .whl/ folder carried it: GPU tests not run" \
    > "$OUT/gpu-tests.txt"
  say "gpu tests: not run (no pytest; carry it in .whl/, see docs/profiler-first-call.md)"
fi

# 4. The campaign: resumable; stopped cleanly (SIGTERM) when the budget is spent, 25 s kept for packing.
GPU=$($PY -c "from profiler.gpu.devices import resolve_device; print(resolve_device('$DEVICE').gpu_type)" 2>/dev/null || echo unknown)
NAME=$($PY -c "from profiler.campaign.spec import load_spec; print(load_spec('$SPEC').name)") || exit 2
DIR="$RESULTS_ROOT/$GPU/$NAME"
mkdir -p "$DIR"
LEFT=$(( BUDGET - $(elapsed) - 25 ))
if [ "$LEFT" -gt 20 ]; then
  timeout --signal=TERM --kill-after=20 "$LEFT" $PY -m colocate.cli profile "$SPEC" --out "$DIR" \
    >> "$OUT/campaign.log" 2>&1
  STATUS=$?
  [ "$STATUS" = 124 ] && say "campaign: the ${LEFT}s left were spent (stopped; resumable)" \
                      || say "campaign: exit $STATUS ($(elapsed)s)"
else
  say "campaign: no time left (${LEFT}s)"
fi

# 5. Pack: the results directory as one tarball, and a few lines on what it holds.
$PY - "$DIR" <<'EOF' 2>&1 | tee -a "$OUT/summary.txt"
import sys
from profiler.results.store import ResultsStore
store = ResultsStore(sys.argv[1])
runs = store.runs()
print("status counts:", runs["status"].value_counts().to_dict() if len(runs) else {})
if len(runs):
    groups = runs[(runs["status"] == "ok") & (runs["group_size"].astype(float) > 1)]
    for sharing, rows in groups.groupby("sharing"):
        print(f"{sharing}: {len(rows)} ok groups, delta median {rows['delta'].astype(float).median():.3f}")
    skipped = runs[runs["status"] != "ok"]
    for _, row in skipped.head(5).iterrows():
        print(f"  {row['run_id']}: {row['status']}: {str(row['error'])[:160]}")
sessions = store.read_meta().get("sessions", [])
if sessions:
    last = sessions[-1]
    print(f"session {last.get('session_id')}: {last.get('runs_executed')} runs in {last.get('wall_s')} s, "
          f"efficiency {last.get('efficiency')}")
EOF
[ -d "$DIR" ] && tar -czf "$OUT/results.tar.gz" "$DIR"
say "total $(elapsed)s; unpack results.tar.gz at the repository root to analyse or resume"
