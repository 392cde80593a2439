"""The world's own automation that reacts to it (#42): controllers (an autoscaler, rules in
the runbook grammar) and triggers on a condition, from the format to a world where an
autoscaler re-forms the loop."""
from __future__ import annotations

import copy

import pytest

import orchestrator
from agents.base import Message
from orchestrator.errors import InvalidPlaybook
from orchestrator.engine.world import build_plan
from orchestrator.hosting.inprocess import build_agent
from orchestrator.playbook.loader import load_playbook

from helpers import playbook_path, play

FLOOD = playbook_path("autoscaler_flood")


def _autoscaler(**changes):
    """The autoscaler_flood world's controller, built alone, with ``changes`` to its autoscaler."""
    pb = load_playbook(FLOOD)
    plan = build_plan(pb, None, seed=1)
    spec = copy.deepcopy(next(a for a in plan.agents if a.kind == "controller").spec)
    spec["autoscaler"].update(changes)
    return build_agent("controller", spec["name"], spec, plan.info)


def _seen(tick: int, offered: float) -> Message:
    return Message("observed", "monitoring", "web-autoscaler", {"view": {"web.offered": [offered, 0.0]}, "alarms": []},
                   0, tick)


def _step(c, tick, *msgs):
    res = c.step(tick, list(msgs))
    return res, {e["event"]: e for e in res.events}


def test_the_autoscaler_tracks_its_target_after_its_readings_have_asked_long_enough():
    c = _autoscaler(scale_out_after=30, lead_time=60)
    # 4000 requests/s at 40 per instance: 100 wanted, 40 serving
    for t in range(30):
        res, ev = _step(c, t, _seen(t, 4000.0))
        assert "scale_out" not in ev and not [m for m in res.messages if m.kind == "flow"]  # (not before 30 s)
    res, ev = _step(c, 30, _seen(30, 4000.0))
    assert ev["scale_out"]["instances"] == 60 and ev["scale_out"]["desired"] == 100
    flow = next(m for m in res.messages if m.kind == "flow")
    assert flow.dst == "network" and flow.body["hops"] == ["provisioning"] and flow.body["requests"] == 60
    assert res.metrics["instances_waiting"] == 60
    # the provisioning service answers 10 of them in time: those boot, the 50 others are asked again
    answer = Message("flow_result", "provisioning", c.name, {"sent": 30, "r_ok": 10}, 0, 32)
    res, _ = _step(c, 32, answer, _seen(32, 4000.0))
    assert res.metrics["provision_failures"] == 50 and res.metrics["instances_booting"] == 10
    res, _ = _step(c, 62, _seen(62, 4000.0))  # 30 s later (retry_delay)
    assert res.metrics["provision_requests"] == 50
    res, ev = _step(c, 92, _seen(92, 4000.0))  # lead time over: the 10 serve
    assert ev["instances_in_service"]["running"] == 50
    apply = next(m for m in res.messages if m.kind == "apply")
    assert apply.dst == "web" and apply.body["op"] == "scale_capacity" and apply.body["args"]["factor"] == 50 / 40


def test_the_autoscaler_withdraws_what_it_has_not_asked_yet_before_it_stops_instances_and_ignores_stale_readings():
    c = _autoscaler(scale_out_after=0, scale_in_after=0, scale_in_cooldown=0, scale_out_cooldown=0)
    c.scaler.hops = []  # (instances come at once, after their lead time)
    _, ev = _step(c, 0, _seen(0, 2400.0))
    assert ev["scale_out"]["instances"] == 20
    _, ev = _step(c, 1, _seen(1, 400.0))  # 10 wanted now: the 20 booting are not withdrawn (asked), 30 stop
    assert ev["scale_in"]["instances"] == 30 and ev["scale_in"]["withdrawn"] == 0
    assert ev["instances_stopped"]["running"] == 10
    stale = Message("observed", "monitoring", c.name, {"view": {"web.offered": [9000.0, 400.0]}, "alarms": []}, 0, 2)
    res, ev = _step(c, 2, stale)  # older than max_age (180 s): no reading, nothing changes
    assert "scale_out" not in ev and res.metrics["instances"] == 10


