"""The scoreboard: the terminal table, the web server, and the page in a real browser
updating itself from /scoreboard.json."""
from __future__ import annotations

import json
import re
import socket
import threading
import urllib.error
import urllib.request

import pytest

from helpers import chromium, dump_dom, shown
from orchestrator.errors import GamedayError
from orchestrator.live.scoreboard_view import render_board
from orchestrator.live.web import CSP, WebServer


def board(state="running", clock="07:48:56", lag_s=0.0, consoles=True):
    b = {"session": {"state": state, "clock": clock, "tick": 100, "speed": 60.0, "end_clock": "10:30:00",
                     "lag_s": lag_s, "playbook": "us-east-1-2021", "seed": 7, "teams": ["alpha", "bravo"]},
         "teams": [{"team": "bravo", "rank": 1, "loop": "broken 07:48:56", "loop_broken": "07:48:56",
                    "backlog": "drained 07:56:34", "backlog_drained": "07:56:34", "impact": 12.345,
                    "first_update": "07:40:00", "actions": 4},
                   {"team": "alpha", "rank": 2, "loop": "not yet", "loop_broken": None, "backlog": "not yet",
                    "backlog_drained": None, "impact": 80.0, "first_update": None, "actions": 0}]}
    if consoles:
        b["consoles"] = {"alpha": 0, "bravo": 2}
    return b


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


# -- the terminal table ---------------------------------------------------------------------------
def test_the_table_has_a_row_per_team_in_rank_order():
    b = board()
    b["teams"].reverse()  # served sorted; the table does not rely on it
    lines = render_board(b).splitlines()
    assert lines[0] == "scoreboard: us-east-1-2021, seed 7, 07:48:56 / 10:30:00, speed 60x, running"
    assert cells(lines[1]) == ["rank", "team", "loop broken", "backlog drained", "impact so far", "first update",
                               "actions", "consoles"]
    assert cells(lines[2]) == ["1", "bravo", "broken 07:48:56", "drained 07:56:34", "12.3", "07:40:00", "4", "2"]
    assert cells(lines[3]) == ["2", "alpha", "not yet", "not yet", "80.0", "-", "0", "0"]
    assert len(lines) == 4


def test_the_final_ranking_lag_and_a_board_without_consoles():
    text = render_board(board(state="ended", clock="10:30:00", lag_s=2.34, consoles=False))
    head, *rows = text.splitlines()
    assert head.startswith("final ranking: ") and head.endswith(", ended, lag 2.3 s")
    assert cells(rows[1])[-1] == "-" and cells(rows[2])[-1] == "-"  # consoles unknown (the board written at the end)
    assert "lag" not in render_board(board(lag_s=0.4))  # normal jitter is not shown
    assert "final ranking" not in render_board(board(state="paused"))


# -- the web server -------------------------------------------------------------------------------
class FakeBoard:
    """The web server's board: each call a later clock; alpha's impact grows and alpha
    drops from first to second place after the first call; the session ends at call
    ``end_at``; calls after ``fail_after`` raise."""

    def __init__(self, end_at=None, fail_after=None):
        self.calls, self.end_at, self.fail_after = 0, end_at, fail_after
        self.lock = threading.Lock()

    @staticmethod
    def clock(n: int) -> str:
        return f"07:{n // 60:02d}:{n % 60:02d}"

    def __call__(self) -> str:
        with self.lock:
            self.calls += 1
            n = self.calls
        if self.fail_after is not None and n > self.fail_after:
            raise RuntimeError("the server is gone")
        b = board(state="ended" if self.end_at is not None and n >= self.end_at else "running", clock=self.clock(n))
        alpha, bravo = b["teams"][1], b["teams"][0]
        alpha["impact"] = 10.0 * n
        alpha["rank"], bravo["rank"] = (1, 2) if n == 1 else (2, 1)
        b["teams"] = sorted(b["teams"], key=lambda t: t["rank"])
        b["teams"].append({"team": "<b>carol</b>", "rank": 3, "loop": "not yet", "loop_broken": None,
                           "backlog": "not yet", "backlog_drained": None, "impact": 99.0, "first_update": None,
                           "actions": 0})
        return json.dumps(b)


