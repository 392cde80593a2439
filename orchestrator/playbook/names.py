"""The names a playbook's parts go by and refer to one another by: every agent it builds
(by kind), and what the cross-checks and effects check a reference against."""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import Issue, closest_first

#: kinds of agent that send telemetry to monitoring
TELEMETRY_KINDS = ("device", "service", "population", "controller")
KIND_OF_SECTION = {"devices": "device", "services": "service", "populations": "population",
                   "controllers": "controller"}


def agent_names(data: dict) -> dict[str, str]:
    """Every agent a playbook builds: name -> kind."""
    out = {}
    for section, kind in KIND_OF_SECTION.items():
        for item in data.get(section) or []:
            out[item["name"]] = kind
    out.update({"monitoring": "monitoring", "deployment": "deployment", "status": "status", "triggers": "automation"})
    return out


@dataclass
class Names:
    """The names a playbook's parts refer to one another by."""
    devices: set
    services: set
    populations: set
    health_sources: set  # what a depends_on or a recycling condition may read: populations and services
    kinds: dict  # agent name -> kind, as effects address them
    parts: dict  # what an effect may name besides agents: devices, services, triggers, faults
    issues: list

    def check_path(self, path: list, loc: str) -> None:
        for j, hop in enumerate(path):
            if hop not in self.devices:
                self.issues.append(Issue(f"{loc}[{j}]", hop,
                                         f"a device pool ({closest_first(hop, self.devices)})"))


