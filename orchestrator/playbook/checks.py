"""A parsed playbook validated: its fields (``schema.check`` against ``format.PLAYBOOK``), then
the checks across them (names that refer to one another, clocks, scoring, par).
"""
from __future__ import annotations



from agents.limits import MOST_WHEEL_CELLS
from agents.monitoring import WHEN_STALE
from agents.population import spec_wheel_cells
from agents.shards import SHARD_SEP
from orchestrator import budgets
from orchestrator.errors import InvalidPlaybook, Issue, closest_first, setting
from orchestrator.playbook.format import PLAYBOOK
from orchestrator.playbook.format import milestone_keys
from reports.rundir import MAX_TICK_S, MAX_TICKS, MEASURES, MIN_TICK_S
from orchestrator.playbook.schema import check
from orchestrator.playbook.names import KIND_OF_SECTION, Names, agent_names
from orchestrator.playbook.effects import check_effect, observable_metrics
from orchestrator.playbook.controllers import check_controllers, check_triggers
from orchestrator.playbook.rules import before_start
from orchestrator.playbook.thresholds import threshold_issues




def validate_playbook(doc: dict, source: str) -> dict:
    issues: list[Issue] = []
    data = check(doc, PLAYBOOK, "", issues)
    if not issues:
        _cross_check(data, issues)
    elif isinstance(data, dict):
        # cross-references are checked beside the field errors, so one pass reports everything;
        # a part the field checks found malformed can stop them early, and its error is already there
        found = {i.location for i in issues}
        cross: list[Issue] = []
        try:
            _cross_check(data, cross)
        except (KeyError, TypeError, AttributeError, ValueError):
            pass
        # (nor one about an item a field error inside it explains: "exactly one of above, below"
        # once its above was found not to be a number)
        issues.extend(i for i in cross if i.location not in found
                      and not any(f.startswith((f"{i.location}.", f"{i.location}[")) for f in found))
    if issues:
        raise InvalidPlaybook(source, "validate", issues)
    _fill_derived_defaults(data)
    return data


def _fill_derived_defaults(data: dict) -> None:
    """The defaults that follow from another field of the same part (format.py's docs say
    which), filled in once here so that no agent restates them."""
    data["populations"] = [_derived(p) for p in data["populations"]]


def _derived(p: dict) -> dict:
    """A population with the defaults that follow from its other fields."""
    return p | {"bugs": {"reconnect_delay": p["connection"]["timeout"], **p["bugs"]}}


def primary_issue(data: dict, primary: str, location: str) -> Issue | None:
    """A primary outcome the playbook's scoring does not measure: a backlog nobody declared,
    a loop without a measure."""
    sc = data["scoring"]
    if primary == "backlog_drained" and "backlog_drained" not in milestone_keys(data):
        return Issue(location, primary, "an outcome the playbook scores: it declares no scoring.backlog populations "
                                        "or services, so no run's backlog is ever drained")
    if primary == "loop_broken" and not (sc["loop"]["devices"] or sc["loop"]["populations"] or sc["loop"]["services"]):
        return Issue(location, primary, "an outcome the playbook scores: its scoring.loop names no devices, "
                                        "populations or services to measure the loop by")
    return None


def _cross_check(data: dict, issues: list[Issue]) -> None:
    """The checks across fields. A name two parts share is an error of its own; what refers
    to it is ambiguous, so an error about a reference is kept only where it stands whichever
    of the parts the name meant (else one duplicate name brings a dozen follow-on errors)."""
    found: list[Issue] = []
    _check_unique_names(data, issues)
    _check_references(data, found)
    for keep in _meanings_of_duplicates(data):
        stands = []
        _check_references(keep, stands)
        seen = {(i.location, repr(i.value)) for i in stands}
        found = [i for i in found if (i.location, repr(i.value)) in seen]
    issues.extend(found)
    unscored = primary_issue(data, data["scoring"]["primary"], "scoring.primary")
    if unscored:
        issues.append(unscored)
    issues.extend(threshold_issues(data["checks"], "checks", data))



def _meanings_of_duplicates(data: dict) -> list[dict]:
    """Copies of ``data`` where each name several parts share names one of them only (the
    j-th occurrence in copy j; the others renamed to names nothing refers to)."""
    where: dict[str, list[tuple[str, int]]] = {}
    for section in KIND_OF_SECTION:
        for i, item in enumerate(data[section]):
            where.setdefault(item["name"], []).append((section, i))
    shared = {name: places for name, places in where.items() if len(places) > 1}
    copies = []
    for j in range(max((len(p) for p in shared.values()), default=0)):
        copy = {**data, **{section: list(data[section]) for section in KIND_OF_SECTION}}
        for name, places in shared.items():
            for k, (section, i) in enumerate(places):
                if k != min(j, len(places) - 1):
                    copy[section][i] = {**copy[section][i], "name": f"{name}\x00{k}"}
        copies.append(copy)
    return copies


