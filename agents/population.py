"""A client population held as cohorts: counts per state and attempt number, with
timing wheels for future connection attempts and request retries.

Pooled mode: clients hold a connection (with a lifetime; the next one is opened before
the old one closes) and send requests on it; a failed request makes the client drop its
connection and reconnect (``reconnect_on``), and its retries wait for the new connection.
Per-request mode: every request opens a new flow (a setup) on the path, like DNS over UDP.
Durable work is kept and retried until done (a backlog); perishable work fails for good
after ``retry.max_attempts``.

Flows are summarised per tick: one ``flow`` message goes out along the path, one
``flow_result`` comes back some ticks later, stamped with the tick it was sent.
"""
from __future__ import annotations

import dataclasses
import math
import types
from dataclasses import dataclass

import numpy as np

from . import cohort_kernels as kernels
from .base import CLOCK, Agent, Arg, BadArgument, Message, StepResult, WorldInfo, in_ticks, operation, share_or_rate
from .draws import _EXACT_LIMIT
from .limits import LARGEST_NUMBER, LONGEST_DELAY, MOST_ATTEMPTS, MOST_WHEEL_CELLS
from .retry import BACKOFFS, BREAKER_DEFAULTS, JITTERS, RECONNECT_ON, CircuitBreaker, RetryPolicy, TokenBucket
from .shards import HealthReports, source_of
from .wheel import DelayStore, DelayTable, TimingWheel, delay, delay_table

WORKS = ("perishable", "durable")  # perishable work fails for good after max_attempts; durable work is kept
MODES = ("pooled", "per_request")  # clients hold connections, or every request is a flow of its own
#: what a pooled client's fresh perishable request does while the client has no connection
WHILE_RECONNECTING = ("fail", "queue")


#: The declarations of the operations both population models have (``Population`` here and
#: ``reference.ClientByClientPopulation``, which overrides some of them): written once.
SET_PATH_OP = dict(
    example={"path": ["bridge-dedicated"]},
    path=Arg("device pools the traffic crosses from now on, in order; empty or left out: none (straight to the target)",
             names="device"),
    target=Arg("the service the requests go to from now on; null: none (the last device answers); leave it out "
               "to keep the current target", names="service"),
)
DROP_BACKLOG_OP = dict(
    example={"fraction": 1.0},
    fraction=Arg("the share of the waiting work given up", unit="share of the waiting work (0-1)", min=0, max=1),
)
SCALE_RATE_OP = dict(
    example={"factor": 0.0},
    factor=Arg("fresh requests as a multiple of the playbook's rate: 0 stops them, below 1 throttles, 1 restores",
               unit="x the playbook's rate", min=0),
)


RETRY_POLICY_ARGS = dict(
    backoff=Arg("how the nominal delay grows (see the retry policy's backoff)", choices=BACKOFFS),
    base=Arg("nominal delay before the first retry", unit="s", min=0, max=LONGEST_DELAY),
    multiplier=Arg("exponential back-off: each nominal delay is this many times the one before", min=1),
    cap=Arg("largest nominal delay", unit="s", min=0, max=LONGEST_DELAY),
    jitter=Arg("how the actual delay is drawn from the nominal one (see the retry policy's jitter)", choices=JITTERS),
    max_attempts=Arg("attempts including the first (0: unlimited)", unit="attempts", min=0, max=MOST_ATTEMPTS),
)


def changed_policy(policy: RetryPolicy, **changes) -> RetryPolicy:
    """``policy`` with the given fields changed (None keeps a field); their choices and
    ranges (RETRY_POLICY_ARGS) are checked by ``Agent.handle_apply`` before."""
    given = {k: v for k, v in changes.items() if v is not None}
    for name in ("base", "cap", "multiplier"):
        if name in given:
            given[name] = float(given[name])
    if "max_attempts" in given:
        given["max_attempts"] = int(given["max_attempts"])
    return dataclasses.replace(policy, **given)


def refuses_at_once(agent: Agent) -> bool:
    """A caller that retries a refusal at once, on the same connection, with a bounded number
    of attempts: against a full queue every such retry is refused too, at the same instant."""
    return bool(agent.retry.at_once and agent.retry.max_attempts > 1
                and not (agent.pooled and "reject" in agent.reconnect_on))


def read_population_spec(agent: Agent, spec: dict, dt: float) -> None:
    """Set a population agent's configuration from its playbook section: the cohort model
    and the client-by-client reference read it through this one function."""
    agent.clients = int(spec["clients"])
    agent.rate = float(spec["rate"])  # requests per client per second
    agent.pooled = spec["mode"] == "pooled"
    agent.durable = spec["work"] == "durable"
    agent.max_rate = spec.get("max_rate")  # durable dispatch cap, requests/s
    agent.path = list(spec["path"])
    agent.target = spec.get("target")
    agent.depends_on = list(spec["depends_on"])
    conn = spec["connection"]
    agent.lifetime = float(conn["lifetime"])
    agent.connect_timeout = float(conn["timeout"])
    agent.reconnect = RetryPolicy.from_spec(conn["reconnect"])
    agent.reconnect_on = set(conn["reconnect_on"])
    agent.queue_while_reconnecting = conn["while_reconnecting"] == "queue"
    agent.request_timeout = float(spec["request"]["timeout"])
    retry = spec["retry"]
    agent.retry = RetryPolicy.from_spec(retry)
    agent.attempts_limit = agent.retry.max_attempts  # what perishable work is given up after
    if agent.durable:
        agent.retry.max_attempts = 0  # durable work is never given up
    agent.budget = TokenBucket(float(retry["budget"]["ratio"]), float(retry["budget"]["capacity"])) \
        if retry.get("budget") else None
    cb = retry.get("circuit_breaker")
    agent.breaker = CircuitBreaker(float(cb["threshold"]), float(cb["window"]),
                                  float(cb["open_for"]), float(cb["probe_fraction"]), dt) \
        if cb else None
    agent.retries_refusal_at_once = refuses_at_once(agent)
    bugs = spec["bugs"]
    agent.bug_ignores_backoff = bool(bugs["reconnect_ignores_backoff"])
    agent.bug_delay = float(bugs["reconnect_delay"])
    # Two factors scale the fresh requests: the world's (demand rising or falling: a trigger's or a
    # fault's scale_rate) and the response's (an action's cut, or its readmission), so that a cut
    # and its readmission return to the demand of the moment, not to the playbook's rate.
    agent.demand_factor = 1.0
    agent.rate_factor = 1.0
    agent.by_response = False  # the operation being applied came from the deployment tooling (an action)
    agent.dispatch_factor = 1.0
    agent.readmission = None  # a readmission in steps under way (op_readmit)
    agent.given_up = 0  # work an op_drop_backlog gave up, counted as errors at the end of the tick
    agent.health_of_clients = spec["health"] == "clients_without_backlog"
    agent.dispatch_credit = 0.0  # durable dispatch: the fraction of a request carried to the next tick


def wheel_horizon(p, dt: float) -> int:
    """Ticks ahead a population's timing wheels reach (``p``: a population, or what
    ``read_population_spec`` made of its spec): its longest delay plus the timeouts before it."""
    return math.ceil((max(p.reconnect.cap, p.retry.cap, p.bug_delay) + p.connect_timeout + p.request_timeout) / dt) + 4


