"""A runbook operator's rules over its view, driven tick by tick: a ``for`` inside ``all`` or
``any`` counts its own unbroken stretch whatever the order of the list, and a repeating
rule's ``for`` counts through the wait between firings (an outsider trial saw a rule fire
5 minutes later, and the loop stay unbroken, when its two conditions were listed the other
way round)."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from agents import UNWIRED, WorldInfo, agent_rng
from agents.operator import RunbookOperator

WORLD = WorldInfo(dt=1.0, start_s=0.0, seed=1)
WAIT = {"metric": "db.wait", "below": 0.5, "for": 300.0, "max_age": 1e9}  # 5 minutes without a break
DONE = {"done": "shed", "effective": True, "after": 600.0}  # 10 minutes after the shedding took effect


def rule(when: dict, repeat: bool = False, every: float = 0.0) -> dict:
    return {"name": "lift", "when": when, "do": [{"action": "lift"}], "repeat": repeat, "every": every}


def fired_at(rules: list[dict], wait: dict[int, float], ticks: int, effective: dict[str, int] | None = None) -> list[int]:
    """The ticks at which the rules fired, with the view's ``db.wait`` from ``wait``
    (tick -> value, held until the next entry)."""
    op = RunbookOperator("ops", {"rules": rules, "_wiring": UNWIRED}, agent_rng(1, "ops"), WORLD)
    op.effective = dict(effective or {})
    value, fired = None, []
    for t in range(ticks):
        value = wait.get(t, value)
        op.view, op.view_tick = {"db.wait": [value, 0.0]}, t
        op.decide(t)
        fired += [t for e in op._events if e["event"] == "rule_fired"]
        op._events, op._outbox = [], []
    return fired


def test_a_for_inside_all_counts_whatever_the_order_of_the_list():
    wait = {0: 2.0, 100: 0.1}  # below 0.5 from tick 100 on: held 5 minutes at tick 400
    for parts in itertools.permutations([DONE, WAIT]):
        # shed took effect at tick 300: done for 10 minutes at tick 900, the wait long enough by then
        assert fired_at([rule({"all": list(parts)})], wait, 1200, {"shed": 300}) == [900], parts
    # any: the `for` counts also while the other part holds (until tick 200), so at 450 the
    # wait has held since 100
    for parts in itertools.permutations([{"not": {"at": 200.0}}, WAIT]):
        assert fired_at([rule({"all": [{"at": 450.0}, {"any": list(parts)}]})], wait, 1200) == [450], parts
    late = {0: 2.0, 800: 0.1}  # the wait falls at 800: the rule needs it held until 1100, whatever the order
    for parts in itertools.permutations([DONE, WAIT]):
        assert fired_at([rule({"all": list(parts)})], late, 1200, {"shed": 300}) == [1100], parts


def test_a_repeating_rules_for_counts_through_its_wait_between_firings():
    # below 0.5 from 0 to 499, above for a minute, then below again from 560
    wait = {0: 0.1, 500: 2.0, 560: 0.1}
    fired = fired_at([rule(WAIT, repeat=True, every=400.0)], wait, 1200)
    # fires at 300 (held 5 minutes); may fire again from 700, but the wait broke at 500:
    # held 5 minutes again only at 860, and then every 400 s while it holds
    assert fired == [300, 860], fired


def test_a_threshold_on_a_count_means_the_same_at_any_tick(tmp_path):
    """Counts per tick reach monitoring as rates per second: a rule on 'attempts above 700'
    (1,000 a second are sent) fires at 1 s and at 0.25 s ticks alike, and so does an alarm
    on them (an outsider trial's rule fired at 1 s and never at 0.25 s, where a tick holds
    250 attempts). metrics.csv keeps the counts per tick."""
    from helpers import play

    world = {"name": "counts", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "4m"},
             "services": [{"name": "api", "capacity": 5000}],
             "populations": [{"name": "clients", "clients": 1000, "rate": 1.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "2s"}}],
             "monitoring": {"observe": ["clients.attempts"],
                            "alarms": [{"name": "busy", "metric": "clients.attempts", "above": 700, "for": "20s"}]},
             "mitigations": [{"name": "noop", "deploy": False,
                              "effects": [{"target": "clients", "op": "scale_rate", "args": {"factor": 1}}]}]}
    rules = [{"name": "many", "when": {"metric": "clients.attempts", "above": 700, "for": "30s"}, "do": "noop"}]
    fired = {}
    for tick in (1.0, 0.25):
        r = play(tmp_path / str(tick), world, rules, tick=tick)
        ev = r.events
        fired[tick] = (ev.loc[ev["event"] == "rule_fired", "clock"].tolist(), ev.loc[ev["event"] == "alarm_raised", "clock"].tolist())
        assert r.metrics["clients.attempts"].mean() == pytest.approx(1000 * tick, rel=0.05)  # per tick in metrics.csv
    for tick, (rule, alarm) in fired.items():
        assert len(rule) == 1 and len(alarm) == 1, (tick, fired)
    # a report explains a rule that never fired in the same units: per second
    from reports.analysis import analyse

    never = [{"name": "never", "when": {"metric": "clients.attempts", "above": 2000}, "do": "noop"}]
    (finding,) = [f for f in analyse(play(tmp_path / "never", world, never, tick=0.25)).findings
                  if f.kind == "rule_never_fired"]
    low, high = (float(x) for x in finding.evidence.split("(range ")[1].rstrip(")").split("-"))
    assert 500 < low < 1000 < high < 1500, finding.evidence  # (per tick: about 190-310)
    # the same time, give or take the monitoring path's delay and a tick
    for i in (0, 1):
        a, b = (fired[t][i][0] for t in (1.0, 0.25))
        assert abs(_seconds(a) - _seconds(b)) <= 3, fired


def _seconds(clock: str) -> float:
    h, m, *s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + (float(s[0]) if s else 0.0)


def test_a_rule_with_a_list_of_actions_asks_each_in_order_as_rules_of_one_condition_would(tmp_path):
    """A rule may ask for several actions at once (an outsider wrote two rules with the same
    condition for it): the run is, event for event and metric for metric, the run of those
    two rules."""
    import orchestrator

    mini = str(Path(__file__).parent / "playbooks" / "mini_loop.yaml.j2")
    both = {"name": "fix", "when": {"at": "00:04"}}
    books = {"list": [{**both, "do": ["fix_backoff", {"action": "shed_load", "params": {"factor": 0.8}}]}],
             "two rules": [{**both, "do": "fix_backoff"}, {**both, "do": {"action": "shed_load", "params": {"factor": 0.8}}}]}
    runs = {}
    for name, rules in books.items():
        book = tmp_path / f"{name}.yaml"
        book.write_text(yaml.safe_dump({"name": "both", "description": "fix and shed", "rules": rules}))
        runs[name] = orchestrator.run(mini, runbook=str(book), duration="15m", out=tmp_path / name)
    fired = runs["list"].events[runs["list"].events["event"] == "rule_fired"]
    assert list(fired["action"]) == ["fix_backoff", "shed_load"] and fired["tick"].nunique() == 1
    for f in ("events.jsonl", "metrics.csv"):
        assert (tmp_path / "list" / f).read_bytes() == (tmp_path / "two rules" / f).read_bytes(), f
