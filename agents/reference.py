"""A client population simulated one client at a time: the reference for the cohort model.

``Population`` holds clients as counts per state and attempt class and moves them with
binomial and multinomial draws. This class keeps one object per client instead (its
connection state, its back-off attempt, its next connection attempt) and one record per
request in flight (its client and attempt number), and lets each client schedule its own
next connection attempt, request and retry, in seconds, on an event heap. It speaks the
same messages and reports the same metrics as ``Population``, so a world can swap one for
the other (agent kind ``population:reference``); it exists only to check the cohort model
on small populations, so it is written to be read, not to be fast.

Per-client behaviour (the intended behaviour ``Population`` approximates):

- Fresh requests: every client sends requests as a Poisson process of rate ``rate``.
  In pooled mode a client without an established connection cannot send: its request
  fails at once, for good (a customer-visible error). Durable work is queued instead and
  dispatched at most ``max_rate`` per second, in pooled mode by whichever clients hold a
  connection at the time.
- Pooled connections last an exponential ``lifetime``; when one ends the client opens
  its next connection before closing the old one (graceful recycling) and stays
  connected throughout; if the new one fails, the client is left without a connection,
  as after a failed connection attempt. A surge makes a share of the connected clients
  drop their connections and reconnect at once with their back-off reset, spread over
  its duration.
- A client that connected after k failed attempts keeps that back-off state (class k)
  until one of its requests succeeds on the connection; then it is back to class 0.
- A failed connection attempt of class k is retried as class k + 1 after a delay drawn
  from the reconnect policy for attempt k, counted from when the failure is detected:
  at once for a rejection, ``connection.timeout`` after sending for a timeout. The latent
  bug (``reconnect_ignores_backoff``) replaces that delay by a fixed ``reconnect_delay``.
- A request that fails (timeout, or rejection if ``reconnect_on`` says so) makes its
  client drop the connection it was sent on, if the client still holds it, and reconnect:
  a client of class 0 starts afresh (delay for attempt 0, then an attempt of class 0); a
  client of class k carries on (delay for attempt k, then class k + 1). The bug again
  replaces the delay by ``reconnect_delay`` after detection.
- A failed request attempt k is retried as attempt k + 1 after a delay drawn from the
  retry policy, counted from detection, unless ``max_attempts`` are used up (then it is
  an error). A retry belongs to its client: in pooled mode it goes on the client's
  connection, and if the client holds none when the retry is due it waits for the
  client's next connection attempt (as a client library's request waits for the pool's
  new connection): it goes out once that succeeds, or fails with it (then is retried or
  given up like any failed attempt).
- Decorrelated jitter follows Brooker: each request (and each client's reconnection)
  draws its sleep from the one before, sleep = min(cap, uniform(base, 3 * sleep)).

Device outcomes come back as counts per batch (the flows sent at one tick); they are
handed to the batch's clients and requests uniformly at random.
"""
from __future__ import annotations

import heapq
import math

import numpy as np

from .base import Agent, Message, StepResult, WorldInfo, operation, share_or_rate
from .population import (DROP_BACKLOG_OP, SET_PATH_OP, Population, PopulationControls,
                         read_population_spec, refuses_at_once)
from .retry import RetryPolicy
from .shards import HealthReports

# Client connection states (pooled mode).
CONNECTED, CONNECTING, WAITING = "connected", "connecting", "waiting"

_EPS = 1e-9


class Client:
    """One client: its connection and its back-off state."""

    __slots__ = ("cid", "state", "backoff", "conn", "sleep", "parked")

    def __init__(self, cid: int, state: str):
        self.cid = cid
        self.state = state  # CONNECTED, CONNECTING or WAITING; change it with ClientByClientPopulation._set_state
        self.backoff = 0  # attempt class: failed connection attempts since it last proved a connection
        self.conn = 0  # generation of its connection (or pending attempt); stale events carry an older one
        self.sleep = None  # its last reconnection back-off delay (decorrelated jitter grows from it)
        self.parked: list[tuple[int, float | None]] = []  # retries (attempt, last sleep) waiting for a connection


