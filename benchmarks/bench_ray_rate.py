"""Tick rate of the 2021 world hosted on Ray against the same world in process, as
figures (not a test).

Prints, measured in the same run and interleaved (in process, then on Ray, for each
placement in turn, over --repeats; the best of the repeats):
  - simulated ticks per wall second of the us-east-1-2021 world (historical runbook,
    seed 1, --duration 1h at 1 s ticks) in process (``orchestrator.run``)
  - the same of the world hosted on Ray actors (``hosting="ray"``, snapshots at their
    default interval) for each placement (--placements kind,agent,single), with the
    number of actors
  - the ratio Ray / in process for each placement (issue 17's goal: at least 0.5, or
    what bounds it; bench_fabric.py's goal is a Ray-hosted tick rate of at least 1/20 of
    the raw ZeroMQ round-trip rate). The default hour holds the trigger and the start of
    the storm (the first half hour alone is calm, and cheaper in process)

The rate is (meta ``duration_s`` / meta ``tick_s``) / meta ``wall_seconds``: the run's
ticks, without starting the actors. Ray itself is started (``ensure_ray``, as ``gameday``
does) and warmed up with a short run before anything is measured.

    python benchmarks/bench_ray_rate.py [--duration 1h] [--placements kind,agent,single] [--repeats 1]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orchestrator  # noqa: E402
from orchestrator.hosting.ray_hosting import PLACEMENTS, ensure_ray, place  # noqa: E402
from orchestrator.runs.runner import RunSpec, prepare  # noqa: E402
from reports.timefmt import parse_duration  # noqa: E402

PLAYBOOK = "us-east-1-2021"


def tick_rate(tmp: Path, duration: str, **hosting) -> float:
    """Simulated ticks per wall second of one run (the engine's wall time)."""
    out = Path(tempfile.mkdtemp(prefix="run-", dir=tmp)) / "run"
    r = orchestrator.run(PLAYBOOK, runbook="historical", seed=1, duration=duration, out=out, **hosting)
    shutil.rmtree(out.parent, ignore_errors=True)
    return float(r.meta["duration_s"]) / float(r.meta["tick_s"]) / float(r.meta["wall_seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", default="1h")
    ap.add_argument("--placements", default="kind,agent,single", help=f"comma-separated, of {', '.join(PLACEMENTS)}")
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()
    placements = list(dict.fromkeys(p.strip() for p in a.placements.split(",") if p.strip()))
    bad = [p for p in placements if p not in PLACEMENTS]
    if bad or not placements:
        ap.error(f"--placements: {', '.join(bad) or 'none given'}; choose from {', '.join(PLACEMENTS)}")
    if a.repeats < 1:
        ap.error("--repeats: at least 1")
    _, _, _, plan = prepare(RunSpec(playbook=PLAYBOOK, runbook="historical", duration=parse_duration(a.duration)))

    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-rate-"))
    try:
        t0 = time.perf_counter()
        ray = ensure_ray(None)
        print(f"ray.init: {time.perf_counter() - t0:.1f} s; CPUs: {ray.cluster_resources().get('CPU')}")
        t0 = time.perf_counter()
        tick_rate(tmp, "1m", hosting="ray", placement=placements[0])  # warm up: Ray's workers, the imports
        print(f"warm-up run on Ray (1m, placement {placements[0]}): {time.perf_counter() - t0:.1f} s", flush=True)

        inproc: dict[str, list[float]] = {p: [] for p in placements}
        hosted: dict[str, list[float]] = {p: [] for p in placements}
        for _ in range(a.repeats):
            for p in placements:
                inproc[p].append(tick_rate(tmp, a.duration))
                hosted[p].append(tick_rate(tmp, a.duration, hosting="ray", placement=p))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{PLAYBOOK}, historical runbook, {a.duration} at {plan.info.dt:g} s ticks ({plan.ticks} ticks); "
          f"simulated ticks per wall second, best of {a.repeats}:")
    print(f"  {'placement':>9}  {'actors':>6}  {'in process':>10}  {'on Ray':>8}  Ray / in process")
    for p in placements:
        ip, rr = max(inproc[p]), max(hosted[p])
        print(f"  {p:>9}  {len(place(plan, p)):>6}  {ip:10.0f}  {rr:8.0f}  {rr / ip:.3f} (1/{ip / rr:.0f})")
    every = [r for rs in inproc.values() for r in rs]
    print(f"in process over all its runs: {min(every):.0f} to {max(every):.0f} ticks/s (machine noise)")
    ray.shutdown()


if __name__ == "__main__":
    main()
