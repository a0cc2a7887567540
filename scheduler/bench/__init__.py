"""``colocate bench``: :mod:`.scheduler` (one ILP round, with and without packing; :mod:`.rounds` its steady
state), :mod:`.simulator` (time to simulate a workload) and :mod:`.serve` (the live scheduler's round latency)."""
