"""The run directory's and the session directory's format (their file names, first
columns and statuses), written once here for the writers in orchestrator (engine/journal.py,
runs/, live/) and the readers in reports; and reading a run directory with pandas,
tolerant of a run killed mid-write."""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypedDict

import pandas as pd
import yaml

from .timefmt import parse_clock

# -- a run directory ------------------------------------------------------------------------------
META = "meta.json"  # seed, versions, playbook and runbook names, variables, status, ticks done
PLAYBOOK = "playbook.yaml"  # the rendered playbook
VALIDATED = "playbook.json"  # the playbook as validated: every default filled in, clock times and durations in seconds
RUNBOOK = "runbook.yaml"  # the runbook as given (a fork's: the one that took over)
COLUMNS = "columns.json"  # every metrics column: agent, metric, unit, meaning
METRICS = "metrics.csv"  # a row per tick: METRIC_INDEX, then a column per agent.metric
EVENTS = "events.jsonl"  # a JSON object per line: EVENT_KEYS, then the event's details
SCORE = "score.json"  # the score (orchestrator/engine/scoring.py), at the end
ATTRIBUTION = "attribution.json"  # which action broke the loop, by counterfactual
FORK = "fork.json"  # a fork's decision point and what changed
RUNBOOK_BEFORE_FORK = "runbook-before-fork.yaml"
REPORT = "report"  # the after-action report's folder
RUN_FILES = (META, PLAYBOOK, VALIDATED, RUNBOOK, COLUMNS, METRICS, EVENTS, SCORE, ATTRIBUTION, FORK, RUNBOOK_BEFORE_FORK, REPORT)

METRIC_INDEX = ("tick", "time_s", "clock")
EVENT_KEYS = ("tick", "clock", "agent", "event")
#: the events that start an incident: the score counts from the first (a trigger firing, or a fault a
#: facilitator injected: a live game day's world may have no scheduled trigger at all)
STARTS_INCIDENT = ("trigger", "fault_injected")
#: meta.json's status: running, then complete, interrupted (Ctrl-C), failed, or ended (a live
#: session that ended before its scenario did)
RUNNING, COMPLETE, INTERRUPTED, FAILED, ENDED = "running", "complete", "interrupted", "failed", "ended"

# -- a live game day's session directory ------------------------------------------------------------
SESSION_INFO = "session.json"  # what the session is, where to reach it, its status
SESSION_JOURNAL = "journal.jsonl"  # every control, in order
RANKING = "ranking.json"  # the final scoreboard
TOKENS = "tokens.json"  # owner-only: the server's address and every role's token
TEAMS = "teams"  # teams/<team>/: a run directory per team
SESSION_LOCK = ".lock"  # held by the server serving the session
RESTARTS = "restarts"  # restarts/<n>/teams/: the run directories as a server that died left them


# -- score.json (written by orchestrator/engine/scoring.py; read by reports, comparisons, forks,
# attribution and the live scoreboard) ---------------------------------------------------------------
class When(TypedDict, total=False):
    """When a measure was reached (``reached`` false: not in the run), and how far from par."""
    reached: bool
    clock: str
    seconds_after_start: float
    seconds_after_trigger: float
    par_clock: str
    vs_par_s: float  # seconds after (+) or before (-) par


class Milestone(When, total=False):
    """A milestone: ``reached`` if it holds at the end, from ``final``; ``first_at`` the
    first time it was confirmed; ``relapses`` each time it stopped holding."""
    final: When | None
    first_at: When | None
    relapses: list[When]
    relapsed: bool  # reached once, and not holding at the end
    impaired: bool  # its condition failed after the trigger (if not, there was nothing to reach)


class Score(TypedDict, total=False):
    trigger: When
    loop_formed: bool
    loop_broken: Milestone
    first_customer_update: When
    recovered: dict[str, Milestone]  # by population or service
    impact: dict  # error_minutes by population, late_minutes by durable population, weighted_total
    collateral: dict  # connections_broken_by_actions, requests_turned_away, requests_turned_away_by
    actions_taken: int
    first_action_effective: When  # once an action has taken effect
    simulated_until: str
    devices_healthy: Milestone  # if the playbook scores device health
    backlog_drained: Milestone  # if it scores a backlog
    backlog_peak: dict[str, int]  # each population and service queue scoring.backlog names -> its largest backlog
    demand_restored: When  # once an action has held demand back: when it was all back
    loop_suspended: list[dict]  # {from, to} (When) the loop was in its bounds while an action held demand back


#: a sum of work (or of any measure a score's window adds up) below this is a rounding residue of
#: fractional work that has left the window, not work: the score and the report read it as none
RESIDUE = 1e-9

#: what a run measures besides its milestones, as score.json and par name them
MEASURES = ("trigger", "first_customer_update", "demand_restored")

#: a run's outcome, as a comparison's results table says it (``outcome``)
HEALTHY, BY_ITSELF, AFTER_ACTION, RELAPSED, SUSPENDED, STUCK = OUTCOMES = (
    "healthy", "recovered by itself", "broken after the runbook acted", "relapsed", "suspended", "stuck")
#: a phase map's phases, and a run's phase from its outcome: one whose loop broke (or was suspended)
#: and re-formed, or is held down only by demand held back, is stuck at the horizon
PHASES = (HEALTHY, BY_ITSELF, AFTER_ACTION, STUCK)
PHASE_OF = {o: STUCK if o in (RELAPSED, SUSPENDED) else o for o in OUTCOMES}


