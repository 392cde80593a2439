"""Throughput of runbook comparisons, as figures (not a test).

Prints, measured in the same run: runs per second for N short runs of the 2021 world
as Ray tasks with 1 worker and with 2 workers, the parallel efficiency (goal: at least
0.85 on 2 cores), and the per-run overhead of a Ray task against a bare in-process run.

    python benchmarks/bench_compare.py [--runs 40] [--duration 30m]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orchestrator  # noqa: E402
from orchestrator.batch.comparison import compare  # noqa: E402
from orchestrator.hosting.ray_hosting import ensure_ray  # noqa: E402
from reports.timefmt import parse_duration  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--duration", default="30m")
    ap.add_argument("--playbook", default="us-east-1-2021")
    a = ap.parse_args()
    duration = parse_duration(a.duration)
    runbooks = ["none", "protect-early"] if a.playbook == "us-east-1-2021" else ["none"]
    seeds = max(1, a.runs // len(runbooks))
    n = seeds * len(runbooks)

    t0 = time.perf_counter()
    ray = ensure_ray(None)
    print(f"ray.init: {time.perf_counter() - t0:.1f} s; CPUs: {ray.cluster_resources().get('CPU')}")
    compare(a.playbook, runbooks, 2, duration=duration, max_workers=2)  # warm the workers up

    bare = []
    for seed in range(1, 4):
        t = time.perf_counter()
        orchestrator.run(a.playbook, runbook="none", seed=seed, duration=duration,
                         out=Path(tempfile.mkdtemp(prefix="bench-cmp-")) / "run")
        bare.append(time.perf_counter() - t)
    walls = {}
    tables = {}
    for workers in (1, 2):
        t = time.perf_counter()
        tables[workers] = compare(a.playbook, runbooks, seeds, duration=duration, max_workers=workers)
        walls[workers] = time.perf_counter() - t
    rate1, rate2 = n / walls[1], n / walls[2]
    print(f"{n} runs of {a.playbook}, {a.duration} each ({', '.join(runbooks)}; {seeds} seeds)")
    print(f"  bare in-process run: {statistics.mean(bare):.2f} s (mean of {len(bare)})")
    print(f"  1 worker:  {walls[1]:.1f} s, {rate1:.3f} runs/s; per run {walls[1] / n:.2f} s, "
          f"overhead against a bare run {walls[1] / n - statistics.mean(bare):+.2f} s")
    print(f"  2 workers: {walls[2]:.1f} s, {rate2:.3f} runs/s")
    print(f"  parallel efficiency: {rate2 / (2 * rate1):.2f} (goal >= 0.85)")
    print(f"  same table with 1 and 2 workers: {tables[1].equals(tables[2])}")


if __name__ == "__main__":
    main()
