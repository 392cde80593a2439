"""Small worlds that exercise every feature and operation of the cohort client population
(``agents.population.Population`` and its kernels, ``agents.cohort_kernels``), and their
digests as recorded from the revision named in the fixture, so that a rewrite of the
population that is meant to keep its results bit for bit shows any change in its draws or
its arithmetic (``tests/test_population_features.py`` plays them and compares).

    PYTHONPATH=<a checkout of that revision> python tests/population_features.py tests/fixtures/population_features.json

records them again (a deliberate change of results is listed instead in the fixture's
``changed_since``, as ``results_fixture`` says; the runs are played by whatever ``orchestrator`` comes first on
PYTHONPATH; ``python -c "import agents; print(agents.__file__)"`` says which). The runs
are played and digested by ``results_fixture``'s ``play`` and ``digest``.

Each run lists the operations its triggers (or its runbook) apply (``APPLIED``: the test
checks that each was applied, with the arguments that matter, and none rejected), and the
test checks in its metrics that what each run is about happened (a breaker that opened, a
budget that dropped retries, connections broken by a device, ...). What covers what:

- pooled, perishable: "breaker, full table, restart", "perishable hot-fixes, dependency",
  "no path, no target", "shards, ...", "attribution"; per_request, perishable: "budget, ...";
  durable with max_rate, pooled and per_request: "durable dispatch, ..."; durable
  per_request, health ``clients_without_backlog``: "durable budget, breaker, health of clients"
- surge, pooled (reconnect_fraction, extra_setups_per_second): "breaker, ...", "shards, ...",
  "no path, ...", "attribution"; per_request: "budget, ..."
- retry.budget and set_retry_budget (removed, set): "budget, ..." (perishable),
  "durable budget, ..." (durable work waits for tokens)
- retry.circuit_breaker (opens, half-opens) and set_circuit_breaker (off, on): "breaker, ...";
  a breaker on durable work: "durable budget, ..."
- scale_rate, readmit, scale_dispatch, drop_backlog: "durable dispatch, ..." (durable),
  "perishable hot-fixes, ..." (perishable)
- set_mode both ways (with over): "durable dispatch, ...", "perishable hot-fixes, ...",
  "no path, ..."; set_path with a new target: "durable dispatch, ..."; set_work both ways:
  "durable dispatch, ..."
- set_retry_policy (backoff, jitter, max_attempts), set_reconnect_policy, set_connection
  (reconnect_on, lifetime, timeout), set_request_timeout: "perishable hot-fixes, ...",
  "budget, ..."
- bugs.reconnect_ignores_backoff and set_bug off and on: "breaker, ...", "attribution"
- reconnect_on timeout and reject, a connection table that overflows, a device restart
  (conn_event): "breaker, ...", "shards, ..."; refusals by a full queue (r_full): "budget, ..."
- depends_on a service whose health falls: "perishable hot-fixes, ..."; on a population:
  "durable budget, ..."; neither path nor target: "no path, no target"
- jitter full: most; equal: "budget, ...", "perishable hot-fixes, ..." (reconnect);
  decorrelated: "shards, ...", "perishable hot-fixes, ..."; none: "perishable hot-fixes, ..."
- 0.5 s ticks and shards: "shards, ..."; attribution (counterfactuals played from
  snapshots of the population): "attribution"
"""
from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import results_fixture

HERE = Path(__file__).resolve().parent
PLAYBOOKS = HERE / "playbooks"


def _at(clock: str, part: str, op: str, **args) -> dict:
    """A trigger that applies one operation to ``part`` at ``clock`` (named after both, for the journal)."""
    return {"name": f"{op}-{clock.replace(':', '')}-{part}", "at": clock,
            "effects": [{"target": part, "op": op, "args": args}]}


def _bridge(name: str = "bridge", count: int = 2, cpu: float = 20000, table: float = 1_000_000) -> dict:
    return {"name": name, "count": count, "cpu_per_device": cpu, "costs": {"setup": 20, "request": 1, "reject": 0.5},
            "conntrack": {"capacity_per_device": table, "half_open_timeout": "10s"},
            "queue": {"buffer": "5s", "base_latency": 0.002}}


