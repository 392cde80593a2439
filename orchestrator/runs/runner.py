"""Running a world: load -> build -> host -> step, journalling every tick."""
from __future__ import annotations

import collections
import copy
import filecmp
import itertools
import json
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from agents import OUTSIDE, Message
from agents.operator import Operator

from reports import rundir
from reports.rundir import NotARunDirectory, RunData, load_run
from orchestrator.engine.clock import PacedClock, SimulatedClock
from orchestrator.errors import (HostingError, InternalError, InvalidPlaybook, Issue, RunDirectoryError, WriteError,
                                 os_error_text, setting, shown)
from orchestrator.hosting.host import Host, HostingOptions
from orchestrator.hosting.inprocess import TickResult, build_agent
from orchestrator.engine.journal import ScoreOnly, check_out_dir
from orchestrator.runs.directory import RunDirectory, interrupt_deferred, refuse_if_held
from orchestrator.playbook.checks import timing_issues
from orchestrator.playbook.format import MOST_SHARDS
from orchestrator.playbook.loader import Playbook, load_playbook
from orchestrator.playbook.variables import Given
from orchestrator.playbook.runbooks import load_runbook
from orchestrator.playbook.hints import never_reached
from orchestrator.playbook.files import runbook_files
from orchestrator.engine.scoring import Scorer
from orchestrator.hosting.wire import encode
from orchestrator.engine.world import OPERATOR, build_plan


@dataclass
class RunSpec:
    """One run, as the CLI and the API describe it; ``prepare`` reads it once. Errors name
    its fields (``errors.setting``), which the CLI says as the flags the user typed."""

    playbook: str = "us-east-1-2021"
    runbook: str | None = None  # None: the playbook's "historical" runbook if it has one, else "none"
    seed: int = 1
    sets: Given | dict | None = None  # the variables given (a Given also says where each was said)
    duration: float | None = None
    tick: float | None = None
    shards: int | None = None  # split every population into this many shards (None: as the playbook says)
    console: bool = False  # a human team operates this world through a console (the runbook is not used)


def default_runbook(pb: Playbook) -> str:
    """The runbook a run plays when none is named: the playbook's "historical" one if it
    has one, else "none"."""
    return "historical" if "historical" in runbook_files(pb.name, pb.source) else "none"


def prepare(spec: RunSpec):
    """Everything that can fail on bad input happens here, before any file is written."""
    pb: Playbook = load_playbook(spec.playbook, spec.sets)
    rb_text, rb = load_runbook(spec.runbook or default_runbook(pb), pb)
    issues = timing_issues(pb.data, spec.duration, spec.tick)
    if spec.shards is not None and (not isinstance(spec.shards, int) or isinstance(spec.shards, bool)
                                    or not 1 <= spec.shards <= MOST_SHARDS):
        issues.append(Issue(setting("shards"), spec.shards, f"an integer >= 1 and <= {MOST_SHARDS:,}"))
    if not isinstance(spec.seed, int) or isinstance(spec.seed, bool) or spec.seed < 0:
        issues.append(Issue(setting("seed"), spec.seed, "an integer >= 0"))
    if issues:
        raise InvalidPlaybook("options", "options", issues)
    plan = build_plan(pb, rb, spec.seed, spec.duration, spec.tick, spec.shards, spec.console)
    return pb, rb_text, rb, plan


