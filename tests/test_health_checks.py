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


@pytest.fixture(scope="module")
def disabled_midway(tmp_path_factory):
    """Failover on, disabled by the operators at 00:30, in the thick of the backlog."""
    import yaml

    book = tmp_path_factory.mktemp("rb") / "disable.yaml"
    book.write_text(yaml.safe_dump({"name": "disable-failover", "rules": [
        {"when": {"at": "00:30"}, "do": "disable_failover"}]}))
    return orchestrator.run(FL, runbook=str(book), seed=1)


def backlog_mask(m):
    return m["network-manager.queue_wait_s"] > 0


@pytest.mark.slow
def test_targets_flap_only_while_network_propagation_has_a_backlog(runs):
    m = runs[True].metrics
    backlog = backlog_mask(m)
    assert backlog.any() and (~backlog).any()
    assert m.loc[~backlog, "nlb.target_flaps"].sum() == 0  # never without a backlog ...
    assert m.loc[backlog, "nlb.target_flaps"].sum() > 100  # ... and many times with one
    assert m.loc[backlog, "nlb.targets_in_service"].min() < 0.95


@pytest.mark.slow
def test_flapping_makes_connection_errors_and_disabling_failover_stops_them(runs):
    on, off = runs[True].metrics, runs[False].metrics
    during = backlog_mask(on) & (on["network-manager.queue_wait_s"] > 600)  # the same ticks in both runs
    assert on.loc[during, "nlb-clients.error_ratio"].mean() > 0.05
    assert off["nlb.target_flaps"].sum() == 0 and off["nlb.targets_in_service"].min() == 1.0
    # Without failover the errors stay at the level of a quiet hour (connections recycled).
    quiet = off[(off["clock"] >= "00:01") & (off["clock"] < "00:10")]["nlb-clients.error_ratio"].mean()
    assert off.loc[during, "nlb-clients.error_ratio"].mean() < quiet + 0.005
    assert runs[True].score["recovered"]["nlb-clients"]["reached"]  # errors end with the backlog


@pytest.mark.slow
def test_disabling_failover_during_the_backlog_puts_every_target_back_and_stops_the_errors(runs, disabled_midway):
    m = disabled_midway.metrics
    before, after = m[(m["clock"] >= "00:15") & (m["clock"] < "00:30")], m[(m["clock"] >= "00:32") & (m["clock"] < "00:50")]
    assert (after["network-manager.queue_wait_s"] > 600).all()  # the backlog is still there ...
    assert before["nlb.target_flaps"].sum() > 20 and before["nlb-clients.error_ratio"].mean() > 0.05
    assert after["nlb.target_flaps"].sum() == 0 and after["nlb.targets_in_service"].min() == 1.0  # ... the flapping is not
    quiet = m[(m["clock"] >= "00:01") & (m["clock"] < "00:10")]["nlb-clients.error_ratio"].mean()
    assert after["nlb-clients.error_ratio"].mean() < quiet + 0.005
