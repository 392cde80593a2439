"""The world's own automation that reacts to it, checked against the world: controllers
(an autoscaler's service, metric and control plane; rules in the runbook grammar) and
triggers that wait for a condition instead of a clock time."""
from __future__ import annotations

from orchestrator.errors import Issue, closest_first
from orchestrator.playbook.names import Names
from orchestrator.playbook.rules import before_start, check_condition, check_rules, condition_refs

#: what a trigger's condition may read: what monitoring delivers and the clock (a trigger
#: requests no mitigation and queries no logs, so done, not_done and log never hold)
TRIGGER_CONDITIONS = ("all", "any", "not", "at", "no_data", "metric", "alarm")


def check_triggers(data: dict, n: Names) -> None:
    """Each trigger fires at a clock time or on a condition (exactly one of them)."""
    refs = condition_refs(data)
    for i, t in enumerate(data["triggers"]):
        loc = f"triggers[{i}]"
        if (t.get("at") is None) == (t.get("when") is None):
            n.issues.append(Issue(loc, {k: t.get(k) for k in ("at", "when")},
                                  "exactly one of at (a clock time) and when (a condition)"))
        elif t.get("at") is not None:
            n.issues += before_start(t["at"], data["clock"]["start"], f"{loc}.at")
        else:
            t["when"] = check_condition(t["when"], f"{loc}.when", refs, n.issues)
            for where, key in _condition_keys(t["when"], f"{loc}.when"):
                if key not in TRIGGER_CONDITIONS:
                    n.issues.append(Issue(where, key, f"a condition a trigger can read ({', '.join(TRIGGER_CONDITIONS)}): "
                                                      f"a trigger requests no action and queries no logs"))


def _condition_keys(cond, loc: str):
    """(location, key) of every condition inside ``cond``."""
    if not isinstance(cond, dict):
        return
    for key in cond:
        if key in ("all", "any") and isinstance(cond[key], list):
            yield loc, key
            for j, c in enumerate(cond[key]):
                yield from _condition_keys(c, f"{loc}.{key}[{j}]")
            return
        if key == "not":
            yield loc, key
            yield from _condition_keys(cond[key], f"{loc}.not")
            return
    keys = [k for k in cond if k not in ("for", "above", "below", "max_age", "after", "effective")]
    if keys:
        yield loc, keys[0]


def check_controllers(data: dict, n: Names) -> None:
    refs = condition_refs(data)
    for i, c in enumerate(data["controllers"]):
        loc = f"controllers[{i}]"
        if not c.get("autoscaler") and not c["rules"]:
            n.issues.append(Issue(loc, c["name"], "an autoscaler, some rules, or both (it would do nothing)"))
        check_rules(c["rules"], data, data["name"], n.issues, where=f"{loc}.rules")
        a = c.get("autoscaler")
        if not a:
            continue
        here = f"{loc}.autoscaler"
        if a["service"] not in n.services:
            n.issues.append(Issue(f"{here}.service", a["service"], f"a service ({closest_first(a['service'], n.services)})"))
        if a["metric"] not in refs["metric"]:
            n.issues.append(Issue(f"{here}.metric", a["metric"], "a metric the playbook's monitoring observes "
                                                                  f"({closest_first(a['metric'], refs['metric'])})"))
        if a["min"] > a["max"]:
            n.issues.append(Issue(f"{here}.min", a["min"], f"at most max ({a['max']})"))
        prov = a.get("provision")
        if prov:
            if prov["service"] not in n.services:
                n.issues.append(Issue(f"{here}.provision.service", prov["service"],
                                      f"a service ({closest_first(prov['service'], n.services)})"))
            n.check_path(prov["path"], f"{here}.provision.path")
