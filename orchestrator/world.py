"""From a validated playbook and runbook to a world's build plan: which agents exist,
with which section of the playbook, and how they are wired (health subscriptions,
telemetry, who the operators are). Hosting-independent."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from agents import AGENT_CLASSES, WorldInfo
from .playbook import Playbook

OPERATOR = "operator"


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

    def columns(self) -> list[tuple[str, str]]:
        """(agent, metric) in the order the metrics table uses."""
        return [(a.name, m) for a in self.agents for m in AGENT_CLASSES[a.kind].METRICS]


def build_plan(pb: Playbook, runbook: dict | None, seed: int, duration: float | None = None,
               tick: float | None = None) -> WorldPlan:
    data = copy.deepcopy(pb.data)
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
        for d in dict.fromkeys(deps):
            subscribers.setdefault(d, []).append(item["name"])
    every = max(1, round(mon["telemetry_every"] / dt))
    # Pooled populations start connected: their connections already occupy the devices' tables.
    initial: dict[str, dict[str, int]] = {}
    for p in data["populations"]:
        if p["mode"] == "pooled":
            for d in p["path"]:
                initial.setdefault(d, {})[p["name"]] = int(p["clients"])

    def wired(item: dict) -> dict:
        spec = dict(item)
        spec["_wiring"] = {"health_subscribers": subscribers.get(item["name"], []), "monitor": "monitoring",
                           "telemetry": telemetry.get(item["name"], []), "telemetry_every": every}
        return spec

    plan = WorldPlan(info=info, ticks=int(round(total / dt)))
    plan.agents.append(AgentPlan("automation", "triggers", {"triggers": data["triggers"]}))
    for d in data["devices"]:
        spec = wired(d)
        spec["_wiring"]["initial_connections"] = initial.get(d["name"], {})
        plan.agents.append(AgentPlan("device", d["name"], spec))
    plan.agents += [AgentPlan("service", s["name"], wired(s)) for s in data["services"]]
    plan.agents += [AgentPlan("population", p["name"], wired(p)) for p in data["populations"]]
    plan.agents.append(AgentPlan("monitoring", "monitoring", mon | {"_wiring": {"operators": [OPERATOR]}}))
    plan.agents.append(AgentPlan("deployment", "deployment", data["deployment"] | {"catalogue": data["mitigations"]}))
    plan.agents.append(AgentPlan("status", "status", data["status"]))
    rules = (runbook or {}).get("rules") or []
    plan.agents.append(AgentPlan("operator:runbook" if rules else "operator:none", OPERATOR,
                                 {"rules": rules, "_wiring": {"deployment": "deployment"}}))
    return plan
