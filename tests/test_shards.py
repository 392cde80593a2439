"""A population split into shards: the pieces add up to the population, the world still
sees one population, and a sharded world plays the same incident."""
import json

import pytest

import orchestrator
from agents import Message
from agents.shards import HealthReports, apply_to_shards, merge_metrics, shard_specs, split_clients
from orchestrator.errors import InvalidPlaybook
from orchestrator.runs.runner import RunSpec, prepare


def test_shards_split_the_clients_and_the_totals():
    assert split_clients(10, 3) == [4, 3, 3] and sum(split_clients(85000, 7)) == 85000
    parts = shard_specs({"name": "ev", "clients": 10, "max_rate": 100.0, "rate": 0.5}, 4)
    assert [p["name"] for p in parts] == ["ev#0", "ev#1", "ev#2", "ev#3"]
    assert sum(p["max_rate"] for p in parts) == pytest.approx(100.0) and all(p["rate"] == 0.5 for p in parts)
    out = apply_to_shards("surge", {"extra_setups_per_second": 100.0, "reconnect_fraction": 0.3},
                          [("p#0", 0.75), ("p#1", 0.25)])
    assert out == [("p#0", {"extra_setups_per_second": 75.0, "reconnect_fraction": 0.3}),
                   ("p#1", {"extra_setups_per_second": 25.0, "reconnect_fraction": 0.3})]


def test_merged_metrics_add_counts_and_recompute_ratios():
    a = {"ok": 90, "failed": 10, "errors": 5, "success_ratio": 0.9, "error_ratio": 5 / 95, "backlog": 3}
    b = {"ok": 0, "failed": 0, "errors": 0, "success_ratio": 1.0, "error_ratio": 0.0, "backlog": 4}
    m = merge_metrics([a, b])
    assert m["ok"] == 90 and m["backlog"] == 7
    assert m["success_ratio"] == 0.9 and m["error_ratio"] == pytest.approx(5 / 95)  # not the mean of 0.9 and 1.0
    assert merge_metrics([b, b])["success_ratio"] == 1.0


def test_a_dependent_sees_one_health_for_a_sharded_population():
    seen = {"svc": 1.0, "pop": 1.0}
    health = HealthReports(seen)
    for src, body in [("pop#0", {"ratio": 0.2, "ok": 20, "resolved": 100}), ("pop#1", {"ratio": 1.0, "ok": 0, "resolved": 0}),
                      ("svc", {"ratio": 0.5})]:
        health.take(Message("health", src, "me", body))
    health.merge()
    assert seen == {"svc": 0.5, "pop": 0.2}


def test_the_world_plan_wires_every_shard():
    _, _, _, plan = prepare(RunSpec(runbook="historical", duration=60, shards=3))
    names = [a.name for a in plan.agents]
    assert "control-plane" not in names and {"control-plane#0", "control-plane#1", "control-plane#2"} <= set(names)
    spec = {a.name: a.spec for a in plan.agents}
    # the services that depend on control-plane hear from every shard; the bridge knows every shard's connections
    assert all(spec[f"control-plane#{i}"]["_wiring"].health_subscribers == ("ec2-api", "api-gateway") for i in range(3))
    assert sum(spec["bridge"]["_wiring"].initial_connections[f"internal-clients#{i}"] for i in range(3)) == 85000
    assert ("internal-clients", "error_ratio") in plan.columns() and ("internal-clients#2", "error_ratio") in plan.columns()


def test_shards_out_of_range_are_refused():
    with pytest.raises(InvalidPlaybook, match="shards: got"):
        prepare(RunSpec(shards=0))


def test_a_sharded_world_plays_the_same_incident(run_2021, tmp_path):
    """Two shards per population against one, same seed: different random streams, so
    not identical, but the same incident: the loop forms, and protection breaks it at
    about the same time."""
    one = run_2021("protect-early-s5")
    two = orchestrator.run(runbook="protect-early", seed=5, duration="2h", shards=2, out=tmp_path / "run")
    assert two.meta["shards"]["internal-clients"] == 2
    m1, m2 = one.metrics, two.metrics
    for pop in ("internal-clients", "event-delivery"):  # merged columns are the sums of the shards'
        assert (m2[f"{pop}.clients"] == m2[f"{pop}#0.clients"] + m2[f"{pop}#1.clients"]).all()
        assert (m2[f"{pop}.ok"] == m2[f"{pop}#0.ok"] + m2[f"{pop}#1.ok"]).all()
    s1, s2 = one.score, two.score
    print(f"\nloop broken: 1 shard {s1['loop_broken'].get('clock')}, 2 shards {s2['loop_broken'].get('clock')}; "
          f"mean bridge utilisation {m1['bridge.utilisation'].mean():.3f} / {m2['bridge.utilisation'].mean():.3f}")
    # Seeds 5-8 break the loop between 07:49 and 08:07 with one shard, 07:53-08:03 with
    # two: the bounds are that spread, and would catch a shard that lost its wiring.
    assert s1["loop_formed"] and s2["loop_formed"]
    assert abs(s1["loop_broken"]["seconds_after_start"] - s2["loop_broken"]["seconds_after_start"]) < 900
    errors1, errors2 = (r.metrics["internal-clients.errors"].sum() for r in (one, two))
    assert 0.5 < errors2 / errors1 < 2
    assert json.loads((two.dir / "columns.json").read_text())["internal-clients.ok"]["kind"] == "population"