def wheel_cells(p, dt: float) -> int:
    """The cells (slots ahead x attempt classes) of a population's largest timing wheel: the
    memory its wheels take (three of them, eight bytes a cell)."""
    return wheel_horizon(p, dt) * (max(p.reconnect.attempt_classes(), p.retry.attempt_classes()) + 1)


def spec_wheel_cells(spec: dict, dt: float) -> int:
    """``wheel_cells`` of a population as its playbook section makes it (validation's check)."""
    p = types.SimpleNamespace()
    read_population_spec(p, spec, dt)
    return wheel_cells(p, dt)


#: A loop population's retry amplification is its tries over the sum of these metrics (the
#: scorer's loop_broken and the report's chart): its fresh demand for perishable work; for
#: durable work, the requests it completed (ok, and errors given up), since a backlog may be
#: dispatched faster than work arrives: a healthy drain at full dispatch is not amplification,
#: a drain that fails and retries is.
AMPLIFICATION_BASE = {"perishable": ("demand",), "durable": ("ok", "errors")}


def work_switch(event: dict) -> tuple[str, str] | None:
    """(population, its work from then on) of a journalled ``applied`` set_work (a shard's
    names its population), else None: what the scorer and the report follow the base by."""
    if event.get("event") == "applied" and event.get("op") == "set_work":
        return source_of(event["agent"]), event["args"]["work"]
    return None


