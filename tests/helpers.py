"""Small helpers shared by the tests: build and step worlds in process."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

import orchestrator
from orchestrator.hosting.inprocess import InProcessHost
from orchestrator.playbook.loader import load_playbook
from orchestrator.engine.world import build_plan

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


def play(tmp_path: Path, world: dict, rules: list | None = None, **kw):
    """Run ``world`` (a playbook as a dict) with a runbook of ``rules`` into ``tmp_path``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "world.yaml.j2").write_text(yaml.safe_dump(world))
    book = tmp_path / "rules.yaml"
    book.write_text(yaml.safe_dump({"name": "rules", "rules": rules or []}))
    kw.setdefault("out", tmp_path / "run")
    return orchestrator.run(str(tmp_path / "world.yaml.j2"), runbook=str(book), seed=3, **kw)


def at(r, clock: str, length: int = 60):
    """The metrics of the ``length`` seconds from ``clock`` on."""
    i = r.metrics.index[r.metrics["clock"] == clock][0]
    return r.metrics.iloc[i:i + length]


def serve(args: list[str], out: Path):
    """`gameday serve ARGS --out OUT` in a subprocess; returns (process, tokens.json) once
    the session has written its tokens."""
    import json
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", *args, "--out", str(out)],
                            cwd=HERE.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "tokens.json").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the session did not start"
        time.sleep(0.2)
    time.sleep(0.2)  # (written atomically enough: one small file, read after its size settles)
    return proc, json.loads((out / "tokens.json").read_text())


def stop(proc, clients) -> None:
    """Close the test's console clients and kill a `gameday serve` still running."""
    for c in clients:
        c.close()
    if proc.poll() is None:
        proc.kill()
        proc.communicate()
