"""Hostile input and faults of the live server (issue #44): `gameday serve --resume` reads
a session directory someone else may have written, so each of its files is refused, not
trusted, when it is not what `gameday serve` writes (a FIFO, a JSON list, a tick past the
end of time, a team, action or fault the session never had, a token with a control
sequence in it), before anything is started and with nothing in the directory changed; a
port out of range or in use is said before a session directory is written (or a resumed
one changed); and a flood of malformed HTTP requests is answered 400 with a few lines on
the serve terminal, not a traceback each.

Real files, FIFOs, sockets and `gameday serve` processes; the session resumed is one a
server was serving when it died, made in process."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiohttp.http_exceptions import BadHttpMessage

from orchestrator import budgets
from orchestrator.hosting.host import HostingOptions
from orchestrator.live.client import LiveClient
from orchestrator.live.protocol import ProtocolError
from orchestrator.live.server import LiveServer
from orchestrator.live.session import NotResumable, Session, resumable
from orchestrator.live.web import _HttpLog
from reports import rundir

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[1]
CUT = b'{"wall": "2026-12-05T00:00:00", "tick": 30, "control": "mes'  # a line the killed server was writing


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A session a server was serving when it was killed: two teams, started, a command at
    tick 20, 30 ticks played, its tokens.json and session.json as the server wrote them, and
    a last journal line cut short."""
    out = tmp_path_factory.mktemp("killed") / "session"
    s = Session(out, ["red", "blue"], duration=600, speed=60.0, hosting=HostingOptions())
    server = LiveServer(s, "tcp://127.0.0.1:0")
    server.write_tokens()
    s.write_info(s.state, server=server.address, web="http://127.0.0.1:7701/")
    s.start()
    for _ in range(20):
        s._advance()
    s.act("red", "enable_protection", {}, "ana", "red:1")
    for _ in range(10):
        s._advance()
    server.close()
    s._lock.close()  # (the system drops a killed process's lock)
    with open(out / rundir.SESSION_JOURNAL, "ab") as f:
        f.write(CUT)
    return out


def copy_of(killed: Path, tmp_path: Path) -> Path:
    out = tmp_path / "session"
    shutil.copytree(killed, out, symlinks=True)
    return out


def snapshot(directory: Path) -> dict:
    """Every path under ``directory`` -> what it is and holds (a FIFO is never opened)."""
    out = {}
    for where, dirs, files in os.walk(directory):
        for name in dirs + files:
            p = Path(where) / name
            st = p.lstat()
            held = None
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    held = hashlib.sha256(f.read(2**20)).hexdigest(), st.st_size, st.st_mtime_ns
            out[str(p.relative_to(directory))] = (stat.filemode(st.st_mode), held)
    return out


def records_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / rundir.SESSION_JOURNAL).read_bytes()[:-len(CUT)].splitlines()]


def write_journal(out: Path, records: list[dict]) -> None:
    (out / rundir.SESSION_JOURNAL).write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + CUT)


def append(record) -> callable:
    """A mutation: ``record`` journalled after the session's last whole line (before the cut one)."""
    def mutate(out: Path) -> None:
        write_journal(out, records_of(out) + [record])
    return mutate


def edit_json(name: str, change) -> callable:
    def mutate(out: Path) -> None:
        path = out / name
        data = json.loads(path.read_text())
        path.write_text(json.dumps(change(data)))
    return mutate


def replace_with_fifo(name: str) -> callable:
    def mutate(out: Path) -> None:
        (out / name).unlink()
        os.mkfifo(out / name)
    return mutate