class ClientByClientPopulation(PopulationControls, Agent):
    kind = "population"
    METRICS = Population.METRICS

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        read_population_spec(self, spec, world.dt)
        # Past this class every back-off delay is the same (and 2.0 ** k stays finite).
        self.max_conn_class = self.reconnect.attempt_classes()
        self.max_req_class = self.retry.attempt_classes()

        # One object per client; every pooled client starts connected and proven.
        self.people = [Client(i, CONNECTED if self.pooled else None) for i in range(self.clients)]
        self.n_state = {CONNECTED: self.clients if self.pooled else 0, CONNECTING: 0, WAITING: 0,
                        None: 0 if self.pooled else self.clients}
        self._uniforms: list[float] = []  # uniform draws from self.rng, taken in blocks (one call each is slow)
        # The event heap: (time in seconds, sequence, what, client id, generation, attempt).
        self.events: list[tuple] = []
        self._eseq = 0
        # Each client's next fresh request, in seconds (its own Poisson stream); tick t
        # handles what falls in ((t - 1) dt, t dt].
        self.next_request = np.full(self.clients, math.inf)
        self._redraw_requests(-world.dt)
        if self.pooled:
            for c in self.people:
                self._start_lifetime(c, 0.0)
        self.ready: list[tuple] = []  # durable work waiting for dispatch: (client, attempt, last sleep)
        self.released: list[tuple] = []  # parked retries whose client just connected: (client, attempt, last sleep)
        #: sent tick -> (setups: client id or -1 for a surge setup with no client behind it,
        #:               requests: (client id, attempt, connection generation, last sleep),
        #:               renewals: (client id, generation of the connection it replaces))
        self.inflight: dict[int, tuple[list[int], list[tuple], list[tuple[int, int]]]] = {}
        self.dep_health: dict[str, float] = {d: 1.0 for d in self.depends_on}
        self.surges: list[dict] = []
        self.sent_timeout: dict[int, float] = {}  # sent tick -> the request timeout it was sent with
        self.broken = 0
        self.pending_closes = 0  # connections given up since the last flow, to close on the devices

    # -- the event heap -------------------------------------------------------------
    def _push(self, when: float, what: str, cid: int, gen: int = 0, attempt: int = 0, sleep=None) -> None:
        self._eseq += 1
        heapq.heappush(self.events, (when, self._eseq, what, cid, gen, attempt, sleep))

    def _later(self, tick: int, when: float) -> float:
        """Something scheduled during tick ``tick`` happens at ``when``, but no earlier than the next tick."""
        return max(when, (tick + 1) * self.world.dt)

    def _redraw_requests(self, after: float) -> None:
        """Every client's next request after ``after`` (Poisson streams are memoryless)."""
        rate = self.rate * self.demand_factor * self.rate_factor
        self.next_request[:] = after + self.rng.exponential(1.0 / rate, self.clients) if rate > 0 else math.inf

    def _requests_due(self, now: float) -> list[int]:
        """The clients whose requests fall due by ``now``, once per request."""
        due: list[int] = []
        rate = self.rate * self.demand_factor * self.rate_factor
        while True:
            idx = np.flatnonzero(self.next_request <= now + _EPS)
            if not idx.size:
                return due
            due += idx.tolist()
            self.next_request[idx] += self.rng.exponential(1.0 / rate, idx.size)

    def _random(self) -> float:
        """One uniform draw in [0, 1) from the agent's RNG."""
        if not self._uniforms:
            self._uniforms = self.rng.random(4096).tolist()
        return self._uniforms.pop()

    def _start_lifetime(self, c: Client, at: float) -> None:
        """The connection lasts an exponential lifetime."""
        self._push(at - self.lifetime * math.log(1.0 - self._random()), "expire", c.cid, c.conn)

    def _delay(self, policy: RetryPolicy, attempt: int, previous: float | None = None) -> float:
        """A back-off delay for this attempt (decorrelated jitter: grown from the ``previous`` one)."""
        return policy.draw(attempt, self._random(), previous)

    # -- connection state changes ---------------------------------------------------------
    def _set_state(self, c: Client, state: str) -> None:
        self.n_state[c.state] -= 1
        self.n_state[state] += 1
        c.state = state

    @property
    def connected(self) -> int:
        return self.n_state[CONNECTED]

    def _connected_clients(self) -> list[Client]:
        return [c for c in self.people if c.state == CONNECTED]

    def _reconnect_now(self, c: Client, setups: list[int]) -> None:
        """A surge: close and reconnect in this tick, back-off reset."""
        c.conn += 1
        self._set_state(c, CONNECTING)
        c.backoff = 0
        self.pending_closes += 1
        setups.append(c.cid)

    def _wait_then_connect(self, c: Client, when: float, attempt: int) -> None:
        c.conn += 1
        self._set_state(c, WAITING)
        c.backoff = min(attempt, self.max_conn_class)
        self._push(when, "connect", c.cid, c.conn)

    def _drop_after_failure(self, tick: int, c: Client, detected: float) -> None:
        """The client gives up the connection a request failed on and reconnects."""
        self.pending_closes += 1
        k = c.backoff
        if self.bug_ignores_backoff:
            delay = self.bug_delay
        else:
            delay = c.sleep = self._delay(self.reconnect, k, c.sleep if k else None)
        # A proven client starts afresh; an unproven one carries on from the attempt it connected on.
        self._wait_then_connect(c, self._later(tick, detected + delay), 0 if k == 0 else k + 1)

    def _connect_failed(self, tick: int, c: Client, detected: float) -> None:
        """A connection attempt of class k failed: the next one is of class k + 1, after a back-off."""
        k = c.backoff
        delay = self.bug_delay if self.bug_ignores_backoff else self._delay(self.reconnect, k, c.sleep if k else None)
        if not self.bug_ignores_backoff:
            c.sleep = delay
        self._wait_then_connect(c, self._later(tick, detected + delay), k + 1)

    def _break(self, tick: int, n: int) -> None:
        """Connections broken from outside (device restart, path change): reconnect next tick."""
        conn = self._connected_clients()
        n = min(n, len(conn))
        if n <= 0:
            return
        for i in self.rng.choice(len(conn), size=n, replace=False):
            c = conn[int(i)]
            self._wait_then_connect(c, (tick + 1) * self.world.dt, 0)
        self.broken += n

    # -- operations a trigger or mitigation can apply --------------------------------------
    @operation(**SET_PATH_OP)
    def op_set_path(self, tick: int, path: list | None = None, target: str | None = "__keep__") -> None:
        """Move this traffic onto another path (and, if given, another target); in pooled mode
        every established connection breaks and its client reconnects over the new path."""
        n = self.connected
        if self.pooled and n:
            for device in self.path:
                self.send(device, "close", {"origin": self.name, "count": n}, tick)
            self._break(tick, n)
        self.path = list(path or [])
        if target != "__keep__":
            self.target = target

    def _policies_changed(self) -> None:
        self.max_conn_class = self.reconnect.attempt_classes()
        self.max_req_class = self.retry.attempt_classes()
        self.retries_refusal_at_once = refuses_at_once(self)

    def _send_waiting_work(self, tick: int) -> None:
        """Work no longer durable: what waited for dispatch goes out next tick, each request on its attempt."""
        for cid, attempt, sleep in self.ready:
            self._push(self._later(tick, 0.0), "retry", cid, 0, attempt, sleep)
        self.ready = []

    def _mode_changed(self, tick: int, ticks: int) -> None:
        if not self.pooled:  # every connection closes; retries waiting for one go out as requests
            self.events = [ev for ev in self.events if ev[2] == "retry"]  # no lifetimes or reconnections
            heapq.heapify(self.events)
            waiting = self.released
            for c in self.people:
                if c.state == CONNECTED:
                    self.pending_closes += 1
                waiting += [(c.cid, attempt, sleep) for attempt, sleep in c.parked]
                c.parked = []
                c.conn += 1  # whatever was under way for its connection is void
                self._set_state(c, None)
            for cid, attempt, sleep in waiting:
                self._push(self._later(tick, 0.0), "retry", cid, 0, attempt, sleep)
            self.released = []
        else:  # every client opens a connection, at a time spread over the ticks given
            for c in self.people:
                c.backoff, c.sleep = 0, None
                slot = 1 + min(ticks - 1, int(self._random() * ticks))
                self._wait_then_connect(c, (tick + slot) * self.world.dt, 0)

    def _lifetime_changed(self, tick: int) -> None:
        """Lifetimes are exponential: the connections held are replaced at the new rate, as
        if each drew its remaining life again."""
        self.events = [ev for ev in self.events if ev[2] != "expire"]
        heapq.heapify(self.events)
        for c in self.people:
            if c.state == CONNECTED:
                self._start_lifetime(c, tick * self.world.dt)

    @operation(**DROP_BACKLOG_OP)
    def op_drop_backlog(self, tick: int, fraction: float = 1.0) -> None:
        """As the cohort model's: each waiting retry and each request waiting for dispatch is given up with
        chance ``fraction``."""
        keep = 1.0 - share_or_rate("fraction", fraction, 1.0)
        before = len(self.events) + len(self.ready)
        self.events = [ev for ev in self.events if ev[2] != "retry" or self._random() < keep]
        heapq.heapify(self.events)
        self.ready = [w for w in self.ready if self._random() < keep]
        gone = before - len(self.events) - len(self.ready)
        self.given_up += gone
        self.event(tick, "backlog_dropped", requests=gone)

    def _rate_changed(self, tick: int) -> None:
        self._redraw_requests(tick * self.world.dt)

    # -- the tick ----------------------------------------------------------------------------
    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        now = tick * self.world.dt
        res = self._read(tick, inbox)
        due = self._due(now)
        setups, renewals, extra, surged = self._churn(tick, due)
        closes, self.pending_closes = self.pending_closes, 0
        demand, fresh = self._fresh_demand(now, surged, res)
        batch = self._first_attempts(tick, now, fresh, res)
        batch += self._retries(due["retry"], len(fresh), res)
        batch = self._through_breaker(tick, now, batch, res)
        if self.durable:
            batch = self._dispatch(batch)
        n_setups = self._send_batch(tick, setups, renewals, extra, batch, closes, res)
        return self._end_tick(tick, res, self.n_state[WAITING], demand, len(fresh), len(batch) + res["at_once"], n_setups,
                              self._backlog())

    # -- the phases of a tick ------------------------------------------------------------------
    def _read(self, tick: int, inbox: list[Message]) -> dict:
        """This tick's messages; returns the tick's outcome counters."""
        self.broken = 0
        res = {"ok": 0, "failed": 0, "errors": 0, "setup_ok": 0, "setup_failed": 0, "at_once": 0}
        health = HealthReports(self.dep_health)
        for msg in inbox:
            if msg.kind == "flow_result":
                self._on_result(tick, msg.body, res)
            elif msg.kind == "conn_event":
                self._break(tick, int(msg.body["dropped"]))
            elif msg.kind == "health":
                health.take(msg)
            elif msg.kind == "apply":
                self.take_apply(tick, msg)
        health.merge()
        self._readmit_due(tick)
        res["errors"], self.given_up = res["errors"] + self.given_up, 0
        return res

    def _due(self, now: float) -> dict[str, list[tuple]]:
        """Everything the clients planned for up to the end of this tick, by what it is."""
        due: dict[str, list[tuple]] = {"expire": [], "connect": [], "retry": []}
        while self.events and self.events[0][0] <= now + _EPS:
            ev = heapq.heappop(self.events)
            due[ev[2]].append(ev)
        return due

    def _churn(self, tick: int, due: dict[str, list[tuple]]) -> tuple[list[int], list[tuple[int, int]], int, list[int]]:
        """(connection setups of our clients, renewals, surge setups with no client behind
        them, clients a per-request surge makes ask again)."""
        dt = self.world.dt
        setups: list[int] = []
        renewals: list[tuple[int, int]] = []
        extra = 0
        surged: list[int] = []
        if self.pooled:
            # Connection churn: lifetimes end (the next connection opens before the old one closes) ...
            for _, _, _, cid, gen, _, _ in due["expire"]:
                c = self.people[cid]
                if c.state == CONNECTED and c.conn == gen:
                    renewals.append((cid, gen))
            # ... and surges make a share of the connected clients do the same.
            for s in self.surges:
                if tick < s["until"]:
                    p = min(1.0, s["fraction"] / s["ticks"])
                    for c in self._connected_clients():
                        if self._random() < p:
                            self._reconnect_now(c, setups)
                    extra += int(self.rng.poisson(s["extra"] * dt))
            for _, _, _, cid, gen, _, _ in due["connect"]:
                c = self.people[cid]
                if c.state == WAITING and c.conn == gen:
                    self._set_state(c, CONNECTING)
                    setups.append(cid)
        else:  # a per-request client's surge is requests: a share of the clients ask again
            for s in self.surges:
                if tick < s["until"]:
                    p = min(1.0, s["fraction"] / s["ticks"])
                    surged += [cid for cid in range(self.clients) if self._random() < p]
                    surged += [int(c) for c in self.rng.integers(0, self.clients, int(self.rng.poisson(s["extra"] * dt)))]
        self.surges = [s for s in self.surges if tick < s["until"]]
        return setups, renewals, extra, surged

    def _fresh_demand(self, now: float, surged: list[int], res: dict) -> tuple[int, list[int]]:
        """(this tick's fresh requests, the clients that can try them): every client's own
        Poisson stream, plus a surge's."""
        wanted = self._requests_due(now) + surged
        fresh: list[int] = []
        for cid in wanted:
            if self.pooled and not self.durable and self.people[cid].state != CONNECTED:
                if self.queue_while_reconnecting:  # it waits for the client's connection, as a retry does
                    self.people[cid].parked.append((0, None))
                    continue
                res["errors"] += 1  # no connection to send it on: it fails at once, for good
                res["failed"] += 1
            else:
                fresh.append(cid)
        return len(wanted), fresh

    def _first_attempts(self, tick: int, now: float, fresh: list[int], res: dict) -> list[tuple]:
        """The fresh requests that get past the dependencies' health, as batch items
        (client, attempt, connection generation, last sleep)."""
        dep_ok = 1.0
        for d in self.depends_on:
            dep_ok *= self.dep_health[d]
        batch: list[tuple] = []
        for cid in fresh:
            if dep_ok < 1.0 and self._random() >= dep_ok:
                res["failed"] += 1  # a dependency failed locally
                self._retry_or_give_up(tick, cid, 0, now, res)
            else:
                batch.append((cid, 0, self.people[cid].conn, None))
        return batch

    def _retries(self, due: list[tuple], fresh: int, res: dict) -> list[tuple]:
        """Retries due now (after those whose client has just connected), as batch items. A
        pooled client without a connection keeps its retry until its next connection attempt;
        the others spend the retry budget, if there is one."""
        retries, self.released = self.released, []
        for _, _, _, cid, _, attempt, sleep in due:  # in the order they fell due
            c = self.people[cid]
            if self.pooled and not self.durable and c.state != CONNECTED:
                c.parked.append((attempt, sleep))
            else:
                retries.append((cid, attempt, sleep))
        granted = len(retries) if self.budget is None else self.budget.spend(fresh, len(retries))
        for cid, attempt, sleep in retries[granted:]:  # no retry budget left
            if self.durable:
                self.ready.append((cid, attempt, sleep))
            else:
                res["errors"] += 1
        return [(cid, attempt, self.people[cid].conn, sleep) for cid, attempt, sleep in retries[:granted]]

    def _through_breaker(self, tick: int, now: float, batch: list[tuple], res: dict) -> list[tuple]:
        """What an open or half-open circuit breaker lets through; the rest fail locally."""
        if self.breaker is None:
            return batch
        allowed = self.breaker.allowed_fraction(tick)
        if allowed >= 1.0:
            return batch
        kept = []
        for item in batch:
            if self._random() < allowed:
                kept.append(item)
            else:
                res["failed"] += 1
                self._retry_or_give_up(tick, item[0], item[1], now, res, item[3])
        return kept

    def _dispatch(self, batch: list[tuple]) -> list[tuple]:
        """Durable work: this tick's batch joins the ready work, and as much of it as the
        dispatch cap allows goes out, picked at random."""
        self.ready += [(cid, attempt, sleep) for cid, attempt, _, sleep in batch]
        cap = self._dispatch_cap(self.world.dt)
        if self.pooled and self.connected == 0:
            cap = 0
        n = min(len(self.ready), cap)
        pick = set(self.rng.choice(len(self.ready), size=n, replace=False).tolist()) if n < len(self.ready) \
            else set(range(n))
        batch = [(cid, a, self.people[cid].conn, z) for i, (cid, a, z) in enumerate(self.ready) if i in pick]
        self.ready = [w for i, w in enumerate(self.ready) if i not in pick]
        if self.pooled and batch:
            # Queued work is delivered by whichever clients hold a connection now.
            holders = self._connected_clients()
            batch = [(c.cid, a, c.conn, z) for (_, a, _, z), c in
                     zip(batch, (holders[int(i)] for i in self.rng.integers(len(holders), size=len(batch))))]
        return batch

    def _send_batch(self, tick: int, setups: list[int], renewals: list[tuple[int, int]], extra: int, batch: list[tuple],
                    closes: int, res: dict) -> int:
        """Send this tick's flow (or, with nothing on the path, resolve it at once); returns
        the connection setups it asks for."""
        setup_list = setups + [-1] * extra if self.pooled else []  # surge setups have no client of ours behind them
        n_setups = len(setup_list) + len(renewals) if self.pooled else len(batch)
        if n_setups or batch or closes:
            self.inflight[tick] = (setup_list, batch, renewals)
            self.sent_timeout[tick] = self.request_timeout  # a hot-fix may change it before the answer
            if not self.path and not self.target:
                self._on_result(tick, {"sent": tick, "s_ok": len(setups) + len(renewals), "s_fail": 0, "s_rej": 0,
                                       "r_ok": len(batch), "r_fail": 0, "r_rej": 0, "r_full": 0}, res)
            else:
                hops = self.path + ([self.target] if self.target else [])
                self.send_flow(hops, tick, len(batch), setups=n_setups, coupled=0 if self.pooled else 1, closes=closes,
                               ct=self.connect_timeout, rt=self.request_timeout)
        return n_setups

    def _backlog(self) -> int:
        """Durable work not yet done: ready, waiting to retry, or in flight."""
        if not self.durable:
            return 0
        waiting_retries = sum(1 for ev in self.events if ev[2] == "retry")
        inflight_req = sum(len(r) for _, r, _ in self.inflight.values())
        return len(self.ready) + waiting_retries + inflight_req

    # -- outcomes ------------------------------------------------------------------------------
    def _retry_or_give_up(self, tick: int, cid: int, attempt: int, detected: float, res: dict,
                          sleep: float | None = None) -> None:
        """Attempt ``attempt`` of a request failed (detected at ``detected`` seconds); ``sleep``:
        the delay before that attempt (None for the first)."""
        limit = self.retry.max_attempts
        if limit and not self.durable and attempt + 1 >= limit:
            res["errors"] += 1
            return
        delay = self._delay(self.retry, min(attempt, self.max_req_class), sleep)
        self._push(self._later(tick, detected + delay), "retry", cid, 0, attempt + 1, delay)

    def _deal(self, n: int, ok: int, rej: int, full: int = 0) -> list[str]:
        """Outcomes for n items of one batch: ``ok`` successes and ``rej`` rejections (``full``
        of them by a full queue), the rest timeouts, dealt to the items uniformly at random."""
        ok = min(ok, n)
        rej = min(rej, n - ok)
        full = min(full, rej)
        outcome = np.array(["ok"] * ok + ["full"] * full + ["rej"] * (rej - full) + ["timeout"] * (n - ok - rej),
                           dtype=object)
        return list(outcome[self.rng.permutation(n)]) if n else []

    def _on_result(self, tick: int, body: dict, res: dict) -> None:
        sent = int(body["sent"])
        if sent not in self.inflight:
            return
        setup_list, batch, renewals = self.inflight.pop(sent)
        rt = self.sent_timeout.pop(sent)
        t_sent = sent * self.world.dt
        now = tick * self.world.dt
        # Connection attempts: setups first, then renewals, dealt their outcomes together.
        outcomes = self._deal(len(setup_list) + len(renewals), int(body["s_ok"]), int(body["s_rej"]))
        for (cid, gen), outcome in zip(renewals, outcomes[len(setup_list):]):
            c = self.people[cid]
            self.pending_closes += 1  # the replaced connection closes (or the new one, if the client moved on)
            if c.state != CONNECTED or c.conn != gen:
                continue
            if outcome == "ok":
                c.conn += 1
                self._start_lifetime(c, now)
                res["setup_ok"] += 1
            else:  # the old connection is gone and the new one failed: a failed connection attempt
                res["setup_failed"] += 1
                self._connect_failed(tick, c, t_sent if outcome == "rej" else t_sent + self.connect_timeout)
        for cid, outcome in zip(setup_list, outcomes):
            if cid < 0:  # a surge setup: if it got through, it closes again at once
                if outcome == "ok":
                    self.pending_closes += 1
                continue
            c = self.people[cid]
            if c.state != CONNECTING:
                continue
            if outcome == "ok":
                self._set_state(c, CONNECTED)
                c.conn += 1
                self._start_lifetime(c, now)
                res["setup_ok"] += 1
                self.released += [(cid, attempt, sleep) for attempt, sleep in c.parked]  # their connection is here
                c.parked = []
                continue
            res["setup_failed"] += 1
            for attempt, sleep in c.parked:  # retries waiting for this connection fail with it
                res["failed"] += 1
                self._retry_or_give_up(tick, cid, attempt, now, res, sleep)
            c.parked = []
            self._connect_failed(tick, c, t_sent if outcome == "rej" else t_sent + self.connect_timeout)

        # Requests.
        if not batch:
            return
        n_bad = 0
        outcomes = self._deal(len(batch), int(body["r_ok"]), int(body["r_rej"]),
                              int(body["r_full"]) if self.retries_refusal_at_once else 0)
        for (cid, attempt, gen, sleep), outcome in zip(batch, outcomes):
            c = self.people[cid]
            on_it = self.pooled and c.state == CONNECTED and c.conn == gen  # still on the connection it used
            if outcome == "ok":
                res["ok"] += 1
                if on_it:
                    c.backoff = 0  # the client has proven its connection: back-off resets
                continue
            n_bad += 1
            res["failed"] += 1
            refused = outcome in ("rej", "full")
            detected = t_sent if refused else t_sent + rt
            if outcome == "full":  # every retry, sent at once, meets the queue still full
                left = max(0, self.retry.max_attempts - 1 - attempt)
                res["failed"] += left
                res["at_once"] += left
                res["errors"] += 1
            else:
                self._retry_or_give_up(tick, cid, attempt, detected, res, sleep)
            reason = "reject" if refused else "timeout"
            if on_it and reason in self.reconnect_on:
                self._drop_after_failure(tick, c, detected)
        if self.breaker is not None:
            self.breaker.record(tick, len(batch), n_bad)
