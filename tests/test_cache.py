"""A cache in front of a store, against references that do not come from gameday: its
hit ratio against an exact key-by-key simulation (tests/reference_cache.py) and against
closed forms for Zipf popularity; the count of distinct keys a coalescing cache asks for;
serve-stale while the store is down; and the stampede that evict-on-error sustains after a
flush or a burst of bad answers, which recovers without it and ends with coalescing or
its hot-fix."""
from __future__ import annotations

import filecmp

import numpy as np
import pytest

import orchestrator
from helpers import at, play
from reference_cache import simulate, zipf_shares

ROUND_TRIP = 2  # ticks: the cache asks at t, the store answers at t+1, the cache stores at t+2


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


def random_replacement(keys: int, s: float, rate: float, size: int, d: int = ROUND_TRIP) -> float:
    """The classic approximation of a random-replacement cache (Gelenbe 1973; Fricker,
    Robert and Roberts 2012): a key asked r times a tick is held with chance
    r.tau / (1 + r(tau + d)), tau such that the keys held fill the cache (d: the ticks a
    missed key takes to be stored)."""
    p = zipf_shares(keys, s)
    r = rate * p
    lo, hi = 0.0, 1e12
    for _ in range(200):
        tau = (lo + hi) / 2
        held = (r * (tau + d) / (1 + r * (tau + d))).sum()  # fresh or being fetched
        lo, hi = (tau, hi) if held < size else (lo, tau)
    return float((p * r * lo / (1 + r * (lo + d))).sum())


def fixed_ttl(keys: int, s: float, rate: float, ttl: int, d: int = ROUND_TRIP) -> float:
    """A cache that holds every key, each fresh for ``ttl`` ticks once stored: a key asked
    Poisson(r) times a tick is fresh for ttl ticks, then idle until a tick with a request
    (1/(1 - e^-r) ticks on average, that one included), then fetched for d - 1 more."""
    p = zipf_shares(keys, s)
    asked = -np.expm1(-rate * p)
    return float((p * ttl / (ttl + 1 / asked + d - 1)).sum())