class WorldRun:
    """One world being played: its host, its run directory and its scorer. ``execute``
    plays one to the end; a live session plays one per team, a tick at a time, and
    injects the team's commands. Everything that enters the world from outside is
    journalled as an ``injected`` event with the tick that consumed it, so that
    ``replay`` can play the run again exactly."""

    def __init__(self, spec: RunSpec, out: Path | None, hosting: HostingOptions = HostingOptions(),
                 speed: float | None = None, meta: dict | None = None, keep_action_states: bool = False,
                 files: dict[str, str] | None = None, prepared: tuple | None = None):
        """``out``: the run directory, or None for none (``journal.ScoreOnly``: the score
        and meta are kept in memory). ``keep_action_states``: keep the world's state at
        the end of every tick in which an action took effect (in-process hosting only),
        for the counterfactuals. ``files``: name -> text of more files the run directory
        starts with (over the rendered playbook and runbook it writes: a fork's). ``prepared``:
        what ``prepare(spec)`` gave, when the caller has it already."""
        pb, rb_text, rb, self.plan = prepared or prepare(spec)
        self.pb = pb
        # the playbook's absolute path, so that a fork finds the runbooks beside it from anywhere
        info = {"playbook": pb.name, "playbook_source": str(Path(pb.source).resolve()),
                "runbook": "console" if spec.console else rb["name"],
                "seed": spec.seed, "variables": pb.variables, "duration_s": self.plan.ticks * self.plan.info.dt, **hosting.meta(),
                "speed": speed or "max",
                "operator": "console" if spec.console else "runbook", "shards_option": spec.shards,
                "shards": {pop: len(parts) for pop, parts in self.plan.shards.items()},
                "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "never_reached": never_reached(pb.data, None if spec.console else rb,
                                               self.plan.info.start_s + self.plan.ticks * self.plan.info.dt)} \
            | (meta or {})
        if out is not None:  # (before starting any actor)
            refuse_if_held(out)
            check_out_dir(out)
        self.dir = None if out is None else Path(out)
        self.scorer = Scorer(pb.data, self.plan.info.dt, self.plan.info.start_s)
        self.injections = 0
        self.journal: list[dict] = []  # events of the next tick that come from outside the world
        self.action_states: dict[int, dict] = {}
        self.closed = False
        #: the last tick finished and its metrics as journalled (None before the first): read, one
        #: reference at a time, by a live metrics endpoint on another thread (live/metrics_endpoint.py)
        self.latest: tuple[int, dict[str, dict[str, float]]] | None = None
        self.host: Host = hosting.make(self.plan)
        self.keep_action_states = keep_action_states and self.host.local
        self.wall0 = time.perf_counter()
        # (the writer last: from the moment there is a run directory, the caller closes it)
        try:
            with interrupt_deferred():  # (a directory put in place is kept and closed, however this is stopped)
                self.writer = RunDirectory(out, self.plan, info, {
                    rundir.PLAYBOOK: pb.text, rundir.VALIDATED: json.dumps(pb.data, indent=1) + "\n",
                    rundir.RUNBOOK: rb_text, **(files or {})}) if out is not None else ScoreOnly(self.plan, info)
        except BaseException:
            if hasattr(self, "writer"):  # (interrupted as it was put in place: it says so)
                self.writer.close(rundir.INTERRUPTED, None)
            self.host.close()
            raise

    @property
    def tick(self) -> int:
        """The next tick to step."""
        return self.host.tick

    @property
    def done(self) -> bool:
        return self.host.tick >= self.plan.ticks

    def inject(self, kind: str, dst: str, body: dict, **journal) -> int:
        """Send ``body`` into the world from outside, for the next tick; returns that tick.
        ``journal``: more to record with it (who sent it)."""
        self.injections += 1
        t = self.host.tick
        self.host.inject(encode(Message(kind=kind, src=OUTSIDE, dst=dst, body=body, seq=self.injections, tick=t)))
        self.journal.append({"tick": t, "agent": OUTSIDE, "event": "injected", "kind": kind, "dst": dst, "body": body,
                             **journal})
        return t

    def note(self, event: str, **data) -> None:
        """A session's own event (a pause, a message to the team) in this run's journal;
        it changes nothing in the world."""
        self.journal.append({"tick": self.host.tick, "agent": "session", "event": event, **data})

    def begin(self) -> None:
        self.host.begin()

    def finish(self) -> TickResult:
        """Collect the tick begun, score it and journal it."""
        res = self.host.finish()
        world, full = self.plan.merge_shards(res.metrics)
        events = res.events + self.journal
        self.journal = []
        milestones = self.scorer.update(res.tick, world, events)
        try:
            self.writer.write_tick(res.tick, full, events + milestones)
        except OSError as e:  # (a full disk, an I/O error: RunDirectory's files name themselves)
            raise self.fail(f"writing tick {res.tick}", e) from None
        self.latest = (res.tick, full)
        res.events = events + milestones
        if self.keep_action_states and any(e["event"] == "action_effective" for e in res.events):
            self.action_states[res.tick] = self.state()  # (where the counterfactuals start from)
        return res

    def step(self) -> TickResult:
        self.begin()
        return self.finish()

    # -- what enters the world other than by stepping it -------------------------------

    def feed(self, recorded: list[dict]) -> None:
        """Send recorded inputs in again: what was injected, and a session's notes."""
        for e in recorded:
            rest = {k: v for k, v in e.items() if k not in ("tick", "clock", "agent", "event", "kind", "dst", "body")}
            if e["event"] == "injected":
                self.inject(e["kind"], e["dst"], e["body"], **rest)
            else:
                self.note(e["event"], **rest)

    def _local(self, what: str):
        if not self.host.local:
            raise ValueError(f"{what} needs the world's agents in this process (in-process hosting)")
        return self.host

    def watch(self, takeovers: dict[int, dict]) -> None:
        """Before the first tick: the world's operator (scripted or a team's) watches the
        conditions of the runbooks that will take over from it, in tick order
        (``Operator.watching``). ``takeovers``: tick -> {"rules": ...}."""
        op = self._local("watching takeovers").agent(OPERATOR) if takeovers else None
        if isinstance(op, Operator):
            op.watching = [takeovers[t]["rules"] for t in sorted(takeovers)]

    def take_over(self, runbook: dict | None) -> None:
        """From the next tick, an operator that follows ``runbook["rules"]`` replaces the
        world's, with what the old one knew (None: nothing to do)."""
        if runbook is None:
            return
        host = self._local("a takeover")
        old = host.agent(OPERATOR)
        new = build_agent("operator:runbook", OPERATOR, {"rules": runbook["rules"], "_wiring": old.wiring}, self.plan.info)
        new.take_over(old)
        host.replace_agent(OPERATOR, new)

    def withhold(self, action: str) -> None:
        """Drop the effects ``action`` sent in the tick just played, before they arrive (a
        counterfactual: the world without that action)."""
        self._local("withholding an action").drop(lambda m: m.kind == "apply" and m.body.get("by") == action)

    def state(self) -> dict:
        """The world, its score so far and the count of what was injected: ``restore`` goes back to it."""
        return {"host": self._local("a snapshot").snapshot(), "scorer": copy.deepcopy(self.scorer), "seq": self.injections}

    def restore(self, state: dict) -> None:
        self._local("a restore").restore(state["host"])
        self.scorer = copy.deepcopy(state["scorer"])
        self.injections = state["seq"]

    def data(self) -> RunData:
        """A run played without a directory, once closed: its meta and score (no tables)."""
        return RunData(dir=None, meta=self.writer.meta, score=self.writer.score)

    def close(self, status: str) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            with interrupt_deferred():  # (the score and the status written whole, also at a time limit's cancel)
                self._close(status)
        finally:
            self.host.close()

    def _close(self, status: str) -> None:
        try:
            for e in self.journal:  # session notes after the last tick still belong in the journal
                self.writer.event(e.pop("tick"), e)
            self.journal = []
            self._final_meta()
            self.writer.close(status, self.scorer.score())
        except OSError as e:
            raise self.fail(f"ending the run ({rundir.SCORE}, {rundir.META})", e) from None

    def _final_meta(self) -> None:
        self.writer.meta["wall_seconds"] = round(time.perf_counter() - self.wall0, 3)
        self.writer.meta["rejected_frames"] = self.host.rejected_frames
        self.writer.meta.update(self.host.facts())

    def end_failed(self, error_text: str) -> dict[str, str]:
        """End a run that cannot go on (a bug, a write that failed): its directory marked
        failed, with ``error_text`` in error.txt (``RunDirectory.fail``). Returns what could
        not be written (file name -> the system's error)."""
        self.closed = True
        try:
            self._final_meta()
            try:
                score = self.scorer.score()
            except Exception:  # noqa: BLE001 - (the run failed already: what failed is said, not this)
                score = None
            return self.writer.fail(error_text, score)
        finally:
            self.host.close()

    def fail(self, doing: str, e: OSError) -> WriteError:
        """The run directory could not be written (``doing``; the system's error ``e``): end
        the run there (``end_failed``) and return the error that says what failed and what
        was left readable."""
        what = f"{doing}: {os_error_text(e)}"
        not_ours = ("This is neither a bug in gameday nor a mistake in your input: the system refused a write "
                    "(a full disk, a lost mount, a permission changed, an I/O error).")
        unwritten = self.end_failed(f"The run failed {what}.\n\n{not_ours} The files written before are whole: "
                                    f"{rundir.METRICS} and {rundir.EVENTS} hold the ticks done before, which `gameday "
                                    f"report` reads.\n\nWhere it failed:\n" + "".join(traceback.format_exception(e)))
        return WriteError(f"the run stopped {what}. {not_ours} {failed_directory(self.dir, self.writer.meta, unwritten)}")


