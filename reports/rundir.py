"""The run directory's and the session directory's format (their file names, first
columns and statuses), written once here for the writers in orchestrator (engine/journal.py,
runs/, live/) and the readers in reports; and reading a run directory with pandas,
tolerant of a run killed mid-write, never through a symbolic link out of it
(``files.inside``), never past what the run can have written (``journal_file``), each
field the readers rely on checked as it is read (``meta_problem``, ``unlike``);
``check_run`` says what is missing or cut short."""
from __future__ import annotations

import functools
import io
import json
import os
import reprlib
import types
import typing
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypedDict

import pandas as pd
import yaml

from .files import (EVENTS_BYTES, EVENTS_TICK_BYTES, JSON_BYTES, METRICS_VALUE_BYTES, OutsideDirectory, inside,
                    not_regular)
from .timefmt import parse_clock

# -- a run directory ------------------------------------------------------------------------------
META = "meta.json"  # seed, versions, playbook and runbook names, variables, status, ticks done
PLAYBOOK = "playbook.yaml"  # the rendered playbook
VALIDATED = "playbook.json"  # the playbook as validated: every default filled in, clock times and durations in seconds
RUNBOOK = "runbook.yaml"  # the runbook as given (a fork's: the one that took over)
COLUMNS = "columns.json"  # every metrics column: agent, metric, unit, meaning
METRICS = "metrics.csv"  # a row per tick: METRIC_INDEX, then a column per agent.metric
METRIC_FLOAT = "%.10g"  # how metrics.csv writes a float: ten significant digits (a NaN: an empty field)
EVENTS = "events.jsonl"  # a JSON object per line: EVENT_KEYS, then the event's details
SCORE = "score.json"  # the score (orchestrator/engine/scoring.py), at the end
ATTRIBUTION = "attribution.json"  # which action broke the loop, by counterfactual
FORK = "fork.json"  # a fork's decision point and what changed
RUNBOOK_BEFORE_FORK = "runbook-before-fork.yaml"
REPORT = "report"  # the after-action report's folder
ERROR = "error.txt"  # why the run failed, if it did: a bug's traceback, or the write that failed and the system's error
#: held (fcntl.flock) by the process writing a run's or a comparison's directory, its pid inside;
#: removed when it is done (one a killed process left is free, and taken over)
LOCK = ".lock"
RUN_FILES = (META, PLAYBOOK, VALIDATED, RUNBOOK, COLUMNS, METRICS, EVENTS, SCORE, ATTRIBUTION, FORK, RUNBOOK_BEFORE_FORK,
             REPORT, ERROR, LOCK)

METRIC_INDEX = ("tick", "time_s", "clock")
EVENT_KEYS = ("tick", "clock", "agent", "event")
#: a run's tick, in seconds, and its ticks, at most: validation holds a playbook and --tick to them
#: (orchestrator/playbook/checks.py), a reader meta.json; coarser ticks would skip over timeouts and
#: deployment steps, and a run longer than that is almost certainly a typo in --tick
MAX_TICK_S = 60.0
MAX_TICKS = 2_000_000
#: a run's tick, at least, in seconds: a microsecond is far below any tick a model of request
#: timeouts in milliseconds needs, and what a report counts per minute (60 s / 1e-6) stays an integer
MIN_TICK_S = 1e-6
#: the events that start an incident: the score counts from the first (a trigger firing, or a fault a
#: facilitator injected: a live game day's world may have no scheduled trigger at all)
STARTS_INCIDENT = ("trigger", "fault_injected")
#: the events that describe the hosting (where the world ran), not the world (event -> what one is
#: called): an actor lost and replaced from its snapshot, whose results are identical. A replay
#: compares the rest, and tells these apart as information.
HOSTING_EVENTS = {"host_restarted": "host restart"}
#: meta.json's status: running, then complete, interrupted (Ctrl-C), failed, or ended (a live
#: session that ended before its scenario did)
RUNNING, COMPLETE, INTERRUPTED, FAILED, ENDED = "running", "complete", "interrupted", "failed", "ended"
#: set (true) in a meta read from a directory that says "running" though no live process holds
#: it: its writer was killed, and it is read as interrupted (never in a file)
UNCLOSED = "ended_unclosed"

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


class Impact(TypedDict, total=False):
    error_minutes: dict[str, float]  # by population
    late_minutes: dict[str, float]  # by durable population
    weighted_total: float


