"""The generic features the 2015 scenario needed, each against what it must do by
arithmetic: a readmission in steps lets back the stated share at the stated times; a
per-request population's surge is one more request from the stated share of its clients;
a population's health can be the share of its clients with nothing pending; deployment
steps that are requests to a service fail while its queue is longer than they allow."""
from __future__ import annotations

import math
from pathlib import Path

import yaml

import orchestrator

BASE = {
    "name": "primitives", "title": "generic features, one at a time",
    "clock": {"start": "00:00", "tick": "1s", "duration": "20m"},
    "services": [{"name": "api", "capacity": 1000}],
    "populations": [{"name": "clients", "clients": 1000, "rate": 1.0, "mode": "per_request", "target": "api",
                     "request": {"timeout": "5s"}, "retry": {"max_attempts": 1}}],
}


def play(tmp_path: Path, world: dict, rules: list | None = None, **kw):
    (tmp_path / "world.yaml.j2").write_text(yaml.safe_dump(world))
    book = tmp_path / "rules.yaml"
    book.write_text(yaml.safe_dump({"name": "rules", "rules": rules or []}))
    return orchestrator.run(str(tmp_path / "world.yaml.j2"), runbook=str(book), seed=3, **kw)


def at(r, clock: str, length: int = 60):
    """The metrics of the ``length`` seconds from ``clock`` on."""
    i = r.metrics.index[r.metrics["clock"] == clock][0]
    return r.metrics.iloc[i:i + length]


def test_a_readmission_lets_back_a_share_per_step(tmp_path):
    world = dict(BASE, mitigations=[
        {"name": "pause", "deploy": False, "effects": [{"target": "clients", "op": "scale_rate", "args": {"factor": 0.0}}]},
        {"name": "readmit", "deploy": False, "params": {"step": 0.25},
         "effects": [{"target": "clients", "op": "readmit", "args": {"step": "$step", "every": "2m"}}]}])
    r = play(tmp_path, world, [{"when": {"at": "00:02"}, "do": "pause"}, {"when": {"at": "00:04"}, "do": "readmit"}])
    nominal = 1000 * 1.0  # requests per second
    assert at(r, "00:03", 55)["clients.demand"].sum() == 0  # paused
    for clock, share in (("00:04:05", 0.25), ("00:06:05", 0.5), ("00:08:05", 0.75), ("00:10:05", 1.0), ("00:14", 1.0)):
        measured = at(r, clock, 110)["clients.demand"].mean()
        sd = math.sqrt(max(share * nominal, 1) / 110)  # Poisson: the mean of 110 one-second counts
        assert abs(measured - share * nominal) < 5 * sd + 1e-9, (clock, share, measured)
    steps = r.events[r.events["event"] == "readmitted"]
    assert list(steps["share"]) == [0.25, 0.5, 0.75, 1.0]
    # the first step as the action takes effect (a tick after the rule fires), then one every 2 minutes
    assert list(steps["clock"]) == ["00:04:02", "00:06:02", "00:08:02", "00:10:02"]


def test_a_per_request_surge_is_one_more_request_from_that_share_of_the_clients(tmp_path):
    world = dict(BASE, triggers=[{"name": "disruption", "at": "00:05", "effects": [
        {"target": "clients", "op": "surge", "args": {"reconnect_fraction": 0.4, "duration": "20s"}}]}])
    r = play(tmp_path, world)
    extra = at(r, "00:05:01", 20)["clients.demand"].sum() - 20 * 1000
    assert abs(extra - 400) < 5 * math.sqrt(20 * 1000 + 400)  # 0.4 x 1000 clients, over the Poisson noise
    assert abs(at(r, "00:06", 60)["clients.demand"].mean() - 1000) < 5 * math.sqrt(1000 / 60)  # and then as before


def test_a_durable_populations_health_can_be_its_clients_with_nothing_pending(tmp_path):
    """Servers that stay out of service while a fetch is pending: the service that depends
    on them fails the share of requests that meet one."""
    world = dict(BASE)
    world["services"] = [{"name": "store", "capacity": 10, "queue": {"limit": "10m"}},
                         {"name": "api", "depends_on": ["servers"], "fail_fast": True}]
    world["populations"] = BASE["populations"] + [
        {"name": "servers", "clients": 100, "rate": 0, "mode": "per_request", "work": "durable", "max_rate": 10000,
         "health": "clients_without_backlog", "target": "store", "request": {"timeout": "10m"}}]
    world["triggers"] = [{"name": "ask", "at": "00:05", "effects": [
        {"target": "servers", "op": "surge", "args": {"reconnect_fraction": 0.6, "duration": "1s"}}]}]
    r = play(tmp_path, world)
    m = r.metrics
    for clock in ("00:05:03", "00:05:04", "00:05:05"):
        row = m[m["clock"] == clock].iloc[0]
        pending = row["servers.backlog"]
        assert pending > 20  # 60 asked at once, the store answers 10 a second
        # api's answers this tick follow the health servers reported the tick before
        before = m[m.index == row.name - 1].iloc[0]
        expected_error = min(before["servers.backlog"], 100) / 100
        assert abs(row["clients.error_ratio"] - expected_error) < 5 * math.sqrt(0.25 / 1000) + 0.02
    assert m[m["clock"] >= "00:06:30"]["clients.error_ratio"].max() == 0  # all answered: all back


def test_deployment_steps_to_a_service_fail_while_its_queue_is_longer_than_they_allow(tmp_path):
    world = dict(BASE)
    world["services"] = [{"name": "api", "capacity": 100, "queue": {"limit": "2m"}}]
    world["populations"] = [dict(BASE["populations"][0], rate=0.2, retry={"backoff": "none", "max_attempts": 3})]
    world["deployment"] = {"target": "api", "timeout": "10s", "retry_delay": "30s", "step_time": "30s"}
    world["triggers"] = [{"name": "slow", "at": "00:01", "effects": [{"target": "api", "op": "scale_capacity",
                                                                     "args": {"factor": 0.1}}]}]
    world["mitigations"] = [{"name": "grow", "steps": 2, "effects": [{"target": "api", "op": "scale_capacity",
                                                                       "args": {"factor": 10.0}}]}]
    r = play(tmp_path, world, [{"when": {"at": "00:03"}, "do": "grow"}])
    assert at(r, "00:03")["api.queue_wait_s"].min() > 10  # 200 requests/s offered to 10/s: the queue is full
    effective = r.events[r.events["event"] == "action_effective"]
    assert effective.empty  # every step is a request that waits in that queue longer than the 10 s it allows
    assert r.metrics["deployment.step_failures"].sum() >= 30
