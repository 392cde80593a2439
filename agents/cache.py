"""A cache in front of a store: which keys it holds, by popularity.

Callers ask for ``keys`` distinct keys whose popularity follows Zipf's law: the k-th most
popular key is asked k^-s times as often as the first (s = ``zipf``; 0 is uniform). The
cache holds at most ``size`` keys. A stored key stays fresh for about ``ttl`` (its life
passes through stages, see TTL_STAGES); a lapsed key's value is kept, stale, until it is
replaced or evicted (what serve-stale answers with). When the cache is full a new key
replaces one drawn at random (random replacement; a FIFO cache behaves nearly alike, an
LRU keeps hot keys slightly better).

Keys are not tracked one by one: ranks are grouped into buckets of nearly equal popularity
(each of the 64 most popular keys alone, then ranks growing by 15% a bucket), and the cache
counts how many of each bucket's keys are fresh, stale, or being fetched. A lookup hits if
its key is fresh; a miss is asked of the store and, when the store answers well, stores its
key. A key is fetched for the time its store request takes, not for the ticks its answer
takes to come back: of the lookups of a key in flight, those before its request's answer
miss again (they ask the store again, or with ``coalesce`` wait for the request in
flight); those after it find the key stored if the store answered well (the lookups' times
within a tick are those of Poisson arrivals: a hot key's first miss comes early in its
tick). When the answer comes: a store without a queue, as its last answers' delay said; a
store with one answers in the order asked, which the cache works out from the store's
health and the requests it sent since (``Cache.answer_times``): a request sent while the
queue fills waits longer than one sent before. The store's answer, when it comes, stores
the key (the state the next lookups see).
With ``evict_on_error`` (a latent behaviour of many cache clients) a failed answer deletes
its key when the cache hears of it (a refusal at once, a timeout when the cache's timeout is
up), even one another request has stored meanwhile, and an unexpected answer from the cache
(its fault) deletes the key and asks the store.

Checked against an exact continuous-time simulation, key by key, and the closed forms in
tests/test_cache.py, at 1, 0.25 and 0.1 s ticks.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .draws import draw_without_replacement

_SINGLE = 64  # the most popular keys each have their own bucket
_GROWTH = 1.15  # then bucket edges grow by this factor
# A stored key's freshness passes through up to this many stages of equal mean length
# (ttl/16, at least a tick): its life is nearly fixed (Erlang, coefficient of variation
# 0.25), as a TTL is, which matters once the cache is full (an exponential life would lose
# keys earlier).
TTL_STAGES = 16


def zipf_buckets(keys: int, s: float) -> tuple[np.ndarray, np.ndarray]:
    """(keys per bucket, share of requests per bucket) for ranks 1..keys with weight k^-s.
    Buckets beyond the single ones sum their weights by the midpoint rule (relative error
    below 1e-5 from rank 65 on)."""
    starts = list(range(1, min(keys, _SINGLE) + 1))
    x = starts[-1] + 1
    while x <= keys:
        starts.append(x)
        x = max(x + 1, math.ceil(x * _GROWTH))
    lo = np.array(starts, dtype=float)
    hi = np.append(lo[1:], keys + 1.0)  # exclusive
    n = hi - lo
    if s == 1.0:
        w = np.log((hi - 0.5) / (lo - 0.5))
    else:
        w = ((hi - 0.5) ** (1 - s) - (lo - 0.5) ** (1 - s)) / (1 - s)
    single = n == 1
    w[single] = lo[single] ** -s
    return n, w / w.sum()


def _reached(n: np.ndarray, x: np.ndarray, p) -> np.ndarray:
    """Per bucket of ``n`` keys, the chance that a given key gets at least one of ``x``
    requests spread evenly over them, each counting with chance ``p``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = -np.expm1(x * np.log1p(-np.clip(np.divide(p, n), 0.0, 1.0)))
    return np.where((x > 0) & (n > 0), out, 0.0)


