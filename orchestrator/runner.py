"""Running a world: load -> build -> host -> step, journalling every tick."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from reports.rundir import RunData, load_run
from .clock import SimulatedClock
from .errors import InvalidPlaybook, Issue
from .hosting import InProcessHost
from .journal import RunWriter
from .playbook import Playbook, coerce_value, load_playbook, load_runbook
from .scoring import Scorer
from .world import build_plan


@dataclass
class RunSpec:
    playbook: str = "us-east-1-2021"
    runbook: str = "historical"
    seed: int = 1
    sets: dict | None = None
    duration: float | None = None
    tick: float | None = None


def read_vars_file(path: str) -> dict:
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise InvalidPlaybook(path, "vars file", [Issue("file", path, f"a readable file ({e.strerror})")]) from None
    except yaml.YAMLError as e:
        raise InvalidPlaybook(path, "vars file", [Issue("yaml", str(e).splitlines()[0], "valid YAML")]) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise InvalidPlaybook(path, "vars file", [Issue("document", doc, "a mapping of variable -> value")])
    return doc


def parse_sets(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise InvalidPlaybook("--set", "variables", [Issue("--set", pair, "name=value")])
        k, v = pair.split("=", 1)
        out[k.strip()] = coerce_value(v)
    return out


def prepare(spec: RunSpec):
    """Everything that can fail on bad input happens here, before any file is written."""
    pb: Playbook = load_playbook(spec.playbook, spec.sets or {})
    rb_text, rb = load_runbook(spec.runbook, pb)
    if spec.tick is not None and spec.tick <= 0:
        raise InvalidPlaybook("--tick", "options", [Issue("--tick", spec.tick, "a duration > 0")])
    if spec.duration is not None and spec.duration <= 0:
        raise InvalidPlaybook("--duration", "options", [Issue("--duration", spec.duration, "a duration > 0")])
    plan = build_plan(pb, rb, spec.seed, spec.duration, spec.tick)
    return pb, rb_text, rb, plan


def execute(spec: RunSpec, out: Path, progress: bool = False, clock=None) -> RunData:
    pb, rb_text, rb, plan = prepare(spec)
    meta = {"playbook": pb.name, "playbook_source": pb.source, "runbook": rb["name"], "seed": spec.seed,
            "variables": pb.variables, "duration_s": plan.ticks * plan.info.dt, "hosting": "inprocess",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    writer = RunWriter(out, plan, meta, pb.text, rb_text)
    host = InProcessHost(plan)
    scorer = Scorer(pb.data, plan.info.dt, plan.info.start_s)
    clock = clock or SimulatedClock()
    status = "interrupted"
    wall0 = time.perf_counter()
    bar = _progress(plan.ticks, plan.info.dt) if progress else None
    try:
        for _ in range(plan.ticks):
            clock.wait_for(host.tick)
            res = host.step()
            milestones = scorer.update(res.tick, res.metrics, res.events)
            writer.write_tick(res.tick, res.metrics, res.events + milestones)
            if bar is not None:
                bar.update(1)
        status = "complete"
    finally:
        if bar is not None:
            bar.close()
        writer.meta["wall_seconds"] = round(time.perf_counter() - wall0, 3)
        writer.meta["rejected_frames"] = host.rejected_frames
        writer.close(status, scorer.score())
    return load_run(out)


def _progress(ticks: int, dt: float):
    from tqdm import tqdm

    # delay: only runs longer than a couple of seconds show a bar; disable=None: not on a pipe
    return tqdm(total=ticks, unit="tick", delay=2.0, disable=None, leave=False, desc="simulating",
                bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} ticks [{elapsed}<{remaining}]")
