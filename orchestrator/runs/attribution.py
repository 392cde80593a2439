"""Which action broke the loop, by counterfactual (docs/explanation/scoring.md, "Which action broke the loop").

The question an after-action review asks is "what would have happened without it?".
For each action that took effect before the loop broke (the ``MAX_ACTIONS`` distinct
ones that took effect last), the world is played again from its exact state at the end
of the tick in which the action first took effect, with that action's effects withheld
from then on (the ``apply`` messages it sends are dropped before anyone receives them,
each time it takes effect again), everything else as recorded: the runbook (which still
asks for it, counts it as asked in its ``done`` conditions, and acts on what it sees), a team's commands, a facilitator's faults. Each counterfactual is
played until its loop is confirmed broken (a relapse after that is not looked for), or
for at most ``LOOKAHEAD_S`` past the time the run's own loop broke (and its hold), or to
the run's horizon: an action without which the loop was still unbroken an hour after
it broke in the run was needed, and knowing how much longer it would have taken is not
worth hours of play.

The action without which the loop breaks latest (or not at all) broke it; an action
without which the loop breaks no later than ``slack`` (the loop's hold period, at
least 5 minutes: worlds are random and their draws diverge) did not matter, and one
without which it breaks more than ``slack`` sooner delayed the break (it is named so).
When no action mattered, the finding says so rather than naming one.

The world's states at those ticks come from snapshots taken during the run (in-process
hosting), or from playing the recording again in process to them (any hosting gives
the same results). The result is written to ``attribution.json`` in the run
directory, so reports keep reading only the run directory.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from agents.operator import by_the_team
from reports import rundir
from reports.rundir import read_events

from reports.files import write_json_atomic
from orchestrator.errors import RunDirectoryError
from orchestrator.runs.runner import WorldRun, recording
from reports.timefmt import format_clock, parse_clock

MAX_ACTIONS = 3  # counterfactuals per run: each costs up to LOOKAHEAD_S past the action's own time to the loop
LOOKAHEAD_S = 3600.0
MIN_SLACK_S = 300.0
FILE = rundir.ATTRIBUTION


def replaying(run_dir: Path) -> tuple[WorldRun, dict[int, list[dict]]]:
    """A recorded world to play again in process without a run directory, with its score,
    to the ticks the run did; and its recorded inputs (tick -> events to ``feed``)."""
    meta, injections, takeovers, spec = recording(run_dir)
    if takeovers:
        raise RunDirectoryError(f"{run_dir} is a fork: its counterfactuals are not played (attribute its original)")
    return WorldRun(spec, None), injections


def play_tick(run: WorldRun, injections: dict[int, list[dict]]) -> list[dict]:
    """One tick of a replay, its recorded inputs fed first; returns the tick's events."""
    run.feed(injections.get(run.tick, []))
    return run.step().events


def candidates(events: list[dict], loop_tick: int, limit: int = MAX_ACTIONS) -> tuple[list[dict], list[str]]:
    """The actions to play without: of the actions that took effect before the tick the
    loop holds broken from, the ``limit`` distinct ones that took effect last (latest
    first: a repeated action does not crowd out the others), each at its first taking
    effect, from which it is withheld; and the names of those left untested."""
    effective = [e for e in events if e.get("event") == "action_effective" and int(e["tick"]) < loop_tick
                 and by_the_team(e)]
    first: dict[str, dict] = {}
    for e in sorted(effective, key=lambda e: int(e["tick"])):
        first.setdefault(e["action"], e)
    last = {e["action"]: int(e["tick"]) for e in sorted(effective, key=lambda e: int(e["tick"]))}
    picks = sorted(first.values(), key=lambda e: -last[e["action"]])
    return picks[:limit], [e["action"] for e in picks[limit:]]


