"""The browser side of a live game day, in real headless Chromium driven by chromedriver:
two teams play through their pages on one server (forms, progress, charts), a page that
loses its connection catches up with nothing lost and no command run twice, a wrong or
another team's token sees nothing, and the scoreboard page ranks the teams as their
scores say. Screenshots of the pages go to tests/screenshots/ for people to look at."""
from __future__ import annotations

import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers import wait_for, webdriver
from orchestrator.hosting.host import HostingOptions
from orchestrator.live.client import LiveClient
from orchestrator.live.debrief import Debriefs
from orchestrator.live.server import LiveServer
from orchestrator.live.session import Session
from orchestrator.live.web import WebServer

pytestmark = [pytest.mark.slow, pytest.mark.live, pytest.mark.browser]

SCREENSHOTS = Path(__file__).parent / "screenshots"


class CuttableProxy:
    """A TCP relay in front of the web server, so that a test can hold the answers a
    browser would get and then cut its connections, as a network would."""

    def __init__(self, upstream_port: int):
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.holding = threading.Event()
        self.refusing = threading.Event()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing.is_set():  # the network is down
                down.close()
                continue
            up = socket.create_connection(self.upstream)
            with self.lock:
                self.conns += [down, up]
            threading.Thread(target=self._pump, args=(down, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                if answers and self.holding.is_set():
                    continue  # lost on the way, as on a network that went away
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass

    def down(self) -> None:
        """The network goes away: every connection is cut, and new ones are refused."""
        self.refusing.set()
        self.cut()

    def up(self) -> None:
        self.holding.clear()
        self.refusing.clear()

    def cut(self) -> None:
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.cut()
        self.listener.close()


@contextmanager
def served(tmp_path, teams=("red", "blue"), speed=120.0, duration=12 * 3600.0, reports=False):
    """A session served to pages; ``reports``: written as it ends (``Debriefs``), as ``gameday serve`` does."""
    session = Session(tmp_path / "session", list(teams), duration=duration, speed=speed, hosting=HostingOptions())
    server = LiveServer(session, "tcp://127.0.0.1:0")
    debriefs = Debriefs(session.dir, list(teams)) if reports else None
    web = WebServer(server.address, lambda: server.board_json, port=0,
                    board_access=lambda token: (server.holder(token) or ("",))[0] in ("viewer", "facilitator"),
                    reports=debriefs)
    server.on_change = web.changed
    stop, closed = threading.Event(), []

    def end():  # (as GameDay's: the worlds' run directories closed, then their reports written)
        closed.append(session.close())
        if debriefs is not None:
            debriefs.start()

    thread = threading.Thread(target=server.run, kwargs={"linger_s": 3600, "should_stop": stop.is_set,
                                                         "on_end": end}, daemon=True)
    thread.start()
    try:
        yield session, server, web
    finally:
        stop.set()
        thread.join(30)
        web.shutdown()
        if debriefs is not None:
            debriefs.wait(60)
        if not closed:
            session.close()
        server.close()


def page(driver, script: str):
    return driver.execute_script("const t = window.gamedayTeam; return " + script)


def text_of(driver, css: str) -> str:
    """An element's text as shown, read again if the page re-rendered it between finding
    and reading (the score panel is rebuilt with every state)."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(50):
        try:
            return driver.find_element("css selector", css).text
        except StaleElementReferenceException:
            time.sleep(0.05)
    return driver.find_element("css selector", css).text


def request_action(driver, action: str, **params) -> None:
    """Open the mitigation's line of the list, fill in its form, ask for it."""
    item = driver.find_element("css selector", f'details[data-action="{action}"]')
    if item.get_attribute("open") is None:
        item.find_element("css selector", "summary").click()
    form = item.find_element("css selector", f'form[data-action="{action}"]')
    for name, value in params.items():
        field = form.find_element("css selector", f'input[name="{name}"]')
        field.clear()
        field.send_keys(str(value))
    form.find_element("css selector", "button").click()


def shown_action(driver, action: str) -> dict | None:
    """The action's line on the page: its state and its progress bar."""
    return driver.execute_script("""
        for (const li of document.querySelectorAll('#actions li')) {
          if (li.querySelector('strong').textContent !== arguments[0]) continue;
          const p = li.querySelector('progress');
          return {state: li.dataset.state, command: li.dataset.command, text: li.textContent,
                  steps: p ? p.max : null, done: p ? p.value : null};
        }
        return null;""", action)


def requested(session, team: str, action: str) -> list[dict]:
    """The team's world's operator has been asked for ``action`` (once per command it ran)."""
    return [a for a in list(session.teams[team].view.actions.values()) if a["action"] == action]


def injected(run_dir: Path, action: str) -> list[dict]:
    return [e for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
            if e["event"] == "injected" and e["body"].get("action") == action]


def no_console_errors(driver, network_cut: bool = False) -> None:
    """No script error and no refused resource (a Content-Security-Policy violation
    included); a page whose network was cut has the failed reconnections in its log."""
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"
              and not (network_cut and e["source"] == "network" and "WebSocket" in e["message"])]
    assert not errors, errors


def screenshot(driver, name: str) -> None:
    """The whole page, from its top."""
    SCREENSHOTS.mkdir(exist_ok=True)
    height = driver.execute_script("window.scrollTo(0, 0); return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(max(height, 800), 4000))
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))
    driver.set_window_size(1400, 1000)
    print(f"\nscreenshot: {SCREENSHOTS / name}.png")


