"""A FIFO work queue in front of a service, as a fluid: how much work waits, and where
each tick's requests stand in it.

Work is measured in units (a request costs one). Every unit admitted gets a position
(the work admitted before it, counted from the start); the service works positions off
in order. A tick's arrivals come at random times within it (Poisson arrivals: given
their number, uniform; drawn from the service's own stream), and the service works at an
even pace (deterministic service times) or at the points of its clock (below) whenever
work is waiting, idling when none is: the queue within the tick is the reflected
difference of the work arrived and the work the service could have done (Lindley), so
each arrival's wait and completion time are known, and whether it was done within its
caller's timeout. Beyond 4,096 arrivals a tick they come in that many equal parcels (times
resolved to a 4,096th of a tick). Work left from earlier ticks is worked off first, at
an even pace, its arrival times spread evenly over what is left of its tick.

Each tick's flows join the queue as members of that tick's segment. A member is
answered once, with one result per batch as the callers expect: when its last part has
been worked off, or at its due tick (the last tick at which its caller still hears of a
timeout in time to retry on time), whichever comes first; what is still queued then is
judged by projecting the queue ahead at the service's current mean rate. (The service
makes a batch part of which it refused due at once: its caller must hear of a refusal
at once, and it takes one answer per batch.)

When service times vary (``cv`` > 0), the service keeps a clock: the completions it
will make are drawn ahead as points of a renewal process on its operational time (the
mean work it can do, summed), with gaps of mean 1 and coefficient of variation cv
(exponential gaps, cv = 1: the completions in a busy tick are Poisson). A tick's work is
the points it covers, and a projection reads the same points, so the requests queued
together succeed or fail together, as they do behind one real server: the coherent
fluctuations that tip a queue over its threshold, or back. A service of more than
_CLOCK_TICK completions a tick works at an even pace instead, and a projection over more
than _CLOCK_AHEAD completions goes at the mean pace (the clock's spread over N
completions is cv/sqrt(N) of their time: under 0.4% there, and its points would fill
memory at the capacities a playbook may give). Work whose caller has
given up stays queued and is done later, for nobody: past 100% utilisation the wait
grows until no caller is served in time, while the service stays busy (congestive
collapse). Arrivals beyond ``limit_s`` seconds of the service's mean capacity are
refused at once (cheap for everyone).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

#: Points per member at which a projection is evaluated (midpoint rule over its positions).
_POINTS = 8
#: Most arrival times drawn a tick; beyond, a tick's arrivals come in this many equal parcels.
_ARRIVALS = 4096
#: Most completions a tick for which the service keeps a clock, and most drawn ahead for a projection.
_CLOCK_TICK = 1 << 16
_CLOCK_AHEAD = 1 << 20


@dataclass(eq=False)
class Member:
    """One flow's requests in the queue, waiting to be answered."""

    body: dict  # the flow message it came with
    n: int  # requests queued
    budget: float  # seconds its caller still waits once it is queued
    good: float  # chance that a request done in time succeeds (the service's readiness)
    due: int  # tick by which it is answered
    ok: float = 0.0  # share of its requests done in time so far
    wait: float = 0.0  # their summed waits, as share x seconds
    done: bool = False
    seg: "Segment | None" = field(default=None, repr=False)  # where its requests stand


@dataclass(eq=False)
class Segment:
    """The still unworked part of one tick's admitted work: positions ``q0..q1``,
    arrived from ``a0`` to ``a1`` seconds, ``w`` the share of its members' requests left."""

    q0: float
    q1: float
    a0: float
    a1: float
    w: float = 1.0
    members: list = field(default_factory=list)


def _on_clock(seg: Segment, m: Member, s0: float, t0: float, rate: float, points: np.ndarray,
              theta: float) -> tuple[float, float]:
    """Like ``_in_time`` for the whole unworked rest of the segment, the work from
    position ``s0`` on being done from time ``t0`` at the service clock's ``points``
    (operational times after ``theta``, ``rate`` operational units per second)."""
    span = seg.q1 - seg.q0
    if span <= 0 or rate <= 0:
        return 0.0, 0.0
    x = (np.arange(_POINTS) + 0.5) / _POINTS
    ahead = seg.q0 + x * span - s0  # units to do before it is done, its own included
    done_at = t0 + (np.interp(ahead, np.arange(len(points) + 1), np.concatenate(([theta], points))) - theta) / rate
    waits = done_at - (seg.a0 + x * (seg.a1 - seg.a0))
    ok = waits <= m.budget
    return seg.w * float(ok.mean()), seg.w * float((ok * np.maximum(waits, 0.0)).mean())


