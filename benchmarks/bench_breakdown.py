"""Where an in-process run's time goes, as figures (not a test).

Plays one scenario in process (default us-east-1-2021, historical runbook, 12 h) after
a 10-minute warm-up (its kernels loaded), with every agent class's ``step`` and the
engine's parts timed by ``time.perf_counter`` around each call, and prints:
  - per agent kind: steps, seconds, microseconds a step, share of the run
  - the engine's parts: the world's tick (every agent, messages routed), the scorer,
    the run directory's journal (``--no-directory``: none, as a comparison's runs)
  - wall time per simulated hour, in microseconds a tick (healthy hours against the
    hours in the loop)
  - with --profile N, a separate run under cProfile and its top N functions by own time

The timers cost about a microsecond a call: the run is slower than an untimed one
(its untimed wall time is not measured here; ``bench_core.py`` measures that).

    python benchmarks/bench_breakdown.py [--playbook us-east-1-2025] [--duration 3h] [--no-directory] [--profile 10]
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import agents  # noqa: E402
from orchestrator.engine import journal, scoring  # noqa: E402
from orchestrator.hosting import inprocess  # noqa: E402
from orchestrator.runs import runner  # noqa: E402
from reports.timefmt import parse_duration  # noqa: E402


class Timers:
    """Seconds and calls per label, of the methods ``wrap`` timed."""

    def __init__(self):
        self.seconds: collections.Counter = collections.Counter()
        self.calls: collections.Counter = collections.Counter()

    def wrap(self, owner, name: str, label: str) -> None:
        inner = getattr(owner, name)
        seconds, calls, clock = self.seconds, self.calls, time.perf_counter

        def timed(*args, **kwargs):
            start = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                seconds[label] += clock() - start
                calls[label] += 1

        setattr(owner, name, timed)


def play(spec: runner.RunSpec, directory: bool) -> None:
    out = Path(tempfile.mkdtemp(prefix="bench-breakdown-")) / "run" if directory else None
    try:
        runner.execute(spec, out)
    finally:
        if out is not None:
            shutil.rmtree(out.parent, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--playbook", default="us-east-1-2021")
    ap.add_argument("--duration", default="12h")
    ap.add_argument("--no-directory", action="store_true", help="play without a run directory, as a comparison does")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="also print cProfile's top N (a separate run)")
    a = ap.parse_args()
    spec = runner.RunSpec(playbook=a.playbook, duration=parse_duration(a.duration))
    play(runner.RunSpec(playbook=a.playbook, duration=600.0), directory=False)  # kernels loaded, caches warm

    if a.profile:
        prof = cProfile.Profile()
        prof.runcall(play, spec, not a.no_directory)
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(a.profile)
        print(text.getvalue())

    timers = Timers()
    for kind, cls in agents.AGENT_CLASSES.items():
        if "step" in vars(cls):
            timers.wrap(cls, "step", f"agent {kind}")
    timers.wrap(inprocess.InProcessHost, "step", "engine: the world's tick (agents and messages)")
    timers.wrap(scoring.Scorer, "update", "engine: scoring")
    timers.wrap(journal.RunWriter, "write_tick", "engine: journal (run directory)")
    ticks: list[float] = []
    finish = runner.WorldRun.finish

    def stamped(run):
        result = finish(run)
        ticks.append(time.perf_counter())
        return result

    runner.WorldRun.finish = stamped
    start = time.perf_counter()
    play(spec, not a.no_directory)
    wall = time.perf_counter() - start

    print(f"{a.playbook}, {a.duration}, in process, {'no run directory' if a.no_directory else 'with a run directory'}: "
          f"{wall:.2f} s timed ({len(ticks)} ticks)")
    print(f"{'part':48s} {'calls':>9s} {'seconds':>8s} {'us/call':>8s} {'share':>6s}")
    for label, seconds in sorted(timers.seconds.items(), key=lambda kv: (not kv[0].startswith("engine"), -kv[1])):
        calls = timers.calls[label]
        print(f"{label:48s} {calls:9d} {seconds:8.2f} {seconds / calls * 1e6:8.1f} {seconds / wall:6.1%}")
    hour = max(1, round(3600 / runner.prepare(spec)[3].info.dt))  # ticks in a simulated hour
    print("\nwall time per simulated hour (us a tick):")
    for h in range(0, len(ticks) - 1, hour):
        part = ticks[h:h + hour + 1]
        print(f"  hour {h // hour:2d}: {(part[-1] - part[0]) / (len(part) - 1) * 1e6:6.0f}")


if __name__ == "__main__":
    main()