class Collateral(TypedDict, total=False):
    connections_broken_by_actions: int
    requests_turned_away: int
    requests_turned_away_by: dict[str, int]  # by the action, trigger or fault that turned them away


#: a span the loop was in its bounds while an action held demand back ("from" is not a name)
Suspended = TypedDict("Suspended", {"from": When, "to": When}, total=False)


class Score(TypedDict, total=False):
    trigger: When
    loop_formed: bool
    loop_broken: Milestone
    first_customer_update: When
    recovered: dict[str, Milestone]  # by population or service
    impact: Impact
    collateral: Collateral
    actions_taken: int
    first_action_effective: When  # once an action has taken effect
    simulated_until: str
    devices_healthy: Milestone  # if the playbook scores device health
    backlog_drained: Milestone  # if it scores a backlog
    backlog_peak: dict[str, int]  # each population and service queue scoring.backlog names -> its largest backlog
    demand_restored: When  # once an action has held demand back: when it was all back
    loop_suspended: list[Suspended]


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


class BadRunDirectory(NotARunDirectory):
    """A run directory that cannot be read as one: a file it always has missing or not what
    it should be, or a path of it leading out of it; the message names the file and what is wrong."""


# -- what the readers rely on in the other files, checked as they are read: a file of the right
# name holding something else is refused naming the file, the field and what was expected, never
# met as an exception deep in a report -----------------------------------------------------------------
class _EventHead(TypedDict):
    tick: int
    event: str


#: the details of events the reports read, by name (a detail's name means one thing in every event that has it)
_EventDetails = TypedDict("_EventDetails", {
    "clock": str, "agent": str, "id": str, "action": str, "reason": str, "rule": str, "op": str, "trigger": str,
    "fault": str, "description": str, "milestone": str, "risk": str, "alarm": str, "metric": str, "text": str,
    "message": str, "host": str, "reply_to": str, "service": str, "stale": bool, "at_tick": int, "asked_tick": int,
    "lead_time_s": float, "steps": float, "share": float, "instances": float, "running": float, "withdrawn": float,
    "value": float}, total=False)


class EventLine(_EventHead, _EventDetails):
    """A line of events.jsonl: EVENT_KEYS, then the event's details (those the reports do not
    read are not checked)."""


class _Column(TypedDict):
    unit: str


class Column(_Column, total=False):
    """columns.json's entry for a metric (the first columns' are texts)."""
    agent: str
    kind: str
    metric: str
    meaning: str


class _Counterfactual(TypedDict):
    action: str
    took_effect: str
    played_until: str
    loop_broken_without: str | None


class Counterfactual(_Counterfactual, total=False):
    tick: int
    later_by_s: float | None
    mattered: bool
    delayed: bool


class _Attribution(TypedDict):
    text: str


class Attribution(_Attribution, total=False):
    """attribution.json (orchestrator/runs/attribution.py)."""
    counterfactuals: list[Counterfactual]
    breaker: str | None
    needed: list[str]
    delayed: list[str]
    untested: list[str]
    loop_broken: str


class _Loop(TypedDict):
    devices: list[str]
    services: list[str]
    populations: list[str]
    setup_success_min: float
    amplification_max: float
    useful_work_min: float


class _Backlog(TypedDict):
    populations: list[str]
    services: list[str]


class _Scoring(TypedDict):
    loop: _Loop
    backlog: _Backlog
    impact: dict[str, float]


class _Named(TypedDict):
    name: str


class _PopulationBase(_Named):
    work: str


class _Population(_PopulationBase, total=False):
    path: list[str]
    target: str


class _Acts(TypedDict, total=False):
    effects: list[dict]


class _Mitigation(_Named, _Acts):
    pass


class _Alarm(_Named, total=False):
    metric: str


class _Monitoring(TypedDict, total=False):
    alarms: list[_Alarm]


class _Validated(TypedDict):
    scoring: _Scoring


class Validated(_Validated, total=False):
    """What the reports read of playbook.json (the playbook as validated: orchestrator/playbook/format.py)."""
    populations: list[_Population]
    mitigations: list[_Mitigation]
    triggers: list[_Acts]
    faults: list[_Acts]
    monitoring: _Monitoring
    par: dict[str, float]


class Runbook(TypedDict, total=False):
    """What the reports read of runbook.yaml."""
    rules: list[dict]