def failed_directory(out: Path, meta: dict, unwritten: dict[str, str]) -> str:
    """What a failed run left, for its message: where, how much, and what could not be written."""
    marked = (f"; its {rundir.META} could not be marked failed ({unwritten[rundir.META]})" if rundir.META in unwritten
              else ", marked failed")
    said = (f"; {rundir.ERROR} could not be written either ({unwritten[rundir.ERROR]})." if rundir.ERROR in unwritten
            else f"; {out / rundir.ERROR} says what failed.")
    return (f"The run directory {out} holds the {meta.get('ticks_done', 0)} ticks written before (`gameday report {out}` "
            f"reports them){marked}{said}")


def execute(spec: RunSpec, out: Path | None, progress: bool = False, clock=None, hosting: HostingOptions = HostingOptions(),
            speed: float | None = None, injections: dict[int, list[dict]] | None = None,
            attribution: bool = False, takeovers: dict[int, dict] | None = None, meta: dict | None = None,
            files: dict[str, str] | None = None, on_start=None) -> RunData:
    """``out``: the run directory; None writes none (the returned ``RunData`` has its meta
    and score, and no ``dir``: a comparison's runs). ``speed``: simulated seconds per
    wall second (None: as fast as possible).
    ``injections``: tick -> recorded ``injected`` events (and session notes) to send into
    the world again before that tick (a replay). ``takeovers``: tick -> the runbook whose
    operator takes over before that tick (a fork, played or replayed: ``take_over``). ``meta``: more
    for meta.json, ``files`` for the run directory (``WorldRun``). ``attribution``: once the run is
    complete, play the counterfactuals of the actions before the loop broke and write
    ``attribution.json`` (orchestrator/runs/attribution.py). ``on_start(run)``: called with the
    ``WorldRun`` before its first tick (a live metrics endpoint watches it)."""
    if attribution and out is None:
        raise ValueError("execute: the counterfactuals are played from a run directory (out is None)")
    status = rundir.INTERRUPTED
    bar = None
    run = WorldRun(spec, out, hosting, speed, meta=meta, keep_action_states=attribution, files=files)
    try:  # (from here on, whatever stops the run closes its directory: a Ctrl-C, a comparison's time limit)
        if not injections and not takeovers:  # nothing comes from outside: the hosts may step ahead of the journal
            run.host.run_ahead()
        run.watch(takeovers or {})
        if on_start is not None:
            on_start(run)
        if speed is not None:
            clock = PacedClock(run.plan.info.dt, speed)
        clock = clock or SimulatedClock()
        bar = _progress(run.plan.ticks, run.plan.info.dt) if progress else None
        while not run.done:
            run.take_over((takeovers or {}).get(run.tick))
            run.feed((injections or {}).get(run.tick, []))
            clock.wait_for(run.tick)
            run.step()
            if bar is not None:
                bar.update(1)
        run.feed((injections or {}).get(run.tick, []))  # a session's notes after the last tick
        status = rundir.COMPLETE
    except HostingError as e:
        status = rundir.FAILED
        if out is None:
            raise
        raise HostingError(f"{e}; the run directory {out} holds the ticks done before") from None
    except WriteError:  # (its directory is marked failed already: WorldRun.fail)
        status = rundir.FAILED
        raise
    except Exception as e:  # a bug: validation has checked everything a playbook can say
        status = rundir.FAILED
        failed = f"the simulation failed at tick {run.tick} ({type(e).__name__}: {e}). This is a bug in gameday, not in your input"
        if out is None:
            raise InternalError(f"{failed}; play this run with `gameday run` (same playbook, runbook and seed) for a run "
                                f"directory with the details to report") from None
        unwritten = run.end_failed(traceback.format_exc())
        error = Path(out) / rundir.ERROR
        details = f"{error} the details to report" if rundir.ERROR not in unwritten else \
            f"the details to report, which could not be written to {error} ({unwritten[rundir.ERROR]}), follow:\n" + \
            traceback.format_exc()
        raise InternalError(f"{failed}; the run directory {out} holds the ticks done before, and {details}") from None
    finally:
        run.close(status)  # (nothing more once it failed: closed then)
        if bar is not None:
            bar.close()
    if attribution and status == rundir.COMPLETE:
        from orchestrator.runs import attribution as counterfactual  # it plays worlds itself: imported when used

        try:
            counterfactual.write(out, run.action_states)
        except OSError as e:
            raise WriteError(f"the run is complete (its directory {out} holds every tick and the score), but writing "
                             f"{rundir.ATTRIBUTION} failed: {os_error_text(e)}. Without it, the report's finding on which "
                             "action broke the loop is a heuristic, labelled as one") from None
    return run.data() if out is None else load_run(out)


