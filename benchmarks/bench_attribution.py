"""What attribution by counterfactual adds to a run's wall time, measured side by side
in one process: the run itself (in process, keeping the world's state at each action),
its counterfactuals from those states, and the same counterfactuals reached by playing
the recording again, which is what a Ray-hosted run's attribution costs; with ``--ray``
the same run is also hosted on Ray (a local Ray) to set that cost against its own.

    python benchmarks/bench_attribution.py [--playbook us-east-1-2021] [--runbook historical] [--ray]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from orchestrator.hosting.host import HostingOptions
from orchestrator.runs import attribution
from orchestrator.runs.runner import RunSpec, WorldRun


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--playbook", default="us-east-1-2021")
    ap.add_argument("--runbook", default="historical")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ray", action="store_true", help="also host the run on Ray and compare with it")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="gameday-bench-attribution-")) / "run"
    t0 = time.perf_counter()
    run = WorldRun(RunSpec(playbook=args.playbook, runbook=args.runbook, seed=args.seed), out, keep_action_states=True)
    while not run.done:
        run.step()
    run.close("complete")
    t_run = time.perf_counter() - t0
    t1 = time.perf_counter()
    kept = attribution.attribute(out, run.action_states)
    t_kept = time.perf_counter() - t1
    t2 = time.perf_counter()
    replayed = attribution.attribute(out)
    t_replay = time.perf_counter() - t2
    assert kept == replayed, "the two ways to reach the actions' states disagree"
    print(f"{args.playbook} / {args.runbook} / seed {args.seed}: {run.plan.ticks} ticks")
    print(f"  run (in process, states kept):        {t_run:7.1f} s")
    print(f"  counterfactuals from the kept states: {t_kept:7.1f} s  ({t_kept / t_run:.2f}x the run)")
    print(f"  counterfactuals by replaying:         {t_replay:7.1f} s  ({t_replay / t_run:.2f}x the run)")
    if args.ray:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
        t3 = time.perf_counter()
        run = WorldRun(RunSpec(playbook=args.playbook, runbook=args.runbook, seed=args.seed), out.with_name("ray"),
                       hosting=HostingOptions("ray"))
        try:
            while not run.done:
                run.step()
        finally:
            run.close("complete")
        t_ray = time.perf_counter() - t3
        print(f"  run hosted on Ray:                    {t_ray:7.1f} s  (its attribution, by replaying: "
              f"{t_replay / t_ray:.2f}x the run)")
    for c in kept["counterfactuals"]:
        print(f"    without {c['action']} ({c['took_effect']}): loop broken {c['loop_broken_without'] or 'not by'} "
              f"{'' if c['loop_broken_without'] else c['played_until']}")
    print(f"  {kept['text']}")


if __name__ == "__main__":
    main()
