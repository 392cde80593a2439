"""Speed of the in-process core, as figures (not a test).

Prints, measured side by side in one run:
  - simulated seconds per wall second for a full scenario (default us-east-1-2021,
    historical runbook, 12 h, 1 s ticks; --playbook us-east-1-2025 for the other)
  - wall time of the same scenario with client populations scaled to 10^3, 10^5 and 10^7
    clients in all, and the ratio largest / smallest (cohorts: the goal is at most 1.5)
  - peak memory (max RSS of this process)

Each size runs in a fresh child process so that the peak memory of one does not hide
another's; sizes are interleaved over repeats (--repeats) since this machine is noisy.

    python benchmarks/bench_core.py [--playbook us-east-1-2021] [--duration 12h] [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

SIZES = {"10^3": 1_000, "10^5": 100_000, "10^7": 10_000_000}
# The clients a size counts, at scale 1: in 2021 the two large (bugged) populations,
# 125,000; in 2025 every population, 11,300 (its 50,000 leases scale too). Each
# playbook's ``scale`` variable multiplies every population and every capacity, so each
# size plays the same incident.
COUNTED = {"us-east-1-2021": (125_000, "167,500 clients, 125,000 of them bugged"),
           "us-east-1-2025": (11_300, "11,300 clients, 50,000 leases")}


CHILD = r"""
import json, resource, sys, tempfile, time
import orchestrator
sets, duration, playbook = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
r = orchestrator.run(playbook, runbook="historical", duration=duration, sets=sets, out=tempfile.mkdtemp() + "/run")
wall = time.perf_counter() - t0
print(json.dumps({"wall": wall, "sim": r.meta["duration_s"], "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "loop_broken": r.score["loop_broken"].get("clock"), "engine_wall": r.meta["wall_seconds"]}))
"""


def run_child(sets: dict, duration: str, playbook: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(sets), duration, playbook], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--playbook", default="us-east-1-2021", choices=sorted(COUNTED))
    ap.add_argument("--duration", default="12h")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    counted, what = COUNTED[args.playbook]

    results: dict[str, list[dict]] = {k: [] for k in ["default"] + list(SIZES)}
    for _ in range(args.repeats):
        results["default"].append(run_child({}, args.duration, args.playbook))
        for name, total in SIZES.items():
            results[name].append(run_child({"scale": total / counted}, args.duration, args.playbook))

    def best(name: str) -> dict:
        return min(results[name], key=lambda r: r["wall"])

    d = best("default")
    print(f"full {args.playbook} scenario, historical runbook, {args.duration} at 1 s ticks ({what}):")
    print(f"  wall {d['wall']:.1f} s  ->  {d['sim'] / d['wall']:.0f} simulated s per wall s"
          f"  (loop broken {d['loop_broken']}, peak RSS {d['rss_mb']:.0f} MiB)")
    print("\nsame scenario at other sizes (the clients counted above; cost should not depend on it):")
    for name in SIZES:
        r = best(name)
        print(f"  {name:>5} clients: wall {r['wall']:6.1f} s   peak RSS {r['rss_mb']:5.0f} MiB   loop broken {r['loop_broken']}")
    ratio = best("10^7")["wall"] / best("10^3")["wall"]
    print(f"\nratio wall(10^7) / wall(10^3) = {ratio:.2f}   (goal <= 1.5)")
    print(f"10^7 clients, {args.duration}: {best('10^7')['wall']:.1f} s (guide: under 45 s for 12 h)")
    print(f"peak memory over all runs: {max(r['rss_mb'] for rs in results.values() for r in rs):.0f} MiB")
    print(f"this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; machine noise: best of {args.repeats}")


if __name__ == "__main__":
    main()