def _breaker_world() -> dict:
    """Pooled perishable clients behind a device pool whose connection table is nearly full:
    a surge's setups overflow it (the devices refuse them); the target's faults (timeouts,
    then errors) open the playbook's circuit breaker, which half-opens; then it is removed
    and put back with other settings by set_circuit_breaker. The clients reconnect on
    timeouts and on refusals, with the latent back-off bug on, off and on again; at the
    end the devices restart and drop every connection (conn_event)."""
    return {
        "name": "pop-breaker", "title": "a circuit breaker, a full connection table, a restart",
        "clock": {"start": "00:00", "tick": "1s", "duration": "15m"},
        "devices": [_bridge(table=540)],
        "services": [{"name": "api"}],
        "populations": [{
            "name": "clients", "clients": 1000, "rate": 1.0, "mode": "pooled", "path": ["bridge"], "target": "api",
            "connection": {"lifetime": "5m", "timeout": "2s", "reconnect_on": ["timeout", "reject"],
                           "reconnect": {"backoff": "exponential", "base": 1, "multiplier": 2, "cap": 30,
                                         "jitter": "full"}},
            "request": {"timeout": "2s"},
            "retry": {"backoff": "exponential", "base": 0.5, "multiplier": 2, "cap": 8, "jitter": "full",
                      "max_attempts": 4,
                      "circuit_breaker": {"threshold": 0.5, "window": "10s", "open_for": "20s",
                                          "probe_fraction": 0.2}},
            "bugs": {"reconnect_ignores_backoff": True, "reconnect_delay": "3s"},
        }],
        "triggers": [
            _at("00:02", "clients", "surge", reconnect_fraction=0.6, extra_setups_per_second=400.0, duration=60.0),
            _at("00:04", "api", "fault", share=0.9, kind="timeout", duration=90.0),
            _at("00:06", "clients", "set_bug", enabled=False),
            _at("00:07", "clients", "set_circuit_breaker", enabled=False),
            _at("00:07:30", "api", "fault", share=0.9, kind="error", duration=60.0),
            _at("00:09", "clients", "set_circuit_breaker", enabled=True, threshold=0.3, window=5.0, open_for=15.0,
                probe_fraction=0.3),
            _at("00:09:30", "api", "fault", share=0.7, kind="error", duration=60.0),
            _at("00:11", "clients", "set_bug", enabled=True),
            _at("00:12", "bridge", "restart", duration=5.0),
        ],
    }


def _budget_world() -> dict:
    """Per-request perishable clients with unlimited attempts and a retry budget, against a
    service with a queue: a fault's errors are retried within the budget, the rest fail for
    good; set_retry_budget removes the budget (no errors under the same fault) and puts a
    smaller one back. A per-request surge; then retries at once with bounded attempts
    against a queue too small for the load: refusals by a full queue (r_full) whose every
    further attempt is refused at once."""
    return {
        "name": "pop-budget", "title": "a retry budget, a per-request surge, a full queue",
        "clock": {"start": "00:00", "tick": "1s", "duration": "15m"},
        "services": [{"name": "api", "capacity": 1500, "queue": {"limit": "2s"}}],
        "populations": [{
            "name": "clients", "clients": 1000, "rate": 1.0, "mode": "per_request", "target": "api",
            "request": {"timeout": "2s"},
            "retry": {"backoff": "exponential", "base": 1, "multiplier": 2, "cap": 16, "jitter": "equal",
                      "max_attempts": 0, "budget": {"ratio": 0.1, "capacity": 20}},
        }],
        "triggers": [
            _at("00:02", "api", "fault", share=0.6, kind="error", duration=120.0),
            _at("00:05", "clients", "set_retry_budget", ratio=None),
            _at("00:05:30", "api", "fault", share=0.6, kind="error", duration=60.0),
            _at("00:08", "clients", "set_retry_budget", ratio=0.05, capacity=5.0),
            _at("00:08:30", "api", "fault", share=0.6, kind="error", duration=60.0),
            _at("00:10", "clients", "surge", reconnect_fraction=0.5, extra_setups_per_second=200.0, duration=30.0),
            {"name": "retry-at-once", "at": "00:11", "effects": [
                {"target": "clients", "op": "set_retry_budget", "args": {"ratio": None}},
                {"target": "clients", "op": "set_retry_policy", "args": {"backoff": "none", "max_attempts": 3}}]},
            _at("00:11:30", "api", "scale_capacity", factor=0.3),
            _at("00:13", "api", "scale_capacity", factor=1.0),
        ],
    }


