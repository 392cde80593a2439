"""A session survives its server: ``Session.rebuild`` (``gameday serve --resume``) makes
every team's world again from the session's journal, and a session interrupted, resumed
and driven by the same commands ends with run directories identical to those of a
session never interrupted (wall times apart); last, a real `gameday serve` killed with
SIGKILL, resumed, with a console and a page that reconnect by themselves."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import fresh, serve, wait_for, webdriver
from orchestrator.hosting.host import HostingOptions
from orchestrator.live.client import LiveClient
from orchestrator.live.server import LiveServer
from orchestrator.live.session import NotResumable, Session
from reports import rundir

pytestmark = pytest.mark.live

#: (tick, control, arguments): what the facilitator and the teams do, at the ticks they do it
SCRIPT = [
    (0, "start", {}),
    (40, "note", {"team": "red", "text": "bridge latency is up, DNS rides on it", "by": "ana", "command_id": "red:n1"}),
    (40, "act", {"team": "red", "action": "move_dns_off_bridge", "params": {}, "by": "ana", "command_id": "red:1"}),
    (90, "pause", {}),
    (90, "message", {"text": "keep going", "teams": None}),
    (90, "resume", {}),
    (150, "inject", {"fault": "second_surge", "params": {"seconds": 120}, "teams": ["blue"]}),
    (200, "hint", {"name": "retries_are_load", "teams": ["blue"]}),
    (200, "hint", {"text": "look at what crosses the bridge", "teams": None}),
    (300, "act", {"team": "blue", "action": "enable_protection", "params": {}, "by": "bo", "command_id": "blue:7"}),
    (333, "note", {"team": "blue", "text": "protection asked: watch the bridge's setup success", "by": "bo",
                   "command_id": "blue:n2"}),
    (420, "speed", {"speed": 120}),
    (500, "act", {"team": "red", "action": "restart_devices", "params": {"seconds": 60}, "by": "ana",
                  "command_id": "red:2"}),
]
TICKS = 700
WALL = ("started_at", "wall_seconds")


def make(out: Path) -> Session:
    return Session(out, ["red", "blue"], duration=TICKS, speed=60.0, hosting=HostingOptions())


def killed(session: Session) -> None:
    """Its server is gone: nothing closed or flushed beyond what it wrote; the system
    drops the process's lock on the session directory."""
    session._lock.close()


def drive(session: Session, until: int, then_its_commands: bool = False, done_at: int | None = None) -> None:
    """The script's steps from the session's tick up to ``until`` (and those of tick
    ``until`` itself, answered but not yet stepped, if ``then_its_commands``), but not
    those of tick ``done_at`` (done before a restart)."""
    for tick, control, args in SCRIPT:
        if tick < session.tick or tick > until or (tick == until and not then_its_commands) or tick == done_at:
            continue
        while session.tick < tick:
            session._advance()
        {"start": session.start, "pause": session.pause, "resume": session.resume, "message": session.message,
         "inject": session.inject, "speed": session.set_speed, "act": session.act, "note": session.note,
         "hint": session.hint}[control](**args)
    while session.tick < min(until, TICKS) and session.state != "ended":
        session._advance()


def run_files(team_dir: Path) -> dict:
    meta = json.loads((team_dir / rundir.META).read_text())
    return {"metrics": (team_dir / rundir.METRICS).read_bytes(), "events": (team_dir / rundir.EVENTS).read_bytes(),
            "score": (team_dir / rundir.SCORE).read_bytes(),
            "meta": {k: v for k, v in meta.items() if k not in WALL and k != "session"}}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "session"
    s = make(out)
    drive(s, TICKS)
    s.close()
    return out


SLOW = pytest.mark.slow  # one case in the fast subset, the others in the full run


@pytest.mark.parametrize("killed_at,after_its_commands", [pytest.param(1, False, marks=SLOW), (90, True),
                                                          pytest.param(300, True, marks=SLOW),
                                                          pytest.param(333, False, marks=SLOW)])
