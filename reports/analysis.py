"""What an after-action report says, computed from a run directory with pandas.

Everything here reads only the run directory (metrics.csv, events.jsonl, score.json,
the rendered playbook and runbook, meta.json), so a report can be rebuilt at any time,
also from a run that was killed halfway. The templates only lay out what this returns.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd
import yaml

from agents.base import PER_TICK
from agents.operator import by_the_team, rule_label
from agents.population import AMPLIFICATION_BASE, work_switch

from .impact import TurnedAway, failed_and_finished
from .rundir import (COMPLETE, EVENTS, MEASURES, META, METRICS, RESIDUE, RUNBOOK, STARTS_INCIDENT, BadRunDirectory, Event,
                     RunData, Runbook, run_file, unlike)
from .timefmt import (format_clock, format_delta as _delta, format_minutes, format_wait, format_wait_exact,
                      parse_clock, parse_duration)
from .summary import not_reached, posts_updates

IMPAIRED_ERROR_RATIO = 0.05  # a population is impaired while more than 5% of its requests fail for good
BLIND_VISIBILITY = 0.5  # monitoring is blind while under half of the observed metrics are fresh
SEEING_VISIBILITY = 0.9  # with this share of them fresh, what held in ground truth was seen
MIN_BLIND_S = 300.0  # shorter blindness (the first telemetry still on its way) is not a finding
WINDOW_S = 60.0  # rates are reported per minute


@dataclass
class Finding:
    title: str
    evidence: str
    kind: str  # monitoring_blind | rule_never_fired | refused | never_took_effect | collateral | loop_breaker | relapse |
    # held_briefly


@dataclass
class Analysis:
    title: str
    partial: bool
    status: str
    simulated_until: str
    summary: list[str]
    verdict: str
    measures: list[dict]  # measure, yours, par, vs_par
    impact: list[dict]  # population, failed_request_minutes, impaired_minutes, worst_error_ratio, by_attempts,
    #                     late_minutes (or None)
    weighted_impact: float | None
    backlog: list[dict]  # population, peak, peak_at, drained (the milestone's clock or None), shared (it names more), text
    timeline: list[dict]  # tick, clock, t_plus, what, detail, par
    findings: list[Finding]
    appendix: dict
    actions: list[dict] = field(default_factory=list)  # for chart markers: tick, clock, action
    notes: list[dict] = field(default_factory=list)  # a live team's notes, for chart markers: tick, clock, by, text
    scoring: dict = field(default_factory=dict)  # the playbook's scoring section: what the charts follow
    works: dict = field(default_factory=dict)  # population -> [(from tick, work)]: the playbook's, then set_work's
    loop_measure: str | None = None  # the name of the loop's measure the summary follows (Signal.name)


def _records(events: pd.DataFrame, path: Path) -> list[Event]:
    """Events (of the file ``path``) as dicts, without the NaN that pandas puts in other events' fields."""
    out = []
    for rec in events.to_dict("records"):
        out.append(Event(path, {k: v for k, v in rec.items() if not (isinstance(v, float) and math.isnan(v))}))
    return out


def _read_runbook(path: Path) -> dict:
    """runbook.yaml, the runbook as used ({} if it cannot be read); ``BadRunDirectory`` if it
    is not one as gameday writes it (``rundir.Runbook``)."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
    problem = unlike(doc, Runbook)
    if problem:
        raise BadRunDirectory(f"{path}: {problem}, as gameday writes the runbook as used")
    return doc


def _clock(seconds_after_midnight: float) -> str:
    """HH:MM:SS on a 24-hour dial, so the report's columns line up."""
    return format_clock(seconds_after_midnight % 86400, with_seconds=True)


FLAPPING = 4  # an alarm raised this many times or more is one line of the timeline (its firings counted)

#: event -> its timeline row's (what, detail), for the events whose row needs nothing but the event
#: (trigger, customer updates and actions taking effect are compared with par in ``analyse``)
TIMELINE_ROWS = {
    "alarm_raised": lambda e: (f"alarm: {e['alarm']}", f"on {e.get('metric', '')}"),
    "alarm_cleared": lambda e: (f"alarm cleared: {e['alarm']}",
                                "its data stale, not its value: monitoring has no fresh value of "
                                f"{e.get('metric', '')} (its when_stale: clear)" if e.get("stale") else ""),
    "action_requested": lambda e: (f"asked: {e['action']}", e["reason"]),
    "action_started": lambda e: (f"started: {e['action']}",
                                 f"lead time {format_minutes(float(e.get('lead_time_s', 0)), 0)}, "
                                 f"{int(e.get('steps', 0))} deployment step{'s' if int(e.get('steps', 0)) != 1 else ''}, "
                                 f"risk {e.get('risk', '')}"),
    "log_result": lambda e: ("log query answered", f"for {e.get('reply_to', '')}"),
    "fault_injected": lambda e: (f"fault injected: {e['fault']}", f"by the facilitator; {e.get('description', '')}"),
    "fault_lifted": lambda e: (f"fault lifted: {e['agent']}", "its duration was over"),
    "readmitted": lambda e: (f"readmitted: {e['agent']}", f"{float(e['share']):.0%} of its traffic let back"),
    "facilitator_message": lambda e: ("facilitator's message", e["text"]),
    "hint_released": lambda e: ("hint from the facilitator", e["text"]),
    "team_note": lambda e: (f"note by {e['by']}", e["text"]),
    "session_paused": lambda e: ("game day paused", "simulated time stood still meanwhile"),
    "session_resumed": lambda e: ("game day resumed", ""),
    "host_restarted": lambda e: (f"simulator: host {e['host']} restarted", e["reason"]),
    # the world's own automation (controllers)
    "scale_out": lambda e: (f"{e['agent']} scaled out {e['service']}",
                            f"asked for {int(e['instances'])} instances ({int(e['running'])} serving, "
                            f"{e['metric']} read {float(e['value']):.3g})"),
    "scale_in": lambda e: (f"{e['agent']} scaled in {e['service']}",
                           f"stopped {int(e['instances'])} of {int(e['running'])} instances"
                           + (f", withdrew {int(e['withdrawn'])} asked for" if e.get("withdrawn") else "")
                           + f" ({e['metric']} read {float(e['value']):.3g})"),
}


def milestone_label(key: str) -> str:
    """recovered:dns-lookups -> dns-lookups recovered; loop_broken -> loop broken."""
    return key[len("recovered:"):] + " recovered" if key.startswith("recovered:") else key.replace("_", " ")


def populations(metrics: pd.DataFrame) -> list[str]:
    """Populations in the metrics table (merged ones, not their shards)."""
    return [c[: -len(".error_ratio")] for c in metrics.columns if c.endswith(".error_ratio") and "#" not in c]