def test_an_operator_switches_a_controller_off_and_changes_its_autoscaler_as_actions(tmp_path):
    c = _autoscaler(scale_out_after=0, scale_out_cooldown=0)
    c.step(0, [Message("apply", "deployment", c.name, {"op": "set_autoscaler", "args": {"max": 50}, "by": "op"}, 0, 0)])
    _, ev = _step(c, 1, _seen(1, 8000.0))
    assert ev["scale_out"]["desired"] == 50  # (200 wanted, at most 50 now)
    c.step(2, [Message("apply", "deployment", c.name, {"op": "disable", "args": {}, "by": "op"}, 0, 2)])
    res, ev = _step(c, 3, _seen(3, 8000.0))
    assert res.metrics["enabled"] == 0 and "scale_out" not in ev
    rejected = c.step(4, [Message("apply", "deployment", c.name, {"op": "set_autoscaler", "args": {"target": 0},
                                                                   "by": "op"}, 0, 4)])
    assert rejected.events[0]["event"] == "apply_rejected" and "target 0" in rejected.events[0]["reason"]


def _small_world(**extra) -> dict:
    """One service, one population whose rate a clock trigger doubles at 00:05."""
    world = {
        "name": "small", "title": "small", "clock": {"start": "00:00", "tick": "1s", "duration": "15m"},
        "services": [{"name": "web", "capacity": 1500}],
        "populations": [{"name": "users", "clients": 1000, "rate": 1.0, "mode": "per_request", "target": "web",
                         "request": {"timeout": "2s"}, "retry": {"max_attempts": 2}}],
        "monitoring": {"path": [], "observe": ["web.utilisation"], "publish_every": "10s", "telemetry_every": "10s"},
        "triggers": [{"name": "rush", "at": "00:05", "effects": [{"target": "users", "op": "scale_rate",
                                                                  "args": {"factor": 2}}]}],
        "mitigations": [{"name": "add_web", "deploy": False, "effects": [{"target": "web", "op": "scale_capacity",
                                                                          "args": {"factor": 2}}]}],
        "scoring": {"impact": {"users": 1}},
    }
    for k, v in extra.items():
        world[k] = world.get(k, []) + v if isinstance(v, list) else v
    return world


def test_a_trigger_fires_when_its_condition_holds_on_what_monitoring_delivers(tmp_path):
    alarmed = {"name": "overload-runbook", "when": {"metric": "web.utilisation", "above": 0.95, "for": "1m"},
               "effects": [{"target": "web", "op": "scale_capacity", "args": {"factor": 2}}]}
    r = play(tmp_path, _small_world(triggers=[alarmed]))
    fired = r.events[r.events["event"] == "trigger"]
    assert list(fired["trigger"]) == ["rush", "overload-runbook"]  # once: it does not repeat
    rush, overload = fired["tick"].tolist()
    assert rush + 60 <= overload <= rush + 60 + 30  # a minute of readings above, read every 10 s
    assert r.metrics["web.utilisation"].iloc[overload + 5:].max() < 0.9  # and it took effect


def test_a_controllers_rules_act_through_the_deployment_tooling_and_its_actions_are_not_the_teams(tmp_path):
    ctl = {"name": "capacity-bot", "rules": [{"when": {"metric": "web.utilisation", "above": 0.95, "for": "1m"},
                                              "do": "add_web"}]}
    r = play(tmp_path, _small_world(controllers=[ctl]))
    asked = r.events[r.events["event"] == "action_requested"]
    assert list(asked["agent"]) == ["capacity-bot"]
    effective = r.events[r.events["event"] == "action_effective"]
    assert list(effective["by"]) == ["capacity-bot"]
    assert r.score["actions_taken"] == 0 and "first_action_effective" not in r.score  # the team did nothing


@pytest.mark.parametrize("change, location, expected", [
    (lambda w: w["triggers"][0].update({"when": {"alarm": "x"}}), "triggers[0]", "exactly one of at"),
    (lambda w: w["triggers"].append({"name": "t", "when": {"done": "add_web"}, "effects": []}),
     "triggers[1].when", "a condition a trigger can read"),
    (lambda w: w.update(controllers=[{"name": "idle"}]), "controllers[0]", "an autoscaler, some rules, or both"),
    (lambda w: w.update(controllers=[{"name": "as", "autoscaler": {"service": "wbe", "instances": 4,
                                                                    "metric": "web.utilisation", "target": 0.5,
                                                                    "max": 10}}]),
     "controllers[0].autoscaler.service", "a service (web"),
    (lambda w: w.update(controllers=[{"name": "as", "autoscaler": {"service": "web", "instances": 4,
                                                                    "metric": "web.offered", "target": 0.5,
                                                                    "min": 20, "max": 10}}]),
     "controllers[0].autoscaler.metric", "a metric the playbook's monitoring observes"),
    (lambda w: w.update(controllers=[{"name": "bot", "rules": [{"when": {"alarm": "none"}, "do": "add_wbe"}]}]),
     "controllers[0].rules[0].do.action", "a mitigation of small (add_web"),
    (lambda w: w["mitigations"][0]["effects"].append({"target": "bot", "op": "disable"}), "mitigations[0].effects[1].target",
     "a part of the world"),
])
def test_a_controller_or_condition_trigger_that_cannot_work_is_an_error_naming_its_field(tmp_path, change, location,
                                                                                      expected):
    world = _small_world()
    change(world)
    with pytest.raises(InvalidPlaybook) as e:
        play(tmp_path, world)
    found = [i for i in e.value.issues if i.location == location]
    assert found and expected in found[0].expected, e.value.issues


