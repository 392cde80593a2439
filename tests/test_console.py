"""The team console: its rendering and command parsing (console_view), and one real
terminal session against a live `gameday serve`."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import stop_gently

from orchestrator.live.console_view import (BLOCKS, GAP, completion_words, format_value, parse_command, render_act_result,
                                       render_catalogue, render_feed_entry, render_status, sparkline)

pytestmark = [pytest.mark.slow, pytest.mark.live]  # a live session and its console in a terminal

CATALOGUE = [
    {"name": "isolate_top_talker", "description": "move the top talker", "params": {"devices": 2},
     "lead_time_s": 600.0, "steps": 2, "deploy": True, "risk": "medium"},
    {"name": "throttle_backlog_drain", "description": "drain slower", "params": {"factor": 0.5},
     "lead_time_s": 120.0, "steps": 1, "deploy": True, "risk": "low"},
    {"name": "disable_scaling_automation", "description": "stop the scaling", "params": {},
     "lead_time_s": 0.0, "steps": 1, "deploy": True, "risk": "none"},
    {"name": "post_status_update", "description": "post an update", "params": {"message": "We are investigating."},
     "lead_time_s": 0.0, "steps": 0, "deploy": False, "risk": "none"},
    {"name": "query_logs", "description": "ask the logs", "params": {}, "lead_time_s": 0.0, "steps": 0,
     "deploy": False, "risk": "none"},
]


def _state(**over):
    st = {
        "session": {"state": "running", "clock": "07:42:10", "tick": 2530, "speed": 60.0, "end_clock": "19:00",
                    "lag_s": 0.0},
        "catalogue": CATALOGUE, "team": "red",
        "metrics": [
            {"metric": "bridge.utilisation", "value": 0.973, "age_s": 40.0, "stale": False,
             "history": [0.5, 0.7, None, 0.97]},
            {"metric": "dns-lookups.error_ratio", "value": None, "age_s": None, "stale": True, "history": [None, None]},
            {"metric": "event-delivery.backlog", "value": 81234.0, "age_s": 250.0, "stale": True,
             "history": [80000.0, None]},
        ],
        "alarms": ["bridge-hot"],
        "actions": [
            {"id": "operator-1", "action": "isolate_top_talker", "params": {"devices": 2}, "by": "alice",
             "state": "started", "asked": "07:40", "steps": 2, "steps_done": 0, "failed_steps": 0,
             "ready": "07:50:00", "effective": None},
            {"id": "operator-2", "action": "enable_protection", "params": {}, "by": "bob", "state": "stepping",
             "asked": "07:30", "steps": 2, "steps_done": 1, "failed_steps": 3, "ready": "07:35", "effective": None},
            {"id": "operator-3", "action": "disable_scaling_automation", "params": {}, "by": "alice",
             "state": "effective", "asked": "07:31", "steps": 1, "steps_done": 1, "failed_steps": 0,
             "ready": "07:31:01", "effective": "07:33:01"},
        ],
        "logs": [{"asked": "07:20", "arrived": "07:30", "values": {"bridge.utilisation": {"value": 0.99, "age_s": 0}}}],
        "messages": [{"clock": "07:41", "text": "remember the status page"}],
        "feed": [], "feed_next": 0,
    }
    st.update(over)
    return st


# -- console_view ---------------------------------------------------------------------------------

def test_sparkline_marks_gaps_and_scales():
    line = sparkline([0.0, 0.5, None, 1.0])
    assert line == "▁▅" + GAP + "█"  # ▅ is the middle of eight blocks, rounded up
    assert sparkline([None, None]) == GAP * 2
    assert sparkline([]) == ""
    assert sparkline([3.0, 3.0]) == "▄▄" and sparkline([0.0, 0.0]) == "▁▁"
    assert len(sparkline(list(range(100)), width=20)) == 20


def test_sparklines_of_ratios_have_a_fixed_scale_so_small_error_ratios_stay_low():
    low, high = sparkline([0.003] * 5, unit="ratio"), sparkline([0.99] * 5, unit="ratio")
    assert low == BLOCKS[0] * 5 and high == BLOCKS[-1] * 5
    assert sparkline([0.003, 0.004], unit="ratio") == BLOCKS[0] * 2  # not stretched to the whole height
    assert sparkline([0.0, 1.5], unit="ratio") == BLOCKS[0] + BLOCKS[-1]  # above 100% the scale grows
    assert "now at the right" in render_status(_state())


def test_status_shows_header_metrics_alerts_actions_logs_messages():
    text = render_status(_state())
    header = text.splitlines()[0]
    assert "team red" in header and "simulated 07:42:10 (ends 19:00:00)" in header and "speed 60x" in header
    rows = {}
    for line in text.splitlines()[2:6]:  # the metrics table, below its heading
        rows[line.split()[0]] = line
    assert "97.3%" in rows["bridge.utilisation"] and "40s" in rows["bridge.utilisation"]
    assert "NO DATA" in rows["dns-lookups.error_ratio"] and "never" in rows["dns-lookups.error_ratio"]
    assert "81,234" in rows["event-delivery.backlog"] and "stale 4m" in rows["event-delivery.backlog"]
    assert GAP in rows["bridge.utilisation"]
    assert "[bridge-hot]" in text
    assert "isolate_top_talker devices=2 (alice) asked 07:40:00: lead time, ready at 07:50:00 (in 7m50s)" in text
    assert "enable_protection (bob) asked 07:30:00: deploying, step 1/2 done, 3 failed steps retried" in text
    assert "✓ disable_scaling_automation (alice) asked 07:31:00: in effect since 07:33:01" in text
    assert "LOG QUERY asked 07:20:00, answered 07:30:00" in text and "bridge.utilisation 99.0%" in text
    assert "FACILITATOR 07:41:00: remember the status page" in text


def test_status_header_paused_ended_disconnected():
    paused = _state(session={"state": "paused", "clock": "08:00", "speed": 30, "end_clock": "19:00"})
    assert "PAUSED" in render_status(paused).splitlines()[0]
    ended = _state(session={"state": "ended", "clock": "19:00", "speed": 30, "end_clock": "19:00"})
    assert "ENDED" in render_status(ended).splitlines()[0]
    assert "disconnected, retrying" in render_status(_state(), disconnected=True).splitlines()[0]
    assert "disconnected, retrying" in render_status(None, disconnected=True)


def test_value_formats():
    assert format_value("bridge.queue_delay_ms", 3.7049) == "3.7 ms"
    assert format_value("bridge.queue_delay_ms", 12500.0) == "12.50 s"
    assert format_value("internal-clients.connected", 84756.0) == "84,756"
    assert format_value("x.error_ratio", None) == "NO DATA"


def test_parse_act_types_params():
    assert parse_command("act isolate_top_talker devices=4", CATALOGUE) == \
        ("act", {"action": "isolate_top_talker", "params": {"devices": 4}})
    assert parse_command("throttle_backlog_drain factor=0.25", CATALOGUE) == \
        ("act", {"action": "throttle_backlog_drain", "params": {"factor": 0.25}})
    assert parse_command("  disable_scaling_automation ", CATALOGUE) == \
        ("act", {"action": "disable_scaling_automation", "params": {}})
    # a text parameter keeps what was typed, quoted or not
    assert parse_command('act post_status_update message="all good"', CATALOGUE)[1]["params"] == {"message": "all good"}
    assert parse_command("act post_status_update message=123", CATALOGUE)[1]["params"] == {"message": "123"}


def test_parse_logs_post_and_plain_commands():
    assert parse_command("logs", CATALOGUE) == ("act", {"action": "query_logs", "params": {}})
    assert parse_command("post We are seeing errors; more at 08:30.", CATALOGUE) == \
        ("act", {"action": "post_status_update", "params": {"message": "We are seeing errors; more at 08:30."}})
    assert parse_command("note bridge latency up; moving DNS off it", CATALOGUE) == \
        ("note", {"text": "bridge latency up; moving DNS off it"})
    assert parse_command('note "quoted, as typed"', CATALOGUE) == ("note", {"text": "quoted, as typed"})
    assert parse_command("help", CATALOGUE) == ("help", {})
    assert parse_command("list", CATALOGUE) == ("catalogue", {})
    assert parse_command("catalogue", CATALOGUE) == ("catalogue", {})
    assert parse_command("quit", CATALOGUE) == ("quit", {})


@pytest.mark.parametrize("line, words", [
    ("act foo", ["unknown action 'foo'", "catalogue"]),
    ("act isolate_top_talkr", ["unknown action", "did you mean isolate_top_talker"]),
    ("frobnicate", ["unknown command or action 'frobnicate'", "help"]),
    ("act isolate_top_talker count=2", ["unknown parameter 'count'", "devices"]),
    ("act disable_scaling_automation x=1", ["unknown parameter 'x'", "takes none"]),
    ("act isolate_top_talker devices=two", ["devices=two", "whole number"]),
    ("act isolate_top_talker devices", ["param=value"]),
    ("act", ["act NAME"]),
    ("post", ["post MESSAGE"]),
    ("note  ", ["note TEXT"]),
    ("logs now", ["logs takes nothing"]),
    ('act post_status_update message="open', ["quote"]),
    ("", ["empty", "help"]),
])
def test_parse_errors_name_the_problem(line, words):
    with pytest.raises(ValueError) as e:
        parse_command(line, CATALOGUE)
    for w in words:
        assert w in str(e.value), (line, str(e.value))


def test_completion_catalogue_feed_and_result_text():
    words = completion_words(CATALOGUE)
    assert {"help", "act", "logs", "post", "quit", "isolate_top_talker", "devices=", "factor="} <= set(words)
    cat = render_catalogue(CATALOGUE)
    assert "isolate_top_talker devices=2: lead time 10m, 2 deployment steps, risk medium" in cat
    assert "query_logs: lead time 0s, no deployment, risk none" in cat
    assert render_feed_entry({"n": 3, "clock": "07:30", "kind": "alert", "text": "ALERT bridge-hot"}) == \
        "07:30:00 alert   ALERT bridge-hot"
    assert render_act_result({"action": "query_logs", "params": {}, "tick": 265, "clock": "07:04:25"}) == \
        "requested query_logs (takes effect at tick 265, 07:04:25)"


# -- a real terminal ------------------------------------------------------------------------------

ESC = r"(?:\s|\x1b\[[0-9;?]*[A-Za-z])"  # what a full-screen redraw may put between two words


def loose(phrase: str) -> str:
    """A regex for ``phrase`` on a prompt_toolkit screen: spaces may come as cursor moves."""
    return f"{ESC}+".join(re.escape(w) for w in phrase.split())


CLOCK = f"simulated{ESC}+(\\d\\d:\\d\\d:\\d\\d)"


def gameday_cmd() -> list[str]:
    exe = shutil.which("gameday")
    return [exe] if exe else [sys.executable, "-m", "orchestrator.cli"]


def expect_redrawn(child, pattern: str, timeout: float = 30.0):
    """prompt_toolkit redraws only the cells that changed, so text may never appear in
    one piece; ask for full redraws (Ctrl-L) until ``pattern`` shows."""
    import pexpect

    deadline = time.monotonic() + timeout
    while True:
        try:
            child.expect(pattern, timeout=2)
            return child.match
        except pexpect.TIMEOUT:
            if time.monotonic() > deadline:
                raise
            child.sendcontrol("l")


def test_console_in_a_terminal(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    out = tmp_path / "s"
    env = dict(os.environ, TERM="xterm-256color", LANG="C.UTF-8", PYTHONIOENCODING="utf-8")
    log = open(tmp_path / "serve.log", "wb")  # a file, not a pipe nobody drains
    # 60 simulated minutes at 30x: two wall minutes, more than this test needs even on a busy machine
    server = subprocess.Popen(gameday_cmd() + [
        "serve", "--hosting", "inprocess", "--bind", "tcp://127.0.0.1:0", "--no-web", "--team", "red", "--start",
        "--speed", "30", "--duration", "60m", "--linger", "1", "--no-report", "--out", str(out)],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    child = None
    try:
        deadline = time.monotonic() + 60
        while not (out / "tokens.json").exists():
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "the server wrote no tokens.json"
            time.sleep(0.2)
        assert json.loads((out / "tokens.json").read_text())["teams"]["red"]
        cmd = gameday_cmd() + ["console", "--session", str(out), "--team", "red", "--as", "alice"]
        child = pexpect.spawn(cmd[0], cmd[1:], dimensions=(40, 120), env=env, encoding="utf-8", timeout=30)
        first = expect_redrawn(child, CLOCK).group(1)
        for _ in range(10):  # the clock moves: a later full redraw shows another time
            time.sleep(1)
            child.sendcontrol("l")
            later = expect_redrawn(child, CLOCK).group(1)
            if later != first:
                break
        assert later > first
        for ch in "act disable_scaling_automation":
            child.send(ch)
            time.sleep(0.02)
        child.send("\r")
        expect_redrawn(child, loose("requested disable_scaling_automation (takes effect at tick"))
        expect_redrawn(child, loose("disable_scaling_automation (alice) asked"))
        child.send("quit\r")
        child.expect(pexpect.EOF, timeout=30)
        child.close()
        assert child.exitstatus == 0, child.before
    finally:
        if child is not None and child.isalive():
            child.terminate(force=True)
        stop_gently(server, signal.SIGINT, 30)
        log.close()
