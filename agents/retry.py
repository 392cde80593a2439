"""Retry and back-off policies as delay distributions over timing-wheel slots.

A cohort of n clients failing at attempt k is spread over future slots by one
multinomial draw from the distribution returned by ``RetryPolicy.offsets``, so the
cost of a retry storm does not depend on how many clients take part in it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .base import in_ticks

BACKOFFS = ("none", "constant", "exponential")
JITTERS = ("none", "full", "equal", "decorrelated")
RECONNECT_ON = ("timeout", "reject")  # the request failures that can make a pooled client reconnect


@dataclass
class RetryPolicy:
    """A playbook's retry policy (its defaults are the playbook format's, orchestrator/playbook/format.py)."""
    backoff: str  # none: retry at once; constant: base; exponential: base * multiplier**k
    base: float  # seconds
    multiplier: float
    cap: float  # seconds, largest delay
    jitter: str
    max_attempts: int  # total attempts including the first; 0 = unlimited

    @classmethod
    def from_spec(cls, spec: dict) -> "RetryPolicy":
        return cls(
            backoff=spec["backoff"],
            base=float(spec["base"]),
            multiplier=float(spec["multiplier"]),
            cap=float(spec["cap"]),
            jitter=spec["jitter"],
            max_attempts=int(spec["max_attempts"]),
        )

    @property
    def brooker(self) -> bool:
        """Decorrelated jitter as Brooker defines it: each sleep drawn from the previous one."""
        return self.jitter == "decorrelated" and self.backoff == "exponential" and 0 < self.base < self.cap

    @property
    def at_once(self) -> bool:
        """Every retry is sent with no delay at all (no back-off, or a zero base)."""
        return self.backoff == "none" or self.base <= 0 or self.cap <= 0

    def attempt_classes(self) -> int:
        """Distinct attempt numbers worth tracking: after the cap is reached every later
        attempt behaves the same, so they share the last class."""
        if self.max_attempts:
            return self.max_attempts
        if self.brooker:
            return len(_decorrelated(self.base, self.cap)[1]) + 1
        if self.backoff != "exponential" or self.base <= 0:
            return 2
        k = 0
        while self.base * self.multiplier**k < self.cap and k < 30:
            k += 1
        return k + 2

    def nominal_delay(self, attempt: int) -> float:
        """Un-jittered delay before attempt ``attempt + 1`` (attempt counts from 0)."""
        if self.backoff == "none":
            return 0.0
        if self.backoff == "constant":
            return min(self.base, self.cap)
        return min(self.cap, self.base * self.multiplier**attempt)

    def delay_range(self, attempt: int) -> tuple[float, float]:
        """The interval the jittered delay is drawn from, uniformly (for Brooker's decorrelated
        jitter, the first sleep's: later ones grow from the previous, see ``draw``)."""
        d = self.nominal_delay(attempt)
        if self.jitter == "full":
            return 0.0, d
        if self.jitter == "equal":
            return d / 2, d
        if self.jitter == "decorrelated" and self.backoff != "none":
            # The first sleep of Brooker's recursion (and every one, without exponential growth).
            return min(self.base, self.cap), min(self.cap, 3 * self.base)
        return d, d

    def draw(self, attempt: int, u: float, previous: float | None = None) -> float:
        """One delay before attempt ``attempt + 1``, from a uniform draw ``u``; with Brooker's
        decorrelated jitter it grows from ``previous``, the sleep before this one (None: the first):
        sleep = min(cap, uniform(base, 3 * sleep))."""
        if self.brooker and previous is not None:
            return min(self.cap, self.base + u * (3 * max(previous, self.base) - self.base))
        lo, hi = self.delay_range(attempt)
        return lo + (hi - lo) * u

    def offsets(self, attempt: int, dt: float, lag: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Slots ahead (>= 1) and their probabilities for a retry after ``attempt``,
        where ``lag`` seconds of the delay have already passed (timeouts, round trip)."""
        if self.brooker and attempt > 0:
            return self._decorrelated_offsets(attempt, dt, lag)
        lo, hi = self.delay_range(attempt)
        lo, hi = lo - lag, hi - lag
        if hi - lo < 1e-9:
            slot = max(1, math.ceil(hi / dt - 1e-9))
            return np.array([slot]), np.array([1.0])
        first = max(1, math.ceil(lo / dt - 1e-9))
        last = max(first, math.ceil(hi / dt - 1e-9))
        slots = np.arange(first, last + 1)
        # Probability that a uniform delay in [lo, hi] lands in slot s, i.e. in ((s-1)dt, s*dt].
        left = np.maximum((slots - 1) * dt, lo)
        right = np.minimum(slots * dt, hi)
        probs = np.clip(right - left, 0.0, None)
        if probs.sum() <= 0:  # the whole delay already passed
            return np.array([first]), np.array([1.0])
        probs[0] += max(0.0, min(hi, 0.0) - lo)  # delay mass that has already elapsed goes to the first slot
        return slots, probs / probs.sum()

    def _decorrelated_offsets(self, attempt: int, dt: float, lag: float) -> tuple[np.ndarray, np.ndarray]:
        """Slots for the sleep before attempt ``attempt + 1`` under Brooker's recursion, from
        its distribution (piecewise uniform over a grid, plus the mass at the cap)."""
        edges, cdfs = _decorrelated(self.base, self.cap)
        cdf = cdfs[min(attempt, len(cdfs) - 1)]
        hi = min(self.cap, self.base * 3.0 ** (attempt + 1))
        first = max(1, math.ceil((self.base - lag) / dt - 1e-9))
        last = max(first, math.ceil((hi - lag) / dt - 1e-9))
        slots = np.arange(first, last + 1)
        bound = slots * dt + lag  # a sleep up to here falls in that slot (or earlier: the first)
        below = np.where(bound >= self.cap - 1e-9, 1.0, np.interp(bound, edges, cdf, left=0.0))
        probs = np.diff(below, prepend=0.0)
        keep = probs > 1e-12
        slots, probs = slots[keep], probs[keep]
        return slots, probs / probs.sum()


@lru_cache(maxsize=64)
def _decorrelated(base: float, cap: float, cells: int = 800):
    """The distribution of Brooker's k-th sleep, s_k = min(cap, uniform(base, 3 s_(k-1))) from
    s_0 = base, for k = 1, 2, ... until it stops changing: the cohort form needs each retry's
    delay distribution on its own, and the sleep before it is random. Each is a CDF at the
    ``edges`` of a grid over [base, cap] (mass spread uniformly within a cell) whose last
    value is below 1 by the mass at the cap; the next one is the mixture of the uniforms
    drawn from each cell's midpoint (and from the cap). Returns (edges, [CDF per attempt])."""
    edges = np.linspace(base, cap, cells + 1)
    sources = np.append((edges[:-1] + edges[1:]) / 2, cap)  # cell midpoints, then the cap
    # below[j, i]: chance that uniform(base, 3 * sources[j]) is at most edges[i]
    below = np.clip((edges[None, :] - base) / (3 * sources - base)[:, None], 0.0, 1.0)
    cdfs = [np.clip((edges - base) / (2 * base), 0.0, 1.0)]  # s_1 ~ uniform(base, 3 base), exactly
    mean = 0.0
    while len(cdfs) < 60:
        mass = np.append(np.diff(cdfs[-1]), 1.0 - cdfs[-1][-1])  # per cell, then at the cap
        m = float(mass @ sources)
        if abs(m - mean) <= 1e-3 * m:  # stationary: every later sleep is distributed alike
            break
        mean = m
        cdfs.append(mass @ below)
    return edges, cdfs


class TokenBucket:
    """Retry budget: every fresh request earns ``ratio`` tokens, every retry spends one."""

    def __init__(self, ratio: float, capacity: float):
        self.ratio = ratio
        self.capacity = capacity
        self.tokens = capacity

    def spend(self, fresh: int, wanted: int) -> int:
        """Earn for this tick's fresh requests, grant what retries the tokens allow; only
        the tokens left over are capped (so the cap bounds bursts, not the steady rate)."""
        available = self.tokens + fresh * self.ratio
        granted = min(wanted, int(available))
        self.tokens = min(self.capacity, available - granted)
        return granted


#: a circuit breaker's settings when a playbook or an operation leaves them out
BREAKER_DEFAULTS = {"threshold": 0.5, "window": 10.0, "open_for": 30.0, "probe_fraction": 0.1}


class CircuitBreaker:
    """Opens when the failure ratio over a window exceeds a threshold; while open,
    requests fail fast without touching the network; then lets a probe fraction through."""

    def __init__(self, threshold: float, window: float, open_for: float, probe_fraction: float, dt: float):
        self.threshold = threshold
        self.window_ticks = in_ticks(window, dt)
        self.open_ticks = in_ticks(open_for, dt)
        self.probe_fraction = probe_fraction
        self.attempts: list[int] = []
        self.failures: list[int] = []
        self.open_until = -1
        self.half_open = False

    def record(self, tick: int, attempts: int, failures: int) -> None:
        self.attempts.append(attempts)
        self.failures.append(failures)
        if len(self.attempts) > self.window_ticks:
            self.attempts.pop(0)
            self.failures.pop(0)
        total = sum(self.attempts)
        if tick < self.open_until:
            return
        if total > 0 and sum(self.failures) / total > self.threshold:
            self.open_until = tick + self.open_ticks
            self.attempts.clear()
            self.failures.clear()

    def allowed_fraction(self, tick: int) -> float:
        if tick < self.open_until:
            return 0.0
        if self.open_until >= 0 and tick < self.open_until + self.window_ticks:
            return self.probe_fraction  # half-open: probes only
        return 1.0
