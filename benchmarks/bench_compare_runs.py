"""Wall time of a real ``gameday compare``, as figures (not a test).

Runs the command as a user does (``python -m orchestrator.cli compare``, its progress
bar on this terminal, a local Ray started by the command itself, the tables and the
report written to a temporary directory, removed afterwards) for the us-east-1-2021
playbook: 5 runbooks (none, historical, protect-early, shed-load, restart-devices) x 20
seeds, 100 runs at the playbook's duration (12 h), and prints, measured in the same run:
  - one bare in-process run of the same duration (``orchestrator.run``, runbook
    historical, seed 1) in this process, before the comparison, with its run directory
    and then without one, as the comparison plays its runs (the ideal below uses that one)
  - the comparison's wall time (the whole command: start-up, Ray, the runs, the
    statistics and the report), its runs per second and seconds per run per core
  - the ideal time on this machine's cores (runs x bare run / CPUs) and the comparison's
    overhead against it: what the comparison machinery, Ray and the statistics cost
    beyond the runs themselves (issue 17's goal: the 100 runs in under 5 minutes on this
    2-core machine)

  - with --again, the same comparison once more with one seed more, through a cache of
    runs (``--cache``): how long a team waits for the table when it adds seeds (or changes
    one runbook) and compares again, against the first comparison
  - with --time-limit 5m, the comparison stopped at that limit (``--time-limit``): how many
    whole seeds a team gets in that time (the figures above then count the runs done)

    python benchmarks/bench_compare_runs.py [--runbooks none,historical,...] [--seeds 20] [--duration 12h] [--again]
    python benchmarks/bench_compare_runs.py --seeds 100 --time-limit 5m   # seeds in five minutes
    python benchmarks/bench_compare_runs.py --seeds 1 --runbooks none,historical --duration 10m   # a smoke test

The comparison uses the Ray at RAY_ADDRESS if that is set, as ``gameday compare`` does;
the ideal assumes this machine's CPUs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import orchestrator  # noqa: E402
from orchestrator.runs.runner import RunSpec, execute  # noqa: E402
from reports.timefmt import format_duration, parse_duration  # noqa: E402

PLAYBOOK = "us-east-1-2021"
RUNBOOKS = "none,historical,protect-early,shed-load,restart-devices"


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runbooks", default=RUNBOOKS, help=f"comma-separated (default: {RUNBOOKS})")
    ap.add_argument("--seeds", type=int, default=20, help="seeds 1..N for every runbook (default: 20)")
    ap.add_argument("--duration", default=None, help="simulated time of every run (default: the playbook's, 12h)")
    ap.add_argument("--again", action="store_true",
                    help="both comparisons through a cache of runs, then once more with one seed more")
    ap.add_argument("--time-limit", default=None, help="stop the comparison at this wall-clock time (e.g. 5m)")
    a = ap.parse_args()
    runbooks = [r.strip() for r in a.runbooks.split(",") if r.strip()]
    if not runbooks:
        ap.error("--runbooks: at least one")
    if a.seeds < 1:
        ap.error("--seeds: at least 1")
    n = len(runbooks) * a.seeds
    ncpu = cpus()

    tmp = Path(tempfile.mkdtemp(prefix="bench-compare-runs-"))
    try:
        t0 = time.perf_counter()
        bare = orchestrator.run(PLAYBOOK, runbook="historical", seed=1, duration=a.duration, out=tmp / "bare")
        bare_s = time.perf_counter() - t0
        sim = format_duration(float(bare.meta["duration_s"]))
        print(f"bare in-process run ({PLAYBOOK}, historical, seed 1, {sim} simulated): {bare_s:.2f} s "
              f"(engine {float(bare.meta['wall_seconds']):.2f} s)", flush=True)

        t0 = time.perf_counter()
        execute(RunSpec(PLAYBOOK, runbook="historical", seed=1, duration=parse_duration(a.duration) if a.duration else None),
                None)
        bare_s = time.perf_counter() - t0  # what a comparison's run is: no run directory
        print(f"the same run without a run directory, as a comparison plays it: {bare_s:.2f} s", flush=True)

        wall, done = comparison(runbooks, a.seeds, a.duration, tmp / "compare", tmp / "cache" if a.again else None,
                                a.time_limit)
        again = comparison(runbooks, a.seeds + 1, a.duration, tmp / "again", tmp / "cache")[0] if a.again else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\ngameday compare {PLAYBOOK}: {len(runbooks)} runbooks x {a.seeds} seeds = {n} runs of "
          f"{sim} simulated, on {ncpu} CPUs")
    if a.time_limit:
        print(f"  time limit {a.time_limit}: {len(done) // len(runbooks)} whole seeds, {len(done)} runs, in the table")
    n = len(done)
    ideal = n * bare_s / ncpu
    print(f"  wall {wall:.1f} s: {n / wall:.3f} runs/s, {wall * ncpu / n:.2f} s per run per core "
          f"(bare run {bare_s:.2f} s)")
    print(f"  ideal on {ncpu} CPUs (runs x bare run / CPUs): {ideal:.1f} s; the comparison took "
          f"{wall / ideal:.2f}x that, {wall - ideal:+.1f} s of overhead")
    if again is not None:
        print(f"  again with {a.seeds + 1} seeds through the cache ({n} runs taken from it, {len(runbooks)} played): "
              f"wall {again:.1f} s, {wall / again:.1f}x faster than the first comparison")


def comparison(runbooks: list[str], seeds: int, duration: str | None, out: Path, cache: Path | None,
               time_limit: str | None = None) -> tuple[float, list[str]]:
    """The wall time of ``gameday compare`` run as a user runs it, and its results' rows."""
    cmd = [sys.executable, "-m", "orchestrator.cli", "compare", PLAYBOOK, "--seeds", str(seeds), "--fixed", "--progress",
           "--out", str(out)]
    for rb in runbooks:
        cmd += ["--runbook", rb]
    if duration is not None:
        cmd += ["--duration", duration]
    if cache is not None:
        cmd += ["--cache", str(cache)]
    if time_limit is not None:
        cmd += ["--time-limit", time_limit]
    print(f"\n$ python {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT)  # stdout and stderr (the progress bar) on this terminal
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"gameday compare failed (exit status {done.returncode})")
    return wall, (out / "results.csv").read_text(encoding="utf-8").splitlines()[1:]


if __name__ == "__main__":
    main()