def impact_table(metrics: pd.DataFrame, dt: float, by_attempts=(), events: list[dict] = (),
                 by_attempts_from: dict | None = None) -> list[dict]:
    """Per population: its failed-request minutes (each minute from the start counts the
    share of the requests finished in it that failed for good, as the scorer counts them:
    ``impact.failed_and_finished``, with what actions held back, read from the run's
    ``events``), the minutes in which that share was above 5%, and the worst share over
    any minute. For the populations ``by_attempts`` (the score's ``counted_by_attempts``:
    retried without limit, so never failed for good), the share of their attempts that
    failed: throughout, or where ``by_attempts_from`` (the score's ``counted_by_attempts_from``)
    says, for one whose retry limit or work changed during the run."""
    rows = []
    window = max(1, round(WINDOW_S / dt))
    minute = pd.Series(range(len(metrics)), index=metrics.index) // window
    shed_from = TurnedAway.shed_from(list(events))
    zero = pd.Series(0.0, index=metrics.index)
    for pop in populations(metrics):
        shed = _stepped(metrics.index, False, shed_from.get(pop, []))
        counted = _stepped(metrics.index, pop in by_attempts,
                           [(c["tick"], c["by_attempts"]) for c in (by_attempts_from or {}).get(pop, [])])
        field = lambda f: metrics.get(f"{pop}.{f}", zero)  # noqa: E731
        attempts, requests = failed_and_finished(field, True, shed), failed_and_finished(field, False, shed)
        errors, final = (a.where(counted, r) for a, r in zip(attempts, requests))
        ok = final - errors
        per_minute = pd.DataFrame({"errors": errors, "final": final, "ticks": 1}).groupby(minute).sum()
        share = (per_minute["errors"] / per_minute["final"].where(per_minute["final"] > 0)).fillna(0.0)
        rolling_errors = errors.rolling(window).sum()  # whole minutes only
        rolling_final = rolling_errors + ok.rolling(window).sum()
        worst = (rolling_errors / rolling_final.where(rolling_final > 0)).max()
        rows.append({"population": pop,
                     "failed_request_minutes": float((share * per_minute["ticks"]).sum() * dt / 60.0),
                     "impaired_minutes": float(per_minute["ticks"][share > IMPAIRED_ERROR_RATIO].sum() * dt / 60.0),
                     "worst_error_ratio": 0.0 if pd.isna(worst) else float(worst), "by_attempts": pop in by_attempts,
                     "by_attempts_while": _while(counted, metrics) if pop in (by_attempts_from or {}) else None})
    return rows


def _stepped(index: pd.Index, first: bool, changes: list[tuple[int, bool]]) -> pd.Series:
    """A flag per tick of ``index``: ``first``, then each (tick, value) of ``changes`` from its tick on."""
    flag = pd.Series(first, index=index)
    for tick, on in changes:
        flag[flag.index >= tick] = on
    return flag


def _while(mask: pd.Series, metrics: pd.DataFrame) -> str:
    """When ``mask`` holds, in the run's clock: "from 00:07:00", "until 00:07:00", "00:05:00
    to 00:07:00", joined by commas."""
    clock = metrics["clock"].astype(str).tolist() if "clock" in metrics else [str(i) for i in range(len(mask))]
    said = []
    for first, last in stretches(mask):
        ends = last == len(mask) - 1
        said.append("throughout" if first == 0 and ends else f"from {clock[first]}" if ends
                    else f"until {clock[last + 1]}" if first == 0 else f"{clock[first]} to {clock[last + 1]}")
    return ", ".join(said)


def stretches(mask: pd.Series) -> list[tuple[int, int]]:
    """(first, last) row positions of each run of True."""
    out, start = [], None
    values = mask.to_numpy()
    for i, v in enumerate(values):
        if v and start is None:
            start = i
        elif not v and start is not None:
            out.append((start, i - 1))
            start = None
    if start is not None:
        out.append((start, len(values) - 1))
    return out


@dataclass
class _Reading:
    """A run as the report reads it: what every part of the analysis needs."""
    run: RunData
    dt: float
    start_s: float
    playbook: dict
    runbook: dict
    events: list[dict]
    score: dict
    partial: bool
    ticks_done: int
    par_s: dict[str, float]  # par key -> seconds after midnight
    actions: set  # the playbook's mitigations (par for these is the real team's action times)
    milestones_reached: dict[str, int]
    first_reached: dict[str, int]
    relapses: dict[str, list[int]]
    trigger: dict | None
    first_update: int | None  # tick of the first customer update
    scoring: dict  # the playbook's scoring section, as validated (``RunData.playbook``)
    works: dict  # population -> its work at the start, as validated
    loop: dict  # the playbook's scoring.loop
    effective: list[dict]  # action_effective events
    changes: list[dict]  # what changed the world: actions taking effect, triggers, faults injected (_changes)

    @classmethod
    def of(cls, run: RunData) -> _Reading:
        meta, m = run.meta, run.metrics
        dt = float(meta["tick_s"])  # (every run directory records it, with start_clock)
        playbook = run.playbook  # (as validated: every default filled in)
        events = _records(run.events, run_file(run.dir, EVENTS))
        score = run.score or {}
        if lost_rows(run):  # (metrics.csv lost its end: what is read must not reach past it; check_run warns)
            events, score = [e for e in events if e["tick"] < len(m)], {}
        scoring, works = playbook["scoring"], {p["name"]: p["work"] for p in playbook.get("populations") or []}
        loop = scoring["loop"]
        return cls(run, dt, parse_clock(meta["start_clock"]), playbook, _read_runbook(run_file(run.dir, RUNBOOK)),
                   events, score, meta.get("status") != COMPLETE or lost_rows(run) or m.empty, len(m),
                   dict(playbook.get("par") or {}),
                   {x.get("name") for x in playbook.get("mitigations") or []}, *milestone_history(events),
                   next((e for e in events if e["event"] in STARTS_INCIDENT), None),
                   next((e["tick"] for e in events if e["event"] == "status_posted"), None),
                   scoring, works, loop,
                   [e for e in events if e["event"] == "action_effective"], _changes(events))

    @property
    def m(self) -> pd.DataFrame:
        return self.run.metrics

    @property
    def meta(self) -> dict:
        return self.run.meta

    @property
    def trigger_tick(self) -> int | None:
        return self.trigger["tick"] if self.trigger else None

    @property
    def until(self) -> str:
        return _clock(self.start_s + self.ticks_done * self.dt)

    def at(self, tick: float) -> str:
        return _clock(self.start_s + float(tick) * self.dt)

    def t_plus(self, tick: float) -> str:
        return "" if self.trigger_tick is None else f"T{_delta((tick - self.trigger_tick) * self.dt)}"

    def vs(self, tick: float, clock_s: float) -> str:
        """How far ``tick`` came after (+) or before (-) a clock time."""
        return _delta(self.start_s + tick * self.dt - clock_s)

    @cached_property
    def works_over_run(self) -> dict[str, list[tuple[int, str]]]:
        """Each population's work over the run: [(from tick, perishable or durable)], the
        playbook's from tick 0, then each set_work applied (as the scorer follows it)."""
        out = {p: [(0, work)] for p, work in self.works.items()}
        for e in self.events:
            if (switch := work_switch(e)) and switch[0] in out:
                out[switch[0]].append((int(e["tick"]), switch[1]))
        return out

    @cached_property
    def signals(self) -> list[Signal]:
        """Every measure the loop milestone is defined on (``loop_signals``)."""
        return loop_signals(self.loop, self.m, self.dt, self.works_over_run) if self.ticks_done else []

    @cached_property
    def signal(self) -> Signal | None:
        """The loop's measure the report follows (``loop_signal``)."""
        return loop_signal(self.signals, self.m, self.trigger_tick)

    @cached_property
    def before_trigger(self) -> tuple[Signal, float] | None:
        """A measure of the loop already out of bounds over the minute before the trigger, and
        its value then (None: none was, no trigger, or it fired at the first tick): the world
        was failing before its incident."""
        if self.trigger_tick is None or self.trigger_tick < 1:
            return None
        first = max(0, self.trigger_tick - max(1, round(60 / self.dt)))
        for sig in self.signals:
            value = float(sig.series.iloc[first:self.trigger_tick].mean())
            if sig.out(value):
                return sig, value
        return None

    @cached_property  # a scan of the whole run; the summary and the timeline both need it
    def bad_tick(self) -> int | None:
        """The first tick after the trigger at which the loop's measure went out of bounds."""
        if self.trigger_tick is None or self.signal is None:
            return None
        out = self.m.index[(self.m.index >= self.trigger_tick) & self.signal.out(self.signal.series)]
        return int(out[0]) if len(out) else None


