"""Running a world: load -> build -> host -> step, journalling every tick."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from reports.rundir import RunData, load_run
from .clock import PacedClock, SimulatedClock
from .errors import HostingError, InvalidPlaybook, Issue
from .hosting import InProcessHost
from .journal import RunWriter, check_out_dir
from .playbook import MAX_TICK_S, MAX_TICKS, Playbook, builtin_runbooks, coerce_value, load_playbook, load_runbook, parse_yaml, read_text
from .scoring import Scorer
from .world import build_plan


@dataclass
class RunSpec:
    playbook: str = "us-east-1-2021"
    runbook: str | None = None  # None: the playbook's "historical" runbook if it has one, else "none"
    seed: int = 1
    sets: dict | None = None
    duration: float | None = None
    tick: float | None = None
    shards: int | None = None  # split every population into this many shards (None: as the playbook says)


def read_vars_file(path: str) -> dict:
    text = read_text(Path(path), InvalidPlaybook)
    doc = parse_yaml(text, path, InvalidPlaybook, allow_empty=True, stage="vars file",
                     expected="a mapping of variable -> value")
    return doc or {}


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
    runbook = spec.runbook or ("historical" if "historical" in builtin_runbooks(pb.name) else "none")
    rb_text, rb = load_runbook(runbook, pb)
    issues = []
    if spec.tick is not None and not 0 < spec.tick <= MAX_TICK_S:
        issues.append(Issue("--tick", spec.tick, f"a duration > 0 and <= {MAX_TICK_S:g} s"))
    if spec.shards is not None and (not isinstance(spec.shards, int) or isinstance(spec.shards, bool) or spec.shards < 1):
        issues.append(Issue("--shards", spec.shards, "an integer >= 1"))
    if spec.duration is not None and spec.duration <= 0:
        issues.append(Issue("--duration", spec.duration, "a duration > 0"))
    if not isinstance(spec.seed, int) or isinstance(spec.seed, bool) or spec.seed < 0:
        issues.append(Issue("seed", spec.seed, "an integer >= 0"))
    if not issues:
        ticks = (spec.duration or pb.data["clock"]["duration"]) / (spec.tick or pb.data["clock"]["tick"])
        if ticks > MAX_TICKS:
            issues.append(Issue("--duration / --tick", round(ticks), f"at most {MAX_TICKS:,} ticks per run"))
    if issues:
        raise InvalidPlaybook("options", "options", issues)
    plan = build_plan(pb, rb, spec.seed, spec.duration, spec.tick, spec.shards)
    return pb, rb_text, rb, plan


HOSTINGS = ("inprocess", "ray")


def make_host(plan, hosting: str, placement: str = "kind", address: str | None = None, snapshot_every: int | None = None):
    """In process (batch runs, tests), or on Ray actors exchanging ZeroMQ messages."""
    if hosting == "inprocess":
        return InProcessHost(plan)
    if hosting == "ray":
        from .ray_hosting import SNAPSHOT_EVERY, RayHost  # Ray is imported only when it is used

        every = SNAPSHOT_EVERY if snapshot_every is None else snapshot_every
        return RayHost(plan, placement=placement, address=address, snapshot_every=every)
    raise ValueError(f"hosting {hosting!r}: expected one of {', '.join(HOSTINGS)}")


def execute(spec: RunSpec, out: Path, progress: bool = False, clock=None, hosting: str = "inprocess",
            placement: str = "kind", address: str | None = None, speed: float | None = None,
            snapshot_every: int | None = None) -> RunData:
    """``speed``: simulated seconds per wall second (None: as fast as possible).
    ``snapshot_every``: ticks between the Ray hosts' snapshots (None: the default; 0: off)."""
    pb, rb_text, rb, plan = prepare(spec)
    if speed is not None:
        clock = PacedClock(plan.info.dt, speed)
    meta = {"playbook": pb.name, "playbook_source": pb.source, "runbook": rb["name"], "seed": spec.seed,
            "variables": pb.variables, "duration_s": plan.ticks * plan.info.dt, "hosting": hosting,
            "placement": placement if hosting == "ray" else None, "speed": speed or "max",
            "shards": {pop: len(parts) for pop, parts in plan.shards.items()},
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    check_out_dir(out)  # before starting any actor
    host = make_host(plan, hosting, placement, address, snapshot_every)
    try:
        writer = RunWriter(out, plan, meta, pb.text, rb_text)
    except BaseException:
        _close(host)
        raise
    scorer = Scorer(pb.data, plan.info.dt, plan.info.start_s)
    clock = clock or SimulatedClock()
    status = "interrupted"
    wall0 = time.perf_counter()
    bar = _progress(plan.ticks, plan.info.dt) if progress else None
    try:
        for _ in range(plan.ticks):
            clock.wait_for(host.tick)
            res = host.step()
            world, full = plan.merge_shards(res.metrics)
            milestones = scorer.update(res.tick, world, res.events)
            writer.write_tick(res.tick, full, res.events + milestones)
            if bar is not None:
                bar.update(1)
        status = "complete"
    except HostingError as e:
        status = "failed"
        raise HostingError(f"{e}; the run directory {out} holds the ticks done before") from None
    finally:
        if bar is not None:
            bar.close()
        writer.meta["wall_seconds"] = round(time.perf_counter() - wall0, 3)
        writer.meta["rejected_frames"] = host.rejected_frames
        if hosting == "ray":
            writer.meta["snapshot_every"] = host.snapshot_every
            writer.meta["host_restarts"] = host.restarts
        writer.close(status, scorer.score())
        _close(host)
    return load_run(out)


def _close(host) -> None:
    close = getattr(host, "close", None)
    if close is not None:
        close()


def _progress(ticks: int, dt: float):
    from tqdm import tqdm

    # delay: only runs longer than a couple of seconds show a bar; disable=None: not on a pipe
    return tqdm(total=ticks, unit="tick", delay=2.0, disable=None, leave=False, desc="simulating",
                bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} ticks [{elapsed}<{remaining}]")