def _durable_world() -> dict:
    """Durable pooled work with a dispatch rate: paused, readmitted in steps, a fault's
    retries, half of the backlog dropped, moved to another path and target (breaking the
    connections), fresh requests throttled, switched to per-request flows and back to
    pooled connections (opened over a minute), made perishable (its waiting work sent at
    once) and durable again with another rate, then throttled."""
    return {
        "name": "pop-durable", "title": "durable work: dispatch, backlog, path, mode and work changes",
        "clock": {"start": "00:00", "tick": "1s", "duration": "18m"},
        "devices": [_bridge(), _bridge("bridge2")],
        "services": [{"name": "api", "capacity": 2000}, {"name": "api2", "capacity": 2000}],
        "populations": [{
            "name": "events", "clients": 500, "rate": 2.0, "mode": "pooled", "work": "durable", "max_rate": 1200,
            "path": ["bridge"], "target": "api",
            "connection": {"lifetime": "10m", "timeout": "2s"},
            "request": {"timeout": "2s"},
            "retry": {"backoff": "exponential", "base": 1, "multiplier": 2, "cap": 10, "jitter": "full",
                      "max_attempts": 3},
        }],
        "triggers": [
            _at("00:02", "events", "scale_dispatch", factor=0.0),
            _at("00:03", "events", "readmit", step=0.25, every=30.0),
            _at("00:05", "api", "fault", share=0.5, kind="error", duration=60.0),
            _at("00:05:30", "events", "drop_backlog", fraction=0.5),
            _at("00:07", "events", "set_path", path=["bridge2"], target="api2"),
            _at("00:08", "events", "scale_rate", factor=0.5),
            _at("00:09", "events", "scale_rate", factor=1.0),
            _at("00:10", "events", "set_mode", mode="per_request"),
            _at("00:11", "api2", "fault", share=0.3, kind="timeout", duration=30.0),
            _at("00:12", "events", "set_mode", mode="pooled", over=60.0),
            _at("00:13:50", "events", "scale_dispatch", factor=0.0),
            _at("00:14", "events", "set_work", work="perishable"),
            _at("00:15", "api2", "fault", share=0.5, kind="error", duration=30.0),
            _at("00:16", "events", "set_work", work="durable", max_rate=800.0),
            _at("00:17", "events", "scale_dispatch", factor=0.5),
        ],
    }