def lost_rows(run: RunData) -> bool:
    """metrics.csv holds fewer rows than meta.json says ticks were done: the file lost its end."""
    done = run.meta.get("ticks_done")
    return isinstance(done, int) and len(run.metrics) < done


def _title(meta: dict, fork_note: str = "") -> str:
    """What the run is: its playbook, runbook and seed; a live game day's team, and its seed."""
    if meta.get("team"):  # (a team plays without a runbook: its own actions)
        return f"team {meta['team']} - {meta.get('playbook')} - seed {meta.get('seed')} (a live game day)"
    return f"{meta.get('playbook')} - runbook {meta.get('runbook')}{fork_note} - seed {meta.get('seed')}"


def analyse(run: RunData) -> Analysis:
    r = _Reading.of(run)
    meta = run.meta
    appendix = {"playbook": meta.get("playbook"), "runbook": meta.get("runbook"), "seed": meta.get("seed"),
                "hosting": meta.get("hosting"), "status": meta.get("status"), "variables": meta.get("variables") or {},
                "versions": meta.get("versions") or {}, "started_at": meta.get("started_at"),
                "ticks": f"{r.ticks_done} of {meta.get('ticks_planned', '?')} ({r.dt:g} s each)"}
    title = _title(meta)
    if not r.ticks_done:  # (no row: nothing to figure from, and nothing said as if there were)
        return Analysis(title=title, partial=True, status=str(meta.get("status")), simulated_until=r.until,
                        summary=[f"{METRICS} holds no tick (its header alone): " + (
                            f"{META} says {meta['ticks_done']} ticks were done, but the file lost them"
                            if lost_rows(run) else "the run stopped before its first tick was written")
                            + ", so there are no figures to report."],
                        verdict="No verdict: no tick was recorded.", measures=[], impact=[], weighted_impact=None,
                        backlog=[], timeline=[], findings=[], appendix=appendix, scoring=r.scoring)
    impact, weighted, backlog = _impact(r)
    summary = _summary(r.trigger, r.trigger_tick, r.bad_tick, r.signal, r.events,
                       r.milestones_reached, r.relapses, r.score, weighted, backlog, r.at, r.dt, r.partial, r.until)
    if r.trigger is None and r.ticks_done:
        # (nothing was scored: still, a world that fails with no incident at all is said to)
        failing = [(sig, float(sig.out(sig.series).mean())) for sig in r.signals]
        failing = [(sig, share) for sig, share in failing if share >= 0.5]
        if failing:
            sig, share = failing[0]
            summary.append(f"Yet {sig.name} was out of bounds for {share:.0%} of the run: this world fails without "
                           f"an incident (check the playbook's capacities against its demand).")
    if r.before_trigger is not None:
        # (then the trigger's sentence cannot be taken at its word: the world was failing already)
        sig, value = r.before_trigger
        summary.insert(0, f"Before the trigger at {r.at(r.trigger_tick)}, {sig.name} was already out of bounds "
                          f"({sig.said(value)} over the minute before it, against {sig.said(sig.bound)}): this world "
                          f"was failing before its incident began, so what follows is not the trigger's doing alone "
                          f"(check the playbook's capacities against its demand).")
    if lost_rows(run):
        summary.insert(0, f"{METRICS} holds {r.ticks_done} of the {meta['ticks_done']} ticks {META} says were done (the "
                          f"file lost its end): this report covers those {r.ticks_done} ticks, without the run's score.")
    handovers = meta.get("takeovers") or []
    if handovers:  # a fork: say whose runbook played when, first
        summary.insert(0, f"This run is a fork of {meta.get('forked_from')}: runbook {meta.get('runbook_before_fork')} "
                          f"until {r.at(handovers[-1]['tick'])}, then {handovers[-1]['runbook']} (fork.json compares "
                          f"them).")
    fork_note = f" (a fork at {r.at(handovers[-1]['tick'])})" if handovers else ""
    return Analysis(title=_title(meta, fork_note),
                    partial=r.partial, status=str(meta.get("status")), simulated_until=r.until,
                    summary=summary, verdict=_verdict(r), measures=_measures(r), impact=impact, weighted_impact=weighted,
                    backlog=backlog, timeline=_timeline(r), findings=_findings(r), appendix=appendix,
                    actions=[{"tick": e["tick"], "clock": r.at(e["tick"]), "action": e["action"]} for e in r.effective],
                    notes=[{"tick": e["tick"], "clock": r.at(e["tick"]), "by": e["by"], "text": e["text"]}
                           for e in r.events if e["event"] == "team_note"],
                    scoring=r.scoring,
                    works=r.works_over_run, loop_measure=r.signal.name if r.signal is not None else None)


def _measures(r: _Reading) -> list[dict]:
    """The score beside par: each measure's clock time, relapses, and how far from par."""
    measures = []

    def measure(label: str, key: str, tick: float | None, missing: str = "not reached"):
        yours = r.at(tick) if tick is not None else missing
        if r.relapses.get(key):
            yours += f" (first {r.at(r.first_reached[key])}, relapsed {', '.join(r.at(t) for t in r.relapses[key])})"
        row = {"measure": label, "yours": yours, "par": _clock(r.par_s[key]) if key in r.par_s else "", "vs_par": ""}
        if tick is not None and key in r.par_s:
            row["vs_par"] = r.vs(tick, r.par_s[key])
        measures.append(row)

    measure("trigger", "trigger", r.trigger_tick)
    # (a playbook that can post no customer update has no such measure)
    if posts_updates(r.playbook) or r.first_update is not None:
        measure("first customer update", "first_customer_update", r.first_update)
    restored = r.score.get("demand_restored")  # (once an action held demand back)
    if restored is not None:
        measure("demand restored", "demand_restored",
                round(restored["seconds_after_start"] / r.dt) if restored["reached"] else None, "still held back")
    for key, tick in sorted(r.milestones_reached.items(), key=lambda kv: kv[1]):
        measure(milestone_label(key), key, tick)
    scored = scored_milestones(r.score)
    for key in dict.fromkeys([*r.relapses, *r.par_s, *scored]):
        if key not in r.milestones_reached and key not in MEASURES and key not in r.actions:
            m = scored.get(key) or {}
            missing = "loop never formed" if key == "loop_broken" and r.score.get("loop_formed") is False else not_reached(m)
            measure(milestone_label(key), key, None, missing)
    return measures


