"""Live game days over real ZeroMQ sockets: a session served to scripted consoles, the
facilitator's controls, the protocol's defences, and replay of a team's run."""
from __future__ import annotations

import filecmp
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import msgpack
import pytest
import zmq

from orchestrator.live import protocol as lp
from orchestrator.live.client import LiveClient, RequestFailed, ServerUnreachable
from orchestrator.live.server import LiveServer
from orchestrator.hosting.host import HostingOptions
from orchestrator.runs.runner import replay
from orchestrator.live.session import Session
from reports.rundir import load_run
from tests.helpers import built_in_from, interrupt_when, serve, stop

pytestmark = [pytest.mark.slow, pytest.mark.live]  # live game days over real sockets

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def live(tmp_path, teams=("red", "blue"), speed=None, duration=1800.0, start=False, serve=True, **server_kw):
    """A session (worlds in process) served on a real socket by a thread of this process."""
    session = Session(tmp_path / "session", list(teams), duration=duration, speed=speed, hosting=HostingOptions())
    server = LiveServer(session, "tcp://127.0.0.1:0", **server_kw)
    if start:
        session.start()
    stop = threading.Event()
    thread = threading.Thread(target=server.run, kwargs={"linger_s": 3600, "should_stop": stop.is_set}, daemon=True)
    if serve:
        thread.start()
    try:
        yield session, server
    finally:
        stop.set()
        if serve:
            thread.join(30)
        session.close()
        server.close()


def client(server: LiveServer, role: str, team: str | None = None, **kw) -> LiveClient:
    return LiveClient(server.address, server.token_of(role, team), **kw)


def injected(run_dir: Path) -> list[dict]:
    return [e for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines()) if e["event"] == "injected"]


# -- end to end ------------------------------------------------------------------------------------

def test_two_teams_over_ray_and_zeromq_are_ranked_by_what_they_did(ray_session, tmp_path):
    """`gameday serve` with each team's world on a Ray actor; a scripted console for each
    team over real sockets: `good` cuts the surge and turns protection on once the
    trigger has fired, `idle` only watches. The scoreboard ranks good first, every run
    directory is complete, and the good team's run replays identically in process.

    The built-in scenario from 07:25 (its clock started five minutes before the trigger,
    rather than its half-hour prologue: the same world in its steady state) to 08:10."""
    out = tmp_path / "session"
    gcs = ray_session.get_runtime_context().gcs_address
    clients = []
    playbook = built_in_from(tmp_path, "us-east-1-2021", "07:25")
    proc, toks = serve([playbook, "--team", "good", "--team", "idle", "--hosting", "ray", "--placement", "single",
                        "--address", gcs, "--bind", "tcp://127.0.0.1:0", "--no-web", "--duration", "45m",
                        "--speed", "60", "--linger", "2"], out)
    try:
        # (patient clients: the server answers between ticks of worlds on niced Ray actors, which a
        # busy machine, such as the other test worker's, can hold back for seconds)
        clients = fac, good, idle = [LiveClient(toks["server"], toks[k] if k == "facilitator" else toks["teams"][k],
                                                timeout_s=5.0, retries=5) for k in ("facilitator", "good", "idle")]
        assert good.call("hello", {"team": "good", "role": "alice"})["team"] == "good"
        assert fac.call("start")["state"] == "running"
        acted = False
        while True:
            st = good.call("state", {"since": 0})
            idle.call("state", {"since": 0})
            # At 800x ten simulated minutes pass in 0.75 s, and protection asked for after
            # about 07:42 no longer breaks the loop by the end: the session plays at 60x
            # until the team's move, so a busy machine cannot make it late, then at 800x.
            if not acted and st["session"]["clock"] >= "07:32":
                good.call("act", {"action": "disable_scaling_automation"})
                good.call("act", {"action": "enable_protection"})
                fac.call("speed", {"speed": 800})
                acted = True
            if st["session"]["state"] == "ended":
                break
            time.sleep(0.1)
        board = fac.call("scoreboard")
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        stop(proc, clients)
    assert proc.returncode == 0, stderr[-3000:]
    ranking = json.loads((out / "ranking.json").read_text())
    assert [r["team"] for r in ranking["teams"]] == ["good", "idle"] == [r["team"] for r in board["teams"]]
    first, second = ranking["teams"]
    assert first["loop"].startswith("broken") and second["loop"] == "not yet"
    assert first["impact"] < second["impact"] and first["actions"] == 2 and second["actions"] == 0
    for team in ("good", "idle"):
        run = load_run(out / "teams" / team)
        assert run.meta["status"] == "complete" and run.meta["ticks_done"] == 2700 == len(run.metrics)
        assert run.meta["hosting"] == "ray" and run.meta["operator"] == "console"
        assert (out / "teams" / team / "report" / "report.html").is_file()
    assert [e["body"]["action"] for e in injected(out / "teams" / "good")] == ["disable_scaling_automation",
                                                                               "enable_protection"]
    assert injected(out / "teams" / "idle") == []
    report = (out / "report" / "session.md").read_text()
    assert "## Team good" in report and "## Team idle" in report
    # the facilitator's controls at the simulated clock, and the speed as it changed
    assert "| 07:25:00 | start |  |" in report and "| speed | 800x |" in report, report[:3000]
    assert "(speed 60x, then 800x from 07:3" in report, report[:600]
    assert "final ranking" in stdout
    assert "team report: " in stdout and "session report: " in stdout, stdout[-2000:]
    again = replay(out / "teams" / "good", tmp_path / "replayed")
    for name in ("metrics.csv", "events.jsonl"):
        assert filecmp.cmp(out / "teams" / "good" / name, again.dir / name, shallow=False), name