def _perishable_world() -> dict:
    """Pooled perishable clients that depend on a service whose health falls: hot-fixes of
    the connection (reconnect on refusals only, so that a timeout's retries wait in the
    wheel drop_backlog thins; lifetime; timeout), of the reconnect and retry policies
    (back-off, jitter none, equal and decorrelated, max_attempts) and of the request
    timeout; a fault's retries dropped; fresh requests throttled and readmitted in steps;
    per-request flows (while a fault's retries wait for their clients' connections) and back
    to pooled connections."""
    return {
        "name": "pop-perishable", "title": "perishable work: hot-fixes, dependency, readmission, mode changes",
        "clock": {"start": "00:00", "tick": "1s", "duration": "15m"},
        "devices": [_bridge()],
        "services": [{"name": "api"}, {"name": "auth"}],
        "populations": [{
            "name": "clients", "clients": 1000, "rate": 1.0, "mode": "pooled", "path": ["bridge"], "target": "api",
            "depends_on": ["auth"],
            "connection": {"lifetime": "10m", "timeout": "2s", "reconnect_on": ["timeout"],
                           "reconnect": {"backoff": "exponential", "base": 1, "multiplier": 2, "cap": 20,
                                         "jitter": "full"}},
            "request": {"timeout": "2s"},
            "retry": {"backoff": "exponential", "base": 2, "multiplier": 2, "cap": 30, "jitter": "none",
                      "max_attempts": 5},
        }],
        "triggers": [
            _at("00:01", "clients", "set_connection", reconnect_on=["reject"], lifetime=60.0, timeout=1.0),
            _at("00:02", "clients", "set_reconnect_policy", backoff="constant", base=2.0, jitter="equal",
                max_attempts=3),
            _at("00:03", "auth", "fault", share=0.6, kind="error", duration=60.0),
            _at("00:05", "api", "fault", share=0.8, kind="timeout", duration=40.0),
            _at("00:05:20", "clients", "drop_backlog", fraction=1.0),
            _at("00:06", "clients", "set_retry_policy", backoff="exponential", base=0.5, multiplier=3.0, cap=20.0,
                jitter="decorrelated", max_attempts=2),
            _at("00:06:30", "api", "fault", share=0.5, kind="error", duration=30.0),
            _at("00:07", "clients", "set_request_timeout", seconds=1.0),
            _at("00:08", "clients", "scale_rate", factor=0.2),
            _at("00:09", "clients", "readmit", step=0.2, every=20.0),
            _at("00:10:40", "api", "fault", share=0.5, kind="error", duration=50.0),
            _at("00:11", "clients", "set_mode", mode="per_request"),
            _at("00:13", "clients", "set_mode", mode="pooled", over=30.0),
        ],
    }


def _health_world() -> dict:
    """Durable per-request work whose health is its clients without a backlog, with a
    retry budget it waits for, a circuit breaker and a dispatch rate that is not a whole
    number of requests a tick; another population depends on it. Its store fails for a
    while: the backlog grows, the breaker opens, retries wait for tokens, and the
    dependent fails locally; the budget is changed and the dispatch throttled meanwhile."""
    return {
        "name": "pop-health", "title": "durable work: budget, breaker, health of its clients",
        "clock": {"start": "00:00", "tick": "1s", "duration": "12m"},
        "services": [{"name": "store", "capacity": 2000}, {"name": "dash"}],
        "populations": [
            {"name": "fetchers", "clients": 2000, "rate": 0.1, "mode": "per_request", "work": "durable",
             "max_rate": 333.3, "target": "store", "health": "clients_without_backlog",
             "request": {"timeout": "2s"},
             "retry": {"backoff": "exponential", "base": 1, "multiplier": 2, "cap": 16, "jitter": "full",
                       "budget": {"ratio": 0.2, "capacity": 30},
                       "circuit_breaker": {"threshold": 0.6, "window": "5s", "open_for": "15s",
                                           "probe_fraction": 0.25}}},
            {"name": "users", "clients": 500, "rate": 1.0, "mode": "per_request", "target": "dash",
             "depends_on": ["fetchers"], "request": {"timeout": "2s"},
             "retry": {"backoff": "exponential", "base": 1, "cap": 8, "jitter": "full", "max_attempts": 3}},
        ],
        "triggers": [
            _at("00:02", "store", "fault", share=0.8, kind="error", duration=90.0),
            _at("00:03", "fetchers", "set_retry_budget", ratio=0.05, capacity=10.0),
            _at("00:05", "fetchers", "scale_dispatch", factor=0.6),
            _at("00:06", "store", "fault", share=0.5, kind="timeout", duration=60.0),
            _at("00:08", "fetchers", "scale_dispatch", factor=1.0),
            _at("00:08", "fetchers", "set_retry_budget", ratio=None),
        ],
    }


