"""The metastability threshold table (not a test): the single-server queue of Alvaro,
Isaacs, Majumdar et al. (arXiv 2510.03551) at lambda = 9.5/s, mu = 10/s, a queue of 100
and 4 attempts, for each client timeout tau:

  (a) after a stressor (200 s at 9.5/s, 200 s at 20/s, then 9.5/s again): the share of
      seeds whose queue gets back under 10 within 10,000 s of the stressor's end, and the
      quartiles of the time it takes (runs that stay stuck count as infinitely long);
  (b) from an empty queue, the share of the time with more than 90 requests queued,
      averaged over the seeds;

for the exact per-request simulation (tests/reference_queue_des.py), gameday's cohort
model (tests/playbooks/metastable_queue.yaml.j2) at each tick, and the published
chain's own figures (which approximate timeouts, so they give the shape, not the
numbers). tests/test_metastable_threshold.py checks tau = 7, 9 and 15 s with fewer seeds.

    python benchmarks/threshold_table.py [--seeds 20] [--share-seeds 10] [--taus 5,7,9,11,15]
                                         [--ticks 1s,0.25s] [--share-horizon 20000] [--exact-only]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import numpy as np  # noqa: E402

import reference_queue_des as des  # noqa: E402

#: The published chain's figures at lambda = 9.5/s (arXiv 2510.03551).
PUBLISHED = {5: "stuck", 9: "bimodal, P(queue >= 90) ~ 0.55, ~3,400 s from a full queue to under 10", 15: "~150 s"}


def fmt(s: dict) -> str:
    def t(x):
        return "inf" if not np.isfinite(x) else f"{x:.0f}"
    return f"{s['recovered']:.0%} back; median {t(s['median'])} s (IQR {t(s['q1'])}-{t(s['q3'])})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20, help="seeds per tau for (a)")
    ap.add_argument("--share-seeds", type=int, default=10, help="seeds per tau for (b)")
    ap.add_argument("--taus", default="5,7,9,11,15")
    ap.add_argument("--ticks", default="1s,0.25s", help="the cohort model's ticks")
    ap.add_argument("--share-horizon", type=float, default=20_000.0)
    ap.add_argument("--exact-only", action="store_true", help="only the exact simulation")
    args = ap.parse_args()
    taus = [float(t) for t in args.taus.split(",")]
    ticks = [] if args.exact_only else args.ticks.split(",")
    if ticks:
        from test_metastable_threshold import cohort_recovery_time, cohort_share_above, summary
    else:
        from test_metastable_threshold import summary
    print(f"lambda = 9.5/s, mu = 10/s, queue 100, 4 attempts; (a) {args.seeds} seeds, "
          f"(b) {args.share_seeds} seeds over {args.share_horizon:.0f} s")
    for tau in taus:
        t0 = time.perf_counter()
        rows = [("exact simulation", summary([des.recovery_time(tau, s) for s in range(args.seeds)]),
                 np.mean([des.share_above(tau, s, horizon=args.share_horizon) for s in range(args.share_seeds)]))]
        for tick in ticks:
            rows.append((f"cohort model, tick {tick}",
                         summary([cohort_recovery_time(tau, s, tick) for s in range(1, args.seeds + 1)]),
                         np.mean([cohort_share_above(tau, s, tick, args.share_horizon)
                                  for s in range(1, args.share_seeds + 1)])))
        print(f"\ntau = {tau:g} s  ({time.perf_counter() - t0:.0f} s wall)")
        for name, rec, share in rows:
            print(f"  {name:<26} (a) {fmt(rec):<46} (b) above 90: {share:.3f}")
        if int(tau) in PUBLISHED:
            print(f"  {'published chain':<26} {PUBLISHED[int(tau)]}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
