"""What an action, fault or trigger does (its effects) checked against the world it acts on,
and an action's parameters: which fields they feed, their values as given, their problems.
"""
from __future__ import annotations



from agents import AGENT_CLASSES
from orchestrator.errors import Issue, closest_first
from orchestrator.playbook.operations import operations
from orchestrator.playbook.variables import type_wanted, same_type
from orchestrator.playbook.names import TELEMETRY_KINDS, Names, agent_names


def check_effect(e: dict, loc: str, n: Names, params: dict | None = None) -> None:
    """One effect: its target, operation and arguments. ``params``: the mitigation's or
    fault's params (None: a trigger's effect, which has none to refer to)."""
    kinds, parts, issues = n.kinds, n.parts, n.issues
    kind = kinds.get(e["target"])
    if kind is None:
        issues.append(Issue(f"{loc}.target", e["target"], f"a part of the world ({closest_first(e['target'], kinds)})"))
        return
    ops = operations(kind)
    if e["op"] not in ops:
        issues.append(Issue(f"{loc}.op", e["op"], f"an operation of a {kind} ({closest_first(e['op'], ops)})"))
        return
    takes = ops[e["op"]].args
    args = e.get("args") or {}
    for k, arg in takes.items():
        if arg.required and k not in args:
            issues.append(Issue(f"{loc}.args", args, f"argument {k} (which {e['op']} requires)"))
    for k, v in args.items():
        if k not in takes:
            issues.append(Issue(f"{loc}.args.{k}", k, f"an argument of {e['op']} ({closest_first(k, takes)})"))
            continue
        if isinstance(v, str) and v.startswith("$"):
            if params is None:
                issues.append(Issue(f"{loc}.args.{k}", v, "a value (a trigger has no params or requester to refer to)"))
                continue
            if v == "$requester":
                continue
            if v[1:] not in params:
                refs = [f"${p}" for p in params] + ["$requester"]
                issues.append(Issue(f"{loc}.args.{k}", v, f"$requester or $name of one of the mitigation's params "
                                                          f"({closest_first(v, refs)})"))
                continue
            name, at = v[1:], f"{loc}.args.{k} ({v}'s default)"
            v = params[name]
            params[name] = takes[k].normalised(v)  # a duration param's default in seconds, as its argument takes it
        else:
            at = f"{loc}.args.{k}"
            args[k] = takes[k].normalised(v)
        wanted = takes[k].problem(v) or _unknown_name(takes[k], v, parts, e["target"])
        if wanted:
            issues.append(Issue(at, v, f"{wanted} (argument {k} of {e['op']})"))


def _unknown_name(arg, value, parts: dict, target: str) -> str | None:
    """What was expected, if an argument that names parts of the world names one that does not
    exist (of the parts its ``target`` has, where they are each part's own: a service's callees)."""
    kind = arg.about.names if arg.about else ""
    if not kind or value is None:
        return None
    known, own = parts[kind], isinstance(parts[kind], dict)
    if own:
        known = known.get(target, set())
    for name in value if isinstance(value, list) else [value]:
        if name not in known:
            what = f"a list naming {kind}s" if isinstance(value, list) else f"the name of a {kind}"
            if own:  # (a callee: of this target's)
                return f"a service {target} calls, one of its depends_on or its then ({closest_first(name, known)})"
            return f"{what} of the playbook ({closest_first(name, known - {'*'})})"
    return None


def param_uses(mitigation: dict, kinds: dict) -> dict[str, list]:
    """Where each of a mitigation's (or fault's) params goes: name -> (operation, ``Argument``) it fills."""
    out: dict[str, list] = {}
    for e in mitigation["effects"]:
        kind = kinds.get(e["target"])
        takes = operations(kind).get(e["op"]) if kind else None
        for k, v in (e.get("args") or {}).items():
            if takes and k in takes.args and isinstance(v, str) and v.startswith("$") and v[1:] in mitigation["params"]:
                out.setdefault(v[1:], []).append((e["op"], takes.args[k]))
    return out


def normalised_params(mitigation: dict, given: dict, kinds: dict) -> dict:
    """``given`` params as the arguments they fill take them (durations in seconds)."""
    uses = param_uses(mitigation, kinds)
    return {k: (uses[k][0][1].normalised(v) if uses.get(k) else v) for k, v in given.items()}


def param_problems(mitigation: dict, given: dict, kinds: dict) -> list[tuple[str, object, str]]:
    """(param, value, what was expected) for each value given for a mitigation's or fault's
    params (a runbook's ``do.params``, a team's or facilitator's command) that it does not
    declare, or that does not fit the argument it fills (or, filling none, its default's type)."""
    declared, uses, out = mitigation["params"], param_uses(mitigation, kinds), []
    for k, v in given.items():
        if k not in declared:
            out.append((k, v, f"a parameter of {mitigation['name']} ({closest_first(k, declared)})"))
            continue
        for op, arg in uses.get(k, []):
            wanted = arg.problem(v)
            if wanted:
                out.append((k, v, f"{wanted} (it is argument {arg.name} of {op})"))
                break
        else:
            if k not in uses and not same_type(declared[k], v):
                out.append((k, v, type_wanted(declared[k])))
    return out


def observable_metrics(data: dict) -> set[str]:
    out = set()
    for name, kind in agent_names(data).items():
        if kind not in TELEMETRY_KINDS:
            continue
        for m in AGENT_CLASSES[kind].METRICS:
            out.add(f"{name}.{m}")
    return out
