"""A service: capacity, dependencies, and the features a playbook can switch on.

A service answers the requests that reach it as the last hop of a flow, or hands the
ones it answered well on to the service named in ``then`` (a launch that then needs its
network configured). Its success is limited by its capacity, by the health of the
things it depends on, and by the share of its servers that are broken. Features:

- ``recycling``: servers break when a dependency stays unhealthy and can only be
  recycled while another service (the control plane) works: recovery that depends on
  the thing that is itself impaired.
- ``queue``: a FIFO work queue (work_queue.py); a flow is answered when its work is done
  (or when its caller must hear of its timeout); requests that outwait their callers are
  worked on for nobody (congestive collapse).
- ``service_time``: how the work done per tick varies (exponential service times: the
  completions in a busy tick are Poisson); deterministic by default.
- ``leases``: leases with a TTL kept in a store service (leases.py); their renewal and
  re-establishment go through the service's own queue.
- ``dns``: the endpoint's records are managed by automation that can race (dns.py).
- ``health_checks``: the service is a load balancer whose targets flap while network
  propagation lags (health_checks.py).
- ``cache``: the service is a cache in front of a store service (cache.py): a lookup of a
  fresh key is answered here, a miss is asked of the store (one store request per tick
  carries them all) and its caller is answered when the store answers, or at its timeout.

``throttle`` admits about so many requests per second (its own lease work included);
the rest are refused at once. ``fail_fast`` makes every failure here an immediate error
(a refusal) rather than a timeout for the caller. ``fault`` (a toxic) fails a share of the
requests whatever the load, as timeouts or errors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .base import FAULT_KINDS, Agent, Arg, BadArgument, Message, StepResult, WorldInfo, in_ticks, operation, share_or_rate
from .cache import Cache
from .dns import DnsAutomation
from .draws import draw_without_replacement
from .health_checks import HealthChecks
from .leases import LeaseTable
from .shards import HealthReports
from .work_queue import WorkQueue


@dataclass
class _Waiting:
    """A caller's batch whose misses wait for the store."""
    body: dict
    hits: int
    misses: int
    stale: int  # of the misses, keys with a stale value
    failed: int  # failed at the cache already
    refused: int
    delay: float
    due: int  # the tick its caller must hear by (of its timeout)


@dataclass
class _StoreAsk:
    """One tick's store request: the keys asked per popularity bucket, and who waits for it."""
    asks: np.ndarray
    misses: np.ndarray
    new: np.ndarray  # keys whose request in flight it is
    absent: np.ndarray  # keys without a fresh value when it was asked
    coalesced: bool  # one request per key
    waiting: list = field(default_factory=list)


STORE_ROUND_TRIP = 2  # ticks: a cache asks its store at t, the store answers at t+1, the cache hears at t+2


def _due(b: dict, dt: float) -> int:
    """The tick a flow's caller must hear of its timeout by, to retry on time (it hears a tick
    after the answer, at its timeout)."""
    return int(b["sent"]) + math.ceil(float(b["rt"]) / dt - 1e-9) - 2


#: how the requests over a cut edge fail (error, timeout), or none: the edge is restored
EDGE_CUTS = (*FAULT_KINDS, "none")