def scored_milestones(score: dict) -> dict[str, dict]:
    """Every milestone of a finished run's score, by its key (recovered:NAME for recoveries)."""
    out = {k: score[k] for k in ("loop_broken", "devices_healthy", "backlog_drained") if k in score}
    out.update({f"recovered:{name}": m for name, m in (score.get("recovered") or {}).items()})
    return out


def _impact(r: _Reading) -> tuple[list[dict], float | None, list[dict]]:
    """(impact per population, the weighted impact, the backlog of each durable population and the
    queue of each service the backlog milestone names)."""
    m = r.m
    weights = r.scoring["impact"]
    scored = r.score.get("impact") or {}
    impact = impact_table(m, r.dt, scored.get("counted_by_attempts") or (), r.events,
                          scored.get("counted_by_attempts_from")) if r.ticks_done else []
    late = scored.get("late_minutes") or {}
    for x in impact:
        x["late_minutes"] = late.get(x["population"])  # durable work waiting beyond steady state (the scorer's count)
    if "weighted_total" in scored:  # the scorer's, which counts late durable work too
        weighted = float(scored["weighted_total"])
    else:  # a run stopped before it was scored: its error-minutes only
        weighted = sum(x["failed_request_minutes"] * float(weights[x["population"]]) for x in impact
                       if x["population"] in weights) if weights else None
    backlog = []
    scope = r.scoring["backlog"]
    pops, queues = scope["populations"], scope["services"]
    named = [(f"the backlog of {p}", f"{p}.backlog", "requests") for p in pops] + \
            [(f"the queue of {q}", f"{q}.queue_backlog", "units of work") for q in queues]
    for what, col, unit in named:
        if col in m:
            drained = r.milestones_reached.get("backlog_drained")
            # the milestone is every backlog and queue it names at once: say so when it names more than this one
            others = [w for w, _, _ in named if w != what]
            if r.trigger_tick is None:
                text = "not scored: no trigger fired and no fault was injected"
            elif (r.score.get("backlog_drained") or {}).get("impaired") is False:  # under its threshold all along
                text = (f"never over the backlog milestone's threshold ({scope['threshold']:g} s of arrivals) after the "
                        f"trigger (nothing to drain)")
            elif not others:
                text = f"drained at {r.at(drained)}" if drained is not None else f"not drained by {r.until}"
            else:
                text = (f"the backlog milestone, which also needs {' and '.join(others)}, "
                        + (f"was reached at {r.at(drained)}" if drained is not None else f"was not reached by {r.until}"))
            backlog.append({"what": what[0].upper() + what[1:], "unit": unit,
                            "population": col.rsplit(".", 1)[0], "peak": int(m[col].max()) if r.ticks_done else 0,
                            "peak_at": r.at(int(m[col].idxmax())) if r.ticks_done else "",
                            "drained": r.at(drained) if drained is not None else None, "shared": bool(others),
                            "text": text})
    return impact, weighted, backlog


def _timeline(r: _Reading) -> list[dict]:
    """What happened, in order: the journal's events (``TIMELINE_ROWS``, and those compared
    with par), the ground truth the operators could not see yet, milestones and relapses."""
    timeline: list[dict] = []

    def add(tick: float, what: str, detail: str = "", par_key: str | None = None):
        row = {"tick": int(tick), "clock": r.at(tick), "t_plus": r.t_plus(tick), "what": what, "detail": detail, "par": ""}
        if par_key and par_key in r.par_s:
            row["par"] = f"{_clock(r.par_s[par_key])} ({r.vs(tick, r.par_s[par_key])} vs par)"
        timeline.append(row)

    history = {k: v for k, v in r.par_s.items() if k in r.actions}  # the real team's actions
    repeated: dict[str, list] = {}  # a trigger -> [its row, its firings, the last]: a repeating one is one row
    raised: dict[str, list[int]] = {}
    for e in r.events:
        if e["event"] == "alarm_raised":
            raised.setdefault(e["alarm"], []).append(e["tick"])
    # an alarm that fires and clears again and again is one line, not two a time
    flapping = {alarm: ticks for alarm, ticks in raised.items() if len(ticks) >= FLAPPING}
    for e in r.events:
        ev, tick = e["event"], e["tick"]
        if ev in ("alarm_raised", "alarm_cleared") and e["alarm"] in flapping:
            ticks = flapping[e["alarm"]]
            if ev == "alarm_raised" and tick == ticks[0]:
                add(tick, f"alarm flapping: {e['alarm']}", f"on {e.get('metric', '')}: fired {len(ticks)} times from "
                                                           f"{r.at(ticks[0])} to {r.at(ticks[-1])}, clearing in between")
        elif ev in TIMELINE_ROWS:
            add(tick, *TIMELINE_ROWS[ev](e))
        elif ev == "trigger" and e.get("trigger") in repeated:
            fired = repeated[e["trigger"]]
            fired[1:] = [fired[1] + 1, tick]
        elif ev == "trigger":  # par's trigger is the first one
            add(tick, "trigger", e["description"] or e["trigger"], "trigger" if tick == r.trigger_tick else None)
            repeated[e.get("trigger")] = [timeline[-1], 1, tick]
        elif ev == "status_posted":
            add(tick, "customer update posted", e["message"], "first_customer_update" if tick == r.first_update else None)
        elif ev == "action_effective":
            lead = (tick - e.get("asked_tick", tick)) * r.dt
            add(tick, f"took effect: {e['action']}", f"{format_wait(lead)} after it was asked")
            if e["action"] in history and r.trigger_tick is not None:
                real = history[e["action"]]
                timeline[-1]["par"] = (f"{_clock(real)} (T{_delta(real - r.start_s - r.trigger_tick * r.dt)}, the real "
                                       f"team's; {r.vs(tick, real)} vs theirs)")
    for row, n, last in repeated.values():
        if n > 1:
            row["detail"] += f" (it fired {n} times, the last at {r.at(last)})"
    if r.bad_tick is not None:
        add(r.bad_tick, f"ground truth: {r.signal.name} {'above' if r.signal.high_is_bad else 'below'} "
                        f"{r.signal.said(r.signal.bound)}", "what the operators could not yet see")
    for e in r.events:
        if e["event"] == "milestone":
            final = r.milestones_reached.get(e["milestone"]) == e["at_tick"]
            add(e["at_tick"], f"milestone: {milestone_label(e['milestone'])}",
                "" if final or r.relapses.get(e["milestone"]) is None else "it did not hold", e["milestone"] if final else None)
        elif e["event"] == "relapse":
            before = _last_before(r.changes, e["at_tick"])
            add(e["at_tick"], f"relapse: {milestone_label(e['milestone'])} no longer",
                f"{_relapse_what(e['milestone'])}" + (f", after {before['what']} ({r.at(before['tick'])})" if before else ""))
    timeline.sort(key=lambda row: row["tick"])
    return timeline


