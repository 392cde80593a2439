"""A FIFO work queue in front of a service, as a fluid: how much work waits, not which.

Each tick the service opens the queue with its capacity; everything arriving in that
tick waits for the work queued before it (``wait_s``). Work beyond ``limit_s`` seconds
of the service's capacity is refused at once (cheap for everyone). Work whose wait
outlasts its caller's timeout stays queued and is done later, for nobody: past 100%
utilisation the wait grows until no caller is served in time, while the service stays
busy (congestive collapse).
"""
from __future__ import annotations


class WorkQueue:
    def __init__(self, limit_s: float):
        self.limit_s = float(limit_s)
        self.backlog = 0.0  # work units waiting
        self.cap = 0.0
        self.wait_s = 0.0
        self.room = 0.0

    def open(self, cap: float, dt: float) -> None:
        """Start a tick in which the service can work off ``cap`` units."""
        self.cap = cap
        self.wait_s = self.backlog / cap * dt if cap else float("inf")
        self.room = max(0.0, self.limit_s / dt * cap - self.backlog)

    def admit(self, n: int, cost: float = 1.0) -> int:
        """Queue up to ``n`` items of ``cost`` units each; returns how many were queued."""
        taken = min(n, int(self.room / cost)) if cost > 0 else n
        self.room -= taken * cost
        self.backlog += taken * cost
        return taken

    def serve(self) -> float:
        """Work off this tick's capacity; returns the units done."""
        done = min(self.backlog, self.cap)
        self.backlog -= done
        return done

    def reset(self, fraction: float = 1.0) -> None:
        self.backlog *= 1.0 - float(fraction)