def test_two_teams_play_in_their_browsers_and_a_cut_page_catches_up_without_running_a_command_twice(tmp_path):
    with served(tmp_path, reports=True) as (session, server, web), webdriver(tmp_path, "red") as red, \
            webdriver(tmp_path, "blue") as blue:
        proxy = CuttableProxy(web.port)
        try:
            red.get(f"http://127.0.0.1:{proxy.port}/team/red#{server.token_of('team', 'red')}")
            blue.get(web.link("blue", server.token_of("team", "blue")))
            for d in (red, blue):
                wait_for(lambda: page(d, "t.charts.length") == len(session.teams["red"].view.observe))
            assert "#" not in red.current_url  # the token left the address bar
            facilitator = LiveClient(server.address, server.token_of("facilitator"))
            facilitator.call("start")
            facilitator.close()
            trigger = 'tr[data-milestone="trigger"]'  # (its own score: nothing reached before the trigger at 07:30)
            wait_for(lambda: red.find_elements("css selector", trigger))
            assert text_of(red, trigger) == "trigger not yet par 07:30"
            # On a 1,400 x 900 window the score, the alerts and the feed are in view without scrolling,
            # beside the charts; the mitigations are a list of closed lines below them.
            red.set_window_size(1400, 900)
            inner = red.execute_script("return window.innerHeight")
            tops = red.execute_script("""return Object.fromEntries(['score', 'alerts', 'feed', 'charts'].map(
                (id) => [id, document.getElementById(id).getBoundingClientRect().top]))""")
            assert all(0 < top < inner - 60 for top in tops.values()), (inner, tops)
            assert red.execute_script("return document.getElementById('feed').getBoundingClientRect().left") > \
                red.execute_script("return document.getElementById('charts').getBoundingClientRect().right")
            assert not red.find_elements("css selector", "details.mitigation[open]")
            red.set_window_size(1400, 1000)

            # Each team acts through its page's forms and follows its action to the end.
            request_action(red, "move_dns_off_bridge")
            request_action(blue, "isolate_top_talker", devices=3)
            red_action = wait_for(lambda: (a := shown_action(red, "move_dns_off_bridge")) and a["state"] == "started" and a)
            assert red_action["steps"] == 2 and "ready" in red_action["text"]
            assert re.search(r"ready in (\d+m)?\d+s", red_action["text"]), red_action["text"]  # its countdown
            wait_for(lambda: (shown_action(red, "move_dns_off_bridge") or {}).get("state") == "effective")
            wait_for(lambda: (shown_action(blue, "isolate_top_talker") or {}).get("state") == "effective")
            assert "devices=3" in shown_action(blue, "isolate_top_talker")["text"]
            assert shown_action(blue, "move_dns_off_bridge") is None  # red's world is not blue's
            assert requested(session, "blue", "isolate_top_talker")[0]["params"] == {"devices": 3}

            # A member of red writes down why it acted: a note at the simulated clock, red's alone.
            red.find_element("id", "who").send_keys("ana")
            red.find_element("id", "note").send_keys("DNS rides on the congested bridge: moved it off")
            red.find_element("css selector", "#note-form button").click()
            wait_for(lambda: red.find_element("id", "note-result").text.startswith("noted at"))
            assert red.find_element("id", "note").get_attribute("value") == ""
            wait_for(lambda: any("ana: DNS rides on the congested bridge" in e["text"] for e in page(red, "t.feed")))
            points = page(red, "t.xs.length")
            wait_for(lambda: page(red, "t.xs.length") > points + 5)  # the charts follow the world
            assert page(red, "t.ys.every((ys) => ys.length === t.xs.length)")
            screenshot(blue, "team-console")

            # Red's connection goes: its next command reaches the server, the answer does not.
            proxy.holding.set()
            request_action(red, "enable_protection")
            wait_for(lambda: requested(session, "red", "enable_protection"))
            proxy.down()
            repeats = server.counters["repeats"]
            time.sleep(1.5)  # the world goes on meanwhile: a couple of simulated minutes
            wait_for(lambda: "connection lost" in red.find_element("id", "status").text)
            result = red.find_element("css selector", 'form[data-action="enable_protection"] .result')
            assert result.text == "waiting for the connection; sent again when it is back"  # (not "sending")
            proxy.up()
            wait_for(lambda: red.find_element("id", "status").text == "")
            wait_for(lambda: result.text.startswith("requested at"))
            assert server.counters["repeats"] > repeats  # resent after the cut, answered from the server's record
            assert len(requested(session, "red", "enable_protection")) == 1
            wait_for(lambda: (shown_action(red, "enable_protection") or {}).get("state") == "effective")

            # Everything it missed is on the page, in order, once.
            view = session.teams["red"].view
            wait_for(lambda: page(red, "t.feed.length") >= len(view.feed))
            feed = page(red, "t.feed.map((e) => e.text)")
            assert feed == [e["text"] for e in view.feed][:len(feed)]
            xs = page(red, "t.xs")
            assert xs == [x for x, _ in session.teams["red"].view.series[:len(xs)]]
            assert all(b > a for a, b in zip(xs, xs[1:]))
            screenshot(red, "team-console-after-reconnecting")

            # Each team sees its own score: the trigger reached at 07:30 beside its par, impact so far.
            for d in (red, blue):
                wait_for(lambda: text_of(d, trigger).split()[1] == "07:30", timeout=60)
                assert "on par" in text_of(d, trigger)
                assert "impact so far" in text_of(d, "#score")

            # The facilitator ends it: each page says so with the team's own result, and asks nothing more.
            facilitator = LiveClient(server.address, server.token_of("facilitator"))
            facilitator.call("end")
            facilitator.close()
            for d, name in ((red, "red"), (blue, "blue")):
                result = d.find_element("id", "result")
                wait_for(lambda: result.is_displayed())
                loop = session.team_score(name)["loop"]
                assert result.text.startswith(f"The game day is over. Your result: loop {loop} · impact "), result.text
                assert d.find_element("css selector", "#note-form button").get_attribute("disabled") is not None
            # ... and, once written, a link to its own after-action report, served under its token: red's has the
            # note a member of red wrote, in its timeline; a made-up address opens nothing.
            links = {}
            for d, name in ((red, "red"), (blue, "blue")):
                wait_for(lambda: d.find_elements("css selector", "#report a"), timeout=120)
                links[name] = d.find_element("css selector", "#report a").get_attribute("href")
            assert links["red"] != links["blue"] and "#" not in links["red"]
            assert all(token not in link for link in links.values() for token in server.tokens)
            red.find_element("css selector", "#report a").click()
            red.switch_to.window(red.window_handles[-1])
            wait_for(lambda: red.find_elements("tag name", "h1"))
            assert "red" in red.find_element("tag name", "h1").text
            timeline = red.find_element("tag name", "body").text
            assert "note by ana" in timeline and "DNS rides on the congested bridge: moved it off" in timeline
            assert "blue" not in red.find_element("tag name", "h1").text
            hovers = [t.get_attribute("textContent") for t in red.find_elements(  # (marked on its loop's chart too)
                "css selector", 'figure[data-chart="loop"] g.mark-label title')]
            assert any("note by ana: DNS rides on the congested bridge" in h for h in hovers), hovers
            no_console_errors(red, network_cut=True)  # (its own Content-Security-Policy lets its styles and charts show)
            red.close()
            red.switch_to.window(red.window_handles[0])
            with pytest.raises(urllib.error.HTTPError) as made_up:
                urllib.request.urlopen(f"http://127.0.0.1:{web.port}/report/{'x' * 32}", timeout=10)
            assert made_up.value.code == 404
            # Its server closing after the end is the end, not a cut: the page does not say it reconnects.
            web.shutdown()
            wait_for(lambda: "the game day is over and its server has closed" in blue.find_element("id", "status").text)
            time.sleep(1.0)
            assert "reconnecting" not in blue.find_element("id", "status").text
            no_console_errors(red, network_cut=True)
            no_console_errors(blue, network_cut=True)
        finally:
            proxy.close()
    assert len(injected(tmp_path / "session" / "teams" / "red", "enable_protection")) == 1  # in the run, once
    notes = {team: [json.loads(line) for line in (tmp_path / "session" / "teams" / team / "events.jsonl").open()
                    if '"team_note"' in line] for team in ("red", "blue")}
    assert [(n["by"], n["text"]) for n in notes["red"]] == [("ana", "DNS rides on the congested bridge: moved it off")]
    assert notes["blue"] == []