def _check_references(data: dict, issues: list[Issue]) -> None:
    """The checks across fields but the names' own: one checker per section, each told the world's names."""
    devices, services = {d["name"] for d in data["devices"]}, {s["name"] for s in data["services"]}
    populations = {p["name"] for p in data["populations"]}
    names = Names(devices, services, populations, services | populations, agent_names(data),
                   {"device": devices, "service": services, "trigger": {t["name"] for t in data["triggers"]} | {"*"},
                    "fault": {f["name"] for f in data["faults"]},
                    "callee": {s["name"]: {*s["depends_on"], *([s["then"]] if s.get("then") else [])}
                               for s in data["services"]}}, issues)
    for checker in CROSS_CHECKS:
        checker(data, names)


def _check_unique_names(data: dict, issues: list[Issue]) -> None:
    kinds: dict[str, str] = {}
    for section, kind in KIND_OF_SECTION.items():
        for i, item in enumerate(data[section]):
            if item["name"] in kinds or item["name"] in ("monitoring", "deployment", "status", "triggers", "operator"):
                issues.append(Issue(f"{section}[{i}].name", item["name"], "a name used by no other part of the world"))
            if SHARD_SEP in item["name"]:
                issues.append(Issue(f"{section}[{i}].name", item["name"], f"a name without {SHARD_SEP!r} (it names shards)"))
            kinds[item["name"]] = kind


def _check_populations(data: dict, n: Names) -> None:
    issues, services = n.issues, n.services
    for i, p in enumerate(data["populations"]):
        loc = f"populations[{i}]"
        n.check_path(p["path"], f"{loc}.path")
        if p.get("target") and p["target"] not in services:
            issues.append(Issue(f"{loc}.target", p["target"], f"a service ({closest_first(p['target'], services)})"))
        for j, d in enumerate(p["depends_on"]):
            if d not in n.health_sources or d == p["name"]:
                issues.append(Issue(f"{loc}.depends_on[{j}]", d, f"another population or a service "
                                                                 f"({closest_first(d, set(n.health_sources) - {p['name']})})"))
        offered = p["clients"] * p["rate"]
        if offered > budgets.LARGEST_NUMBER:  # (each is within it; their product is what the model counts)
            issues.append(Issue(f"{loc}.rate", p["rate"], f"clients x rate at most {budgets.LARGEST_NUMBER:g} requests/s "
                                                          f"(gameday's budget for any number; {p['clients']:,} clients x "
                                                          f"{p['rate']:g} = {offered:g})"))
        if p["work"] == "durable" and p.get("max_rate") is None:
            issues.append(Issue(f"{loc}.max_rate", None,
                                f"a dispatch rate (requests/s), since the work of {p['name']} is durable"))
        if p["health"] == "clients_without_backlog" and p["work"] != "durable":
            issues.append(Issue(f"{loc}.health", p["health"], "attempts (only durable work has a backlog)"))


