"""A live game day: one world per team, the same playbook and seed for all, one session
clock (start, pause, resume, speed), a facilitator's controls, and what each team sees.

No sockets here: ``live.server`` serves a ``Session`` to consoles over ZeroMQ. A team
sees only what leaves its world through its console operator (the observed view with
its gaps, alarms, its own actions' progress, log results) plus what the session tells
it; ground truth stays in the run directory.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agents.base import per_second
from reports import rundir
from orchestrator import budgets
from orchestrator.errors import GamedayError, InvalidInput, Issue, printable, setting, shown, speaking
from reports.files import not_regular, write_json_atomic
from reports.analysis import milestone_label, scored_milestones
from reports.session import CONTROL_TEXT, control_row
from orchestrator.hosting.host import HOSTINGS, PLACEMENTS, HostingOptions
from orchestrator.playbook.names import agent_names
from orchestrator.playbook.effects import normalised_params, param_problems
from orchestrator.playbook.variables import Given, is_number
from orchestrator.live.protocol import MAX_ID, MAX_TEXT, ProtocolError
from orchestrator.runs.runner import RunSpec, WorldRun, prepare
from reports.timefmt import format_clock
from orchestrator.engine.world import OPERATOR

TEAM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
HISTORY = 60  # observed samples kept per metric for sparklines
HEALTH_EVERY_S = 60.0  # simulated seconds between two points of a team's loop health on the scoreboard
MAX_SPEED = 10_000.0
MAX_LAG_S = 2.0  # further behind than this, the clock gives up catching up (no burst of ticks on the consoles)
WAITING, RUNNING, PAUSED, ENDED = "waiting", "running", "paused", "ended"
FACILITATOR_REQUESTS = "_facilitator"  # journalled as _facilitator:<request id>; no team name starts with "_"


def speed_problem(speed) -> str | None:
    """What a session's speed must be, if ``speed`` is not one (None if it is): slower than
    SLOWEST_SPEED a tick is due past the end of time; the facilitator, a resumed journal and
    ``gameday serve --speed`` are held to the same bounds."""
    if (isinstance(speed, (int, float)) and not isinstance(speed, bool) and math.isfinite(speed)
            and budgets.SLOWEST_SPEED <= speed <= MAX_SPEED):
        return None
    return f"a number >= {budgets.SLOWEST_SPEED:g} and <= {MAX_SPEED:g}"


def check_teams(teams: list[str]) -> None:
    issues = [Issue(setting("teams", t), t, "a name of 1-32 letters, digits, - or _") for t in teams if not TEAM_NAME.match(t)]
    if not teams:
        issues.append(Issue(setting("teams"), None, "at least one team"))
    if len(teams) > budgets.LIVE_TEAMS:
        issues.append(Issue(setting("teams"), f"{len(teams)} teams", f"at most {budgets.LIVE_TEAMS} (each is a world "
                                                                     "stepped every tick)"))
    dupes = sorted({t for t in teams if teams.count(t) > 1})
    issues += [Issue(setting("teams", t), t, "a name given once") for t in dupes]
    if issues:
        raise InvalidInput("gameday serve", "options", issues)


class LiveClock:
    """When each tick is due in wall time: ``speed`` simulated seconds per wall second,
    rebased at every start, resume and speed change so that a change applies at once."""

    def __init__(self, dt: float, speed: float | None):
        self.dt, self.speed = dt, speed  # speed None: as fast as the worlds go
        self.base_wall = 0.0
        self.base_tick = 0

    def rebase(self, tick: int, now: float) -> None:
        self.base_wall, self.base_tick = now, tick

    def due(self, tick: int) -> float:
        if self.speed is None:
            return self.base_wall
        return self.base_wall + (tick - self.base_tick) * self.dt / self.speed


_ASKED = "asked:"  # a team view's key for a command not yet requested by its operator

MAX_CONTROLS_SHOWN = 50  # the facilitator's controls its page lists (the latest)


class TeamView:
    """What a team's consoles show, built from the messages its world sends out and the
    team's own events. Every change also goes into a numbered feed, so that a console
    that reconnects asks for what it missed and loses nothing."""

    def __init__(self, team: str, run: WorldRun):
        data = run.pb.data
        self.team = team
        self.dt, self.start_s = run.plan.info.dt, run.plan.info.start_s
        self.stale_after = float(data["monitoring"]["stale_after"])
        self.observe = list(data["monitoring"]["observe"])
        self.units = {m: per_second(run.plan.metric_info(m)["unit"]) for m in self.observe}  # as monitoring sees them
        self.catalogue = [{"name": m["name"], "description": m["description"], "params": m["params"],
                           "lead_time_s": m["lead_time"], "steps": m["steps"] if m["deploy"] else 0,
                           "deploy": m["deploy"], "risk": m["risk"]} for m in data["mitigations"]]
        self.view: dict[str, list] = {}  # metric -> [value, age_s] as last published
        self.view_tick: int | None = None
        self.history: dict[str, deque] = {m: deque(maxlen=HISTORY) for m in self.observe}
        #: every view the operators were shown: [seconds after midnight, value or None (no fresh
        #: sample) per observed metric]; numbered like the feed, for charts that lose nothing
        self.series: list[list] = []
        self.health: list[list] = []  # [seconds after midnight, loop health 0..1], every HEALTH_EVERY_S
        self.marks: list[list] = []  # [seconds after midnight, "action" | "fault" | "relapse" | "milestone", what]
        self.health_every = max(1, round(HEALTH_EVERY_S / self.dt))
        self.alarms: list[str] = []
        self.actions: dict[str, dict] = {}  # action id -> what the team knows of it
        self.commands: dict[str, str] = {}  # console command id -> action id
        self.logs: list[dict] = []
        self.feed: list[dict] = []
        self.messages: list[dict] = []
        self.hints: list[dict] = []  # the hints released to this team

    def clock(self, tick: int) -> str:
        return format_clock(self.start_s + tick * self.dt)

    def asked(self, tick: int, command: str, action: str, params: dict, by: str, paused: bool) -> None:
        """A command the team sent, shown at once (until its operator's request replaces it):
        queued while the game day is paused or not started (it goes out when the clock
        runs), else asked (it reaches the operator at the next tick)."""
        self.actions[_ASKED + command] = {
            "id": None, "action": action, "params": params, "command": command, "by": by,
            "state": "queued until the game day runs" if paused else "asked", "asked": self.clock(tick),
            "steps": None, "steps_done": 0, "failed_steps": 0, "ready": None, "effective": None}

    def _feed(self, tick: int, kind: str, text: str) -> None:
        self.feed.append({"n": len(self.feed), "tick": tick, "clock": self.clock(tick), "kind": kind, "text": text})

    def update(self, tick: int, outbound: list, events: list[dict], loop_health) -> None:
        """``loop_health()``: the world's loop health now, asked when a point is due."""
        at = self.start_s + tick * self.dt
        if tick % self.health_every == 0:
            self.health.append([at, round(loop_health(), 4)])
        for e in events:
            mark = _mark(e)
            if mark is not None:  # a milestone or relapse, at the tick it holds or failed from
                self.marks.append([self.start_s + e.get("at_tick", tick) * self.dt, *mark])
            if e["agent"] == OPERATOR and e["event"] == "action_requested":
                self.actions.pop(_ASKED + str(e.get("command")), None)  # (what the team was shown meanwhile)
                a = {"id": e["id"], "action": e["action"], "params": e["params"], "command": e.get("command"),
                     "by": e.get("reason", "").removeprefix("console ").strip(), "state": "requested",
                     "asked": self.clock(tick), "steps": None, "steps_done": 0, "failed_steps": 0,
                     "ready": None, "effective": None}
                self.actions[e["id"]] = a
                if e.get("command"):
                    self.commands[e["command"]] = e["id"]
                self._feed(tick, "action", f"{e['action']} requested by {a['by'] or 'the team'}")
            elif e["event"] == "status_posted" and e.get("by") == OPERATOR:
                self._feed(tick, "status", f"customer update posted: {e.get('message', '')}")
        for msg in outbound:
            b = msg.body
            if msg.kind == "observed":
                self._observed(tick, b)
            elif msg.kind == "action_status" and b["id"] in self.actions:
                a = self.actions[b["id"]]
                before = (a["state"], a["steps_done"], a["failed_steps"])
                a.update(state=b["state"], steps=b.get("steps"), steps_done=b.get("steps_done", 0),
                         failed_steps=b.get("failed_steps", 0))
                if "ready_tick" in b:
                    a["ready"] = self.clock(int(b["ready_tick"]))
                if b["state"] == "effective":
                    a["effective"] = self.clock(tick)
                    self._feed(tick, "action", f"{a['action']} is in effect")
                elif b["state"] == "started":
                    self._feed(tick, "action", f"{a['action']} started; ready {a['ready']}, {a['steps']} deployment steps")
                elif a["failed_steps"] > before[2]:
                    self._feed(tick, "action", f"{a['action']}: a deployment step failed "
                                               f"({a['failed_steps']} so far); retrying")
            elif msg.kind == "log_result":
                values = {m: {"value": v[0], "age_s": v[1]} for m, v in sorted(b["values"].items())}
                self.logs.append({"asked": self.clock(int(b.get("asked", tick))), "arrived": self.clock(tick),
                                  "values": values})
                self._feed(tick, "logs", f"log query answered ({len(values)} metrics)")

    def _observed(self, tick: int, body: dict) -> None:
        self.view, self.view_tick = body["view"], tick
        for m in self.observe:
            seen = self.view.get(m)
            fresh = seen is not None and seen[1] <= self.stale_after
            self.history[m].append(seen[0] if fresh else None)
        self.series.append([self.start_s + tick * self.dt, [self.history[m][-1] for m in self.observe]])
        alarms = list(body["alarms"])
        for a in sorted(set(alarms) - set(self.alarms)):
            self._feed(tick, "alert", f"ALERT {a}")
        for a in sorted(set(self.alarms) - set(alarms)):
            self._feed(tick, "cleared", f"cleared {a}")
        self.alarms = alarms

    def note(self, tick: int, kind: str, text: str) -> None:
        if kind in ("message", "hint"):  # (the facilitator's words: kept for the consoles beside the feed)
            (self.messages if kind == "message" else self.hints).append({"clock": self.clock(tick), "text": text})
        self._feed(tick, kind, text)

    def metrics(self, tick: int) -> list[dict]:
        out = []
        for m in self.observe:
            seen = self.view.get(m)
            age = None if seen is None else seen[1] + (tick - (self.view_tick or 0)) * self.dt
            out.append({"metric": m, "unit": self.units[m], "value": None if seen is None else seen[0], "age_s": age,
                        "stale": age is None or age > self.stale_after, "history": list(self.history[m])})
        return out

    def state(self, tick: int, since: int, series_since: int | None = None) -> dict:
        """What the consoles show; ``since``: the first feed entry not yet seen;
        ``series_since``: the first view not yet charted (None: no series)."""
        out = {"team": self.team, "metrics": self.metrics(tick), "alarms": self.alarms,
               "actions": list(self.actions.values()), "logs": self.logs[-5:], "messages": self.messages[-5:],
               "hints": self.hints[-10:],
               "feed": self.feed[since:], "feed_next": len(self.feed)}
        if series_since is not None:
            out |= {"series": self.series[series_since:], "series_next": len(self.series)}
        return out


@dataclass
class Team:
    name: str
    run: WorldRun
    view: TeamView


class NotResumable(GamedayError):
    """A session directory that cannot be resumed."""


class Session:
    """The teams' worlds and the session clock; every control and every team's command
    is journalled in the session's journal (before it is answered) and in each team's run
    directory. ``Session.rebuild`` makes a session again from its journal after its
    server died (``gameday serve --resume``)."""

    def __init__(self, out: Path, teams: list[str], playbook: str = "us-east-1-2021", seed: int = 1,
                 sets: Given | dict | None = None, duration: float | None = None, tick: float | None = None,
                 speed: float | None = 60.0, hosting: HostingOptions = HostingOptions("ray", "single"),
                 _restarting: bool = False):
        check_teams(teams)
        sets = Given.of(sets)
        if speed is not None and (wanted := speed_problem(speed)):
            raise InvalidInput("gameday serve", "options", [Issue(setting("speed"), speed, f"{wanted}, or max")])
        self.dir = Path(out)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = _hold_lock(self.dir)
        if Path(playbook).exists():  # a file: named absolutely, so that a resume finds it from anywhere
            playbook = str(Path(playbook).resolve())
        self.playbook, self.seed = playbook, seed
        self.teams: dict[str, Team] = {}
        self.state = WAITING
        self.journal_path = self.dir / rundir.SESSION_JOURNAL
        self.replaying = False  # rebuilding from the journal: nothing is journalled again
        self.restarted = False  # paused by a restart: going on leaves no trace in the teams' runs
        self.answers: dict[str, dict] = {}  # a resumed session's requests: who:request id -> the answer given
        self._scores: dict[str, tuple[int, dict]] = {}  # team -> (the tick, its score as it stood then)
        self.controls: list[dict] = []  # the facilitator's controls so far (the latest), at the simulated clock
        self.ranks_shown = False  # whether the teams see their ranks (the facilitator's choice)
        self._ranking: tuple[int, list[str]] = (-1, [])  # (the tick, the teams in rank order then)
        self.request: str | None = None  # the request being answered (see ``answering``)
        try:
            for name in teams:
                spec = RunSpec(playbook=playbook, runbook="none", seed=seed, sets=sets, duration=duration, tick=tick,
                               console=True)
                run = WorldRun(spec, self.dir / rundir.TEAMS / name, hosting, speed,
                               meta={"team": name, "session": str(self.dir)})
                self.teams[name] = Team(name, run, TeamView(name, run))
        except BaseException:
            for t in self.teams.values():
                t.run.close(rundir.FAILED)
            raise
        first = next(iter(self.teams.values())).run
        self.pb = first.pb
        self.dt, self.start_s, self.ticks = first.plan.info.dt, first.plan.info.start_s, first.plan.ticks
        self.faults = {f["name"]: f for f in self.pb.data["faults"]}
        self.mitigations = {m["name"]: m for m in self.pb.data["mitigations"]}
        self.hints = {h["name"]: h for h in self.pb.data["hints"]}
        self.kinds = agent_names(self.pb.data)
        self.clock = LiveClock(self.dt, speed)
        self.tick = 0  # the next tick every world steps
        self.stepped_at: float | None = None  # wall clock (time.time) of the last tick stepped live
        self.lag_s = 0.0  # how far the last tick ran behind its due time
        self.behind = 0  # times the clock gave up catching up (the speed asked for was too high)
        self.pace_marks: deque = deque(maxlen=10)  # (wall, tick) every half second: the pace really kept
        self.info = {"playbook": self.pb.name, "seed": seed, "teams": list(self.teams), "speed": speed or "max",
                     "tick_s": self.dt, "start_clock": format_clock(self.start_s),
                     "end_clock": format_clock(self.start_s + self.ticks * self.dt), **hosting.meta()}
        if not _restarting:
            options = {"playbook": playbook, "sets": sets.values, "duration": duration, "tick": tick, "speed": speed}
            self._journal("created", **self.info, options=options)
        self.write_info("waiting")

    # -- a restart ----------------------------------------------------------------------------
    @classmethod
    def rebuild(cls, out: "Path | Resumable", address: str | None = None) -> "Session":
        """The session in ``out`` rebuilt after its server died: every team's world played
        again from the journal (the facilitator's controls and the teams' commands at the
        ticks they came) up to the last tick every world had written whole, then paused
        for the facilitator, hosted as before (on the Ray cluster at ``address``). The
        directories the dead server left go to restarts/N/. ``out``: the directory, or what
        ``resumable`` found in it (everything is checked before anything in it changes)."""
        checked = out if isinstance(out, Resumable) else resumable(Path(out))
        out, records, created = checked.dir, checked.records, checked.records[0]
        lock = _hold_lock(out)  # refused while a server still serves it
        journal = out / rundir.SESSION_JOURNAL
        if journal.stat().st_size > checked.whole:  # a last line cut short was never answered: cut it, so
            with open(journal, "r+b") as f:  # that what comes next starts on a line of its own
                f.truncate(checked.whole)
        restart = 1 + sum(r["control"] == "restarted" for r in records)
        while (out / rundir.RESTARTS / str(restart)).exists():  # a rebuild that failed left its number taken
            restart += 1
        aside = out / rundir.RESTARTS / str(restart)
        aside.mkdir(parents=True)
        if (out / rundir.TEAMS).exists():
            os.replace(out / rundir.TEAMS, aside / rundir.TEAMS)
        o = created["options"]
        hosting = HostingOptions(created["hosting"], created.get("placement") or HostingOptions.placement, address)
        lock.close()  # the session takes it again
        session = cls(out, list(created["teams"]), o["playbook"], created["seed"], o["sets"], o.get("duration"),
                      o.get("tick"), o.get("speed"), hosting, _restarting=True)
        try:
            session._replay(records, checked.done)
        except BaseException:
            session.interrupt()
            raise
        session._journal("restarted", restart=restart, from_tick=checked.done, left_in=str(aside))
        session._pause_for_restart()
        return session

    def _replay(self, records: list[dict], done: int) -> None:
        """Every journalled control and command again, at its tick, stepping the worlds in
        between, up to tick ``done``; what each command was answered is kept in ``answers``."""
        self.replaying = True
        try:
            for r in records:
                while self.tick < r["tick"]:
                    self._advance()
                self._redo(r)
            while self.tick < done:
                self._advance()
        finally:
            self.replaying = False

    def _redo(self, r: dict) -> None:
        c = r["control"]
        result = None
        if c == "restarted":
            self._pause_for_restart()
        elif c in ("start", "pause"):
            result = getattr(self, c)()
        elif c == "resume":
            result = self.resume()
        elif c == "speed":
            result = self.set_speed(r["speed"])
        elif c == "ranks":
            result = self.show_ranks(r["shown"])
        elif c == "inject":
            result = self.inject(r["fault"], r["params"], r.get("teams"))  # (None: every team)
        elif c == "message":
            result = self.message(r["text"], r.get("teams"))
        elif c == "hint":
            result = self.hint(r.get("name"), None if r.get("name") else r["text"], r.get("teams"))
        elif c == "act":
            self.answers[r["command"]] = self.act(r["team"], r["action"], r["params"], r["by"], r["command"])
        elif c == "note":
            self.answers[r["command"]] = self.note(r["team"], r["text"], r["by"], r["command"])
        if r.get("request") and result is not None:
            self.answers[r["request"]] = result

    def _pause_for_restart(self) -> None:
        """After a restart the session waits for the facilitator; a session that was
        running goes on with ``resume``, which the teams' runs do not record, so that they
        end as they would have without the restart."""
        if self.state == RUNNING:
            self.state, self.restarted = PAUSED, True
        for t in self.teams.values():
            t.view.note(self.tick, "session", "the server restarted; the game day goes on when the facilitator says")

    def write_info(self, status: str, **more) -> None:
        """session.json: what the session is and where to reach it (the server adds that)."""
        self.info.update(more)
        write_json_atomic(self.dir / rundir.SESSION_INFO, self.info | {"status": status, "ticks_done": self.tick})

    # -- time ---------------------------------------------------------------------------------
    def clock_text(self) -> str:
        return format_clock(self.start_s + self.tick * self.dt)

    def pace(self) -> float | None:
        """Simulated seconds per wall second over the last few seconds of running."""
        if len(self.pace_marks) < 3:
            return None
        (w0, t0), (w1, t1) = self.pace_marks[0], self.pace_marks[-1]
        return (t1 - t0) * self.dt / (w1 - w0)

    def due(self) -> float | None:
        """Wall time (monotonic) at which the next tick is due; None while not running."""
        return self.clock.due(self.tick) if self.state == RUNNING else None

    def step(self) -> None:
        """Step every team's world one tick, all at once (each on its own hosts)."""
        now = time.monotonic()
        self.lag_s = max(0.0, now - self.clock.due(self.tick)) if self.clock.speed else 0.0
        if self.lag_s > MAX_LAG_S:  # the worlds cannot keep this speed: go on from here at the pace they manage
            self.clock.rebase(self.tick, now)
            self.behind += 1
        self._advance()
        self.stepped_at = time.time()  # wall clock: what a page shows is this old (benchmarks/bench_pages.py)
        if not self.pace_marks or now - self.pace_marks[-1][0] >= 0.5:
            self.pace_marks.append((now, self.tick))

    def _advance(self) -> None:
        for t in self.teams.values():
            t.run.begin()
        for t in self.teams.values():
            res = t.run.finish()
            t.view.update(res.tick, res.outbound, res.events, t.run.scorer.loop_health)
        self.tick += 1
        if self.tick >= self.ticks:
            self.end(reason="the scenario's duration is over")

    # -- the facilitator's controls -------------------------------------------------------------
    @contextmanager
    def answering(self, request: str):
        """The controls made within are journalled with ``request`` (who:request id), so
        that after a restart the same request is answered again rather than run again."""
        self.request = request
        try:
            yield
        finally:
            self.request = None

    def _journal(self, control: str, **data) -> None:
        if control in CONTROL_TEXT:  # (a resumed session's too: the facilitator's history is whole)
            self.controls.append(control_row({"control": control, **data}, self.clock_text()))
            del self.controls[:-MAX_CONTROLS_SHOWN]
        if self.replaying:
            return
        if self.request is not None:
            data["request"] = self.request
        self.dir.mkdir(parents=True, exist_ok=True)
        rec = {"wall": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "tick": getattr(self, "tick", 0), "control": control, **data}
        with open(self.journal_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec, default=str) + "\n")

    def _note_all(self, event: str, shown: str, teams=None, **data) -> None:
        """Journal ``event`` in each team's run and show ``shown`` on its consoles."""
        for t in self._teams(teams):
            t.run.note(event, **data)
            t.view.note(self.tick, "session" if event != "facilitator_message" else "message", shown)

    def _teams(self, names) -> list[Team]:
        """The teams named; None: every team."""
        if names is None:
            return list(self.teams.values())
        if not names:
            raise ProtocolError("bad_request", "teams: an empty list; name at least one team, or leave teams out "
                                               "for every team")
        unknown = [n for n in names if n not in self.teams]
        if unknown:
            raise ProtocolError("bad_request", f"teams: got {unknown[0]!r}; expected one of {', '.join(self.teams)}")
        return [self.teams[n] for n in names]

    def _require(self, *states: str) -> None:
        if self.state not in states:
            raise ProtocolError("bad_state", f"the session is {self.state}; this needs it {' or '.join(states)}")

    def _rebase(self) -> None:
        """The next tick is due now; the pace is measured afresh from here."""
        self.clock.rebase(self.tick, time.monotonic())
        self.pace_marks.clear()

    def _move(self, needs: str, to: str, control: str, event: str, shown: str) -> dict:
        """Start, pause or resume: check the state, change it, journal it everywhere."""
        self._require(needs)
        self.state = to
        if to == RUNNING:
            self._rebase()
        self._journal(control)
        self._note_all(event, shown)
        return self.summary()

    def start(self) -> dict:
        return self._move(WAITING, RUNNING, "start", "session_started", "the game day has started")

    def pause(self) -> dict:
        return self._move(RUNNING, PAUSED, "pause", "session_paused", "paused by the facilitator")

    def resume(self) -> dict:
        if self.restarted:  # paused by a restart, not by the facilitator: the teams' runs go on as if it never was
            self._require(PAUSED)
            self.state, self.restarted = RUNNING, False
            self._rebase()
            self._journal("resume", after_restart=True)
            for t in self.teams.values():
                t.view.note(self.tick, "session", "resumed after the server's restart")
            return self.summary()
        return self._move(PAUSED, RUNNING, "resume", "session_resumed", "resumed")

    def show_ranks(self, shown: bool) -> dict:
        """Whether each team sees its rank on its own consoles (the facilitator's choice: off
        until it is turned on, so that a game day can be played without a race)."""
        self.ranks_shown = bool(shown)
        self._journal("ranks", shown=self.ranks_shown)
        for t in self.teams.values():
            t.view.note(self.tick, "session", "your rank is shown" if shown else "your rank is hidden")
        return self.summary()

    def set_speed(self, speed: float) -> dict:
        self._require(WAITING, RUNNING, PAUSED)
        if wanted := speed_problem(speed):
            raise ProtocolError("bad_request", f"speed: got {speed!r}; expected {wanted}")
        self.clock.speed = float(speed)
        self._rebase()
        self._journal("speed", speed=speed)
        self._note_all("speed_changed", f"speed is now {speed:g}x", speed=speed)
        return self.summary()

    def inject(self, fault: str, params: dict | None = None, teams=None) -> dict:
        self._require(WAITING, RUNNING, PAUSED)
        f = self.faults.get(fault)
        if f is None:
            raise ProtocolError("bad_request", f"fault: got {fault!r}; expected one of the playbook's faults "
                                               f"({', '.join(self.faults) or 'it has none'})")
        params = _check_params(f"fault {fault}", f, params or {}, self.kinds)
        chosen = self._teams(teams)
        for t in chosen:
            t.run.inject("apply", "triggers", {"op": "inject", "args": {"fault": fault, "params": params}, "by": "facilitator"},
                         by="facilitator")
        self._journal("inject", fault=fault, params=params, teams=[t.name for t in chosen])
        return {"fault": fault, "params": params, "teams": [t.name for t in chosen], "tick": self.tick}

    def message(self, text: str, teams=None) -> dict:
        chosen = self._teams(teams)
        self._journal("message", text=text, teams=[t.name for t in chosen])
        self._note_all("facilitator_message", text, [t.name for t in chosen], text=text)
        return {"teams": [t.name for t in chosen], "tick": self.tick}

    def hint(self, name: str | None = None, text: str | None = None, teams=None) -> dict:
        """A hint released to some or all teams: one the playbook prepared (``name``) or one
        the facilitator writes now (``text``); journalled, in each chosen team's run (its
        report's timeline) and on its consoles, and nowhere else."""
        if (name is None) == (text is None):
            raise ProtocolError("bad_request", "name or text: give one, a prepared hint's name "
                                               f"({', '.join(self.hints) or 'the playbook has none'}) or a text")
        if name is not None:
            if name not in self.hints:
                raise ProtocolError("bad_request", f"name: got {name!r}; expected one of the playbook's hints "
                                                   f"({', '.join(self.hints) or 'it has none'})")
            text = self.hints[name]["text"]
        chosen = self._teams(teams)
        self._journal("hint", name=name, text=text, teams=[t.name for t in chosen])
        for t in chosen:
            t.run.note("hint_released", name=name, text=text)
            t.view.note(self.tick, "hint", text)
        return {"name": name, "text": text, "teams": [t.name for t in chosen], "tick": self.tick}

    def end(self, reason: str = "ended by the facilitator") -> dict:
        if self.state != ENDED:
            self.state = ENDED
            self._journal("end", reason=reason)
            self._note_all("session_ended", f"the game day is over: {reason}", reason=reason)
        return self.summary()

    # -- the teams' commands --------------------------------------------------------------------
    def act(self, team: str, action: str, params: dict | None, by: str, command_id: str) -> dict:
        """A team asks for a mitigation; it reaches the team's operator in the next tick."""
        self._require(WAITING, RUNNING, PAUSED)
        m = self.mitigations.get(action)
        if m is None:
            raise ProtocolError("bad_request", f"action: got {action!r}; expected one of {', '.join(self.mitigations)}")
        params = _check_params(f"action {action}", m, params or {}, self.kinds)
        t = self.teams[team]
        tick = t.run.inject("console_command", OPERATOR, {"id": command_id, "action": action, "params": params, "by": by},
                            by=by)
        self._journal("act", team=team, action=action, params=params, by=by, command=command_id)  # before it is answered
        t.view.asked(self.tick, command_id, action, params, by, paused=self.state != RUNNING)
        return {"command": command_id, "action": action, "params": params, "tick": tick, "clock": t.view.clock(tick)}

    def note(self, team: str, text: str, by: str, command_id: str) -> dict:
        """A team's note (what it saw, why it acted), at the simulated clock: journalled as
        a command is (a resume keeps it, a resent one is answered again, not written
        twice), in the team's run (its report's timeline) and on its consoles."""
        self._require(WAITING, RUNNING, PAUSED)
        t = self.teams[team]
        self._journal("note", team=team, text=text, by=by, command=command_id)
        t.run.note("team_note", text=text, by=by)
        t.view.note(self.tick, "note", f"{by}: {text}")
        return {"command": command_id, "note": text, "by": by, "tick": self.tick, "clock": self.clock_text()}

    # -- what is shown ----------------------------------------------------------------------------
    def summary(self) -> dict:
        return {"state": self.state, "clock": self.clock_text(), "tick": self.tick, "speed": self.clock.speed or "max",
                "end_clock": self.info["end_clock"], "lag_s": round(self.lag_s, 3), "fell_behind": self.behind,
                "pace": None if self.pace() is None else round(self.pace(), 1), "stepped_at": self.stepped_at,
                "playbook": self.pb.name, "ranks_shown": self.ranks_shown,
                "seed": self.seed, "teams": list(self.teams)}

    def team_state(self, team: str, since: int = 0, series_since: int | None = None) -> dict:
        t = self.teams[team]
        return {"session": self.summary(), "catalogue": t.view.catalogue, "score": self.team_score(team),
                **t.view.state(self.tick, since, series_since)}

    def team_score(self, team: str) -> dict:
        """The team's own score as it stands (``team_score``), worked out once a tick; with
        its rank among the teams when the facilitator shows ranks."""
        kept = self._scores.get(team)
        if kept is None or kept[0] != self.tick:
            t = self.teams[team]
            kept = self._scores[team] = (self.tick, team_score(t.run.scorer.score(), t.run.scorer.last_tick >= 0))
        if not self.ranks_shown:
            return kept[1]
        if self._ranking[0] != self.tick:
            self._ranking = (self.tick, [r["team"] for r in self.scoreboard()["teams"]])
        ranked = self._ranking[1]
        return kept[1] | {"rank": ranked.index(team) + 1, "of": len(ranked)}

    def scoreboard(self) -> dict:
        """The ranking, with each team's loop health over time and the marks on it (its
        actions, the faults injected into its world, its loop breaking and re-forming)."""
        rows = [team_row(t.name, t.run.scorer.score(), t.run.scorer.last_tick >= 0) for t in self.teams.values()]
        rows.sort(key=lambda r: r.pop("_key"))
        for i, r in enumerate(rows, 1):
            r["rank"] = i
            view = self.teams[r["team"]].view
            r["health"], r["marks"] = view.health, view.marks
        return {"session": self.summary(), "teams": rows}

    def overview(self) -> dict:
        """The facilitator's glance: the board, and per team what its people see now
        (alerts firing, actions not yet in effect, the latest message or update)."""
        board = self.scoreboard()
        for r in board["teams"]:
            view = self.teams[r["team"]].view
            r["alarms"] = list(view.alarms)
            r["in_flight"] = [a["action"] for a in view.actions.values() if a["state"] != "effective"]
            r["last_feed"] = view.feed[-1]["clock"] + " " + view.feed[-1]["text"] if view.feed else ""
        board["faults"] = [{"name": f["name"], "description": f["description"], "params": f["params"]}
                           for f in self.faults.values()]
        board["controls"] = list(self.controls)
        board["hints"] = [{"name": h["name"], "text": h["text"]} for h in self.hints.values()]
        return board

    # -- the end ------------------------------------------------------------------------------------
    def interrupt(self) -> None:
        """The server fails: close every world's run directory as interrupted, without
        ending the session, so that `gameday serve --resume` can go on with it."""
        for t in self.teams.values():
            t.run.close(rundir.INTERRUPTED)
        self.write_info("interrupted", simulated_until=self.clock_text())
        self._lock.close()

    def close(self) -> dict:
        """Close every world (its run directory complete), write the final ranking."""
        if self.state != ENDED:
            self.end(reason="the server stopped")
        board = self.scoreboard()
        for t in self.teams.values():
            t.run.close(rundir.COMPLETE if t.run.done else rundir.ENDED)
        write_json_atomic(self.dir / rundir.RANKING, board)
        self.write_info("ended", simulated_until=self.clock_text())
        self._lock.close()
        return board


