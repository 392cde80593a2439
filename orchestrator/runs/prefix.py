"""Runs that share their beginning, played once.

The runs of one seed (and sweep point) of a comparison differ only in their runbook, and
a runbook changes the world only through what its operator sends: until the first tick at
which its operator does something that nobody acting would not (asks for an action), its
world is, bit for bit, the world in which nobody acts. So the **trunk**, that world, is
played once, and each runbook's operator is stepped beside it as a shadow, on the very
inbox the trunk's operator gets (an operator sees only what monitoring and the deployment
tool send it). A shadow whose output first differs from the trunk's operator's at tick t
**branches**: its run starts from the trunk's last checkpoint at or before t (the world,
the score so far and the shadow's own state, taken at the start of a tick every
``CHECKPOINT_S``, or more often in a short run) with its own operator, and plays on alone. A runbook without rules is the
trunk itself, played to the end; the trunk stops once every shadow has branched.

Each branch's run is identical to its run played whole (a test compares every built-in
scenario's runbooks, score for score); the ticks saved are those of the trunk that the
runs did not play again.
"""
from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass

from orchestrator.engine.world import OPERATOR
from orchestrator.hosting.inprocess import build_agent
from orchestrator.runs.runner import RunData, RunSpec, WorldRun, prepare
from reports import rundir

#: simulated seconds between the trunk's checkpoints, at most, and the most checkpoints a run
#: has (a short run's come closer): a branch replays at most that much of the trunk, and a
#: checkpoint of a large world costs about a dozen ticks (its state pickled)
CHECKPOINT_S = 300.0
CHECKPOINTS = 40


@dataclass
class Branch:
    """Where a run leaves the trunk: the trunk's state at the start of ``tick`` (its host's
    snapshot, its agents' states and its scorer pickled) and the run's own operator's state
    then. Plain bytes: it travels to another process as it is."""

    tick: int
    host: dict
    scorer: bytes
    operator: bytes


def trunk(specs: list[RunSpec], on_branch=None) -> tuple[dict[int, RunData], dict[int, Branch], int, int]:
    """Play the trunk of ``specs`` (runs of one seed, differing only in their runbook).
    Returns the runs it played whole (index -> run data: the first runbook without rules,
    which is the trunk), where each other run branches (index -> ``Branch``), the ticks
    played and the ticks of one run. ``on_branch(index, branch)``: called as each run
    branches, while the trunk plays on (so that the branch can start at once elsewhere)."""
    prepared = {i: prepare(s) for i, s in enumerate(specs)}
    plans = {i: got[3] for i, got in prepared.items()}
    rules = {i: _operator(plans[i]) for i in plans}
    quiet = [i for i in plans if rules[i].kind != "operator:runbook"]
    base = WorldRun(specs[quiet[0]], None, prepared=prepared[quiet[0]]) if quiet else \
        WorldRun(dataclasses.replace(specs[0], runbook="none"), None)
    info = base.plan.info
    shadows = {i: build_agent(rules[i].kind, OPERATOR, rules[i].spec, info) for i in plans if i not in quiet[:1]}
    reference = build_agent("operator:none", OPERATOR, _operator(base.plan).spec, info)
    branches: dict[int, Branch] = {}
    checkpoint = None

    def leave(i: int) -> None:  # (run i goes on alone from the last checkpoint)
        cp_tick, host, scorer, ops = checkpoint
        branches[i] = Branch(cp_tick, host, scorer, ops[i])
        del shadows[i]
        if on_branch is not None:
            on_branch(i, branches[i])

    every = max(1, min(round(CHECKPOINT_S / info.dt), base.plan.ticks // CHECKPOINTS))
    status = rundir.INTERRUPTED
    try:
        while not base.done and (shadows or quiet):
            t = base.tick
            if t % every == 0 and shadows:
                checkpoint = (t, base.host.frozen(), pickle.dumps(base.scorer),
                              {i: pickle.dumps(s.state_to_serialise()) for i, s in shadows.items()})
            inbox = base.host.inbox(OPERATOR)
            expected = reference.step(t, inbox)
            for i in list(shadows):
                if shadows[i].step(t, inbox) != expected:
                    leave(i)
            if not shadows and not quiet:
                break
            base.step()
        status = rundir.COMPLETE if base.done else rundir.INTERRUPTED
    finally:
        base.close(status)
    ticks = base.tick
    for i in list(shadows):  # never acted: the trunk's world to the end, from its last checkpoint
        leave(i)
    whole = {quiet[0]: base.data()} if quiet else {}
    return whole, branches, ticks, base.plan.ticks


def branch(spec: RunSpec, at: Branch) -> RunData:
    """Play ``spec``'s run on from where it leaves the trunk."""
    run = WorldRun(spec, None)
    status = rundir.INTERRUPTED
    try:
        agents = pickle.loads(at.host["agents"])
        run.host.restore({**at.host, "agents": {n: s for n, s in agents.items() if n != OPERATOR}})
        run.host.agent(OPERATOR).restore(pickle.loads(at.operator))
        run.scorer = pickle.loads(at.scorer)
        while not run.done:
            run.step()
        status = rundir.COMPLETE
    finally:
        run.close(status)
    return run.data()


def _operator(plan):
    """The plan's operator agent (its kind: what rules it follows)."""
    return next(a for a in plan.agents if a.name == OPERATOR)


def play_shared(specs: list[RunSpec]) -> tuple[list[RunData], dict]:
    """Every run of ``specs`` in this process, the trunk played once; and what it saved:
    {"ticks": played, "whole": the ticks of every run played whole}."""
    whole, branches, ticks, _ = trunk(specs)
    played = ticks
    out: list[RunData | None] = [whole.get(i) for i in range(len(specs))]
    for i, at in branches.items():
        out[i] = branch(specs[i], at)
        played += int(out[i].meta["ticks_done"]) - at.tick
    total = sum(int(d.meta["ticks_done"]) for d in out)
    return out, {"ticks": played, "whole": total}