@pytest.mark.slow
def test_a_session_rebuilt_from_its_journal_ends_as_if_never_interrupted(uninterrupted, tmp_path, killed_at,
                                                                         after_its_commands):
    """Killed (abandoned mid-session, its files as they are) at a tick, maybe right after
    answering commands for a tick its worlds had not stepped yet; rebuilt, resumed by the
    facilitator if it was running, driven on: the same run directories."""
    out = tmp_path / "session"
    dead = make(out)
    drive(dead, killed_at, after_its_commands)
    killed(dead)
    before = {t: list(dead.teams[t].view.feed) for t in dead.teams}
    s = Session.rebuild(out)
    try:
        assert s.tick == killed_at and s.state == "paused"
        assert s.restarted == (dead.state == "running")  # paused by the facilitator stays so
        for t in s.teams:  # what the consoles had, numbered as they had it, so they ask on from where they were
            assert [e["text"] for e in s.teams[t].view.feed[:len(before[t])]] == [e["text"] for e in before[t]]
        assert (out / "restarts" / "1" / "teams" / "red" / "metrics.csv").exists()
        if s.state == "paused":
            s.resume()
        drive(s, TICKS, done_at=killed_at if after_its_commands else None)
    finally:
        s.close()
    for team in ("red", "blue"):
        assert run_files(out / "teams" / team) == run_files(uninterrupted / "teams" / team), team
    journal = [json.loads(line) for line in (out / rundir.SESSION_JOURNAL).read_text().splitlines()]
    restarts = [r for r in journal if r["control"] == "restarted"]
    assert len(restarts) == 1 and restarts[0]["from_tick"] == killed_at
    hints = {t: [e["text"] for e in map(json.loads, (out / "teams" / t / rundir.EVENTS).read_text().splitlines())
                 if e["event"] == "hint_released"] for t in ("red", "blue")}
    assert hints["red"] == ["look at what crosses the bridge"] and len(hints["blue"]) == 2, hints  # (kept, once)


def test_a_teams_notes_are_in_its_own_run_and_report_timeline_at_the_simulated_clock(uninterrupted):
    """A note is its team's alone: in its run's events at the tick it was written, and in
    its report's timeline with who wrote it, beside the action it explains."""
    from reports.analysis import analyse
    from reports.rundir import load_run

    for team, other, by, text in (("red", "blue", "ana", "bridge latency is up, DNS rides on it"),
                                  ("blue", "red", "bo", "protection asked: watch the bridge's setup success")):
        events = [json.loads(line) for line in (uninterrupted / "teams" / team / rundir.EVENTS).read_text().splitlines()]
        notes = [e for e in events if e["event"] == "team_note"]
        assert [(e["text"], e["by"]) for e in notes] == [(text, by)]
        assert notes[0]["tick"] == {"red": 40, "blue": 333}[team]
        assert not any(e["event"] == "team_note" and e["text"] == text
                       for e in map(json.loads, (uninterrupted / "teams" / other / rundir.EVENTS).read_text().splitlines()))
        rows = analyse(load_run(uninterrupted / "teams" / team)).timeline
        row = next(r for r in rows if r["what"] == f"note by {by}")
        assert row["detail"] == text
    red = analyse(load_run(uninterrupted / "teams" / "red")).timeline
    whats = [r["what"] for r in red]
    # written at the tick the action was asked: the note stands beside it
    assert abs(whats.index("note by ana") - whats.index("asked: move_dns_off_bridge")) <= 2, whats


def test_a_command_answered_before_the_restart_is_answered_again_not_run_again(tmp_path):
    out = tmp_path / "session"
    dead = make(out)
    drive(dead, 45)  # red's command at tick 40 has been answered
    with dead.answering("_facilitator:f9"):
        dead.message("the answer to this was lost", None)
    killed(dead)
    s = Session.rebuild(out)
    server = LiveServer(s, "tcp://127.0.0.1:0", tokens={"facilitator": "f", "viewer": "v", "teams": {"red": "r", "blue": "b"}})
    try:
        assert s.answers["red:1"]["action"] == "move_dns_off_bridge" and s.answers["red:1"]["tick"] == 40
        assert s.answers["red:n1"]["note"] == "bridge latency is up, DNS rides on it"  # a note resent is not written twice
        assert "1" in server.answered["r"]  # the resent request id "1" of red's token gets its first answer
        assert "f9" in server.answered["f"]  # and the facilitator's message is not sent twice
        assert [m["text"] for m in s.teams["blue"].view.messages] == ["the answer to this was lost"]
        assert server.tokens["r"] == ("team", "red")
    finally:
        server.close()
        s.close()


@pytest.mark.slow
def test_twice_killed_twice_rebuilt(uninterrupted, tmp_path):
    out = tmp_path / "session"
    dead = make(out)
    drive(dead, 120)
    killed(dead)
    s = Session.rebuild(out)
    s.resume()
    drive(s, 400)
    killed(s)
    s = Session.rebuild(out)  # the second server dies too
    assert s.tick == 400 and (out / "restarts" / "2" / "teams").is_dir()
    s.resume()
    drive(s, TICKS)
    s.close()
    for team in ("red", "blue"):
        assert run_files(out / "teams" / team) == run_files(uninterrupted / "teams" / team), team


def test_what_cannot_be_resumed_says_why(tmp_path):
    with pytest.raises(NotResumable, match="no journal.jsonl there|cannot read its journal"):
        Session.rebuild(tmp_path)
    out = tmp_path / "ended"
    s = make(out)
    drive(s, 10)
    s.close()  # ended
    with pytest.raises(NotResumable, match="that session has ended"):
        Session.rebuild(out)


