"""Clocks decide when tick t may start: at once (batch runs) or paced to wall time."""
from __future__ import annotations

import time


class SimulatedClock:
    """No waiting: ticks run as fast as the machine allows."""

    def wait_for(self, tick: int) -> None:
        return None


class PacedClock:
    """Simulated time runs ``speed`` times faster than wall time."""

    def __init__(self, dt: float, speed: float):
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.dt, self.speed = dt, speed
        self.t0: float | None = None

    def wait_for(self, tick: int) -> None:
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now - tick * self.dt / self.speed
        target = self.t0 + tick * self.dt / self.speed
        if target > now:
            time.sleep(target - now)
