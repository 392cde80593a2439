"""Forking a recorded run at a decision point: play it again exactly up to tick T (its
own operator, its recorded commands), then hand the world to another runbook and play
on to the scenario's end. Up to T the fork is the recording, tick for tick; after T it
differs only where the new runbook acts differently.

The new runbook's operator takes over what the old one had seen (the observed view,
alarms, log answers, the actions asked and in effect). Its rules whose action was
already asked before T count as fired, so that an action is not asked twice; with the
very same rules, the whole rule state carries over.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from reports import rundir
from reports.files import write_json_atomic
from orchestrator.playbook.loader import load_playbook
from orchestrator.playbook.runbooks import load_runbook
from orchestrator.runs.runner import TAKEOVERS, execute, recording
from reports.timefmt import format_clock, parse_clock
from orchestrator.errors import InvalidInput, Issue, RunDirectoryError, setting

MEASURES = (("loop_broken", "loop broken"), ("backlog_drained", "backlog drained"),
            ("devices_healthy", "devices healthy"), ("first_customer_update", "first customer update"))


def at_tick(meta: dict, at: str) -> int:
    """``at`` as a tick of the run: a clock time (HH:MM[:SS]) of its simulated day."""
    dt, start = float(meta["tick_s"]), parse_clock(meta["start_clock"])
    try:
        t = round((parse_clock(at) - start) / dt)
    except ValueError:
        raise InvalidInput("gameday fork", "options", [Issue(setting("at"), at, "a clock time such as 09:30")]) from None
    ticks = int(meta["ticks_done"])
    if not 0 < t < ticks:
        raise InvalidInput("gameday fork", "options", [Issue(
            setting("at"), at, f"a time after {meta['start_clock']} and before the run's end at "
                        f"{format_clock(start + ticks * dt)}")])
    return t


def fork(run_dir: Path, at: str, runbook: str, out: Path) -> dict:
    """Write the fork into ``out``; returns the comparison with the original."""
    run_dir = Path(run_dir)
    meta, injections, takeovers, spec = recording(run_dir)
    try:
        original = rundir.read_json(run_dir, rundir.SCORE, "the run's score")
    except rundir.NotARunDirectory as e:
        raise RunDirectoryError(str(e)) from None
    if original is None:
        raise RunDirectoryError(f"{run_dir / rundir.SCORE}: missing; a fork compares its score with the original's")
    spec.duration = float(meta["duration_s"])  # play on to the scenario's end
    t_fork = at_tick(meta, at)
    pb = load_playbook(str(run_dir / rundir.PLAYBOOK))
    source = meta.get("playbook_source")
    # A runbook named is one of those beside the run's own playbook file, not beside its copy in the run.
    try:
        rb_text, rb = load_runbook(runbook, dataclasses.replace(pb, source=source) if source else pb)
    except InvalidInput as e:  # (the playbook file may have changed since: say which one the runbook met)
        raise type(e)(e.source, f"{e.stage}, against the playbook the run recorded, {Path(run_dir) / rundir.PLAYBOOK}, "
                                "which a fork plays", e.issues) from None
    # Up to the fork, the recording: its inputs and its own takeovers (a fork of a fork);
    # at the fork, the new runbook's, and a note in the journal.
    plays = {t: a for t, a in takeovers.items() if t < t_fork}
    plays[t_fork] = {"tick": t_fork, "runbook": rb["name"], "rules": rb.get("rules") or []}
    inputs = {t: recorded for t, recorded in injections.items() if t < t_fork}
    inputs[t_fork] = [{"tick": t_fork, "agent": "session", "event": "forked", "runbook": rb["name"],
                       "before": meta.get("runbook")}]
    forked = execute(spec, out, injections=inputs, takeovers=plays,
                     meta={"forked_from": str(run_dir.resolve()), "forked_at": at, "forked_at_tick": t_fork,
                           "runbook": rb["name"], "runbook_before_fork": meta.get("runbook"),
                           "variables": meta.get("variables", {}), TAKEOVERS: [plays[t] for t in sorted(plays)]},
                     files={rundir.RUNBOOK_BEFORE_FORK: Path(spec.runbook).read_text(encoding="utf-8"),
                            rundir.RUNBOOK: rb_text}).score
    stopped = stopped_early(meta)
    result = {"original": str(run_dir.resolve()), "fork": str(Path(out).resolve()), "at": at, "runbook": rb["name"],
              "runbook_before": meta.get("runbook"), "differences": differences(original, forked, stopped)}
    if stopped:
        result["original_stopped"] = stopped
    write_json_atomic(Path(out) / rundir.FORK, result)
    return result


def stopped_early(meta: dict) -> dict | None:
    """Where a run stopped before its scenario's end (Ctrl-C, a live session ended early, a
    failure), or None: its figures cover only that part, which a comparison must say."""
    done, planned = int(meta["ticks_done"]), int(meta.get("ticks_planned") or 0)
    if meta.get("status") == rundir.COMPLETE or done >= planned:
        return None
    clock = format_clock(parse_clock(meta["start_clock"]) + done * float(meta["tick_s"]))
    return {"status": meta.get("status"), "clock": clock, "ticks_done": done, "ticks_planned": planned}


def _did_not_hold(m: dict) -> str:
    """How a milestone that relapsed for good went ("" if it did not)."""
    return f"got there at {m['first_at']['clock']} but did not hold" if m.get("relapsed") and m.get("first_at") else ""


def _in_the_end(m: dict) -> str:
    """" in the end (...)" after "never" for a milestone that relapsed for good."""
    return f" in the end (it got there at {m['first_at']['clock']} but did not hold)" if _did_not_hold(m) else ""


def differences(original: dict, forked: dict, stopped: dict | None = None) -> list[dict]:
    """Each measure before and after the fork, with a sentence; ``stopped``: where the
    original stopped early (``stopped_early``), said first and wherever it matters."""
    out = []
    if stopped:
        out.append({"measure": "original stopped early", "original": stopped["clock"], "fork": None,
                    "text": f"the original stopped early ({stopped['status']} at {stopped['clock']}, "
                            f"{stopped['ticks_done']:,} of {stopped['ticks_planned']:,} ticks): its figures cover only "
                            "that part, the fork's the whole scenario"})
    never = f"had not got there when it stopped at {stopped['clock']}" if stopped else "never got there"
    for key, label in MEASURES:
        a, b = original.get(key) or {}, forked.get(key) or {}
        if not a and not b:
            continue
        rec = {"measure": label, "original": a.get("clock"), "fork": b.get("clock")}
        if a.get("reached") and b.get("reached"):
            delta = (b["seconds_after_start"] - a["seconds_after_start"]) / 60
            rec["minutes"] = round(delta, 1)
            word = "sooner" if delta < 0 else "later"
            rec["text"] = (f"{label} {abs(delta):.0f} minutes {word} ({a['clock']} -> {b['clock']})" if abs(delta) >= 0.5
                           else f"{label} at the same time ({a['clock']})")
        elif b.get("reached"):
            rec["text"] = f"{label} at {b['clock']}, where the original {_did_not_hold(a) or never}"
        elif a.get("reached"):
            rec["text"] = f"{label} never{_in_the_end(b)}, where the original got there at {a['clock']}"
        elif a.get("impaired") is False and b.get("impaired") is False:  # (nothing to reach in either)
            rec["text"] = f"{label}: never impaired in either (nothing to reach)"
        else:
            held = [f"the {which} {_did_not_hold(m)}" for which, m in (("fork", b), ("original", a)) if _did_not_hold(m)]
            rec["text"] = f"{label} in neither" + (f" ({'; '.join(held)})" if held else "")
        out.append(rec)
    ia, ib = original["impact"]["weighted_total"], forked["impact"]["weighted_total"]
    up_to = f" (the original's up to {stopped['clock']} only)" if stopped else ""
    out.append({"measure": "impact", "original": ia, "fork": ib,
                "text": f"impact {ib:.1f} weighted minutes against {ia:.1f}{up_to}"})
    return out
