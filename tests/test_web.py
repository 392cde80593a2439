"""The pages' web server without a browser: TLS for a bind beyond loopback, the
self-signed pair `gameday keys --tls` makes, and the WebSocket's defences (another
site's page, a wrong token, a malformed message)."""
from __future__ import annotations

import asyncio
import json
import ssl
import threading
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from click.testing import CliRunner

from orchestrator.cli import main
from orchestrator.hosting.host import HostingOptions
from orchestrator.live.debrief import Debriefs
from orchestrator.live.server import LiveServer
from orchestrator.live.session import Session
from orchestrator.live.tls import make_self_signed
from orchestrator.live.web import InsecureWebBind, WebServer, tls_context

pytestmark = pytest.mark.live


def test_a_web_bind_beyond_loopback_is_refused_without_tls(tmp_path):
    with pytest.raises(InsecureWebBind, match=r"web_host 0\.0\.0\.0: not a loopback address.*tls_cert"):
        WebServer("tcp://127.0.0.1:1", lambda: "{}", host="0.0.0.0", port=0)
    out = CliRunner().invoke(main, ["serve", "--team", "red", "--web-host", "0.0.0.0", "--out", str(tmp_path / "s")])
    assert out.exit_code == 2 and "not a loopback address" in out.output and "Traceback" not in out.output
    assert not (tmp_path / "s").exists()  # refused before anything was built
    out = CliRunner().invoke(main, ["serve", "--team", "red", "--tls-cert", "x.pem", "--out", str(tmp_path / "t")])
    assert out.exit_code == 2 and "--tls-cert and --tls-key go together" in out.output


def test_with_a_self_signed_pair_it_serves_https_to_a_client_that_trusts_it(tmp_path):
    out = CliRunner().invoke(main, ["keys", str(tmp_path / "keys"), "--tls", "--tls-host", "gameday.test"])
    assert out.exit_code == 0, out.output
    cert, key = tmp_path / "keys" / "web.crt", tmp_path / "keys" / "web.key"
    assert "fingerprint" in out.output and cert.exists() and (key.stat().st_mode & 0o777) == 0o600
    web = WebServer("tcp://127.0.0.1:1", lambda: json.dumps({"hello": "tls"}), host="0.0.0.0", port=0,
                    tls=tls_context(str(cert), str(key)))
    try:
        assert web.url.startswith("https://")
        trusting = ssl.create_default_context(cafile=str(cert))
        url = f"https://127.0.0.1:{web.port}/scoreboard.json"
        with urllib.request.urlopen(url, context=trusting, timeout=10) as r:
            assert json.loads(r.read()) == {"hello": "tls"}
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(url, context=ssl.create_default_context(), timeout=10)  # not trusted: refused
        with pytest.raises(Exception):
            urllib.request.urlopen(f"http://127.0.0.1:{web.port}/scoreboard.json", timeout=10)  # no plain HTTP
    finally:
        web.shutdown()


def test_a_certificate_that_cannot_be_read_is_a_clear_error(tmp_path):
    (tmp_path / "bad.pem").write_text("not a certificate")
    with pytest.raises(Exception, match=r"tls_cert .*bad\.pem.*cannot load the certificate"):
        tls_context(str(tmp_path / "bad.pem"), str(tmp_path / "bad.pem"))
    cert, key, _ = make_self_signed(tmp_path / "k", [])
    assert tls_context(str(cert), str(key)) is not None


@pytest.fixture
def served(tmp_path):
    session = Session(tmp_path / "session", ["red", "blue"], duration=600, speed=None, hosting=HostingOptions())
    server = LiveServer(session, "tcp://127.0.0.1:0")
    web = WebServer(server.address, lambda: server.board_json, port=0)
    stop = threading.Event()
    thread = threading.Thread(target=server.run, kwargs={"linger_s": 3600, "should_stop": stop.is_set}, daemon=True)
    thread.start()
    yield server, web
    stop.set()
    thread.join(30)
    web.shutdown()
    session.close()
    server.close()


def talk(web, messages, origin=None, read=1):
    """Open the WebSocket (with ``origin``), send ``messages``, return what comes back."""
    async def go():
        headers = {"Origin": origin} if origin else {}
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"ws://127.0.0.1:{web.port}/ws", headers=headers) as ws:
                for m in messages:
                    await ws.send_str(m if isinstance(m, str) else json.dumps(m))
                got = []
                while len(got) < read:
                    msg = await ws.receive(timeout=10)
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    got.append(json.loads(msg.data))
                return got
    return asyncio.run(go())


def test_another_sites_page_cannot_open_the_websocket(served):
    _, web = served
    with pytest.raises(aiohttp.WSServerHandshakeError) as e:
        talk(web, [], origin="http://evil.example")
    assert e.value.status == 403