def _check_services(data: dict, n: Names) -> None:
    issues, services = n.issues, n.services
    for i, s in enumerate(data["services"]):
        for j, d in enumerate(s["depends_on"]):
            if d not in n.health_sources or d == s["name"]:
                issues.append(Issue(f"services[{i}].depends_on[{j}]", d, "a population or another service"))
        rec = s.get("recycling")
        if rec:
            for key in ("breaks_when", "needs"):
                if rec.get(key) and rec[key] not in n.health_sources:
                    issues.append(Issue(f"services[{i}].recycling.{key}", rec[key], "a population or a service"))
        for loc, other in ((f"services[{i}].then", s.get("then")),
                           (f"services[{i}].leases.store", (s.get("leases") or {}).get("store")),
                           (f"services[{i}].health_checks.network", (s.get("health_checks") or {}).get("network")),
                           (f"services[{i}].cache.store", (s.get("cache") or {}).get("store"))):
            if other is not None and (other not in services or other == s["name"]):
                names = ", ".join(sorted(x for x in services if x != s["name"])) or "there is none"
                issues.append(Issue(loc, other, f"another service ({names})"))
        if s.get("cache") and s.get("then"):
            issues.append(Issue(f"services[{i}].then", s["then"], "no then on a cache (its misses go to cache.store)"))
        if s.get("cache") and s["cache"].get("size") is not None and s["cache"]["size"] > s["cache"]["keys"]:
            issues.append(Issue(f"services[{i}].cache.size", s["cache"]["size"],
                                f"at most cache.keys ({s['cache']['keys']}): a cache cannot hold more keys than there are"))
        hc = s.get("health_checks")
        if hc and hc["network"] in services and not next(x for x in data["services"] if x["name"] == hc["network"]).get("queue"):
            issues.append(Issue(f"services[{i}].health_checks.network", hc["network"],
                                "a service with a queue (its queue wait is the propagation delay)"))
        lease = s.get("leases")
        if lease and (lease["ttl"] < lease["renew_every"] or abs(lease["ttl"] / lease["renew_every"]
                                                                 - round(lease["ttl"] / lease["renew_every"])) > 1e-9):
            issues.append(Issue(f"services[{i}].leases.ttl", lease["ttl"],
                                f"a whole number of renewal periods ({lease['renew_every']:g} s), at least one"))


def _check_service_chains(data: dict, n: Names) -> None:
    """A request goes on to ``then`` or a cache's store: a chain must not lead back."""
    chain = {s["name"]: s.get("then") or (s.get("cache") or {}).get("store") for s in data["services"]}
    said: set[str] = set()  # the services of the cycles said (each once, at its first service)
    for i, s in enumerate(data["services"]):
        seen, at = [s["name"]], chain.get(s["name"])
        while at in chain and at not in seen:
            seen.append(at)
            at = chain[at]
        if at == s["name"] and s["name"] not in said:
            said.update(seen)
            loc = f"services[{i}].then" if s.get("then") else f"services[{i}].cache.store"
            n.issues.append(Issue(loc, chain[s["name"]], "a chain of services that does not lead back to this one "
                                                         f"({' -> '.join(seen + [s['name']])})"))


def _check_paths(data: dict, n: Names) -> None:
    """monitoring, deployment and status reach their targets over device pools."""
    for section in ("monitoring", "deployment", "status"):
        n.check_path(data[section]["path"], f"{section}.path")
    if data["deployment"].get("target") and data["deployment"]["target"] not in n.services:
        n.issues.append(Issue("deployment.target", data["deployment"]["target"],
                              f"a service ({closest_first(data['deployment']['target'], n.services)})"))
    if data["status"].get("failover"):
        n.check_path(data["status"]["failover"]["path"], "status.failover.path")
        n.check_path(data["status"]["failover"]["standby_path"], "status.failover.standby_path")


def _check_monitoring(data: dict, n: Names) -> None:
    known_metrics = observable_metrics(data)
    for j, m in enumerate(data["monitoring"]["observe"]):
        if m not in known_metrics:
            part = m.split(".", 1)[0] if isinstance(m, str) else None
            # the part's own metrics if the part is right, else the parts: a list of every metric would be hundreds
            of_part = [k for k in known_metrics if k.split(".", 1)[0] == part]
            near = closest_first(m, of_part) if of_part else \
                f"parts: {closest_first(part, {k.split('.', 1)[0] for k in known_metrics})}"
            n.issues.append(Issue(f"monitoring.observe[{j}]", m, f"agent.metric naming a part of this world and one of "
                                                                 f"its metrics ({near})"))
    mon = data["monitoring"]
    if mon["stale_after"] <= mon["telemetry_every"] + mon["timeout"]:
        # (each value would go stale for a moment before the next report arrives: alarms flap)
        n.issues.append(Issue("monitoring.stale_after", mon["stale_after"],
                              f"a duration longer than monitoring.telemetry_every plus monitoring.timeout "
                              f"({mon['telemetry_every'] + mon['timeout']:g} s): each value would go stale before "
                              f"its next report could arrive"))
    for j, a in enumerate(data["monitoring"]["alarms"]):
        if a["metric"] not in data["monitoring"]["observe"]:
            n.issues.append(Issue(f"monitoring.alarms[{j}].metric", a["metric"], f"a metric listed in monitoring.observe "
                                                                                 f"({closest_first(a['metric'], mon['observe'])})"))
        if sum(k in a and a[k] not in (None, False) for k in ("above", "below", "no_data")) != 1:
            n.issues.append(Issue(f"monitoring.alarms[{j}]", a["name"], "exactly one of above, below, no_data"))
        elif a.get("no_data") and a.get("when_stale", WHEN_STALE[0]) != WHEN_STALE[0]:
            n.issues.append(Issue(f"monitoring.alarms[{j}].when_stale", a["when_stale"],
                                  "clear or nothing: a no_data alarm fires on stale data, when_stale is for above and below"))


