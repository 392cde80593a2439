"""Health checks that take a load balancer's targets out of service and put them back.

Instances are "ready" when they boot but reach the network only once their network
configuration has propagated: that takes the current wait of the service that does the
propagation (``network``). Every hour a share of the health-check fleet
(``checker_turnover``) and of the targets (``target_turnover``) is new; while
propagation is slow, a share of both has no network yet. A check run from a checker
without network fails, however healthy the target. After ``fall`` failed checks in a row
automatic failover takes a target out of service, after ``rise`` passes it comes back:
with a propagation backlog, healthy targets flap. Callers whose answers still point at a
target removed within the last ``dns_ttl`` get connection errors, and so do callers of
a target in service that has no network. Disabling failover puts every target back and
removes none.

Targets are counted, not listed: each check, removals and re-additions are drawn with
the chance of ``fall`` failures (``rise`` passes) in a row.
"""
from __future__ import annotations

import numpy as np

from .base import in_ticks
from .draws import Draws


class HealthChecks:
    def __init__(self, spec: dict, dt: float):
        self.targets = int(spec["targets"])
        self.network = spec["network"]
        self.every = in_ticks(spec["interval"], dt)
        self.fall = int(spec["fall"])
        self.rise = int(spec["rise"])
        self.checker_turnover = float(spec["checker_turnover"]) / 3600.0
        self.target_turnover = float(spec["target_turnover"]) / 3600.0
        self.failover = bool(spec["failover"])
        self.in_service = self.targets
        self.recent = np.zeros(in_ticks(spec["dns_ttl"], dt), dtype=np.int64)  # removals per tick, a ring
        self.unready_targets = 0.0

    def set_failover(self, enabled: bool) -> None:
        self.failover = bool(enabled)
        if not self.failover:
            self.in_service = self.targets

    def step(self, tick: int, draws: Draws, network_delay_s: float) -> tuple[int, int]:
        """Run this tick's checks; returns (targets removed, targets put back)."""
        # (no turnover: nobody new, whatever the delay; an endless delay times 0 is no one)
        unready_checkers = min(1.0, self.checker_turnover * network_delay_s) if self.checker_turnover else 0.0
        self.unready_targets = min(1.0, self.target_turnover * network_delay_s) if self.target_turnover else 0.0
        removed = added = 0
        if tick % self.every == 0:
            fails = 1.0 - (1.0 - unready_checkers) * (1.0 - self.unready_targets)
            if self.failover:
                removed = draws.binomial(self.in_service, fails ** self.fall)
            out = self.targets - self.in_service
            added = draws.binomial(out, (1.0 - fails) ** self.rise) if out else 0
            self.in_service += added - removed
        self.recent[tick % len(self.recent)] = removed
        return removed, added

    @property
    def in_service_share(self) -> float:
        return self.in_service / self.targets if self.targets else 1.0

    @property
    def reachable_share(self) -> float:
        """Share of callers' connections that reach a target able to answer."""
        stale = min(1.0, self.recent.sum() / self.targets) if self.targets else 0.0
        return (1.0 - stale) * (1.0 - self.unready_targets)
