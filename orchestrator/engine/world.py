"""From a validated playbook and runbook to a world's build plan: which agents exist,
with which section of the playbook, and how they are wired (health subscriptions,
telemetry, who the operators are). Hosting-independent."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

from agents import AGENT_CLASSES, Wiring, WorldInfo
from agents.operator import OPERATOR
from agents.shards import merge_metrics, metrics_needed, shard_specs, source_of
from orchestrator.playbook.loader import Playbook

MONITORING = "monitoring"
DEPLOYMENT = "deployment"
TRIGGERS = "triggers"


@dataclass
class AgentPlan:
    kind: str  # key of agents.AGENT_CLASSES
    name: str
    spec: dict


@dataclass
class WorldPlan:
    info: WorldInfo
    ticks: int
    agents: list[AgentPlan] = field(default_factory=list)
    shards: dict[str, list[str]] = field(default_factory=dict)  # sharded population -> its shards' agents

    def columns(self) -> list[tuple[str, str]]:
        """(agent, metric) in the order the metrics table uses: a sharded population's
        merged metrics come first, where the population would be, then each shard's."""
        out = []
        for a in self.agents:
            pop = source_of(a.name)
            if pop != a.name and a.name == self.shards[pop][0]:
                out += [(pop, m) for m in AGENT_CLASSES[a.kind].METRICS]
            out += [(a.name, m) for m in AGENT_CLASSES[a.kind].METRICS]
        return out

    def kinds(self) -> dict[str, str]:
        """Agent -> its kind, a sharded population's merged name included."""
        kinds = {a.name: a.kind for a in self.agents}
        return kinds | {pop: kinds[shards[0]] for pop, shards in self.shards.items()}

    def metric_info(self, metric: str) -> dict:
        """``AGENT.METRIC`` -> its agent, the agent's kind, the metric, its unit and meaning."""
        agent, name = metric.split(".", 1)
        kind = self.kinds()[agent]
        unit, meaning = AGENT_CLASSES[kind].METRICS[name]
        return {"agent": agent, "kind": kind, "metric": name, "unit": unit, "meaning": meaning}

    def merge_shards(self, metrics: dict[str, dict[str, float]]) -> tuple[dict, dict]:
        """(the world's metrics with each sharded population merged from its shards and
        the shards left out, the same with the shards too)."""
        if not self.shards:
            return metrics, metrics
        merged = {pop: merge_metrics([metrics[s] for s in shards]) for pop, shards in self.shards.items()}
        world, full = {}, {}
        for name, m in metrics.items():
            pop = source_of(name)
            if pop != name:
                if name == self.shards[pop][0]:
                    world[pop] = full[pop] = merged[pop]
                full[name] = m
            else:
                world[name] = full[name] = m
        return world, full


def build_plan(pb: Playbook, runbook: dict | None, seed: int, duration: float | None = None,
               tick: float | None = None, shards: int | None = None, console: bool = False) -> WorldPlan:
    """``shards``: split every population into this many shards (at most one per client),
    instead of the playbook's ``shards`` setting. ``console``: the operator is a human
    team acting through a console, not the runbook."""
    data = copy.deepcopy(pb.data)
    split: dict[str, list[dict]] = {}
    for p in data["populations"]:
        count = min(int(p["clients"]), int(shards if shards is not None else p["shards"]))
        split[p["name"]] = shard_specs(p, count) if count > 1 else [p]
    members = {pop: [s["name"] for s in parts] for pop, parts in split.items()}
    dt = float(tick or data["clock"]["tick"])
    total = float(duration or data["clock"]["duration"])
    info = WorldInfo(dt=dt, start_s=float(data["clock"]["start"]), seed=int(seed))
    mon = data["monitoring"]
    telemetry: dict[str, list[str]] = {}
    for metric in mon["observe"]:
        agent, m = metric.split(".", 1)
        telemetry.setdefault(agent, []).append(m)
    subscribers: dict[str, list[str]] = {}
    for item in data["populations"] + data["services"]:
        deps = list(item.get("depends_on") or [])
        rec = item.get("recycling") or {}
        deps += [rec[k] for k in ("breaks_when", "needs") if rec.get(k)]
        deps += [d for d in ((item.get("leases") or {}).get("store"), (item.get("health_checks") or {}).get("network"),
                             (item.get("cache") or {}).get("store")) if d]
        for d in dict.fromkeys(deps):
            subscribers.setdefault(d, []).extend(members.get(item["name"], [item["name"]]))
    every = max(1, round(mon["telemetry_every"] / dt))
    # Pooled populations start connected: their connections already occupy the devices' tables.
    initial: dict[str, dict[str, int]] = {}
    for parts in split.values():
        for p in parts:
            if p["mode"] == "pooled":
                for d in p["path"]:
                    initial.setdefault(d, {})[p["name"]] = int(p["clients"])
    # Who sends to a sharded population sends to every shard: (shard, its share of the clients).
    sharded = {pop: [(s["name"], s["clients"] / sum(x["clients"] for x in parts)) for s in parts]
               for pop, parts in split.items() if len(parts) > 1}

    # Every agent is wired to the same world; what differs is its own dependants and telemetry.
    # Monitoring publishes its view to whatever acts on it: the operator, the world's
    # controllers, and the triggers if one of them waits for a condition.
    watchers = (OPERATOR, *(c["name"] for c in data["controllers"]),
                *((TRIGGERS,) if any(t.get("when") for t in data["triggers"]) else ()))
    world = Wiring(health_subscribers=(), monitor=MONITORING, telemetry=(), telemetry_every=every,
                   operators=watchers, deployment=DEPLOYMENT, shards=sharded, initial_connections={})

    def wired(spec: dict, name: str, logical: str | None = None, **own) -> dict:
        """``spec`` with its wiring; ``logical``: the population a shard is part of."""
        reports = telemetry.get(logical or name, [])
        return spec | {"_wiring": replace(world, health_subscribers=tuple(subscribers.get(logical or name, [])),
                                          telemetry=tuple(metrics_needed(reports) if logical else reports), **own)}

    def add(kind: str, name: str, spec: dict, **how) -> None:
        plan.agents.append(AgentPlan(kind, name, wired(spec, name, **how)))

    plan = WorldPlan(info=info, ticks=int(round(total / dt)), shards={p: members[p] for p in sharded})
    add("automation", TRIGGERS, {"triggers": data["triggers"], "faults": data["faults"]})
    for d in data["devices"]:
        add("device", d["name"], d, initial_connections=initial.get(d["name"], {}))
    for s in data["services"]:
        add("service", s["name"], s)
    for p in data["populations"]:
        for s in split[p["name"]]:
            add("population", s["name"], s, logical=p["name"] if len(split[p["name"]]) > 1 else None)
    add("monitoring", MONITORING, mon)
    add("deployment", DEPLOYMENT, data["deployment"] | {"catalogue": data["mitigations"]})
    add("status", "status", data["status"])
    for c in data["controllers"]:
        add("controller", c["name"], c)
    rules = (runbook or {}).get("rules") or []
    add("operator:console" if console else "operator:runbook" if rules else "operator:none", OPERATOR, {"rules": rules})
    return plan