def _check_clock(data: dict, n: Names) -> None:
    tick = data["clock"]["tick"]
    if not MIN_TICK_S <= tick <= MAX_TICK_S:
        n.issues.append(Issue("clock.tick", tick, f"a tick of {MIN_TICK_S:g} to {MAX_TICK_S:g} seconds"))
    elif data["clock"]["duration"] / tick > MAX_TICKS:
        n.issues.append(Issue("clock.duration / clock.tick", round(data["clock"]["duration"] / tick),
                              f"at most {MAX_TICKS:,} ticks per run (a longer tick or a shorter duration)"))
    else:
        n.issues.extend(tick_issues(data, tick, "clock.tick"))


def tick_issues(data: dict, tick: float, where: str) -> list[Issue]:
    """A tick no longer than the clients' shortest timeout: a client hears of its requests
    and connections tick by tick, so a longer tick would let it wait far past its timeout.
    And no longer than a cache's ttl, which a key would otherwise outlive by whole ticks."""
    switched = {e["target"] for section in ("triggers", "mitigations", "faults") for a in data.get(section) or []
                for e in a["effects"] if e["op"] == "set_mode"}
    # a connection's timeout counts for pooled clients, or clients an effect may switch to pooled
    timeouts = [(f"populations[{i}].{part}.timeout of {p['name']}", p[part]["timeout"])
                for i, p in enumerate(data["populations"]) for part in ("request", "connection")
                if part == "request" or p["mode"] == "pooled" or p["name"] in switched]
    out = []
    if timeouts:
        field_, shortest = min(timeouts, key=lambda t: t[1])
        if tick > shortest:
            out.append(Issue(where, tick, f"a tick no longer than the shortest timeout ({field_}: {shortest:g} s), since "
                                          "clients hear of their requests tick by tick; use a shorter tick or a longer "
                                          "timeout"))
    for i, p in enumerate(data["populations"]):
        cells = spec_wheel_cells(_derived(p), tick)
        if cells > MOST_WHEEL_CELLS:
            out.append(Issue(where, tick, f"a tick long enough for the delays of populations[{i}] ({p['name']}): its "
                                          f"longest delays and timeouts over the tick, times the attempts it counts "
                                          f"(retry.max_attempts), are {cells:,} cells of its timing wheels, over the most "
                                          f"the model keeps, {MOST_WHEEL_CELLS:,}; use a longer tick, shorter delays or "
                                          "fewer attempts"))
    for i, svc in enumerate(data.get("services") or []):
        ttl = (svc.get("cache") or {}).get("ttl")
        if ttl is not None and tick > ttl:
            out.append(Issue(where, tick, f"a tick no longer than services[{i}].cache.ttl of {svc['name']} ({ttl:g} s), "
                                          "since a cache ages its keys tick by tick; use a shorter tick or a longer ttl"))
    return out


def timing_issues(data: dict, duration: float | None, tick: float | None) -> list[Issue]:
    """What is wrong with a run's duration and tick (None: the playbook's) against a playbook:
    each within its bounds, a tick fine enough for the playbook's timeouts, and not too
    many ticks (``gameday run`` and ``gameday playbooks validate`` both check it)."""
    issues = []
    if tick is not None and not MIN_TICK_S <= tick <= MAX_TICK_S:
        issues.append(Issue(setting("tick"), tick, f"a duration from {MIN_TICK_S:g} to {MAX_TICK_S:g} s"))
    elif tick is not None:
        issues += tick_issues(data, tick, setting("tick"))
    if duration is not None and duration <= 0:
        issues.append(Issue(setting("duration"), duration, "a duration > 0"))
    if not issues:
        ticks = (duration or data["clock"]["duration"]) / (tick or data["clock"]["tick"])
        if ticks > MAX_TICKS:
            issues.append(Issue(f"{setting('duration')} / {setting('tick')}", round(ticks),
                                f"at most {MAX_TICKS:,} ticks per run"))
    return issues


def _check_triggers(data: dict, n: Names) -> None:
    for i, t in enumerate(data["triggers"]):
        for j, e in enumerate(t["effects"]):
            check_effect(e, f"triggers[{i}].effects[{j}]", n)