def _loop_broken(r) -> float | None:
    """Seconds after the start the loop holds broken from; None: it never did."""
    return r.score["loop_broken"]["seconds_after_start"] if r.score["loop_broken"]["reached"] else None


@pytest.mark.slow
def test_an_autoscaler_scales_in_behind_packet_loss_floods_its_control_plane_and_re_forms_the_loop(tmp_path):
    def run(name, **sets):
        return orchestrator.run(FLOOD, runbook="none", sets=sets, out=tmp_path / name, duration="50m")

    scaled = run("scaled")
    fixed = run("fixed", autoscaler=False)
    ev = scaled.events
    clock = dict(zip(scaled.metrics.index, scaled.metrics["clock"]))
    # behind the loss (10:10 to 10:30) the tier looked idle: it was scaled in to a few instances
    scale_in = ev[(ev["event"] == "scale_in") & (ev["instances"] > 0)].iloc[0]
    assert "10:10" <= clock[scale_in["tick"]] < "10:30" and scale_in["running"] - scale_in["instances"] <= 10
    # once the loss lifted, the retries it met made it ask for a flood of instances at once
    out = ev[(ev["event"] == "scale_out") & (ev["tick"] >= scale_in["tick"])].iloc[0]
    assert out["instances"] >= 25
    m = scaled.metrics
    assert m["web-autoscaler.provision_failures"].sum() > m["provisioning.goodput"].sum()  # most of it failed
    # with a fixed tier the loop breaks minutes after the loss lifts; with the autoscaler, minutes later still
    assert _loop_broken(fixed) is not None and _loop_broken(scaled) is not None
    assert _loop_broken(scaled) - _loop_broken(fixed) >= 240
    # a sweep of the network's capacity moves when it breaks: too small and it never does
    broken = {n: _loop_broken(run(f"n{n}", network_devices=n)) for n in (4, 5, 16)}
    assert broken[4] is None and broken[5] > broken[16]


def _chain() -> dict:
    """An app whose requests go on to a database (then), and which depends on an auth service."""
    return {"name": "chain", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "10m"},
            "services": [{"name": "app", "capacity": 5000, "then": "db", "depends_on": ["auth"]},
                         {"name": "db", "capacity": 5000}, {"name": "auth", "capacity": 5000},
                         {"name": "other", "capacity": 5000, "then": "db"}],
            "populations": [{"name": "users", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "app",
                             "request": {"timeout": "2s"}, "retry": {"max_attempts": 1}},
                            {"name": "batch", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "other",
                             "request": {"timeout": "2s"}, "retry": {"max_attempts": 1}}],
            "triggers": [{"name": "policy", "at": "00:02", "effects": [
                             {"target": "app", "op": "cut_edge", "args": {"to": "db", "kind": "timeout"}}]},
                         {"name": "policy-fixed", "at": "00:04", "effects": [
                             {"target": "app", "op": "cut_edge", "args": {"to": "db", "kind": "none"}}]},
                         {"name": "auth-firewall", "at": "00:06", "effects": [
                             {"target": "app", "op": "cut_edge", "args": {"to": "auth", "kind": "error"}}]}],
            "scoring": {"impact": {"users": 1}}}


