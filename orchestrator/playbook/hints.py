"""Warnings for a playbook that validates but likely does not say what its author meant
(`gameday run` and `gameday playbooks validate` print them; none stops a run).
"""
from __future__ import annotations



from orchestrator.playbook.operations import operations
from reports.timefmt import format_clock
from orchestrator.playbook.yaml_text import load_yaml
from orchestrator.playbook.names import KIND_OF_SECTION, agent_names
from orchestrator.playbook.loader import Playbook


def retried_without_limit_by_default(pb: Playbook) -> list[str]:
    """Warnings for the populations of perishable work whose retry.max_attempts is left at
    its default, 0 (retried until they succeed): a team that did not choose it gets requests
    outstanding that nothing bounds while they fail, and an impact counted by attempts."""
    written = (load_yaml(pb.text) or {}).get("populations") or []
    out = []
    for i, (p, raw) in enumerate(zip(pb.data["populations"], written)):
        if p["work"] == "perishable" and "max_attempts" not in ((raw or {}).get("retry") or {}):
            out.append(f"populations[{i}].retry.max_attempts is left at its default, 0: {p['name']} retries a failed "
                       "request until it succeeds, so its requests outstanding grow for as long as it fails, and its "
                       "impact counts its failed attempts, not its requests (write the attempts your clients make, "
                       "e.g. 3, or 0 to say they retry without limit)")
    return out


def never_reached(data: dict, runbook: dict | None, end_s: float) -> list[str]:
    """What a run ending at clock time ``end_s`` can never reach: triggers, and runbook
    conditions on the clock, timed at or after its end. Not an error (a short run of a
    long scenario is a fair check), but said before the run, since such a run reports
    "trigger not reached" and a loop that never formed. And what it can never do: the
    effects with nothing to act on (``idle_effects``)."""
    end = format_clock(end_s)
    out = [f"triggers[{i}].at {format_clock(t['at'])} is at or after the end of the run ({end}): it never fires"
           for i, t in enumerate(data["triggers"]) if t.get("at") is not None and t["at"] >= end_s]

    def walk(cond, loc: str) -> None:
        if not isinstance(cond, dict):
            return
        if isinstance(cond.get("at"), (int, float)) and cond["at"] >= end_s:
            out.append(f"{loc}.at {format_clock(cond['at'])} is at or after the end of the run ({end}): it never holds")
        for key in ("all", "any"):
            for j, c in enumerate(cond.get(key) or []):
                walk(c, f"{loc}.{key}[{j}]")
        if "not" in cond:
            walk(cond["not"], f"{loc}.not")

    for i, rule in enumerate((runbook or {}).get("rules") or []):
        walk(rule.get("when"), f"rules[{i}].when")
    return out + idle_effects(data) + queues_never_late(data) + front_doors_recovered(data)


def front_doors_recovered(data: dict) -> list[str]:
    """The services scoring.recovered names that pass their work on (``then``): a service's
    success ratio counts its own part only, so such a one reads recovered, or never
    impaired, while what it calls fails every request (an outsider's login API did, through
    a 107-minute outage). Not an error, but said before the run."""
    then = {s["name"]: s["then"] for s in data.get("services") or [] if s.get("then")}
    names = ((data.get("scoring") or {}).get("recovered") or {}).get("services") or []
    return [f"scoring.recovered.services[{j}] {name}: it passes its work on to {then[name]} (then), and its success "
            f"ratio counts its own part only, so it can read recovered while its callers' requests fail; "
            f"scoring.recovered.populations measures what its callers get" for j, name in enumerate(names) if name in then]


def queues_never_late(data: dict) -> list[str]:
    """The queues scoring.backlog names that can never wait longer than its threshold: a
    queue holds ``limit`` seconds of work at the capacity of the moment, so its wait stays
    within the limit and a tick; such a queue never holds the milestone back. Not an error
    (a variant may shrink the limit), but said before the run."""
    backlog = (data.get("scoring") or {}).get("backlog") or {}
    if "threshold" not in backlog:
        return []
    queues = {s["name"]: s["queue"] for s in data.get("services") or [] if s.get("queue")}
    tick, out = float(data["clock"]["tick"]), []
    for j, name in enumerate(backlog.get("services") or []):
        if name in queues and queues[name]["limit"] + tick <= backlog["threshold"]:
            out.append(f"scoring.backlog.services[{j}] {name}: its queue holds {queues[name]['limit']:g} s of work "
                       f"(queue.limit), so its wait never goes over backlog.threshold ({backlog['threshold']:g} s): "
                       f"it never holds the backlog milestone back")
    return out


def idle_effects(data: dict) -> list[str]:
    """The effects whose operation has nothing to act on in this world (``flush_cache`` on a
    service without a cache): not an error, since a template's variant may leave out a part
    that its mitigations act on, but said before the run, since applying them does nothing."""
    out = []
    specs = {part["name"]: part for section in KIND_OF_SECTION for part in data.get(section) or []}
    kinds = agent_names(data)
    for section in ("triggers", "mitigations", "faults"):
        for i, m in enumerate(data.get(section) or []):
            for j, e in enumerate(m.get("effects") or []):  # (partial data: the runbook's own check)
                op = operations(kinds[e["target"]]).get(e["op"]) if e["target"] in specs else None
                if op is not None and op.needs and specs[e["target"]].get(op.needs) is None:
                    out.append(f"{section}[{i}].effects[{j}]: {e['op']} does nothing to {e['target']}, which has no "
                               f"{op.needs}")
    return out