# -- tokens and roles -----------------------------------------------------------------------------

def test_a_token_grants_its_own_team_or_role_only(tmp_path):
    with live(tmp_path) as (session, server):
        red, viewer, fac = client(server, "team", "red"), client(server, "viewer"), client(server, "facilitator")
        stranger = LiveClient(server.address, "not-a-token")
        try:
            with pytest.raises(RequestFailed) as e:
                stranger.call("hello")
            assert e.value.code == "unauthorized"
            with pytest.raises(RequestFailed) as e:
                red.call("state", {"team": "blue"})  # another team's world
            assert e.value.code == "forbidden" and "red" in str(e.value)
            with pytest.raises(RequestFailed) as e:
                red.call("pause")
            assert e.value.code == "forbidden"
            with pytest.raises(RequestFailed) as e:
                viewer.call("act", {"action": "enable_protection"})
            assert e.value.code == "forbidden"
            assert red.call("state")["team"] == "red"
            assert fac.call("state", {"team": "blue"})["team"] == "blue"
            assert [r["team"] for r in viewer.call("scoreboard")["teams"]] == ["red", "blue"]
            with pytest.raises(RequestFailed) as e:
                red.call("act", {"action": "reboot_everything"})
            assert e.value.code == "bad_request" and "enable_protection" in str(e.value)
            with pytest.raises(RequestFailed) as e:
                red.call("act", {"action": "isolate_top_talker", "params": {"devices": "two"}})
            assert "devices" in str(e.value) and "a whole number (it is argument count of add_devices)" in str(e.value)
            assert server.counters["unauthorized"] == 1 and server.counters["forbidden"] == 3
            assert not any(t.run.journal for t in session.teams.values())  # nothing reached a world
        finally:
            for c in (red, viewer, fac, stranger):
                c.close()


def test_malformed_frames_get_an_error_reply_and_are_counted(tmp_path):
    with live(tmp_path) as (session, server):
        token = server.token_of("team", "red")
        bad = [b"\x00\xffnot msgpack", msgpack.packb([1, 2, 3]), msgpack.packb({"v": 99, "id": "a", "token": token, "op": "ping"}),
               msgpack.packb({"v": 1, "id": "", "token": token, "op": "ping"}),
               msgpack.packb({"v": 1, "id": "b", "token": token, "op": "launch_missiles"}),
               msgpack.packb({"v": 1, "id": "c", "token": token, "op": "act", "args": {"action": 7}}),
               msgpack.packb({"v": 1, "id": "d", "token": token, "op": "act", "args": {"action": "x", "extra": 1}}),
               msgpack.packb({"v": 1, "id": "e", "token": token, "op": "speed", "args": {"speed": float("nan")}}),
               b"x" * (lp.MAX_FRAME + 10)]
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(server.address)
        try:
            for frame in bad:
                sock.send(frame)
                assert sock.poll(5000), frame[:40]
                rep = msgpack.unpackb(sock.recv())
                assert rep["ok"] is False and rep["error"]["code"] == "malformed", rep
            sock.send_multipart([b"two", b"frames"])
            assert sock.poll(5000)
            assert msgpack.unpackb(sock.recv())["error"]["code"] == "malformed"
            assert server.counters["malformed"] == len(bad) + 1
            red = client(server, "team", "red")
            assert red.call("ping")["pong"] is True  # still serving
            red.close()
        finally:
            sock.close()
            ctx.term()