def _nowhere_world() -> dict:
    """A population with neither path nor target: every request is answered at once."""
    return {
        "name": "pop-nowhere", "title": "no path, no target",
        "clock": {"start": "00:00", "tick": "1s", "duration": "5m"},
        "populations": [{"name": "clients", "clients": 300, "rate": 1.0, "mode": "pooled",
                         "connection": {"lifetime": "1m"}}],
        "triggers": [
            _at("00:00:30", "clients", "set_mode", mode="pooled"),  # pooled already: nothing to do
            _at("00:01", "clients", "surge", reconnect_fraction=0.5, extra_setups_per_second=50.0, duration=30.0),
            _at("00:02", "clients", "scale_rate", factor=0.5),
            _at("00:03", "clients", "set_mode", mode="per_request"),
            _at("00:04", "clients", "set_mode", mode="pooled", over=20.0),
        ],
    }


def _sharded_world() -> dict:
    """A population in two shards (orchestrator.run's ``shards``; the playbook's ``shards: 2``
    gives the same run directory) at half-second ticks, with decorrelated jitter (Brooker)
    on retries and reconnections: a surge whose extra setups are split between the shards,
    a fault, and devices that restart and drop every shard's connections."""
    return {
        "name": "pop-shards", "title": "a sharded population at 0.5 s ticks",
        "clock": {"start": "00:00", "tick": "0.5s", "duration": "10m"},
        "devices": [_bridge(table=600)],
        "services": [{"name": "api"}],
        "populations": [{
            "name": "clients", "clients": 1000, "rate": 1.0, "mode": "pooled", "path": ["bridge"], "target": "api",
            "connection": {"lifetime": "5m", "timeout": "2s", "reconnect_on": ["timeout"],
                           "reconnect": {"backoff": "exponential", "base": 1, "cap": 30, "jitter": "decorrelated"}},
            "request": {"timeout": "2s"},
            "retry": {"backoff": "exponential", "base": 0.5, "cap": 10, "jitter": "decorrelated", "max_attempts": 0},
        }],
        "triggers": [
            _at("00:02", "clients", "surge", reconnect_fraction=0.5, extra_setups_per_second=300.0, duration=30.0),
            _at("00:04", "api", "fault", share=0.7, kind="timeout", duration=60.0),
            _at("00:07", "bridge", "restart", duration=5.0),
        ],
    }


#: name -> orchestrator.run's arguments (a dict playbook is written to a file first)
RUNS: dict[str, dict] = {
    "breaker, full table, restart": {"playbook": _breaker_world()},
    "budget, per-request surge, full queue": {"playbook": _budget_world()},
    "durable dispatch, path, mode and work": {"playbook": _durable_world()},
    "perishable hot-fixes, dependency": {"playbook": _perishable_world()},
    "durable budget, breaker, health of clients": {"playbook": _health_world()},
    "no path, no target": {"playbook": _nowhere_world()},
    "shards, decorrelated jitter, 0.5 s ticks": {"playbook": _sharded_world(), "shards": 2},
    "attribution": {"playbook": str(PLAYBOOKS / "mini_loop.yaml.j2"), "runbook": str(PLAYBOOKS / "fix_early.yaml"),
                    "duration": "12m", "attribution": True},
}

