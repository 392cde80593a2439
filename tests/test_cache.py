"""A cache in front of a store, against references that do not come from gameday: its
hit ratio against an exact continuous-time simulation, key by key (tests/reference_cache.py),
and against closed forms for Zipf popularity, at 1, 0.25 and 0.1 s ticks; the count of
distinct keys a coalescing cache asks for; serve-stale while the store is down; when a
failed answer deletes its key (evict_on_error); and the stampede a flush sets off when the
store's queue outlasts the cache's timeout, whose runbooks rank the same at every tick."""
from __future__ import annotations

import filecmp

import numpy as np
import pytest

from helpers import at, play
from reference_cache import simulate_continuous, zipf_shares


def world(cache: dict, rate: float = 200.0, store: dict | None = None, duration: str = "50m", **more) -> dict:
    return {
        "name": "cached", "title": "a cache in front of a store",
        "clock": {"start": "00:00", "tick": "1s", "duration": duration},
        "services": [{"name": "cache", "cache": {"store": "db", **cache}}, {"name": "db", **(store or {})}],
        "populations": [{"name": "clients", "clients": int(rate), "rate": 1.0, "mode": "per_request",
                         "target": "cache", "request": {"timeout": "10s"}, "retry": {"max_attempts": 1}}],
        **more}


def hit_ratio(m) -> float:
    """Hits over lookups, over the rows of ``m``."""
    return float((m["cache.offered"] * m["cache.hit_ratio"]).sum() / m["cache.offered"].sum())


def random_replacement(keys: int, s: float, rate: float, size: int, d: float = 0.0) -> float:
    """The classic approximation of a random-replacement cache (Gelenbe 1973; Fricker,
    Robert and Roberts 2012): a key asked r times a second is held with chance
    r.tau / (1 + r(tau + d)), tau such that the keys held fill the cache (d: the seconds a
    missed key takes to be stored)."""
    p = zipf_shares(keys, s)
    r = rate * p
    lo, hi = 0.0, 1e12
    for _ in range(200):
        tau = (lo + hi) / 2
        held = (r * (tau + d) / (1 + r * (tau + d))).sum()  # fresh or being fetched
        lo, hi = (tau, hi) if held < size else (lo, tau)
    return float((p * r * lo / (1 + r * (lo + d))).sum())


def fixed_ttl(keys: int, s: float, rate: float, ttl: float) -> float:
    """A cache that holds every key, each fresh for ``ttl`` seconds on average once stored,
    in front of a store that answers at once: a key asked r times a second is fresh for
    ttl, then idle until its next lookup (1/r on average); Poisson lookups see the time
    average, r.ttl / (1 + r.ttl), whatever the lifetimes' spread."""
    p = zipf_shares(keys, s)
    return float((p * rate * p * ttl / (1 + rate * p * ttl)).sum())


