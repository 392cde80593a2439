"""A service: capacity, dependencies, and servers that can break and need recycling.

A service answers the requests that reach it as the last hop of a flow. Its own
success is limited by its capacity, by the health of the things it depends on, and by
the share of its servers that are broken. ``recycling`` models servers that break when a
dependency stays unhealthy and can only be recycled while another service (the control
plane) works: recovery that depends on the thing that is itself impaired.

``queue`` puts a FIFO work queue in front of the service. Each request waits for the
work queued before it; a request whose wait exceeds its caller's timeout fails for the
caller, yet stays queued and is worked on later, for nobody. Past 100% utilisation the
queue grows until every request outwaits its caller: goodput falls towards zero while
the service stays busy, and the callers' retries keep it there (congestive collapse)
until arrivals are throttled below capacity or the queue is reset.
"""
from __future__ import annotations

import numpy as np

from .base import Agent, Message, StepResult, WorldInfo
from .dns import DnsAutomation
from .shards import HealthReports


class Service(Agent):
    kind = "service"
    METRICS = {
        "offered": ("requests", "requests that reached the service this tick"),
        "success_ratio": ("ratio", "share of requests the service answered well; without traffic, its readiness"),
        "utilisation": ("ratio", "offered / capacity this tick"),
        "broken_fraction": ("ratio", "share of servers broken and waiting to be recycled"),
        "dependency_health": ("ratio", "product of the success ratios of its dependencies"),
        "queue_backlog": ("requests", "requests waiting in the work queue (0 without a queue)"),
        "queue_wait_s": ("seconds", "how long a request arriving this tick waits for its turn"),
        "goodput": ("requests", "requests answered this tick while their callers still waited"),
        "dns_records_ok": ("flag", "1 while the service's endpoint has DNS records (always, without DNS automation)"),
    }

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        self.capacity = float(spec.get("capacity", 1e12))  # requests per second
        self.depends_on = list(spec.get("depends_on") or [])
        rec = spec.get("recycling") or {}
        self.rec_when = rec.get("breaks_when")  # dependency whose failure breaks servers
        self.rec_threshold = float(rec.get("below", 0.5))
        self.rec_break_rate = float(rec.get("break_rate", 0.01))  # share of servers per second
        self.rec_max = float(rec.get("max_broken", 0.8))
        self.rec_needs = rec.get("needs")  # service whose health recycling requires
        self.rec_repair_rate = float(rec.get("repair_rate", 0.001))  # share per second
        self.health: dict[str, float] = {d: 1.0 for d in self.depends_on}
        for extra in (self.rec_when, self.rec_needs):
            if extra:
                self.health.setdefault(extra, 1.0)
        self.broken = 0.0
        self.capacity_factor = 1.0
        queue = spec.get("queue")
        self.queue_limit_s = float(queue.get("limit", 3600.0)) if queue else None
        self.backlog = 0.0
        self.dns = DnsAutomation(spec["dns"], world.dt) if spec.get("dns") else None
        self.read_wiring(spec)

    def op_restore_dns(self, tick: int) -> None:
        """Repair the endpoint's DNS records by hand."""
        if self.dns is not None:
            self.dns.restore()

    def op_set_dns_automation(self, tick: int, enabled: bool = True) -> None:
        if self.dns is not None:
            self.dns.enabled = bool(enabled)

    def op_reset_queue(self, tick: int) -> None:
        """Throw away everything queued (its callers have given up on most of it)."""
        self.backlog = 0.0

    def op_scale_capacity(self, tick: int, factor: float) -> None:
        self.capacity_factor = float(factor)

    def op_recycle(self, tick: int, fraction: float = 1.0) -> None:
        """Recycle broken servers by hand (only works while ``needs`` is healthy)."""
        if not self.rec_needs or self.health.get(self.rec_needs, 1.0) >= 0.9:
            self.broken *= 1.0 - float(fraction)

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        dt = self.world.dt
        flows = []
        health = HealthReports(self.health)
        for msg in inbox:
            if msg.kind == "flow":
                flows.append(msg.body)
            elif msg.kind == "health":
                health.take(msg)
            elif msg.kind == "apply":
                self.handle_apply(tick, msg.body)

        health.merge()
        if self.rec_when:
            if self.health[self.rec_when] < self.rec_threshold:
                self.broken = min(self.rec_max, self.broken + self.rec_break_rate * dt)
            elif self.broken > 0 and (not self.rec_needs or self.health[self.rec_needs] >= 0.9):
                self.broken = max(0.0, self.broken - self.rec_repair_rate * dt)

        dep = 1.0
        for d in self.depends_on:
            dep *= self.health[d]
        if self.dns is not None:
            for what in self.dns.step(tick, self.rng):
                self.event(tick, "dns", what=what)
            dep *= 1.0 if self.dns.ok else 0.0  # no records: nobody reaches the service
        offered = sum(int(b["requests"]) for b in flows)
        cap = self.capacity * self.capacity_factor * (1.0 - self.broken) * dt
        wait_s = self.backlog / cap * dt if cap else float("inf")
        if self.queue_limit_s is None:
            p = dep * (1.0 - self.broken) * (min(1.0, cap / offered) if offered else 1.0)
        else:
            p = dep * (1.0 - self.broken)
            room = max(0.0, self.queue_limit_s / dt * cap - self.backlog)
        ok_total = 0
        for b in flows:
            n = int(b["requests"])
            delay, rej = b["delay"], 0
            if self.queue_limit_s is None:
                ok = int(self.rng.binomial(n, p)) if n else 0
            else:
                rej = max(0, n - int(room))  # refused at once: cheap for everyone
                room -= n - rej
                self.backlog += n - rej
                delay = b["delay"] + wait_s
                good = p if delay <= float(b["rt"]) else 0.0  # outwaited its caller: work for nobody
                ok = int(self.rng.binomial(n - rej, good)) if n - rej and good > 0 else 0
            ok_total += ok
            self.send(b["origin"], "flow_result", {
                "sent": b["sent"], "s_ok": int(b["setups"]) if not b["coupled"] else 0,
                "s_fail": b["s_fail"], "s_rej": b["s_rej"], "r_ok": ok,
                "r_fail": b["r_fail"] + n - rej - ok, "r_rej": b["r_rej"] + rej, "delay": delay}, tick)
        if self.queue_limit_s is not None:
            served = min(self.backlog, cap)
            self.backlog -= served
        ratio = ok_total / offered if offered else p
        for sub in self.health_subscribers:
            self.send(sub, "health", {"ratio": ratio}, tick)
        metrics = {
            "offered": offered,
            "success_ratio": ratio,
            "utilisation": (served / cap if cap else 0.0) if self.queue_limit_s is not None
            else offered / cap if cap else (1.0 if offered else 0.0),
            "broken_fraction": self.broken,
            "dependency_health": dep,
            "queue_backlog": self.backlog,
            "queue_wait_s": wait_s if self.queue_limit_s is not None else 0.0,
            "goodput": ok_total,
            "dns_records_ok": 1 if self.dns is None or self.dns.ok else 0,
        }
        self.report(tick, metrics)
        return self.finish(metrics)
