"""DNS automation racing with itself (agents/dns.py): without the guard, a delayed
enactor's stale plan and another's clean-up leave the endpoint with no records for some
seeds, and the automation cannot repair it; with the guard, never. On
tests/playbooks/dns_race.yaml.j2 (a planner every 30 s, three enactors, 1 h)."""
from __future__ import annotations

from pathlib import Path

import pytest

import orchestrator

pytestmark = pytest.mark.slow  # many seeds of the DNS race

RACE = str(Path(__file__).parent / "playbooks" / "dns_race.yaml.j2")
SEEDS = range(1, 13)


@pytest.fixture(scope="module")
def runs():
    return {(guard, seed): orchestrator.run(RACE, runbook="none", seed=seed, sets={"guard": guard})
            for guard in (False, True) for seed in SEEDS}


def emptied(r) -> bool:
    return bool((r.metrics["database.dns_records_ok"] == 0).any())


def test_without_the_guard_the_race_empties_the_endpoint_for_some_seeds_and_not_others(runs):
    hit = [seed for seed in SEEDS if emptied(runs[(False, seed)])]
    print(f"\nendpoint emptied without the guard for seeds {hit}")
    assert 0 < len(hit) < len(SEEDS)
    for seed in hit:
        r = runs[(False, seed)]
        m = r.metrics
        first = int(m.index[m["database.dns_records_ok"] == 0][0])
        assert (m["database.dns_records_ok"].iloc[first:] == 0).all()  # the automation never repairs it
        assert m["callers.error_ratio"].iloc[first + 60:].min() > 0.99  # nobody reaches the database
        whats = [w for w in r.events[r.events["event"] == "dns"]["what"]]
        assert any("no records" in w for w in whats), whats


def test_with_the_guard_the_endpoint_never_empties(runs):
    assert not any(emptied(runs[(True, seed)]) for seed in SEEDS)


def test_disabling_the_automation_and_restoring_the_records_by_hand_brings_the_callers_back(runs, runbook_file):
    gone = {"metric": "database.dns_records_ok", "below": 0.5, "for": 120}
    book = runbook_file("restore", [{"name": "stop the enactors", "when": gone, "do": "disable_dns_automation"},
                                    {"name": "records by hand", "when": {"done": "disable_dns_automation"},
                                     "do": "restore_dns"}])

    def first_empty(seed):
        ok = runs[(False, seed)].metrics["database.dns_records_ok"]
        return int(ok.index[ok == 0][0]) if (ok == 0).any() else 10**9

    seed = min(SEEDS, key=first_empty)  # the seed whose endpoint emptied earliest leaves time to repair it
    assert first_empty(seed) < 1800
    r = orchestrator.run(RACE, runbook=book, seed=seed)
    assert emptied(r)  # the same race: nobody acted before it
    m = r.metrics
    assert m["database.dns_records_ok"].iloc[-60:].min() == 1
    assert m["callers.error_ratio"].iloc[-60:].mean() < 0.01  # the callers get through again