def _findings(r: _Reading) -> list[Finding]:
    m, dt, at = r.m, r.dt, r.at
    findings: list[Finding] = []
    if "monitoring.visibility" in m and r.ticks_done:
        blind = m["monitoring.visibility"] < BLIND_VISIBILITY
        runs = stretches(blind)
        total = float(blind.sum() * dt)
        if runs and total >= MIN_BLIND_S:
            first, last = max(runs, key=lambda run: run[1] - run[0])
            findings.append(Finding(
                f"Monitoring was blind for {format_minutes(total, 0)}",
                f"under {BLIND_VISIBILITY:.0%} of the observed metrics were fresh for {format_minutes(total, 0)} in all; "
                f"the longest stretch ran {at(first)}-{at(last + 1)} ({format_minutes((last - first + 1) * dt, 0)}), "
                f"lowest visibility {m['monitoring.visibility'].min():.0%}", "monitoring_blind"))
    # (a rule's conditions as they went from the trigger on: before it, a rule had nothing to answer)
    since = m.iloc[r.trigger_tick:] if r.trigger_tick is not None else m
    findings += _rules_never_fired(r.runbook, r.events, r.playbook, _as_monitoring_sees(since, r.run.columns, dt), dt, at)
    findings += _collateral(r.effective, m, dt, r.signal, at)
    for who, n in ((r.score.get("collateral") or {}).get("requests_turned_away_by") or {}).items():
        if n:
            findings.append(Finding(f"{who} turned away {n:,} attempts or requests",
                                    "attempts refused by its throttle (its callers' retries included) or requests held "
                                    "back by its lowered rate, for as long as it held", "collateral"))
    findings += refused_operations(r.events, at)
    findings += _never_took_effect(r.events, at, r.until)
    findings += _instances_that_never_came(r.events, m, at, r.until)
    findings += _relapses(r.relapses, r.first_reached, r.milestones_reached, r.changes, at, r.until)
    findings += _held_briefly(r.score, r.changes, dt, at, r.until)
    loop_at = r.milestones_reached.get("loop_broken")
    if r.run.attribution is not None:
        findings += _counterfactual_findings(r.run.attribution)
    else:
        breaker = _loop_breaker(r.effective, m, dt, r.loop, loop_at, r.playbook, r.signal)
        if breaker is not None:
            e, before, after = breaker
            findings.append(Finding(
                f"{e['action']} broke the loop",
                f"of the actions on the loop, it was the last to take effect ({at(e['tick'])}) before {r.signal.name} "
                f"began its final return to bounds; "
                f"it averaged {r.signal.said(before)} in the 5 minutes before it and {r.signal.said(after)} in the 5 "
                f"minutes after; "
                f"the loop condition held from {at(loop_at)} on (a heuristic: no counterfactual was played for this "
                + ("fork: a fork's counterfactuals are not played)" if r.meta.get("forked_from")
                   else "run, see `gameday run --attribution`)"), "loop_breaker"))
    return findings


def refused_operations(events: list[dict], at) -> list[Finding]:
    """The operations the world refused when they came (``apply_rejected``: an argument past
    what the model holds, a change its state could not take), one finding per part,
    operation and asker: a trigger refused so changes the incident itself, and nothing else
    would say it (the run goes on, and completes)."""
    refused: dict[tuple, list[dict]] = {}
    for e in events:
        if e["event"] == "apply_rejected":
            refused.setdefault((e["agent"], e.get("op"), e.get("by")), []).append(e)
    out = []
    for (agent, op, by), es in refused.items():
        when = at(es[0]["tick"]) if len(es) == 1 else f"{len(es)} times, from {at(es[0]['tick'])} to {at(es[-1]['tick'])}"
        out.append(Finding(f"{op} on {agent} was refused", f"asked by {by or 'the world'}, {when}: {es[0].get('reason')}; "
                                                           "the run went on without it", "refused"))
    return out


def _never_took_effect(events: list[dict], at, until: str) -> list[Finding]:
    """Each action started and not yet in effect when the run ended, and why: its steps kept
    failing (``step_failed``: the deployment path timed out, or the tooling was down), or it
    was still in its lead time or its steps. (Such an action read as harmless: nothing said it
    never happened.)"""
    started = {e["id"]: e for e in events if e["event"] == "action_started"}
    for e in events:
        if e["event"] == "action_effective":
            started.pop(e.get("id"), None)
    failed: dict[str, list[dict]] = {}
    for e in events:
        if e["event"] == "step_failed" and e.get("id") in started:
            failed.setdefault(e["id"], []).append(e)
    out = []
    for aid, e in started.items():
        fails = failed.get(aid, [])
        if fails:
            whys = sorted({f["why"] for f in fails})
            why = (f"its deployment steps failed {len(fails)} time{'s' * (len(fails) != 1)} ({'; '.join(whys)}), "
                   f"the last at {at(fails[-1]['tick'])}, with {int(fails[-1]['steps_left'])} of "
                   f"{int(e['steps'])} steps still to do")
        else:
            why = "it was still in its lead time or its deployment steps"
        out.append(Finding(f"{e['action']} never took effect",
                           f"asked by {e['by']} and started at {at(e['tick'])}, it was not in "
                           f"effect when the run ended at {until}: {why}", "never_took_effect"))
    return out


def _instances_that_never_came(events: list[dict], m: pd.DataFrame, at, until: str) -> list[Finding]:
    """Each autoscaler that asked for instances of which some had not come when the run ended,
    and why: its provisioning requests kept failing (the control plane's capacity, its path)."""
    out = []
    for agent in dict.fromkeys(e["agent"] for e in events if e["event"] == "scale_out"):
        waiting = m[f"{agent}.instances_waiting"]
        if m.empty or waiting.iloc[-1] <= 0:
            continue
        asks = [e for e in events if e["event"] == "scale_out" and e["agent"] == agent]
        sent, failed = int(m[f"{agent}.provision_requests"].sum()), int(m[f"{agent}.provision_failures"].sum())
        out.append(Finding(
            f"{agent} asked for {sum(int(e['instances']) for e in asks)} instances of {asks[0]['service']}; "
            f"{int(waiting.iloc[-1])} never came",
            f"it scaled out {len(asks)} time{'s' * (len(asks) != 1)} from {at(asks[0]['tick'])}; {failed:,} of its "
            f"{sent:,} provisioning requests failed, each asked again after its retry delay, and "
            f"{int(waiting.iloc[-1])} instances were still not provisioned at {until}", "never_took_effect"))
    return out


def _verdict(r: _Reading) -> str:
    lb = r.score.get("loop_broken") or {}
    if r.partial:
        return f"Partial run (status {r.meta.get('status')}): simulated until {r.until}; no verdict."
    if r.trigger_tick is None:
        return f"No trigger fired and no fault was injected by {r.until}: nothing was scored."
    if r.score.get("loop_formed") is False:
        return "No feedback loop formed: nothing to break."
    if not lb.get("reached") and lb.get("relapsed"):
        return (f"The loop broke at {lb['first_at']['clock']} but re-formed at {lb['relapses'][-1]['clock']} "
                f"and was not broken again by {r.until}.")
    suspended = r.score.get("loop_suspended") or []
    if not lb.get("reached") and suspended and not suspended[-1]["to"]["reached"]:
        return (f"The loop was not broken by {r.until}: it was suspended from {suspended[-1]['from']['clock']}, "
                f"within its bounds only because an action held back the demand that feeds it.")
    if not lb.get("reached") and suspended:
        return (f"The loop was suspended at {suspended[-1]['from']['clock']} (an action held back the demand that "
                f"feeds it) but re-formed when the demand came back at {suspended[-1]['to']['clock']}, and was not "
                f"broken by {r.until}.")
    if not lb.get("reached"):
        return f"The loop was not broken by {r.until}."
    if lb.get("vs_par_s") is not None:
        gap = abs(lb["vs_par_s"])
        return (f"Loop broken {format_wait(gap) if gap < 3600 else _delta(gap).lstrip('+')} "
                f"{'ahead of' if lb['vs_par_s'] < 0 else 'behind'} the historical response.")
    return f"Loop broken at {lb.get('clock')}."


