"""Leases with a time to live, held by a manager service and kept in a store service.

The manager renews each lease every ``renew_every``; a renewal needs the store and a
turn in the manager's work queue. A lease that misses renewals for ``ttl`` expires, and
the manager then tries to re-establish it every ``retry_every``, which costs
``reestablish_cost`` units of the manager's work. When the store comes back after an
outage longer than the TTL, every lease is expired at once: the re-establishment work
arrives together (thundering herd), and if it outgrows the queue's capacity each
attempt outwaits its own timeout and is retried, so none succeeds (see work_queue.py).

Leases are counted, not listed: ``missed[phase, k]`` is how many leases renew in
that phase of the renewal period and have missed their last ``k`` renewals.
"""
from __future__ import annotations

import math

import numpy as np

from .base import in_ticks
from .draws import Draws
from .shards import split_clients


class LeaseTable:
    def __init__(self, spec: dict, dt: float):
        self.count = int(spec["count"])
        self.store = spec["store"]
        self.period = in_ticks(spec["renew_every"], dt)
        self.max_missed = max(1, math.floor(float(spec["ttl"]) / (self.period * dt)))
        self.retry_chance = min(1.0, dt / float(spec["retry_every"]))
        self.timeout_s = float(spec["timeout"])
        self.cost = float(spec["reestablish_cost"])
        self.missed = np.zeros((self.period, self.max_missed), dtype=np.int64)
        self.missed[:, 0] = split_clients(self.count, self.period)  # as even over the phases as integers allow
        self.expired = 0

    @property
    def held_fraction(self) -> float:
        return 1.0 - self.expired / self.count if self.count else 1.0

    def due(self, tick: int, draws: Draws) -> tuple[int, int]:
        """(renewals, re-establishment attempts) the manager starts this tick."""
        renewals = int(self.missed[tick % self.period].sum())
        attempts = draws.binomial(self.expired, self.retry_chance) if self.expired else 0
        return renewals, attempts

    def settle(self, tick: int, draws: Draws, renewed: int, reestablished: int) -> int:
        """Record this tick's outcomes: ``renewed`` of the leases due were renewed (drawn
        among them at random); ``reestablished`` expired leases are held again. Returns
        the leases that expired."""
        row = self.missed[tick % self.period]
        new = np.zeros_like(row)
        ok = np.array(draws.split(row.tolist(), renewed), dtype=np.int64) if renewed else np.zeros_like(row)
        new[0] = int(ok.sum()) + reestablished
        new[1:] = (row - ok)[:-1]
        lapsed = int(row[-1] - ok[-1])
        self.missed[tick % self.period] = new
        self.expired += lapsed - reestablished
        return lapsed