def _mark(e: dict) -> tuple[str, str] | None:
    """What the scoreboard marks on a team's health chart for one of its world's events."""
    if e["agent"] == OPERATOR and e["event"] == "action_requested":
        return "action", e["action"]
    if e["event"] == "injected" and e.get("by") == "facilitator" and e["body"].get("op") == "inject":
        return "fault", e["body"]["args"]["fault"]
    if e["event"] in ("relapse", "milestone") and e.get("milestone") == "loop_broken":
        return e["event"], "loop re-formed" if e["event"] == "relapse" else "loop broken"
    return None


def team_score(sc: dict, started: bool) -> dict:
    """What a team sees of its own score as it stands: its loop (as the scoreboard words
    it), the trigger, its first customer update and every milestone, each when reached
    (None: not yet) beside par, and its impact so far."""
    marks = [("trigger", sc["trigger"]), ("first customer update", sc["first_customer_update"]),
             *((milestone_label(k), m) for k, m in scored_milestones(sc).items())]
    return {"loop": team_row("", sc, started)["loop"], "impact": round(float(sc["impact"]["weighted_total"]), 1),
            "milestones": [{"name": name, "clock": m.get("clock") if m.get("reached") else None,
                            "par": m.get("par_clock"), "vs_par_s": m.get("vs_par_s") if m.get("reached") else None}
                           for name, m in marks]}