def test_a_flood_of_commands_is_rate_limited_and_the_server_keeps_serving(tmp_path):
    with live(tmp_path, rate=5.0, burst=10) as (session, server):
        red, blue = client(server, "team", "red"), client(server, "team", "blue")
        accepted = limited = 0
        try:
            for _ in range(200):
                try:
                    red.call("act", {"action": "query_logs"})
                    accepted += 1
                except RequestFailed as e:
                    assert e.code == "rate_limited"
                    limited += 1
            assert limited > 0 and accepted >= 10 and accepted + limited == 200
            assert blue.call("state")["team"] == "blue"  # another team's token is not starved
            assert server.counters["rate_limited"] == limited
            # every accepted command, and only those, is on its way into red's world
            assert len(session.teams["red"].run.journal) == accepted and not session.teams["blue"].run.journal
        finally:
            red.close()
            blue.close()


def test_a_command_resent_after_a_timeout_is_executed_once(tmp_path):
    """The server stalls past the client's timeout; the client reconnects and resends
    (Lazy Pirate); both copies reach the server; the action is taken once."""
    with live(tmp_path, serve=False) as (session, server):
        red = client(server, "team", "red", timeout_s=0.3, retries=5)
        result = {}
        t = threading.Thread(target=lambda: result.update(red.call("act", {"action": "enable_protection"})))
        t.start()
        time.sleep(1.0)  # no one serves: the first try times out, the client resends on a new socket
        end = time.monotonic() + 10
        while t.is_alive() and time.monotonic() < end:
            server.serve_requests(0.05)
        t.join(5)
        for _ in range(20):
            server.serve_requests(0.05)  # whatever copies are still queued
        assert result["action"] == "enable_protection" and red.reconnects >= 1
        assert server.counters["repeats"] >= 1
        assert [e["body"]["action"] for e in session.teams["red"].run.journal] == ["enable_protection"]
        red.close()


def test_a_console_killed_mid_action_reconnects_and_loses_nothing(tmp_path):
    with live(tmp_path, speed=None, duration=2400, start=True) as (session, server):
        script = ("import os, signal, sys, time\n"
                  "from orchestrator.live import protocol as lp\n"
                  "from orchestrator.live.client import LiveClient\n"
                  "c = LiveClient(sys.argv[1], sys.argv[2])\n"
                  "c.sock.send(lp.request('k1', sys.argv[2], 'act', {'action': 'enable_protection', 'by': 'carol'}))\n"
                  "time.sleep(0.5)  # sent, not yet answered: killed mid-action\n"
                  "os.kill(os.getpid(), signal.SIGKILL)\n")
        proc = subprocess.run([sys.executable, "-c", script, server.address, server.token_of("team", "red")], cwd=ROOT,
                              timeout=60)
        assert proc.returncode == -signal.SIGKILL
        again = client(server, "team", "red")
        try:
            deadline = time.monotonic() + 60
            while True:
                st = again.call("state", {"since": 0})
                actions = st["actions"]
                if actions and actions[0]["state"] == "effective" or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert [a["action"] for a in actions] == ["enable_protection"] and actions[0]["by"] == "carol"
            assert actions[0]["state"] == "effective"
            feed = st["feed"]
            assert [f["n"] for f in feed] == list(range(len(feed))) and st["feed_next"] == len(feed)
            assert any("enable_protection is in effect" in f["text"] for f in feed)
            later = again.call("state", {"since": st["feed_next"]})  # a console asks only for what is new
            assert all(f["n"] >= st["feed_next"] for f in later["feed"])
        finally:
            again.close()


# -- the facilitator ---------------------------------------------------------------------------------

