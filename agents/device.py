"""A pool of identical bridge devices (routers doing NAT between two networks).

Per tick the pool has a CPU budget. Connection setups are the expensive load class,
forwarded requests are cheap, rejections cheaper still. Admitted work joins a FIFO
queue (bounded by ``queue.buffer`` seconds of work, the rest is dropped); the delay an
arrival sees grows with utilisation and with the queue. An item whose delay exceeds
its caller's timeout fails even though the device spent CPU on it (wasted work): that
is what makes overload self-sustaining when callers retry. Every setup takes a
connection-tracking entry; failed setups hold a half-open entry until it times out.

Without protection, overload is shared by all sources in proportion to what they send.
With protection, each source is admitted up to a max-min fair share of the budget and
the excess is rejected cheaply and at once, which keeps the queue, and so the delay,
short.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .arith import left_sum, np_sum
from .base import FAULT_KINDS, Agent, Arg, Message, StepResult, WorldInfo, in_ticks, operation, share_or_rate
from .shards import source_of


def fair_shares(demands: list[float], capacity: float) -> list[float]:
    """Max-min fair allocation of ``capacity`` over ``demands``."""
    shares = [0.0] * len(demands)
    left = capacity
    active = sorted(range(len(demands)), key=lambda i: demands[i])
    while active:
        even = left / len(active)
        i = active[0]
        if demands[i] <= even:
            shares[i] = demands[i]
            left -= demands[i]
            active.pop(0)
        else:
            for j in active:
                shares[j] = even
            break
    return shares


class _Offer(NamedTuple):
    """A tick's flows, one value per flow: what each offers and what an item of it costs
    (sums of these are ``np_sum``'s, as when they were arrays)."""
    setups: list[float]
    requests: list[float]
    coupled: list[bool]  # a coupled flow's item is a setup and a request (UDP-style)
    unit: list[float]  # 0 for coupled flows (their requests are counted in their setups), else 1
    item_cost_s: list[float]  # work units of one setup item
    work: list[float]  # work units offered

    @classmethod
    def of(cls, flows: list[Message], c_setup: float, c_request: float) -> _Offer:
        setups = [float(f.body["setups"]) for f in flows]
        requests = [float(f.body["requests"]) for f in flows]
        coupled = [bool(f.body["coupled"]) for f in flows]
        unit = [0.0 if c else 1.0 for c in coupled]
        coupled_cost = c_setup + c_request
        item_cost_s = [coupled_cost if c else c_setup for c in coupled]
        work = [s * c + r * c_request * u for s, c, r, u in zip(setups, item_cost_s, requests, unit)]
        return cls(setups, requests, coupled, unit, item_cost_s, work)


class DevicePool(Agent):
    kind = "device"
    METRICS = {
        "devices": ("count", "devices in service"),
        "utilisation": ("ratio", "CPU busy share this tick (processed work / budget), at most 1; "
                        "with no budget (no device in service), 1 while work arrives, else 0"),
        "offered_load": ("ratio", "work arriving this tick / budget; above 1 means overload"),
        "queue_delay_ms": ("ms", "mean delay an arrival sees this tick"),
        "setups": ("setups per tick", "connection setups offered this tick"),
        "setup_success_ratio": ("ratio", "setups that completed within their caller's timeout / offered; 1 if none"),
        "request_success_ratio": ("ratio", "requests forwarded within their caller's timeout / offered; 1 if none"),
        "rejected": ("items per tick", "items rejected cheaply (protection or full connection table)"),
        "dropped": ("items per tick", "items dropped because the queue was full"),
        "wasted_work_ratio": ("ratio", "share of processed work whose caller had already timed out"),
        "table_used_ratio": ("ratio", "connection-tracking entries in use / capacity"),
        "connections": ("count", "established connections tracked"),
        "dropped_by_action": ("count per tick", "established connections dropped by an operator action this tick"),
    }

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        self.count = int(spec["count"])
        self.cpu_per_device = float(spec["cpu_per_device"])
        costs = spec["costs"]
        self.c_setup = float(costs["setup"])
        self.c_request = float(costs["request"])
        self.c_reject = float(costs["reject"])
        table = spec["conntrack"]
        self.table_per_device = float(table["capacity_per_device"])
        self.half_open_ticks = in_ticks(table["half_open_timeout"], world.dt)
        queue = spec["queue"]
        self.buffer_s = float(queue["buffer"])
        self.base_latency = float(queue["base_latency"])
        self.protection = bool(spec["protection"])
        self.protection_queue = float(queue["protection_target"])  # seconds of queue protection allows
        self.queue = 0.0  # work units waiting
        self.fault: dict | None = None  # a fault (toxic) an operation applied: share, kind, latency, until
        self.established: dict[str, int] = dict(self.wiring.initial_connections)
        self.half_open = [0] * self.half_open_ticks  # ring of half-open entries by expiry
        self.half_open_total = 0
        self.ring_pos = 0
        self.down_until = -1

    # -- operations ----------------------------------------------------------------------
    @operation(example={"count": 4},
               count=Arg("devices added to the pool (a negative count takes devices out of service)", unit="devices"))
    def op_add_devices(self, tick: int, count: int = 1) -> None:
        """Bring ``count`` more devices into service: the pool's CPU budget and connection
        table grow at once (any hardware lead time is the mitigation's)."""
        self.count += int(count)

    @operation(example={"enabled": True}, enabled=Arg("true switches protection on, false off"))
    def op_set_protection(self, tick: int, enabled: bool = True) -> None:
        """Switch per-source fair-share admission control on every device of the pool on or
        off: with it, each population gets at most a max-min fair share of the CPU and its
        excess is rejected cheaply, at once."""
        self.protection = bool(enabled)

    @operation(example={"duration": 120.0},
               duration=Arg("how long the devices stay down (at least a tick)", unit="s", min=0))
    def op_restart(self, tick: int, duration: float = 60.0) -> None:
        """Reboot every device: state is lost, every established connection drops (its
        clients reconnect), the queue is emptied, and nothing passes for ``duration``."""
        self.down_until = tick + in_ticks(duration, self.world.dt)
        self._dropped_by_action = sum(self.established.values())
        for src, n in sorted(self.established.items()):
            if n:
                self.send(src, "conn_event", {"dropped": n, "reason": "restart"}, tick)
        self.established = {}
        self.half_open = [0] * self.half_open_ticks
        self.half_open_total = 0
        self.queue = 0.0

    @operation(example={"share": 0.1, "kind": "timeout", "latency": 0.5, "rate": 50000.0, "duration": 300.0},
               share=Arg("share of the items crossing the pool that fail whatever its load; 0: none",
                         unit="share of items (0-1)", min=0, max=1),
               kind=Arg("timeout: the caller waits out its timeout; error: refused at once", choices=FAULT_KINDS),
               latency=Arg("delay added to every item crossing the pool, on top of its queueing (which varies as an "
                           "exponential around its mean: the jitter)", unit="s", min=0),
               rate=Arg("work units per second the whole pool passes at most (a bandwidth limit); left out: its "
                        "devices' own", unit="work units/s", min=0),
               duration=Arg("how long the fault lasts before it lifts by itself (at least a tick); left out: until "
                            "another fault operation changes it", unit="s", min=0))
    def op_fault(self, tick: int, share: float = 0.0, kind: str = "timeout", latency: float = 0.0,
                 rate: float | None = None, duration: float | None = None) -> None:
        """A fault (toxic) on the network the pool stands for: ``share`` of the items fail
        (as a timeout or refused at once), every item takes ``latency`` longer, and the pool
        passes at most ``rate`` work units a second (its queue and drops do the rest), for
        ``duration`` or until changed; share 0 and latency 0 without a rate lift it."""
        self.fault = {"share": share_or_rate("share", share, 1.0), "kind": kind,
                      "latency": share_or_rate("latency", latency),
                      "rate": None if rate is None else share_or_rate("rate", rate),
                      "until": None if duration is None else tick + in_ticks(duration, self.world.dt)}

    def _faulted(self, n: int) -> int:
        """Of ``n`` items that got through, how many the fault fails."""
        return self._some(n, self.fault["share"]) if self.fault else 0

    # -- the tick --------------------------------------------------------------------------
    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        """Read the inbox, admit (connection table, then protection), queue (the buffer drops
        what does not fit), resolve every flow's items, report."""
        self._dropped_by_action = 0
        if self.fault and self.fault["until"] is not None and tick >= self.fault["until"]:
            self.fault = None
            self.event(tick, "fault_lifted")
        flows = self._read(tick, inbox)
        dropped_by_action = self._dropped_by_action

        # Half-open entries expire.
        self.ring_pos = (self.ring_pos + 1) % self.half_open_ticks
        self.half_open_total -= self.half_open[self.ring_pos]
        self.half_open[self.ring_pos] = 0

        down = tick < self.down_until or self.count <= 0
        rate = 0.0 if down else self.count * self.cpu_per_device  # work units per second
        if self.fault and self.fault["rate"] is not None:
            rate = min(rate, self.fault["rate"])  # a bandwidth limit
        budget = rate * self.world.dt

        # Closes free entries first.
        for f in flows:
            b = f.body
            if b["closes"]:
                self.established[b["origin"]] = max(0, self.established.get(b["origin"], 0) - int(b["closes"]))

        offer = _Offer.of(flows, self.c_setup, self.c_request)
        adm_s, adm_r = self._admit(flows, offer, budget, rate)
        setups, requests, unit, coupled = offer.setups, offer.requests, offer.unit, offer.coupled
        rej_s = [s - a for s, a in zip(setups, adm_s)]
        rej_r = [r * u - a for r, u, a in zip(requests, unit, adm_r)]
        rejected = np_sum(rej_s) + np_sum(rej_r)
        keep, processed, delay = self._queue(offer, adm_s, adm_r, rejected, budget, rate, down)
        dropped = np_sum([s + r for s, r in zip(adm_s, adm_r)]) * (1 - keep)
        s_ok_all, r_ok_all, wasted = self._resolve(tick, flows, offer, rej_s, rej_r, keep, delay, down)

        offered = np_sum(offer.work)
        setups_offered = np_sum(setups)
        req_offered = np_sum([r * u for r, u in zip(requests, unit)]) + np_sum([s for s, c in zip(setups, coupled) if c])
        table_cap = self.count * self.table_per_device
        metrics = {
            "devices": 0 if down else self.count,
            "utilisation": processed / budget if budget else (1.0 if offered else 0.0),
            "offered_load": offered / budget if budget else (1.0 if offered else 0.0),
            "queue_delay_ms": 1e3 * delay if math.isfinite(delay) else 1e3 * self.buffer_s,
            "setups": setups_offered,
            "setup_success_ratio": s_ok_all / setups_offered if setups_offered else 1.0,
            "request_success_ratio": r_ok_all / req_offered if req_offered else 1.0,
            "rejected": rejected,
            "dropped": dropped,
            "wasted_work_ratio": min(1.0, wasted / processed) if processed else 0.0,
            "table_used_ratio": (sum(self.established.values()) + self.half_open_total) / table_cap if table_cap else 1.0,
            "connections": sum(self.established.values()),
            "dropped_by_action": dropped_by_action,
        }
        self.report(tick, metrics)
        return self.finish(metrics)

    def _read(self, tick: int, inbox: list[Message]) -> list[Message]:
        """The tick's flows; closes free their entries, applies are applied."""
        flows = []
        for msg in inbox:
            if msg.kind == "flow":
                flows.append(msg)
            elif msg.kind == "close":
                o = msg.body["origin"]
                self.established[o] = max(0, self.established.get(o, 0) - int(msg.body["count"]))
            elif msg.kind == "apply":
                self.handle_apply(tick, msg.body)
        return flows

    def _admit(self, flows: list[Message], offer: _Offer, budget: float, rate: float) -> tuple[list[float], list[float]]:
        """(setups, requests) admitted of each flow: the connection table first, then
        protection. Rejections are cheap and fast."""
        setups, requests, unit, item_cost_s = offer.setups, offer.requests, offer.unit, offer.item_cost_s
        adm_s = list(setups)
        adm_r = [r * u for r, u in zip(requests, unit)]
        used = sum(self.established.values()) + self.half_open_total
        free = max(0.0, self.count * self.table_per_device - used)
        total_setups = np_sum(setups)
        if total_setups > free and total_setups > 0:
            share = free / total_setups
            adm_s = [s * share for s in setups]
        if self.protection and len(flows) and budget > 0:
            # Admit only what can be served this tick without the queue growing past
            # ``protection_queue`` seconds, shared max-min fairly between sources.
            adm_work = [s * c + r * self.c_request for s, c, r in zip(adm_s, item_cost_s, adm_r)]
            reject_cost = np_sum([(s - a) + r * u for s, a, r, u in zip(setups, adm_s, requests, unit)]) * self.c_reject
            room = budget + self.protection_queue * rate - self.queue - reject_cost
            # A source is a population, however many shards send its flows.
            sources: dict[str, list[int]] = {}
            for i, f in enumerate(flows):
                sources.setdefault(source_of(f.body["origin"]), []).append(i)
            groups = list(sources.values())
            demand = [left_sum(adm_work[i] for i in g) if len(g) > 1 else adm_work[g[0]] for g in groups]
            shares = fair_shares(demand, max(0.0, room))
            for g, want, share in zip(groups, demand, shares):
                if want > share:
                    frac = share / want
                    for i in g:
                        adm_s[i] *= frac
                        adm_r[i] *= frac
        return adm_s, adm_r

    def _queue(self, offer: _Offer, adm_s: list[float], adm_r: list[float], rejected: float, budget: float,
               rate: float, down: bool) -> tuple[float, float, float]:
        """(share of the admitted items the buffer keeps, work processed, mean delay): what
        does not fit in the buffer is dropped (callers see a timeout)."""
        w_adm = np_sum([s * c + r * self.c_request for s, c, r in zip(adm_s, offer.item_cost_s, adm_r)]) \
            + rejected * self.c_reject
        if down:
            keep = 0.0
        else:
            space = self.buffer_s * rate + budget - self.queue
            keep = 1.0 if w_adm <= space else max(0.0, space) / w_adm
        w_in = w_adm * keep
        q_before = self.queue
        processed = min(budget, q_before + w_in)
        self.queue = q_before + w_in - processed
        if down:
            delay = math.inf
        else:
            rho = min(0.95, (q_before + w_in) / budget) if budget else 0.95
            delay = self.base_latency / (1.0 - rho) + (q_before + max(0.0, w_in - budget) / 2) / rate
        return keep, processed, delay

    def _resolve(self, tick: int, flows: list[Message], offer: _Offer, rej_s: list[float], rej_r: list[float],
                 keep: float, delay: float, down: bool) -> tuple[int, int, float]:
        """Each flow's whole items: rejected, then kept by the buffer, then answered in time
        with the M/M/1-like chance P(delay <= timeout) = 1 - exp(-timeout / mean delay);
        the results go on along the flow. Returns (setups ok, requests ok, work wasted)."""
        setups, requests, unit, coupled = offer.setups, offer.requests, offer.unit, offer.coupled
        s_ok_all = r_ok_all = 0
        wasted = 0.0
        expiry = (self.ring_pos - 1) % self.half_open_ticks
        for i, f in enumerate(flows):
            b = f.body
            origin = b["origin"]
            lag = self.fault["latency"] if self.fault else 0.0  # a fault's added latency, before the queueing
            ps = 0.0 if down or b["ct"] <= lag else 1.0 - math.exp(-(b["ct"] - lag) / delay)
            pr = 0.0 if down or b["rt"] <= lag else 1.0 - math.exp(-(b["rt"] - lag) / delay)
            # Whole items: each is rejected, then admitted to the queue, independently.
            n_setups, n_reqs = int(setups[i]), int(requests[i] * unit[i])
            s_rej = self._some(n_setups, rej_s[i] / n_setups if n_setups else 0.0)
            r_rej = self._some(n_reqs, rej_r[i] / n_reqs if n_reqs else 0.0)
            n_s, n_r = self._some(n_setups - s_rej, keep), self._some(n_reqs - r_rej, keep)
            if coupled[i]:
                # One item is a setup plus a request (UDP-style flow); it holds an entry until it times out.
                ok = self.draws.binomial(n_s, pr)
                self.half_open[expiry] += n_s
                self.half_open_total += n_s
                wasted += (n_s - ok) * (self.c_setup + self.c_request)
                s_ok_all += ok
                r_ok_all += ok
                total = int(b["setups"])
                hit = self._faulted(ok)
                ok -= hit
                s_rej += hit if self.fault and self.fault["kind"] == "error" else 0
                res = {"s_ok": 0, "s_fail": 0, "s_rej": 0, "r_ok": ok, "r_rej": s_rej,
                       "r_fail": max(0, total - ok - s_rej)}
            else:
                s_ok = self.draws.binomial(n_s, ps)
                r_ok = self.draws.binomial(n_r, pr)
                self.established[origin] = self.established.get(origin, 0) + s_ok
                self.half_open[expiry] += n_s - s_ok
                self.half_open_total += n_s - s_ok
                wasted += (n_s - s_ok) * self.c_setup + (n_r - r_ok) * self.c_request
                s_ok_all += s_ok
                r_ok_all += r_ok
                if self.fault:
                    s_hit, r_hit = self._faulted(s_ok), self._faulted(r_ok)
                    s_ok, r_ok = s_ok - s_hit, r_ok - r_hit
                    if self.fault["kind"] == "error":
                        s_rej, r_rej = s_rej + s_hit, r_rej + r_hit
                res = {"s_ok": s_ok, "s_rej": s_rej, "s_fail": max(0, int(b["setups"]) - s_ok - s_rej),
                       "r_ok": r_ok, "r_rej": r_rej, "r_fail": max(0, int(b["requests"]) - r_ok - r_rej)}
            self._forward(b, res, 0.0 if down else delay, tick)
        return s_ok_all, r_ok_all, wasted

    def _some(self, n: int, p: float) -> int:
        """How many of n items an event with probability p hits."""
        if n <= 0 or p <= 0.0:
            return 0
        return n if p >= 1.0 else self.draws.binomial(n, p)

    def _forward(self, b: dict, res: dict, delay: float, tick: int) -> None:
        """Pass what got through to the next hop, or report the outcome to the origin."""
        acc = {k: b.get(k, 0) + res[k] for k in ("s_fail", "s_rej", "r_fail", "r_rej")}
        if b["hops"]:
            self.send(b["hops"][0], "flow", b | acc | {
                "hops": b["hops"][1:], "setups": res["s_ok"] if not b["coupled"] else res["r_ok"],
                "requests": res["r_ok"], "delay": b["delay"] + delay}, tick)
        else:
            self.send(b["origin"], "flow_result", acc | {"sent": b["sent"], "s_ok": res["s_ok"], "r_ok": res["r_ok"],
                                                        "r_full": b["r_full"], "delay": b["delay"] + delay}, tick)