CASES = {  # keys, zipf, size, ttl (s), closed form
    "full, random replacement": (100_000, 0.9, 10_000, None, lambda: random_replacement(100_000, 0.9, 200, 10_000)),
    "steep popularity": (100_000, 1.2, 2_000, None, lambda: random_replacement(100_000, 1.2, 200, 2_000)),
    "every key, a TTL": (100_000, 0.9, None, 300, lambda: fixed_ttl(100_000, 0.9, 200, 300)),
    "full and a TTL": (100_000, 0.9, 20_000, 600, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("case, tick", [(case, tick) for case in CASES for tick in ("1s", "0.25s", "0.1s")
                                        if tick != "0.1s" or case == "full and a TTL"])  # (0.1 s: the dearest, once)
def test_the_hit_ratio_matches_an_exact_simulation_and_the_closed_form_at_any_tick(tmp_path, case, tick):
    """The store answers at once: a missed key is stored as soon as it is asked, whatever
    the tick, as in the continuous-time simulation (its store answering in a microsecond)."""
    keys, s, size, ttl, closed = CASES[case]
    cache = {"keys": keys, "zipf": s, "start": "cold"} | ({"size": size} if size else {}) | ({"ttl": ttl} if ttl else {})
    w = world(cache)
    w["clock"]["tick"] = tick
    r = play(tmp_path, w)
    model = hit_ratio(r.metrics.iloc[len(r.metrics) // 2:])
    exact = simulate_continuous(keys, s, 200, 3000, size=size, ttl_s=ttl, latency_s=1e-6, warmup_s=1500,
                                keep_lapsed=True)["hit_ratio"]
    assert abs(model - exact) < 0.01, (model, exact)
    if closed:
        assert abs(model - closed()) < 0.01, (model, closed())
    assert 0.2 < model < 0.95  # a regime where the cache's size or TTL matters


@pytest.mark.slow
def test_a_warm_cache_starts_where_a_cold_one_ends_up(tmp_path):
    cache = {"keys": 20_000, "zipf": 1.0, "size": 2_000, "ttl": "5m"}
    cold = play(tmp_path / "cold", world(cache | {"start": "cold"}, duration="30m"))
    warm = play(tmp_path / "warm", world(cache | {"start": "warm"}, duration="30m"))
    long_run = hit_ratio(cold.metrics.iloc[900:1800])
    assert hit_ratio(cold.metrics.iloc[1:6]) < 0.8 * long_run  # cold: it fills as it is asked
    assert abs(hit_ratio(warm.metrics.iloc[1:61]) - long_run) < 0.03
    assert abs(hit_ratio(warm.metrics.iloc[900:1800]) - long_run) < 0.01


@pytest.mark.parametrize("tick", ["1s", "0.25s"])
@pytest.mark.slow
def test_a_miss_is_answered_when_the_store_answers_whatever_the_tick(tmp_path, tick):
    """A store round trip takes two ticks, as a request the cache answers at once takes
    one each way: neither is the caller's waiting, so misses of a healthy store succeed
    with a timeout of two ticks (they all timed out at 1 s ticks before)."""
    w = world({"keys": 10_000, "zipf": 0.9, "ttl": "1m"}, duration="5m")
    w["clock"]["tick"] = tick
    w["populations"][0]["request"] = {"timeout": "2s"}
    m = play(tmp_path, w).metrics
    assert (m["cache.store_requests"] > 0).mean() > 0.5  # misses all along
    assert m["clients.failed"].sum() == 0
    assert m["clients.ok"].sum() > 0.95 * m["clients.demand"].sum()  # (the last ticks' answers are on their way)


def _lookups_within(x: np.ndarray, lat: float) -> np.ndarray:
    """For a key looked up Poisson(x) times a tick: the mean lookups within ``lat`` (ticks,
    below 1) after its first one in the tick, by numerical integration over the first's time."""
    tau = (np.arange(4000) + 0.5) / 4000
    first = x[:, None] * np.exp(-x[:, None] * tau)  # its density
    return (first * x[:, None] * np.minimum(lat, 1 - tau)).mean(axis=1)


@pytest.mark.slow
@pytest.mark.parametrize("latency", [0.0, 0.5])
def test_after_a_flush_the_store_is_asked_for_each_key_until_it_answers(tmp_path, latency):
    """The tick after a flush: every key looked up is asked of the store once, and again
    by each lookup of it before the store's answer stores it (``latency`` seconds; 1 s
    ticks). Coalesced, once. Closed forms for X lookups of Zipf keys: the distinct keys,
    sum_i 1 - (1 - p_i)^X, plus the lookups within the latency of each key's first."""
    flush = [{"name": "restart", "at": "00:02", "effects": [{"target": "cache", "op": "flush_cache", "args": {}}]}]
    keys, s = 20_000, 1.0
    firsts = {}
    for coalesce in (False, True):
        store = {"fault": {"latency": latency}}
        r = play(tmp_path / str(coalesce), world({"keys": keys, "zipf": s, "ttl": "1h", "coalesce": coalesce},
                                                 rate=2000, store=store, triggers=flush, duration="3m"))
        assert hit_ratio(at(r, "00:01", 60)) > 0.9
        firsts[coalesce] = at(r, "00:02:01", 1).iloc[0]
        assert list(r.events[r.events["event"] == "applied"]["op"]) == ["flush_cache"]
    p = zipf_shares(keys, s)
    x = firsts[True]["cache.offered"] * p
    distinct = float((-np.expm1(firsts[True]["cache.offered"] * np.log1p(-p))).sum())
    asked = distinct + float(_lookups_within(x, latency).sum())
    assert abs(firsts[True]["cache.store_requests"] - distinct) < 0.03 * distinct, (firsts[True], distinct)
    assert abs(firsts[False]["cache.store_requests"] - asked) < 0.03 * asked, (firsts[False], asked)
    assert distinct < 0.5 * firsts[True]["cache.offered"]
    if latency:
        assert asked > 1.5 * distinct  # the hot keys are asked again and again while they are fetched


@pytest.mark.parametrize("serve_stale", [False, True])
def test_serve_stale_answers_from_expired_values_while_the_store_is_down(tmp_path, serve_stale):
    down = [{"name": "store-down", "at": "00:10", "effects": [{"target": "db", "op": "scale_capacity", "args": {"factor": 0}}]}]
    cache = {"keys": 1_000, "zipf": 0.8, "ttl": "1m", "timeout": "2s", "serve_stale": serve_stale}
    r = play(tmp_path, world(cache, triggers=down, duration="15m"))
    assert at(r, "00:09", 60)["clients.success_ratio"].mean() > 0.99
    later = at(r, "00:13", 60)  # the fresh keys have lapsed: the cache holds stale values only
    assert hit_ratio(later) < 0.1
    if serve_stale:  # every key was asked (and stored) before: each has a stale value
        assert later["clients.success_ratio"].mean() > 0.99
        assert later["cache.stale_served"].sum() > 0.9 * later["cache.offered"].sum()
    else:
        assert later["clients.success_ratio"].mean() < 0.1
        assert later["cache.stale_served"].sum() == 0


def stampede(evict: bool, trigger: dict, mitigation: dict | None = None, duration: str = "40m",
             limit: str = "3s") -> dict:
    """A warm cache of every key in front of a store that takes a fifth of the traffic:
    normally it sees only the misses (well under 1%). The store queues what it cannot do
    at once, up to ``limit`` of work; the cache waits 2 s for it. After a flush every
    lookup misses and asks the store (uncoalesced: every lookup of a key in flight asks
    again); if the queue outgrows the cache's timeout, every store request times out, no
    key is stored, and the misses keep the queue full: a congestive collapse that holds
    at any tick (the store's latency, not the tick, is how long a key stays missing)."""
    more = {"triggers": [{"name": "trigger", "at": "00:05", "effects": [trigger]}]}
    if mitigation:
        more["mitigations"] = [{"name": "fix", "deploy": False, "effects": [mitigation]}]
    w = world({"keys": 100_000, "zipf": 1.0, "ttl": "1h", "evict_on_error": evict, "timeout": "2s"}, rate=5000,
              store={"capacity": 1000, "queue": {"limit": limit}}, duration=duration, **more)
    w["populations"][0].update(request={"timeout": "2s"}, retry={"max_attempts": 3, "base": "1s"})
    return w


FLUSH = {"target": "cache", "op": "flush_cache", "args": {}}


CAPACITY = {"target": "db", "op": "scale_capacity", "args": {"factor": 3}}


@pytest.mark.parametrize("limit", ["1s", "3s"])
@pytest.mark.slow
def test_a_flush_sets_off_a_stampede_that_holds_while_the_stores_queue_outlasts_the_caches_timeout(tmp_path, limit):
    r = play(tmp_path, stampede(False, FLUSH, limit=limit, duration="20m"))
    assert hit_ratio(at(r, "00:04")) > 0.98 and at(r, "00:04")["cache.store_requests"].mean() < 50
    first = at(r, "00:05:01", 1).iloc[0]
    assert first["cache.store_requests"] > 0.3 * first["cache.offered"]  # flushed: the misses all go to the store
    late = at(r, "00:15", 300)
    if limit == "1s":  # what the store queues it answers in time: each answer stores its key
        assert hit_ratio(at(r, "00:08")) > 0.95
        assert late["db.success_ratio"].mean() > 0.999
    else:  # its queue's wait outlasts the cache's timeout: nothing is stored, the misses keep it full
        assert hit_ratio(late) < 0.8
        assert late["cache.store_requests"].mean() > 1.5 * 1000  # the store stays overloaded, ten minutes on
        assert late["db.success_ratio"].mean() < 0.01 and late["db.work_done"].mean() > 0.99 * 1000  # busy for nobody
        assert late["clients.tries"].sum() > 1.1 * late["clients.demand"].sum()  # and the clients retry


FIXES = {"capacity": CAPACITY, "throttle": {"target": "db", "op": "throttle", "args": {"rate": 900}},
         "coalescing": {"target": "cache", "op": "set_coalescing", "args": {}}}


@pytest.mark.slow
def test_the_stampedes_runbooks_rank_the_same_at_every_tick(tmp_path):
    """A third of the capacity more ends the collapse at once; a throttle below the store's
    capacity drains its queue, then the keys come back; coalescing does not end it (the
    keys missed are mostly distinct: one request per key is still more than the store
    can do in time). The order, and each one's time within a minute, at 1, 0.25 and 0.1 s."""
    broken = {}
    for tick in ("1s", "0.25s", "0.1s"):
        for name, fix in FIXES.items():
            w = stampede(True, FLUSH, fix, duration="16m")
            w["clock"]["tick"] = tick
            w["scoring"] = {"loop": {"populations": ["clients"], "services": ["db"], "hold": "2m"}}
            score = play(tmp_path / f"{tick}-{name}", w, [{"when": {"at": "00:08"}, "do": "fix"}]).score
            assert score["loop_formed"], (tick, name)
            lb = score["loop_broken"]
            broken[tick, name] = lb["seconds_after_start"] if lb["reached"] else float("inf")
    for tick in ("1s", "0.25s", "0.1s"):
        assert broken[tick, "capacity"] < broken[tick, "throttle"] < broken[tick, "coalescing"] == float("inf"), broken
        for name in ("capacity", "throttle"):
            assert abs(broken[tick, name] - broken["0.1s", name]) <= 60, broken


def test_a_key_in_flight_to_a_queued_store_is_answered_when_the_queue_reaches_its_request():
    """A cache tells when its requests in flight are answered from its store's queue (its
    health: wait, pace, limit) and the requests it sent since, in the order sent. After a
    flush at 1 s ticks, 5,000 misses a tick into an idle store doing 1,000 a second and
    queueing 3 s at most, with a cache timeout of 2 s: a request sent at share t of the
    tick waits 4t s (refused past t = 0.75, timed out past t = 0.5). A hot key's first miss
    comes at once, so its later lookups find it stored. A rare key's lookups after its
    first miss at t find it only after 4t s: of the rest of that tick E[max(0, 1 - 5t)] /
    E[1 - t] = 0.2; of the next tick's, those after 5t - 1 of it, if t <= 0.5: 0.3. The
    next tick's own requests meet a full queue: nothing in flight of them is found."""
    from agents.cache import Cache, _after_answer

    def found(x: float, age: int, answers) -> float:
        after, good = _after_answer(np.array([x]), age, answers)
        return float(after[0] * good[0])

    c = Cache({"store": "db", "keys": 1000, "zipf": 1.0, "timeout": 2.0, "coalesce": False, "serve_stale": False,
               "evict_on_error": True, "start": "cold"}, 1.0)
    c.store_queue = (0.0, 1000.0, 3.0, 0.0)  # its health: wait 0, 1,000 a second, at most 3 s of work, no fault
    flush = c.answer_times({2: 0, 1: 0, 0: 5000})[0]
    assert found(1000.0, 0, flush) > 0.99  # the hot key: stored almost at once
    assert found(1e-3, 0, flush) == pytest.approx(0.2, abs=0.01)  # a rare one: after 4t s
    after = c.answer_times({2: 0, 1: 5000, 0: 5000})
    assert found(1000.0, 1, after[1]) > 0.99 and found(1e-3, 1, after[1]) == pytest.approx(0.3, abs=0.01)
    assert found(1000.0, 0, after[0]) == found(1e-3, 0, after[0]) == 0.0  # the queue is full: refused
    # a store without a queue: as its last answers said (one latency for every request)
    c.store_queue, c.store_latency, c.store_good = None, 0.5, 0.9
    assert found(1e-3, 1, c.answer_times({})[1]) == pytest.approx((1.0 - 0.5 ** 2 / 2) * 0.9)


def test_a_failed_store_answer_deletes_its_key_when_it_comes_a_refusal_at_once_a_timeout_at_the_timeout():
    """evict_on_error: a key stored by one request is deleted by another's failure, when the
    cache hears of it: at once for a refusal, at its timeout (5 s: three ticks after the
    answer heard two ticks after the request) for a timeout."""
    from agents.cache import Cache

    def cache() -> Cache:
        c = Cache({"store": "db", "keys": 1, "zipf": 1.0, "timeout": 5.0, "coalesce": False, "serve_stale": False,
                   "evict_on_error": True, "start": "cold"}, 1.0)
        c.store_latency = 2.0  # its answers take two ticks: every lookup of the tick misses and asks
        return c

    rng = np.random.default_rng(1)
    for refused in (0, 1):
        c = cache()
        found = c.lookup(rng, 10, 0)
        asks = found["asks"]
        assert int(asks.sum()) == 10 and int(found["new"].sum()) == 1
        gone = c.settle(rng, asks, np.array([5]), np.array([5 * refused]), found["new"], found["absent"], False, 0.0, 2)
        if refused:
            assert gone == 1 and c.fresh.sum() == 0
            continue
        assert gone == 0 and c.fresh.sum() == 1  # stored; the five timeouts are not heard yet
        assert c.step_timeouts(rng) == 0 and c.step_timeouts(rng) == 0 and c.fresh.sum() == 1
        assert c.step_timeouts(rng) == 1 and c.fresh.sum() == 0


@pytest.mark.slow
@pytest.mark.ray
def test_a_cache_world_on_ray_is_identical_to_the_in_process_run(ray_session, tmp_path):
    """The cache asks its store and answers its callers across actors (placement agent)."""
    w = stampede(True, FLUSH, CAPACITY, duration="12m")
    rules = [{"when": {"at": "00:09"}, "do": "fix"}]
    local = play(tmp_path / "ip", w, rules)
    hosted = play(tmp_path / "ray", w, rules, hosting="ray", placement="agent")
    assert local.metrics["cache.error_evictions"].sum() > 0
    for name in ("events.jsonl", "metrics.csv", "score.json"):
        assert filecmp.cmp(local.dir / name, hosted.dir / name, shallow=False), name


def test_a_cache_world_continues_bit_identically_after_a_snapshot(tmp_path):
    """As the stampede begins, with store requests in flight, callers waiting for them and
    timeouts waiting to delete keys stored meanwhile."""
    import yaml

    from orchestrator.hosting.inprocess import InProcessHost
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.engine.world import build_plan

    (tmp_path / "w.yaml.j2").write_text(yaml.safe_dump(stampede(True, FLUSH, duration="10m")))
    host = InProcessHost(build_plan(load_playbook(str(tmp_path / "w.yaml.j2")), None, 4, 600))
    for _ in range(302):
        host.step()
    snap = host.snapshot()
    first = [host.step().metrics for _ in range(120)]
    host.restore(snap)
    assert first == [host.step().metrics for _ in range(120)]
    assert any(m["cache"]["error_evictions"] for m in first)


def test_a_tick_longer_than_a_caches_ttl_is_refused():
    """An outsider trial's ttl of 0.5 s at 1 s ticks passed, and every key lapsed each tick
    (hit ratio 0, whatever the popularity)."""
    from orchestrator.playbook.checks import tick_issues

    data = {"populations": [], "services": [{"name": "edge", "cache": {"ttl": 0.5}}, {"name": "db"}]}
    (issue,) = tick_issues(data, 1.0, "--tick")
    assert issue.location == "--tick" and "services[0].cache.ttl of edge (0.5 s)" in issue.expected
    assert tick_issues(data, 0.5, "--tick") == [] and tick_issues(data, 0.25, "--tick") == []


def _spoiled(evict: bool) -> dict:
    """A warm cache holding all of 100,000 Zipf-1.0 keys, for good (no ttl); at 00:02 its 10
    hottest keys get a bad value; at 00:05 it is flushed."""
    return {"name": "spoiled", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "8m"},
            "services": [{"name": "cache", "cache": {"store": "db", "keys": 100_000, "zipf": 1.0,
                                                     "start": "warm", "evict_on_error": evict}},
                         {"name": "db", "capacity": 100_000}],
            "populations": [{"name": "clients", "clients": 5000, "rate": 1.0, "mode": "per_request", "target": "cache",
                             "request": {"timeout": "2s"}, "retry": {"max_attempts": 1}}],
            "triggers": [{"name": "bad-config", "at": "00:02",
                          "effects": [{"target": "cache", "op": "spoil_keys", "args": {"hottest": 10}}]},
                         {"name": "flush", "at": "00:05", "effects": [{"target": "cache", "op": "flush_cache"}]}],
            "scoring": {"impact": {"clients": 1}}}


def test_bad_values_in_a_caches_hottest_keys_fail_their_lookups_until_the_keys_go(tmp_path):
    """#42: a bad value in some keys of a cache had to be written as a fault on all of its
    answers. spoil_keys puts it in the 10 hottest keys: their lookups fail, H(10) / H(100,000)
    = 0.242 of all (Zipf 1.0), until the keys go (here a flush) and come back good from the
    store; evict_on_error clients delete a bad key at its first lookup and refill it."""
    from helpers import play

    import math

    share = sum(1 / k for k in range(1, 11)) / sum(1 / k for k in range(1, 100_001))
    r = play(tmp_path / "kept", _spoiled(False))
    m = r.metrics.set_index("clock")
    during = m.loc["00:02:05":"00:04:59"]
    demand = during["clients.demand"].sum()
    assert abs(during["clients.errors"].sum() / demand - share) <= 4 * math.sqrt(share * (1 - share) / demand)
    assert m.loc["00:00:30":"00:01:59", "clients.errors"].sum() == 0
    assert m.loc["00:05:30":, "clients.errors"].sum() == 0  # flushed, and refetched good from the store
    evicting = play(tmp_path / "evicting", _spoiled(True)).metrics.set_index("clock")
    assert evicting["clients.errors"].sum() == 0  # deleted at the first lookup, answered by the store
    assert evicting.loc["00:02:01":"00:02:03", "cache.store_requests"].sum() > \
        evicting.loc["00:01:01":"00:01:03", "cache.store_requests"].sum()  # (the 10 keys asked again)