def gameday(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`gameday ARGS` in its own process; a hang fails the test at ``timeout``."""
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def refused(result: subprocess.CompletedProcess, *said: str) -> str:
    """The one error message of a refusal: exit 2, no traceback, nothing served, every
    control character escaped, and saying each of ``said``."""
    text = result.stdout + result.stderr
    assert result.returncode == 2, text
    assert "Traceback" not in text and "gameday console --server" not in text, text
    assert not any(c in text for c in ("\x1b", "\x07", "\x00")), text
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for s in said:
        assert s in text, (s, text)
    return text


# -- the session's files, as `gameday serve --resume` reads them -------------------------------------

ACT = {"wall": "x", "tick": 25, "control": "act", "team": "red", "action": "enable_protection", "params": {},
       "by": "ana", "command": "red:2"}

NOTE = {"wall": "x", "tick": 25, "control": "note", "team": "red", "text": "bridge latency up", "by": "ana",
        "command": "red:3"}

#: id -> (what is done to the session directory, what the refusal says: file, line, field, value, expected)
CLI_CASES = {
    "journal a FIFO": (replace_with_fifo(rundir.SESSION_JOURNAL), ["journal.jsonl: a FIFO", "expected a regular file"]),
    "tokens.json a FIFO": (replace_with_fifo(rundir.TOKENS), ["tokens.json: a FIFO", "expected a regular file"]),
    "session.json a FIFO": (replace_with_fifo(rundir.SESSION_INFO), ["session.json: a FIFO", "expected a regular file"]),
    "a tick of 1e300": (append({"wall": "x", "tick": 1e300, "control": "pause"}),
                        ["journal.jsonl: line 4: tick: got 1e+300; expected a whole number from 20", "to 600"]),
    "a tick past the end": (append({"wall": "x", "tick": 10**9, "control": "pause"}),
                            ["journal.jsonl: line 4: tick: got 1000000000; expected", "to 600 (the session's end)"]),
    "an unknown action": (append(ACT | {"action": "nosuch", "by": "\x1b[2J"}),
                          ["line 4: action: got 'nosuch'; expected one of the playbook's actions", "enable_protection"]),
    "an unknown team": (append(ACT | {"team": "ghost", "command": "ghost:1"}),
                        ["line 4: team: got 'ghost'; expected one of the session's teams (red, blue)"]),
    "an unknown fault": (append({"wall": "x", "tick": 25, "control": "inject", "fault": "nosuch", "params": {},
                                 "teams": ["red"]}),
                         ["line 4: fault: got 'nosuch'; expected one of the playbook's faults (blind_deployment"]),
    "tokens.json a list": (lambda out: (out / rundir.TOKENS).write_text("[]"),
                           ["tokens.json: the file: got []; expected a JSON object"]),
    "a token with a control sequence": (
        edit_json(rundir.TOKENS, lambda t: t | {"teams": t["teams"] | {"red": "\x1b[2J\x1b]0;x\x07" + "a" * 16}}),
        ["tokens.json: teams.red: got '\\x1b[2J\\x1b]0;x\\x07aaaa", "expected a token of 16 to 64 letters"]),
    "session.json a list": (lambda out: (out / rundir.SESSION_INFO).write_text("[1]"),
                            ["session.json: the file: got [1]; expected a JSON object"]),
    "a line nested past recursion": (
        lambda out: _insert(out, b"[" * 100_000 + b"]" * 100_000),
        ["journal.jsonl: line 4 is not JSON (nested too deep to be read)"]),
    "a journal over its budget": (
        lambda out: os.truncate(out / rundir.SESSION_JOURNAL, budgets.LIVE_JOURNAL_BYTES + 1),
        ["journal.jsonl: over 64 MiB"]),
}


def _insert(out: Path, line: bytes) -> None:
    """``line`` journalled as the fourth, before the cut one."""
    path = out / rundir.SESSION_JOURNAL
    path.write_bytes(path.read_bytes()[:-len(CUT)] + line + b"\n" + CUT)


@pytest.mark.slow  # (a real gameday serve each: the in-process journal checks stay in the fast subset)
@pytest.mark.parametrize("case", list(CLI_CASES))
def test_serve_resume_refuses_a_hostile_session_file_before_anything_starts_and_changes_nothing(killed, tmp_path,
                                                                                               case):
    mutate, said = CLI_CASES[case]
    out = copy_of(killed, tmp_path)
    mutate(out)
    before = snapshot(out)
    refused(gameday("serve", "--resume", str(out), "--no-report", "--linger", "0", timeout=30), *said)
    assert snapshot(out) == before  # not a byte changed, not even the cut line dropped


#: id -> (the records the journal holds instead of the killed session's, the field and what is said of it)
JOURNAL_CASES = {
    "a control it does not know": (lambda r: r + [{"wall": "x", "tick": 25, "control": "rewind"}],
                                   "line 4: control: got 'rewind'; expected one of start, pause"),
    "a second creation": (lambda r: r + [r[0] | {"tick": 25}], "line 4: control: got 'created'"),
    "a tick going backwards": (lambda r: r + [ACT | {"tick": 3}], "line 4: tick: got 3; expected a whole number from 20"),
    "a tick that is not a whole number": (lambda r: r + [ACT | {"tick": 25.5}], "line 4: tick: got 25.5"),
    "no tick": (lambda r: r + [{k: v for k, v in ACT.items() if k != "tick"}], "line 4: tick: got nothing"),
    "a resume while running": (lambda r: r + [{"wall": "x", "tick": 25, "control": "resume"}],
                               "line 4: control: got 'resume'; expected a control the session could take while running"),
    "a speed below the floor": (lambda r: r + [{"wall": "x", "tick": 25, "control": "speed", "speed": 1e-300}],
                                "line 4: speed: got 1e-300; expected a number >= 0.001 and <= 10000"),
    "a speed that is text": (lambda r: r + [{"wall": "x", "tick": 25, "control": "speed", "speed": "fast"}],
                             "line 4: speed: got 'fast'"),
    "parameters that are a list": (lambda r: r + [ACT | {"params": [1]}], "line 4: params: got [1]; expected a JSON object"),
    "a parameter the action does not take": (lambda r: r + [ACT | {"action": "restart_devices", "params": {"x": 1}}],
                                             "line 4: action restart_devices: parameter x"),
    "a command of another team": (lambda r: r + [ACT | {"command": "blue:2"}], "line 4: command: got 'blue:2'; expected red:ID"),
    "a request id that is not the facilitator's": (
        lambda r: r + [{"wall": "x", "tick": 25, "control": "pause", "request": "red:9"}],
        "line 4: request: got 'red:9'; expected _facilitator:ID"),
    "a message to no team": (lambda r: r + [{"wall": "x", "tick": 25, "control": "message", "text": "hi", "teams": []}],
                             "line 4: teams: got []; expected nothing (every team), or a list of the session's teams"),
    "a message of a megabyte": (lambda r: r + [{"wall": "x", "tick": 25, "control": "message", "text": "x" * 2**20}],
                                "line 4: text: got 'xxxx"),
    "a note of another team": (lambda r: r + [NOTE | {"command": "blue:3"}], "line 4: command: got 'blue:3'; expected red:ID"),
    "an empty note": (lambda r: r + [NOTE | {"text": ""}], "line 4: text: got ''; expected a text of 1 to 500"),
    "a note by a number": (lambda r: r + [NOTE | {"by": 7}], "line 4: by: got 7; expected a text of at most 500"),
    "a hint the playbook lacks": (lambda r: r + [{"wall": "x", "tick": 25, "control": "hint", "name": "nosuch",
                                                  "text": "x", "teams": ["red"]}],
                                  "line 4: name: got 'nosuch'; expected nothing (a hint written live), or one of the "
                                  "playbook's hints (what_crosses_the_bridge"),
    "ranks shown as text": (lambda r: r + [{"wall": "x", "tick": 25, "control": "ranks", "shown": "yes"}],
                            "line 4: shown: got 'yes'; expected true or false"),
    "a hint of no text": (lambda r: r + [{"wall": "x", "tick": 25, "control": "hint", "text": "", "teams": ["red"]}],
                          "line 4: text: got ''; expected a text of 1 to 500"),
    "a line that is a list": (lambda r: r + [[1, 2]], "line 4: got [1, 2]; expected a JSON object"),
    "teams that are not names": (lambda r: [r[0] | {"teams": ["red", "../x"]}] + r[1:],
                                 "line 1: teams: got ['red', '../x']; expected a list of 1 to 64 distinct team names"),
    "a hosting it does not know": (lambda r: [r[0] | {"hosting": "cloud"}] + r[1:], "line 1: hosting: got 'cloud'"),
    "options that are a list": (lambda r: [r[0] | {"options": []}] + r[1:], "line 1: options: got []"),
    "a duration that is text": (lambda r: [r[0] | {"options": r[0]["options"] | {"duration": "1h"}}] + r[1:],
                                "line 1: options.duration: got '1h'; expected nothing, or a number of seconds"),
    "a negative seed": (lambda r: [r[0] | {"seed": -1}] + r[1:], "line 1: the session's playbook and options no longer "
                                                                 "make its worlds"),
}


@pytest.mark.parametrize("case", list(JOURNAL_CASES))
def test_a_journal_line_the_session_could_not_have_written_is_refused_naming_line_field_and_value(killed, tmp_path,
                                                                                                  case):
    change, said = JOURNAL_CASES[case]
    out = copy_of(killed, tmp_path)
    write_journal(out, change(records_of(out)))
    before = snapshot(out)
    with pytest.raises(NotResumable) as e:
        Session.rebuild(out)
    message = str(e.value)
    assert message.startswith(f"{out / rundir.SESSION_JOURNAL}: ") and said in message, message
    assert len(message) < 1000 and "\x1b" not in message  # (the value shown bounded)
    assert snapshot(out) == before


def test_a_team_without_a_token_or_a_directory_the_rebuild_would_move_or_read_that_is_not_one_is_refused(killed,
                                                                                                        tmp_path):
    out = copy_of(killed, tmp_path)
    tokens = json.loads((out / rundir.TOKENS).read_text())
    with pytest.raises(NotResumable, match=r"tokens.json: teams: got \['red'\]; expected a token for each of the "
                                           r"session's teams \(red, blue\)"):
        resumable(out, tokens | {"teams": {"red": tokens["teams"]["red"]}})
    (out / rundir.RESTARTS).write_text("")  # (where the rebuild puts the dead server's directories)
    before = snapshot(out)
    with pytest.raises(NotResumable, match="restarts: not a directory; expected a directory"):
        Session.rebuild(out)
    assert snapshot(out) == before
    (out / rundir.RESTARTS).unlink()
    (out / "teams" / "blue" / rundir.METRICS).unlink()
    os.mkfifo(out / "teams" / "blue" / rundir.METRICS)
    before = snapshot(out)
    with pytest.raises(NotResumable, match="teams/blue/metrics.csv: a FIFO; expected a regular file"):
        Session.rebuild(out)
    assert snapshot(out) == before


@pytest.mark.slow  # (a real gameday serve each: the in-process journal checks stay in the fast subset)
def test_a_session_refused_once_resumes_when_its_file_is_set_right_and_loses_nothing(killed, tmp_path):
    """The refusal changed nothing: with tokens.json set right again the same directory
    resumes, at the tick it had reached, its cut line dropped, with the same tokens."""
    out = copy_of(killed, tmp_path)
    good = (out / rundir.TOKENS).read_text()
    (out / rundir.TOKENS).write_text("[]")
    refused(gameday("serve", "--resume", str(out), "--no-web", "--no-report", "--linger", "0"), "tokens.json")
    (out / rundir.TOKENS).write_text(good)
    tokens = json.loads(good) | {"server": "tcp://127.0.0.1:0"}  # (a free port, whatever the machine holds)
    (out / rundir.TOKENS).write_text(json.dumps(tokens))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--resume", str(out), "--no-web",
                             "--no-report", "--linger", "0"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 30
        while "paused" not in (out / rundir.SESSION_INFO).read_text() or "127.0.0.1:0" in (out / rundir.TOKENS).read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        address = json.loads((out / rundir.TOKENS).read_text())["server"]
        assert _status_then_end(address, tokens["facilitator"])["session"]["tick"] == 30
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert tokens["teams"]["red"] in stdout and "resumed at 07:00:30 (paused)" in stdout
    journal = (out / rundir.SESSION_JOURNAL).read_bytes()
    assert CUT not in journal and [json.loads(line)["control"] for line in journal.splitlines()][-2:] == ["restarted", "end"]


# -- ports ---------------------------------------------------------------------------------------------

@pytest.mark.slow  # (a real gameday serve each: the in-process journal checks stay in the fast subset)
@pytest.mark.parametrize("flags, said", [
    (["--bind", "tcp://127.0.0.1:99999"], "--bind 'tcp://127.0.0.1:99999': port 99999: expected 0 to 65535"),
    (["--bind", "tcp://127.0.0.1:65536"], "port 65536: expected 0 to 65535"),
    (["--bind", "tcp://127.0.0.1:" + "9" * 5000], "port 999999999...: expected 0 to 65535"),
    (["--web-port", "65536"], "Invalid value for '--web-port': 65536 is not in the range 0<=x<=65535"),
])
def test_a_port_out_of_range_is_refused_naming_the_option_before_anything_is_written(tmp_path, flags, said):
    result = gameday("serve", "--team", "red", "--hosting", "inprocess", *flags, "--out", str(tmp_path / "s"))
    assert result.returncode == 2 and said in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr) < 1000  # (the 5000 digits shown bounded)
    assert not (tmp_path / "s").exists()


def _status_then_end(address: str, facilitator_token: str) -> dict:
    """The session's status as the facilitator asks it, then the session ended by them."""
    fac = LiveClient(address, facilitator_token, timeout_s=5.0)
    try:
        status = fac.call("status")
        fac.call("end")
        return status
    finally:
        fac.close()


@pytest.fixture
def taken_port():
    """A port another program listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("which", ["bind", "web_port"])
def test_the_python_api_that_cannot_bind_leaves_no_session_directory(tmp_path, taken_port, which):
    import orchestrator
    from orchestrator.errors import GamedayError
    from orchestrator.live.gameday import Serving

    serving = Serving(bind=f"tcp://127.0.0.1:{taken_port}", web=False) if which == "bind" else \
        Serving(bind="tcp://127.0.0.1:0", web_port=taken_port)
    with pytest.raises(GamedayError, match="Address already in use"):
        orchestrator.serve(["red"], duration="10m", out=tmp_path / "s", serving=serving)
    assert not (tmp_path / "s").exists()


@pytest.mark.slow  # (a real gameday serve each: the in-process journal checks stay in the fast subset)
@pytest.mark.parametrize("which", ["--bind", "--web-port"])
def test_a_serve_that_cannot_bind_leaves_no_session_directory(tmp_path, taken_port, which):
    flags = (["--bind", f"tcp://127.0.0.1:{taken_port}", "--no-web"] if which == "--bind" else
             ["--bind", "tcp://127.0.0.1:0", "--web-port", str(taken_port)])
    result = gameday("serve", "--team", "red", "--hosting", "inprocess", *flags, "--out", str(tmp_path / "s"),
                     "--no-report")
    text = refused(result, "Address already in use")
    assert text.count("cannot bind") <= 1 and which in text  # (said once, naming the option)
    assert not (tmp_path / "s").exists() and "--resume" not in text  # nothing to resume


@pytest.mark.slow  # (a real gameday serve each: the in-process journal checks stay in the fast subset)
@pytest.mark.parametrize("which", ["server", "web"])
def test_a_resume_that_cannot_bind_leaves_the_session_directory_as_it_was(killed, tmp_path, taken_port, which):
    out = copy_of(killed, tmp_path)
    if which == "server":
        edit_json(rundir.TOKENS, lambda t: t | {"server": f"tcp://127.0.0.1:{taken_port}"})(out)
    else:
        edit_json(rundir.TOKENS, lambda t: t | {"server": "tcp://127.0.0.1:0"})(out)
        edit_json(rundir.SESSION_INFO, lambda i: i | {"web": f"http://127.0.0.1:{taken_port}/"})(out)
    before = snapshot(out)
    refused(gameday("serve", "--resume", str(out), "--no-report"), "Address already in use",
            "free that port, then resume again")
    assert snapshot(out) == before


# -- the live server's own checks --------------------------------------------------------------------

def test_the_facilitator_cannot_set_a_speed_below_the_floor(tmp_path):
    s = Session(tmp_path / "s", ["red"], duration=60, hosting=HostingOptions())
    try:
        for speed in (1e-300, 0, float("nan"), 1e5):
            with pytest.raises(ProtocolError, match="expected a number >= 0.001 and <= 10000"):
                s.set_speed(speed)
        assert s.set_speed(0.001)["speed"] == 0.001
    finally:
        s.close()


# -- the pages' server under malformed HTTP ------------------------------------------------------------

@pytest.mark.slow  # (a real gameday serve each: the in-process journal checks stay in the fast subset)
def test_a_flood_of_malformed_http_requests_is_answered_400_and_said_in_a_few_lines(tmp_path):
    out = tmp_path / "session"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--team", "red", "--hosting", "inprocess",
                             "--bind", "tcp://127.0.0.1:0", "--web-port", "0", "--duration", "10m", "--no-report",
                             "--linger", "0", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 30
        while not (out / rundir.SESSION_INFO).exists() or "web" not in (out / rundir.SESSION_INFO).read_text():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        port = int(json.loads((out / rundir.SESSION_INFO).read_text())["web"].rstrip("/").rsplit(":", 1)[1])
        answers = set()
        for i in range(300):  # no Host, or one with a control sequence in it
            with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
                c.sendall(b"GET / HTTP/1.1\r\n\r\n" if i % 2 else b"GET / HTTP/1.1\r\nHost: \x1b]0;x\x07\r\n\r\n")
                answers.add(c.recv(12))
        assert answers == {b"HTTP/1.0 400"}
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:  # a well-formed one is still served
            c.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            assert c.recv(12) == b"HTTP/1.1 200"
        tokens = json.loads((out / rundir.TOKENS).read_text())
        status = _status_then_end(tokens["server"], tokens["facilitator"])
        assert status["counters"]["malformed"] == 300  # counted, for `facilitate status`
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "Traceback" not in stderr and "\x1b" not in stderr, stderr
    notices = [line for line in stderr.splitlines() if "malformed HTTP request" in line]
    assert len(notices) == budgets.LIVE_HTTP_NOTICE_BURST + 1, stderr  # a few, then the rest summed up at the end
    assert notices[0].startswith("gameday serve: a malformed HTTP request was answered 400: ")
    assert notices[-1] == (f"gameday serve: {300 - budgets.LIVE_HTTP_NOTICE_BURST} more malformed HTTP requests were "
                           "answered 400 since the last notice")


def test_a_real_error_of_the_pages_server_is_still_logged_whole(caplog):
    counters = {"malformed": 0}
    http_log = _HttpLog(counters)
    with caplog.at_level(logging.DEBUG):
        http_log.exception("Error handling request from %s", "127.0.0.1", exc_info=RuntimeError("a bug"))
        http_log.exception("Error handling request from %s", "127.0.0.1",
                           exc_info=BadHttpMessage("Invalid header value char:\n\n  b'Host: \x1b[2J'"))
    bug, notice = caplog.records
    assert bug.name == "aiohttp.server" and bug.levelno == logging.ERROR and bug.exc_info[1].args == ("a bug",)
    assert notice.name == "gameday.serve" and notice.exc_info is None and counters["malformed"] == 1
    assert notice.getMessage() == ("gameday serve: a malformed HTTP request was answered 400: Invalid header value "
                                   "char: b'Host: \\x1b[2J'")


def test_more_teams_than_a_session_plays_are_refused_before_anything_is_built(tmp_path):
    from orchestrator.errors import InvalidInput
    from orchestrator.live.session import check_teams

    check_teams([f"t{i}" for i in range(budgets.LIVE_TEAMS)])
    with pytest.raises(InvalidInput, match=f"got '{budgets.LIVE_TEAMS + 1} teams'; expected at most {budgets.LIVE_TEAMS}"):
        check_teams([f"t{i}" for i in range(budgets.LIVE_TEAMS + 1)])