def test_a_page_turned_away_for_now_says_refused_and_why_not_reconnecting_then_comes_in(tmp_path):
    """A token's pages at their cap: one more is refused for now, and says so with the
    server's reason, not 'connection lost'; a page of the token closes, and it comes in."""
    import asyncio

    import aiohttp

    from orchestrator import budgets

    with served(tmp_path) as (session, server, web), webdriver(tmp_path, "red") as red:
        token = server.token_of("team", "red")

        async def go():
            async with aiohttp.ClientSession() as http:
                pages = []
                for _ in range(budgets.LIVE_PAGES_PER_TOKEN):
                    ws = await http.ws_connect(f"ws://127.0.0.1:{web.port}/ws")
                    await ws.send_str(json.dumps({"id": "h", "op": "hello", "token": token, "args": {"team": "red"}}))
                    while json.loads((await ws.receive(timeout=30)).data).get("id") != "h":
                        pass
                    pages.append(ws)
                red.get(web.link("red", token))
                status = red.find_element("id", "status")
                await asyncio.to_thread(wait_for, lambda: status.text.startswith("refused: "))
                assert f"the most one token may have ({budgets.LIVE_PAGES_PER_TOKEN})" in status.text
                assert "reconnecting" not in status.text
                await pages.pop().close()
                await asyncio.to_thread(wait_for, lambda: red.find_element("id", "status").text == "" and
                                        page(red, "t.state !== null"), 60)
                for ws in pages:
                    await ws.close()

        asyncio.run(go())


