"""Retry and back-off policies as delay distributions over timing-wheel slots.

A cohort of n clients failing at attempt k is spread over future slots by one
multinomial draw from the distribution returned by ``RetryPolicy.offsets``, so the
cost of a retry storm does not depend on how many clients take part in it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .base import in_ticks

BACKOFFS = ("none", "constant", "exponential")
JITTERS = ("none", "full", "equal", "decorrelated")


@dataclass
class RetryPolicy:
    backoff: str = "exponential"  # none: retry at once; constant: base; exponential: base * multiplier**k
    base: float = 1.0  # seconds
    multiplier: float = 2.0
    cap: float = 60.0  # seconds, largest delay
    jitter: str = "full"
    max_attempts: int = 0  # total attempts including the first; 0 = unlimited

    @classmethod
    def from_spec(cls, spec: dict | None) -> "RetryPolicy":
        spec = dict(spec or {})
        return cls(
            backoff=spec.get("backoff", "exponential"),
            base=float(spec.get("base", 1.0)),
            multiplier=float(spec.get("multiplier", 2.0)),
            cap=float(spec.get("cap", 60.0)),
            jitter=spec.get("jitter", "full"),
            max_attempts=int(spec.get("max_attempts", 0)),
        )

    def attempt_classes(self) -> int:
        """Distinct attempt numbers worth tracking: after the cap is reached every later
        attempt behaves the same, so they share the last class."""
        if self.max_attempts:
            return self.max_attempts
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
        """The interval the jittered delay is drawn from, uniformly."""
        d = self.nominal_delay(attempt)
        if self.jitter == "full":
            return 0.0, d
        if self.jitter == "equal":
            return d / 2, d
        if self.jitter == "decorrelated":
            # Cohort form of AWS's decorrelated jitter: uniform(base, 3 * previous), capped.
            prev = self.base if attempt == 0 else self.nominal_delay(attempt - 1)
            return min(self.base, self.cap), min(self.cap, max(self.base, 3 * prev))
        return d, d

    def offsets(self, attempt: int, dt: float, lag: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Slots ahead (>= 1) and their probabilities for a retry after ``attempt``,
        where ``lag`` seconds of the delay have already passed (timeouts, round trip)."""
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

    def is_open(self, tick: int) -> bool:
        return tick < self.open_until
