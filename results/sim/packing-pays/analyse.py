"""Per-round decision differences between runs of one workload (the ablation of NOTES.md).

python results/sim/packing-pays/analyse.py RUN_DIR [RUN_DIR ...]   (each a `colocate simulate --out` directory)
"""
import sys

import pandas as pd


def pair_events(alloc: pd.DataFrame) -> dict:
    """Pairs formed / split, and restarts that coincide with a change of partner."""
    prev: set = set()
    formed = split = 0
    lasting = []
    born = {}
    for r, grp in alloc.groupby("round"):
        pairs = {frozenset((j, p)) for j, p in zip(grp.job, grp.partner) if isinstance(p, str)}
        new, gone = pairs - prev, prev - pairs
        formed += len(new)
        active = set(grp.job)
        for pr in gone:
            if pr <= active:  # both still running or waiting: a split, not a finish
                split += 1
            lasting.append(r - born.pop(pr, r))
        for pr in new:
            born[pr] = r
        prev = pairs
    a = alloc.sort_values(["job", "round"])
    part = a.partner.fillna("")
    prev_part = part.groupby(a.job).shift().fillna("")
    changed = (part != prev_part) & ((part != "") | (prev_part != ""))
    restored = a.restore_s > 0
    return {"pairs formed": formed, "pairs split while both active": split,
            "pair rounds (mean life)": round(sum(lasting) / max(len(lasting), 1), 1),
            "restarts on a partner change": int((restored & changed).sum()),
            "restarts, all (allocation rows with a restore)": int(restored.sum())}


def main(dirs: list[str]) -> None:
    rows = {}
    jobs = {}
    for d in dirs:
        alloc = pd.read_parquet(f"{d}/allocations.parquet")
        rounds = pd.read_parquet(f"{d}/rounds.parquet")
        j = pd.read_parquet(f"{d}/jobs.parquet").set_index("job")
        jobs[d] = j
        ev = pair_events(alloc)
        ev["avg JCT s"] = round(j.jct_s.mean(), 1)
        ev["restarts (jobs)"] = int(j.restarts.sum())
        ev["rounds with a queue"] = int((rounds.waiting > 0).sum())
        ev["rounds"] = len(rounds)
        ev["mean waiting jobs"] = round(rounds.waiting.mean(), 2)
        ev["packed GPU-s"] = round(rounds.packed_gpu_s.sum())
        ev["packed jobs: rounds with none waiting"] = int(((rounds.packed_jobs > 0) & (rounds.waiting == 0)).sum())
        ev["jobs ever packed"] = int((j.packed_s > 0).sum())
        parts = d.rstrip("/").split("/")
        rows["/".join(parts[-4:-2:2] + parts[-1:]) if parts[-1] == "colocate" else parts[-1]] = ev
    print(pd.DataFrame(rows).to_string())
    if len(dirs) >= 2:
        a, b = jobs[dirs[0]], jobs[dirs[1]]
        diff = (a.jct_s - b.jct_s)
        packed = a.packed_s > 0
        print(f"\nJCT difference {dirs[0]} - {dirs[1]} per job, summed over jobs (s): total {diff.sum():.0f}; "
              f"jobs packed in the first: {diff[packed].sum():.0f} over {packed.sum()} jobs; "
              f"the others: {diff[~packed].sum():.0f}")
        extra_r = a.restarts - b.restarts
        print(f"restarts difference: packed jobs {extra_r[packed].sum()}, others {extra_r[~packed].sum()}")
        q = diff.sort_values()
        print("largest gains:", q.head(5).round(0).to_dict())
        print("largest losses:", q.tail(5).round(0).to_dict())


if __name__ == "__main__":
    main(sys.argv[1:])
