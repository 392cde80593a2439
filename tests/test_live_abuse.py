"""The live server under abuse (issue #44), over real sockets: a real ZeroMQ server and
real aiohttp pages in threads of this process, clients in this process or, for floods and
load, in another one (so that the server is measured, not the flood's own Python).

Who a client is: every client below comes from 127.0.0.1, as teams on one machine or
through SSH tunnels do, so nothing may be capped per address alone."""
from __future__ import annotations

import asyncio
import gc
import io
import json
import select
import socket
import statistics
import subprocess
import sys
import time
import tracemalloc
import urllib.error
import urllib.request
from contextlib import contextmanager

import aiohttp
import msgpack
import pytest
import zmq
from click.testing import CliRunner

from orchestrator import budgets
from orchestrator.cli import main
from orchestrator.errors import GamedayError
from orchestrator.live import protocol as lp
from orchestrator.live.client import LiveClient, RequestFailed
from orchestrator.live.console_app import Console, run_lines
from orchestrator.live.console_view import render_feed_entry, render_status
from orchestrator.live.gameday import serve_pages
from orchestrator.live.protocol import for_terminal
from orchestrator.live.scoreboard_view import render_board
from orchestrator.hosting.fabric import is_loopback
from orchestrator.live.server import InsecureBind, check_bind, host_of
from orchestrator.live.web import check_web_bind
from tests.test_live import ROOT, client, live

pytestmark = pytest.mark.live


@contextmanager
def gameday(tmp_path, **server_kw):
    """A session served as `gameday serve` serves it: the ZeroMQ server in a thread of this
    process (tests.test_live.live) and its pages, wired as GameDay wires them."""
    with live(tmp_path, **server_kw) as (session, server):
        web = serve_pages(server, port=0)
        try:
            yield session, server, web
        finally:
            web.shutdown()


def status_of(web, path: str, headers: dict) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{web.port}{path}", headers=headers),
                                    timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def open_page(http, web, token: str, team: str | None):
    """A page's WebSocket that has said hello: (the socket, the hello's reply, or how the
    server closed it: {"closed": code, "reason": ...})."""
    ws = await http.ws_connect(f"ws://127.0.0.1:{web.port}/ws")
    await ws.send_str(json.dumps({"id": "hello", "op": "hello", "token": token, "args": {"team": team} if team else {}}))
    return ws, await reply_to(ws, "hello", closed_ok=True)


async def reply_to(ws, rid: str, closed_ok: bool = False) -> dict:
    """The reply to request ``rid`` (pushes on the way are skipped)."""
    while True:
        msg = await ws.receive(timeout=30)
        if closed_ok and msg.type == aiohttp.WSMsgType.CLOSE:
            return {"ok": False, "closed": msg.data, "reason": msg.extra}
        assert msg.type == aiohttp.WSMsgType.TEXT, (msg.type, msg.data, msg.extra)
        m = json.loads(msg.data)
        if m["type"] == "reply" and m["id"] in (rid, None):
            return m


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


# -- where it answers: addresses, not prefixes ----------------------------------------------------

@pytest.mark.parametrize("host, loopback", [
    ("127.0.0.1", True), ("127.0.0.2", True), ("127.255.3.4", True), ("::1", True), ("[::1]", True),
    ("::ffff:127.0.0.1", True), ("localhost", True), ("LocalHost", True),
    ("127.0.0.1.evil.example", False), ("127.evil.example", False), ("localhost.evil.example", False),
    ("evil.example", False), ("0.0.0.0", False), ("10.1.2.3", False), ("::", False), ("127.1", False), ("", False),
])
def test_loopback_is_read_as_an_address_never_as_a_prefix(host, loopback):
    assert is_loopback(host) is loopback


@pytest.mark.parametrize("authority, host", [
    ("127.0.0.1:7701", "127.0.0.1"), ("[::1]:7701", "::1"), ("[::1]", "::1"), ("localhost", "localhost"),
    ("127.0.0.1.evil.example:7701", "127.0.0.1.evil.example"), ("::1", "::1"), ("[::1]:x", "[::1]:x"),
])
def test_the_host_of_a_host_header(authority, host):
    assert host_of(authority) == host