#: meta.json's key for the runbooks that took over during a run (a fork's): [{tick, runbook, rules}]
TAKEOVERS = "takeovers"
#: what meta.json says of a fork (written by runs/fork.py)
FORK_META = ("forked_from", "forked_at", "forked_at_tick", "runbook_before_fork", TAKEOVERS)


def recording(run_dir: Path, duration_s: float | None = None) \
        -> tuple[dict, dict[int, list[dict]], dict[int, dict], RunSpec]:
    """What it takes to play a recorded run again: (meta, tick -> recorded inputs, tick ->
    the runbook that took over then, the spec). A fork starts with the runbook in
    ``runbook-before-fork.yaml``. ``duration_s``: play this long instead of the ticks the
    run did."""
    run_dir = Path(run_dir)
    why = rundir.not_a_run_directory(run_dir)
    if why is not None:
        raise RunDirectoryError(why)
    try:
        meta = load_run(run_dir).meta
        events = rundir.journal_file(run_dir, rundir.EVENTS, meta)
        first = rundir.run_file(run_dir, rundir.RUNBOOK_BEFORE_FORK if meta.get(TAKEOVERS) else rundir.RUNBOOK)
        playbook = rundir.run_file(run_dir, rundir.PLAYBOOK)
        ticks, _ = recorded_ticks(run_dir, meta)
        injections = _injections(events)
    except NotARunDirectory as e:  # (a meta.json that is not JSON, a link out of the directory, an event that is not one)
        raise RunDirectoryError(str(e)) from None
    seed = meta.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise RunDirectoryError(f"{run_dir / rundir.META}: seed is {shown(seed)}; expected the run's seed (an integer "
                                ">= 0), which every run records")
    if ticks == 0:
        raise RunDirectoryError(f"{run_dir}: the run did not get through a single tick; nothing to play again")
    takeovers = {int(a["tick"]): a for a in meta.get(TAKEOVERS) or []}
    for rule in (r for a in takeovers.values() for r in a.get("rules") or []):
        if isinstance(rule.get("do"), dict):  # (a fork recorded before a rule's actions were a list)
            rule["do"] = [rule["do"]]
    spec = RunSpec(playbook=str(playbook), runbook=str(first), seed=seed,
                   duration=duration_s or ticks * float(meta["tick_s"]), tick=float(meta["tick_s"]),
                   shards=meta.get("shards_option"), console=meta.get("operator") == "console")
    return meta, injections, takeovers, spec