def team_row(team: str, sc: dict, started: bool) -> dict:
    """A team's row of the scoreboard from its score so far, with the key it is ranked by
    (``_key``): a loop that never formed first, then broken loops by time, then the rest.
    A loop that re-formed is not broken, whenever it first broke."""
    loop, backlog = sc["loop_broken"], sc.get("backlog_drained") or {"reached": False}
    if sc["trigger"]["reached"] and not sc["loop_formed"] and started:
        loop_text, loop_rank = "never formed", 0
    elif loop["reached"]:
        loop_text, loop_rank = f"broken {loop['clock']}", 1
        if loop["relapses"]:
            loop_text += f" (after re-forming {loop['relapses'][-1]['clock']})"
    elif loop["relapsed"]:
        loop_text, loop_rank = f"re-formed {loop['relapses'][-1]['clock']}", 2
    elif (suspended := sc.get("loop_suspended")) and not suspended[-1]["to"]["reached"]:
        # (within its bounds only while the team holds its demand back: not broken)
        loop_text, loop_rank = f"suspended {suspended[-1]['from']['clock']}", 2
    else:
        loop_text, loop_rank = "not yet", 2
    return {
        "team": team, "loop": loop_text, "loop_broken": loop.get("clock"), "relapses": len(loop["relapses"]),
        "backlog": f"drained {backlog['clock']}" if backlog["reached"] else "not yet",
        "backlog_drained": backlog.get("clock"),
        "impact": sc["impact"]["weighted_total"],
        "first_update": sc["first_customer_update"].get("clock"),
        "actions": sc["actions_taken"],
        "_key": (loop_rank, loop.get("seconds_after_start", math.inf),
                 backlog.get("seconds_after_start", math.inf), sc["impact"]["weighted_total"]),
    }


