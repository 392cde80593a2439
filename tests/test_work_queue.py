"""Work queues whose items time out while queued (agents/service.py, ``queue``): past
capacity, goodput falls to zero while the service stays busy, and the callers' retries
keep it there; only throttling arrivals below capacity, with the stale queue thrown
away, restores forward progress. tests/playbooks/work_queue.yaml.j2: a lease manager
serving 1,000 renewals/s, 800/s offered, a 3x burst for two minutes at 00:05."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import orchestrator
from helpers import window as clock_window

WQ = str(Path(__file__).parent / "playbooks" / "work_queue.yaml.j2")


def window(r, start: str, end: str):
    return clock_window(r.metrics, start, end)


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
    assert late["lease-manager.goodput"].mean() > 700 and late["lease-manager.queue_wait_s"].max() < 0.1  # short again
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


# -- timing: when a queued request is answered, and which share of a tick's arrivals time out --

MQ = str(Path(__file__).parent / "playbooks" / "metastable_queue.yaml.j2")


def answers(sets: dict, seed: int = 1):
    """Every answer the clients of tests/playbooks/metastable_queue.yaml.j2 receive, as
    (seconds after it was sent, its body), and the world's metrics, one row per tick."""
    from orchestrator.hosting.inprocess import InProcessHost
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.engine.world import build_plan

    plan = build_plan(load_playbook(MQ, sets), None, seed)
    host, got, rows = InProcessHost(plan), [], []
    for t in range(plan.ticks):
        rows.append(host.step().metrics)
        for msg in host.pending["clients"]:  # delivered at tick t + 1
            if msg.kind == "flow_result":
                got.append(((t + 1 - msg.body["sent"]) * plan.info.dt, msg.body))
    return got, rows


@pytest.mark.parametrize("tick", ["1s", "0.25s"])
def test_a_queued_request_is_answered_once_its_wait_is_over(tick):
    """12 requests a second for a service doing 10: the queue grows to about 8 s of work
    (below its limit) and the timeout is 15 s. The answers reach the callers once the
    work queued ahead of them is done, not two ticks after they were sent. (A batch part
    of which is refused is answered at once, as the callers take one answer per batch.)"""
    got, _ = answers({"lam": 12, "tau": 15, "tick": tick, "duration": "45s", "service_time": "deterministic"})
    ok = [(elapsed, b["delay"]) for elapsed, b in got if b["r_ok"] and not b["r_rej"]]
    assert len(ok) > 20 and max(d for _, d in ok) > 6  # it did queue, below the limit
    assert all(elapsed >= d for elapsed, d in ok)  # nobody hears before the work is done


def test_the_share_of_a_ticks_arrivals_that_time_out_is_computed_within_the_tick():
    """Arrivals spread over the tick: with 46 units ahead at the tick's start, 18 arriving
    and 10 done per second, waits run from 4.6 s to 5.4 s, so about half of the tick's
    arrivals outwait a 5 s timeout (not all of them or none)."""
    from agents.work_queue import WorkQueue

    q = WorkQueue(limit_s=60)
    q.open(10.0, 1.0, 0)
    q.admit(56)
    q.serve(0)  # 46 units left at the start of the next tick
    q.open(10.0, 1.0, 1)
    n = q.admit(18)
    q.join({"requests": 18}, n, budget=5.0, good=1.0, due=100)
    answered = []
    for t in range(1, 12):
        if t > 1:
            q.open(10.0, 1.0, t)
        answered += q.serve(t)[1]
    (m,) = answered
    assert m.ok == pytest.approx(0.5, abs=0.1)


@pytest.mark.parametrize("tick", ["1s", "0.25s"])
def test_the_longest_wait_in_a_full_queue_is_its_limit(tick):
    """A queue of 10 s of work, kept full: work arriving waits the whole 10 s, within a
    request's work (it used to be 10 s less a tick, so a timeout equal to the limit never
    fired at 1 s ticks; the server idled before the first arrival, a fraction of a request)."""
    _, rows = answers({"lam": 30, "tau": 60, "tick": tick, "duration": "120s", "service_time": "deterministic"})
    assert max(r["server"]["queue_wait_s"] for r in rows) == pytest.approx(10.0, abs=0.1)


@pytest.mark.parametrize("tick", ["1s", pytest.param("0.25s", marks=pytest.mark.slow)])
def test_exponential_service_times_make_the_work_of_a_busy_tick_poisson(tick):
    """mu = 10/s kept busy: the work done per tick has mean and variance mu x dt with
    exponential service times, and no variance at all with deterministic ones."""
    dt = float(tick[:-1])
    for dist, var in (("exponential", 10 * dt), ("deterministic", 0.0)):
        _, rows = answers({"lam": 30, "tau": 60, "tick": tick, "duration": "2000s", "service_time": dist})
        done = np.array([r["server"]["work_done"] for r in rows[round(100 / dt):]])
        assert done.mean() == pytest.approx(10 * dt, rel=0.03)
        assert done.var() == pytest.approx(var, rel=0.1, abs=1e-9)