def test_a_wrong_or_another_teams_token_sees_nothing_and_the_scoreboard_ranks_by_score(tmp_path):
    with served(tmp_path) as (session, server, web), webdriver(tmp_path) as d:
        facilitator = LiveClient(server.address, server.token_of("facilitator"))
        facilitator.call("start")
        for link in (f"{web.url}team/red#not-a-token", web.link("red", server.token_of("team", "blue")),
                     f"{web.url}team/red#{server.token_of('viewer')}", f"{web.url}team/red"):
            d.get(link)
            wait_for(lambda: d.find_elements("css selector", ".denied"))
            assert page(d, "t.state") is None and not d.find_elements("id", "main")
            assert d.find_element("id", "state").text == "no access"
            assert not d.find_elements("css selector", "canvas")
        screenshot(d, "team-console-wrong-token")

        red = LiveClient(server.address, server.token_of("team", "red"))
        red.call("act", {"action": "disable_event_delivery"})  # red acts, blue does not: their scores part
        time.sleep(3)
        facilitator.call("pause")
        wait_for(lambda: json.loads(server.board_json)["session"]["state"] == "paused")
        ranking = sorted(json.loads(server.board_json)["teams"], key=lambda t: t["rank"])
        d.get(web.url)  # without the viewer's token: nothing
        wait_for(lambda: d.find_element("id", "state").text == "no access")
        assert not d.find_elements("css selector", "td.team")
        assert any("401" in e["message"] for e in d.get_log("browser"))  # refused (and the log read, so emptied)
        d.get(web.scoreboard_link(server.token_of("viewer")))
        wait_for(lambda: d.find_element("id", "state").text == "paused")
        teams = [td.text for td in d.find_elements("css selector", "td.team")]
        assert teams == [t["team"] for t in ranking]
        impacts = [float(td.text) for td in d.find_elements("css selector", "td.impact")]
        assert impacts == pytest.approx([t["impact"] for t in ranking], abs=0.051)
        screenshot(d, "scoreboard")
        no_console_errors(d)
        red.close()
        facilitator.close()