def same_commands(records: list[dict], out: Path) -> Path:
    """An uninterrupted in-process session driven by the controls and commands of a
    session's journal, at their ticks (what the restarts added left out)."""
    created = records[0]
    o = created["options"]
    s = Session(out, created["teams"], o["playbook"], created["seed"], o["sets"], o["duration"], o["tick"], o["speed"],
                HostingOptions())
    calls = {"start": lambda r: s.start(), "pause": lambda r: s.pause(), "resume": lambda r: s.resume(),
             "speed": lambda r: s.set_speed(r["speed"]), "inject": lambda r: s.inject(r["fault"], r["params"], r["teams"]),
             "message": lambda r: s.message(r["text"], r["teams"]), "end": lambda r: s.end(r["reason"]),
             "act": lambda r: s.act(r["team"], r["action"], r["params"], r["by"], r["command"]),
             "note": lambda r: s.note(r["team"], r["text"], r["by"], r["command"])}
    for r in records[1:]:
        if r["control"] in ("restarted", "created") or r.get("after_restart"):
            continue
        while s.tick < r["tick"]:
            s._advance()
        calls[r["control"]](r)
    s.close()
    return out


@pytest.mark.slow
@pytest.mark.browser
def test_serve_killed_with_sigkill_resumes_with_the_same_tokens_and_its_console_and_page_come_back(tmp_path):
    out = tmp_path / "session"
    proc, tokens = serve(["--team", "red", "--team", "blue", "--hosting", "inprocess", "--bind", "tcp://127.0.0.1:0",
                          "--web-port", "0", "--speed", "150", "--duration", "2h", "--no-report", "--linger", "1",
                          "--start"], out)
    resumed = None
    fac = LiveClient(tokens["server"], tokens["facilitator"], timeout_s=1.0, retries=60)
    red = LiveClient(tokens["server"], tokens["teams"]["red"], timeout_s=1.0, retries=60)
    try:
        wait_for(timeout=60.0, what=lambda: json.loads((out / rundir.SESSION_INFO).read_text()).get("web"))
        web = json.loads((out / rundir.SESSION_INFO).read_text())["web"]
        with webdriver(tmp_path) as blue:
            blue.get(f"{web}team/blue#{tokens['teams']['blue']}")
            wait_for(timeout=60.0, what=lambda: blue.execute_script("return window.gamedayTeam.charts.length") > 0)
            red.call("act", {"action": "move_dns_off_bridge"})
            wait_for(timeout=60.0, what=lambda: fac.call("status")["session"]["tick"] > 300)
            fac.call("message", {"text": "hold on", "teams": ["blue"]})
            seen = red.call("state", {"since": 0})["feed_next"]
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            killed = time.monotonic()
            wait_for(timeout=60.0, what=lambda: "connection lost" in blue.find_element("id", "status").text)

            resumed = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--resume", str(out),
                                        "--no-report", "--linger", "1"], stdout=subprocess.DEVNULL,
                                       stderr=open(tmp_path / "resumed.stderr", "w"))
            assert fac.call("resume")["state"] == "running"  # the same client, the same token: it reconnected
            print(f"\nfrom SIGKILL to a resumed, running session: {time.monotonic() - killed:.1f} s")
            st = red.call("state", {"since": seen})  # the console asks on from where it was
            assert [e["n"] for e in st["feed"]] == list(range(seen, st["feed_next"]))
            assert any("server restarted" in e["text"] for e in st["feed"])
            wait_for(timeout=60.0, what=lambda: blue.find_element("id", "status").text == "" and
                  blue.find_element("id", "state").text == "running")  # the page came back by itself
            wait_for(timeout=60.0, what=lambda: "server restarted" in blue.find_element("id", "feed").text)
            # from before the kill, not lost (read whole: the page re-renders as the states come)
            assert "hold on" in fresh(lambda: blue.find_element("id", "messages").text)
            before = fac.call("status")["session"]["tick"]
            wait_for(timeout=60.0, what=lambda: fac.call("status")["session"]["tick"] > before + 100)
            red.call("act", {"action": "enable_protection"})
            fac.call("end")
        assert resumed.wait(60) == 0, (tmp_path / "resumed.stderr").read_text()
    finally:
        for p in (proc, resumed):
            if p is not None and p.poll() is None:
                p.kill()
        fac.close()
        red.close()
    records = [json.loads(line) for line in (out / rundir.SESSION_JOURNAL).read_text().splitlines()]
    assert [r["control"] for r in records].count("restarted") == 1
    from_tick = next(r for r in records if r["control"] == "restarted")["from_tick"]
    for team in ("red", "blue"):  # the worlds played again are the worlds the killed server had played
        left = (out / "restarts" / "1" / "teams" / team / rundir.METRICS).read_text().splitlines()[:from_tick + 1]
        again = (out / "teams" / team / rundir.METRICS).read_text().splitlines()[:from_tick + 1]
        assert len(left) == from_tick + 1 and again == left
    reference = same_commands(records, tmp_path / "uninterrupted")
    for team in ("red", "blue"):
        assert run_files(out / "teams" / team) == run_files(reference / "teams" / team), team


