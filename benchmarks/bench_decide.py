"""How many runs a decision takes, as figures (not a test).

1. For each built-in scenario (or those named), the comparison of all its runbooks as
   ``gameday compare`` plays it by default (a race: Kim and Nelson's sequential selection
   on the playbook's primary outcome, at most 20 seeds), through the Python API in a
   local Ray: its wall time, the runs it used against a fixed 5 x 20 (runbooks x 20
   seeds), the verdict, and the share of ticks the seeds' shared beginnings saved.
2. Synthetic races whose truth is known (``reports.decide.Race`` itself, no runs): the
   probability of correct selection and the mean runs used, against two fixed designs:
   the two-stage design with the same guarantee and first stage (Bonferroni over the k - 1
   pairs with common random numbers: N = max(first, ceil((t S / delta)^2)) seeds for
   every runbook, t Student's 1 - alpha / (k - 1) quantile on first - 1 degrees of
   freedom, S^2 the largest variance of a pair's differences over the first stage), and
   the oracle: the fewest seeds with which picking the best sample mean selects the best
   at least 1 - alpha of the time, found with the true spread, which a real comparison
   does not know (the most any fixed design could save).

    python benchmarks/bench_decide.py                       # all three scenarios, then the races
    python benchmarks/bench_decide.py --scenario us-east-1-2021 --no-races
    python benchmarks/bench_decide.py --no-scenarios        # the races alone (a minute)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCENARIOS = ("us-east-1-2021", "us-east-1-2025", "us-east-1-2015")


def scenario(name: str) -> None:
    from orchestrator.batch.comparison import Decision, compare
    from orchestrator.playbook.files import find_playbook, runbook_files
    from orchestrator.playbook.loader import load_playbook
    from reports.compare_report import race_lines, shared_line

    pb = load_playbook(name, {})
    books = ["none", *[b for b in runbook_files(pb.name, find_playbook(name)) if b != "none"]]
    start = time.monotonic()
    df = compare(name, books, 20, decision=Decision())
    wall = time.monotonic() - start
    fixed = len(books) * 20
    print(f"\n{name}: {len(books)} runbooks ({', '.join(books)})")
    print(f"  wall time {wall:.0f} s; {len(df)} runs against {fixed} for a fixed {len(books)} x 20 "
          f"({len(df) / fixed:.0%})")
    for line in race_lines(df.attrs["race"]) + shared_line(df):
        print(f"  {line}", flush=True)


def _race(k: int, gaps, sigma: float, first: int, rng, dist: str, alpha: float = 0.05):
    from reports.decide import Race

    race = Race([f"r{i}" for i in range(k)], alpha=alpha, delta=1.0, first=first)
    while not race.decided:
        noise = _noise(dist, rng, k, sigma)  # (variance sigma^2)
        common = rng.normal(0, 5)  # common random numbers: shared by every runbook of a seed
        race.add({n: gaps[i] + noise[i] + common for i, n in enumerate(race.names) if n in race.alive})
    return race.best == "r0", sum(len(v) for v in race.values.values())


def _noise(dist: str, rng, shape, sigma: float) -> np.ndarray:
    if dist == "normal":
        return rng.normal(0, sigma, shape)
    if dist == "t3":
        return rng.standard_t(3, shape) * sigma / np.sqrt(3)
    return (rng.lognormal(0, 1, shape) - np.exp(0.5)) * sigma / np.sqrt((np.e - 1) * np.e)


def _two_stage(k: int, gaps, sigma: float, first: int, rng, dist: str, alpha: float = 0.05):
    """(correct, runs) of the two-stage design with the same first stage and guarantee."""
    from scipy.stats import t as student

    gaps = np.asarray(gaps)
    x = gaps + _noise(dist, rng, (first, k), sigma) + rng.normal(0, 5, (first, 1))
    s2 = max(np.var(x[:, i] - x[:, j], ddof=1) for i in range(k) for j in range(k) if i != j)
    n = max(first, int(np.ceil((student.ppf(1 - alpha / (k - 1), first - 1) ** 2) * s2)))  # (delta = 1)
    more = gaps + _noise(dist, rng, (n - first, k), sigma) + rng.normal(0, 5, (n - first, 1))
    means = np.vstack([x, more]).mean(axis=0)
    return int(means.argmin()) == 0, n * k


def _fixed_seeds(k: int, gaps, sigma: float, dist: str, rng, alpha: float = 0.05, trials: int = 4000) -> int:
    """The fewest seeds n with which the best sample mean of n is r0 in at least 1 - alpha."""
    gaps = np.asarray(gaps)
    for n in range(1, 400):
        means = gaps + _noise(dist, rng, (trials, n, k), sigma).mean(axis=1)
        if np.mean(means.argmin(axis=1) == 0) >= 1 - alpha:
            return n
    return 400


def races(count: int) -> None:
    from reports.decide import DEFAULT_FIRST

    rng = np.random.default_rng(7)
    print(f"\nsynthetic races ({count} each; 5 runbooks; the best better by delta = 1 in the first rows, "
          f"by 4 in the last; alpha 0.05; first stage {DEFAULT_FIRST} seeds)")
    print(f"{'outcomes':<10} {'spread':>6} {'gap':>4} {'P(correct)':>10} {'mean runs':>9} "
          f"{'two-stage (P)':>16} {'ratio':>6} {'oracle':>6} {'ratio':>6}")
    for dist in ("normal", "t3", "lognormal"):
        for sigma, gap in ((0.3, 1.0), (0.5, 1.0), (0.5, 4.0)):
            gaps = [0.0] + [gap] * 4
            results = [_race(5, gaps, sigma, DEFAULT_FIRST, rng, dist) for _ in range(count)]
            pcs = np.mean([r[0] for r in results])
            runs = np.mean([r[1] for r in results])
            two = [_two_stage(5, gaps, sigma, DEFAULT_FIRST, rng, dist) for _ in range(count)]
            two_runs, two_pcs = np.mean([r[1] for r in two]), np.mean([r[0] for r in two])
            fixed = 5 * _fixed_seeds(5, gaps, sigma, dist, rng)
            print(f"{dist:<10} {sigma:>6.1f} {gap:>4.0f} {pcs:>10.3f} {runs:>9.1f} {two_runs:>9.1f} ({two_pcs:.3f}) "
                  f"{runs / two_runs:>6.2f} {fixed:>6d} {runs / fixed:>6.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    ap.add_argument("--no-scenarios", action="store_true")
    ap.add_argument("--no-races", action="store_true")
    ap.add_argument("--races", type=int, default=2000, help="synthetic races per row")
    args = ap.parse_args()
    if not args.no_scenarios:
        for name in args.scenario or SCENARIOS:
            scenario(name)
    if not args.no_races:
        races(args.races)


if __name__ == "__main__":
    main()