def attribute(run_dir: Path, snapshots: dict[int, dict] | None = None, limit: int = MAX_ACTIONS) -> dict:
    """Play the counterfactuals of a finished run and return what ``attribution.json``
    holds. ``snapshots``: tick -> ``WorldRun.state()`` at the end of that tick, taken
    during the run; the ticks missing are reached by playing the recording again."""
    run_dir = Path(run_dir)
    score = json.loads((run_dir / rundir.SCORE).read_text(encoding="utf-8"))
    meta = json.loads((run_dir / rundir.META).read_text(encoding="utf-8"))
    dt = float(meta["tick_s"])
    horizon = int(meta["ticks_done"])
    out: dict = {"method": "counterfactual", "max_actions": limit, "horizon": format_clock_of(meta, horizon),
                 "counterfactuals": [], "breaker": None, "needed": []}
    lb = score["loop_broken"]
    if not score.get("loop_formed"):
        out["text"] = "No feedback loop formed: there is nothing to attribute."
        return out
    if not lb.get("reached"):
        out["text"] = "The loop was not broken at the end of the run: there is nothing to attribute."
        return out
    loop_tick = round(lb["seconds_after_start"] / dt)
    out["loop_broken"] = lb["clock"]
    picks, untested = candidates(read_events(run_dir).to_dict("records"), loop_tick, limit)
    out["untested"] = untested
    if not picks:
        out["text"] = f"No action took effect before the loop broke at {lb['clock']}: it broke by itself."
        return out
    replay, injections = replaying(run_dir)
    try:
        hold_s = float(replay.pb.data["scoring"]["loop"]["hold"])
        slack_s = max(MIN_SLACK_S, hold_s)
        out["slack_s"] = slack_s
        until = min(horizon, loop_tick + round((hold_s + LOOKAHEAD_S) / dt) + 1)
        states = dict(snapshots or {})
        wanted = sorted({int(e["tick"]) for e in picks} - set(states))
        for t in wanted:  # play the recording again (in order) to the ticks no snapshot covers
            while replay.tick <= t:
                play_tick(replay, injections)
            states[t] = replay.state()
        for e in picks:
            t = int(e["tick"])
            replay.restore(states[t])
            replay.withhold(e["action"])
            broke_at = None
            while replay.tick < until:
                changes = play_tick(replay, injections)
                replay.withhold(e["action"])  # (asked for again and taking effect again: still without it)
                confirmed = [c for c in changes if c["event"] == "milestone" and c["milestone"] == "loop_broken"]
                if confirmed:
                    broke_at = int(confirmed[0]["at_tick"])
                    break
            later_s = math.inf if broke_at is None else (broke_at - loop_tick) * dt
            out["counterfactuals"].append({
                "action": e["action"], "took_effect": format_clock_of(meta, t), "tick": t,
                "loop_broken_without": None if broke_at is None else format_clock_of(meta, broke_at),
                "played_until": format_clock_of(meta, replay.tick),
                "later_by_s": None if math.isinf(later_s) else later_s, "mattered": later_s > slack_s,
                "delayed": later_s < -slack_s})
    finally:
        replay.close(rundir.INTERRUPTED)  # (its score is not read: the counterfactuals are)
    needed = [c for c in out["counterfactuals"] if c["mattered"]]
    delayed = [c for c in out["counterfactuals"] if c["delayed"]]
    out["needed"] = [c["action"] for c in needed]
    out["delayed"] = [c["action"] for c in delayed]
    if needed:
        out["breaker"], out["text"] = breaker(needed)
    else:  # (some actions may still have been needed together: only one at a time is withheld)
        out["text"] = (f"No single action broke the loop: without any one of the {len(picks)} latest before "
                       f"{lb['clock']}, it broke " + (f"no more than {slack_s / 60:.0f} minutes later." if delayed else
                                                      f"within {slack_s / 60:.0f} minutes of the same time."))
    for c in delayed:
        out["text"] += f" {c['action']} delayed the break: {describe(c)}."
    if untested and not needed:
        out["text"] += (f" Not tested (at most {limit} actions are): {', '.join(untested)}, which took effect "
                        f"earlier.")
    return out


def breaker(needed: list[dict]) -> tuple[str, str]:
    """(the action that broke the loop, the sentence) of the counterfactuals of the actions
    it could not have broken without: the latest-acting among those whose absence delays
    the loop the most, and the others named as needed too (an outsider trial's command
    line named the lift of a throttle alone, the report the throttle as well)."""
    worst = max(needed, key=lambda c: (math.inf if c["later_by_s"] is None else c["later_by_s"], c["tick"]))
    text = f"{worst['action']} broke the loop: {describe(worst)}."
    for c in needed:
        if c is not worst:
            text += f" {c['action']} was needed too: {describe(c)}."
    return worst["action"], text


def describe(c: dict) -> str:
    """``without X (in effect from 11:02) the loop was still unbroken at 19:00`` (or broke
    at ..., N minutes later, or sooner)."""
    head = f"without {c['action']} (in effect from {c['took_effect']})"
    if c["loop_broken_without"] is None:
        return f"{head} the loop was still unbroken at {c['played_until']}"
    if c["later_by_s"] < 0:
        return f"{head} the loop broke at {c['loop_broken_without']}, {-c['later_by_s'] / 60:.0f} minutes sooner"
    return f"{head} the loop broke only at {c['loop_broken_without']}, {c['later_by_s'] / 60:.0f} minutes later"


def format_clock_of(meta: dict, tick: int) -> str:
    return format_clock(parse_clock(meta["start_clock"]) + tick * float(meta["tick_s"]))


def write(run_dir: Path, snapshots: dict[int, dict] | None = None, limit: int = MAX_ACTIONS) -> dict:
    result = attribute(run_dir, snapshots, limit)
    write_json_atomic(Path(run_dir) / FILE, result)
    return result
