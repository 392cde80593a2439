"""Rules in the runbook grammar (when -> do), checked against the playbook they act in: a
runbook's, and the rules of the world's own controllers."""
from __future__ import annotations

from orchestrator.errors import Issue, closest_first, nearest
from orchestrator.playbook.format import CONDITIONS
from orchestrator.playbook.schema import _MISSING, Field, check, non_negative
from reports.timefmt import format_clock
from orchestrator.playbook.names import agent_names
from orchestrator.playbook.effects import normalised_params, param_problems


def condition_refs(data: dict) -> dict:
    """What a condition may refer to in this playbook (metric, alarm, action) and the clock
    times a +DURATION counts from."""
    return {"metric": set(data["monitoring"]["observe"]), "alarm": {a["name"] for a in data["monitoring"]["alarms"]},
            "action": {m["name"] for m in data["mitigations"]}, "first_trigger": first_trigger(data),
            "start": data["clock"]["start"]}


def first_trigger(data: dict) -> float | None:
    """The earliest clock time a trigger is set for (one on a condition has none)."""
    return min((t["at"] for t in data["triggers"] if t.get("at") is not None), default=None)


def check_rules(rules: list, data: dict, playbook_name: str, issues: list[Issue], where: str = "rules") -> None:
    """Rules' references to the playbook: actions, their params, metrics, alarms, times;
    each condition and action filled in and normalised in place."""
    catalogue = {m["name"]: m for m in data["mitigations"]}
    kinds = agent_names(data)
    refs = condition_refs(data)
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict):
            continue  # field validation reported it
        loc = f"{where}[{i}]"
        if isinstance(rule.get("when"), dict):
            rule["when"] = check_condition(rule["when"], f"{loc}.when", refs, issues)
        if "do" not in rule:
            continue
        if isinstance(rule["do"], list):  # several actions, asked in order when the rule fires
            if not rule["do"]:
                issues.append(Issue(f"{loc}.do", rule["do"], "at least one action"))
                continue
            rule["do"] = [_checked_action(do, f"{loc}.do[{j}]", catalogue, kinds, playbook_name, issues)
                          for j, do in enumerate(rule["do"])]
        else:
            rule["do"] = [_checked_action(rule["do"], f"{loc}.do", catalogue, kinds, playbook_name, issues)]


def _checked_action(do, loc: str, catalogue: dict, kinds: dict, playbook_name: str, issues: list[Issue]) -> dict | None:
    """One action a rule asks for (its name, or {action, params}), checked against the
    playbook's mitigations: as {action, params}, its params normalised (None: unusable)."""
    if isinstance(do, str):
        do = {"action": do, "params": {}}
    if not isinstance(do, dict) or "action" not in do:
        issues.append(Issue(loc, do, "an action name or {action: NAME, params: {...}}, or a list of them"))
        return None
    extra = set(do) - {"action", "params"}
    if extra:
        key = sorted(extra)[0]
        guess = nearest(key, ("action", "params"))
        issues.append(Issue(f"{loc}.{key}", do[key], "only action and params" + (f" (did you mean {guess}?)" if guess else "")))
    if do["action"] not in catalogue:
        issues.append(Issue(f"{loc}.action", do["action"], f"a mitigation of {playbook_name} ({closest_first(do['action'], catalogue)})"))
    elif not isinstance(do.get("params") or {}, dict):
        issues.append(Issue(f"{loc}.params", do["params"], "a mapping"))
    else:
        for k, v, wanted in param_problems(catalogue[do["action"]], do.get("params") or {}, kinds):
            issues.append(Issue(f"{loc}.params.{k}", v, wanted))
    params = dict(do.get("params") or {}) if isinstance(do.get("params") or {}, dict) else {}
    if do["action"] in catalogue:
        params = normalised_params(catalogue[do["action"]], params, kinds)
    return {"action": do["action"], "params": params}


def check_condition(c, loc: str, refs: dict, issues: list[Issue]):
    """One runbook condition against ``format.CONDITIONS``, its defaults filled in. ``refs``:
    what the playbook offers to refer to (metric, alarm, action) and its first trigger's time."""
    if not isinstance(c, dict):
        issues.append(Issue(loc, c, "a condition mapping"))
        return c
    keys = [k for k in CONDITIONS if k in c]
    if len(keys) != 1:
        issues.append(Issue(loc, c, f"exactly one of {', '.join(CONDITIONS)}"))
        return c
    k = keys[0]
    cond = CONDITIONS[k]
    for extra in sorted(set(c) - {k} - set(cond.keys), key=str):
        allowed = ", ".join([k, *cond.keys])
        issues.append(Issue(f"{loc}.{extra}", c[extra], f"one of the keys of a '{k}' condition ({allowed})"))
    if cond.one_of and sum(x in c for x in cond.one_of) != 1:
        issues.append(Issue(loc, c, f"exactly one of {', '.join(cond.one_of)}"))
    out = {k: c[k]}
    for key, spec in cond.keys.items():
        if key in c:
            out[key] = check(c[key], spec, f"{loc}.{key}", issues)
        elif spec.default is not _MISSING:
            out[key] = spec.default
    value, here = c[k], f"{loc}.{k}"
    if cond.holds == "conditions":
        if not isinstance(value, list) or not value:
            issues.append(Issue(here, value, "a non-empty list of conditions"))
        else:
            out[k] = [check_condition(x, f"{here}[{j}]", refs, issues) for j, x in enumerate(value)]
    elif cond.holds == "condition":
        out[k] = check_condition(value, here, refs, issues)
    elif cond.holds == "when":
        out[k] = _check_when(value, here, refs["first_trigger"], issues)
        if isinstance(out[k], (int, float)):  # (+DURATION counts from a trigger, at or after the start)
            issues += before_start(out[k], refs["start"], here)
    else:
        known = refs[cond.holds]
        if value not in known:
            what = {"metric": "a metric the playbook's monitoring observes", "alarm": "an alarm of the playbook",
                    "action": "a mitigation of the playbook"}[cond.holds]
            issues.append(Issue(here, value, f"{what} ({closest_first(value, known)})"))
    return out


def _check_when(value, loc: str, first_trigger: float | None, issues: list[Issue]):
    """A clock time (\"07:30\") or +DURATION after the playbook's first trigger, as a clock time."""
    if isinstance(value, str) and value.strip().startswith("+"):
        after = check(value.strip()[1:], non_negative("duration"), loc, [])
        if after is None:
            issues.append(Issue(loc, value, "+ and a duration after the first trigger, such as +15m or +90s"))
            return None
        if first_trigger is None:
            issues.append(Issue(loc, value, "a clock time (the playbook has no trigger to count from)"))
            return None
        return first_trigger + after
    return check(value, Field("clock"), loc, issues)


def before_start(at: float, start: float, loc: str) -> list[Issue]:
    """A clock time given before the run's first tick, which no run can reach (a time of day
    is read on the run's own day, so a time after midnight is written 24:00 or later)."""
    if at >= start:
        return []
    return [Issue(loc, format_clock(at), f"a time at or after clock.start ({format_clock(start)}; "
                                         f"a time the next day is 24:00 or later)")]