def _in_time(seg: Segment, m: Member, lo: float, hi: float, s0: float, t0: float, slope: float) -> tuple[float, float]:
    """Of the segment's positions lo..hi, worked off from position ``s0`` at time ``t0``
    at ``slope`` seconds per unit: the share of the member's requests done within its
    budget, and their summed waits (share x seconds)."""
    span = seg.q1 - seg.q0
    if hi <= lo or span <= 0:
        return 0.0, 0.0
    da = (seg.a1 - seg.a0) / span  # arrival time per unit of position

    def wait(p: float) -> float:  # completion minus arrival, linear in p
        return t0 + (p - s0) * slope - (seg.a0 + (p - seg.q0) * da)

    w_lo, w_hi = wait(lo), wait(hi)
    if w_lo <= m.budget and w_hi <= m.budget:
        a, b = lo, hi
    elif w_lo > m.budget and w_hi > m.budget:
        return 0.0, 0.0
    else:  # the budget is crossed inside: keep the side within it
        x = lo + (m.budget - w_lo) / (w_hi - w_lo) * (hi - lo)
        a, b = (lo, x) if w_lo <= m.budget else (x, hi)
    share = seg.w * (b - a) / span
    return share, share * max(0.0, (wait(a) + wait(b)) / 2)


class WorkQueue:
    def __init__(self, limit_s: float, cv: float = 0.0):
        self.limit_s = float(limit_s)
        self.cv = float(cv)  # the service times' coefficient of variation (0: a steady pace)
        self.theta = 0.0  # the service clock: operational time reached
        self.points = np.zeros(0)  # ... and the completions drawn ahead on it, ascending
        self.passed = np.zeros(0)  # the completions this tick passed (operational time into the tick); None: an even pace
        self.backlog = 0.0  # work units waiting
        self.cap = 0.0  # units the service works off this tick
        self.mean_cap = 0.0  # ... on average per tick
        self.wait_s = 0.0
        self.room = 0.0
        self.arrived = 0.0  # position after the last unit admitted
        self.served = 0.0  # position worked off
        self.start_s = 0.0  # this tick's start, seconds
        self.dt = 1.0
        self.segments: list[Segment] = []  # in position order
        self.head = 0  # segments before this one are worked off
        self.tick_start = 0.0
        self.tick_members: list[Member] = []
        self.live = 0  # members not yet answered
        self.useful = 0.0  # the work done this tick for requests within their callers' budgets (expected)
        self.due: list = []  # heap of (due tick, sequence, member)
        self.seq = 0

    def _points_ahead(self, n: int, rng) -> np.ndarray:
        """At least ``n`` completions drawn ahead on the service clock."""
        if len(self.points) < n:
            more = max(n - len(self.points), 64)
            c2 = self.cv * self.cv
            gaps = rng.exponential(1.0, more) if self.cv == 1.0 else rng.gamma(1.0 / c2, c2, more)
            last = self.points[-1] if len(self.points) else self.theta
            self.points = np.concatenate((self.points, last + np.cumsum(gaps)))
        return self.points

    def clock_work(self, mean_cap: float, rng) -> float:
        """The work a busy tick does when it can do ``mean_cap`` units on average: the
        completions the service clock passes (what the queue cannot use is lost: idle)."""
        if mean_cap > _CLOCK_TICK:  # an even pace (no points: see the module's docstring)
            self.points, self.passed = np.zeros(0), None
            self.theta += mean_cap
            return mean_cap
        end = self.theta + mean_cap
        while not len(self.points) or self.points[-1] < end:
            self._points_ahead(len(self.points) + max(64, int(mean_cap) + 1), rng)
        k = int(np.searchsorted(self.points, end, side="right"))
        self.passed = self.points[:k] - self.theta  # this tick's completions, as operational time into it
        self.points = self.points[k:]
        self.theta = end
        return float(k)

    def open(self, cap: float, dt: float, tick: int = 0, mean_cap: float | None = None) -> None:
        """Start a tick in which the service works off ``cap`` units (``mean_cap`` on
        average, when its pace varies). The wait is what work arriving at the start of
        the tick waits; the room is the limit plus what the service frees meanwhile."""
        self.cap = cap
        self.mean_cap = cap if mean_cap is None else mean_cap
        self.dt = dt
        self.start_s = tick * dt
        self.wait_s = self.backlog / self.mean_cap * dt if self.mean_cap else float("inf")
        self.room = max(0.0, self.limit_s / dt * self.mean_cap - self.backlog + cap)
        self.tick_start = self.arrived

    def admit(self, n: int, cost: float = 1.0) -> int:
        """Queue up to ``n`` items of ``cost`` units each; returns how many were queued."""
        taken = min(n, int(self.room / cost)) if cost > 0 else n
        self.room -= taken * cost
        self.backlog += taken * cost
        self.arrived += taken * cost
        return taken

    def join(self, body: dict, n: int, budget: float, good: float, due: int) -> None:
        """``n`` requests of a flow admitted this tick, to be answered by tick ``due``."""
        m = Member(body, n, budget, good, due)
        self.tick_members.append(m)
        self.live += 1
        self.seq += 1
        heapq.heappush(self.due, (due, self.seq, m))

    def _within_tick(self, rng, m: float) -> tuple[np.ndarray, float, np.ndarray, float]:
        """This tick's ``m`` units arriving at random times: (their arrival times in seconds
        into the tick, ascending; the units each brings; when each arrival's last unit is
        done, in seconds into the tick (inf: not in this tick); the units done in the tick).
        The service works whenever work waits: evenly at cap per tick, or at its clock's
        points."""
        backlog0 = self.backlog - m
        parcels = int(min(_ARRIVALS, math.ceil(m - 1e-9))) if m > 0 else 0
        t = np.sort(rng.random(parcels)) * self.dt if parcels else np.zeros(0)
        u = m / parcels if parcels else 0.0
        points = None  # the clock's completion chances, in seconds into the tick
        if self.cv > 0 and self.mean_cap > 0 and self.passed is not None:
            points = self.passed / self.mean_cap * self.dt
            could = np.searchsorted(points, t, side="right").astype(float)  # work the service could have done by then
            could_end = float(len(points))
        else:
            could = t * (self.cap / self.dt)
            could_end = self.cap
        free = backlog0 + u * np.arange(parcels) - could  # the queue before each arrival, were it never idle
        low = np.minimum.accumulate(np.minimum(free, 0.0)) if parcels else free
        ahead = free - low  # the units ahead of each when it comes, the backlog from earlier ticks included
        end_free = backlog0 + m - could_end
        end_low = min(0.0, float(low[-1]) if parcels else 0.0, end_free)
        done = backlog0 + m - (end_free - end_low)
        return t, u, self._completions(t, u, could, ahead, points), max(0.0, min(done, backlog0 + m))

    def _completions(self, t: np.ndarray, u: float, could: np.ndarray, ahead: np.ndarray,
                     points: np.ndarray | None) -> np.ndarray:
        """Seconds into the tick at which each arrival (at ``t``, bringing ``u`` units) has
        its last unit done (inf: not in this tick): the work ahead of it and its own, worked
        whenever work waits, at the clock's ``points`` (``could``: those passed by each
        arrival) or evenly."""
        out = np.full(len(t), np.inf)
        if points is not None:
            whole = np.ceil(could + ahead + u - 1e-9).astype(np.int64) - 1  # the completion that finishes it
            inside = whole < len(points)
            out[inside] = points[whole[inside]]
        elif self.cap > 0:
            out = t + (ahead + u) * (self.dt / self.cap)
            out[out > self.dt * (1 + 1e-12)] = np.inf
        return out

    def serve(self, tick: int, rng=None) -> tuple[float, list[Member]]:
        """Work off this tick's capacity; returns the units done and the members answered
        now (their ``ok`` share done in time, ``wait`` their summed waits). ``rng`` draws
        this tick's arrival times, and the service clock ahead when service times vary."""
        new = None
        self.useful = 0.0
        now = self.arrived - self.tick_start  # units that arrived this tick
        if now > 0 and rng is not None:
            t, u, finish, done = self._within_tick(rng, now)
        else:  # (without a stream to draw them: spread evenly over the tick)
            t, u, finish, done = np.zeros(0), 0.0, np.zeros(0), min(self.backlog, self.cap)
        if self.tick_members:
            new = Segment(self.tick_start, self.arrived, self.start_s, self.start_s + self.dt, members=self.tick_members)
            for mem in new.members:
                mem.seg = new
            self.segments.append(new)
            self.tick_members = []
        s0, s1 = self.served, self.served + done
        slope = self.dt / self.cap if self.cap > 0 else 0.0
        answered = []
        segs = self.segments
        while self.head < len(segs) and segs[self.head].q0 < s1:
            seg = segs[self.head]
            if seg is new and len(t):
                if self._work_new(seg, t, u, finish, s1, answered):
                    break
                continue
            lo, hi = seg.q0, min(seg.q1, s1)
            for mem in seg.members:
                self._credit(mem, *_in_time(seg, mem, lo, hi, s0, self.start_s, slope))
            if s1 >= seg.q1:  # worked off: everyone in it is answered
                self._worked_off(seg, answered)
            else:
                span = seg.q1 - seg.q0
                seg.a0 += (s1 - seg.q0) / span * (seg.a1 - seg.a0)
                seg.w *= (seg.q1 - s1) / span
                seg.q0 = s1
                break
        self.served = s1
        self.backlog -= done
        # Due now: judge what is still queued by the queue ahead at the mean pace.
        end_s = self.start_s + self.dt
        mean_slope = self.dt / self.mean_cap if self.mean_cap > 0 else float("inf")
        while self.due and self.due[0][0] <= tick:
            m = heapq.heappop(self.due)[2]
            if m.done:
                continue
            answered.append(m)
            clocked = self.passed is not None and m.seg.q1 - self.served < _CLOCK_AHEAD
            if self.cv > 0 and mean_slope < float("inf") and clocked:
                points = self._points_ahead(int(m.seg.q1 - self.served) + 2, rng)
                self._credit(m, *_on_clock(m.seg, m, self.served, end_s, self.mean_cap / self.dt, points, self.theta),
                             projected=True)
            elif mean_slope < float("inf"):
                self._credit(m, *_in_time(m.seg, m, m.seg.q0, m.seg.q1, self.served, end_s, mean_slope),
                             projected=True)
            m.done = True
        for m in answered:
            m.seg = None
        self.live -= len(answered)
        # Forget worked-off segments and answered members now and then (snapshots copy them).
        if self.head > 64 and self.head * 2 > len(segs):
            del segs[:self.head]
            self.head = 0
        if len(self.due) > 2 * self.live + 64:
            self.due = [e for e in self.due if not e[2].done]
            heapq.heapify(self.due)
        return done, answered

    def _credit(self, mem: Member, ok: float, wait: float, projected: bool = False) -> None:
        """A share ``ok`` of the member's requests done within its budget (``wait``: their
        summed waits): its outcome, while it is not answered yet; and, for work done now
        (not ``projected``), useful work, answered or not (a member answered at its due
        tick by projection has its work counted useful when it is done)."""
        if not mem.done:
            mem.ok += ok
            mem.wait += wait
        if not projected:
            self.useful += ok * mem.n * mem.good

    def _worked_off(self, seg: Segment, answered: list) -> None:
        """The segment is worked off: everyone in it is answered."""
        for mem in seg.members:
            if not mem.done:
                mem.done = True
                answered.append(mem)
        self.segments[self.head] = None
        self.head += 1

    def _work_new(self, seg: Segment, t: np.ndarray, u: float, finish: np.ndarray, s1: float,
                  answered: list) -> bool:
        """This tick's own segment, worked off up to position ``s1``: its arrivals (at ``t``,
        done at ``finish``) done within the tick count at their own times (the share done
        within each member's budget, and their waits; the part of one begun and not
        finished, at the tick's end); the rest stays queued, arrived from the next of them
        on. Returns whether some of it is left."""
        k = int(np.isfinite(finish).sum())  # FIFO: the first k arrivals are done
        span = seg.q1 - seg.q0
        if k == len(t) or s1 >= seg.q1:
            k, part = len(t), 0.0
        else:
            part = min(max(s1 - (seg.q0 + k * u), 0.0), u)  # of the next one, worked off by the end
        waits = np.append(finish[:k] - t[:k], self.dt - t[k] if part else [])
        weights = np.append(np.full(k, u / span), part / span if part else [])
        for mem in seg.members:
            ok = waits <= mem.budget
            self._credit(mem, float(weights[ok].sum()), float((weights * waits)[ok].sum()))
        if k == len(t):
            self._worked_off(seg, answered)
            return False
        seg.q0 += k * u + part
        seg.a0 = self.start_s + float(t[k])
        seg.w = (seg.q1 - seg.q0) / span
        return True

    def reset(self, fraction: float = 1.0) -> None:
        """Throw away a share of the queued work, everywhere in the queue alike; the
        requests thrown away are never done (their callers time out)."""
        keep = 1.0 - float(fraction)
        s = self.served
        for seg in self.segments[self.head:]:
            seg.q0, seg.q1 = s + (seg.q0 - s) * keep, s + (seg.q1 - s) * keep
            seg.w *= keep
        self.arrived = s + (self.arrived - s) * keep
        self.backlog = self.arrived - s