class Service(Agent):
    kind = "service"
    METRICS = {
        "offered": ("requests per tick", "requests that reached the service this tick"),
        "success_ratio": ("ratio", "share of requests the service answered well; without traffic, its readiness "
                                   "(reachable, dependencies up, not failed by a fault, some capacity)"),
        "utilisation": ("ratio", "work done / the work it could do this tick (work admitted, without a queue): "
                        "its capacity x tick, or, where service times vary, what this tick's draws allowed (a busy "
                        "tick reads 1 whatever it did; over many ticks it averages about work done / capacity); "
                        "without a queue, what arrives over what it could do, so above 1 when overloaded; "
                        "with no capacity, 1 while work arrives (saturated), else 0"),
        "broken_fraction": ("ratio", "share of servers broken and waiting to be recycled"),
        "dependency_health": ("ratio", "product of the success ratios of its dependencies"),
        "queue_backlog": ("units", "work waiting in the work queue (0 without a queue)"),
        "queue_wait_s": ("seconds", "how long work arriving this tick waits for its turn; "
                         "infinite while the service's capacity is 0"),
        "goodput": ("requests per tick", "requests answered this tick while their callers still waited"),
        "work_done": ("units per tick", "work the service did this tick, its own lease work included"),
        "work_admitted": ("units per tick", "work the service took on this tick (queued, or begun without a queue), its own lease work included"),
        "work_useful": ("units per tick", "work that succeeded in time: requests answered well this tick (with a queue: "
                        "the work it did this tick for requests done within their callers' timeouts, whenever they are "
                        "answered, as expected at the service's readiness), lease work started this tick (useful / "
                        "done falls to 0 in congestive collapse)"),
        "throttled": ("requests per tick", "requests and lease work refused this tick by the throttle"),
        "leases_held": ("ratio", "share of the service's leases held (1 without leases)"),
        "leases_expired": ("leases per tick", "leases that expired this tick"),
        "dns_records_ok": ("flag", "1 while the service's endpoint has DNS records (always, without DNS automation)"),
        "targets_in_service": ("ratio", "share of a load balancer's targets in service (1 without health checks)"),
        "target_flaps": ("targets per tick", "targets taken out of or put back into service this tick"),
        "hit_ratio": ("ratio", "share of this tick's cache lookups answered from a fresh key (0 without a cache)"),
        "cache_fill": ("ratio", "share of the cache's size holding fresh keys (0 without a cache)"),
        "store_requests": ("requests per tick", "requests the cache sent its store this tick (0 without a cache)"),
        "stale_served": ("requests per tick", "misses answered with a stale value because the store failed (serve_stale)"),
        "error_evictions": ("keys per tick", "keys deleted this tick because an answer failed (evict_on_error)"),
    }

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        self.capacity = float(spec["capacity"])  # requests per second
        self.depends_on = list(spec["depends_on"])
        self.then = spec.get("then")
        self.fail_fast = bool(spec["fail_fast"])
        fault = spec["fault"]
        self.op_fault(0, fault["share"], fault["kind"], fault["latency"], fault["jitter"])
        rec = spec.get("recycling")  # optional: without it, no server ever breaks
        self.rec_when = rec["breaks_when"] if rec else None  # dependency whose failure breaks servers
        self.rec_needs = rec.get("needs") if rec else None  # service whose health recycling requires
        if rec:
            self.rec_threshold = float(rec["below"])
            self.rec_break_rate = float(rec["break_rate"])  # share of servers per second
            self.rec_max = float(rec["max_broken"])
            self.rec_repair_rate = float(rec["repair_rate"])  # share per second
        st = spec["service_time"]
        self.service_dist = st["distribution"]
        self.service_cv = float(st["cv"])
        cv = {"deterministic": 0.0, "exponential": 1.0}.get(self.service_dist, self.service_cv)
        self.queue = WorkQueue(spec["queue"]["limit"], cv) if spec.get("queue") else None
        self.last_ratio = 1.0  # success ratio of the last answers (a queue may answer nothing in a tick)
        self.leases = LeaseTable(spec["leases"], world.dt) if spec.get("leases") else None
        self.checks = HealthChecks(spec["health_checks"], world.dt) if spec.get("health_checks") else None
        self.dns = DnsAutomation(spec["dns"], world.dt) if spec.get("dns") else None
        self.cache = Cache(spec["cache"], world.dt) if spec.get("cache") else None
        self.store_asks: dict[int, _StoreAsk] = {}  # by the tick the store request was sent
        self._ask: _StoreAsk | None = None  # this tick's, being filled
        self.asks_sent: dict[int, int] = {}  # the store requests sent in the last ticks, by tick
        self.last_hit_ratio = 0.0
        self.health: dict[str, float] = {d: 1.0 for d in self.depends_on}
        for extra in (self.rec_when, self.rec_needs, self.leases and self.leases.store, self.checks and self.checks.network):
            if extra:
                self.health.setdefault(extra, 1.0)
        self.network_delay_s = 0.0  # the propagation wait reported by the health checks' network service
        self.broken = 0.0
        self.capacity_factor = 1.0
        self.throttle: float | None = None  # requests per second admitted; None: no throttle
        self.cut: dict[str, str] = {}  # a service this one calls -> how requests over the cut edge fail
        self.spoiled_kind = "error"  # how a lookup of a cache's bad value fails (spoil_keys)

    @operation(needs="dns", example={})
    def op_restore_dns(self, tick: int) -> None:
        """Repair the endpoint's DNS records by hand: the newest plan is put in place and the
        service is reachable again."""
        if self.dns is not None:
            self.dns.restore()

    @operation(needs="dns", example={"enabled": False},
               enabled=Arg("false stops the enactors taking up new plans, true lets them again"))
    def op_set_dns_automation(self, tick: int, enabled: bool = True) -> None:
        """Stop or restart the DNS automation's enactors: stopped, none takes up a new plan
        (applications under way and their clean-ups still finish; the planner keeps planning)."""
        if self.dns is not None:
            self.dns.enabled = bool(enabled)

    @operation(needs="dns", example={"seconds": 1080.0},
               seconds=Arg("how long that application takes (at least a tick)", unit="s", min=0))
    def op_delay_dns_enactor(self, tick: int, seconds: float) -> None:
        """The next plan an enactor picks up takes ``seconds`` to apply: a badly delayed
        enactor, which can set off the DNS race."""
        if self.dns is not None:
            self.dns.delay_next = in_ticks(seconds, self.world.dt)

    @operation(needs="queue", example={"fraction": 0.5},
               fraction=Arg("share of the queued work thrown away", unit="share of the queue (0-1)", min=0, max=1))
    def op_reset_queue(self, tick: int, fraction: float = 1.0) -> None:
        """Throw away a share of what is queued, as restarting that share of the hosts does
        (their callers have given up on most of it); the requests thrown away are never
        answered."""
        fraction = share_or_rate("fraction", fraction, 1.0)
        if self.queue is not None:
            self.queue.reset(fraction)

    @operation(example={"rate": 500.0},
               rate=Arg("requests per second admitted (items, not work units: a lease renewal and a lease "
                        "re-establishment count one each, whatever their cost); leave it out (or null) to lift the "
                        "throttle", unit="requests/s", min=0))
    def op_throttle(self, tick: int, rate: float | None = None) -> None:
        """Admit about ``rate`` requests per second, lease work included (each one is admitted
        with the chance that keeps the tick's total at the rate, the rest is refused at once:
        renewals and re-establishments alike, counted one each whatever their work); no rate
        lifts the throttle."""
        self.throttle = None if rate is None else share_or_rate("rate", rate)

    @operation(needs="health_checks", example={"enabled": False},
               enabled=Arg("true: failed checks take targets out; false: every target is put back and stays in"))
    def op_set_failover(self, tick: int, enabled: bool = True) -> None:
        """Let a load balancer's failed health checks take targets out of service, or stop
        them (every target is back in service at once)."""
        if self.checks is not None:
            self.checks.set_failover(enabled)

    @operation(needs="cache", example={"share": 1.0},
               share=Arg("share of the cache emptied (of its nodes restarted)", unit="share of the keys (0-1)",
                         min=0, max=1))
    def op_flush_cache(self, tick: int, share: float = 1.0) -> None:
        """Empty a share of a cache (restarting that share of its nodes): those keys start cold,
        fresh and stale values alike."""
        share = share_or_rate("share", share, 1.0)
        if self.cache is not None:
            self.cache.flush(self.rng, share)

    @operation(needs="cache", example={"hottest": 100, "kind": "error"},
               hottest=Arg("the most popular keys whose held values go bad (by rank: 100, the 100 hottest)",
                           unit="keys", min=0),
               share=Arg("a share of the other keys held whose values go bad, at random", unit="share of keys (0-1)",
                         min=0, max=1),
               kind=Arg("how a lookup of a bad value fails for its caller: error, at once; timeout, the caller waits "
                        "out its timeout (evict_on_error clients delete the key and ask the store instead)",
                        choices=FAULT_KINDS))
    def op_spoil_keys(self, tick: int, hottest: int = 0, share: float = 0.0, kind: str = "error") -> None:
        """Bad values in some of a cache's keys (a bad configuration value written to them, a
        poisoned entry), not in all of its answers: lookups of those keys answer the bad
        value until the key goes (its TTL lapses, it is replaced or flushed, or an
        evict_on_error client deletes it and refills it from the store). Keys not held now
        are not touched."""
        if self.cache is not None:
            self.cache.spoil(self.rng, int(hottest), share_or_rate("share", share, 1.0))
            self.spoiled_kind = kind

    @operation(needs="cache", example={"enabled": True},
               enabled=Arg("true: one store request per key in flight, other misses of that key wait for it"))
    def op_set_coalescing(self, tick: int, enabled: bool = True) -> None:
        """Coalesce a cache's misses: one store request per key in flight at a time (request
        coalescing, single flight)."""
        if self.cache is not None:
            self.cache.coalesce = bool(enabled)

    @operation(needs="cache", example={"enabled": True},
               enabled=Arg("true: a miss the store fails is answered with the key's stale value, if the cache "
                           "still has one"))
    def op_set_serve_stale(self, tick: int, enabled: bool = True) -> None:
        """Serve stale on error: a miss whose store request fails (or is not answered by its
        caller's timeout) is answered with the key's expired value if the cache still holds
        it."""
        if self.cache is not None:
            self.cache.serve_stale = bool(enabled)

    @operation(needs="cache", example={"enabled": False},
               enabled=Arg("true: a failed answer deletes its key, and an unexpected one from the cache deletes the "
                           "key and asks the store; false: neither"))
    def op_set_evict_on_error(self, tick: int, enabled: bool = True) -> None:
        """Switch the cache clients' evict-on-error behaviour (a hot-fix that stops it, or the
        latent bug that starts a stampede)."""
        if self.cache is not None:
            self.cache.evict_on_error = bool(enabled)

    @operation(needs="cache", example={"seconds": 3600.0},
               seconds=Arg("how long a stored key stays fresh from now on (about; at least a tick)", unit="s", min=0))
    def op_set_cache_ttl(self, tick: int, seconds: float) -> None:
        """Change a cache's time to live: keys stay fresh about ``seconds`` from now on (at
        least a tick)."""
        seconds = share_or_rate("seconds", seconds)
        if self.cache is not None:
            self.cache.ttl = max(seconds, self.world.dt)

    @operation(example={"share": 0.2, "kind": "error", "latency": 0.5, "jitter": 0.2, "duration": 600.0},
               share=Arg("share of the requests that fail; 0: none", unit="share of requests (0-1)", min=0, max=1),
               kind=Arg("timeout: the caller waits out its timeout; error: refused at once", choices=FAULT_KINDS),
               latency=Arg("delay added to every answer; a request whose caller's timeout it outlasts fails as a "
                           "timeout", unit="s", min=0),
               jitter=Arg("mean of a further exponential delay, drawn for each request", unit="s", min=0),
               duration=Arg("how long the fault lasts before it lifts by itself (at least a tick); left out: "
                            "until another fault operation changes it", unit="s", min=0))
    def op_fault(self, tick: int, share: float = 0.0, kind: str = "timeout", latency: float = 0.0,
                 jitter: float = 0.0, duration: float | None = None) -> None:
        """A fault (toxic): ``share`` of the requests that reach the service fail whatever
        its load, as a timeout or as an error (refused at once), and every answer takes
        ``latency`` plus an exponential ``jitter`` longer (those it makes later than their
        caller's timeout fail as timeouts), for ``duration`` or until changed; all 0 lifts it."""
        self.fault_share, self.fault_kind = share_or_rate("share", share, 1.0), kind
        self.fault_latency, self.fault_jitter = share_or_rate("latency", latency), share_or_rate("jitter", jitter)
        self.fault_until = None if duration is None else tick + in_ticks(duration, self.world.dt)

    def _in_time(self, b: dict, ok: int, delay: float) -> int:
        """Of ``ok`` answers, those the fault's latency does not make later than their
        caller's timeout (``delay``: what the request has waited already)."""
        if not ok or not (self.fault_latency or self.fault_jitter):
            return ok
        left = float(b["rt"]) - delay - self.fault_latency
        if left <= 0:
            return 0
        if not self.fault_jitter:
            return ok
        return self._successes(ok, -math.expm1(-left / self.fault_jitter))

    @operation(example={"to": "config-db", "kind": "error"},
               to=Arg("a service this one calls: one of its depends_on, or its then", names="callee"),
               kind=Arg("how the requests that need the edge fail while it is cut: error, refused at once; timeout, "
                        "their callers wait out their timeout; none: the edge is restored", choices=EDGE_CUTS))
    def op_cut_edge(self, tick: int, to: str, kind: str = "error") -> None:
        """Cut (or restore) the traffic from this service to one service it calls, and no
        other (a network policy, a firewall rule, a bad routing change): over a depends_on
        edge, every request this service takes on fails while it is cut, as if that
        dependency failed; over its then edge, the requests it answered well fail instead of
        going on. Its other callers and callees are untouched."""
        if to not in (*self.depends_on, self.then):
            raise BadArgument(f"to {to!r}: expected a service {self.name} calls (its depends_on or then)")
        if kind == "none":
            self.cut.pop(to, None)
        else:
            self.cut[to] = kind

    @operation(example={"factor": 0.5},
               factor=Arg("the capacity as a multiple of the playbook's: 0 stops the service, below 1 degrades it, "
                          "1 restores it, above 1 adds capacity", unit="x the playbook's capacity", min=0))
    def op_scale_capacity(self, tick: int, factor: float) -> None:
        """Set the service's capacity to ``factor`` times the playbook's (it replaces the last
        factor, it does not compound)."""
        self.capacity_factor = float(factor)

    @operation(example={"fraction": 0.5},
               fraction=Arg("share of the broken servers recycled", unit="share of broken servers (0-1)",
                            min=0, max=1))
    def op_recycle(self, tick: int, fraction: float = 1.0) -> None:
        """Recycle broken servers by hand (only works while ``needs`` is healthy, success ratio
        at least 0.9; otherwise nothing happens)."""
        fraction = share_or_rate("fraction", fraction, 1.0)
        if not self.rec_needs or self.health.get(self.rec_needs, 1.0) >= 0.9:
            self.broken *= 1.0 - fraction

    def _admitted(self, n: int, share: float) -> int:
        return self.draws.binomial(n, share) if n and share < 1.0 else n

    def _successes(self, n: int, chance: float) -> int:
        return self.draws.binomial(n, chance) if n and chance > 0 else 0

    def _read(self, tick: int, inbox: list[Message]) -> tuple[list[dict], list[dict]]:
        """(flows to serve, the store's answers to a cache); health reports and applies taken."""
        flows, answers = [], []
        health = HealthReports(self.health)
        for msg in inbox:
            if msg.kind == "flow":
                flows.append(msg.body)
            elif msg.kind == "flow_result":  # the store's answer to a cache
                answers.append(msg.body)
            elif msg.kind == "health":
                health.take(msg)
                if self.checks is not None and msg.src == self.checks.network:
                    self.network_delay_s = float(msg.body["wait_s"])  # a service's health carries its queue wait
                if self.cache is not None and msg.src == self.cache.store and msg.body.get("pace") is not None:
                    self.cache.store_queue = (float(msg.body["wait_s"]), float(msg.body["pace"]),
                                              float(msg.body["limit_s"]), float(msg.body["extra_s"]))
            elif msg.kind == "apply":
                self.handle_apply(tick, msg.body)
        health.merge()
        return flows, answers

    def _wear(self, tick: int, dt: float) -> None:
        """A fault whose time is up lifts; recycling breaks hosts while what it watches is
        unhealthy, and repairs them once what it needs is healthy again."""
        if self.fault_until is not None and tick >= self.fault_until:
            self.fault_share, self.fault_latency, self.fault_jitter, self.fault_until = 0.0, 0.0, 0.0, None
            self.event(tick, "fault_lifted")
        if self.rec_when:
            if self.health[self.rec_when] < self.rec_threshold:
                self.broken = min(self.rec_max, self.broken + self.rec_break_rate * dt)
            elif self.broken > 0 and (not self.rec_needs or self.health[self.rec_needs] >= 0.9):
                self.broken = max(0.0, self.broken - self.rec_repair_rate * dt)

    def _readiness(self, tick: int, dt: float) -> tuple[float, float, float, int]:
        """(dependency health, work capacity this tick, the share of requests that can
        succeed, health-check flaps): dependencies, DNS and health checks."""
        dep = 1.0
        for d in self.depends_on:
            dep *= 0.0 if d in self.cut else self.health[d]
        if self.dns is not None:
            for what in self.dns.step(tick, self.rng):
                self.event(tick, "dns", what=what)
            dep *= 1.0 if self.dns.ok else 0.0  # no records: nobody reaches the service
        cap = self.capacity * self.capacity_factor * (1.0 - self.broken) * dt
        ready = dep * (1.0 - self.broken)
        flaps = 0
        if self.checks is not None:
            removed, added = self.checks.step(tick, self.draws, self.network_delay_s)
            flaps = removed + added
            cap *= self.checks.in_service_share
            ready *= self.checks.reachable_share
        return dep, cap, ready, flaps

    def _admit(self, tick: int, flows: list[dict], share: float, ready: float, within: float) -> tuple[int, int]:
        """Admit each flow's share (the throttle's); without a queue answer it at once, with
        one queue it (a full queue refuses at once). Returns (work admitted, throttled)."""
        dt = self.world.dt
        units_in = throttled = 0
        for b in flows:
            n = int(b["requests"])
            m = self._admitted(n, share)
            throttled += n - m
            if self.queue is None:
                self._answer(tick, b, n, m, self._successes(m, ready * within), b["delay"])
                units_in += m
                continue
            queued = self.queue.admit(m)  # beyond the queue's limit: refused at once, cheap for everyone
            units_in += queued
            if queued < m:  # the caller learns the queue was full: a retry sent at once meets it full
                b = b | {"r_full": b["r_full"] + m - queued}
            if not queued:
                self._answer(tick, b, n, 0, 0, b["delay"])
                continue
            # Answered once its work is done (work_queue.py), at the latest when its caller
            # must hear of a timeout to retry on time (a tick after hearing, at its timeout);
            # a batch gets one answer, so one with refusals (or fail_fast's errors) at once.
            due = _due(b, dt)
            self.queue.join(b, queued, float(b["rt"]) - b["delay"], ready,
                            due if queued == n and not self.fail_fast else tick)
        return units_in, throttled

    def _capacity_now(self, cap: float) -> float:
        """The work done in a busy tick whose mean is ``cap``: service times vary, and the
        fluctuations are what tip a queue over its threshold. Exponential service times:
        the completions in a busy tick are Poisson; gamma: mean cap, variance cv^2 x cap."""
        if cap <= 0 or self.service_dist == "deterministic":
            return cap
        if self.queue is not None:  # the queue's clock: projections read the same draws
            return self.queue.clock_work(cap, self.rng)
        if self.service_dist == "exponential":
            return float(self.draws.poisson(cap))
        return float(self.rng.gamma(cap / self.service_cv ** 2, self.service_cv ** 2))

    def _answer(self, tick: int, b: dict, n: int, queued: int, ok: int, delay: float) -> None:
        """Answer a flow of ``n`` requests of which ``queued`` were taken on and ``ok`` done
        well: to the caller, on to ``then``, or (a cache) from its keys and its store. (``b``'s
        ``r_full`` counts the refusals by a full queue among them.)"""
        ok = self._in_time(b, ok, delay)  # the fault's latency makes the others time out
        delay += self.fault_latency + self.fault_jitter  # (on average: what a cache learns of its store's latency)
        faulted = self._successes(ok, self.fault_share)  # the fault fails these whatever the load
        # an unexpected answer from a cache whose clients evict on error: they ask the store
        odd = faulted if self.cache is not None and self.cache.evict_on_error else 0
        ok -= faulted
        failed, rej = queued - ok - odd, n - queued
        if self.fault_kind == "error":
            failed, rej = failed - faulted + odd, rej + faulted - odd
        if self.fail_fast or "error" in (self.cut.get(d) for d in self.depends_on):
            failed, rej = 0, n - ok - odd  # an error at once rather than letting its caller time out
        if self.then and self.then in self.cut:  # the edge on is cut: those answered well here fail
            failed, rej = (failed + ok, rej) if self.cut[self.then] == "timeout" else (failed, rej + ok)
            self._reply(tick, b, 0, failed, rej, delay)
            self._ok += ok  # (its own part went well: each service of a chain counts its own part)
        elif self.cache is not None:
            self._look_up(tick, b, ok, odd, failed, rej, delay)
        elif self.then:  # answered well here: on to the next service, whose answer the caller gets
            self.send(self.then, "flow", b | {"hops": [], "requests": ok, "delay": delay,
                                              "r_fail": b["r_fail"] + failed, "r_rej": b["r_rej"] + rej}, tick)
            self._count(n, ok)
        else:
            self._reply(tick, b, ok, failed, rej, delay)

    def _count(self, answered: int, ok: int) -> None:
        self._answered += answered
        self._ok += ok

    def _reply(self, tick: int, b: dict, ok: int, failed: int, rej: int, delay: float) -> None:
        """The answer to a flow's caller: ``ok`` requests done well, ``failed`` timed out,
        ``rej`` refused, on top of what the hops before failed."""
        self.send(b["origin"], "flow_result", {
            "sent": b["sent"], "s_ok": int(b["setups"]) if not b["coupled"] else 0,
            "s_fail": b["s_fail"], "s_rej": b["s_rej"], "r_ok": ok,
            "r_fail": b["r_fail"] + failed, "r_rej": b["r_rej"] + rej, "r_full": b["r_full"], "delay": delay}, tick)
        self._count(int(b["requests"]), ok)

    # -- a cache ----------------------------------------------------------------------------
    def _look_up(self, tick: int, b: dict, ok: int, odd: int, failed: int, rej: int, delay: float) -> None:
        """A cache's lookups: hits are answered, misses wait for this tick's store request."""
        flights = [(tick - sent, ask.new) for sent, ask in self.store_asks.items()]
        sent = {tick - t: n for t, n in self.asks_sent.items()}
        if self._ask is not None:
            flights.append((0, self._ask.new))
            sent[0] = int(self._ask.asks.sum())
        found = self.cache.lookup(self.rng, ok, odd, flights, sent)
        hits, misses, bad = int(found["hits"].sum()), int(found["misses"].sum()), int(found["bad"].sum())
        self._lookups += ok + odd
        self._hits += hits + bad
        if bad:  # answered with a bad value: its caller fails
            failed, rej = (failed + bad, rej) if self.spoiled_kind == "timeout" else (failed, rej + bad)
        if not misses:
            self._reply(tick, b, hits, failed, rej, delay)
            return
        if self._ask is None:
            self._ask = _StoreAsk(np.zeros_like(found["asks"]), np.zeros_like(found["misses"]),
                                  np.zeros_like(found["new"]), found["absent"], self.cache.coalesce)
        self._ask.asks += found["asks"]
        self._ask.misses += found["misses"]
        self._ask.new += found["new"]
        self._ask.absent = found["absent"]
        # A miss waits at least for this tick's store request to come back: the ticks its
        # messages take are no more the caller's waiting than those of a request the cache
        # answers at once (whose answer also comes ticks later); a slow store's are.
        self._ask.waiting.append(_Waiting(b, hits, misses, int(found["stale"].sum()), failed, rej, delay,
                                          max(tick + STORE_ROUND_TRIP, _due(b, self.world.dt))))

    def _ask_store(self, tick: int) -> int:
        """Send this tick's store request; misses that all wait for keys already asked (with
        coalescing) wait for the latest store request. Returns the requests sent."""
        ask, self._ask = self._ask, None
        if ask is None:
            return 0
        k = int(ask.asks.sum())
        if not k and self.store_asks:
            self.store_asks[max(self.store_asks)].waiting += ask.waiting
            return 0
        if not k:
            ask.asks[int(np.argmax(ask.misses))] += 1
            k = 1
        self.store_asks[tick] = ask
        self.asks_sent[tick] = k
        for t in [t for t in self.asks_sent if t < tick - 2]:
            del self.asks_sent[t]
        self.send_flow([self.cache.store], tick, k, rt=self.cache.timeout)
        return k

    def _store_answered(self, tick: int, body: dict) -> None:
        """The store answered a store request: its keys are stored (or, evicting on error,
        deleted), and the callers still waiting for it are answered."""
        ask = self.store_asks.pop(int(body["sent"]), None)
        if ask is None:
            return
        k = int(ask.asks.sum())
        r_ok = min(int(body["r_ok"]), k)
        ok = draw_without_replacement(self.rng, ask.asks, r_ok)
        refused = draw_without_replacement(self.rng, ask.asks - ok, min(int(body["r_rej"]), k - r_ok))
        self._evicted += self.cache.settle(self.rng, ask.asks, ok, refused, ask.new, ask.absent, ask.coalesced,
                                           float(body["delay"]), tick - int(body["sent"]))
        good_share = r_ok / k
        refused_share = min(1.0, int(body["r_rej"]) / (k - r_ok)) if k > r_ok else 0.0
        for w in ask.waiting:
            good = self._successes(w.misses, good_share)
            self._answer_waiting(tick, w, good, refused_share, float(body["delay"]))

    def _answer_waiting(self, tick: int, w: _Waiting, good: int, refused_share: float, store_delay: float) -> None:
        """A waiting caller's answer: its hits, the misses the store answered well, and (with
        serve_stale) the failed misses of keys with a stale value."""
        bad = w.misses - good
        served = 0
        if self.cache.serve_stale and bad and w.stale:
            served = self.draws.hypergeometric(w.stale, w.misses - w.stale, bad) if w.stale < w.misses else bad
        self._stale_served += served
        bad -= served
        refused = self._successes(bad, refused_share)
        self._reply(tick, w.body, w.hits + good + served, w.failed + bad - refused, w.refused + refused,
                    w.delay + store_delay)

    def _answer_overdue(self, tick: int) -> None:
        """Callers whose store answer has not come by their timeout hear of it now (its
        answer, when it comes, still stores its keys)."""
        for ask in self.store_asks.values():
            if any(w.due <= tick for w in ask.waiting):
                for w in [w for w in ask.waiting if w.due <= tick]:
                    self._answer_waiting(tick, w, 0, 0.0, 0.0)
                ask.waiting = [w for w in ask.waiting if w.due > tick]

    def _lease_work(self, tick: int, renewals: int, attempts: int, share: float, within: float,
                    wait_s: float) -> tuple[int, float, float, int]:
        """This tick's renewals and re-establishment attempts, through the throttle and the
        queue like any other work; a lease succeeds if the store answers and (with a
        queue) it did not outwait its timeout. Returns (refused by the throttle, useful
        units, units taken on, leases that lapsed)."""
        lease = self.leases
        r_in, a_in = self._admitted(renewals, share), self._admitted(attempts, share)
        refused = renewals + attempts - r_in - a_in
        chance = self.health[lease.store] * (1.0 - self.broken) * within
        if self.queue is not None:
            r_in, a_in = self.queue.admit(r_in), self.queue.admit(a_in, lease.cost)
            chance *= 1.0 if wait_s <= lease.timeout_s else 0.0
        renewed, again = self._successes(r_in, chance), self._successes(a_in, chance)
        lapsed = lease.settle(tick, self.draws, renewed, again)
        return refused, renewed + again * lease.cost, r_in + a_in * lease.cost, lapsed

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        """Read the inbox, update what the service can do (faults, recycling, dependencies,
        DNS, health checks), admit and queue the flows (and the leases' work), serve,
        answer, report."""
        dt = self.world.dt
        self._answered = self._ok = self._lookups = self._hits = self._stale_served = 0
        self._evicted = 0
        flows, answers = self._read(tick, inbox)
        self._wear(tick, dt)
        dep, cap, ready, flaps = self._readiness(tick, dt)
        renewals, attempts = self.leases.due(tick, self.draws) if self.leases is not None else (0, 0)
        offered = sum(int(b["requests"]) for b in flows)
        demand = offered + renewals + attempts  # requests, as the throttle counts them
        units = offered + renewals + attempts * (self.leases.cost if self.leases is not None else 1.0)  # work
        share = min(1.0, self.throttle * dt / demand) if self.throttle is not None and demand else 1.0
        within = 1.0  # without a queue: the share of the work the capacity covers, failures shared by all
        cap_now = self._capacity_now(cap)
        if self.queue is not None:
            self.queue.open(cap_now, dt, tick, mean_cap=cap)
            wait_s = self.queue.wait_s
        else:
            wait_s = 0.0
            within = min(1.0, cap_now / (units * share)) if units * share > 0 else 1.0

        if self.cache is not None:
            self.cache.tick(self.rng)
            self._evicted += self.cache.step_timeouts(self.rng)
            for body in answers:
                self._store_answered(tick, body)
        units_in, throttled = self._admit(tick, flows, share, ready, within)
        useful = 0.0
        lapsed = 0
        if self.leases is not None:
            refused, lease_useful, lease_units, lapsed = self._lease_work(tick, renewals, attempts, share, within, wait_s)
            throttled += refused
            useful += lease_useful
            units_in += lease_units
        if self.queue is not None:
            done, members = self.queue.serve(tick, self.rng)
            for mem in members:
                ok = self._successes(mem.n, mem.good * min(1.0, mem.ok))
                wait = mem.wait / mem.ok if mem.ok > 0 else wait_s
                self._answer(tick, mem.body, int(mem.body["requests"]), mem.n, ok, mem.body["delay"] + wait)
        else:
            done = min(float(units_in), cap_now)
        store_requests = 0
        if self.cache is not None:
            store_requests = self._ask_store(tick)
            self._answer_overdue(tick)
            if self._lookups:
                self.last_hit_ratio = self._hits / self._lookups
        ok_total, answered = self._ok, self._answered
        # a queue's useful work is the work it did in time this tick, whenever its requests are answered
        useful += self.queue.useful if self.queue is not None else ok_total
        held = self.leases.held_fraction if self.leases is not None else 1.0
        if answered:
            self.last_ratio = ok_total / answered
        elif not offered and (self.queue is None or not self.queue.live):
            # Idle: what a request would meet now. A fault fails its share of them, and a
            # service without capacity serves none (a store that only leases use can fail too).
            self.last_ratio = ready * (1.0 - self.fault_share) if cap > 0 else 0.0
        ratio = self.last_ratio * held
        # (a queue's wait and the pace it works at, and a fault's delay: what a cache in front of it
        # needs to tell when its answers to the requests in flight come)
        health = {"ratio": ratio, "wait_s": wait_s, "extra_s": self.fault_latency + self.fault_jitter,
                  "pace": cap / dt if self.queue is not None else None,
                  "limit_s": self.queue.limit_s if self.queue is not None else None}
        for sub in self.wiring.health_subscribers:
            self.send(sub, "health", health, tick)
        metrics = {
            "offered": offered,
            "success_ratio": ratio,
            "utilisation": (done if self.queue is not None else units * share) / cap_now if cap_now else (1.0 if demand else 0.0),
            "broken_fraction": self.broken,
            "dependency_health": dep,
            "queue_backlog": self.queue.backlog if self.queue is not None else 0.0,
            "queue_wait_s": wait_s,
            "goodput": ok_total,
            "work_done": done,
            "work_admitted": float(units_in),
            "work_useful": useful,
            "throttled": throttled,
            "leases_held": held,
            "leases_expired": lapsed,
            "dns_records_ok": 1 if self.dns is None or self.dns.ok else 0,
            "targets_in_service": self.checks.in_service_share if self.checks is not None else 1.0,
            "target_flaps": flaps,
            "hit_ratio": self.last_hit_ratio,
            "cache_fill": self.cache.fill if self.cache is not None else 0.0,
            "store_requests": store_requests,
            "stale_served": self._stale_served,
            "error_evictions": self._evicted,
        }
        self.report(tick, metrics)
        return self.finish(metrics)