def milestone_history(events: list[dict]) -> tuple[dict[str, int], dict[str, int], dict[str, list[int]]]:
    """From the journal: (milestone -> tick it finally holds from, for those holding at
    the end; milestone -> tick it was first confirmed; milestone -> ticks of its
    relapses), as the scorer journalled them."""
    final: dict[str, int] = {}
    first: dict[str, int] = {}
    relapses: dict[str, list[int]] = {}
    for e in events:
        if e["event"] == "milestone":
            final[e["milestone"]] = int(e["at_tick"])
            first.setdefault(e["milestone"], int(e["at_tick"]))
        elif e["event"] == "relapse":
            final.pop(e["milestone"], None)
            relapses.setdefault(e["milestone"], []).append(int(e["at_tick"]))
    return final, first, relapses


def _relapse_what(key: str) -> str:
    return {"loop_broken": "the loop re-formed", "backlog_drained": "the backlog grew again",
            "devices_healthy": "the devices were unhealthy again"}.get(
        key, f"{key[len('recovered:'):]} failed again" if key.startswith("recovered:") else f"{key} failed again")


def _changes(events: list[dict]) -> list[dict]:
    """What changed the world, in order, each with its tick and ``what`` happened: actions
    taking effect, triggers firing, faults injected (a relapse follows one of these)."""
    out = []
    for e in events:
        if e["event"] == "action_effective":
            out.append({"tick": e["tick"], "what": f"{e['action']} took effect"})
        elif e["event"] == "trigger":
            out.append({"tick": e["tick"], "what": f"the trigger {e['trigger']} fired"})
        elif e["event"] == "fault_injected":
            out.append({"tick": e["tick"], "what": f"the fault {e['fault']} was injected"})
    return out


def _last_before(changes: list[dict], tick: int) -> dict | None:
    """The last change at or before ``tick``."""
    before = [e for e in changes if e["tick"] <= tick]
    return before[-1] if before else None


def _relapses(relapses, first, final, changes, at, until) -> list[Finding]:
    """A finding per milestone that relapsed: when it first held, when it failed again
    and after what (an action, a trigger or a fault), and whether it came back."""
    out = []
    for key, ticks in relapses.items():
        label = milestone_label(key)
        before = _last_before(changes, ticks[-1])
        after = f" after {before['what']} at {at(before['tick'])}" if before else ""
        end = (f"it held again from {at(final[key])} to the end" if key in final
               else f"it did not hold again by {until}")
        times = f"{len(ticks)} times" if len(ticks) > 1 else "once"
        out.append(Finding(
            f"{_relapse_what(key)[0].upper()}{_relapse_what(key)[1:]} at {at(ticks[-1])}" + after,
            f"{label} was first reached at {at(first[key])} and relapsed {times} "
            f"({', '.join(at(t) for t in ticks)}); {end}", "relapse"))
    return out


def _held_briefly(score: dict, changes: list[dict], dt: float, at, until: str) -> list[Finding]:
    """A finding per milestone whose condition held for at least half its hold and failed
    before the hold was over (the score's ``held_briefly``): a recovery that did not hold,
    which no relapse names (it was never confirmed); what changed while it held, if anything,
    and whether the milestone was reached in the end."""
    out = []
    for key, m in scored_milestones(score).items():
        held = m.get("held_briefly") or []
        if not held:
            continue
        said = []
        for h in held:
            start, failed = round(h["seconds_after_start"] / dt), round((h["seconds_after_start"] + h["for_s"]) / dt)
            during = [e for e in changes if start < e["tick"] <= failed]
            said.append(f"from {at(start)} for {format_wait(h['for_s'])}, until {at(failed)}"
                        + (f" (after {during[-1]['what']} at {at(during[-1]['tick'])})" if during else ""))
        end = f"it was reached at {m['clock']}" if m.get("reached") else f"it was not reached by {until}"
        last, label = held[-1], milestone_label(key)
        out.append(Finding(
            f"{label if key.startswith('recovered:') else label.capitalize()} held for {format_wait(last['for_s'])} "
            f"from {at(round(last['seconds_after_start'] / dt))}, short of its {format_wait(last['hold_s'])} hold",
            f"its condition held {'; '.join(said)}, failing each time before its hold was over "
            f"({_relapse_what(key)}); {end}", "held_briefly"))
    return out


@dataclass(frozen=True)
class Signal:
    """One measure of the loop's ground truth that its milestone is defined on: its value per
    tick, its bound, and which side of the bound is out (a success or useful share below it,
    a retry amplification above it)."""

    name: str
    series: pd.Series
    bound: float
    high_is_bad: bool = False

    def out(self, values):
        return values > self.bound if self.high_is_bad else values < self.bound

    def said(self, value: float) -> str:
        return f"{value:.2f} tries per request" if self.high_is_bad else f"{value:.0%}"

    def clearly_bad(self, values):
        """Far out of bounds (half the bound for a share, twice it for an amplification)."""
        return values > 2 * self.bound if self.high_is_bad else values < 0.5 * self.bound

    def better(self, after: float, before: float) -> bool:
        return after < before if self.high_is_bad else after > before


def loop_signals(loop: dict, m: pd.DataFrame, dt: float, works: dict) -> list[Signal]:
    """Every measure the loop milestone is defined on, as the score reads it: each loop
    device's connection-setup success, each loop service's useful share of its work (1-minute
    sums), each loop population's retry amplification (1-minute sums; ``works``: each
    population's work over the run, ``_Reading.works_over_run``)."""
    out = [Signal(f"{d} setup success", m[f"{d}.setup_success_ratio"], float(loop["setup_success_min"]))
           for d in loop["devices"] if f"{d}.setup_success_ratio" in m]
    out += [Signal(f"{s} useful work", useful_share(m, s, dt), float(loop["useful_work_min"]))
            for s in loop["services"] if f"{s}.work_done" in m]
    window = max(1, round(WINDOW_S / dt))
    out += [Signal(f"{p} retries", amplification(m, p, works[p], window, float(loop["amplification_max"]))[0],
                   float(loop["amplification_max"]), high_is_bad=True)
            for p in loop["populations"] if f"{p}.tries" in m and p in works]
    return out


def loop_signal(signals: list[Signal], m: pd.DataFrame, trigger_tick: int | None) -> Signal | None:
    """The measure the report follows: the first of the loop's (``loop_signals``, devices,
    then services, then populations) that went out of bounds after the trigger; if none did,
    the first. (Following one fixed measure, a report said of a world whose retries ran away
    while its database's useful work stayed in bounds that the trigger set nothing off.)"""
    after = m.index >= (trigger_tick or 0)
    return next((sig for sig in signals if (sig.out(sig.series) & after).any()), signals[0] if signals else None)


