"""How much an answer depends on the tick (#43): worlds whose figures have a reference or
should not move, played at 1 s, 0.5 s, 0.25 s and 0.1 s, each figure printed with its change
from the finest tick (and from its reference, where there is one). A measurement, not a test.

    python benchmarks/tick_convergence.py [--ticks 1,0.5,0.25,0.1] [--only mm1,cache,stampede] [--scenarios]

- M/M/1 at 95% (tests/playbooks/mm1_queue, half an hour): the mean wait in the queue; exactly 19 ms.
- A cache of 10,000 of 100,000 Zipf-1.0 keys at 5,000 lookups/s (random replacement): its
  hit ratio; the closed form for a store answering at once (tests/test_cache.random_replacement).
- The cache stampede of tests/test_cache.py (flushed at 00:05, its store's queue outlasting the
  cache's timeout), with its runbooks at 00:08 (more capacity, a throttle): when each broke the
  loop, and the clients' error-minutes; and the keys the cache holds in the collapse, beside
  the flush played lookup by lookup in continuous time (``flush_keys_held``).
- ``--scenarios``: when the built-in scenarios' historical runbooks break the loop, each run
  for its playbook's duration (slow: tens of seconds at 1 s ticks, ten times that at 0.1 s).
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import orchestrator  # noqa: E402
from test_cache import FIXES, FLUSH, random_replacement, stampede, world  # noqa: E402

MM1_WAIT_MS = 19.0  # rho / (mu - lambda) at 950 and 1,000 requests/s


def _play(playbook, tick: float, out: Path, **kw):
    """Play a playbook (a file, a built-in's name, or a dict written to a file first) at ``tick``."""
    if isinstance(playbook, dict):
        path = out.parent / f"{out.name}.yaml.j2"
        path.write_text(yaml.safe_dump(playbook), encoding="utf-8")
        playbook = str(path)
    kw.setdefault("runbook", "none")
    return orchestrator.run(playbook, tick=f"{tick}s", out=out, **kw)


def mm1(tick: float, out: Path) -> dict:
    r = _play(str(ROOT / "tests" / "playbooks" / "mm1_queue.yaml.j2"), tick, out, duration="30m")
    m = r.metrics.iloc[int(30 / tick):]  # after the first half minute
    return {"M/M/1 mean wait (ms)": float(m["api.queue_wait_s"].mean() * 1000)}


def cache_hits(tick: float, out: Path) -> dict:
    w = world({"keys": 100_000, "zipf": 1.0, "size": 10_000}, rate=5000, duration="15m")
    m = _play(w, tick, out).metrics
    late = m.iloc[int(600 / tick):]  # the last five minutes, the cache full
    return {"cache hit ratio": float((late["cache.offered"] * late["cache.hit_ratio"]).sum() / late["cache.offered"].sum())}


def _broken_min(score: dict) -> float:
    """Minutes from the start to the loop broken; inf: not broken; nan: no loop formed."""
    lb = score["loop_broken"]
    return math.nan if not score["loop_formed"] else lb["seconds_after_start"] / 60 if lb["reached"] else math.inf


def stampede_figures(tick: float, out: Path) -> dict:
    """The stampede's runbooks (tests/test_cache.py): when each broke the loop, and the clients' error-minutes."""
    out_ = {}
    for name in ("capacity", "throttle"):
        w = stampede(True, FLUSH, FIXES[name], duration="16m")
        w["scoring"] = {"loop": {"populations": ["clients"], "services": ["db"], "hold": "2m"}, "impact": {"clients": 1}}
        path = out.parent / f"{out.name}-{name}-runbook.yaml"
        path.write_text(yaml.safe_dump({"name": name, "rules": [{"when": {"at": "00:08"}, "do": "fix"}]}))
        run = _play(w, tick, out.parent / f"{out.name}-{name}", runbook=str(path))
        score = run.score
        if name == "capacity":  # (the runbooks act at 00:08: before, both runs are the same collapse)
            held = run.metrics["cache.cache_fill"].iloc[int(390 / tick)] * STAMPEDE_KEYS
            out_["stampede: keys held at 00:06:30"] = float(held)
        out_[f"stampede, {name}: loop broken (min)"] = _broken_min(score)
        out_[f"stampede, {name}: error-minutes"] = score["impact"]["error_minutes"]["clients"]
    return out_


STAMPEDE_KEYS = 100_000  # (tests/test_cache.stampede: a cache of every key, 5,000 lookups/s, a store of 1,000/s)


def flush_keys_held(seed: int, keys: int = STAMPEDE_KEYS, s: float = 1.0, rate: float = 5000.0, capacity: float = 1000.0,
                    limit: float = 3.0, timeout: float = 2.0, horizon: float = 6.0) -> int:
    """The stampede's flush in continuous time, lookup by lookup (nothing of gameday used):
    how many keys the cache holds once its store's queue has outgrown the cache's timeout.
    Poisson lookups of Zipf keys from the flush on; a miss asks the store (uncoalesced), a
    FIFO of deterministic service at ``capacity`` that refuses work beyond ``limit`` s; an
    answer within ``timeout`` stores its key then; a request timed out deletes its key at
    its timeout if the key was stored since it was asked (evict_on_error). Client retries
    are left out (they come after the first half second, when the queue already outlasts
    the timeout, and could only delete more keys): an upper bound."""
    rng = np.random.default_rng(seed)
    p = np.arange(1, keys + 1, dtype=float) ** -s
    n = rng.poisson(rate * horizon)
    times, picked = np.sort(rng.uniform(0.0, horizon, n)), rng.choice(keys, n, p=p / p.sum())
    stored_at = np.full(keys, np.inf)
    timed_out = []  # (heard at, key)
    backlog, last = 0.0, 0.0
    for t, k in zip(times.tolist(), picked.tolist()):
        backlog, last = max(0.0, backlog - (t - last)), t
        if stored_at[k] <= t or backlog > limit:  # a hit, or refused at once (nothing stored to delete)
            continue
        backlog += 1.0 / capacity
        if backlog <= timeout:
            stored_at[k] = min(stored_at[k], t + backlog)
        else:
            timed_out.append((t + timeout, k))
    deleted = {k for heard, k in timed_out if heard - timeout <= stored_at[k] <= heard}
    return int(np.isfinite(stored_at).sum()) - len(deleted)


def scenario_landmarks(tick: float, out: Path) -> dict:
    out_ = {}
    for name in ("us-east-1-2021", "us-east-1-2025", "us-east-1-2015"):  # (each for its playbook's duration)
        score = _play(name, tick, out / name, runbook="historical").score
        out_[f"{name} loop broken (min after start)"] = _broken_min(score)
    return out_


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", default="1,0.5,0.25,0.1", help="the ticks, in seconds, coarsest first")
    ap.add_argument("--scenarios", action="store_true", help="also the built-in scenarios' landmarks (slow)")
    ap.add_argument("--only", default="mm1,cache,stampede", help="which of the worlds: mm1, cache, stampede")
    args = ap.parse_args()
    ticks = [float(t) for t in args.ticks.split(",")]
    refs = {"M/M/1 mean wait (ms)": MM1_WAIT_MS,  # (the closed form of a cache whose store answers at once)
            "cache hit ratio": random_replacement(100_000, 1.0, 5000.0, 10_000, d=0)}
    if "stampede" in args.only:  # (the mean over seeds of the lookup-by-lookup flush: an upper bound)
        refs["stampede: keys held at 00:06:30"] = float(np.mean([flush_keys_held(seed) for seed in range(1, 6)]))
    worlds = {"mm1": mm1, "cache": cache_hits, "stampede": stampede_figures}
    measures = [worlds[w] for w in args.only.split(",") if w] + ([scenario_landmarks] if args.scenarios else [])
    figures: dict[str, dict[float, float]] = {}
    seconds: dict[float, float] = {}
    with tempfile.TemporaryDirectory(prefix="gameday-ticks-") as tmp:
        for tick in ticks:
            t0 = time.perf_counter()
            for i, measure in enumerate(measures):
                for k, v in measure(tick, Path(tmp) / f"t{tick}-{i}").items():
                    figures.setdefault(k, {})[tick] = v
            seconds[tick] = time.perf_counter() - t0
    finest = min(ticks)
    print(f"{'figure':44s}" + "".join(f"{f'{t:g} s':>16s}" for t in ticks) + f"{'reference':>12s}")
    for name, by_tick in figures.items():
        ref = refs.get(name)
        cells = []
        for t in ticks:
            v, base = by_tick[t], by_tick[finest]
            change = "" if t == finest or not math.isfinite(v) or not math.isfinite(base) or not base else \
                f" ({(v - base) / abs(base):+.0%})"
            cells.append("no loop" if math.isnan(v) else "not broken" if math.isinf(v) else f"{v:.4g}{change}")
        print(f"{name:44s}" + "".join(f"{c:>16s}" for c in cells) + (f"{ref:>12.4g}" if ref is not None else f"{'-':>12s}"))
    print(f"{'wall time (s)':44s}" + "".join(f"{seconds[t]:>16.1f}" for t in ticks))


if __name__ == "__main__":
    main()
