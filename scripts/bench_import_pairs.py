"""Benchmark ``colocate import-pairs`` on a generated pair table: wall and CPU seconds, peak memory.

    PYTHONPATH=. python scripts/bench_import_pairs.py --rows 100000 --types 64 [--no-matrices]

Rows pair random job types of one GPU type (``m{i}@8``) with random solo times and speeds. Prints one line
per run: rows, job types, whether matrices were asked for, the outcome (ok or the one-line error), seconds.
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_table(path: Path, rows: int, types: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    names = [f"m{i}@8" for i in range(types)]
    with path.open("w") as out:
        out.write("job_a,job_b,gpu_type,time_a,time_b,speed_a,speed_b\n")
        for _ in range(rows):
            a, b = rng.sample(names, 2)
            out.write(f"{a},{b},v100,{rng.uniform(0.01, 1):.4f},{rng.uniform(0.01, 1):.4f},"
                      f"{rng.uniform(0.1, 1):.3f},{rng.uniform(0.1, 1):.3f}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--types", type=int, default=64)
    parser.add_argument("--no-matrices", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        table = Path(work) / "pairs.csv"
        write_table(table, args.rows, args.types)
        argv = [sys.executable, "-m", "colocate.cli", "import-pairs", str(table), "--out", str(Path(work) / "out")]
        if args.no_matrices:
            argv.append("--no-matrices")
        began = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        wall = time.perf_counter() - began
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    outcome = "ok" if done.returncode == 0 else done.stderr.strip().splitlines()[-1][:160]
    print(f"rows {args.rows}, job types {args.types}, matrices {not args.no_matrices}: {outcome}; "
          f"wall {wall:.1f} s, CPU {usage.ru_utime + usage.ru_stime:.1f} s, peak RSS {usage.ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