def _scripted(out: Path, kill_at: int | None, playbook: str = "us-east-1-2021", sets: dict | None = None,
              pause_at: int | None = None, start_at: int = 0, chdir=None) -> Path:
    """A short session: started at ``start_at``, a command at tick 20, paused at
    ``pause_at`` and resumed 30 ticks later; killed when it reaches ``kill_at`` (None:
    never) and rebuilt (from another directory, with ``chdir``), then played to its end."""
    s = Session(out, ["red"], playbook, 3, sets, duration=240, speed=60.0, hosting=HostingOptions())
    steps = [(start_at, lambda: s.start()), (20, lambda: s.act("red", "enable_protection", {}, "ana", "red:1"))]
    if pause_at is not None:
        steps += [(pause_at, lambda: s.pause()), (pause_at + 30, lambda: s.resume())]

    def restart_if_due() -> None:
        nonlocal s, kill_at
        if kill_at is None or s.tick != kill_at:
            return
        kill_at = None
        was = s.state
        killed(s)
        if chdir:
            chdir()
        s = Session.rebuild(out)
        assert s.state == ("paused" if was == "running" else was) and s.restarted == (was == "running")
        if s.restarted:
            s.resume()

    for at, do in sorted(steps, key=lambda x: x[0]):
        restart_if_due()
        while s.tick < at:
            s._advance()
            restart_if_due()
        do()
    while s.state != "ended":
        s._advance()
        restart_if_due()
    s.close()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", ["before the start", "while paused", "a playbook path and --set values"])
def test_a_session_killed_before_its_start_or_while_paused_or_with_its_own_options_comes_back_as_it_was(
        tmp_path, monkeypatch, case):
    ROOT = Path(__file__).resolve().parents[1]
    kw = {"before the start": dict(start_at=10, kill_at=5),
          "while paused": dict(pause_at=50, kill_at=60),
          "a playbook path and --set values": dict(kill_at=70, sets={"bridge_devices": 9},
                                                    playbook=str(Path("playbooks/us-east-1-2021.yaml.j2")))}[case]
    monkeypatch.chdir(ROOT)
    reference = _scripted(tmp_path / "reference", None, **{k: v for k, v in kw.items() if k != "kill_at"})
    resumed = _scripted(tmp_path / "resumed", chdir=lambda: monkeypatch.chdir(tmp_path), **kw)
    assert run_files(resumed / "teams" / "red") == run_files(reference / "teams" / "red")


def test_a_session_still_served_cannot_be_resumed_and_a_cut_journal_line_is_dropped(tmp_path):
    out = tmp_path / "session"
    alive = make(out)
    drive(alive, 50)
    with pytest.raises(NotResumable, match="another `gameday serve` is serving this session"):
        Session.rebuild(out)
    assert (out / "teams" / "red").is_dir() and not (out / "restarts").exists()  # nothing moved
    killed(alive)
    with open(out / rundir.SESSION_JOURNAL, "a") as f:
        f.write('{"wall": "2026-12-02T00:00:00", "tick": 50, "control": "mes')  # killed while writing it
    s = Session.rebuild(out)
    s.close()
    for line in (out / rundir.SESSION_JOURNAL).read_text().splitlines():
        json.loads(line)  # the restart's record on a line of its own


def test_resume_takes_its_options_from_the_session_and_says_so(tmp_path):
    from click.testing import CliRunner

    from orchestrator.cli import main

    for extra, named in ((["--team", "red"], "--team"), (["--seed", "4"], "--seed"),
                         (["--speed", "10"], "--speed"), (["us-east-1-2025"], "PLAYBOOK"), (["--web-port", "9"], "--web-port"),
                         (["--set", "x=1"], "--set"), (["--start"], "--start/--wait")):  # (it said --sets, --start-now)
        out = CliRunner().invoke(main, ["serve", "--resume", str(tmp_path), *extra])
        assert out.exit_code == 2 and f"leave out {named}" in out.output and "Traceback" not in out.output, out.output
    out = CliRunner().invoke(main, ["serve", "--resume", str(tmp_path)])
    assert out.exit_code == 2 and f"--resume {tmp_path}: no readable tokens.json" in out.output  # (it said --session)
    assert list(tmp_path.iterdir()) == []
    assert CliRunner().invoke(main, ["serve"]).exit_code == 2