class PopulationControls:
    """What both population models share: the operations triggers and mitigations apply,
    and the end of a tick (metrics, health to dependents, telemetry)."""

    def _end_tick(self, tick: int, res: dict, waiting: int, demand: int, fresh: int, attempts: int,
                  conn_attempts: int, backlog: int):
        resolved = res["ok"] + res["failed"]
        success_ratio = res["ok"] / resolved if resolved else 1.0
        final = res["ok"] + res["errors"]
        metrics = {
            "clients": self.clients,
            "connected": self.connected,
            "waiting": waiting,
            "demand": demand,
            "fresh": fresh,
            "attempts": attempts,
            "conn_attempts": conn_attempts,
            "tries": attempts + (conn_attempts if self.pooled else 0),
            "ok": res["ok"],
            "failed": res["failed"],
            "errors": res["errors"],
            "success_ratio": success_ratio,
            "error_ratio": res["errors"] / final if final else 0.0,
            "setup_ok": res["setup_ok"],
            "setup_failed": res["setup_failed"],
            "backlog": backlog,
            "broken_connections": self.broken,
            # what an operation's scale_rate below 1 keeps from being sent (the expected count): the
            # world's cut, then the response's of what is left
            "held_back": self.rate * self.clients * self.world.dt * (
                max(0.0, 1.0 - self.demand_factor) + self.demand_factor * max(0.0, 1.0 - self.rate_factor)),
        }
        if self.health_of_clients:  # the share of its clients with no pending work (counts add up over shards)
            ok, of = self.clients - min(backlog, self.clients), self.clients
        else:
            ok, of = res["ok"], resolved
        for sub in self.wiring.health_subscribers:
            self.send(sub, "health", {"ratio": ok / of if of else 1.0, "ok": ok, "resolved": of}, tick)
        self.report(tick, metrics)
        return self.finish(metrics)

    def _dispatch_cap(self, dt: float) -> int:
        """Durable work: how many requests may go out this tick. The fraction of a request
        left over carries to the next tick (unused whole requests do not), so the long-run
        dispatch is max_rate x dispatch_factor at any tick, even below one per tick."""
        self.dispatch_credit += self.max_rate * self.dispatch_factor * dt
        cap = int(self.dispatch_credit + 1e-9)
        self.dispatch_credit -= cap
        return cap

    def _check_wheels(self, **changed) -> None:
        """Refuse a hot-fix (before it changes anything) whose timing wheels would hold more
        than MOST_WHEEL_CELLS: ``changed`` are the policies and timeouts it would set."""
        cells = wheel_cells(types.SimpleNamespace(**{**vars(self), **changed}), self.world.dt)
        if cells > MOST_WHEEL_CELLS:
            raise BadArgument(f"{', '.join(changed)}: the delays it allows over the tick, times the attempts it "
                              f"counts, would be {cells:,} cells of the clients' timing wheels, over the most the model "
                              f"keeps, {MOST_WHEEL_CELLS:,} (a shorter delay or timeout, fewer attempts, or a longer tick)")

    @operation(example={"ratio": 0.1},
               ratio=Arg("retry tokens every fresh request earns (a retry spends one): retries are held to about this "
                         "share of the fresh requests; null removes the budget", unit="retries per fresh request",
                         min=0),
               capacity=Arg("most tokens kept (the burst of retries allowed)", unit="retries", min=0))
    def op_set_retry_budget(self, tick: int, ratio: float | None = None, capacity: float = 100.0) -> None:
        """A client hot-fix: from now on the clients' retries are held by a token-bucket retry
        budget (retries beyond it fail for good, or wait, for durable work), or no longer are."""
        self.budget = None if ratio is None else TokenBucket(share_or_rate("ratio", ratio), share_or_rate("capacity", capacity))

    @operation(example={"threshold": 0.5, "open_for": 30.0},
               enabled=Arg("true: the clients get a circuit breaker from now on (closed, with no history); false: "
                           "they have none"),
               threshold=Arg("it opens when more than this share of the attempts over `window` failed",
                             unit="share of failed attempts (0-1)", min=0, max=1),
               window=Arg("the sliding window the failure share is measured over (also how long it stays half-open)",
                          unit="s", min=0),
               open_for=Arg("how long it stays open", unit="s", min=0),
               probe_fraction=Arg("half-open, after open_for: the share of requests let through for one window",
                                  unit="share of requests (0-1)", min=0, max=1))
    def op_set_circuit_breaker(self, tick: int, enabled: bool = True, threshold: float = BREAKER_DEFAULTS["threshold"],
                               window: float = BREAKER_DEFAULTS["window"], open_for: float = BREAKER_DEFAULTS["open_for"],
                               probe_fraction: float = BREAKER_DEFAULTS["probe_fraction"]) -> None:
        """A client hot-fix: from now on the clients' requests go through a circuit breaker
        (as retry.circuit_breaker in a playbook: while open, they fail at once without
        touching the network), or no longer do."""
        self.breaker = CircuitBreaker(share_or_rate("threshold", threshold, 1.0), share_or_rate("window", window),
                                      share_or_rate("open_for", open_for),
                                      share_or_rate("probe_fraction", probe_fraction, 1.0), self.world.dt) \
            if enabled else None

    @operation(example={"seconds": 30.0},
               seconds=Arg("the clients' request timeout from now on", unit="s", min=0, max=LONGEST_DELAY))
    def op_set_request_timeout(self, tick: int, seconds: float) -> None:
        """A client hot-fix: the clients wait this long for an answer from now on (requests
        already on the wire keep the timeout they were sent with)."""
        timeout = max(self.world.dt, share_or_rate("seconds", seconds))
        self._check_wheels(request_timeout=timeout)
        self.request_timeout = timeout
        self._policies_changed()

    @operation(example={"backoff": "exponential", "base": 2.0, "cap": 120.0, "max_attempts": 3},
               **RETRY_POLICY_ARGS)
    def op_set_retry_policy(self, tick: int, backoff: str | None = None, base: float | None = None,
                            multiplier: float | None = None, cap: float | None = None, jitter: str | None = None,
                            max_attempts: int | None = None) -> None:
        """A client hot-fix: the request retry policy from now on (arguments left out keep
        their value). Retries already scheduled keep their time; failures from now on wait
        by the new policy and count against the new max_attempts (durable work is never given
        up). Back-off history carries over: a request on its third attempt stays on it."""
        retry = changed_policy(self.retry, backoff=backoff, base=base, multiplier=multiplier, cap=cap,
                               jitter=jitter, max_attempts=max_attempts)
        self._check_wheels(retry=retry)
        self.retry = retry
        if max_attempts is not None:
            self.attempts_limit = self.retry.max_attempts
        self.retry.max_attempts = 0 if self.durable else self.attempts_limit
        self._policies_changed()

    @operation(example={"work": "perishable"},
               work=Arg("durable: work that fails is kept and retried until done; perishable: it fails for good "
                        "after retry.max_attempts", choices=WORKS),
               max_rate=Arg("durable work: most requests dispatched per second from now on (required if the "
                            "population has none); left out: unchanged", unit="requests/s", min=0))
    def op_set_work(self, tick: int, work: str, max_rate: float | None = None) -> None:
        """A client hot-fix of durability. To durable: failures are kept and retried until
        done, and work waits to be dispatched at most ``max_rate`` a second. To perishable:
        failures are given up after the retry policy's max_attempts, and the work waiting
        for dispatch is sent at once (each request on the attempt it had reached)."""
        rate = self.max_rate if max_rate is None else share_or_rate("max_rate", max_rate)
        if work == "durable" and rate is None:
            raise BadArgument("max_rate None: durable work needs a dispatch rate (this population has none)")
        if work == "perishable" and self.health_of_clients:
            raise BadArgument("work 'perishable': this population's health is its clients without a backlog, "
                              "which only durable work has")
        self.max_rate = rate
        was_durable, self.durable = self.durable, work == "durable"
        self.retry.max_attempts = 0 if self.durable else self.attempts_limit
        if was_durable and not self.durable:
            self._send_waiting_work(tick)
        self._policies_changed()

    @operation(example={"backoff": "exponential", "base": 5.0, "cap": 300.0},
               **RETRY_POLICY_ARGS)
    def op_set_reconnect_policy(self, tick: int, backoff: str | None = None, base: float | None = None,
                                multiplier: float | None = None, cap: float | None = None, jitter: str | None = None,
                                max_attempts: int | None = None) -> None:
        """A client hot-fix: the back-off of connection re-establishment from now on (pooled
        mode; arguments left out keep their value; max_attempts only stops the back-off
        growing). Reconnections already scheduled keep their time."""
        reconnect = changed_policy(self.reconnect, backoff=backoff, base=base, multiplier=multiplier, cap=cap,
                                   jitter=jitter, max_attempts=max_attempts)
        self._check_wheels(reconnect=reconnect)
        self.reconnect = reconnect
        self._policies_changed()

    @operation(example={"mode": "pooled", "over": 60.0},
               mode=Arg("pooled: clients hold connections and send their requests on them; per_request: every "
                        "request is a flow (and a setup) of its own", choices=MODES),
               over=Arg("switching to pooled: the clients open their connections at times spread evenly over this "
                        "long (at least a tick)", unit="s", min=0, max=LONGEST_DELAY))
    def op_set_mode(self, tick: int, mode: str, over: float = 1.0) -> None:
        """A client hot-fix of the connection mode. To per_request: every connection closes,
        and retries waiting for a connection go out as requests of their own. To pooled:
        every client opens a connection, at times spread evenly over ``over`` (a wave of
        setups), and until it has one its fresh perishable requests fail at once (durable
        work waits)."""
        if (mode == "pooled") == self.pooled:
            return
        self.pooled = mode == "pooled"
        self.surges = []  # a surge means something else in the other mode
        self._mode_changed(tick, in_ticks(over, self.world.dt))
        self._policies_changed()

    @operation(example={"reconnect_on": ["timeout"]},
               reconnect_on=Arg("the request failures that make a client drop its connection and reconnect from "
                                "now on (empty: none)", choices=RECONNECT_ON),
               lifetime=Arg("how long a new connection is kept before it is replaced", unit="s", min=0),
               timeout=Arg("how long a connection attempt waits from now on", unit="s", min=0, max=LONGEST_DELAY),
               while_reconnecting=Arg("what a fresh request of a client without a connection does from now on: "
                                      "fail at once for good, or queue for the connection", choices=WHILE_RECONNECTING))
    def op_set_connection(self, tick: int, reconnect_on: list | None = None, lifetime: float | None = None,
                          timeout: float | None = None, while_reconnecting: str | None = None) -> None:
        """A client hot-fix of pooled connections (arguments left out keep their value): which
        request failures drop the connection, how long connections live (at least a tick; the
        connections held are replaced at the new rate), and the connection timeout (for
        attempts from now on). Nothing happens in per-request mode."""
        lifetime = None if lifetime is None else max(self.world.dt, share_or_rate("lifetime", lifetime))
        timeout = None if timeout is None else max(self.world.dt, share_or_rate("timeout", timeout))
        if timeout is not None:
            self._check_wheels(connect_timeout=timeout)
        if reconnect_on is not None:
            self.reconnect_on = set(reconnect_on)
        if while_reconnecting is not None:
            self.queue_while_reconnecting = while_reconnecting == "queue"
        if timeout is not None:
            self.connect_timeout = timeout
        if lifetime is not None:
            self.lifetime = lifetime
            self._lifetime_changed(tick)
        self._policies_changed()

    def _readmit_due(self, tick: int) -> None:
        """A readmission in steps: the next step, if it is due (called at the start of a tick)."""
        r = self.readmission
        if r is not None and tick >= r["next"]:
            self._readmit_step(tick)

    def _lifted(self) -> float:
        """The factor a readmission lifts: durable work's dispatch, else the fresh requests' cut
        (the response's, or the world's for a readmission the world started)."""
        r = self.readmission
        return self.dispatch_factor if self.durable else self.rate_factor if r["by_response"] else self.demand_factor

    def _readmit_step(self, tick: int) -> None:
        r = self.readmission
        share = min(1.0, round(self._lifted() + r["step"], 9))  # steps of 0.1 add up to 0.9999999999999999, one short
        if "left" in r:  # (a readmission over a stated time: its last step lets everything back)
            r["left"] -= 1
            share = 1.0 if r["left"] <= 0 else share
        if self.durable:
            self.op_scale_dispatch(tick, share)
        else:
            self._scale(tick, share, r["by_response"])  # the reference model redraws its clients' requests here
        self.event(tick, "readmitted", share=share)
        r["next"] = tick + r["every"]
        if share >= 1.0:
            self.readmission = None

    @operation(example={"step": 0.25, "every": 300.0},
               step=Arg("the share of the traffic let back at each step, at least 0.01", unit="share of the traffic (0-1)",
                        min=0.01, max=1),
               every=Arg("time between steps (at least a tick)", unit="s", min=0),
               over=Arg("let all of it back over this long instead (its last step this long after the first, to the "
                        "`every` below it): the steps are then even shares of what is held back, and step is unused",
                        unit="s", min=0),
               until=Arg("let all of it back by this clock time instead (as `over` the time from now to then; a time "
                         "already past: all of it at once)", unit=CLOCK))
    def op_readmit(self, tick: int, step: float = 0.25, every: float = 300.0, over: float | None = None,
                   until: float | None = None) -> None:
        """Let the traffic back in steps: the first step at once, then one every ``every``
        until all of it is back (or, with ``over``, in even steps that end that long after the
        first; with ``until``, that end at a clock time). Perishable work: the fresh requests
        (scale_rate); durable work: the dispatch (scale_dispatch). A scale_rate or
        scale_dispatch applied meanwhile sets where the next step starts from."""
        every_ticks = in_ticks(every, self.world.dt)
        self.readmission = {"step": float(step), "every": every_ticks, "next": tick, "by_response": self.by_response}
        if until is not None:
            if over is not None:
                raise BadArgument(f"until {until!r}: over and until both say when the readmission ends (give one)")
            over = max(0.0, float(until) - self.world.clock(tick))
        if over is not None:
            steps = round(float(over) / self.world.dt) // every_ticks + 1  # (the first at once)
            self.readmission |= {"step": max(0.0, 1.0 - self._lifted()) / steps, "left": steps}
        self._readmit_step(tick)

    @operation(**SCALE_RATE_OP)
    def op_scale_rate(self, tick: int, factor: float) -> None:
        """Disable (0), throttle (<1) or restore (1) this population's fresh requests; the
        factor replaces the last one, and retries already due still go out. An action's
        factor and a trigger's or fault's (demand rising or falling) are kept apart and
        multiply: restoring an action's cut (1, or a readmission) returns to the demand of
        the moment."""
        self._scale(tick, float(factor), self.by_response)

    def _scale(self, tick: int, factor: float, by_response: bool) -> None:
        offered = self.clients * self.rate * factor * (self.demand_factor if by_response else self.rate_factor)
        if offered > LARGEST_NUMBER:  # (the model counts requests in 64-bit integers)
            raise BadArgument(f"factor {factor:g}: the clients would send {offered:g} requests/s (clients x rate x "
                              f"factors), over the most the model counts, {LARGEST_NUMBER:g}/s")
        if by_response:
            self.rate_factor = factor
        else:
            self.demand_factor = factor
        self._rate_changed(tick)

    def take_apply(self, tick: int, msg: Message) -> None:
        """An operation sent to this population; the deployment tooling's are the response's."""
        self.by_response = msg.src == self.wiring.deployment
        try:
            self.handle_apply(tick, msg.body)
        finally:
            self.by_response = False

    def _rate_changed(self, tick: int) -> None:
        """(A model that draws its requests ahead draws them again here.)"""

    @operation(example={"factor": 0.5},
               factor=Arg("dispatch as a multiple of max_rate: 0 pauses delivery, below 1 throttles, 1 restores",
                          unit="x max_rate", min=0))
    def op_scale_dispatch(self, tick: int, factor: float) -> None:
        """Durable work: pause (0), throttle (<1) or restore (1) delivery; arrivals keep coming
        and wait in the backlog. The factor replaces the last one; perishable work ignores it."""
        self.dispatch_factor = float(factor)

    @operation(example={"enabled": False},
               bug=Arg("the latent bug: reconnect_ignores_backoff, connection re-establishment waits a fixed "
                       "bugs.reconnect_delay instead of backing off", choices=("reconnect_ignores_backoff",)),
               enabled=Arg("true switches the bug on, false off (the fix is deployed)"))
    def op_set_bug(self, tick: int, bug: str = "reconnect_ignores_backoff", enabled: bool = True) -> None:
        """Switch one of the clients' latent bugs on or off (see the population's ``bugs``)."""
        self.bug_ignores_backoff = bool(enabled)

    @operation(example={"reconnect_fraction": 0.3, "extra_setups_per_second": 2000.0, "duration": 600.0},
               reconnect_fraction=Arg("share of the connected clients that drop their connections and reconnect, "
                                      "spread evenly over the surge (above 1: some more than once)",
                                      unit="share of connected clients", min=0),
               extra_setups_per_second=Arg("connection setups per second from elsewhere on the path during the "
                                           "surge, for the whole population (split over its shards)",
                                           unit="setups/s", min=0),
               duration=Arg("how long the surge lasts (at least a tick)", unit="s", min=0))
    def op_surge(self, tick: int, reconnect_fraction: float = 0.0, extra_setups_per_second: float = 0.0,
                 duration: float = 60.0) -> None:
        """A burst of new connections. Pooled mode: a share of the connected clients
        re-establish their connections at once, back-off reset, spread over ``duration``,
        plus extra setups from elsewhere that close again once made. Per-request mode (where
        every request is its own connection): that share of the clients send a request
        more, spread over ``duration``, plus the extra ones (after a network disruption,
        servers ask again for what they hold)."""
        # (pooled, a client reconnects at most once a tick; per request, the surge is requests the model counts)
        asked = reconnect_fraction * self.clients / max(float(duration), self.world.dt)
        if not self.pooled and asked > LARGEST_NUMBER:
            raise BadArgument(f"reconnect_fraction {reconnect_fraction:g}: {self.clients:,} clients asking again that "
                              f"many times each over {duration:g} s would send {asked:g} requests/s, over the most the "
                              f"model counts, {LARGEST_NUMBER:g}/s")
        ticks = in_ticks(duration, self.world.dt)
        self.surges.append({"until": tick + ticks, "ticks": ticks, "fraction": float(reconnect_fraction),
                            "extra": float(extra_setups_per_second)})