def test_a_wrong_or_another_teams_token_gets_nothing_and_the_socket_closes(served):
    server, web = served
    for token, team in (("nope", "red"), (server.token_of("team", "blue"), "red")):
        got = talk(web, [{"id": "h", "op": "hello", "token": token, "args": {"team": team}},
                         {"id": "s", "op": "state", "args": {}}], read=3)
        assert len(got) == 1 and not got[0]["ok"] and got[0]["error"]["code"] in ("unauthorized", "forbidden")
    good = talk(web, [{"id": "h", "op": "hello", "token": server.token_of("team", "red"), "args": {"team": "red"}},
                      {"id": "s", "op": "state", "args": {"team": "blue"}}], read=2)
    replies = {m.get("id"): m for m in good if m["type"] == "reply"}
    assert replies["h"]["ok"] and replies["h"]["result"]["team"] == "red"
    assert not replies["s"]["ok"] and replies["s"]["error"]["code"] == "forbidden"  # red's token, blue's world


def test_a_malformed_message_is_answered_and_the_page_goes_on(served):
    server, web = served
    got = talk(web, ["not json", {"id": "h", "op": "hello", "token": server.token_of("team", "red"),
                                  "args": {"team": "red"}}], read=2)
    assert got[0]["error"]["code"] == "malformed" and got[1]["ok"]


def test_a_token_is_found_by_comparing_it_with_every_token_and_strange_ones_are_refused(served):
    server, _ = served
    token = server.token_of("team", "red")
    assert server.holder(token) == ("team", "red") and server.holder(server.token_of("facilitator")) == ("facilitator", None)
    for wrong in (token[:-1], token + "x", "é" * len(token), "", "\udcff"):
        assert server.holder(wrong) is None, wrong


def test_the_scoreboard_needs_the_viewers_token_and_a_foreign_host_name_gets_nothing(served):
    server, _ = served
    web = WebServer(server.address, lambda: server.board_json, port=0,
                    board_access=lambda token: (server.holder(token) or ("",))[0] in ("viewer", "facilitator"))
    try:
        url = f"http://127.0.0.1:{web.port}/scoreboard.json"
        def status(headers):
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
        assert status({}) == 401 and status({"Authorization": "Bearer nope"}) == 401
        assert status({"Authorization": f"Bearer {server.token_of('team', 'red')}"}) == 401  # a team's is not enough
        assert status({"Authorization": f"Bearer {server.token_of('viewer')}"}) == 200
        # a page of another site whose name resolves here (DNS rebinding) names its own host
        assert status({"Authorization": f"Bearer {server.token_of('viewer')}", "Host": f"evil.example:{web.port}"}) == 421
    finally:
        web.shutdown()


@pytest.mark.slow
def test_the_reports_are_written_as_it_ends_and_one_that_cannot_be_is_said_while_the_others_are(tmp_path):
    """Debriefs: each team's report, then the session's, in a thread; a team whose run
    directory lost its metrics is said as failed (naming the file), the other team's report
    is written, and a page asks for its own report only."""
    session = Session(tmp_path / "session", ["red", "blue"], duration=300, speed=None, hosting=HostingOptions())
    session.start()
    while session.state != "ended":
        session.step()
    session.close()
    (session.dir / "teams" / "red" / "metrics.csv").unlink()
    debriefs = Debriefs(session.dir, ["red", "blue"])
    assert debriefs.status("blue") == {"state": "not yet"} and not debriefs.busy
    debriefs.start()
    assert debriefs.wait(120)
    red, blue, whole = debriefs.status("red"), debriefs.status("blue"), debriefs.status(None)
    assert red["state"] == "failed" and "metrics.csv" in red["error"], red
    assert blue["state"] == "ready" and Path(blue["path"]).read_text().startswith("<!DOCTYPE html>")
    assert whole["state"] == "ready" and whole["path"].endswith("session.html")
    assert [p.name for p in debriefs.written if p.suffix != ".png"] == ["report.md", "report.html", "session.md",
                                                                        "session.html"]
    assert set(debriefs.failures()) == {"red"}
    assert debriefs.status("green")["state"] == "failed"  # no such team: nothing to give


@pytest.mark.slow
def test_a_page_is_told_when_its_game_day_writes_no_report_and_a_viewer_has_none(served):
    server, web = served
    hello = {"id": "h", "op": "hello", "token": server.token_of("team", "red"), "args": {"team": "red"}}
    replies = [m for m in talk(web, [hello, {"id": "r", "op": "report"}], read=4) if m.get("type") == "reply"]
    assert replies[-1]["id"] == "r" and replies[-1]["error"]["code"] == "no_report", replies
    assert web.report_answer("viewer", None)["error"]["code"] == "forbidden"


def test_a_page_gets_its_first_state_at_once_not_at_the_next_idle_push(served, monkeypatch):
    """A session that waits changes nothing: a page that says hello is pushed its state at
    once (the idle push, made ten minutes long here, would never come in this test)."""
    import orchestrator.live.web as web_module

    monkeypatch.setattr(web_module, "IDLE_PUSH_S", 600.0)
    server, web = served
    got = talk(web, [{"id": "h", "op": "hello", "token": server.token_of("team", "red"), "args": {"team": "red"}}],
               read=2)
    assert [m["type"] for m in got] == ["reply", "state"] and got[1]["result"]["team"] == "red", got
