"""An exact simulation of a cache in front of a store, key by key and in continuous time,
to check the model of ``agents/cache.py`` (which tracks popularity buckets, not keys, tick
by tick) against: Poisson lookups, a fixed store latency in seconds, a TTL in seconds,
random replacement, optional coalescing of the misses of a key whose store request is in
flight. Checked against closed forms in tests/test_reference_cache_continuous.py. Nothing
of gameday is used here.
"""
from __future__ import annotations

import random
from collections import deque

import numpy as np


def zipf_shares(keys: int, s: float) -> np.ndarray:
    w = np.arange(1, keys + 1, dtype=float) ** -s
    return w / w.sum()


def simulate_continuous(keys: int, s: float, rate: float, duration_s: float, size: int | None = None,
                        ttl_s: float | None = None, latency_s: float = 0.005, coalesce: bool = False,
                        warmup_s: float = 0.0, seed: int = 1, keep_lapsed: bool = False) -> dict:
    """The same cache in continuous time, event by event: its hit ratio and store request rate.

    Lookups arrive as a Poisson process of ``rate`` a second, each for a key drawn from the
    Zipf popularity (key k of 1..``keys`` weighs k^-s). A lookup hits if its key holds a
    fresh value at that instant. A miss asks the store, which answers exactly ``latency_s``
    seconds later (always well); the answer stores the key, fresh for exactly ``ttl_s``
    seconds from then (None: until it is evicted). Storing a key the cache does not hold
    while it holds ``size`` keys (None: no limit) first evicts one held key drawn uniformly
    (random replacement). A key whose value has lapsed is no longer held: it takes no room
    and cannot be drawn for eviction; with ``keep_lapsed`` its value stays held (stale, as
    gameday's cache keeps it for serve-stale) until it is evicted, and takes room. While a request for a key is in flight a
    further miss of it asks the store again, unless ``coalesce``: then it waits for the
    answer in flight (a miss all the same, which sends nothing). An answer for a key already
    held (a second answer of the same fill, uncoalesced) refreshes it: fresh for ``ttl_s``
    from then. Answers due after ``duration_s`` are dropped with the run.

    Returns ``hit_ratio`` (hits over the lookups at or after ``warmup_s``), ``store_rate``
    (store requests sent at or after ``warmup_s``, per second of ``duration_s - warmup_s``)
    and ``lookups`` (those counted). The loop is event-driven: the arrivals (gaps and keys
    drawn in numpy blocks) in time order, with the answers due by then applied first; as
    the latency is fixed, the answers in flight are a FIFO queue.
    """
    if latency_s < 0 or rate <= 0 or not 0 <= warmup_s < duration_s:
        raise ValueError("needs latency_s >= 0, rate > 0 and 0 <= warmup_s < duration_s")
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    cdf = np.cumsum(zipf_shares(keys, s))
    cdf[-1] = 1.0
    bounded = size is not None and size < keys
    cap = size if bounded else keys
    ttl = float("inf") if ttl_s is None else float(ttl_s)
    lapsing = bounded and ttl_s is not None and not keep_lapsed  # lapsed keys must leave the held list
    d = float(latency_s)
    fresh_until = [-1.0] * keys  # the instant a key's value lapses; -1: not held
    held: list[int] = []  # the keys held (bounded caches only), for a uniform draw
    where = [-1] * keys  # a key's index in held; -1: not in it
    lapses_t: deque[float] = deque()  # (bounded, with a TTL) lapse instants in store order ...
    lapses_k: deque[int] = deque()  # ... and their keys; an entry a refresh or eviction outdated is skipped
    due_t: deque[float] = deque()  # answers in flight, in the order they are due: instants ...
    due_k: deque[int] = deque()  # ... and keys
    asking = bytearray(keys)  # (coalesce) 1 while a request for the key is in flight
    hits = lookups = requests = 0

    def drop(key: int) -> None:
        """The key is no longer held (the last held key takes its place in the list)."""
        i, last = where[key], held.pop()
        if last != key:
            held[i] = last
            where[last] = i
        where[key] = -1
        fresh_until[key] = -1.0

    t = 0.0
    block = max(1024, min(1 << 17, int(rate * duration_s) + 1))
    while True:
        times = t + np.cumsum(rng.exponential(1.0 / rate, block))
        asked = np.searchsorted(cdf, rng.random(block), side="right")
        np.minimum(asked, keys - 1, out=asked)
        for t, k in zip(times.tolist(), asked.tolist()):
            if t >= duration_s:
                break
            while due_t and due_t[0] <= t:  # the answers due by now, in order
                ta = due_t.popleft()
                j = due_k.popleft()
                if coalesce:
                    asking[j] = 0
                if bounded:
                    if lapsing:  # lapsed keys are no longer held
                        while lapses_t and lapses_t[0] <= ta:
                            e = lapses_t.popleft()
                            g = lapses_k.popleft()
                            if fresh_until[g] == e and where[g] >= 0:
                                drop(g)
                    if where[j] < 0:
                        if len(held) >= cap:  # evict a held key drawn uniformly
                            drop(held[int(pick.random() * len(held))])
                        where[j] = len(held)
                        held.append(j)
                    if lapsing:
                        lapses_t.append(ta + ttl)
                        lapses_k.append(j)
                fresh_until[j] = ta + ttl
            counted = t >= warmup_s
            if fresh_until[k] > t:
                if counted:
                    hits += 1
                    lookups += 1
                continue
            if counted:
                lookups += 1
            if coalesce:
                if asking[k]:
                    continue  # waits for the answer in flight
                asking[k] = 1
            due_t.append(t + d)
            due_k.append(k)
            if counted:
                requests += 1
        else:
            continue
        break
    return {"hit_ratio": hits / lookups if lookups else float("nan"),
            "store_rate": requests / (duration_s - warmup_s), "lookups": lookups}
