"""Per-round CPU and wall times of the alternating `colocate bench serve` runs in bench.log (base = main 84ca689,
new = issue-39): steady-state rounds 2-6, per run the median; then the mean of the runs' medians per side."""
import re
import statistics
import sys
from pathlib import Path

text = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("bench.log")).read_text()
runs = re.split(r"^=== run ", text, flags=re.M)[1:]
out: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
for block in runs:
    head, side = block.split()[0], block.split()[1]
    rows = [[float(x) for x in r] for r in re.findall(
        r"│\s+(\d+) │\s+\d+ │\s+([\d.]+) │\s+([\d.]+) │\s+([\d.]+) │\s+([\d.]+) │\s+([\d.]+) │\s+([\d.]+) │", block)]
    steady = [r for r in rows if r[0] >= 2]
    out[side].append({"run": int(head), "total_s": statistics.median(r[1] for r in steady),
                      "policy_cpu_s": statistics.median(r[5] for r in steady),
                      "bookkeeping_cpu_s": statistics.median(r[6] for r in steady),
                      "cpu_s": statistics.median(r[5] + r[6] for r in steady)})
for side, rows in out.items():
    for r in rows:
        print(f"{side} run {r['run']}: wall {r['total_s']:.3f} s, CPU policy {r['policy_cpu_s']:.3f} + bookkeeping "
              f"{r['bookkeeping_cpu_s']:.3f} = {r['cpu_s']:.3f} s")
means = {side: {k: statistics.mean(r[k] for r in rows) for k in ("total_s", "cpu_s", "policy_cpu_s", "bookkeeping_cpu_s")}
         for side, rows in out.items()}
for side, m in means.items():
    print(f"{side}: {len(out[side])} runs, mean of medians: wall {m['total_s']:.3f} s, CPU {m['cpu_s']:.3f} s "
          f"(policy {m['policy_cpu_s']:.3f}, bookkeeping {m['bookkeeping_cpu_s']:.3f})")
print(f"new / base: CPU {means['new']['cpu_s'] / means['base']['cpu_s']:.3f}, wall "
      f"{means['new']['total_s'] / means['base']['total_s']:.3f}")