#: run -> the operations it must show applied: events.jsonl holds an ``applied`` event of
#: each (on the part named before the dot) whose arguments include those given, and no
#: ``apply_rejected`` at all
APPLIED: dict[str, list[tuple[str, dict]]] = {
    "breaker, full table, restart": [
        ("clients.surge", {"reconnect_fraction": 0.6, "extra_setups_per_second": 400.0}),
        ("api.fault", {"kind": "timeout"}), ("api.fault", {"kind": "error"}),
        ("clients.set_bug", {"enabled": False}), ("clients.set_bug", {"enabled": True}),
        ("clients.set_circuit_breaker", {"enabled": False}), ("clients.set_circuit_breaker", {"enabled": True}),
        ("bridge.restart", {})],
    "budget, per-request surge, full queue": [
        ("api.fault", {"kind": "error"}), ("clients.set_retry_budget", {"ratio": None}),
        ("clients.set_retry_budget", {"ratio": 0.05, "capacity": 5.0}),
        ("clients.surge", {"reconnect_fraction": 0.5, "extra_setups_per_second": 200.0}),
        ("clients.set_retry_policy", {"backoff": "none", "max_attempts": 3}),
        ("api.scale_capacity", {"factor": 0.3}), ("api.scale_capacity", {"factor": 1.0})],
    "durable dispatch, path, mode and work": [
        ("events.scale_dispatch", {"factor": 0.0}), ("events.scale_dispatch", {"factor": 0.5}),
        ("events.readmit", {}), ("api.fault", {}), ("events.drop_backlog", {"fraction": 0.5}),
        ("events.set_path", {"path": ["bridge2"], "target": "api2"}), ("events.scale_rate", {"factor": 0.5}),
        ("events.scale_rate", {"factor": 1.0}), ("events.set_mode", {"mode": "per_request"}),
        ("events.set_mode", {"mode": "pooled", "over": 60.0}), ("api2.fault", {"kind": "timeout"}),
        ("api2.fault", {"kind": "error"}), ("events.set_work", {"work": "perishable"}),
        ("events.set_work", {"work": "durable", "max_rate": 800.0})],
    "perishable hot-fixes, dependency": [
        ("clients.set_connection", {"reconnect_on": ["reject"], "lifetime": 60.0, "timeout": 1.0}),
        ("clients.set_reconnect_policy", {"backoff": "constant", "jitter": "equal", "max_attempts": 3}),
        ("auth.fault", {}), ("api.fault", {"kind": "timeout"}), ("api.fault", {"kind": "error"}),
        ("clients.drop_backlog", {"fraction": 1.0}),
        ("clients.set_retry_policy", {"jitter": "decorrelated", "multiplier": 3.0, "max_attempts": 2}),
        ("clients.set_request_timeout", {"seconds": 1.0}), ("clients.scale_rate", {"factor": 0.2}),
        ("clients.readmit", {"step": 0.2}), ("clients.set_mode", {"mode": "per_request"}),
        ("clients.set_mode", {"mode": "pooled", "over": 30.0})],
    "durable budget, breaker, health of clients": [
        ("store.fault", {"kind": "error"}), ("store.fault", {"kind": "timeout"}),
        ("fetchers.set_retry_budget", {"ratio": 0.05}), ("fetchers.set_retry_budget", {"ratio": None}),
        ("fetchers.scale_dispatch", {"factor": 0.6}), ("fetchers.scale_dispatch", {"factor": 1.0})],
    "no path, no target": [
        ("clients.set_mode", {"mode": "pooled"}), ("clients.surge", {}), ("clients.scale_rate", {"factor": 0.5}),
        ("clients.set_mode", {"mode": "per_request"}), ("clients.set_mode", {"mode": "pooled", "over": 20.0})],
    "shards, decorrelated jitter, 0.5 s ticks": [
        # a sharded population's surge: each shard gets its share of the extra setups
        ("clients#0.surge", {"extra_setups_per_second": 150.0}),
        ("clients#1.surge", {"extra_setups_per_second": 150.0}),
        ("api.fault", {}), ("bridge.restart", {})],
    "attribution": [("clients.surge", {}), ("clients.set_bug", {"enabled": False})],
}

#: the runs the fast test subset plays (the others are marked slow)
FAST = ("breaker, full table, restart", "budget, per-request surge, full queue",
        "durable dispatch, path, mode and work", "perishable hot-fixes, dependency",
        "durable budget, breaker, health of clients", "no path, no target")


def play(name: str, out: Path):
    """Play run ``name`` into the new directory ``out`` (with ``results_fixture.play``)."""
    with mock.patch.dict(results_fixture.RUNS, {name: RUNS[name]}):
        return results_fixture.play(name, out)


if __name__ == "__main__":
    results_fixture.record(Path(sys.argv[1]), RUNS, play)