def amplification(m: pd.DataFrame, population: str, works: list[tuple[int, str]], window: int,
                  bound: float) -> tuple[pd.Series, bool]:
    """(per tick, ``population``'s retry amplification over the last ``window`` ticks, as the
    score reads it (each tick's AMPLIFICATION_BASE for its work then: ``works``, [(from
    tick, work)]); whether it was unbounded somewhere): a window with attempts and nothing
    fresh or completed, unbounded in the score, is drawn above everything else, 1.2 x the
    larger of the highest value and ``bound``, not left blank while the loop is at its worst."""
    tries = m[f"{population}.tries"].rolling(window, min_periods=1).sum()
    work_then = pd.Series(works[0][1], index=m.index)
    for tick, work in works[1:]:
        work_then[m.index >= tick] = work
    base = sum(sum(m[f"{population}.{k}"] for k in keys).where(work_then == work, 0.0)
               for work, keys in AMPLIFICATION_BASE.items())
    want = base.rolling(window, min_periods=1).sum()
    ratio = tries / want.where(want > 0)
    unbounded = (want <= 0) & (tries > 0)
    if not unbounded.any():
        return ratio, False
    top = 1.2 * max(float(ratio.max()) if ratio.notna().any() else 1.0, bound)
    return ratio.mask(unbounded, top), True


def useful_share(m: pd.DataFrame, service: str, dt: float) -> pd.Series:
    """Per tick, the share of the work ``service`` did over the last minute that was
    useful: near 0 in congestive collapse. A minute in which it did none counts as the
    score counts it: 1 if nothing reached it (traffic cut or refused), 0 if work reached
    it that it could not do (engine/scoring.py, Scorer._idle_share)."""
    w = max(1, round(60 / dt))
    done = m[f"{service}.work_done"].rolling(w, min_periods=1).sum()
    useful = m[f"{service}.work_useful"].rolling(w, min_periods=1).sum().clip(upper=done)
    taken = (m[f"{service}.work_admitted"] + m[f"{service}.queue_backlog"]).rolling(w, min_periods=1).sum()
    idle = (taken <= RESIDUE).astype(float)  # (as the score reads it)
    return (useful / done.where(done > RESIDUE)).fillna(idle)


def _suspended_sentence(score: dict, broken: bool, until: str) -> str:
    """What the loop did while actions held back the demand that feeds it."""
    spans = score["loop_suspended"]
    said = ", ".join(f"{s['from']['clock']}-{s['to']['clock']}" if s["to"]["reached"] else f"from {s['from']['clock']}"
                     for s in spans)
    restored = (score.get("demand_restored") or {}).get("clock")
    if not spans[-1]["to"]["reached"]:
        then = f"the demand was still held back at {until}, so the loop is not counted broken"
    elif broken:
        then = f"the demand was all back at {restored}, and the loop broke with all of it back"
    else:
        then = "it re-formed once the demand came back"
    return (f"While actions held back demand, the loop's measures were within bounds ({said}): suspended, not "
            f"broken; {then}.")


def _summary(trigger, trigger_tick, bad_tick, signal: Signal | None, events, milestones, relapses, score, weighted,
             backlog, at, dt, partial, until):
    out = []
    measure = signal.name if signal is not None else "the loop's measure"
    # (a live game day's incident may start with a fault the facilitator injected)
    what = f"The fault {trigger['fault']} injected" if trigger and trigger["event"] == "fault_injected" else "The trigger"
    if trigger is None:
        out.append(f"No trigger fired and no fault was injected by {until}: nothing was scored.")
    elif bad_tick is not None:
        # (the change just before the measure left its bounds, if a later trigger or fault than the first)
        def named(e: dict) -> str:
            return f"the trigger {e['trigger']}" if e["event"] == "trigger" else f"the fault {e['fault']}"

        setter = [e for e in events if e["event"] in ("trigger", "fault_injected") and trigger_tick < e["tick"] <= bad_tick]
        if setter and named(setter[-1]) != named(trigger):
            last = setter[-1]
            since = last["tick"]
            opener = (f"{_sentence(named(last))} at {at(since)} set off the loop (the incident began with "
                      f"{named(trigger)} at {at(trigger_tick)})")
        else:
            since, opener = trigger_tick, f"{what} at {at(trigger_tick)} set off the loop"
        out.append(f"{opener}: {measure} {'rose' if signal.high_is_bad else 'fell'} out of bounds at {at(bad_tick)}, "
                   f"{format_wait((bad_tick - since) * dt)} after it.")
    else:
        out.append(f"{what} at {at(trigger_tick)} did not push {measure} out of bounds.")
    alarm = next((e for e in events if e["event"] == "alarm_raised"), None)
    loop = milestones.get("loop_broken")
    # the actions asked before the loop broke (or all of them, if it did not)
    actions = sum(1 for e in events if e["event"] == "action_requested" and by_the_team(e)
                  and (loop is None or e["tick"] <= loop))
    seen = f"The operators' first alarm ({alarm['alarm']}) came at {at(alarm['tick'])}" if alarm else \
        "No alarm reached the operators"
    broken = f"the loop was broken at {at(loop)}" if loop is not None else \
        "no feedback loop formed" if score.get("loop_formed") is False else f"the loop was not broken by {until}"
    if relapses.get("loop_broken"):
        again = relapses["loop_broken"]
        broken += f" (it had re-formed {len(again)} time{'s' if len(again) > 1 else ''}, last at {at(again[-1])})"
    out.append(f"{seen}; {broken}, after {actions} action{'s' if actions != 1 else ''} asked.")
    if score.get("loop_suspended"):
        out.append(_suspended_sentence(score, loop is not None, until))
    third = []
    if weighted is not None:
        third.append(f"customers saw {weighted:.0f} weighted impaired minutes (failing, or late)")
    for b in backlog:
        third.append(f"the {b['population']} backlog peaked at {b['peak']:,}"
                     + (f"; {b['text']}" if b["shared"] else f" and was {b['text']}"))
    if third:
        out.append("In all, " + "; ".join(third) + ".")
    if partial:
        out.append(f"This run stopped early, at {until}: the figures cover only what was simulated.")
    return out


def _leaf_conditions(cond: dict) -> list[dict]:
    """Every simple condition (metric, alarm, done, at, ...) in a rule's ``when``, however
    nested in all / any / not."""
    if not isinstance(cond, dict):
        return []
    out = []
    for key in ("all", "any"):
        for c in cond.get(key) or []:
            out += _leaf_conditions(c)
    if "not" in cond:
        out += _leaf_conditions(cond["not"])
    if not {"all", "any", "not"} & set(cond):
        out.append(cond)
    return out


def _rules_never_fired(runbook, events, playbook, m, dt, at) -> list[Finding]:
    fired = {e.get("rule") for e in events if e["event"] == "rule_fired"}
    alarms_raised = {e.get("alarm") for e in events if e["event"] == "alarm_raised"}
    requested = {e.get("action") for e in events if e["event"] == "action_requested" and by_the_team(e)}
    alarm_defs = {a["name"]: a for a in ((playbook.get("monitoring") or {}).get("alarms") or [])}
    out = []
    for i, rule in enumerate(runbook.get("rules") or []):
        name = rule_label(rule, i)
        if name in fired:
            continue
        why = []
        for leaf in _leaf_conditions(rule.get("when") or {}):
            if "metric" in leaf:
                why.append(_why_metric(leaf["metric"], leaf, m, dt, at))
            if "alarm" in leaf:
                a = alarm_defs.get(leaf["alarm"], {})
                if leaf["alarm"] not in alarms_raised:
                    why.append(f"alarm {leaf['alarm']} never fired" + (
                        f"; {_why_metric(a['metric'], a, m, dt, at)}" if a.get("metric") and not a.get("no_data") else ""))
            if "done" in leaf and leaf["done"] not in requested:
                why.append(f"it waits for {leaf['done']}, which nobody asked for")
            if "at" in leaf:
                why.append(f"it is timed for {leaf['at']}")
        out.append(Finding(f"Runbook rule \"{name}\" never fired", _sentence("; ".join(why) or "its condition never held"),
                           "rule_never_fired"))
    return out


