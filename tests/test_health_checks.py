"""Health checks that flap (agents/health_checks.py) on tests/playbooks/flapping.yaml.j2:
a network manager propagating 10 configurations/s gets 20/s between 00:10 and 00:30 and
works the backlog off by itself (by about 01:10); a load balancer health-checks its 100
targets from a fleet of which half is new every hour, and a new checker has no network
until its configuration has propagated."""
from __future__ import annotations

from pathlib import Path

import pytest

import orchestrator

FL = str(Path(__file__).parent / "playbooks" / "flapping.yaml.j2")


@pytest.fixture(scope="module")
def runs():
    return {fo: orchestrator.run(FL, runbook="none", seed=1, sets={"failover": fo}) for fo in (True, False)}


def backlog_mask(m):
    return m["network-manager.queue_wait_s"] > 0


def test_targets_flap_only_while_network_propagation_has_a_backlog(runs):
    m = runs[True].metrics
    backlog = backlog_mask(m)
    assert backlog.any() and (~backlog).any()
    assert m.loc[~backlog, "nlb.target_flaps"].sum() == 0  # never without a backlog ...
    assert m.loc[backlog, "nlb.target_flaps"].sum() > 100  # ... and many times with one
    assert m.loc[backlog, "nlb.targets_in_service"].min() < 0.95


def test_flapping_makes_connection_errors_and_disabling_failover_stops_them(runs):
    on, off = runs[True].metrics, runs[False].metrics
    during = backlog_mask(on) & (on["network-manager.queue_wait_s"] > 600)  # the same ticks in both runs
    assert on.loc[during, "nlb-clients.error_ratio"].mean() > 0.05
    assert off["nlb.target_flaps"].sum() == 0 and off["nlb.targets_in_service"].min() == 1.0
    # Without failover the errors stay at the level of a quiet hour (connections recycled).
    quiet = off[(off["clock"] >= "00:01") & (off["clock"] < "00:10")]["nlb-clients.error_ratio"].mean()
    assert off.loc[during, "nlb-clients.error_ratio"].mean() < quiet + 0.005
    assert runs[True].score["recovered"]["nlb-clients"]["reached"]  # errors end with the backlog
