"""Work queues whose items time out while queued (agents/service.py, ``queue``): past
capacity, goodput falls to zero while the service stays busy, and the callers' retries
keep it there; only throttling arrivals below capacity, with the stale queue thrown
away, restores forward progress. tests/playbooks/work_queue.yaml.j2: a lease manager
serving 1,000 renewals/s, 800/s offered, a 3x burst for two minutes at 00:05."""
from __future__ import annotations

from pathlib import Path

import pytest

import orchestrator

WQ = str(Path(__file__).parent / "playbooks" / "work_queue.yaml.j2")


def window(r, start: str, end: str):
    m = r.metrics
    return m[(m["clock"] >= start) & (m["clock"] < end)]


def throttle(factor: float, at: str = "00:12") -> dict:
    return {"when": {"at": at}, "do": {"action": "throttle", "params": {"factor": factor}}}


@pytest.fixture(scope="module")
def collapsed():
    return orchestrator.run(WQ, runbook="none", seed=1)


def test_past_capacity_goodput_falls_to_zero_while_the_service_stays_busy(collapsed):
    before, after = window(collapsed, "00:01", "00:05"), window(collapsed, "00:20", "00:30")
    assert before["lease-manager.goodput"].mean() > 700 and before["lease-manager.utilisation"].mean() < 0.9
    assert after["lease-manager.goodput"].sum() == 0  # no forward progress at all ...
    assert after["lease-manager.utilisation"].min() == 1.0  # ... while it works flat out
    assert after["lease-manager.queue_wait_s"].min() > 5  # every request outwaits its caller's timeout
    assert not collapsed.score["recovered"]["renewals"]["reached"]


def test_without_the_queue_the_same_burst_passes(tmp_path):
    r = orchestrator.run(WQ, runbook="none", seed=1, sets={"queued": False})
    assert window(r, "00:20", "00:30")["lease-manager.goodput"].mean() > 700
    assert r.score["recovered"]["renewals"]["reached"]


def test_a_deep_throttle_with_the_queue_reset_restores_forward_progress(runbook_file):
    book = runbook_file("wq-recover", [throttle(0.2), {"when": {"at": "00:13"}, "do": "reset_queue"},
                                       throttle(1.0, "00:16")])
    r = orchestrator.run(WQ, runbook=book, seed=1)
    late = window(r, "00:25", "00:30")
    assert late["lease-manager.goodput"].mean() > 700 and late["lease-manager.queue_backlog"].max() == 0
    assert r.score["recovered"]["renewals"]["reached"]


def test_a_throttle_that_leaves_arrivals_above_capacity_collapses_again(runbook_file):
    book = runbook_file("wq-shallow", [throttle(0.5), {"when": {"at": "00:12"}, "do": "reset_queue"}])
    r = orchestrator.run(WQ, runbook=book, seed=1)
    assert window(r, "00:12:30", "00:13")["lease-manager.queue_backlog"].min() < 100_000  # the reset did happen
    assert window(r, "00:25", "00:30")["lease-manager.goodput"].sum() == 0


def test_a_deep_throttle_alone_drains_the_stale_queue_only_slowly(runbook_file):
    r = orchestrator.run(WQ, runbook=runbook_file("wq-throttle", [throttle(0.2)]), seed=1)
    backlog = window(r, "00:13", "00:30")["lease-manager.queue_backlog"]
    assert backlog.iloc[-1] < backlog.iloc[0]  # draining ...
    assert window(r, "00:25", "00:30")["lease-manager.goodput"].sum() == 0  # ... but still nothing done for anyone