def test_cutting_one_edge_between_two_services_fails_its_callers_and_no_one_else(tmp_path):
    """#42: stopping the traffic between two services only was written as setting the users'
    rate to 0. cut_edge cuts one edge (then or depends_on) and restores it, its callers
    seeing timeouts or refusals as said; the same callee's other callers are untouched."""
    r = play(tmp_path, _chain())
    m = r.metrics.set_index("clock")
    cut, fixed, firewalled = m.loc["00:02:10":"00:03:50"], m.loc["00:04:10":"00:05:50"], m.loc["00:06:10":"00:09:50"]
    assert cut["users.ok"].sum() == 0 and cut["users.failed"].sum() > 0 and cut["db.offered"].sum() > 0  # (batch's)
    assert (cut["batch.success_ratio"] == 1).all() and (fixed["users.success_ratio"] == 1).all()
    assert firewalled["users.ok"].sum() == 0 and (firewalled["batch.success_ratio"] == 1).all()
    # a timeout keeps its callers waiting their 2 s; an error comes back at once
    assert cut["users.errors"].sum() > 0 and firewalled["users.errors"].sum() > 0
    bad = _chain()
    bad["triggers"][0]["effects"][0]["args"]["to"] = "auth2"
    with pytest.raises(InvalidPlaybook) as e:
        play(tmp_path / "bad", bad)
    [issue] = e.value.issues
    assert issue.location == "triggers[0].effects[0].args.to" and "a service app calls" in issue.expected


@pytest.mark.parametrize("kind, field", [("timeout", "r_fail"), ("error", "r_rej")])
def test_a_cut_edge_fails_its_requests_as_timeouts_or_refusals_as_said(tmp_path, kind, field):
    import yaml

    (tmp_path / "chain.yaml.j2").write_text(yaml.safe_dump(_chain()))
    plan = build_plan(load_playbook(str(tmp_path / "chain.yaml.j2")), None, seed=1)
    spec = next(a for a in plan.agents if a.name == "app").spec
    app = build_agent("service", "app", spec, plan.info)
    flow = {"origin": "users", "sent": 0, "hops": [], "setups": 0, "requests": 50, "coupled": 0, "closes": 0,
            "ct": 2.0, "rt": 2.0, "s_fail": 0, "s_rej": 0, "r_fail": 0, "r_rej": 0, "r_full": 0, "delay": 0.0}
    app.step(0, [Message("apply", "triggers", "app", {"op": "cut_edge", "args": {"to": "db", "kind": kind}, "by": "t"},
                         0, 0)])
    res = app.step(1, [Message("flow", "users", "app", flow, 0, 1)])
    [answer] = [m.body for m in res.messages if m.kind == "flow_result"]
    assert answer["r_ok"] == 0 and answer[field] == 50
    assert not [m for m in res.messages if m.kind == "flow" and m.dst == "db"]  # nothing crossed the edge


def test_the_report_says_which_trigger_set_the_loop_off_and_what_the_autoscaler_did(tmp_path):
    """An outsider's trial (#42): a traffic rise at 07:20 and a flush on a condition at 07:22
    read as 'the trigger at 07:20 set off the loop'; an autoscaler that asked for instances
    that never came was in no finding and no timeline row."""
    from reports.analysis import analyse
    from reports.rundir import load_run

    world = _small_world(triggers=[{"name": "overload", "when": {"metric": "web.utilisation", "above": 0.95, "for": "30s"},
                                    "effects": [{"target": "web", "op": "scale_capacity", "args": {"factor": 0.2}}]}])
    world["services"].append({"name": "provisioning", "capacity": 0.01})
    world["monitoring"]["observe"].append("web.offered")
    world["controllers"] = [{"name": "scaler", "autoscaler": {
        "service": "web", "instances": 10, "metric": "web.offered", "metric_is": "total", "target": 100, "max": 100,
        "scale_out_after": "30s", "provision": {"service": "provisioning", "timeout": "2s"}}}]
    world["scoring"]["loop"] = {"populations": ["users"], "hold": "1m"}
    a = analyse(load_run(play(tmp_path, world).dir))
    assert a.summary[0].startswith("The trigger overload at 00:0") and "(the incident began with the trigger rush at " \
        "00:05:00)" in a.summary[0], a.summary
    assert any(row["what"] == "scaler scaled out web" for row in a.timeline)
    [never] = [f for f in a.findings if f.title.startswith("scaler asked for")]
    assert "never came" in never.title and "provisioning requests failed" in never.evidence


def test_a_world_that_fails_with_no_incident_says_so_instead_of_no_loop(tmp_path):
    from reports.analysis import analyse
    from reports.rundir import load_run

    world = _small_world()
    world["triggers"] = []
    world["services"][0]["capacity"] = 300  # a third of the demand
    world["scoring"]["loop"] = {"populations": ["users"]}
    a = analyse(load_run(play(tmp_path, world).dir))
    assert a.verdict.startswith("No trigger fired and no fault was injected")
    assert any(s.startswith("Yet users retries was out of bounds for") for s in a.summary), a.summary