def _as_monitoring_sees(m: pd.DataFrame, columns: dict, dt: float) -> pd.DataFrame:
    """The metrics in the units of monitoring's view, which thresholds are written in:
    counts per tick per second (agents.base.PER_TICK)."""
    per_tick = [c for c in m.columns if isinstance(columns.get(c), dict) and columns[c]["unit"].endswith(PER_TICK)]
    if not per_tick or dt == 1.0:
        return m
    out = m.copy()
    out[per_tick] = out[per_tick] / dt
    return out


def _sentence(text: str) -> str:
    """``text`` with a capital first letter, to start a finding's evidence."""
    return text[:1].upper() + text[1:]


def _why_metric(metric: str, cond: dict, m: pd.DataFrame, dt: float, at) -> str:
    if metric not in m:
        return f"{metric} is not a metric of this world"
    truth = m[metric]
    held = truth > float(cond["above"]) if "above" in cond else truth < float(cond["below"])
    sign, limit = (">", cond["above"]) if "above" in cond else ("<", cond["below"])
    if not held.any():
        return f"in ground truth {metric} was never {sign} {limit} (range {truth.min():.3g}-{truth.max():.3g})"
    text = f"in ground truth {metric} was {sign} {limit} for {format_wait(held.sum() * dt)} in all from {at(int(held.idxmax()))}"
    hold = parse_duration(cond.get("for") or 0.0)  # (as written in the run's playbook or runbook: "5m")
    if hold > 0:  # what the rule waits for: an unbroken stretch of that long
        stretch = held.ne(held.shift()).cumsum()[held]  # a label per unbroken stretch
        sizes = stretch.value_counts(sort=False)
        longest = sizes.idxmax()
        # (to the second: "at most 3 min where it needed 3 min" read as if the rule should have fired)
        text += (f", at most {format_wait_exact(sizes[longest] * dt)} without a break (from "
                 f"{at(int(stretch.index[stretch == longest][0]))}) where it needed {format_wait_exact(hold)}")
    if "monitoring.visibility" in m:
        vis = m.loc[held, "monitoring.visibility"].mean()
        text += (f", but monitoring had on average {vis:.0%} of its metrics fresh meanwhile (data missing)"
                 if vis < SEEING_VISIBILITY else f", and monitoring saw it ({vis:.0%} of its metrics fresh)")
    return text


def _counterfactual_findings(att: dict) -> list[Finding]:
    """attribution.json as a finding: the action without which the loop broke latest, or
    that no single action did, with every counterfactual played as evidence."""
    played = att.get("counterfactuals") or []
    if not played:
        return []
    evidence = "; ".join(
        f"without {c['action']} ({c['took_effect']}) " + (
            f"the loop was still unbroken at {c['played_until']}" if c["loop_broken_without"] is None
            else f"it broke at {c['loop_broken_without']}") for c in played)
    evidence += f" (the loop broke at {att.get('loop_broken')} in this run; each counterfactual replays it exactly " \
                f"from the action's first taking effect on, without that action)"
    delayed = att.get("delayed") or []  # (the loop broke sooner without them)
    hurt = f"; {', '.join(delayed)} delayed the break" if delayed else ""
    if att.get("breaker"):
        title = f"{att['breaker']} broke the loop"
        others = [a for a in att.get("needed") or [] if a != att["breaker"]]
        if others:
            title += f" ({', '.join(others)} {'was' if len(others) == 1 else 'were'} needed too)"
        return [Finding(title + hurt, evidence, "loop_breaker")]
    if delayed:
        return [Finding(f"{', '.join(delayed)} delayed the break of the loop", f"{_sentence(att['text'])} "
                        f"{evidence}", "loop_breaker")]
    title = "No single action broke the loop"
    text = att["text"].removeprefix(title + ": ")  # (the title says it already)
    return [Finding(title, f"{_sentence(text)} {evidence}", "loop_breaker")]


def _window_means(series: pd.Series, t: int, ticks: int) -> tuple[float, float]:
    before = series[(series.index >= t - ticks) & (series.index < t)].mean()
    after = series[(series.index >= t) & (series.index < t + ticks)].mean()
    return float(before), float(after)


def _loop_breaker(effective, m, dt, loop, loop_at, playbook, signal):
    """(action, signal before, after) of the last action acting on the loop (on its
    devices or services, the populations crossing or calling them, or the trigger) to
    take effect before the loop's signal began the climb that the loop-broken milestone
    ends."""
    if signal is None or loop_at is None or loop_at >= len(m):
        return None
    parts = set(loop["devices"]) | set(loop["services"])
    on_loop = parts | {"triggers"} | {p["name"] for p in playbook.get("populations") or []
                                      if parts & (set(p.get("path") or []) | {p.get("target")})}
    acting = {mit["name"] for mit in playbook.get("mitigations") or []
              if any(eff.get("target") in on_loop for eff in mit.get("effects") or [])}
    # The climb starts after the last minute that was clearly bad (a 1-minute mean under
    # half the bound): single ticks swing too much with the retry waves.
    mean = signal.series.rolling(max(1, round(60 / dt)), min_periods=1).mean()
    bad = m.index[(m.index < loop_at) & signal.clearly_bad(mean)]
    candidates = [e for e in effective if e["action"] in acting and len(bad) and e["tick"] <= bad[-1]]
    if not candidates:
        return None
    e = candidates[-1]
    before, after = _window_means(signal.series, int(e["tick"]), max(1, round(300 / dt)))
    return e, before, after


def _collateral(effective, m, dt, signal, at) -> list[Finding]:
    """Actions that broke connections, with what happened to the loop's signal around them."""
    out = []
    cols = [c for c in m.columns if c.endswith(".broken_connections") and "#" not in c]
    window = max(1, round(600 / dt))
    for e in effective:
        t = int(e["tick"])
        broken = int(m.loc[(m.index >= t) & (m.index < t + max(1, round(60 / dt))), cols].to_numpy().sum()) if cols else 0
        if broken <= 0:
            continue
        if signal is None:
            out.append(Finding(f"{e['action']} broke {broken:,} connections", f"at {at(t)}", "collateral"))
            continue
        before, after = _window_means(signal.series, t, window)
        worse = not signal.better(after, before)
        out.append(Finding(
            f"{e['action']} broke {broken:,} connections" + (" and made things worse" if worse else ""),
            f"at {at(t)}; {signal.name} averaged {signal.said(before)} in the 10 minutes before and {signal.said(after)} "
            f"in the 10 minutes "
            f"after" + (": the collateral damage outweighed the benefit" if worse else ""), "collateral"))
    return out