def test_pause_stops_simulated_time_and_speed_changes_apply_at_once(tmp_path):
    with live(tmp_path, teams=("red",), speed=20.0, duration=6 * 3600, start=True) as (session, server):
        fac = client(server, "facilitator")
        try:
            time.sleep(0.5)
            paused = fac.call("pause")
            assert paused["state"] == "paused"
            time.sleep(1.0)
            assert fac.call("status")["session"]["tick"] == paused["tick"]  # not one tick while paused
            fac.call("resume")

            def ticks_in_a_second():
                a = fac.call("status")["session"]["tick"]
                time.sleep(1.0)
                return fac.call("status")["session"]["tick"] - a

            slow = ticks_in_a_second()
            fac.call("speed", {"speed": 400})
            fast = ticks_in_a_second()
            assert slow > 0 and fast > 5 * slow, (slow, fast)  # 20x against 400x
            with pytest.raises(RequestFailed) as e:
                fac.call("speed", {"speed": -3})
            assert e.value.code == "bad_request" and "speed" in str(e.value)
            with pytest.raises(RequestFailed) as e:
                fac.call("resume")
            assert e.value.code == "bad_state"
            fac.call("message", {"text": "the EC2 console is down too"})
        finally:
            fac.close()
    journal = [json.loads(line)["control"] for line in (tmp_path / "session" / "journal.jsonl").read_text().splitlines()]
    assert journal[:6] == ["created", "start", "pause", "resume", "speed", "message"]
    events = [json.loads(line) for line in (tmp_path / "session" / "teams" / "red" / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events if e["agent"] == "session"]
    assert kinds[:5] == ["session_started", "session_paused", "session_resumed", "speed_changed", "facilitator_message"]


def test_an_injected_fault_and_the_teams_actions_replay_identically(tmp_path):
    """A team's world in process with a fault injected by the facilitator and two
    commands; `replay` of its run directory gives identical metrics and events."""
    session = Session(tmp_path / "s", ["red"], duration=4500, speed=None, hosting=HostingOptions())
    try:
        session.start()
        while session.state != "ended":
            if session.tick == 1900:
                session.inject("blind_deployment", {"seconds": 600})
                session.act("red", "enable_protection", {}, "alice", "red:1")
            if session.tick == 1901:
                session.act("red", "query_logs", {}, "bob", "red:2")
            session.step()
    finally:
        session.close()
    run_dir = tmp_path / "s" / "teams" / "red"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert any(e["event"] == "fault_injected" and e["fault"] == "blind_deployment" for e in events)
    started = next(e for e in events if e["event"] == "action_started" and e["action"] == "enable_protection")
    effective = next(e for e in events if e["event"] == "action_effective" and e["action"] == "enable_protection")
    assert effective["failed_steps"] > 0 and effective["tick"] - started["tick"] > 600  # the outage held it back
    again = replay(run_dir, tmp_path / "again")
    for name in ("metrics.csv", "events.jsonl"):
        assert filecmp.cmp(run_dir / name, again.dir / name, shallow=False), name


# -- binding -------------------------------------------------------------------------------------------

def test_a_non_loopback_bind_without_keys_is_refused_before_anything_starts(tmp_path):
    out = tmp_path / "s"
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "serve", "--team", "red", "--bind",
                           "tcp://0.0.0.0:7799", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "0.0.0.0 is not a loopback address" in proc.stderr and "gameday keys" in proc.stderr
    assert not out.exists()


def test_with_curve_keys_only_clients_with_the_server_key_get_answers(tmp_path):
    from orchestrator.live.server import generate_keys, load_key

    public, secret = generate_keys(tmp_path / "keys")
    assert oct(os.stat(secret).st_mode & 0o777) == "0o600"
    session = Session(tmp_path / "s", ["red"], duration=600, speed=None, hosting=HostingOptions())
    server = LiveServer(session, "tcp://127.0.0.1:0", curve_secret=str(secret))
    stop = threading.Event()
    thread = threading.Thread(target=server.run, kwargs={"linger_s": 3600, "should_stop": stop.is_set}, daemon=True)
    thread.start()
    token = server.token_of("team", "red")
    good = LiveClient(server.address, token, server_public=load_key(str(public), secret=False)[0])
    plain = LiveClient(server.address, token, timeout_s=0.5, retries=1)
    try:
        assert good.call("state")["team"] == "red"
        with pytest.raises(ServerUnreachable):
            plain.call("state")  # no handshake without the key: nothing in clear text
    finally:
        good.close()
        plain.close()
        stop.set()
        thread.join(30)
        session.close()
        server.close()


@pytest.mark.browser
def test_the_scoreboard_page_of_a_real_session_shows_both_teams_and_follows_the_worlds(tmp_path):
    """The page served by the session's own web server, read twice by headless Chromium
    while two worlds run: both teams shown, and the simulated clock moves on."""
    from orchestrator.live.web import WebServer
    from helpers import chromium, dump_dom, shown

    browser = chromium()
    with live(tmp_path, speed=100.0, duration=4 * 3600, start=True) as (session, server):
        web = WebServer(server.address, lambda: server.board_json, port=0)
        url = web.url
        try:
            time.sleep(1.0)
            first = shown(dump_dom(browser, url, tmp_path, 1500)[0])
            time.sleep(1.5)
            second = shown(dump_dom(browser, url, tmp_path, 3000)[0])
        finally:
            web.shutdown()
    assert sorted(first["teams"]) == ["blue", "red"] == sorted(second["teams"])
    assert first["state"] == "running" and second["clock"] > first["clock"], (first, second)


def test_a_session_that_cannot_keep_its_speed_goes_on_from_where_it_is_instead_of_racing(tmp_path):
    """Ticks far behind their due time (the worlds cannot keep the speed asked): the
    clock is rebased instead of stepping a burst of ticks to catch up, and the session
    says it fell behind."""
    session = Session(tmp_path / "s", ["red"], duration=600, speed=60.0, hosting=HostingOptions())
    try:
        session.start()
        session.step()
        assert session.behind == 0
        session.clock.rebase(session.tick, time.monotonic() - 100.0)  # as if the last 100 s went on stepping
        session.step()
        assert session.behind == 1 and session.summary()["fell_behind"] == 1
        assert session.due() > time.monotonic() - 1.0  # the next tick is due about now, not 100 s ago
    finally:
        session.close()


def test_ctrl_c_ends_a_session_cleanly_with_its_directories_readable(tmp_path):
    """SIGINT to `gameday serve`: exit 130, no traceback, each team's run directory
    readable and marked ended, the ranking written."""
    out = tmp_path / "session"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--team", "red", "--team", "blue",
                             "--hosting", "inprocess", "--bind", "tcp://127.0.0.1:0", "--no-web", "--start",
                             "--speed", "120", "--no-report", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "teams" / "red" / "metrics.csv"
    # (well past 200 rows: the header is a line, and Ctrl-C may land between two teams' ticks)
    err = interrupt_when(proc, lambda: metrics.exists() and metrics.read_text().count("\n") > 210)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    for team in ("red", "blue"):
        run = load_run(out / "teams" / team)
        assert run.meta["status"] == "ended" and len(run.metrics) == run.meta["ticks_done"] > 200
    ranking = json.loads((out / "ranking.json").read_text())
    assert sorted(r["team"] for r in ranking["teams"]) == ["blue", "red"]
    assert json.loads((out / "session.json").read_text())["status"] == "ended"


@pytest.mark.slow
def test_the_python_api_hosts_a_game_day_as_the_command_does(tmp_path):
    """``orchestrator.serve`` assembles the game day as ``gameday serve`` does (both through
    live/gameday.py): a console joins with the token it announces, the facilitator starts
    it, and the session ends with its ranking and a complete run directory per team."""
    import orchestrator
    from orchestrator.live.gameday import Serving

    seen = {}

    def announce(game):  # (the server is up, and answers once this returns: a console joins meanwhile)
        def join():
            red = LiveClient(game.server.address, game.server.token_of("team", "red"), timeout_s=2.0, retries=10)
            seen["red"] = red.call("state", {"since": 0})
            fac = LiveClient(game.server.address, game.server.token_of("facilitator"), timeout_s=2.0, retries=10)
            seen["started"] = fac.call("start")["state"]
        seen["thread"] = threading.Thread(target=join, daemon=True)
        seen["thread"].start()

    session = orchestrator.serve(["red", "blue"], "us-east-1-2021", duration="10m", speed=None, out=tmp_path / "s",
                                 serving=Serving(bind="tcp://127.0.0.1:0", web=False, linger_s=1.0),
                                 announce=announce)
    seen["thread"].join(10)
    assert seen["red"]["team"] == "red" and seen["started"] == "running"
    assert json.loads((session.dir / "ranking.json").read_text())
    for team in ("red", "blue"):
        assert json.loads((session.dir / "teams" / team / "meta.json").read_text())["status"] == "complete"
