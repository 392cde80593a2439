"""Leases kept in a store (agents/leases.py) on tests/playbooks/lease_herd.yaml.j2: a
manager holds 20,000 leases (TTL 30 min, renewed every 10 min) in a store and does
100 units of work per second; a renewal costs 1, re-establishing a lease 2. The store is
unreachable from 00:10 for ``outage_minutes``."""
from __future__ import annotations

from pathlib import Path

import pytest

import orchestrator
from helpers import window as clock_window
from agents import UNWIRED, Service, WorldInfo, agent_rng
from orchestrator.errors import InvalidRunbook
from orchestrator.playbook.loader import load_playbook

LH = str(Path(__file__).parent / "playbooks" / "lease_herd.yaml.j2")


def window(r, start: str, end: str):
    return clock_window(r.metrics, start, end)


def reestablished_after(r, start: str) -> float:
    """Minutes from ``start`` until 99% of the leases are held again (inf: never)."""
    m = r.metrics
    back = m[(m["clock"] >= start) & (m["manager.leases_held"] >= 0.99)]
    return float("inf") if back.empty else (back.index[0] - m.index[m["clock"] >= start][0]) / 60.0


@pytest.fixture(scope="module")
def nobody_acts():
    return orchestrator.run(LH, runbook="none", seed=1)


def test_leases_expire_a_ttl_after_their_last_renewal(nobody_acts):
    # Last renewed between 00:00 and 00:10, before the store went away: they lapse from 00:30 to 00:40.
    assert window(nobody_acts, "00:10", "00:30")["manager.leases_held"].min() == 1.0
    assert window(nobody_acts, "00:41", "01:10")["manager.leases_held"].max() == 0.0
    assert nobody_acts.metrics["manager.leases_expired"].sum() == 20000


def test_with_nobody_acting_the_manager_stays_collapsed_after_the_store_is_back(nobody_acts):
    late = window(nobody_acts, "01:30", "03:00")  # the store has been back since 01:10
    assert late["store-callers.error_ratio"].max() < 0.05
    assert late["manager.leases_held"].max() == 0.0  # no forward progress ...
    assert late["manager.work_useful"].sum() == 0
    assert late["manager.utilisation"].min() == 1.0  # ... while the manager works flat out
    assert late["manager.queue_wait_s"].min() > 60  # every attempt outwaits its own timeout
    assert nobody_acts.score["loop_formed"] and not nobody_acts.score["loop_broken"]["reached"]


def test_an_outage_shorter_than_the_ttl_costs_no_lease():
    r = orchestrator.run(LH, runbook="none", seed=1, sets={"outage_minutes": 15}, duration=3600)
    assert r.metrics["manager.leases_held"].min() == 1.0
    assert window(r, "00:40", "01:00")["manager.work_useful"].mean() > 30


@pytest.mark.parametrize("outage", [{"op": "fault", "args": {"share": 1.0}},
                                    {"op": "scale_capacity", "args": {"factor": 0}}], ids=["fault", "no capacity"])
@pytest.mark.slow
def test_a_store_only_leases_use_can_fail_too(tmp_path, outage):
    """With nobody else calling the store, its readiness is what the manager's renewals
    meet: a fault that fails everything, or no capacity, makes the leases lapse a TTL after
    their last renewal, as with callers (test_leases_expire_a_ttl_after_their_last_renewal)."""
    import yaml

    doc = yaml.safe_load(load_playbook(LH, {"duration": "1h"}).text)
    doc["populations"] = [{"name": "elsewhere", "clients": 10, "rate": 1.0, "mode": "per_request", "target": "manager"}]
    doc["triggers"] = [{"name": "store-down", "at": "00:10", "effects": [{"target": "store", **outage}]}]
    doc["mitigations"], doc["scoring"] = [], {}
    path = tmp_path / "lonely_store.yaml.j2"
    path.write_text(yaml.safe_dump(doc))
    r = orchestrator.run(str(path), runbook="none", seed=1)
    assert window(r, "00:10", "00:30")["manager.leases_held"].min() == 1.0
    assert window(r, "00:41", "01:00")["manager.leases_held"].max() == 0.0


@pytest.mark.slow
def test_the_re_establishment_time_has_a_sweet_spot_in_the_throttle(runbook_file):
    """At 01:20 the operators throttle the manager to ``rate`` requests/s and restart its
    hosts (dropping the stale queue). Below the renewal rate (33/s) the re-established
    leases' renewals starve the rest; above capacity / 2 (50/s) the queue outgrows the
    timeout again; in between, the more the faster."""
    minutes = {}
    for rate in (10, 25, 35, 45, 70):
        book = runbook_file(f"lease-throttle-{rate}", [
            {"when": {"at": "01:20"}, "do": {"action": "throttle", "params": {"rate": rate}}},
            {"when": {"at": "01:20"}, "do": "restart_hosts"}])
        minutes[rate] = reestablished_after(orchestrator.run(LH, runbook=book, seed=1), "01:20")
    assert minutes[45] < minutes[35] < minutes[25], minutes  # tuned sensibly, it gets faster ...
    assert minutes[10] > 2 * minutes[45], minutes  # ... and a throttle too tight is slow again
    assert minutes[70] == float("inf"), minutes  # too loose: collapsed again


@pytest.mark.slow
def test_a_throttle_to_zero_is_no_progress_and_a_negative_one_is_rejected(runbook_file):
    """Admitting nothing stops the wasted work: the feedback has stopped (the loop counts
    as broken) but the manager does not serve again (not recovered, no lease held); a
    throttle below zero is refused with its reason in the journal, and the run goes on."""
    zero = runbook_file("lease-throttle-0", [{"when": {"at": "01:20"}, "do": {"action": "throttle", "params": {"rate": 0}}},
                                             {"when": {"at": "01:20"}, "do": "restart_hosts"}])
    r = orchestrator.run(LH, runbook=zero, seed=1)
    late = window(r, "01:30", "03:00")
    assert late["manager.work_done"].sum() == 0 and late["manager.leases_held"].max() == 0.0
    assert r.score["loop_broken"]["reached"] and "01:20" <= r.score["loop_broken"]["clock"] < "01:30"
    assert not r.score["recovered"]["manager"]["reached"]
    negative = runbook_file("lease-throttle-neg", [{"when": {"at": "01:20"}, "do": {"action": "throttle", "params": {"rate": -5}}}])
    with pytest.raises(InvalidRunbook, match=r"rules\[0\]\.do\.params\.rate: got -5; expected a number >= 0 "
                                             r"\(it is argument rate of throttle\)"):
        orchestrator.run(LH, runbook=negative, seed=1)  # refused before the run, from the operation's declared range
    service = Service("manager", load_playbook(LH).data["services"][1] | {"_wiring": UNWIRED}, agent_rng(1, "manager"), WorldInfo(dt=1.0, start_s=0.0, seed=1))
    service.handle_apply(0, {"op": "throttle", "args": {"rate": -5}, "by": "console"})  # from outside a playbook
    assert service.throttle is None
    assert service.finish({}).events[0]["event"] == "apply_rejected"