def _injections(events: Path) -> dict[int, list[dict]]:
    """Tick -> what entered the world from outside then, as a recording's events.jsonl says
    (its whole lines: a killed run's last one may be cut short)."""
    injections: dict[int, list[dict]] = {}
    try:
        with open(events, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.endswith("\n"):
                    break
                e = rundir.parse_event(line, n, events)
                if e["event"] == "injected" or e.get("agent") == "session":
                    injections.setdefault(e["tick"], []).append(e)
    except (OSError, ValueError) as e:  # (ValueError: not UTF-8)
        raise RunDirectoryError(f"{events}: cannot be read ({getattr(e, 'strerror', None) or e}); a replay plays what "
                                "entered the world from it") from None
    return injections


def recorded_ticks(run_dir: Path, meta: dict | None = None) -> tuple[int, str]:
    """The ticks a recording holds whole, which a replay plays and compares: metrics.csv's
    whole rows (RunWriter.close counts them so; ``meta``: its meta.json as ``load_run`` reads
    it); and why they are not all of it, if they are not ("": they are): its writer killed,
    fewer rows than meta.json says, a last line cut short."""
    run_dir = Path(run_dir)
    meta = load_run(run_dir).meta if meta is None else meta
    metrics = rundir.journal_file(run_dir, rundir.METRICS, meta)
    ticks = rundir.complete_ticks(run_dir) if metrics.is_file() else 0
    done = meta.get("ticks_done", ticks)
    why = [f"its writer was killed: {rundir.META} still says {rundir.RUNNING}"] if meta.get(rundir.UNCLOSED) else \
        [f"{rundir.META} says {done} ticks were done"] if done != ticks else []
    why += [f"the last line of {name} is cut short" for name in REPLAYED_FILES
            if (run_dir / name).is_file() and rundir.cut_short(run_dir / name)]
    return ticks, "; ".join(why)


def replay(run_dir: Path, out: Path) -> RunData:
    """Play a recorded run again from its directory: the rendered playbook and runbook,
    the seed, and everything that entered the world from outside (a team's commands, a
    facilitator's faults) at the tick it did; a live session's notes (pauses, messages)
    are copied at their ticks. The result is identical, ticks and events, whichever hosting
    played the recording: the replay plays in process."""
    meta, injections, takeovers, spec = recording(run_dir)
    # what the rendered playbook and runbook do not say: the variables, and a fork's history
    keep = {k: meta[k] for k in ("variables", *FORK_META) if k in meta}
    return execute(spec, out, injections=injections, takeovers=takeovers, meta=keep)


#: what a replay must reproduce byte for byte (events.jsonl but for its hosting events)
REPLAYED_FILES = (rundir.METRICS, rundir.EVENTS)


def same_as_recording(recorded: Path, replayed: Path, ticks: int | None = None) -> list[str]:
    """The files of ``REPLAYED_FILES`` that differ between a recording and its replay, each
    with where it first differs (``first_difference``); none if the replay is identical.
    The events that describe the hosting (``rundir.HOSTING_EVENTS``: an actor replaced
    mid-run) are not results: they are left out of the comparison (``hosting_events``).
    ``ticks``: a recording that stopped mid-tick (``recorded_ticks``) is compared on the
    ticks it holds whole, its line cut short and the events of a tick it has no row of left out."""
    out = []
    for f in REPLAYED_FILES:
        a, b = Path(recorded) / f, Path(replayed) / f
        if ticks is None and filecmp.cmp(a, b, shallow=False):
            continue
        where = first_difference(a, b, ticks)
        if where:
            out.append(f"{f} ({where})")
    return out


def hosting_events(events: Path) -> list[dict]:
    """The events of a journal that describe the hosting, not the world (``rundir.HOSTING_EVENTS``)."""
    return [json.loads(line) for _, line in _lines(events) if _is_hosting(line)]


def hosting_note(events: Path) -> str:
    """What the hosting events of a journal were, as information ("1 host restart"), or ""."""
    counts = collections.Counter(e["event"] for e in hosting_events(events))
    return ", ".join(f"{n} {rundir.HOSTING_EVENTS[kind]}{'s' * (n != 1)}" for kind, n in counts.items())


def _is_hosting(line: str) -> bool:
    if not any(kind in line for kind in rundir.HOSTING_EVENTS):  # (most lines: no JSON to read)
        return False
    try:
        return json.loads(line).get("event") in rundir.HOSTING_EVENTS
    except (ValueError, AttributeError):
        return False


def _lines(path: Path) -> list[tuple[int, str]]:
    """A journal's lines with their numbers, from 1."""
    with open(path, encoding="utf-8") as f:
        return list(enumerate(f, 1))


def _world_lines(events: Path, ticks: int | None = None) -> list[tuple[int, str]]:
    """A journal's lines but for its hosting events, with their numbers in the file;
    ``ticks``: its whole lines of the first ``ticks`` ticks only."""
    return [(n, line) for n, line in _lines(events) if not _is_hosting(line)
            and (ticks is None or line.endswith("\n") and json.loads(line)["tick"] < ticks)]


def first_difference(recorded: Path, replayed: Path, ticks: int | None = None) -> str | None:
    """Where two journal files first differ, as a person looks for it: the line, its tick,
    and for metrics.csv the columns that differ there (an events.jsonl's hosting events
    are skipped, its lines numbered as in the recording); None where the lines compared are
    the same (``ticks``: as ``same_as_recording``)."""
    if recorded.name == rundir.EVENTS:
        ours = _world_lines(recorded, ticks)
        for (n, x), (_, y) in itertools.zip_longest(ours, _world_lines(replayed, ticks), fillvalue=(None, None)):
            if x == y:
                continue
            if x is None or y is None:
                at = n if n is not None else (ours[-1][0] if ours else 0) + 1
                return f"line {at}: the {'recording' if x is None else 'replay'} ends before the other"
            try:  # (a recording edited by hand may not be JSON there)
                tick = json.loads(x).get("tick", "?")
            except (ValueError, AttributeError):
                tick = "?"
            return f"first at line {n}, tick {tick}"
        return None
    with open(recorded, encoding="utf-8") as a, open(replayed, encoding="utf-8") as b:
        header = a.readline().rstrip("\n").split(",")
        if b.readline().rstrip("\n").split(",") != header:
            return "its columns differ"
        rows = (lambda f: f) if ticks is None else (lambda f: itertools.islice(f, ticks))
        for n, (x, y) in enumerate(itertools.zip_longest(rows(a), rows(b)), 2):
            if x == y:
                continue
            if x is None or y is None:
                return f"line {n}: the {'recording' if x is None else 'replay'} ends before the other"
            xs, ys = x.rstrip("\n").split(","), y.rstrip("\n").split(",")
            cols = [c for c, u, v in itertools.zip_longest(header, xs, ys) if u != v]
            more = f" and {len(cols) - 5} more" if len(cols) > 5 else ""
            when = f"tick {xs[0]} ({xs[2]})" if len(xs) > 2 else f"line {n}"
            return f"first at {when}: {', '.join(map(str, cols[:5]))}{more}"
    return None if ticks is not None else "identical lines, different bytes"


def _progress(ticks: int, dt: float):
    from tqdm import tqdm

    # delay: only runs longer than a couple of seconds show a bar; disable=None: not on a pipe
    return tqdm(total=ticks, unit="tick", delay=2.0, disable=None, leave=False, desc="simulating",
                bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} ticks [{elapsed}<{remaining}]")