def _padded(counts: list[int], classes: int) -> list[int]:
    """Counts per class, with zeros for classes added."""
    return counts + [0] * (classes - len(counts)) if len(counts) < classes else counts


_NOTHING_YET = [0] * (kernels.SETTLE_HEAD - kernels.SETTLE_RES)  # the result counts and outputs settle fills in


def _plus(a: list[int], b: list[int]) -> list[int]:
    return [x + y for x, y in zip(a, b)]


def _minus(a: list[int], b: list[int]) -> list[int]:
    return [x - y for x, y in zip(a, b)]


@dataclass
class Batch:
    """What one tick sent, waiting for its result."""

    setups: list[int]  # connection attempts per back-off class
    requests: list[int]  # request attempts per attempt class
    extra: int  # surge setups, with no client of ours behind them
    renewals: int  # setups of connected clients replacing a connection at the end of its lifetime
    released: int  # of the requests, retries that waited for their clients' new connections ...
    released_by: int  # ... and those clients (who send them all at once)
    senders: int  # clients connected when it was sent
    holding: float  # of those, how many still hold that connection
    rt: float  # the request timeout it was sent with (a hot-fix may change it meanwhile)


class Population(PopulationControls, Agent):
    """Counts per attempt class are plain lists (a handful of classes): the tick's
    arithmetic on them is Python's, and every draw goes through ``draws`` so that it is
    the one numpy would make on the same counts. What a batch's result does (most of a
    tick's work), and the steps it shares with the rest of the tick, are compiled kernels
    (``agents.cohort_kernels``) the lists cross into as arrays."""

    kind = "population"
    DERIVED = ("_lag_packs", "_delays")
    METRICS = {
        "clients": ("count", "clients in the population"),
        "connected": ("count", "clients holding an established connection (pooled mode)"),
        "waiting": ("count", "clients waiting in the timing wheel for their next connection attempt"),
        "demand": ("requests per tick", "fresh requests wanted this tick (all clients, connected or not; what a scale_rate "
                               "below 1 holds back is not in it: see held_back)"),
        "fresh": ("requests per tick", "fresh requests sent or queued this tick (durable work waiting for dispatch; "
                                       "not those a pooled client without a connection fails or, with "
                                       "while_reconnecting queue, holds for its connection: they go out as its "
                                       "retries waiting for one do)"),
        "attempts": ("requests per tick", "request attempts put on the wire this tick (fresh + retries; durable "
                                          "work: what was dispatched, fresh work included, at most max_rate)"),
        "conn_attempts": ("setups per tick", "connection attempts (setups) put on the wire this tick"),
        "tries": ("requests per tick", "request attempts and reconnections put on the wire this tick (a per-request client's "
                              "setup is part of its attempt); retry amplification is tries / demand (durable work: "
                              "tries / (ok + errors), the requests it completed)"),
        "ok": ("requests per tick", "request attempts that succeeded (results received this tick)"),
        "failed": ("requests per tick", "request attempts that failed (results received this tick)"),
        "errors": ("requests per tick", "requests that failed for good this tick (customer-visible errors)"),
        "success_ratio": ("ratio", "ok / (ok + failed) of attempts resolved this tick; 1 if none"),
        "error_ratio": ("ratio", "errors / (ok + errors) this tick; 0 if none"),
        "setup_ok": ("setups per tick", "connection attempts that succeeded (results received this tick)"),
        "setup_failed": ("setups per tick", "connection attempts that failed (results received this tick)"),
        "backlog": ("requests", "durable work not yet done (queued, waiting to retry or in flight)"),
        "broken_connections": ("count per tick", "connections broken by operator actions this tick"),
        "held_back": ("requests per tick", "fresh requests not sent this tick because an operation scaled the rate below 1 "
                                  "(the expected count; durable work a paused dispatch holds waits in the backlog instead)"),
    }

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        dt = world.dt
        read_population_spec(self, spec, dt)

        horizon = self._horizon()
        self.conn_wheel = TimingWheel(horizon, self.reconnect.attempt_classes() + 1)
        self.req_wheel = TimingWheel(horizon, self.retry.attempt_classes() + 1)
        self.ready = [0] * self.req_wheel.classes  # durable work ready to dispatch
        # Connected clients by back-off class: class 0 have proven their connection with a
        # successful request; the others connected after k failed attempts and keep that
        # back-off state until a request succeeds (a well-tested back-off does not reset
        # on connect alone).
        self.conn_by_class = [0] * self.conn_wheel.classes
        self.conn_by_class[0] = self.clients if self.pooled else 0
        self.n_connected = self.conn_by_class[0]  # == sum(conn_by_class), kept to avoid summing
        self.inflight: dict[int, Batch] = {}  # by the tick it was sent
        self.inflight_requests = 0  # their requests, counted as they go (a long queue holds thousands of batches)
        # Retries of requests whose failure made their client drop its connection (pooled,
        # perishable work). A retry goes out on its own client's connection, as a client
        # library's request waits for the pool's new connection: when due, it is sent if its
        # client has reconnected, else it waits (parked) for the client's next connection
        # attempt and goes out with it, or fails with it (then retried or given up). Which
        # client owns which retry is not tracked: owners are spread uniformly over the
        # clients without a connection, and orphans_back counts the retries not yet due whose
        # client is connected again.
        self.orphan_wheel = TimingWheel(horizon, self.retry.attempt_classes() + 1)
        self.orphans_back = 0
        self.parked = [0] * self.orphan_wheel.classes
        self.released = [0] * self.orphan_wheel.classes  # parked, client reconnected: send now
        self.released_by = 0  # the clients that reconnected with them
        self.dep_health: dict[str, float] = {d: 1.0 for d in self.depends_on}
        self.surges: list[dict] = []
        self.broken = 0
        self.pending_closes = 0  # connections given up or replaced since the last flow, to close on the devices
        self._delays = DelayStore()  # the retry policies' delays, as kernels read them
        self._lag_packs: dict = {}  # (ticks after the send, request timeout) -> Population._lags

    def _lifetime_changed(self, tick: int) -> None:
        """Connections are replaced at the rate lifetime sets, read each tick: nothing to do."""

    def _mode_changed(self, tick: int, ticks: int) -> None:
        if not self.pooled:  # every connection closes; retries waiting for one go out as requests
            self.pending_closes += self.n_connected
            self.conn_by_class = [0] * len(self.conn_by_class)
            self.n_connected = 0
            self.conn_wheel.clear()
            self.req_wheel.take_from(self.orphan_wheel)
            self.req_wheel.schedule_classes(1, _plus(self.parked, self.released), 0)
            self.parked, self.released = [0] * len(self.parked), [0] * len(self.released)
            self.released_by = self.orphans_back = 0
            for b in self.inflight.values():
                b.holding = 0.0
        else:  # every client opens a connection, spread over the ticks given
            self.conn_wheel.grow(ticks + 2, self.conn_wheel.classes)
            counts = self.rng.multinomial(self.clients, np.full(ticks, 1.0 / ticks))
            self.conn_wheel.schedule(np.arange(1, ticks + 1), counts, 0, self.clients)

    def _send_waiting_work(self, tick: int) -> None:
        """Work no longer durable: what waited for dispatch goes out next tick."""
        self.req_wheel.schedule_classes(1, self.ready, 0)
        self.ready = [0] * len(self.ready)

    def _horizon(self) -> int:
        """Ticks ahead the wheels reach: the longest delay plus the timeout that precedes it."""
        return wheel_horizon(self, self.world.dt)

    def _policies_changed(self) -> None:
        """After a hot-fix of a policy or a timeout: the wheels reach far enough ahead and
        count enough attempts (what they hold keeps its place), and cached delays go."""
        self._lag_packs.clear()
        self._delays.clear()
        self.retries_refusal_at_once = refuses_at_once(self)
        horizon = self._horizon()
        self.conn_wheel.grow(horizon, self.reconnect.attempt_classes() + 1)
        for wheel in (self.req_wheel, self.orphan_wheel):
            wheel.grow(horizon, self.retry.attempt_classes() + 1)
        conn, req = self.conn_wheel.classes, self.req_wheel.classes
        self.conn_by_class = _padded(self.conn_by_class, conn)
        self.ready, self.parked, self.released = (_padded(a, req) for a in (self.ready, self.parked, self.released))
        for b in self.inflight.values():
            b.setups, b.requests = _padded(b.setups, conn), _padded(b.requests, req)

    def prepare(self) -> None:
        """Load the kernels (compile them, the first time on a machine: 10-20 s), each called
        once as a tick calls it, on a twin of this population with a generator of its own:
        this population and its draws are left as they are. Without it a Ray host would
        compile them in the tick of the first failed request, silent all the while, and be
        replaced by a host that compiles them again."""
        twin = Population(self.name, self.spec, np.random.default_rng(0), self.world)
        twin._break_connections(0)  # take_connected, owners_left
        res = {key: 0 for key in kernels.RES_KEYS}
        twin._retry_or_give_up([0] * twin.req_wheel.classes, lag=0.0, res=res)
        twin.inflight[0] = Batch([0] * twin.conn_wheel.classes, [1] + [0] * (twin.req_wheel.classes - 1), 0, 0, 0, 0, 0,
                                 0.0, twin.request_timeout)
        twin._on_result(1, {"sent": 0, "s_ok": 0, "s_rej": 0, "r_ok": 0, "r_rej": 0, "r_full": 0}, res)  # settle

    # -- operations a trigger or mitigation can apply --------------------------------
    @operation(**SET_PATH_OP)
    def op_set_path(self, tick: int, path: list | None = None, target: str | None = "__keep__") -> None:
        """Move this traffic onto another path (and, if given, another target); in pooled mode
        every established connection breaks and its client reconnects over the new path."""
        if self.pooled and self.connected:
            for device in self.path:  # the old devices forget these connections
                self.send(device, "close", {"origin": self.name, "count": self.connected}, tick)
            self._break_connections(self.connected)
        self.path = list(path or [])
        if target != "__keep__":
            self.target = target

    @operation(**DROP_BACKLOG_OP)
    def op_drop_backlog(self, tick: int, fraction: float = 1.0) -> None:
        """The clients give up a share of their waiting work: retries waiting for their time
        and, for durable work, requests waiting for dispatch (what is on the wire stays, and
        so do pooled clients' retries parked until they reconnect). What is given up is an
        error for good."""
        keep = 1.0 - share_or_rate("fraction", fraction, 1.0)
        gone = self.req_wheel.thin(self.rng, keep)
        ready = np.array(self.ready, dtype=np.int64)
        kept = self.rng.binomial(ready, keep)
        gone += int(ready.sum() - kept.sum())
        self.ready = kept.tolist()
        self.given_up += gone
        self.event(tick, "backlog_dropped", requests=gone)

    @property
    def connected(self) -> int:
        return self.n_connected

    def _take_connected(self, n: int) -> list[int]:
        """Remove n connected clients, drawn at random over back-off classes."""
        conn, st = np.array(self.conn_by_class, dtype=np.int64), np.array(self._counter_values(), dtype=np.int64)
        taken = kernels.take_connected(self._handle(self.clients), conn, st, n)
        self.conn_by_class = conn.tolist()
        self._set_counters(st.tolist())
        return taken.tolist()

    def _left(self, n: int, pool: int, failed_batch: int | None = None) -> None:
        """``n`` of ``pool`` connected clients left their connections. Churn and breaks hit
        every client alike; drops after the failures of batch ``failed_batch`` hit its own
        senders, who were all still connected when each later batch was sent."""
        if n <= 0 or pool <= 0:
            return
        for sent, batch in self.inflight.items():
            if failed_batch is None:  # (more leaving than were counted connected leave none holding)
                batch.holding -= batch.holding * min(1.0, n / pool)
            elif sent > failed_batch:
                batch.holding = max(0.0, batch.holding - n)

    def _owners_left(self, n: int, pool: int) -> None:
        """``n`` of ``pool`` connected clients lost their connections, owners of orphan retries alike."""
        st = np.array(self._counter_values(), dtype=np.int64)
        kernels.owners_left(self.draws.kernel, st, n, pool)
        self._set_counters(st.tolist())

    # -- the kernels' side ------------------------------------------------------------
    def _handle(self, total: int):
        """What kernels draw with: compiled up to a billion items in all (``compiled.split_into``)."""
        return self.draws.kernel if total <= _EXACT_LIMIT else self.draws

    def _counter_values(self) -> list[int]:
        """The counters kernels update, in cohort_kernels.ST_* order."""
        return [self.n_connected, self.pending_closes, self.orphans_back, self.released_by]

    def _set_counters(self, values: list[int]) -> None:
        self.n_connected, self.pending_closes, self.orphans_back, self.released_by = values

    def _wheel_values(self) -> list[int]:
        """The wheels' entries pending, then their positions, in cohort_kernels.WHEEL_* order."""
        wheels = (self.conn_wheel, self.req_wheel, self.orphan_wheel)
        return [w.pending for w in wheels] + [w.pos for w in wheels]

    def _set_pending(self, values: list[int]) -> None:
        self.conn_wheel.pending, self.req_wheel.pending, self.orphan_wheel.pending = values

    @staticmethod
    def _add_results(res: dict, counts: list[int]) -> None:
        """Add a kernel's result counts (cohort_kernels.RES_* order) to the tick's."""
        for key, n in zip(kernels.RES_KEYS, counts):
            res[key] += n

    def _break_connections(self, n: int) -> None:
        pool = self.n_connected
        n = sum(self._take_connected(n))
        self._left(n, pool)
        self._owners_left(n, pool)
        self.conn_wheel.schedule_one(1, n, 0)
        self.broken += n

    # -- helpers ----------------------------------------------------------------------
    def _pack(self, policy: RetryPolicy, lag: float, classes: int) -> int:
        """The pack of ``policy``'s delays at ``lag`` for ``classes`` attempt classes in the
        delay store. No delay is longer than the policy's cap or the bug's: past both, every
        lag has the same pack (everything due in the next slot)."""
        lag = min(round(lag, 6), max(policy.cap, self.bug_delay))

        def build() -> tuple[DelayTable, list[DelayTable], int]:
            delays = [delay(*policy.offsets(k, self.world.dt, lag)) for k in range(classes)]
            # the latent bug: re-establish after a fixed short delay, whatever the attempt
            bug_slot = max(1, math.ceil((self.bug_delay - lag) / self.world.dt - 1e-9))
            return delay_table(delays), [delay_table([d]) for d in delays], bug_slot

        return self._delays.pack((id(policy), lag, classes), build)

    def _split(self, per_class: list[int], ok: int) -> tuple[list[int], list[int]]:
        """(good, bad): ``ok`` of ``per_class`` drawn without replacement, and the rest (the
        draw ``kernels.split`` makes, called from Python without building arrays)."""
        good = self.draws.split(per_class, max(0, ok))
        return good, [n - g for n, g in zip(per_class, good)]

    # -- the tick ------------------------------------------------------------------------
    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        """Read the answers, churn connections, draw fresh demand, let through what the retry
        budget and the breaker allow, dispatch durable work, send the tick's flow, report.
        (The random draws come in this order, which determinism depends on.)"""
        dt = self.world.dt
        self.broken = 0
        res = {"ok": 0, "failed": 0, "errors": 0, "setup_ok": 0, "setup_failed": 0, "at_once": 0}
        self._read(tick, inbox, res)
        self._readmit_due(tick)
        res["errors"], self.given_up = res["errors"] + self.given_up, 0
        conn_now, closes, extra_setups, renewals = self._churn(tick, dt)
        demand, fresh, local_fail = self._fresh_demand(tick, dt, res)
        req_now, released, released_by = self._let_through(tick, fresh, local_fail, res)
        if self.durable:
            self.ready = _plus(self.ready, req_now)
            cap = self._dispatch_cap(dt)
            if self.pooled and self.connected == 0:
                cap = 0
            n = min(sum(self.ready), cap)
            req_now, _ = self._split(self.ready, n)
            self.ready = _minus(self.ready, req_now)
        requests = sum(req_now)
        # Per-request mode: every request is its own flow, so it is also a setup.
        setups = sum(conn_now) + extra_setups + renewals if self.pooled else requests
        if setups or requests or closes:
            self.inflight_requests += requests
            self.inflight[tick] = Batch(conn_now, req_now, extra_setups, renewals, min(released, requests), released_by,
                                        self.n_connected, float(self.n_connected), self.request_timeout)
            self._send_batch(tick, conn_now, req_now, renewals, setups, closes, res)
        backlog = 0
        if self.durable:
            backlog = sum(self.ready) + self.req_wheel.pending + self.inflight_requests
        return self._end_tick(tick, res, self.conn_wheel.pending, demand, fresh, requests + res["at_once"], setups, backlog)

    def _read(self, tick: int, inbox: list[Message], res: dict) -> None:
        health = HealthReports(self.dep_health)
        for msg in inbox:
            if msg.kind == "flow_result":
                self._on_result(tick, msg.body, res)
            elif msg.kind == "conn_event":
                self._break_connections(int(msg.body["dropped"]))
            elif msg.kind == "health":
                health.take(msg)
            elif msg.kind == "apply":
                self.take_apply(tick, msg)
        health.merge()

    def _churn(self, tick: int, dt: float) -> tuple[list[int], int, int, int]:
        """Connection churn: lifetimes end, surges force re-establishment. Returns (the
        connection attempts due by back-off class, closes, a surge's extra setups, renewals)."""
        closes = 0
        extra_setups = 0
        renewals = 0
        if self.pooled:
            # Graceful recycling, as pools do: a client whose connection reaches the end of its
            # lifetime opens the next one before closing the old, and sends all the while.
            renewals = self.draws.binomial(self.connected, min(1.0, dt / self.lifetime))
            if self.surges:
                for s in self.surges:
                    if tick < s["until"]:
                        closes += self.draws.binomial(self.connected - renewals, min(1.0, s["fraction"] / s["ticks"]))
                        extra_setups += self.draws.poisson(s["extra"] * dt)
                self.surges = [s for s in self.surges if tick < s["until"]]
            if closes:
                pool = self.n_connected
                closes = sum(self._take_connected(closes))  # a surge: they drop and reconnect at once, back-off reset
                self._left(closes, pool)
                self._owners_left(closes, pool)
            conn_now = self.conn_wheel.pop_due()
            conn_now[0] += closes
        else:
            conn_now = [0] * self.conn_wheel.classes
        closes += self.pending_closes  # (a per-request population has some only after a switch of mode)
        self.pending_closes = 0
        return conn_now, closes, extra_setups, renewals

    def _fresh_demand(self, tick: int, dt: float, res: dict) -> tuple[int, int, int]:
        """(requests asked this tick, those that can go out, those failing at once on a
        dependency's ill health); a per-request client's surge is requests of its own."""
        surged = 0
        if not self.pooled and self.surges:  # a per-request client's surge is requests: a share of the clients ask again
            for s in self.surges:
                if tick < s["until"]:
                    surged += self.draws.poisson(self.clients * s["fraction"] / s["ticks"] + s["extra"] * dt)
            self.surges = [s for s in self.surges if tick < s["until"]]
        factor = self.demand_factor * self.rate_factor
        demand = self.draws.poisson(self.rate * factor * dt * self.clients) if factor > 0 else 0
        demand += surged
        if self.pooled and not self.durable:
            # Only connected clients can send; the others' requests fail at once, or wait for
            # their client's connection as its retries do (parked, first attempts).
            fresh = self.draws.binomial(demand, self.connected / self.clients) if self.clients else 0
            if self.queue_while_reconnecting:
                self.parked[0] += demand - fresh
            else:
                res["errors"] += demand - fresh
                res["failed"] += demand - fresh
        else:
            fresh = demand
        dep_ok = 1.0
        for d in self.depends_on:
            dep_ok *= self.dep_health[d]
        local_fail = self.draws.binomial(fresh, 1.0 - dep_ok) if dep_ok < 1.0 else 0
        return demand, fresh, local_fail

    def _let_through(self, tick: int, fresh: int, local_fail: int, res: dict) -> tuple[list[int], int, int]:
        """(The requests going out this tick by attempt class, the retries released among
        them, and by whom): retries due and released, within the retry budget, and the fresh
        ones; then what an open breaker lets through."""
        req_now = self.req_wheel.pop_due()
        orphans = self._orphans_due()
        released, released_by = sum(self.released), self.released_by
        if released or any(orphans):
            req_now = [a + b + c for a, b, c in zip(req_now, orphans, self.released)]
            self.released = [0] * len(self.released)
        self.released_by = 0
        if self.budget is not None:
            wanted = sum(req_now)
            granted = self.budget.spend(fresh, wanted)
            if granted < wanted:
                req_now, dropped = self._split(req_now, granted)
                if not self.durable:
                    res["errors"] += sum(dropped)
                else:
                    self.ready = _plus(self.ready, dropped)  # durable work waits for budget
        req_now[0] += fresh - local_fail
        if local_fail:
            lf = [0] * len(req_now)
            lf[0] = local_fail
            res["failed"] += local_fail
            self._retry_or_give_up(lf, lag=0.0, res=res)
        if self.breaker is not None:
            allowed = self.breaker.allowed_fraction(tick)
            if allowed < 1.0:
                keep = self.draws.binomial(sum(req_now), allowed)
                req_now, blocked = self._split(req_now, keep)
                res["failed"] += sum(blocked)
                self._retry_or_give_up(blocked, lag=0.0, res=res)
        return req_now, released, released_by

    def _send_batch(self, tick: int, conn_now: list[int], req_now: list[int], renewals: int, setups: int,
                    closes: int, res: dict) -> None:
        """Send the tick's batch (recorded in flight) as one flow, or, with no path and no
        target, answer it at once."""
        requests = sum(req_now)
        if not self.path and not self.target:
            self._on_result(tick, {"sent": tick, "s_ok": sum(conn_now) + renewals, "s_fail": 0, "s_rej": 0,
                                   "r_ok": requests, "r_fail": 0, "r_rej": 0, "r_full": 0}, res)
        else:
            hops = self.path + ([self.target] if self.target else [])
            self.send_flow(hops, tick, requests, setups=setups, coupled=0 if self.pooled else 1, closes=closes,
                           ct=self.connect_timeout, rt=self.request_timeout)

    def _orphans_due(self) -> list[int]:
        """Orphan retries falling due: those whose client has reconnected go out now, the
        others wait for their client's connection."""
        due = self.orphan_wheel.pop_due()
        if self.n_connected >= self.clients:  # every client is connected: nobody waits
            if any(self.parked):
                due = _plus(due, self.parked)
                self.parked = [0] * len(self.parked)
            self.orphans_back = self.orphan_wheel.pending
            return due
        n = sum(due)
        if not n:
            return due
        total = self.orphan_wheel.pending + n
        back = min(self.orphans_back, total)
        go = self.draws.hypergeometric(back, total - back, n) if 0 < back < total else (n if back else 0)
        self.orphans_back = back - go
        send, wait = self._split(due, go)
        self.parked = _plus(self.parked, wait)
        return send

    def _retry_or_give_up(self, failed: list[int], lag: float, res: dict, orphan: bool = False) -> None:
        """Failed attempts of class k retry as class k+1 unless attempts are exhausted;
        ``orphan``: their client dropped its connection, so the retry waits for its next one."""
        counts, wheels = np.zeros(len(kernels.RES_KEYS), dtype=np.int64), np.array(self._wheel_values(), dtype=np.int64)
        pending, pos = wheels[:3], wheels[3:]  # views of the one array
        pack = self._pack(self.retry, lag, len(failed))  # before reading the store's arrays: it may grow them
        kernels.retry_or_give_up(self.draws.kernel, np.array(failed, dtype=np.int64), orphan, self.retry.max_attempts,
                                 self.durable, counts, pending, pos, self.req_wheel.slots, self.orphan_wheel.slots,
                                 *self._delays.arrays, pack)
        self._set_pending(pending.tolist())
        self._add_results(res, counts.tolist())

    def _on_result(self, tick: int, body: dict, res: dict) -> None:
        sent = int(body["sent"])
        batch = self.inflight.pop(sent, None)
        if batch is None:
            return
        extra, renewals = batch.extra, batch.renewals
        n_conn, n_req = sum(batch.setups), sum(batch.requests)
        self.inflight_requests -= n_req
        renew_failed = 0
        s_ok = int(body["s_ok"])
        if extra or renewals:
            # Surge connections have no client of ours behind them: they close again at once.
            # A renewal closes the connection it replaces, whatever its outcome.
            s_ok_all = min(s_ok, extra + renewals + n_conn)
            extra_ok, renew_ok, _ = self.draws.split([extra, renewals, n_conn], s_ok_all)
            self.pending_closes += extra_ok + renewals
            self._left(renew_ok, self.n_connected)  # on a new connection now
            renew_failed = renewals - renew_ok
            s_ok = s_ok_all - extra_ok - renew_ok
        if not (n_req or (self.pooled and (n_conn or renew_failed))):
            return
        if self._only_successes(n_req, int(body["r_ok"]), n_conn, renew_failed):
            res["ok"] += n_req
            if self.breaker is not None:
                self.breaker.record(tick, n_req, 0)
            return
        setups, requests = batch.setups, batch.requests
        # Which delays settle can need follows from the counts: a split of k successes draws
        # exactly k (the draws only say from which classes).
        n_bad = n_req - min(int(body["r_ok"]), n_req)
        rejected = min(int(body["r_rej"]), n_bad)
        slow = n_bad - rejected
        conn_failed = self.pooled and (n_conn - min(s_ok, n_conn) + renew_failed > 0)
        on_timeout = slow > 0 and "timeout" in self.reconnect_on
        drops = self.pooled and (on_timeout or (rejected > 0 and "reject" in self.reconnect_on))
        needed = (conn_failed or (drops and not on_timeout), conn_failed, drops and on_timeout, rejected > 0, slow > 0,
                  self.pooled and (n_conn or renew_failed) > 0 and any(self.parked))  # LAG_*
        given = np.array([  # cohort_kernels.SETTLE_*
            s_ok, body["s_rej"], body["r_ok"], body["r_rej"], body["r_full"], renewals, renew_failed, self.clients,
            self.pooled, self.durable, "timeout" in self.reconnect_on, "reject" in self.reconnect_on,
            self.retries_refusal_at_once, self.retry.max_attempts, self.bug_ignores_backoff, batch.released,
            batch.released_by, batch.senders, round(batch.holding), len(setups), len(requests),
            *self._counter_values(), *self._wheel_values(), *_NOTHING_YET,
            *self.conn_by_class, *self.parked, *self.released, *setups, *requests], dtype=np.int64)
        kernels.settle(self._handle(max(self.clients, n_req)), given, self.conn_wheel.slots, self.req_wheel.slots,
                       self.orphan_wheel.slots, self._lags(tick - sent, batch.rt, needed),  # (before the store's arrays)
                       *self._delays.arrays)
        done = given.tolist()
        self._set_counters(done[kernels.SETTLE_ST:kernels.SETTLE_PENDING])
        self._set_pending(done[kernels.SETTLE_PENDING:kernels.SETTLE_POS])
        self._add_results(res, done[kernels.SETTLE_RES:kernels.SETTLE_OUT])
        lost, lost_pool, dropped, dropped_pool, n_good = done[kernels.SETTLE_OUT:kernels.SETTLE_HEAD]  # OUT_*
        o, cc, rc = kernels.SETTLE_HEAD, len(setups), len(requests)
        self.conn_by_class, self.parked, self.released = done[o:o + cc], done[o + cc:o + cc + rc], done[o + cc + rc:o + cc + 2 * rc]
        self._left(lost, lost_pool)
        self._left(dropped, dropped_pool, failed_batch=sent)
        if self.breaker is not None and n_req:
            self.breaker.record(tick, n_req, n_req - n_good)

    def _only_successes(self, n_req: int, r_ok: int, n_conn: int, renew_failed: int) -> bool:
        """Whether settling a result would draw nothing and count only its successes (most
        results, in a healthy system): every request succeeded, no connection attempt is
        in it, and no connected client is left to prove its connection."""
        return r_ok >= n_req and not (self.pooled and (n_conn or renew_failed or self.n_connected > self.conn_by_class[0]))

    def _lags(self, ticks: int, rt: float, needed: tuple[bool, ...]) -> np.ndarray:
        """The packs of the delays a result ``ticks`` after its batch needs (cohort_kernels.LAG_*,
        those ``needed`` says; -1 for the others): the reconnect policy's from the send,
        from the connect timeout and from the request timeout ``rt``, the retry policy's
        from the send, from ``rt`` and from now. Built only when needed: a queue that holds
        work for hours would otherwise make packs for thousands of lags never used."""
        key = (ticks, rt)
        entry = self._lag_packs.get(key)
        if entry is None:  # (the packs, and which are built: read in Python, not from the array)
            entry = self._lag_packs[key] = (np.full(6, -1, dtype=np.int64), [False] * 6)
        packs, built = entry
        missing = [i for i, need in enumerate(needed) if need and not built[i]]
        if missing:
            elapsed = ticks * self.world.dt
            conn, retry = (self.reconnect, self.conn_wheel.classes), (self.retry, self.req_wheel.classes)
            delays = [(conn, elapsed), (conn, elapsed - self.connect_timeout), (conn, elapsed - rt),
                      (retry, elapsed), (retry, elapsed - rt), (retry, 0.0)]  # LAG_*
            for i in missing:
                (policy, classes), lag = delays[i]
                packs[i] = self._pack(policy, lag, classes)
                built[i] = True
        return packs