def _check_actions(data: dict, n: Names) -> None:
    """Mitigations, faults and hints: unique names, effects their targets and operations
    accept, hints a console can show."""
    for i, h in enumerate(data.get("hints") or []):
        if not 0 < len(h["text"]) <= budgets.LIVE_TEXT_CHARS:
            n.issues.append(Issue(f"hints[{i}].text", h["text"], f"a text of 1 to {budgets.LIVE_TEXT_CHARS} characters "
                                                                 "(what a console shows)"))
    for section in ("mitigations", "faults", "hints"):
        seen = set()
        for i, m in enumerate(data[section]):
            if m["name"] in seen:
                n.issues.append(Issue(f"{section}[{i}].name", m["name"], f"a name used by no other of the {section}"))
            seen.add(m["name"])
            for j, e in enumerate(m.get("effects") or ()):  # (a hint has none)
                check_effect(e, f"{section}[{i}].effects[{j}]", n, m["params"])


def _check_scoring(data: dict, n: Names) -> None:
    sc = data["scoring"]
    for key, pool, what in (("loop.devices", n.devices, "a device pool"), ("healthy.devices", n.devices, "a device pool"),
                            ("loop.populations", n.populations, "a population"),
                            ("loop.services", n.services, "a service"),
                            ("backlog.services", {s["name"] for s in data["services"] if s.get("queue")}, "a service with a queue"),
                            ("backlog.populations", _durable_at_some_time(data),
                             "a durable population (or one a set_work effect makes durable)"),
                            ("recovered.populations", n.populations, "a population"),
                            ("recovered.services", n.services, "a service")):
        a, b = key.split(".")
        for j, name in enumerate(sc[a][b]):
            if name not in pool:
                n.issues.append(Issue(f"scoring.{key}[{j}]", name, f"{what} ({closest_first(name, pool)})"))


def _durable_at_some_time(data: dict) -> set[str]:
    """The populations whose work is durable at the start, or which a trigger's, a
    mitigation's or a fault's set_work makes durable."""
    made = {e["target"] for section in ("triggers", "mitigations", "faults") for m in data[section]
            for e in m["effects"] if e["op"] == "set_work" and (e.get("args") or {}).get("work") == "durable"}
    return {p["name"] for p in data["populations"] if p["work"] == "durable" or p["name"] in made}


def _check_par(data: dict, n: Names) -> None:
    par_keys = [*MEASURES, *milestone_keys(data)]
    actions = [m["name"] for m in data["mitigations"]]
    for key, at in data["par"].items():
        if key not in par_keys and key not in actions:
            n.issues.append(Issue(f"par.{key}", key, f"a measure of this playbook's runs ({', '.join(par_keys)}) or one "
                                                     f"of its mitigations ({closest_first(key, actions)})"))
        elif isinstance(at, (int, float)):
            n.issues += before_start(at, data["clock"]["start"], f"par.{key}")
    for name in data["scoring"]["impact"]:
        if name not in n.populations:
            n.issues.append(Issue(f"scoring.impact.{name}", name, f"a population ({closest_first(name, n.populations)})"))


def _check_work_switches(data: dict, n: Names) -> None:
    """A set_work effect must leave its population a world it can run: durable work needs a
    dispatch rate, and a health read from the backlog needs durable work."""
    pops = {p["name"]: p for p in data["populations"]}
    for section in ("triggers", "mitigations", "faults"):
        for i, m in enumerate(data[section]):
            for j, e in enumerate(m["effects"]):
                p, args = pops.get(e["target"]), e.get("args") or {}
                if p is None or e["op"] != "set_work":
                    continue
                loc = f"{section}[{i}].effects[{j}].args"
                if args.get("work") == "durable" and args.get("max_rate") is None and p.get("max_rate") is None:
                    n.issues.append(Issue(loc, args, f"max_rate (population {p['name']} has none, and durable work "
                                                   "needs a dispatch rate)"))
                if args.get("work") == "perishable" and p["health"] == "clients_without_backlog":
                    n.issues.append(Issue(f"{loc}.work", "perishable", f"durable (population {p['name']}'s health is "
                                                                     "its clients without a backlog)"))


#: the cross-checks in the order their issues are reported, a section each
CROSS_CHECKS = (_check_populations, _check_services, _check_service_chains, _check_paths, _check_monitoring,
                _check_clock, _check_triggers, check_triggers, check_controllers, _check_actions, _check_work_switches,
                _check_scoring, _check_par)
