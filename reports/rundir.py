"""The run directory's and the session directory's format (their file names, first
columns and statuses), written once here for the writers in orchestrator (engine/journal.py,
runs/, live/) and the readers in reports; and reading a run directory with pandas,
tolerant of a run killed mid-write, and never through a symbolic link out of it
(``files.inside``); ``check_run`` says what is missing or cut short."""
from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TypedDict

import pandas as pd
import yaml

from .files import OutsideDirectory, inside, not_regular
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
ERROR = "error.txt"  # why the run failed, if it did: a bug's traceback, or the write that failed and the system's error
#: held (fcntl.flock) by the process writing a run's or a comparison's directory, its pid inside;
#: removed when it is done (one a killed process left is free, and taken over)
LOCK = ".lock"
RUN_FILES = (META, PLAYBOOK, VALIDATED, RUNBOOK, COLUMNS, METRICS, EVENTS, SCORE, ATTRIBUTION, FORK, RUNBOOK_BEFORE_FORK,
             REPORT, ERROR, LOCK)

METRIC_INDEX = ("tick", "time_s", "clock")
EVENT_KEYS = ("tick", "clock", "agent", "event")
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


class BadRunDirectory(NotARunDirectory):
    """A run directory that cannot be read as one: a file it always has missing or not what
    it should be, or a path of it leading out of it; the message names the file and what is wrong."""


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
        return read_json(self._tables(), COLUMNS, "every metrics column's meaning") or {}

    @cached_property
    def playbook(self) -> dict:
        """The playbook as the run validated it (``VALIDATED``): what the reports read, so
        that they restate no default. A run directory written before it was kept has its
        rendered playbook read as written, with the defaults of then for what it left out
        (``_DEFAULTS_BEFORE_VALIDATED``) and its par times in seconds, as validated."""
        validated = read_json(self._tables(), VALIDATED, "the playbook as validated")
        if validated is not None:
            return validated
        try:
            doc = yaml.safe_load(run_file(self._tables(), PLAYBOOK).read_text(encoding="utf-8")) or {}
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


#: the most a run directory's JSON file may hold, in bytes (a run writes a few KB; a directory
#: someone else made could hold anything)
JSON_BYTES = 64 * 2**20


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


def read_metrics(run_dir: Path) -> pd.DataFrame:
    path = run_file(Path(run_dir), METRICS)
    text = _complete_lines(path)
    if not text:
        return pd.DataFrame()
    try:
        return pd.read_csv(io.StringIO(text))
    except ValueError as e:  # (pandas' ParserError: a row with more fields than the header)
        raise BadRunDirectory(f"{path}: cannot be read as CSV ({str(e).strip()}); expected a header line and a row per "
                              "tick, as gameday writes it") from None


def read_events(run_dir: Path) -> pd.DataFrame:
    path = run_file(Path(run_dir), EVENTS)
    rows = []
    for n, line in enumerate(_complete_lines(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise BadRunDirectory(f"{path}: line {n} is not JSON ({type(e).__name__}: {str(e)[:200]}); expected an "
                                  "event per line, as gameday writes it") from None
        if not isinstance(row, dict) or "tick" not in row or "event" not in row:
            raise BadRunDirectory(f"{path}: line {n} is not an event; expected an object with {', '.join(EVENT_KEYS)}")
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=list(EVENT_KEYS))
    return pd.DataFrame(rows)


def load_run(run_dir) -> RunData:
    d = Path(run_dir)
    meta_path = run_file(d, META)
    if not meta_path.exists():
        raise NotARunDirectory(f"{d} is not a run directory (no {META})")
    meta = read_json(d, META, "the run's meta (seed, tick, status ...)")
    if not isinstance(meta, dict):
        raise BadRunDirectory(f"{meta_path}: got {type(meta).__name__}; expected an object (the run's seed, tick, status ...)")
    if meta.get("status") == RUNNING and lock_holder(d) is None:
        # No live process holds it: the one writing it ended without closing it (killed).
        meta = meta | {"status": INTERRUPTED, UNCLOSED: True}
    score = read_json(d, SCORE, "the run's score")
    attribution = read_json(d, ATTRIBUTION, "the counterfactuals of the run's actions")
    return RunData(dir=d, meta=meta, score=score, attribution=attribution)


def check_run(run: RunData) -> list[str]:
    """What a report of ``run`` must warn it lacks, each a sentence naming the file (a run
    killed, or stopped by a write that failed, leaves a last line cut short and no score);
    ``BadRunDirectory`` where there is nothing to report from: a meta.json without the tick
    and start clock every run records, no metrics.csv (or not even its header), no
    events.jsonl, no playbook."""
    d, meta = run._tables(), run.meta
    meta_path = run_file(d, META)
    tick_s, start = meta.get("tick_s"), meta.get("start_clock")
    if isinstance(tick_s, bool) or not isinstance(tick_s, (int, float)) or not tick_s > 0:
        raise BadRunDirectory(f"{meta_path}: tick_s is {tick_s!r}; expected the tick in seconds (> 0), which every run records")
    try:
        parse_clock(start)
    except (TypeError, ValueError):
        raise BadRunDirectory(f"{meta_path}: start_clock is {start!r}; expected the clock time the run starts at "
                              "(HH:MM[:SS]), which every run records") from None
    for name, what in ((METRICS, "a header line and a row per tick"), (EVENTS, "the run's events, one per line")):
        if not run_file(d, name).is_file():
            raise BadRunDirectory(f"{d / name}: missing; expected {what} (every run directory has it from its start)")
    if not run_file(d, VALIDATED).is_file() and not run_file(d, PLAYBOOK).is_file():
        raise BadRunDirectory(f"{d}: neither {VALIDATED} nor {PLAYBOOK}; expected the playbook the run played")
    warnings = []
    metrics, rows = d / METRICS, len(run.metrics)
    if run.metrics.columns.empty:
        raise BadRunDirectory(f"{metrics}: empty, not even its header; expected a header line and a row per tick")
    if _cut_short(metrics):
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
    if _cut_short(d / EVENTS):
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


def _cut_short(path: Path) -> bool:
    """The file ends in a line without its newline: written when the run stopped."""
    with open(path, "rb") as f:
        if f.seek(0, io.SEEK_END) == 0:
            return False
        f.seek(-1, io.SEEK_END)
        return f.read(1) != b"\n"


def complete_ticks(run_dir: Path) -> int:
    """The ticks whose metrics row was written whole: a run whose process was killed may
    end in a row cut short, and its meta.json still says it is running."""
    with open(Path(run_dir) / METRICS, "rb") as f:
        rows = f.read().count(b"\n")
    return max(0, rows - 1)  # the header
