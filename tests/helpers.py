"""Small helpers shared by the tests: build and step worlds in process."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from orchestrator.hosting import InProcessHost
from orchestrator.playbook import load_playbook
from orchestrator.world import build_plan

HERE = Path(__file__).parent


def playbook_path(name: str) -> str:
    return str(HERE / "playbooks" / f"{name}.yaml.j2")


def step_world(playbook: str, sets: dict | None = None, seed: int = 1, duration: float | None = None,
               runbook: dict | None = None, tick: float | None = None) -> pd.DataFrame:
    """Run a world in process without a run directory; one row per tick, columns agent.metric."""
    pb = load_playbook(playbook, sets or {})
    plan = build_plan(pb, runbook, seed, duration, tick)
    host = InProcessHost(plan)
    rows = []
    for _ in range(plan.ticks):
        res = host.step()
        rows.append({f"{a}.{m}": v for a, ms in res.metrics.items() for m, v in ms.items()})
    return pd.DataFrame(rows)