_hints = functools.cache(typing.get_type_hints)
_KIND_SAID = {list: "a list", dict: "an object", str: "a text", bool: "true or false", int: "an integer",
              float: "a number", type(None): "null"}


def unlike(value, hint, where: str = "") -> str | None:
    """Where ``value`` (read from JSON) is not what ``hint`` says (a type as annotated: a
    TypedDict, list[X], dict[str, X], X | None, str, bool, int, float), said as "loop_broken
    is 'x'; expected an object"; None if it all is."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        fits = [h for h in typing.get_args(hint) if _fits(value, h)]
        return unlike(value, fits[0], where) if fits else _differs(value, hint, where)
    if not _fits(value, hint):
        return _differs(value, hint, where)
    if typing.is_typeddict(hint):
        fields = _hints(hint)
        missing = next((k for k in fields if k in hint.__required_keys__ and k not in value), None)
        if missing is not None:
            return f"no field {_at(where, missing)}; expected {_expected(fields[missing])}"
        return next((p for k, h in fields.items() if k in value and (p := unlike(value[k], h, _at(where, k)))), None)
    args = typing.get_args(hint)
    if not args:  # (a bare dict or list: any)
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return next((p for k, v in items if (p := unlike(v, args[-1], f"{where}[{reprlib.repr(k)}]"))), None)


def _fits(value, hint) -> bool:
    """``value`` is of ``hint``'s kind (its own, not its parts')."""
    kind = dict if typing.is_typeddict(hint) else typing.get_origin(hint) or hint
    if kind in (int, float) and isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if kind is float else kind)


def _expected(hint) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(map(_expected, typing.get_args(hint)))
    return _KIND_SAID[dict if typing.is_typeddict(hint) else typing.get_origin(hint) or hint]


def _differs(value, hint, where: str) -> str:
    return f"{where + ' is' if where else 'got'} {reprlib.repr(value)}; expected {_expected(hint)}"


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def read_shaped(run_dir: Path, name: str, hint, expected: str):
    """``read_json``, and ``BadRunDirectory`` where the file does not hold what ``hint`` says
    (``unlike``): naming the file, the field, its value and what was expected."""
    value = read_json(run_dir, name, expected)
    problem = None if value is None else unlike(value, hint)
    if problem:
        raise BadRunDirectory(f"{run_file(Path(run_dir), name)}: {problem}, as gameday writes {expected}")
    return value


@dataclass
class RunData:
    """A run directory as read; ``metrics`` and ``events`` are read on first use (a
    comparison reads a hundred runs' scores and never their tables)."""
    dir: Path | None  # None: a run played without one (``execute`` with no ``out``), which has no tables
    meta: dict
    score: Score | None  # None while the run has not finished
    attribution: Attribution | None = None  # attribution.json: the counterfactuals, if they were played

    @cached_property
    def metrics(self) -> pd.DataFrame:
        return read_metrics(self._tables(), self.meta)

    @cached_property
    def events(self) -> pd.DataFrame:
        return read_events(self._tables(), self.meta)

    @cached_property
    def columns(self) -> dict:
        """columns.json: every metrics column's agent, metric, unit and meaning ({} if missing)."""
        return read_shaped(self._tables(), COLUMNS, dict[str, str | Column], "every metrics column's meaning") or {}

    @cached_property
    def playbook(self) -> dict:
        """The playbook as the run validated it (``VALIDATED``): what the reports read, so
        that they restate no default. A run directory written before it was kept has its
        rendered playbook read as written, with the defaults of then for what it left out
        (``_DEFAULTS_BEFORE_VALIDATED``) and its par times in seconds, as validated."""
        validated = read_shaped(self._tables(), VALIDATED, Validated, "the playbook as validated")
        if validated is not None:
            return validated
        try:
            doc = yaml.safe_load(run_file(self._tables(), PLAYBOOK).read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            doc = None
        doc = doc if isinstance(doc, dict) else {}
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


def run_file(run_dir: Path, name: str) -> Path:
    """The path of a run directory's file ``name``, if it does not lead out of the directory
    (``files.inside``) and is a regular file, or none; else ``BadRunDirectory`` naming it
    (a FIFO would be waited on for ever, a device read without end)."""
    try:
        path = inside(run_dir, name)
    except OutsideDirectory as e:
        raise BadRunDirectory(str(e)) from None
    try:
        kind = not_regular(path.stat().st_mode) if name not in ("", ".") else None
    except OSError:  # (none there: the reader says what that means)
        return path
    if kind:
        raise BadRunDirectory(f"{path}: {kind}; expected a regular file, as gameday writes it")
    return path


def read_json(run_dir: Path, name: str, expected: str):
    """A JSON file of a run directory, or None if there is none; ``BadRunDirectory`` (naming
    the file and ``expected``, what it holds) if it cannot be read or is not JSON."""
    path = run_file(Path(run_dir), name)
    if not path.exists():
        return None
    try:
        if path.stat().st_size > JSON_BYTES:
            raise BadRunDirectory(f"{path}: over {JSON_BYTES // 2**20} MiB; expected {expected}, as gameday writes it "
                                  "(a few KB)")
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise BadRunDirectory(f"{path}: cannot be read ({e.strerror or e}); expected {expected}") from None
    except (ValueError, RecursionError) as e:  # (written whole or not at all: this one was damaged, or made, since)
        raise BadRunDirectory(f"{path}: not valid JSON ({type(e).__name__}: {str(e)[:200]}); expected {expected}, as "
                              "gameday writes it") from None


def _complete_lines(path: Path) -> str:
    """The file's text up to its last newline: a line being written when the run was
    killed is left out."""
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
    except (OSError, ValueError) as e:
        raise BadRunDirectory(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    cut = text.rfind("\n")
    return text[: cut + 1] if cut >= 0 else ""


def is_tick_count(value) -> bool:
    """``value`` is a count of ticks a run can have: an integer from 0 to MAX_TICKS."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TICKS


def journal_file(run_dir: Path, name: str, meta: dict) -> Path:
    """``run_file`` of metrics.csv or events.jsonl (``name``), if it holds no more than gameday
    writes there for a run of meta.json's ticks (those it planned, or did if more; MAX_TICKS
    if it says neither); else ``BadRunDirectory`` naming the file, its size and that bound,
    before it is read: metrics.csv its header and a row a tick of METRICS_VALUE_BYTES a column,
    events.jsonl EVENTS_BYTES and EVENTS_TICK_BYTES a tick."""
    path = run_file(Path(run_dir), name)
    try:
        size = path.stat().st_size
    except OSError:  # (none there: the reader says what that means)
        return path
    ticks = max((meta.get(k) for k in ("ticks_planned", "ticks_done") if is_tick_count(meta.get(k))), default=MAX_TICKS)
    if name == METRICS:
        with open(path, "rb") as f:
            header = f.readline(JSON_BYTES)
        columns = header.count(b",") + 1
        bound = len(header) + ticks * columns * METRICS_VALUE_BYTES
        what = f"its header and a row a tick of at most {METRICS_VALUE_BYTES} bytes for each of its {columns:,} columns"
    else:
        bound = EVENTS_BYTES + ticks * EVENTS_TICK_BYTES
        what = f"{EVENTS_BYTES // 2**20} MiB and {EVENTS_TICK_BYTES // 2**10} KiB a tick"
    if size > bound:
        raise BadRunDirectory(f"{path}: {size:,} bytes; expected at most {bound:,} bytes for a run of {ticks:,} ticks "
                              f"({what}, as gameday writes it): it is not read")
    return path


def _meta(run_dir: Path, meta: dict | None) -> dict:
    """``meta``, or the run directory's meta.json (what of it is not an object: nothing)."""
    if meta is None:
        meta = read_json(run_dir, META, "the run's meta (seed, tick, status ...)")
    return meta if isinstance(meta, dict) else {}


def read_metrics(run_dir: Path, meta: dict | None = None) -> pd.DataFrame:
    """metrics.csv's whole rows (``meta``: the run's meta.json, read if not given, whose ticks bound its size)."""
    path = journal_file(Path(run_dir), METRICS, _meta(Path(run_dir), meta))
    text = _complete_lines(path)
    if not text:
        return pd.DataFrame()
    try:
        return pd.read_csv(io.StringIO(text))
    except ValueError as e:  # (pandas' ParserError: a row with more fields than the header)
        raise BadRunDirectory(f"{path}: cannot be read as CSV ({str(e).strip()}); expected a header line and a row per "
                              "tick, as gameday writes it") from None


def parse_event(line: str, n: int, path: Path) -> dict:
    """Line ``n`` of events.jsonl (``path``) as its event; ``BadRunDirectory`` naming the line
    and what is wrong if it is not one as gameday writes it."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise BadRunDirectory(f"{path}: line {n} is not JSON ({type(e).__name__}: {str(e)[:200]}); expected an "
                              "event per line, as gameday writes it") from None
    problem = unlike(row, EventLine)
    if problem is None and not is_tick_count(row["tick"]):
        problem = f"tick is {reprlib.repr(row['tick'])}; expected a tick of a run (0 to {MAX_TICKS:,})"
    if problem:
        raise BadRunDirectory(f"{path}: line {n}: {problem}; not an event as gameday writes it (an object with "
                              f"{', '.join(EVENT_KEYS)}, then its details)")
    return row


def read_events(run_dir: Path, meta: dict | None = None) -> pd.DataFrame:
    """events.jsonl's whole lines (``meta``: as ``read_metrics``)."""
    path = journal_file(Path(run_dir), EVENTS, _meta(Path(run_dir), meta))
    rows = [parse_event(line, n, path) for n, line in enumerate(_complete_lines(path).splitlines(), 1) if line.strip()]
    if not rows:
        return pd.DataFrame(columns=list(EVENT_KEYS))
    return pd.DataFrame(rows)


class Event(dict):
    """An event as a report reads it: a detail it lacks is a refusal naming the file, the
    event and the detail, not a KeyError deep in the report."""

    def __init__(self, path: Path, fields: dict):
        super().__init__(fields)
        self.path = path

    def __missing__(self, key):
        raise BadRunDirectory(f"{self.path}: the {self.get('event')} event of tick {self.get('tick')} has no {key!r}; "
                              "expected the details gameday writes with it")


def meta_problem(meta: dict) -> str | None:
    """What of meta.json is not what the readers rely on, or None: the tick and start clock
    every run records, and its ticks planned and done, if it says them."""
    tick_s, start = meta.get("tick_s"), meta.get("start_clock")
    if not _fits(tick_s, float) or not MIN_TICK_S <= tick_s <= MAX_TICK_S:
        return (f"tick_s is {reprlib.repr(tick_s)}; expected the tick in seconds (a number from {MIN_TICK_S:g} to "
                f"{MAX_TICK_S:g}), which every run records")
    try:
        parse_clock(start if isinstance(start, str) else None)
    except ValueError:
        return (f"start_clock is {reprlib.repr(start)}; expected the clock time the run starts at (a text HH:MM[:SS]), "
                "which every run records")
    return next((f"{k} is {reprlib.repr(meta[k])}; expected a count of ticks (an integer from 0 to {MAX_TICKS:,})"
                 for k in ("ticks_planned", "ticks_done") if k in meta and not is_tick_count(meta[k])), None)


def not_a_run_directory(d: Path) -> str | None:
    """Why ``d`` is not a run directory at all (no such directory, a file, no meta.json), or
    None: it may be one."""
    if not d.is_dir():
        return f"{d} is not a run directory: {'not a directory' if d.exists() else 'no such directory'}"
    return None if run_file(d, META).exists() else f"{d} is not a run directory: it has no {META}"


def load_run(run_dir) -> RunData:
    d = Path(run_dir)
    why = not_a_run_directory(d)
    if why is not None:
        raise NotARunDirectory(why)
    meta_path = run_file(d, META)
    meta = read_json(d, META, "the run's meta (seed, tick, status ...)")
    if not isinstance(meta, dict):
        raise BadRunDirectory(f"{meta_path}: got {type(meta).__name__}; expected an object (the run's seed, tick, status ...)")
    problem = meta_problem(meta)
    if problem:
        raise BadRunDirectory(f"{meta_path}: {problem}")
    if meta.get("status") == RUNNING and lock_holder(d) is None:
        # No live process holds it: the one writing it ended without closing it (killed), so its
        # ticks_done (written at the end) was never written; its whole rows are the ticks it did.
        metrics = journal_file(d, METRICS, meta)
        meta = meta | {"status": INTERRUPTED, UNCLOSED: True, "ticks_done": complete_ticks(d) if metrics.is_file() else 0}
    score = read_shaped(d, SCORE, Score, "the run's score")
    attribution = read_shaped(d, ATTRIBUTION, Attribution, "the counterfactuals of the run's actions")
    return RunData(dir=d, meta=meta, score=score, attribution=attribution)


def check_run(run: RunData) -> list[str]:
    """What a report of ``run`` must warn it lacks, each a sentence naming the file (a run
    killed, or stopped by a write that failed, leaves a last line cut short and no score);
    ``BadRunDirectory`` where there is nothing to report from (``load_run`` has checked
    meta.json): no metrics.csv (or not even its header), no events.jsonl, no playbook."""
    d, meta = run._tables(), run.meta
    meta_path = run_file(d, META)
    for name, what in ((METRICS, "a header line and a row per tick"), (EVENTS, "the run's events, one per line")):
        if not run_file(d, name).is_file():
            raise BadRunDirectory(f"{d / name}: missing; expected {what} (every run directory has it from its start)")
    if not run_file(d, VALIDATED).is_file() and not run_file(d, PLAYBOOK).is_file():
        raise BadRunDirectory(f"{d}: neither {VALIDATED} nor {PLAYBOOK}; expected the playbook the run played")
    warnings = []
    metrics, rows = d / METRICS, len(run.metrics)
    if run.metrics.columns.empty:
        what = "its one line, the header, is cut short" if cut_short(metrics) else "empty, not even its header"
        raise BadRunDirectory(f"{metrics}: {what}; expected a header line and a row per tick")
    if cut_short(metrics):
        warnings.append(f"{metrics}: its last row is cut short (the run stopped while writing it); the report reads "
                        f"the {rows} whole row{'s' * (rows != 1)}")
    done = meta.get("ticks_done")
    if rows == 0:
        warnings.append(f"{metrics}: its header and no tick" + (
            f", though {META} says {done} ticks were done (the file lost them)" if isinstance(done, int) and done else
            " (the run stopped before its first tick was written)") + ": the report has no figures")
    elif isinstance(done, int) and rows < done:
        warnings.append(f"{metrics}: {rows} rows, where {META} says {done} ticks were done (the file lost its end): "
                        f"the report covers those {rows} ticks, and leaves out the score of the whole run")
    events = len(run.events)
    if cut_short(d / EVENTS):
        warnings.append(f"{d / EVENTS}: its last line is cut short (the run stopped while writing it); the report reads "
                        f"the {events} whole line{'s' * (events != 1)}")
    if run.score is None:
        warnings.append(f"{d / SCORE}: missing, though {META} says the run is complete: the report has no score"
                        if run.complete else f"{d / SCORE}: none ({META} says status {meta.get('status')}: the run did "
                                             "not finish, and was not scored): the report has no verdict")
    if meta.get(UNCLOSED):
        warnings.append(f"{meta_path}: says the run is {RUNNING}, though no process holds {d} any more: the process "
                        f"writing it ended without closing it (killed), so it is read as {INTERRUPTED}")
    pid = lock_holder(d)
    if pid is not None:
        warnings.append(f"{d}: process {pid} is still writing it; the report covers what was written so far")
    return warnings


def lock_holder(directory: Path) -> int | None:
    """The pid of the live process holding ``directory``'s LOCK (0 if it has not written
    its pid yet), or None if none does: no lock file, or one a process that ended left."""
    import fcntl

    try:  # (O_NOFOLLOW, O_NONBLOCK: a link or a FIFO planted there is not followed nor waited on)
        fd = os.open(Path(directory) / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return pid_in(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def pid_in(fd: int) -> int:
    """The pid a lock file holds (its first line), or 0 if it holds none yet."""
    first = os.pread(fd, 32, 0).split(b"\n", 1)[0]
    return int(first) if first.isdigit() else 0


def cut_short(path: Path) -> bool:
    """The file ends in a line without its newline: written when the run stopped."""
    with open(path, "rb") as f:
        if f.seek(0, io.SEEK_END) == 0:
            return False
        f.seek(-1, io.SEEK_END)
        return f.read(1) != b"\n"


def complete_ticks(run_dir: Path) -> int:
    """The ticks whose metrics row was written whole: a run whose process was killed may
    end in a row cut short, and its meta.json still says it is running."""
    with open(Path(run_dir) / METRICS, "rb") as f:  # (counted a MiB at a time: a file of hundreds of MB is not held)
        rows = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(2**20), b""))
    return max(0, rows - 1)  # the header
