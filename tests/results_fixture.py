"""Short runs whose results must not change when the engine only gets faster, and their
digests as recorded from the revision named in the fixture (the one before the speed
work of issue 17).

    PYTHONPATH=<a checkout of that revision> python tests/results_fixture.py tests/fixtures/results.json

records them again (the runs are played by whatever ``orchestrator`` comes first on
PYTHONPATH); ``tests/test_results_unchanged.py`` plays them with this checkout and
compares. A deliberate change of the model's results is listed in the fixture's
``changed_since`` (run -> the new digests of the files and metrics columns it changed,
and why), or re-records the fixture from
the new revision, and says so.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLAYBOOKS = HERE / "playbooks"

#: The files of a run directory that hold its results (meta.json holds wall times and versions).
RESULT_FILES = ("metrics.csv", "events.jsonl", "score.json", "attribution.json")


def _stampede() -> dict:
    """A cache whose clients evict on error, flushed, in front of a store whose queue outlasts
    the cache's timeout: the stampede sustains itself (tests/test_cache.py)."""
    return {
        "name": "stampede", "title": "a cache in front of a store",
        "clock": {"start": "00:00", "tick": "1s", "duration": "12m"},
        "services": [{"name": "cache", "cache": {"store": "db", "keys": 100_000, "zipf": 1.0, "ttl": "1h",
                                                 "evict_on_error": True, "timeout": "2s"}},
                     {"name": "db", "capacity": 1000, "queue": {"limit": "3s"}}],
        "populations": [{"name": "clients", "clients": 5000, "rate": 1.0, "mode": "per_request", "target": "cache",
                         "request": {"timeout": "2s"}, "retry": {"max_attempts": 3, "base": "1s"}}],
        "triggers": [{"name": "trigger", "at": "00:05", "effects": [{"target": "cache", "op": "flush_cache", "args": {}}]}],
    }


#: name -> orchestrator.run's arguments (a dict playbook is written to a file first)
RUNS: dict[str, dict] = {
    "us-east-1-2021 historical": {"playbook": "us-east-1-2021", "runbook": "historical", "duration": "45m"},
    "us-east-1-2021 protect-early, attribution": {"playbook": "us-east-1-2021", "runbook": "protect-early", "seed": 2,
                                                  "duration": "50m", "attribution": True},
    "us-east-1-2021 shards, 0.5 s ticks": {"playbook": "us-east-1-2021", "runbook": "none", "seed": 3, "shards": 2,
                                           "tick": "0.5s", "duration": "40m"},
    "us-east-1-2021 protection": {"playbook": "us-east-1-2021", "runbook": "none", "seed": 4, "duration": "40m",
                                  "sets": {"protection": True}},
    "us-east-1-2025 historical": {"playbook": "us-east-1-2025", "runbook": "historical", "duration": "80m"},
    "us-east-1-2015 historical": {"playbook": "us-east-1-2015", "runbook": "historical", "duration": "45m"},
    "leases": {"playbook": str(PLAYBOOKS / "lease_herd.yaml.j2")},
    "health checks": {"playbook": str(PLAYBOOKS / "flapping.yaml.j2")},
    "work queue": {"playbook": str(PLAYBOOKS / "metastable_queue.yaml.j2"), "duration": "40m"},
    "dns race": {"playbook": str(PLAYBOOKS / "dns_race.yaml.j2")},
    "retries": {"playbook": str(PLAYBOOKS / "retry_lab.yaml.j2")},
    "decorrelated jitter": {"playbook": str(PLAYBOOKS / "brooker_lab.yaml.j2")},
    "faults": {"playbook": str(PLAYBOOKS / "fault_lab.yaml.j2")},
    "relapse": {"playbook": str(PLAYBOOKS / "relapse.yaml.j2")},
    "cache stampede": {"playbook": _stampede()},
}

#: the runs the fast test subset plays (the others are marked slow)
FAST = ("leases", "retries", "cache stampede")


def play(name: str, out: Path):
    """Play run ``name`` into the new directory ``out``."""
    import orchestrator
    import yaml

    kw = dict(RUNS[name])
    if isinstance(kw["playbook"], dict):
        path = out.parent / (out.name + ".yaml.j2")
        path.write_text(yaml.safe_dump(kw["playbook"]), encoding="utf-8")
        kw["playbook"] = str(path)
    return orchestrator.run(out=out, **kw)


def digest(run_dir: Path) -> dict:
    """Each result file's sha256, and each metrics column's (to name what differs)."""
    import pandas as pd

    files = {f: hashlib.sha256((run_dir / f).read_bytes()).hexdigest() for f in RESULT_FILES if (run_dir / f).exists()}
    metrics = pd.read_csv(run_dir / "metrics.csv", dtype=str, keep_default_na=False)
    columns = {c: hashlib.sha256("\n".join(metrics[c]).encode()).hexdigest()[:16] for c in metrics.columns}
    return {"files": files, "columns": columns}


def recorded(fixture: dict, name: str) -> dict:
    """Run ``name``'s digests as ``fixture`` holds them now: as recorded, with the deliberate
    changes of results it lists since (``changed_since``: run -> digests and why) over them."""
    changed = fixture.get("changed_since", {}).get(name, {})
    runs = fixture["runs"][name]
    return {"files": {**runs["files"], **changed.get("files", {})}, "columns": {**runs["columns"], **changed.get("columns", {})}}


def record(path: Path, names=None, player=None) -> None:
    """Play runs ``names`` (RUNS) with ``player`` (play) and write their digests to ``path``."""
    import orchestrator

    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(orchestrator.__file__).parents[1],
                              capture_output=True, text=True).stdout.strip()
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(RUNS if names is None else names):
            out = Path(tmp) / f"run{i}"
            (player or play)(name, out)
            runs[name] = digest(out)
            print(name, "recorded", file=sys.stderr)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"revision": revision, "runs": runs}, indent=1, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    record(Path(sys.argv[1]))