def test_the_facilitators_page_pauses_resumes_injects_and_messages_and_the_scoreboard_marks_it(tmp_path):
    with served(tmp_path, speed=240.0, reports=True) as (session, server, web), \
            webdriver(tmp_path, "facilitator") as fac, \
            webdriver(tmp_path, "blue") as blue:
        fac.get(web.facilitator_link(server.token_of("facilitator")))
        blue.get(web.link("blue", server.token_of("team", "blue")))
        wait_for(lambda: len(fac.find_elements("css selector", "#rows tr")) == 2)
        assert "#" not in fac.current_url
        ticks = lambda: [t.run.host.tick for t in session.teams.values()]  # noqa: E731

        fac.find_element("id", "start").click()
        wait_for(lambda: session.state == "running" and min(ticks()) > 60)
        fac.find_element("id", "pause").click()
        wait_for(lambda: session.state == "paused")
        paused_at = ticks()
        time.sleep(1.0)
        assert ticks() == paused_at  # both worlds stand still
        wait_for(lambda: blue.find_element("id", "state").text == "paused")
        request_action(blue, "enable_protection")  # asked while paused: shown queued at once, not nowhere
        queued = 'li[data-state="queued until the game day runs"]'
        wait_for(lambda: blue.find_elements("css selector", queued))
        assert "enable_protection" in blue.find_element("css selector", queued).text
        fac.find_element("id", "resume").click()
        wait_for(lambda: all(now > then + 60 for now, then in zip(ticks(), paused_at)))
        wait_for(lambda: not blue.find_elements("css selector", queued))  # requested once the clock runs
        assert len(blue.find_elements("css selector", '#actions li')) == 1

        # A fault for red only, with its parameter changed, and a message for everyone.
        Select = __import__("selenium.webdriver.support.select", fromlist=["Select"]).Select
        Select(fac.find_element("id", "fault")).select_by_value("second_surge")
        fac.find_element("css selector", '.teams[data-for="inject"] input[value="blue"]').click()
        fac.find_element("css selector", "#inject button").click()
        wait_for(lambda: fac.find_element("css selector", "#inject .result").text == "inject: done")
        fac.find_element("id", "message-text").send_keys("the status page is down too")
        fac.find_element("css selector", "#message button").click()
        wait_for(lambda: "the status page is down too" in blue.find_element("id", "messages").text)
        # A prepared hint for blue only: on blue's page, in blue's run, not red's.
        Select(fac.find_element("id", "hint-name")).select_by_value("retries_are_load")
        assert fac.find_element("id", "hint-text-shown").text.startswith("Clients retry failed connections")
        fac.find_element("css selector", '.teams[data-for="hint"] input[value="red"]').click()
        fac.find_element("css selector", "#hint button").click()
        wait_for(lambda: fac.find_element("css selector", "#hint .result").text == "hint: done")
        wait_for(lambda: "Clients retry failed connections at once" in blue.find_element("id", "hints").text)
        assert session.teams["red"].view.hints == []
        assert not text_of(blue, "#score .score-head").startswith("rank")
        fac.find_element("id", "ranks").click()  # the teams see their ranks from now on
        wait_for(lambda: re.match(r"rank [12] of 2 · loop ", text_of(blue, "#score .score-head")))
        wait_for(lambda: any(m[1] == "fault" for m in session.teams["red"].view.marks))
        assert not any(m[1] == "fault" for m in session.teams["blue"].view.marks)

        fac.find_element("id", "end").click()  # armed, not ended: one click is not enough
        assert fac.find_element("id", "end").get_attribute("data-armed") == "1"
        assert not fac.execute_script("return Object.values(window.gamedayFacilitator.results).some((r) => r.op === 'end')")
        assert "end" not in [json.loads(x)["control"] for x in (session.dir / "journal.jsonl").read_text().splitlines()]
        wait_for(lambda: fac.find_element("id", "end").get_attribute("data-armed") is None, timeout=10)  # disarmed
        # its history of controls, at the simulated clock, newest first
        history = fac.execute_script("return [...document.querySelectorAll('#history li')].map((li) => li.textContent)")
        assert [h.split("  ", 1)[1].split(":")[0] for h in history] == ["ranks", "hint", "message", "inject", "resume",
                                                                        "pause", "start"]
        assert history[0].endswith("ranks: shown to the teams") and history[1].endswith("hint: to blue: retries_are_load")
        assert re.search(r"inject: second_surge .* into red$", history[3]) and history[2].endswith("to red, blue: the status page is down too")
        assert all(re.fullmatch(r"\d\d:\d\d(:\d\d)?", h.split("  ")[0]) for h in history), history
        screenshot(fac, "facilitator")

        blue.get(web.scoreboard_link(server.token_of("viewer")))  # each team's loop health over time, with its marks
        wait_for(lambda: len(blue.find_elements("css selector", "#health .panel")) == 2)
        red_panel = blue.find_element("css selector", '#health .panel[data-team="red"]')
        wait_for(lambda: int(red_panel.get_attribute("data-points")) > 2 and
                 int(red_panel.get_attribute("data-marks")) >= 1)
        assert "fault second_surge" in red_panel.text
        screenshot(blue, "scoreboard-with-health")
        fac.find_element("id", "end").click()
        fac.find_element("id", "end").click()
        wait_for(lambda: session.state == "ended")
        wait_for(lambda: fac.find_element("id", "end").get_attribute("disabled") is not None)  # nothing left to end
        # once the teams' reports are written, the session's: its link opens it, with the controls in clock time
        wait_for(lambda: fac.find_elements("css selector", "#report a"), timeout=120)
        fac.get(fac.find_element("css selector", "#report a").get_attribute("href"))
        assert fac.find_element("tag name", "h1").text.startswith("Game day report: us-east-1-2021, seed 1")
        assert "The facilitator's controls" in fac.find_element("tag name", "body").text
        no_console_errors(fac)
        no_console_errors(blue)