def test_the_pages_answer_a_loopback_address_or_localhost_and_no_name_that_merely_starts_like_one(tmp_path):
    with gameday(tmp_path) as (_, _, web):
        port = web.port
        for host, status in [("127.0.0.1.evil.example", 421), (f"127.0.0.1.evil.example:{port}", 421),
                             (f"localhost.evil.example:{port}", 421), (f"127.evil.example:{port}", 421),
                             (f"[::1]:{port}", 200), ("[::1]", 200), ("127.0.0.2", 200), (f"127.0.0.2:{port}", 200),
                             (f"localhost:{port}", 200), (f"127.0.0.1:{port}", 200)]:
            code, body = status_of(web, "/", {"Host": host})
            assert code == status, (host, code, body)
        assert "loopback" in status_of(web, "/", {"Host": "127.0.0.1.evil.example"})[1]


def test_a_bind_name_is_loopback_only_if_every_address_it_resolves_to_is(monkeypatch):
    names = {"all-loopback.test": ["127.0.0.1", "::1"], "half.test": ["127.0.0.1", "192.0.2.7"],
             "far.test": ["192.0.2.7"]}
    real = socket.getaddrinfo

    def resolve(host, *args, **kw):
        if host in names:
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0))
                    for a in names[host]]
        if host.endswith(".test"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    for bind in ("tcp://all-loopback.test:7700", "tcp://localhost:7700", "tcp://127.0.0.2:7700", "tcp://[::1]:7700"):
        check_bind(bind, None)
    for bind in ("tcp://half.test:7700", "tcp://far.test:7700", "tcp://0.0.0.0:7700", "tcp://*:7700", "tcp://[::]:7700"):
        with pytest.raises(InsecureBind, match="is not a loopback address"):
            check_bind(bind, None)
    with pytest.raises(InsecureBind, match=r"bind tcp://127\.evil\.test:7700: cannot resolve 127\.evil\.test"):
        check_bind("tcp://127.evil.test:7700", None)
    check_bind("tcp://far.test:7700", "server.key_secret")  # encrypted: beyond loopback is allowed
    check_web_bind("all-loopback.test", tls=False)
    for host in ("half.test", "127.0.0.1.evil.test"):
        with pytest.raises(GamedayError, match=rf"web_host {host}: (not a loopback address|cannot resolve)"):
            check_web_bind(host, tls=False)


def test_serve_refuses_a_name_that_only_starts_like_loopback_before_writing_anything(tmp_path):
    for flags in (["--bind", "tcp://127.evil.example:7700"], ["--web-host", "127.0.0.1.evil.example"]):
        out = CliRunner().invoke(main, ["serve", "--team", "red", *flags, "--out", str(tmp_path / "s")])
        assert out.exit_code == 2 and "Traceback" not in out.output, out.output
        assert "evil.example" in out.output and ("cannot resolve" in out.output or "not a loopback" in out.output)
        assert not (tmp_path / "s").exists()  # no session directory, no tokens


# -- caps: per token, and apart for what has shown no valid token ----------------------------------

@pytest.mark.slow
def test_520_idle_websockets_do_not_lock_a_teams_page_out(tmp_path):
    """520 WebSockets that never say hello (the finding: every page locked out for 10 s):
    the longest waiting is closed to make room, saying why; another team's page opens and
    is answered at once, and the silent ones are closed after the hello time."""
    with gameday(tmp_path) as (_, server, web):
        async def go():
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
                idle = await asyncio.gather(*(http.ws_connect(f"ws://127.0.0.1:{web.port}/ws") for _ in range(520)))
                blue, hello = await open_page(http, web, server.token_of("team", "blue"), "blue")
                assert hello["ok"] and hello["result"]["team"] == "blue", hello
                await blue.send_str(json.dumps({"id": "s", "op": "state", "args": {}}))
                assert (await reply_to(blue, "s"))["result"]["team"] == "blue"
                assert len(web.waiting) <= budgets.LIVE_PAGES_WAITING
                closes = [await ws.receive(timeout=budgets.LIVE_HELLO_WITHIN_S + 10) for ws in idle]
                await blue.close()
                for ws in idle:
                    await ws.close()
                return closes

        closes = asyncio.run(go())
    made_room = [m for m in closes if m.data == aiohttp.WSCloseCode.TRY_AGAIN_LATER]
    assert len(made_room) >= 520 - budgets.LIVE_PAGES_WAITING
    assert f"more than {budgets.LIVE_PAGES_WAITING} pages waiting" in made_room[0].extra
    assert all(m.type == aiohttp.WSMsgType.CLOSE for m in closes)  # the rest: no hello in time
    assert any("no hello within" in (m.extra or "") for m in closes)
    assert web.counters["over_cap"] >= 520 - budgets.LIVE_PAGES_WAITING and not web.pages and not web.waiting


@pytest.mark.slow
def test_520_websockets_of_one_token_do_not_lock_another_teams_page_out(tmp_path):
    with gameday(tmp_path) as (_, server, web):
        async def go():
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
                red = await asyncio.gather(*(open_page(http, web, server.token_of("team", "red"), "red")
                                             for _ in range(520)))
                admitted = [ws for ws, hello in red if hello["ok"]]
                refused = [hello for _, hello in red if not hello["ok"]]  # its pages have their cap, or were
                # closed to make room while they were many waiting at once (each page tries again by itself)
                blue, hello = await open_page(http, web, server.token_of("team", "blue"), "blue")
                assert hello["ok"], hello
                await blue.send_str(json.dumps({"id": "s", "op": "state", "args": {}}))
                assert (await reply_to(blue, "s"))["result"]["team"] == "blue"
                await admitted[0].send_str(json.dumps({"id": "s", "op": "state", "args": {}}))
                assert (await reply_to(admitted[0], "s"))["result"]["team"] == "red"  # red's own pages go on
                await admitted.pop().close()  # a red page closed: another takes its place
                for _ in range(50):
                    again, hello_again = await open_page(http, web, server.token_of("team", "red"), "red")
                    if hello_again["ok"]:
                        break
                    await again.close()
                    await asyncio.sleep(0.05)
                assert hello_again["ok"], hello_again
                for ws in [blue, again, *admitted, *(ws for ws, _ in red)]:
                    await ws.close()
                return len(admitted) + 1, refused

        admitted, refused = asyncio.run(go())
    assert admitted == budgets.LIVE_PAGES_PER_TOKEN and len(refused) == 520 - admitted
    capped = [r for r in refused if "error" in r]
    made_room = [r for r in refused if "closed" in r]
    assert capped and {r["error"]["code"] for r in capped} == {"too_many_pages"}
    assert f"({budgets.LIVE_PAGES_PER_TOKEN})" in capped[0]["error"]["message"]
    assert all(r["closed"] == aiohttp.WSCloseCode.TRY_AGAIN_LATER for r in made_room)
    assert server.counts()["over_cap"] >= len(refused)


def test_idle_http_connections_past_the_cap_make_room_and_a_page_still_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(budgets, "LIVE_HTTP_CONNECTIONS", 40)  # (read as each connection comes)
    with gameday(tmp_path) as (_, _, web):
        held = [socket.create_connection(("127.0.0.1", web.port)) for _ in range(100)]
        try:
            assert status_of(web, "/team/red", {})[0] == 200
            open_ones, deadline = list(held), time.monotonic() + 10
            while len(open_ones) > 40 and time.monotonic() < deadline:  # closed by the server: readable, at its end
                readable, _, _ = select.select(open_ones, [], [], 0.5)
                open_ones = [s for s in open_ones if s not in readable or s.recv(1) != b""]
            closed = len(held) - len(open_ones)
        finally:
            for s in held:
                s.close()
        assert closed >= 100 - 40 and web.counters["over_cap"] >= 100 - 40


@pytest.mark.slow
def test_a_client_that_sends_nothing_or_only_part_of_a_request_is_cut_off(tmp_path, monkeypatch):
    monkeypatch.setattr(budgets, "LIVE_HTTP_IDLE_S", 1.0)
    monkeypatch.setattr(budgets, "LIVE_HELLO_WITHIN_S", 1.0)
    with gameday(tmp_path) as (_, server, web):
        silent = socket.create_connection(("127.0.0.1", web.port))
        partial = socket.create_connection(("127.0.0.1", web.port))
        partial.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        try:
            for s in (silent, partial):
                s.settimeout(15)
                assert s.recv(1) == b""  # closed by the server
        finally:
            silent.close()
            partial.close()

        async def chatter():  # malformed messages (slower than failures are limited) do not stretch the hello time
            async with aiohttp.ClientSession() as http:
                async with http.ws_connect(f"ws://127.0.0.1:{web.port}/ws") as ws:
                    async def keep_sending():
                        while not ws.closed:
                            await ws.send_str("not json")
                            await asyncio.sleep(0.3)
                    sending = asyncio.ensure_future(keep_sending())
                    try:
                        while True:
                            msg = await ws.receive(timeout=10)
                            if msg.type != aiohttp.WSMsgType.TEXT:
                                return msg
                            assert json.loads(msg.data)["error"]["code"] == "malformed"
                    finally:
                        sending.cancel()
                        await asyncio.gather(sending, return_exceptions=True)
        closed = asyncio.run(chatter())
    assert closed is not None and "no hello within 1 s" in (closed.extra or "")


# -- requests without a valid token: refused before any work ---------------------------------------

@pytest.mark.slow
def test_a_console_connection_that_never_completes_the_handshake_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(budgets, "LIVE_HANDSHAKE_S", 0.5)
    with live(tmp_path) as (_, server):
        host, port = server.sock.address.removeprefix("tcp://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as raw:  # connects, and says nothing
            raw.settimeout(10)
            t0 = time.monotonic()
            received = b""
            while chunk := raw.recv(4096):  # the server's greeting, then its close
                received += chunk
            assert time.monotonic() - t0 < 9  # closed by the server, not by our own timeout
        assert received.startswith(b"\xff")  # (ZeroMQ's greeting: it was the session's socket)
        blue = client(server, "team", "blue")  # and the session still answers
        try:
            assert blue.call("state", {})["session"]
        finally:
            blue.close()


@pytest.mark.slow
def test_a_connection_that_keeps_showing_wrong_tokens_is_refused_unread_and_valid_tokens_never_are(tmp_path):
    with live(tmp_path) as (_, server):
        wrong = LiveClient(server.address, "not-a-token")
        codes = []
        try:
            for _ in range(budgets.LIVE_FAILURE_BURST + 10):
                with pytest.raises(RequestFailed) as e:  # refused unread, the client still hears why
                    wrong.call("ping")
                codes.append(e.value.code)
        finally:
            wrong.close()
        assert codes[0] == "unauthorized" and codes[-1] == "rate_limited"
        assert budgets.LIVE_FAILURE_BURST <= codes.count("unauthorized") <= budgets.LIVE_FAILURE_BURST + 2
        assert "without a valid token" in str(e.value) and f"{budgets.LIVE_FAILURES_PER_S:g} requests a second" in str(e.value)
        limited = server.counters["rate_limited"]
        assert limited == codes.count("rate_limited")
        # a reconnection storm with valid tokens (every page of every team at once) is never refused
        ctx = zmq.Context()
        socks = []
        try:
            for i in range(300):
                s = ctx.socket(zmq.DEALER)
                s.setsockopt(zmq.LINGER, 0)
                s.connect(server.address)
                s.send(lp.request(f"p{i}", server.token_of("team", ("red", "blue")[i % 2]), "ping"))
                socks.append(s)
            for s in socks:
                assert s.poll(10_000)
                assert msgpack.unpackb(s.recv())["ok"]
        finally:
            ctx.destroy(linger=0)
        assert server.counters["rate_limited"] == limited


def flood_zeromq(address: str, seconds: float, connections: int) -> subprocess.Popen:
    """Wrong tokens, as fast as they go, from ``connections`` ZeroMQ connections of another process."""
    script = f"""
import sys, time, zmq, msgpack
ctx = zmq.Context()
socks = [ctx.socket(zmq.DEALER) for _ in range({connections})]
for s in socks:
    s.setsockopt(zmq.LINGER, 0)
    s.connect({address!r})
sent, t0 = 0, time.monotonic()
while time.monotonic() - t0 < {seconds}:
    for i, s in enumerate(socks):
        try:
            s.send(msgpack.packb({{"v": 1, "id": f"f{{sent}}", "token": f"guess-{{sent}}", "op": "ping", "args": {{}}}}),
                   zmq.NOBLOCK)
            sent += 1
        except zmq.Again:  # (its queue is full: the server reads no faster)
            pass
        while s.poll(0):
            s.recv()
print(sent)
"""
    return subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_flood_of_wrong_tokens_over_zeromq_does_not_slow_another_team_down(tmp_path):
    """Another team's round trips while another process floods the server with wrong tokens
    from 20 connections: its median stays within 20x of before (or under half a second),
    and the flood is mostly refused unread, as rate_limited."""
    with live(tmp_path, start=True, speed=60.0, duration=6 * 3600) as (_, server):
        blue = client(server, "team", "blue")

        def round_trips(n: int) -> list[float]:
            out = []
            for _ in range(n):
                t = time.perf_counter()
                blue.call("ping")
                out.append(time.perf_counter() - t)
                time.sleep(0.1)  # (as a console polls: well within a connection's rate of reads)
            return out

        flood = None
        try:
            before = round_trips(30)
            started = time.monotonic()
            flood = flood_zeromq(server.address, seconds=3.0, connections=20)
            time.sleep(0.5)
            during = []
            while flood.poll() is None:
                during += round_trips(5)
            flood_s = time.monotonic() - started
            sent = int(flood.communicate(timeout=30)[0])
            assert new_console_answered(server, within_s=10)  # once it is over
        finally:
            blue.close()
            stop_flood(flood)
    refused, let_in = server.counters["rate_limited"], server.counters["unauthorized"]
    print(f"flood: {sent} wrong tokens in {flood_s:.1f} s, {refused} refused unread, {let_in} read; another team's "
          f"round trip {median_ms(before):.2f} ms before, {median_ms(during):.2f} ms during (median)")
    assert len(during) >= 10
    assert median_ms(during) <= max(20 * median_ms(before), 500), (median_ms(before), median_ms(during))
    # (what the server read of the flood, it mostly refused unread; how much of the flood it got to
    # read in those seconds depends on the machine: a loaded CI machine read 47% of it once, the
    # rest dropped at ZeroMQ's high-water mark, which is the socket doing its job)
    assert refused >= 0.9 * (refused + let_in) and refused + let_in >= 0.2 * sent
    assert let_in <= budgets.LIVE_ALL_FAILURE_BURST + budgets.LIVE_ALL_FAILURES_PER_S * (flood_s + 1)


def stop_flood(flood: subprocess.Popen | None) -> None:
    if flood is not None and flood.poll() is None:
        flood.kill()
        flood.communicate()


def new_console_answered(server, within_s: float) -> bool:
    """Whether a console connecting now is answered within ``within_s`` (while the last of a
    flood from many connections is read, a new connection may be refused: it tries again)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        console = LiveClient(server.address, server.token_of("team", "red"))
        try:
            return console.call("ping")["pong"] is True
        except RequestFailed as e:
            assert e.code == "rate_limited", e
            time.sleep(0.2)
        finally:
            console.close()
    return False


def flood_pages(port: int, seconds: float, concurrency: int) -> subprocess.Popen:
    """Wrong tokens from another process: pages saying hello with them, and scoreboard reads."""
    script = f"""
import asyncio, json, time, aiohttp
async def one(http, k):
    try:
        if k % 2:
            async with http.get("http://127.0.0.1:{port}/scoreboard.json", headers={{"Authorization": f"Bearer g{{k}}"}}) as r:
                await r.read()
        else:
            async with http.ws_connect("ws://127.0.0.1:{port}/ws") as ws:
                await ws.send_str(json.dumps({{"id": "h", "op": "hello", "token": f"g{{k}}", "args": {{}}}}))
                await ws.receive(timeout=10)
    except Exception:
        pass
async def worker(http, w, t0):
    k = w
    while time.monotonic() - t0 < {seconds}:
        await one(http, k)
        k += {concurrency}
    return k // {concurrency}
async def main():
    t0 = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        print(sum(await asyncio.gather(*(worker(http, w, t0) for w in range({concurrency})))))
asyncio.run(main())
"""
    return subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_flood_of_wrong_tokens_on_the_pages_does_not_slow_another_teams_page_down(tmp_path):
    """The same over the web: another process says hello with wrong tokens and reads the
    scoreboard with them; another team's page keeps its round trip, the flood is mostly
    refused before any work (HTTP 429), and no wrong token reaches the session."""
    with gameday(tmp_path, start=True, speed=60.0, duration=6 * 3600) as (_, server, web):
        async def go():
            async with aiohttp.ClientSession() as http:
                blue, hello = await open_page(http, web, server.token_of("team", "blue"), "blue")
                assert hello["ok"]
                n = 0

                async def round_trips(k: int) -> list[float]:
                    nonlocal n
                    out = []
                    for _ in range(k):
                        n += 1
                        t = time.perf_counter()
                        await blue.send_str(json.dumps({"id": f"p{n}", "op": "ping", "args": {}}))
                        assert (await reply_to(blue, f"p{n}"))["ok"]
                        out.append(time.perf_counter() - t)
                        await asyncio.sleep(0.1)  # (within a connection's rate of reads)
                    return out

                before = await round_trips(30)
                flood = flood_pages(web.port, seconds=3.0, concurrency=30)
                try:
                    await asyncio.sleep(0.5)
                    during = []
                    while flood.poll() is None:
                        during += await round_trips(5)
                    await blue.close()
                    return before, during, int(flood.communicate(timeout=30)[0])
                finally:
                    stop_flood(flood)

        before, during, tries = asyncio.run(go())
    refused, let_in = web.counters["rate_limited"], web.counters["unauthorized"]
    print(f"flood: {tries} wrong tokens, {refused} refused unread, {let_in} read; another team's page round trip "
          f"{median_ms(before):.2f} ms before, {median_ms(during):.2f} ms during (median)")
    assert len(during) >= 10
    assert median_ms(during) <= max(20 * median_ms(before), 500), (median_ms(before), median_ms(during))
    assert refused >= 0.9 * (refused + let_in) and refused + let_in >= 0.5 * tries
    assert server.counters["unauthorized"] == 0  # no wrong token got as far as a ZeroMQ socket
    assert server.counts()["rate_limited"] >= refused  # (`gameday facilitate status` shows the pages' refusals)


# -- nothing stays behind a connection -------------------------------------------------------------

LOAD = """
import asyncio, json, sys, aiohttp
port, token, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
async def page(http):  # an HTTP connection: the team's page
    async with http.get(f"http://127.0.0.1:{port}/team/red") as r:
        assert r.status == 200, r.status
        await r.read()
async def socket(http):  # a WebSocket: hello, and one request through the session
    async with http.ws_connect(f"ws://127.0.0.1:{port}/ws") as ws:
        await ws.send_str(json.dumps({"id": "h", "op": "hello", "token": token, "args": {"team": "red"}}))
        await ws.send_str(json.dumps({"id": "s", "op": "state", "args": {}}))
        while True:
            m = json.loads((await ws.receive(timeout=30)).data)
            assert m.get("ok", True), m
            if m.get("id") == "s":
                return
async def worker(http, n):
    for _ in range(n):
        await page(http)
        await socket(http)
async def main():
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True, limit=0)) as http:
        await asyncio.gather(*(worker(http, rounds // 10) for _ in range(10)))
asyncio.run(main())
print(2 * 10 * (rounds // 10))
"""


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


@pytest.mark.slow
def test_2000_connections_opened_and_closed_leave_nothing_behind(tmp_path):
    """2,000 connections from another process, half HTTP (a page loaded on a connection of
    its own), half WebSockets (each saying hello and asking the session through a ZeroMQ
    socket of its own): the memory this process's Python holds comes back to within 2 MB
    of its level after a warm-up of 500 (a kilobyte kept per connection would pass it), and no dict or set of either server keeps an
    entry for a connection that left."""
    with gameday(tmp_path, forget_s=1.0) as (_, server, web):
        def load(rounds: int) -> int:
            out = subprocess.run([sys.executable, "-c", LOAD, str(web.port), server.token_of("team", "red"), str(rounds)],
                                 cwd=ROOT, capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, out.stderr[-3000:]
            return int(out.stdout)

        def settled() -> tuple[float, float]:
            deadline = time.monotonic() + 30
            while (server.connections or web.pages or web.runner.server.connections) and time.monotonic() < deadline:
                time.sleep(0.2)  # (the session forgets a silent connection after forget_s)
            gc.collect()
            return tracemalloc.get_traced_memory()[0] / 2**20, rss_mb()

        tracemalloc.start()
        try:
            assert load(250) == 500
            warm, warm_rss = settled()
            assert load(1000) == 2000
            held, held_rss = settled()
        finally:
            tracemalloc.stop()
        left = {"session's connections": server.connections, "session's failures": server.failures.sources,
                "pages": web.pages, "pages waiting": web.waiting, "pages by token": web.by_token,
                "busy HTTP connections": web.busy, "pages being closed": web.closing,
                "pages' failures": web.failures.sources, "HTTP connections": web.runner.server.connections}
        per_token = {"commands' buckets": server.buckets, "answers": server.answered, "board buckets": web.board_buckets}
    print(f"Python memory {warm:.2f} MB after the warm-up, {held:.2f} MB after 2,000 more connections; "
          f"RSS {warm_rss:.1f} -> {held_rss:.1f} MB")
    assert {name: len(v) for name, v in left.items() if v} == {}
    assert all(len(v) <= len(server.tokens) for v in per_token.values())
    assert held - warm < 2.0, (warm, held)
    assert held_rss - warm_rss < 32.0, (warm_rss, held_rss)  # (the allocator keeps what it had; no leak of sockets)


# -- what reaches a terminal ---------------------------------------------------------------------------

FORGED = "all good\nFACILITATOR 09:00: all clear, stop everything"
EVIL = "\x1b]0;owned\x07\x1b[2J\x9b31mmallory" + FORGED


def no_control_characters(text: str) -> bool:
    return not any(ord(c) < 0x20 and c not in "\n" or 0x7F <= ord(c) < 0xA0 for c in text)


def test_for_terminal_escapes_every_control_character_once():
    shown = for_terminal(EVIL)
    assert no_control_characters(shown) and "\n" not in shown
    assert shown.startswith("\\x1b]0;owned\\x07\\x1b[2J\\x9b31mmalloryall good\\nFACILITATOR")
    assert for_terminal(shown) == shown  # escaping twice changes nothing more
    assert for_terminal("a\nb\tc\x1b", lines=True) == "a\nb\tc\\x1b"
    assert for_terminal("naïve — ✓ ▁▂▃") == "naïve — ✓ ▁▂▃"  # only control characters


def test_names_and_messages_a_client_sends_reach_the_other_consoles_escaped(tmp_path):
    """A team member goes by a name full of escape sequences and posts them; the facilitator
    sends some too: a teammate's console (line mode, as scripted) shows them escaped, with no
    line of their own; the scoreboard, and an error naming them, too."""
    with live(tmp_path, start=True, speed=60.0, duration=3600) as (session, server):
        mallory, fac = client(server, "team", "red"), client(server, "facilitator")
        alice = client(server, "team", "red")
        try:
            mallory.call("hello", {"team": "red", "role": EVIL})
            # (a parameter with control characters is refused: it may hold newlines, so it can forge a line)
            mallory.call("act", {"action": "post_status_update", "params": {"message": FORGED}})
            fac.call("message", {"text": EVIL})
            with pytest.raises(RequestFailed) as e:
                mallory.call("state", {"team": EVIL})
            assert no_control_characters(str(e.value)) and "\\x1b" in str(e.value)
            console = Console(alice, "red", "alice")
            deadline = time.monotonic() + 60
            while not any("requested by" in f["text"] for f in console.refresh(retries=None) + console.state["feed"]):
                assert time.monotonic() < deadline, console.state["feed"]
                time.sleep(0.1)
            out = io.StringIO()
            console.next = 0
            run_lines(console, io.StringIO("catalogue\n"), out)
            feed = [render_feed_entry(f) for f in console.state["feed"]]
        finally:
            for c in (mallory, fac, alice):
                c.close()
    shown = out.getvalue() + "\n".join(feed) + render_status(console.state)
    feed_texts = [f["text"] for f in session.teams["red"].view.feed]  # (kept as it was said)
    assert any(EVIL in t for t in feed_texts) and any(FORGED in t for t in feed_texts)
    assert no_control_characters(shown) and "\\x1b]0;owned" in shown
    assert not any(line.startswith("FACILITATOR 09:00: all clear") for line in shown.splitlines())
    board = render_board({"session": {"playbook": EVIL, "state": EVIL}, "teams": [{"team": EVIL, "rank": 1}]})
    assert no_control_characters(board) and len(board.splitlines()) == 3