def _check_params(what: str, owner: dict, given: dict, kinds: dict) -> dict:
    """A mitigation's or fault's parameters as a team or facilitator gives them, checked as a
    runbook's are (playbook.param_problems): only those it declares, each fitting the
    argument it fills; the defaults for the rest."""
    for k, v, wanted in param_problems(owner, given, kinds):
        raise ProtocolError("bad_request", f"{what}: parameter {k}: got {v!r}; expected {wanted}")
    too_long = [k for k, v in given.items() if isinstance(v, str) and len(v) > 500]
    if too_long:
        raise ProtocolError("bad_request", f"{what}: parameter {too_long[0]}: expected text of at most 500 characters")
    return dict(owner["params"]) | normalised_params(owner, given, kinds)


def _hold_lock(directory: Path):
    """An exclusive lock on the session directory, held while the file stays open (the
    system releases it when the process dies, even killed): one server per session."""
    import fcntl

    f = open(directory / rundir.SESSION_LOCK, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise NotResumable(f"{directory}: another `gameday serve` is serving this session; stop it first") from None
    return f


@dataclass(frozen=True)
class Resumable:
    """A session directory read and checked for ``Session.rebuild``, nothing in it changed:
    its journal's records (the first one the session's creation), how many of the journal's
    bytes hold whole lines, and the tick every world is played again up to."""

    dir: Path
    records: list[dict]
    whole: int
    done: int


def resumable(out: Path, tokens: dict | None = None) -> Resumable:
    """What ``Session.rebuild`` needs of the session in ``out``, every file it reads checked
    first, so that a damaged or hostile one is refused (``NotResumable``, naming the file,
    the line, the field, the value and what was expected) before anything is changed or
    started: the journal (each line a control the session could have taken, at a tick
    within the session, naming its teams, faults and actions), the playbook as the worlds
    were built from it, the worlds' directories, and ``tokens`` (tokens.json's) naming
    every team."""
    out = Path(out)
    lock = _hold_lock(out)  # refused while a server still serves it
    try:
        path = out / rundir.SESSION_JOURNAL
        records, whole = _read_journal(out)
        created = records[0] if records else {}
        if created.get("control") != "created" or "options" not in created:
            raise NotResumable(f"{setting('resume')} {out}: no journal.jsonl there that a session was created in; expected "
                               "a session directory written by `gameday serve`")
        if any(r.get("control") == "end" for r in records):
            raise NotResumable(f"{setting('resume')} {out}: that session has ended; its run directories are complete "
                               "(report them with `gameday report`)")
        pb, plan = _check_created(path, created)
        _check_journal(path, records, pb.data, plan.ticks)
        for name in (rundir.TEAMS, rundir.RESTARTS):  # (moved and made by the rebuild: checked first)
            folder = out / name
            if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
                raise NotResumable(f"{folder}: {'a link' if folder.is_symlink() else 'not a directory'}; expected a "
                                   "directory, as gameday writes it")
        teams = created["teams"]
        if tokens is not None and any(t not in tokens["teams"] for t in teams):
            wanted = f"a token for each of the session's teams ({', '.join(teams)})"
            raise NotResumable(f"{out / rundir.TOKENS}: {Issue('teams', list(tokens['teams']), wanted)}")
        # How far the worlds got: the ticks every run directory holds whole, and at least as far as the
        # journal goes (a rebuild that failed halfway leaves shorter directories, never a shorter journal).
        done = max(_ticks_written(out, teams, pb.text), records[-1]["tick"])
        return Resumable(out, records, whole, min(done, plan.ticks))
    finally:
        lock.close()


def _read_journal(out: Path) -> tuple[list[dict], int]:
    """A session's journal: its records, and how many of its bytes hold whole lines (a last
    line cut short, the server killed while writing it, was never answered: it is left out).
    Read as a run directory's files are (``rundir.run_file``: a regular file inside the
    directory, so a FIFO is never waited on), at most LIVE_JOURNAL_BYTES."""
    try:
        path = rundir.run_file(out, rundir.SESSION_JOURNAL)
        # (opened without waiting and checked again: a FIFO put there since is never read)
        with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as f:
            st = os.fstat(f.fileno())
            kind = not_regular(st.st_mode)
            data = b"" if kind or st.st_size > budgets.LIVE_JOURNAL_BYTES else f.read(budgets.LIVE_JOURNAL_BYTES + 1)
    except rundir.NotARunDirectory as e:
        raise NotResumable(str(e)) from None
    except OSError as e:
        raise NotResumable(f"{setting('resume')} {out}: cannot read its journal ({e.strerror or e}); expected a session "
                           "directory written by `gameday serve`") from None
    if kind:
        raise NotResumable(f"{path}: {kind}; expected a regular file, as gameday writes it")
    if max(len(data), st.st_size) > budgets.LIVE_JOURNAL_BYTES:
        raise NotResumable(f"{path}: over {budgets.size_text(budgets.LIVE_JOURNAL_BYTES)}; expected a session's journal, "
                           "as `gameday serve` writes it (a line of a few hundred bytes per control and command)")
    whole = data.rfind(b"\n") + 1
    out_records = []
    for n, line in enumerate(data[:whole].split(b"\n")[:-1], 1):
        try:
            record = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # (UnicodeDecodeError is a ValueError)
            why = "nested too deep to be read" if isinstance(e, RecursionError) else printable(e, 200, lines=False)
            raise NotResumable(f"{path}: line {n} is not JSON ({why}); the journal is damaged") from None
        if not isinstance(record, dict):
            raise NotResumable(f"{path}: line {n}: got {shown(record)}; expected a JSON object, as "
                               "`gameday serve` writes each line; the journal is damaged")
        out_records.append(record)
    return out_records, whole


def _damaged(path: Path, n: int, field: str, value, expected: str) -> NotResumable:
    return NotResumable(f"{path}: line {n}: {Issue(field, value, expected)}; the journal is damaged")


def _check_created(path: Path, c: dict):
    """The journal's first line, the session's creation: (playbook, plan) of its worlds,
    made as the rebuilt session makes them (``runner.prepare``; nothing is written)."""
    teams, o = c.get("teams"), c["options"]
    if not (isinstance(teams, list) and 0 < len(teams) <= budgets.LIVE_TEAMS
            and all(isinstance(t, str) and TEAM_NAME.match(t) for t in teams) and len(set(teams)) == len(teams)):
        raise _damaged(path, 1, "teams", teams, f"a list of 1 to {budgets.LIVE_TEAMS} distinct team names of 1-32 "
                                                "letters, digits, - or _")
    if c.get("hosting") not in HOSTINGS:
        raise _damaged(path, 1, "hosting", c.get("hosting"), f"one of {', '.join(HOSTINGS)}")
    if c.get("placement") not in (None, *PLACEMENTS):
        raise _damaged(path, 1, "placement", c.get("placement"), f"nothing, or one of {', '.join(PLACEMENTS)}")
    if not isinstance(o, dict):
        raise _damaged(path, 1, "options", o, "a JSON object")
    if not isinstance(o.get("playbook"), str):
        raise _damaged(path, 1, "options.playbook", o.get("playbook"), "a playbook's name or path")
    if not isinstance(o.get("sets"), dict):
        raise _damaged(path, 1, "options.sets", o.get("sets"), "a JSON object of variable -> value")
    for name in ("duration", "tick"):
        if o.get(name) is not None and not is_number(o[name]):
            raise _damaged(path, 1, f"options.{name}", o[name], "nothing, or a number of seconds")
    if o.get("speed") is not None and (wanted := speed_problem(o["speed"])):
        raise _damaged(path, 1, "options.speed", o["speed"], f"nothing (as fast as the worlds go), or {wanted}")
    spec = RunSpec(playbook=o["playbook"], runbook="none", seed=c.get("seed"), sets=o["sets"], duration=o.get("duration"),
                   tick=o.get("tick"), console=True)
    try:
        with speaking({"seed": "seed", "sets": "options.sets", "duration": "options.duration", "tick": "options.tick"}):
            pb, _, _, plan = prepare(spec)
    except (GamedayError, OSError) as e:
        raise NotResumable(f"{path}: line 1: the session's playbook and options no longer make its worlds: {e}") from None
    return pb, plan


#: the controls a journal holds -> the states of the session each needs (None: any)
_NEEDS = {"created": None, "start": (WAITING,), "pause": (RUNNING,), "resume": (PAUSED,),
          "speed": (WAITING, RUNNING, PAUSED), "inject": (WAITING, RUNNING, PAUSED), "act": (WAITING, RUNNING, PAUSED),
          "note": (WAITING, RUNNING, PAUSED), "message": None, "hint": None, "ranks": None, "restarted": None}


def _check_journal(path: Path, records: list[dict], data: dict, ticks: int) -> None:
    """Every line of the journal one the session could have written: at a tick from the
    line before's to the session's end, a control it could take in the state it was in,
    naming its teams, the playbook's faults and actions with parameters they take (checked
    as the session checks them when they come live). A rebuild replays them as they are."""
    teams = records[0]["teams"]
    faults = {f["name"]: f for f in data["faults"]}
    mitigations = {m["name"]: m for m in data["mitigations"]}
    hints = [h["name"] for h in data["hints"]]  # (in the playbook's order, as said)
    kinds = agent_names(data)
    state, last = WAITING, 0
    for n, r in enumerate(records, 1):
        def refuse(field: str, expected: str):
            return _damaged(path, n, field, r.get(field), expected)

        tick, control = r.get("tick"), r.get("control")
        if not (rundir.is_tick_count(tick) and last <= tick <= ticks):
            raise refuse("tick", f"a whole number from {last} (the tick of the line before) to {ticks} (the session's end)")
        last = tick
        if control not in _NEEDS or (control == "created") != (n == 1):
            raise refuse("control", f"one of {', '.join(c for c in _NEEDS if c != 'created')} (created on the first "
                                    "line only)")
        if tick >= ticks:  # (every tick played: the session was over)
            state = ENDED
        if _NEEDS[control] is not None and state not in _NEEDS[control]:
            raise refuse("control", f"a control the session could take while {state} (at tick {tick})")
        state = {"start": RUNNING, "pause": PAUSED, "resume": RUNNING}.get(control, state)
        if control == "restarted" and state == RUNNING:
            state = PAUSED
        request = r.get("request")
        if request is not None and not _answerable(request, FACILITATOR_REQUESTS):
            raise refuse("request", f"{FACILITATOR_REQUESTS}:ID, an ID of 1 to {MAX_ID} characters")
        if control == "speed" and (wanted := speed_problem(r.get("speed"))):
            raise refuse("speed", wanted)
        if control == "ranks" and not isinstance(r.get("shown"), bool):
            raise refuse("shown", "true or false")
        if control in ("inject", "message", "hint"):
            chosen = r.get("teams")
            if chosen is not None and not (isinstance(chosen, list) and chosen and all(t in teams for t in chosen)):
                raise refuse("teams", f"nothing (every team), or a list of the session's teams ({', '.join(teams)})")
        if control in ("message", "note", "hint") and not _is_text(r.get("text")):
            raise refuse("text", f"a text of 1 to {MAX_TEXT} characters")
        if control == "hint" and r.get("name") is not None and r["name"] not in hints:
            raise refuse("name", f"nothing (a hint written live), or one of the playbook's hints "
                                 f"({', '.join(hints) or 'it has none'})")
        owner = None
        if control == "inject":
            owner, what = faults.get(r.get("fault")), f"fault {r.get('fault')}"
            if owner is None:
                raise refuse("fault", f"one of the playbook's faults ({', '.join(faults) or 'it has none'})")
        if control in ("act", "note"):  # a team's commands
            if r.get("team") not in teams:
                raise refuse("team", f"one of the session's teams ({', '.join(teams)})")
            if not (isinstance(r.get("by"), str) and len(r["by"]) <= MAX_TEXT):
                raise refuse("by", f"a text of at most {MAX_TEXT} characters")
            if not _answerable(r.get("command"), r["team"]):
                raise refuse("command", f"{r['team']}:ID, an ID of 1 to {MAX_ID} characters")
        if control == "act":
            owner, what = mitigations.get(r.get("action")), f"action {r.get('action')}"
            if owner is None:
                raise refuse("action", f"one of the playbook's actions ({', '.join(mitigations)})")
        if owner is not None:
            params = r.get("params")
            if not (isinstance(params, dict) and all(isinstance(k, str) for k in params)):
                raise refuse("params", "a JSON object of parameter -> value")
            try:
                _check_params(what, owner, params, kinds)
            except ProtocolError as e:
                raise NotResumable(f"{path}: line {n}: {printable(e, 500)}; the journal is damaged") from None


def _is_text(value) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TEXT


def _answerable(request, who: str) -> bool:
    """Whether ``request`` is who:ID, as the server keeps a request it answered (``answers``)."""
    return isinstance(request, str) and request.startswith(who + ":") and 0 < len(request) - len(who) - 1 <= MAX_ID


def _ticks_written(out: Path, teams: list[str], rendered: str) -> int:
    """The ticks every team's run directory holds whole (0 for one that has none), each
    checked as made from the playbook as it renders now (``rendered``): the worlds are
    rebuilt from that, so one that no longer renders as it did would differ."""
    done = []
    for team in teams:
        try:  # (a regular file inside the session directory, never a link out of it or a FIFO)
            playbook = rundir.run_file(out, f"{rundir.TEAMS}/{team}/{rundir.PLAYBOOK}")
            rundir.run_file(out, f"{rundir.TEAMS}/{team}/{rundir.METRICS}")  # (complete_ticks reads it)
        except rundir.NotARunDirectory as e:
            raise NotResumable(str(e)) from None
        now = rendered.encode("utf-8")
        try:
            with open(playbook, "rb") as f:
                before = f.read(len(now) + 1)  # (as much as it may hold, and one more byte)
        except OSError:
            before = now  # (none: a rebuild that failed before it was written)
        if before != now:
            raise NotResumable(f"{setting('resume')} {out}: the playbook no longer renders as it did when the session "
                               f"began ({playbook} holds what it rendered then); the worlds would differ")
        try:
            done.append(rundir.complete_ticks(out / rundir.TEAMS / team))
        except OSError:
            done.append(0)
    return min(done)