def _share(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """Per bucket, ``part / whole`` (0 where the whole is 0)."""
    return np.divide(part, whole, out=np.zeros(len(whole)), where=whole > 0)


def _in_window(x: np.ndarray, lat: float) -> np.ndarray:
    """Of a key's further lookups in the tick of its first miss, the share that falls within
    ``lat`` (the store's latency, in ticks) of that miss, for ``x`` lookups of it a tick on
    average (Poisson arrivals: the first at tau, the others after it). With l = lat < 1:
    1 - E[max(0, 1 - l - tau)] / E[1 - tau], tau the first arrival given one in the tick;
    l for a hot key (tau near 0), 1 - (1 - l)^2 for a key asked about twice."""
    if lat >= 1.0:
        return np.ones(len(x))
    if lat <= 0.0:
        return np.zeros(len(x))
    c = 1.0 - lat
    x = np.maximum(np.asarray(x, dtype=float), 1e-9)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        z = -np.expm1(-x)  # the chance of a lookup in the tick
        after = 1.0 - (1.0 / x - np.exp(-x) / z)  # E[1 - tau]
        beyond = (c + np.expm1(-x * c) / x) / z  # E[max(0, c - tau)]
        q = 1.0 - beyond / after
    rare = x < 1e-4  # tau uniform: 1 - c^2
    return np.clip(np.where(rare, 1.0 - c * c, q), 0.0, 1.0)


def _window_after(age: int, lat: float) -> float:
    """The share of a tick's lookups within ``lat`` ticks of a first miss ``age`` ticks
    before (both at uniform times in their ticks: their distance is age + a triangular
    variable on -1..1)."""
    x = lat - age
    if x <= -1.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    return (x + 1.0) ** 2 / 2 if x <= 0 else 1.0 - (1.0 - x) ** 2 / 2


@dataclass(frozen=True)
class Answers:
    """How a store answers the requests a cache sent in one tick: one sent at a share ``t``
    of the tick meets a wait of ``wait + grow * t`` s (at least 0), is refused at once if
    that is over ``limit`` s, and is otherwise answered ``overhead`` s after its wait: well
    (with chance ``good``) if that is within the cache's ``timeout``."""
    wait: float
    grow: float
    limit: float
    overhead: float
    good: float
    timeout: float
    dt: float

    def at(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ticks until the answer, chance it stores the key) for requests sent at ``t``."""
        w = self.wait + self.grow * t
        admitted = w <= self.limit
        took = np.where(admitted, np.maximum(w, 0.0) + self.overhead, 0.0)
        return took / self.dt, np.where(admitted & (took <= self.timeout), self.good, 0.0)


_POINTS = (np.arange(16) + 0.5) / 16  # quantiles at which a key's first miss in its tick is taken


def _first_miss_times(x: np.ndarray) -> np.ndarray:
    """Per bucket, 16 equally likely times (shares of the tick) of a key's first lookup in
    a tick in which it is looked up, ``x`` lookups of it a tick on average (Poisson: the
    first comes early for a hot key, anywhere for a rare one)."""
    x = np.maximum(np.asarray(x, dtype=float), 1e-9)[:, None]
    return -np.log1p(-_POINTS[None, :] * -np.expm1(-x)) / x


def _after_answer(x: np.ndarray, age: int, answers: Answers) -> tuple[np.ndarray, np.ndarray]:
    """Per bucket: of the lookups of a key in flight, first missed ``age`` ticks ago (0:
    this tick, the lookups after the first), the share that come after its request's
    answer, and the chance that answer stored it."""
    if answers.grow == 0 and answers.wait <= answers.limit:  # one latency for all: closed forms
        took, good = answers.at(np.zeros(1))
        within = _window_after(age, float(took[0])) if age else _in_window(x, float(took[0]))
        return np.broadcast_to(1.0 - within, (len(x),)), np.full(len(x), float(good[0]))
    t = _first_miss_times(x)
    took, good = answers.at(t)
    if age == 0:  # lookups after the first miss, at Poisson times after it: evenly, as far as it goes
        span = 1.0 - t
        after = np.maximum(0.0, span - took)
    else:  # this tick's lookups, evenly spread, age ticks after the tick of the first miss
        span = np.ones_like(t)
        after = 1.0 - np.clip(t + took - age, 0.0, 1.0)
    share = after.sum(axis=1) / np.maximum(span.sum(axis=1), 1e-12)
    chance = (after * good).sum(axis=1) / np.maximum(after.sum(axis=1), 1e-12)
    return np.clip(share, 0.0, 1.0), np.clip(chance, 0.0, 1.0)


def _first_misses(rng: np.random.Generator, idle: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per bucket, how many of ``idle`` keys ``x`` lookups spread evenly over them reach (at
    most x: the others are further lookups of keys reached). Where the keys outnumber the
    lookups, the repeats are drawn (rare: Poisson); elsewhere the keys reached (binomial)."""
    reached = _reached(idle, x, 1.0)
    repeats = np.minimum(rng.poisson(np.maximum(x - idle * reached, 0.0)), np.maximum(x - 1, 0))
    return np.where(idle >= x, x - repeats, np.minimum(rng.binomial(idle, reached), x))


def _spread(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Expected counts as whole numbers, rounded up with the chance of their fraction."""
    return np.floor(x + rng.random(len(x))).astype(np.int64)


class Cache:
    """The keys a cache holds, counted in whole keys per popularity bucket (the keys of a
    bucket are alike, so which of them is held does not matter), and what lookups and the
    store's answers do to them."""

    def __init__(self, spec: dict, dt: float):
        self.dt = dt
        self.store = spec["store"]
        self.keys = int(spec["keys"])
        self.size = min(int(spec["size"]) if spec.get("size") is not None else self.keys, self.keys)
        self.ttl = spec.get("ttl")  # None: a stored key stays fresh until it is replaced or evicted
        self.timeout = float(spec["timeout"])
        self.coalesce = bool(spec["coalesce"])
        self.serve_stale = bool(spec["serve_stale"])
        self.evict_on_error = bool(spec["evict_on_error"])
        counts, self.share = zipf_buckets(self.keys, float(spec["zipf"]))
        self.n = counts.astype(np.int64)
        self.ages = np.zeros((TTL_STAGES, len(self.n)), dtype=np.int64)  # fresh keys by stage of their TTL
        self.stale = np.zeros(len(self.n), dtype=np.int64)  # absent keys whose expired value is still held
        self.pending = np.zeros(len(self.n), dtype=np.int64)  # absent keys with a store request in flight
        self.warm = spec["start"] == "warm"  # filled at its long-run level by the first traffic
        # fresh keys per bucket holding a bad value (a bad configuration written to them): looked up,
        # they answer it; they go as other fresh keys go (lapse, replacement, flush, eviction)
        self.bad = np.zeros(len(self.n), dtype=np.int64)
        # what the store's last answer said: how long it took (s) and the share answered well
        self.store_latency = 0.0
        self.store_good = 1.0
        # what the store's last health said of its queue (a store without one: None): its wait
        # when that tick began (s), the work it does a second, the wait beyond which it refuses
        # work (s), and a fault's delay (s)
        self.store_queue: tuple[float, float, float, float] | None = None
        # store requests timed out (evict_on_error): [ticks until the cache's timeout is up, the chance a
        # key absent then got one (per bucket), the keys absent then]
        self.timeouts: list[list] = []

    # -- the long run ----------------------------------------------------------------------
    def steady_fresh(self, rate: float) -> np.ndarray:
        """Fresh keys per bucket in the long run at ``rate`` requests/s (store always well):
        a key asked r times a second is fresh with chance r.tau / (1 + r.tau), where
        1/tau = 1/ttl + the replacement rate that keeps the cache within its size."""
        r = rate * self.share / self.n
        expire = 1.0 / self.ttl if self.ttl else 0.0

        def held(evict: float) -> np.ndarray:
            if expire + evict == 0:
                return self.n.astype(float)
            tau = 1.0 / (expire + evict)
            return self.n * r * tau / (1.0 + r * tau)

        if held(0.0).sum() <= self.size:
            return held(0.0)
        lo, hi = 0.0, max(1.0, float(r.max()))
        while held(hi).sum() > self.size:
            hi *= 2
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if held(mid).sum() > self.size else (lo, mid)
        return held(hi)

    # -- bad values ------------------------------------------------------------------------
    def spoil(self, rng: np.random.Generator, hottest: int, share: float) -> None:
        """Write a bad value to keys held now: the ``hottest`` most popular keys, and ``share``
        of the others (at random)."""
        ranks = np.cumsum(self.n) - self.n  # the keys before each bucket
        hot = np.clip(hottest - ranks, 0, self.n)  # of each bucket's keys, those among the hottest
        fresh = self.fresh
        held_hot = rng.hypergeometric(fresh, self.n - fresh, hot, size=len(self.n)) if hottest else 0 * fresh
        self.bad = np.maximum(self.bad, held_hot)
        if share > 0:
            self.bad += rng.binomial(fresh - self.bad, share)

    def _fresh_if_bad(self) -> np.ndarray | None:
        """The fresh keys per bucket, before some go, if any hold a bad value (else nothing is
        worked out: a cache without bad values does no more work than before)."""
        return self.fresh if self.bad.any() else None

    def _keep_bad_within(self, rng: np.random.Generator, before: np.ndarray | None) -> None:
        """Fresh keys went (``before``: how many each bucket had): as many of its bad ones went, in proportion."""
        if before is not None:
            now, some = self.fresh, (self.bad > 0) & (before > 0)
            kept = np.minimum(self.bad, now)
            kept[some] = rng.hypergeometric(self.bad[some], before[some] - self.bad[some], now[some])
            self.bad = kept

    # -- lookups ---------------------------------------------------------------------------
    def answer_times(self, sent: dict[int, int]) -> defaultdict[int, "Answers"]:
        """Per age of the store requests in flight (0: this tick's), when their answers come
        and how (see ``Answers``). A store without a queue answers as its last answers did.
        A store with one answers in the order it is asked: its last health gave its wait
        when the tick two ticks ago began (the tick in which it worked on the requests sent
        three ticks ago); the requests of each tick since arrive over the store's next tick,
        adding their work to the wait as the store works it off, up to its limit, past
        which it refuses them (the cache its only caller since: what others ask shows in
        the next health)."""
        heard = Answers(self.store_latency, 0.0, math.inf, 0.0, self.store_good, math.inf, self.dt)
        out = defaultdict(lambda: heard)  # (older requests: as the last answers heard)
        if self.store_queue is None:
            return out
        wait, pace, limit, extra = self.store_queue
        if pace <= 0:
            return defaultdict(lambda: Answers(0.0, 0.0, -1.0, 0.0, 0.0, self.timeout, self.dt))
        w = wait
        for age in (2, 1, 0):  # the store's tick the health came from (the requests sent two ticks ago), then on
            grow = sent.get(age, 0) / pace - self.dt
            out[age] = Answers(w, grow, limit, 1.0 / pace + extra, 1.0, self.timeout, self.dt)
            w = min(limit, max(0.0, w + grow))
        return out

    def lookup(self, rng: np.random.Generator, requests: int, unexpected: int,
               flights: list[tuple[int, np.ndarray]] = (), sent: dict[int, int] | None = None) -> dict:
        """``requests`` lookups, ``unexpected`` more answered with something unexpected (a fault;
        only asked with evict_on_error: their keys are deleted and asked of the store), with
        ``flights`` the keys in flight per bucket by the ticks since they were first missed
        (0: this tick). Returns per bucket the absent keys, hits, misses, the misses of keys
        with a stale value, the store requests they make (``asks``) and the keys that now
        have one in flight (``new``)."""
        if self.warm:
            steady = np.minimum(_spread(rng, self.steady_fresh((requests + unexpected) / self.dt)), self.n)
            k = self._stages()
            self.ages[:] = 0
            self.ages[TTL_STAGES - k:] = rng.multinomial(steady, np.full(k, 1.0 / k)).T  # stages equally full
            self.warm = False
        asked = rng.multinomial(requests, self.share)
        hits = rng.binomial(asked, self.fresh / self.n)
        misses = asked - hits
        bad = np.zeros_like(hits)
        if self.bad.any():  # hits on keys with a bad value answer it
            fresh = self.fresh
            bad = rng.binomial(hits, _share(self.bad, fresh))
            hits = hits - bad
            if self.evict_on_error:  # an unexpected answer: its key is deleted and asked of the store
                unexpected, bad = unexpected + int(bad.sum()), np.zeros_like(bad)
        if unexpected:
            odd = rng.multinomial(unexpected, self.share)
            before = self._fresh_if_bad()
            self.ages -= rng.binomial(self.ages, _reached(self.n, odd, 1.0))
            self._keep_bad_within(rng, before)
            misses = misses + odd
            asked = asked + odd
        absent = self.n - self.fresh
        times = self.answer_times(sent or {})
        x = asked / self.n
        # the misses of keys in flight, by how long they have been (the rest reach idle keys); those
        # after their request's answer came find the key stored, if the store answered well
        in_flight = np.minimum(self.pending, absent)
        left, flying = misses.copy(), in_flight.copy()
        late = []  # (lookups after the answer came, the chance it stored the key) by age
        for age, keys in flights:
            keys = np.minimum(keys, flying)
            these = rng.binomial(left, _share(keys, absent - (in_flight - flying)))
            after, good = _after_answer(x, age, times[age])
            late.append((rng.binomial(these, after), good))
            left -= these
            flying -= keys
        idle = absent - in_flight
        new = _first_misses(rng, idle, left)  # idle keys reached now have a request in flight
        after, good = _after_answer(x, 0, times[0])
        late.append((rng.binomial(np.maximum(left - new, 0), after), good))
        if all(np.array_equal(g, late[0][1]) for _, g in late):  # (one chance for all: one draw)
            found = rng.binomial(sum(n for n, _ in late), late[0][1])
        else:
            found = sum(rng.binomial(n, g) for n, g in late)
        hits, misses = hits + found, misses - found
        self.pending += new
        stale = rng.binomial(misses, _share(self.stale, absent))
        return {"absent": absent, "hits": hits, "misses": misses, "stale": stale, "new": new,
                "asks": new.copy() if self.coalesce else misses, "bad": bad}

    # -- the store's answers -------------------------------------------------------------
    def settle(self, rng: np.random.Generator, asked: np.ndarray, ok: np.ndarray, refused: np.ndarray,
               new: np.ndarray, absent: np.ndarray, coalesced: bool, latency: float, heard: int) -> int:
        """The store answered ``asked`` requests per bucket, ``ok`` of them well and
        ``refused`` at once (the others timed out), ``latency`` seconds after they were sent
        and ``heard`` ticks after, for keys among ``absent`` (those without a fresh value when
        they were asked); they put ``new`` keys' requests in flight (``coalesced``: one
        request per key). A key is stored if one of its requests was answered well (a stale
        value refreshed); the others are idle again. With evict_on_error a failed answer
        deletes its key, even one another request stored: a refusal now (it came at once),
        a timeout when the cache's timeout is up (the key is deleted then if it was stored
        meanwhile); a stale value goes with a refusal. Returns the keys deleted now."""
        total = int(asked.sum())
        if total:
            self.store_latency, self.store_good = float(latency), float(ok.sum()) / total
        good = _share(ok, asked)  # per bucket
        self.pending = np.maximum(self.pending - new, 0)
        failed = np.zeros(len(new))
        if coalesced:
            stored = rng.binomial(new, good)
        else:  # each request was for a given absent key with chance 1/absent
            reached = _reached(absent, asked, 1.0)
            stored = rng.binomial(new, np.clip(_share(_reached(absent, asked, good), reached), 0.0, 1.0))
            if self.evict_on_error:
                failed = _reached(absent, asked, _share(refused, asked))
                late = asked - ok - refused
                if late.any():
                    wait = max(0, math.ceil(self.timeout / self.dt - 1e-9) - heard)
                    self.timeouts.append([wait, _reached(absent, asked, _share(late, asked)), absent.copy()])
        stored = np.minimum(stored, self.n - self.fresh)
        self.stale -= rng.hypergeometric(self.stale, self.n - self.fresh - self.stale, stored)  # values refreshed
        gone = np.zeros_like(stored)
        if failed.any():
            gone = rng.binomial(stored, failed)
            self.stale -= rng.binomial(self.stale, failed)
        stored = stored - gone
        self._make_room(rng, int(stored.sum()))
        self.ages[TTL_STAGES - self._stages()] += stored
        return int(gone.sum()) + self._time_out(rng)

    def _time_out(self, rng: np.random.Generator) -> int:
        """The timeouts whose time is up delete their keys if they were stored since they
        were asked (evict_on_error). Returns the keys deleted."""
        gone = 0
        for entry in [e for e in self.timeouts if e[0] <= 0]:
            _, chance, absent_then = entry
            stored_since = np.clip(self.fresh - (self.n - absent_then), 0, None)
            if stored_since.any():
                before = self._fresh_if_bad()
                out = rng.binomial(stored_since, chance)
                self._delete_youngest(out)
                self._keep_bad_within(rng, before)
                gone += int(out.sum())
        self.timeouts = [e for e in self.timeouts if e[0] > 0]
        return gone

    def _delete_youngest(self, count: np.ndarray) -> None:
        """Delete ``count`` fresh keys per bucket, the most recently stored first."""
        left = count.astype(np.int64).copy()
        for stage in range(TTL_STAGES):
            take = np.minimum(left, self.ages[stage])
            self.ages[stage] -= take
            left -= take
            if not left.any():
                break

    def step_timeouts(self, rng: np.random.Generator) -> int:
        """A tick passes for the timeouts waiting to delete keys; returns the keys deleted."""
        for e in self.timeouts:
            e[0] -= 1
        return self._time_out(rng) if self.timeouts else 0

    def tick(self, rng: np.random.Generator) -> None:
        """Fresh keys lapse into stale values."""
        if self.ttl:
            before = self._fresh_if_bad()
            moved = rng.binomial(self.ages, min(1.0, self.dt * self._stages() / self.ttl))
            self.ages -= moved
            self.ages[1:] += moved[:-1]
            self.stale += moved[-1]
            self._keep_bad_within(rng, before)

    def _stages(self) -> int:
        """The stages a stored key's freshness passes through (each at least a tick long on average)."""
        return int(min(TTL_STAGES, max(1, self.ttl // self.dt))) if self.ttl else 1

    def flush(self, rng: np.random.Generator, share: float) -> None:
        """A share of the cache is emptied (its nodes restarted): a cold start for those keys."""
        before = self._fresh_if_bad()
        self.ages -= rng.binomial(self.ages, share)
        self._keep_bad_within(rng, before)
        self.stale -= rng.binomial(self.stale, share)

    def _make_room(self, rng: np.random.Generator, coming: int) -> None:
        """Random replacement: for ``coming`` new keys, keys drawn at random from those held
        (stale or fresh) go, as far as the size needs."""
        excess = int(self.fresh.sum() + self.stale.sum()) + coming - self.size
        if excess > 0:
            b = len(self.n)
            gone = draw_without_replacement(rng, np.concatenate([self.ages.ravel(), self.stale]), excess)
            before = self._fresh_if_bad()
            self.ages -= gone[:-b].reshape(self.ages.shape)
            self.stale -= gone[-b:]
            self._keep_bad_within(rng, before)

    @property
    def fresh(self) -> np.ndarray:
        """Fresh keys per bucket."""
        return self.ages.sum(axis=0)

    @property
    def fill(self) -> float:
        """Share of the cache's size holding fresh keys."""
        return float(self.fresh.sum() / self.size) if self.size else 0.0