@pytest.fixture
def web():
    """web(get_json) -> (server, url); shut down after the test."""
    started = []

    def start(get_json):
        started.append(WebServer("tcp://127.0.0.1:1", get_json, port=0))  # no session: the board is all it serves
        return started[-1], started[-1].url

    yield start
    for server in started:
        server.shutdown()


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def test_the_server_serves_the_page_and_the_board_and_nothing_else(web, capfd):
    fake = FakeBoard()
    server, url = web(fake)
    assert url == f"http://127.0.0.1:{server.port}/"
    status, headers, page = get(url)
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert headers["Content-Security-Policy"] == CSP and "'unsafe-inline'" not in CSP
    sources = re.findall(r'<script src="([^"]+)"', page)
    assert "/static/uPlot.iife.min.js" in sources  # the charting library, from this server (its notice names its home)
    scripts = [get(url + src.lstrip("/"))[2] for src in sources if "uPlot" not in src]
    assert 'fetch("/scoreboard.json"' in scripts[-1] and all("innerHTML" not in s for s in scripts)
    assert "textContent" in scripts[0]
    assert all("http://" not in s and "https://" not in s for s in [page] + scripts)  # self-contained
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|/static/)""", page)  # nothing from elsewhere
    first = get(url + "scoreboard.json")
    second = get(url + "scoreboard.json?t=1")
    for status, headers, body in (first, second):
        assert status == 200 and headers["Content-Type"] == "application/json"
        assert headers["Cache-Control"] == "no-store"
    assert json.loads(first[2])["session"]["clock"] == "07:00:01"
    assert json.loads(second[2])["session"]["clock"] == "07:00:02"
    for path in ("nope", "index.html", "scoreboard.json/x", "../etc/passwd", "static/web.py", "static/../web.py",
                 "static/team.html", "static/"):
        assert get(url + path)[0] == 404, path
    assert capfd.readouterr().err == ""  # no request log


def test_a_failing_board_is_a_503_and_shutdown_frees_the_port(web):
    server, url = web(FakeBoard(fail_after=0))
    assert get(url + "scoreboard.json")[0] == 503
    port = server.port
    with pytest.raises(GamedayError, match="web_port"):
        WebServer("tcp://127.0.0.1:1", lambda: "{}", port=port)  # in use
    server.shutdown()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


# -- the page in a real browser -------------------------------------------------------------------
@pytest.mark.browser
def test_the_page_updates_itself_from_the_json(web, tmp_path):
    browser = chromium()
    fake = FakeBoard()
    _, url = web(fake)
    dom, log = dump_dom(browser, url, tmp_path, 2500)
    assert "CONSOLE" not in log, [line for line in log.splitlines() if "CONSOLE" in line]
    first = shown(dom)
    served = fake.calls
    print(f"\nfirst dump after {served} requests: {first}")
    assert served >= 2  # polled, not loaded once
    assert first["clock"] == f"{FakeBoard.clock(served)} / 10:30:00"  # the latest board, not the first
    # the order of the boards after the first (alpha first only in the first), and the
    # team named like markup shown as text, not parsed
    assert first["teams"] == ["bravo", "alpha", "&lt;b&gt;carol&lt;/b&gt;"] and "<b>" not in dom
    assert first["impacts"][1] == 10.0 * served > 10.0
    assert first["state"] == "running" and first["title"] == "scoreboard" and first["status"] == ""

    dom, _ = dump_dom(browser, url, tmp_path, 5000)
    second = shown(dom)
    assert fake.calls > served + 1 and second["clock"] == f"{FakeBoard.clock(fake.calls)} / 10:30:00"
    assert second["clock"] > first["clock"] and second["impacts"][1] > first["impacts"][1]


@pytest.mark.browser
def test_the_table_fits_a_1400_px_projector_with_its_longest_texts(web, tmp_path):
    """A loop that broke, re-formed and broke again, and a team with a long name: the
    table wraps its texts rather than running off the right edge (its last column cut)."""
    from helpers import wait_for, webdriver

    def long_board() -> str:
        b = board()
        b["teams"][0].update(team="site-reliability-blue", loop="broken 13:22:10 (after re-forming 12:10:05)",
                             backlog="drained 18:40:12", first_update="08:22:31")
        return json.dumps(b)

    _, url = web(long_board)
    with webdriver(tmp_path) as d:
        d.set_window_size(1400, 900)
        d.get(url + "#v")
        wait_for(lambda: d.find_elements("css selector", "tbody tr"))
        right, width = d.execute_script(
            "return [document.querySelector('thead th:last-child').getBoundingClientRect().right, "
            "document.documentElement.clientWidth]")
    assert right <= width, (right, width)


@pytest.mark.browser
def test_the_page_stops_polling_at_the_end_and_keeps_the_final_ranking(web, tmp_path):
    browser = chromium()
    fake = FakeBoard(end_at=3)
    _, url = web(fake)
    page = shown(dump_dom(browser, url, tmp_path, 8000)[0])
    assert fake.calls == 3  # no request after the board that said "ended"
    assert page["title"] == "final ranking" and page["state"] == "ended" and page["clock"].startswith("07:00:03")
    assert page["teams"][:2] == ["bravo", "alpha"] and page["status"] == "the session has ended"


@pytest.mark.browser
def test_the_page_says_when_the_connection_is_lost_and_keeps_the_last_board(web, tmp_path):
    browser = chromium()
    fake = FakeBoard(fail_after=2)
    _, url = web(fake)
    page = shown(dump_dom(browser, url, tmp_path, 5000)[0])
    assert fake.calls > 3  # it keeps trying
    assert page["status"].startswith("connection lost") and page["clock"].startswith("07:00:02")
    assert page["teams"][:2] == ["bravo", "alpha"]


def test_a_port_in_use_is_said_as_the_flag_by_the_command_line(tmp_path):
    """The pages' server starts on a thread of its own, whose errors name the settings as the
    command line speaks them (--web-port), not as the Python API does (web_port)."""
    import socket

    from orchestrator.cli import main
    from orchestrator.cli.options import vocabulary
    from orchestrator.errors import GamedayError, speaking
    from orchestrator.live.web import WebServer

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with speaking(vocabulary(main.commands["serve"])), \
                pytest.raises(GamedayError, match=r"pass another --web-port .*\(--web/--no-web\)"):
            WebServer("tcp://127.0.0.1:1", lambda: "{}", "127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()


# -- a team's own score, as its consoles see it ------------------------------------------------------
def test_a_team_sees_its_own_score_as_it_stands_milestones_beside_par_and_impact_so_far(tmp_path):
    """The team's state carries its score as the scorer has it at that tick: before the
    trigger nothing is reached; after it the trigger's clock (par where the playbook has
    one: the browser test plays the flagship's), the loop as
    the scoreboard words it, impact so far growing with the outage; the console says it."""
    from pathlib import Path

    from orchestrator.hosting.host import HostingOptions
    from orchestrator.live.console_view import render_status
    from orchestrator.live.session import Session

    playbook = str(Path(__file__).parent / "playbooks" / "mini_loop.yaml.j2")
    s = Session(tmp_path / "session", ["red", "blue"], playbook, duration=600, speed=None, hosting=HostingOptions())
    try:
        s.start()
        for _ in range(100):
            s._advance()
        before = s.team_state("red")["score"]
        assert [m["name"] for m in before["milestones"]][:2] == ["trigger", "first customer update"]
        assert all(m["clock"] is None for m in before["milestones"]) and before["impact"] == 0
        for _ in range(110):  # past the surge at 00:03
            s._advance()
        after = s.team_state("red")["score"]
        trigger = next(m for m in after["milestones"] if m["name"] == "trigger")
        assert trigger["clock"] == "00:03" and trigger["par"] is None  # (mini_loop has no par)
        assert after["loop"] == "not yet" and after["impact"] > 0
        assert after == s.team_state("red")["score"]  # (worked out once a tick)
        assert "SCORE    loop not yet · impact so far" in render_status(s.team_state("red")) \
            and "reached: trigger 00:03:00" in render_status(s.team_state("red"))
    finally:
        s.close()


def test_an_action_asked_while_paused_shows_queued_at_once_and_then_as_the_operator_requests_it(tmp_path):
    """A command sent while the game day is paused (or not started) reaches the world only
    when the clock runs: until then the team sees it queued, not nothing; once its operator
    requests it, that entry gives way to the request (one entry, not two)."""
    from pathlib import Path

    from orchestrator.hosting.host import HostingOptions
    from orchestrator.live.console_view import render_status
    from orchestrator.live.session import Session

    playbook = str(Path(__file__).parent / "playbooks" / "mini_loop.yaml.j2")
    s = Session(tmp_path / "session", ["red"], playbook, duration=600, speed=None, hosting=HostingOptions())
    try:
        s.act("red", "fix_backoff", {}, "ana", "red:1")  # (not started yet)
        shown = s.team_state("red")["actions"]
        assert [(a["action"], a["state"], a["by"], a["command"]) for a in shown] == \
            [("fix_backoff", "queued until the game day runs", "ana", "red:1")]
        assert "fix_backoff (ana) asked 00:00:00: queued until the game day runs" in render_status(s.team_state("red"))
        s.start()
        for _ in range(3):
            s._advance()
        shown = s.team_state("red")["actions"]
        assert len(shown) == 1 and shown[0]["command"] == "red:1" and shown[0]["state"] != "queued until the game day runs"
        assert shown[0]["id"] is not None  # the operator's request
        s.act("red", "fix_backoff", {}, "ana", "red:2")  # running: asked, and requested at the next tick
        assert [a["state"] for a in s.team_state("red")["actions"]] == [shown[0]["state"], "asked"]
    finally:
        s.close()


def test_a_hint_released_reaches_only_the_teams_it_is_for_and_ranks_only_when_shown(tmp_path):
    """A prepared hint (by name) to red, one written live to both: each in the journal, in
    the chosen teams' runs (their reports' timelines) and consoles, nowhere else; a name
    the playbook lacks, or a name and a text at once, refused naming what is expected."""
    import json

    from orchestrator.hosting.host import HostingOptions
    from orchestrator.live.protocol import ProtocolError
    from orchestrator.live.session import Session
    from reports.analysis import analyse
    from reports.rundir import load_run

    s = Session(tmp_path / "session", ["red", "blue"], duration=120, speed=None, hosting=HostingOptions())
    try:
        s.start()
        for _ in range(10):
            s._advance()
        prepared = s.hint("what_crosses_the_bridge", teams=["red"])
        assert prepared["teams"] == ["red"] and prepared["text"].startswith("Which of your services")
        s.hint(text="look at the setup success", teams=None)
        with pytest.raises(ProtocolError, match=r"name: got 'nosuch'; expected one of the playbook's hints "
                                                r"\(what_crosses_the_bridge, retries_are_load"):
            s.hint("nosuch")
        with pytest.raises(ProtocolError, match="name or text: give one"):
            s.hint("what_crosses_the_bridge", "and a text")
        assert [h["text"] for h in s.team_state("red")["hints"]] == [prepared["text"], "look at the setup success"]
        # a team's rank: hidden until the facilitator shows ranks
        assert "rank" not in s.team_state("red")["score"]
        s.show_ranks(True)
        ranks = {t: s.team_state(t)["score"] for t in ("red", "blue")}
        assert sorted(r["rank"] for r in ranks.values()) == [1, 2] and {r["of"] for r in ranks.values()} == {2}
        assert [r["team"] for r in s.scoreboard()["teams"]][ranks["red"]["rank"] - 1] == "red"
        s.show_ranks(False)
        assert "rank" not in s.team_state("blue")["score"]
        assert [h["text"] for h in s.team_state("blue")["hints"]] == ["look at the setup success"]
        for _ in range(5):
            s._advance()
    finally:
        s.close()
    journal = [json.loads(line) for line in (tmp_path / "session" / "journal.jsonl").read_text().splitlines()]
    assert [(j.get("name"), j["teams"]) for j in journal if j["control"] == "hint"] == \
        [("what_crosses_the_bridge", ["red"]), (None, ["red", "blue"])]
    assert [j["shown"] for j in journal if j["control"] == "ranks"] == [True, False]
    for team, n in (("red", 2), ("blue", 1)):
        rows = [r for r in analyse(load_run(tmp_path / "session" / "teams" / team)).timeline
                if r["what"] == "hint from the facilitator"]
        assert len(rows) == n and rows[-1]["detail"] == "look at the setup success"