def outcome(score: Score) -> str:
    """No loop formed; it broke before any action took effect (nobody acted, or only after
    it broke: the run's attribution says the same); it broke after an action took effect
    (whether because of it, the counterfactuals of `gameday run` say; a comparison does not
    play them); it broke, or was suspended (within its bounds while an action held back the
    demand that feeds it), and re-formed, an action having taken effect before it did, and
    was not broken at the horizon; it is suspended at the horizon; it never broke, or broke
    and re-formed with no action taken (a loop still forming, as under a slow ramp of
    traffic, is stuck: nothing relapsed)."""
    broken = score["loop_broken"]
    if not score["loop_formed"]:
        return HEALTHY
    if not broken["reached"]:
        suspended = score.get("loop_suspended") or []
        if suspended and not suspended[-1]["to"]["reached"]:
            return SUSPENDED
        acted = score.get("first_action_effective")
        again = broken.get("relapses") or []
        acting = bool(again) and acted is not None and acted["seconds_after_start"] < again[-1]["seconds_after_start"]
        return RELAPSED if (broken.get("relapsed") and acting) or suspended else STUCK
    acted = score.get("first_action_effective")  # before the tick the loop holds broken from, as attribution asks
    return BY_ITSELF if acted is None or acted["seconds_after_start"] >= broken["seconds_after_start"] else AFTER_ACTION


#: what a run directory written before it kept its playbook as validated (``RunData.playbook``)
#: left to the format's defaults of then, of what the reports read: scoring's loop (its parts and
#: bounds), backlog and impact, and a population's work
_DEFAULTS_BEFORE_VALIDATED = {
    "scoring": {"loop": {"devices": [], "services": [], "populations": [], "setup_success_min": 0.95,
                         "amplification_max": 1.5, "useful_work_min": 0.9},
                "backlog": {"populations": [], "services": []}, "impact": {}},
    "work": "perishable"}


class NotARunDirectory(Exception):
    pass


@dataclass
class RunData:
    """A run directory as read; ``metrics`` and ``events`` are read on first use (a
    comparison reads a hundred runs' scores and never their tables)."""
    dir: Path | None  # None: a run played without one (``execute`` with no ``out``), which has no tables
    meta: dict
    score: Score | None  # None while the run has not finished
    attribution: dict | None = None  # attribution.json: the counterfactuals, if they were played

    @cached_property
    def metrics(self) -> pd.DataFrame:
        return read_metrics(self._tables())

    @cached_property
    def events(self) -> pd.DataFrame:
        return read_events(self._tables())

    @cached_property
    def columns(self) -> dict:
        """columns.json: every metrics column's agent, metric, unit and meaning ({} if missing)."""
        path = self._tables() / COLUMNS
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    @cached_property
    def playbook(self) -> dict:
        """The playbook as the run validated it (``VALIDATED``): what the reports read, so
        that they restate no default. A run directory written before it was kept has its
        rendered playbook read as written, with the defaults of then for what it left out
        (``_DEFAULTS_BEFORE_VALIDATED``) and its par times in seconds, as validated."""
        path = self._tables() / VALIDATED
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))
        try:
            doc = yaml.safe_load((self._tables() / PLAYBOOK).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            doc = {}
        before = _DEFAULTS_BEFORE_VALIDATED
        scoring = doc.setdefault("scoring", {})
        for section, defaults in before["scoring"].items():
            scoring[section] = {**defaults, **(scoring.get(section) or {})}
        for p in doc.get("populations") or []:
            p.setdefault("work", before["work"])
        doc["par"] = {k: parse_clock(v) for k, v in (doc.get("par") or {}).items()}
        return doc

    @property
    def complete(self) -> bool:
        return self.meta.get("status") == COMPLETE

    def _tables(self) -> Path:
        if self.dir is None:
            raise ValueError("this run was played without a run directory: it has a score, and no tables")
        return self.dir


def _complete_lines(path: Path) -> str:
    """The file's text up to its last newline: a line being written when the run was
    killed is left out."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    cut = text.rfind("\n")
    return text[: cut + 1] if cut >= 0 else ""


def read_metrics(run_dir: Path) -> pd.DataFrame:
    text = _complete_lines(Path(run_dir) / METRICS)
    if not text:
        return pd.DataFrame()
    return pd.read_csv(io.StringIO(text))


def read_events(run_dir: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in _complete_lines(Path(run_dir) / EVENTS).splitlines() if line.strip()]
    if not rows:
        return pd.DataFrame(columns=list(EVENT_KEYS))
    return pd.DataFrame(rows)


def load_run(run_dir) -> RunData:
    d = Path(run_dir)
    meta_path = d / META
    if not meta_path.exists():
        raise NotARunDirectory(f"{d} is not a run directory (no {META})")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    score_path = d / SCORE
    score = json.loads(score_path.read_text(encoding="utf-8")) if score_path.exists() else None
    attribution_path = d / ATTRIBUTION
    attribution = json.loads(attribution_path.read_text(encoding="utf-8")) if attribution_path.exists() else None
    return RunData(dir=d, meta=meta, score=score, attribution=attribution)


def complete_ticks(run_dir: Path) -> int:
    """The ticks whose metrics row was written whole: a run whose process was killed may
    end in a row cut short, and its meta.json still says it is running."""
    with open(Path(run_dir) / METRICS, "rb") as f:
        rows = f.read().count(b"\n")
    return max(0, rows - 1)  # the header
