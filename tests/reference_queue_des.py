"""An exact discrete-event simulation of the metastable single-server queue of Alvaro,
Isaacs, Majumdar et al., "Formal Analysis of Metastable Failures in Software Systems"
(arXiv 2510.03551), one object per request, as a reference that does not come from
gameday's cohort model.

One server with exponential service times (rate ``mu``), a FIFO queue holding at most
``limit`` requests (the one in service included; an arrival to a full queue is rejected
at once), Poisson arrivals of fresh requests at a rate that may change over time. Each
client times out its attempt ``tau`` seconds after sending it and retries at once, also
at once after a rejection (so against a full queue all its attempts are refused in the
same instant), up to ``attempts`` attempts in all. The retry delay is an assumption: the
paper's chain has none of its own (its timed-out requests return from an orbit at rates
derived from the timeout and the retry count alone, an approximation of timeouts). The server still serves attempts whose client has given up: that work
is wasted, which is what keeps the queue full once it is full.

``queue_series`` returns the number of requests in the system sampled at every whole
second; ``recovery_time`` and ``share_above`` are the two measures the threshold test
and ``benchmarks/threshold_table.py`` compare with the cohort model.
"""
from __future__ import annotations

import heapq
from collections import deque

import numpy as np

MU = 10.0
LIMIT = 100
ATTEMPTS = 4
#: The stressor of the threshold check: (until second, arrival rate); the last rate holds.
STRESSOR = ((200.0, 9.5), (400.0, 20.0))
STRESSOR_END = 400.0

_ARRIVAL, _DONE, _TIMEOUT = 0, 1, 2


class _Attempt:
    __slots__ = ("left", "finished")

    def __init__(self, left: int):
        self.left = left  # attempts its request may still make after this one
        self.finished = False  # served, or given up on by its client


def queue_series(tau: float, seed: int, horizon: float, rates=((float("inf"), 9.5),), mu: float = MU,
                 limit: int = LIMIT, attempts: int = ATTEMPTS, stop_below: float | None = None,
                 stop_after: float = 0.0) -> np.ndarray:
    """Requests in the system at seconds 1, 2, ... up to ``horizon``. ``rates``: the
    arrival rate as (until second, rate) pieces, the last one holding to the horizon.
    ``stop_below``: end the series at the first sample after ``stop_after`` below it."""
    rng = np.random.default_rng(seed)
    block: list[float] = []

    def expo(scale: float) -> float:
        """``rng.exponential(scale)``: numpy draws it as scale x a standard exponential,
        which are drawn here a block at a time (the same values, in the same order)."""
        if not block:
            block.extend(rng.standard_exponential(4096)[::-1].tolist())
        return scale * block.pop()
    heap: list = []
    seq = 0  # ties in time are broken in the order the events were made
    queue: deque = deque()
    n_sys = 0
    samples: list[int] = []
    next_sample = 1.0
    pieces = list(rates)
    piece = 0
    rate = pieces[0][1]

    def send(now: float, left: int) -> None:
        """An attempt leaves its client: queued with its timeout set, or rejected (and
        retried at once while its request has attempts left)."""
        nonlocal n_sys, seq
        while n_sys >= limit:
            if left == 0:
                return
            left -= 1
        a = _Attempt(left)
        queue.append(a)
        n_sys += 1
        seq += 1
        heapq.heappush(heap, (now + tau, seq, _TIMEOUT, a))
        if n_sys == 1:
            seq += 1
            heapq.heappush(heap, (now + expo(1.0 / mu), seq, _DONE, None))

    def schedule_arrival(now: float) -> None:
        nonlocal seq
        if rate > 0:
            seq += 1
            heapq.heappush(heap, (now + expo(1.0 / rate), seq, _ARRIVAL, None))

    schedule_arrival(0.0)
    # Rate changes are events too: exponential gaps make restarting the arrival clock at
    # a change exact.
    if len(pieces) > 1:
        seq += 1
        heapq.heappush(heap, (pieces[0][0], seq, -1, None))
    while heap:
        now, _, kind, obj = heapq.heappop(heap)
        while next_sample <= now and next_sample <= horizon:
            samples.append(n_sys)
            if stop_below is not None and next_sample > stop_after and n_sys < stop_below:
                return np.array(samples)
            next_sample += 1.0
        if now > horizon:
            break
        if kind == _ARRIVAL:
            send(now, attempts - 1)
            schedule_arrival(now)
        elif kind == _DONE:
            queue.popleft().finished = True
            n_sys -= 1
            if n_sys:
                seq += 1
                heapq.heappush(heap, (now + expo(1.0 / mu), seq, _DONE, None))
        elif kind == _TIMEOUT:
            if not obj.finished:
                obj.finished = True  # the client gives up; the attempt stays queued, wasted work
                if obj.left:
                    send(now, obj.left - 1)
        else:  # the arrival rate changes: drop the pending arrival, draw afresh
            piece += 1
            rate = pieces[piece][1]
            heap = [e for e in heap if e[2] != _ARRIVAL]
            heapq.heapify(heap)
            schedule_arrival(now)
            if piece + 1 < len(pieces):
                seq += 1
                heapq.heappush(heap, (pieces[piece][0], seq, -1, None))
    while next_sample <= horizon:
        samples.append(n_sys)
        next_sample += 1.0
    return np.array(samples)


def recovery_time(tau: float, seed: int, lam: float = 9.5, within: float = 10_000.0, below: float = 10,
                  **kw) -> float | None:
    """Seconds from the end of the stressor (200 s at ``lam``, 200 s at 20/s, then ``lam``
    again) until the queue is sampled under ``below``; None if not within ``within``."""
    rates = ((STRESSOR[0][0], lam), (STRESSOR[1][0], STRESSOR[1][1]), (float("inf"), lam))
    s = queue_series(tau, seed, STRESSOR_END + within, rates, stop_below=below, stop_after=STRESSOR_END, **kw)
    t = len(s)  # the sample at second t is s[t - 1]
    return float(t - STRESSOR_END) if t > STRESSOR_END and s[-1] < below else None


def share_above(tau: float, seed: int, lam: float = 9.5, horizon: float = 20_000.0, level: float = 90,
                **kw) -> float:
    """Share of the seconds, from an empty queue over ``horizon``, with more than ``level``
    requests in the system."""
    s = queue_series(tau, seed, horizon, ((float("inf"), lam),), **kw)
    return float((s > level).mean())
