"""An exact simulation of a cache in front of a store, key by key, to check the model of
``agents/cache.py`` (which tracks popularity buckets, not keys) against.

Requests arrive tick by tick, each for a key drawn from the Zipf popularity; a request
hits if its key's value is fresh at the start of its tick. A miss asks the store, and its
key is stored ``fill_ticks`` ticks later (the round trip), fresh for exactly ``ttl_ticks``.
A full cache makes room by evicting a key drawn uniformly from those it holds (random
replacement). Nothing of gameday is used here.
"""
from __future__ import annotations

import random

import numpy as np


def zipf_shares(keys: int, s: float) -> np.ndarray:
    w = np.arange(1, keys + 1, dtype=float) ** -s
    return w / w.sum()


def simulate(keys: int, s: float, rate: float, ticks: int, size: int | None = None, ttl_ticks: int | None = None,
             fill_ticks: int = 2, warmup: int = 0, seed: int = 1) -> float:
    """The hit ratio of the lookups after ``warmup`` ticks (``rate`` requests per tick, Poisson)."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    p = zipf_shares(keys, s)
    size = keys if size is None else size
    fresh_until: dict[int, int] = {}  # a held key -> the tick its value lapses (a huge number: never)
    held: list[int] = []  # the keys held, for a uniform draw
    where: dict[int, int] = {}  # key -> its index in held
    fills: dict[int, list[int]] = {}  # tick -> keys stored then
    hits = lookups = 0
    for t in range(ticks):
        for k in fills.pop(t, ()):
            if k not in where:
                if len(held) >= size:  # evict one drawn at random
                    i = pick.randrange(len(held))
                    gone = held[i]
                    held[i] = held[-1]
                    where[held[i]] = i
                    held.pop()
                    del where[gone], fresh_until[gone]
                where[k] = len(held)
                held.append(k)
            fresh_until[k] = t + ttl_ticks if ttl_ticks else 1 << 62
        n = rng.poisson(rate)
        asked = rng.choice(keys, size=n, p=p)
        missed = [int(k) for k in asked if fresh_until.get(int(k), -1) <= t]
        if t >= warmup:
            lookups += n
            hits += n - len(missed)
        if missed:
            fills.setdefault(t + fill_ticks, []).extend(missed)
    return hits / lookups