CASES = {  # keys, zipf, size, ttl (ticks), closed form
    "full, random replacement": (100_000, 0.9, 10_000, None, lambda: random_replacement(100_000, 0.9, 200, 10_000)),
    "steep popularity": (100_000, 1.2, 2_000, None, lambda: random_replacement(100_000, 1.2, 200, 2_000)),
    "every key, a TTL": (100_000, 0.9, None, 300, lambda: fixed_ttl(100_000, 0.9, 200, 300)),
    "full and a TTL": (100_000, 0.9, 20_000, 600, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_the_hit_ratio_matches_an_exact_simulation_and_the_closed_form(tmp_path, case):
    keys, s, size, ttl, closed = CASES[case]
    cache = {"keys": keys, "zipf": s, "start": "cold"} | ({"size": size} if size else {}) | ({"ttl": ttl} if ttl else {})
    r = play(tmp_path, world(cache))
    model = hit_ratio(r.metrics.iloc[1500:3000])
    exact = simulate(keys, s, 200, 3000, size=size, ttl_ticks=ttl, fill_ticks=ROUND_TRIP, warmup=1500)
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
    assert cold.metrics["cache.hit_ratio"].iloc[2] == 0.0  # cold: nothing stored before its first answers
    assert hit_ratio(cold.metrics.iloc[1:6]) < 0.5 * long_run  # then it fills as it is asked
    assert abs(hit_ratio(warm.metrics.iloc[1:61]) - long_run) < 0.03
    assert abs(hit_ratio(warm.metrics.iloc[900:1800]) - long_run) < 0.01


@pytest.mark.parametrize("tick", ["1s", "0.25s"])
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


def test_a_flush_is_a_cold_start_whose_misses_all_go_to_the_store(tmp_path):
    flush = [{"name": "restart", "at": "00:10", "effects": [{"target": "cache", "op": "flush_cache", "args": {}}]}]
    r = play(tmp_path, world({"keys": 10_000, "zipf": 0.9, "ttl": "1h"}, triggers=flush, duration="15m"))
    before, first = at(r, "00:09", 60), at(r, "00:10:01", 1).iloc[0]
    assert hit_ratio(before) > 0.9
    assert first["cache.hit_ratio"] == 0.0 and first["cache.store_requests"] == first["cache.offered"] > 0
    assert hit_ratio(at(r, "00:14", 60)) > 0.8  # the keys come back as they are asked
    assert list(r.events[r.events["event"] == "applied"]["op"]) == ["flush_cache"]


def test_a_coalescing_cache_asks_the_store_once_per_key(tmp_path):
    """Just after a flush every lookup misses; coalesced, the store is asked once for each
    distinct key of the tick: for X lookups of Zipf keys, sum_i 1 - (1 - p_i)^X."""
    flush = [{"name": "restart", "at": "00:05", "effects": [{"target": "cache", "op": "flush_cache", "args": {}}]}]
    keys, s = 20_000, 1.0
    both = {}
    for coalesce in (False, True):
        r = play(tmp_path / str(coalesce), world({"keys": keys, "zipf": s, "coalesce": coalesce}, rate=2000,
                                                 triggers=flush, duration="6m"))
        both[coalesce] = at(r, "00:05:01", 1).iloc[0]
    p = zipf_shares(keys, s)
    first = both[True]
    distinct = float((-np.expm1(first["cache.offered"] * np.log1p(-p))).sum())
    assert abs(first["cache.store_requests"] - distinct) < 0.03 * distinct, (first["cache.store_requests"], distinct)
    assert both[False]["cache.store_requests"] == both[False]["cache.offered"]  # uncoalesced: every miss
    assert distinct < 0.5 * first["cache.offered"]


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


def stampede(evict: bool, trigger: dict, mitigation: dict | None = None, duration: str = "40m") -> dict:
    """A warm cache of every key in front of a store that takes a fifth of the traffic:
    normally it sees only the misses (well under 1%). At 1 s ticks: a missed key stays
    missing for the two ticks of its store round trip, and every lookup of it meanwhile
    asks the store again, so how strong the stampede is depends on the tick (see the
    reference's cache section); at 0.25 s ticks this one does not hold."""
    more = {"triggers": [{"name": "trigger", "at": "00:05", "effects": [trigger]}]}
    if mitigation:
        more["mitigations"] = [{"name": "fix", "deploy": False, "effects": [mitigation]}]
    w = world({"keys": 100_000, "zipf": 1.0, "ttl": "1h", "evict_on_error": evict}, rate=5000,
              store={"capacity": 1000}, duration=duration, **more)
    w["populations"][0].update(request={"timeout": "2s"}, retry={"max_attempts": 3, "base": "1s"})
    return w


FLUSH = {"target": "cache", "op": "flush_cache", "args": {}}
BAD_ANSWERS = {"target": "cache", "op": "fault", "args": {"share": 0.3, "kind": "error", "duration": "60s"}}


@pytest.mark.parametrize("evict", [False, True])
def test_evict_on_error_turns_a_flush_into_a_stampede_that_sustains_itself(tmp_path, evict):
    r = play(tmp_path, stampede(evict, FLUSH))
    assert hit_ratio(at(r, "00:04")) > 0.98 and at(r, "00:04")["cache.store_requests"].mean() < 50
    assert hit_ratio(at(r, "00:05:01", 1)) < 0.01  # flushed: everything asks the store, five times its capacity
    late = at(r, "00:35", 300)
    if not evict:  # every answer stores its key: hot keys are back within seconds, the store within minutes
        assert hit_ratio(at(r, "00:08")) > 0.95
        assert late["db.success_ratio"].mean() > 0.999
    else:  # a hot key's failed answers delete it as fast as its good ones store it
        assert hit_ratio(late) < 0.8
        assert late["cache.store_requests"].mean() > 1.5 * 1000  # the store stays overloaded, half an hour on
        assert late["db.success_ratio"].mean() < 0.6
        assert late["clients.tries"].sum() > 1.1 * late["clients.demand"].sum()  # and the clients retry


@pytest.mark.parametrize("fix", [{"target": "cache", "op": "set_coalescing", "args": {}},
                                 {"target": "cache", "op": "set_evict_on_error", "args": {"enabled": False}}],
                         ids=["coalescing", "hot-fix"])
def test_a_burst_of_bad_answers_sets_off_the_stampede_and_a_fix_ends_it(tmp_path, fix):
    r = play(tmp_path, stampede(True, BAD_ANSWERS, fix, duration="30m"), [{"when": {"at": "00:20"}, "do": "fix"}])
    stuck = at(r, "00:15", 300)  # the bad answers stopped at 00:06; the stampede did not
    assert hit_ratio(stuck) < 0.8 and stuck["db.success_ratio"].mean() < 0.6
    assert stuck["cache.error_evictions"].sum() > 0
    healed = at(r, "00:25", 300)
    assert hit_ratio(healed) > 0.98 and healed["db.success_ratio"].mean() > 0.999


@pytest.mark.slow
@pytest.mark.ray
def test_a_cache_world_on_ray_is_identical_to_the_in_process_run(ray_session, tmp_path):
    """The cache asks its store and answers its callers across actors (placement agent)."""
    w = stampede(True, BAD_ANSWERS, {"target": "cache", "op": "set_coalescing", "args": {}}, duration="12m")
    rules = [{"when": {"at": "00:09"}, "do": "fix"}]
    local = play(tmp_path / "ip", w, rules)
    hosted = play(tmp_path / "ray", w, rules, hosting="ray", placement="agent")
    assert local.metrics["cache.error_evictions"].sum() > 0
    for name in ("events.jsonl", "metrics.csv", "score.json"):
        assert filecmp.cmp(local.dir / name, hosted.dir / name, shallow=False), name


def test_a_cache_world_continues_bit_identically_after_a_snapshot(tmp_path):
    """Mid-stampede, with store requests in flight and callers waiting for them."""
    import yaml

    from orchestrator.hosting.inprocess import InProcessHost
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.engine.world import build_plan

    (tmp_path / "w.yaml.j2").write_text(yaml.safe_dump(stampede(True, FLUSH, duration="10m")))
    host = InProcessHost(build_plan(load_playbook(str(tmp_path / "w.yaml.j2")), None, 4, 600))
    for _ in range(320):
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
