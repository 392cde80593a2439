"""The browser side of a live game day, served by ``gameday serve`` beside its ZeroMQ port:
the teams' consoles (``/team/NAME#TOKEN``) and the projector's scoreboard (``/``).

A page is a console like the terminal one and goes through the same door: each open
page gets its own ZeroMQ DEALER to the session's ROUTER (``fabric.AsyncRequestClient``),
and its requests are the live protocol's, with its token. So the server's guarantees
hold for pages as they do for consoles, without a second implementation: a token
grants one team's world and nothing else, a command id runs once however often it is
resent, requests are rate-limited per token. The page and this gateway talk over a
WebSocket (aiohttp); the gateway pushes the team's state whenever the session has
stepped (``changed``), asking only for the feed entries and chart points the page has
not had, so a page that reconnects says where it was and loses nothing.

The token travels in the URL's fragment, which browsers never send to a server nor put
in a referrer, and then inside the WebSocket. Pages are static files of this package,
with a strict Content-Security-Policy (nothing inline, nothing from elsewhere: game
days run on closed networks, so the charting library, uPlot, is served from here too).
A bind that is not loopback needs TLS.
"""
from __future__ import annotations

import asyncio
import errno
import itertools
import json
import secrets
import ssl
import threading
from pathlib import Path

from aiohttp import WSMsgType, web

from orchestrator.errors import GamedayError
from orchestrator.hosting.fabric import AsyncRequestClient
from orchestrator.live import protocol as lp

STATIC = Path(__file__).parent / "static"
#: the files a page may load; nothing else under STATIC is served
STATIC_FILES = {"team.js": "text/javascript", "scoreboard.js": "text/javascript", "common.js": "text/javascript",
                "facilitator.js": "text/javascript",
                "gameday.css": "text/css", "uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}
PAGES = {"team": "team.html", "scoreboard": "scoreboard.html", "facilitator": "facilitator.html"}

# Only this server's own files and WebSocket; no inline script or style, no frames, no forms posted anywhere.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store", "X-Frame-Options": "DENY", "Cross-Origin-Opener-Policy": "same-origin"}

REPLY_TIMEOUT_S = 10.0  # a session stepping many worlds can be slow to answer; the page says so meanwhile
MIN_PUSH_INTERVAL_S = 0.25  # at most four state pushes a second per page, whatever the speed
IDLE_PUSH_S = 1.0  # pushed at least this often: ages grow and the session's state changes without a tick
MAX_MESSAGE = 64 * 1024  # from a page; as the live protocol's frames
#: role -> (the request whose answer is pushed to its pages, the pushed message's type)
WATCHED = {"team": ("state", "state"), "facilitator": ("overview", "overview")}


class InsecureWebBind(GamedayError):
    """A non-loopback web bind without TLS."""


def check_web_bind(host: str, tls: bool) -> None:
    from orchestrator.live.server import is_loopback

    if not is_loopback(host) and not tls:
        raise InsecureWebBind(
            f"--web-host {host}: not a loopback address, and without TLS anyone on the network could read the pages "
            "and their tokens. Pass --tls-cert and --tls-key (`gameday keys DIR --tls` makes a self-signed pair), "
            "or serve on 127.0.0.1.")


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise GamedayError(f"--tls-cert {cert} --tls-key {key}: cannot load the certificate and its key ({e}); "
                           "expected PEM files such as those `gameday keys DIR --tls` writes") from None
    return ctx


class WebServer:
    """The pages and their WebSocket gateway, on an asyncio loop in a daemon thread.
    ``endpoint``: the session's ZeroMQ address; ``board``: the latest scoreboard as JSON."""

    def __init__(self, endpoint: str, board, host: str = "127.0.0.1", port: int = 7701,
                 tls: ssl.SSLContext | None = None, server_public: bytes | None = None):
        check_web_bind(host, tls is not None)
        self.endpoint, self.board, self.host, self.tls, self.server_public = endpoint, board, host, tls, server_public
        self.pages: set[_Page] = set()
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, args=(port,), name="gameday-web", daemon=True)
        self._thread.start()
        self._started.wait(30)
        if self._error is not None:
            raise self._error
        scheme = "https" if tls else "http"
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        self.url = f"{scheme}://{shown}:{self.port}/"

    def link(self, team: str, token: str) -> str:
        """A team's join link: the token rides in the fragment, never sent to a server."""
        return f"{self.url}team/{team}#{token}"

    def facilitator_link(self, token: str) -> str:
        return f"{self.url}facilitator#{token}"

    # -- the loop's thread ------------------------------------------------------------------------
    def _serve(self, port: int) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=MAX_MESSAGE, middlewares=[_add_headers])
        app.router.add_get("/", self._scoreboard_page)
        app.router.add_get("/scoreboard.json", self._board)
        app.router.add_get("/team/{team}", self._team_page)
        app.router.add_get("/facilitator", self._facilitator_page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/ws", self._socket)
        self.runner = web.AppRunner(app, access_log=None)  # URLs hold no tokens, but nobody needs a line per poll
        try:
            self.loop.run_until_complete(self.runner.setup())
            site = web.TCPSite(self.runner, self.host, port, ssl_context=self.tls)
            self.loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]
        except OSError as e:
            hint = "; pass another --web-port (0 picks a free one) or --no-web" if e.errno == errno.EADDRINUSE else ""
            self._error = GamedayError(f"cannot serve the pages on {self.host}:{port}: {e.strerror or e}{hint}")
            self._started.set()
            return
        self.zmq = AsyncRequestClient.context()
        self._started.set()
        self.loop.run_forever()

    async def _scoreboard_page(self, request):
        return _file(PAGES["scoreboard"], "text/html; charset=utf-8")

    async def _team_page(self, request):
        return _file(PAGES["team"], "text/html; charset=utf-8")

    async def _facilitator_page(self, request):
        return _file(PAGES["facilitator"], "text/html; charset=utf-8")

    async def _static(self, request):
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            return web.Response(status=404, text="not found\n")
        return _file(name, STATIC_FILES[name])

    async def _board(self, request):
        try:
            return web.Response(body=self.board().encode(), content_type="application/json")
        except Exception:  # noqa: BLE001 - the page shows "connection lost" and retries
            return web.Response(status=503, text="scoreboard unavailable\n")

    async def _socket(self, request):
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":  # a page of another site
            return web.Response(status=403, text="a page of another site cannot talk to this server\n")
        ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE, heartbeat=10.0)
        await ws.prepare(request)
        page = _Page(self, ws)
        self.pages.add(page)
        try:
            await page.serve()
        finally:
            self.pages.discard(page)
            page.close()
        return ws

    # -- from the session's thread ----------------------------------------------------------------
    def changed(self) -> None:
        """The session stepped or changed state: every page gets its news soon."""
        if not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self._wake)
            except RuntimeError:  # the loop is shutting down
                pass

    def _wake(self) -> None:
        for page in self.pages:
            page.wake.set()

    def shutdown(self) -> None:
        async def stop():
            for page in list(self.pages):
                await page.ws.close()
            await self.runner.cleanup()

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        self.zmq.destroy(linger=0)


class _Page:
    """One open page: its token, its DEALER to the session, and what it has already had."""

    _ids = itertools.count()

    def __init__(self, web_server: WebServer, ws):
        self.web, self.ws = web_server, ws
        self.client = AsyncRequestClient(web_server.zmq, web_server.endpoint, REPLY_TIMEOUT_S, web_server.server_public)
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.token: str | None = None
        self.since = 0
        self.series_since = 0
        self.nonce = secrets.token_hex(4)

    async def call(self, rid: str, op: str, args: dict) -> dict:
        async with self.lock:
            raw = await self.client.call(lp.request(rid, self.token, op, args))
        if raw is None:
            return {"id": rid, "ok": False, "error": {"code": "unreachable", "message": "the session did not answer"}}
        return lp.parse_reply(raw)

    async def send(self, obj: dict) -> None:
        if not self.ws.closed:
            await self.ws.send_str(json.dumps(obj))

    async def serve(self) -> None:
        watcher = None
        try:
            async for msg in self.ws:
                if msg.type != WSMsgType.TEXT:
                    break
                try:
                    req = json.loads(msg.data)
                    rid, op, args = str(req["id"]), str(req["op"]), req.get("args") or {}
                    if not isinstance(args, dict):
                        raise TypeError("args")
                except (ValueError, KeyError, TypeError):
                    await self.send({"type": "reply", "id": None, "ok": False,
                                     "error": {"code": "malformed", "message": "expected {id, op, args}"}})
                    continue
                if self.token is None:  # the first message says who the page is, and where its feed was
                    if op != "hello" or not isinstance(req.get("token"), str):
                        await self.send({"type": "reply", "id": rid, "ok": False,
                                         "error": {"code": "unauthorized", "message": "say hello with a token first"}})
                        break
                    self.token = req["token"]
                    self.since, self.series_since = _count(req.get("since")), _count(req.get("series_since"))
                    hello = {"role": str(args.get("by") or "")[:lp.MAX_TEXT] or "page"}
                    if isinstance(args.get("team"), str) and args["team"]:
                        hello["team"] = args["team"][:lp.MAX_TEXT]  # a team's page: the server refuses another team's token
                    reply = await self.call(rid, "hello", hello)
                    await self.send({"type": "reply", **reply})
                    if not reply["ok"]:
                        break  # a wrong token sees nothing, and gets nothing more
                    watched = WATCHED.get(reply["result"]["role"])
                    if watched is not None:
                        watcher = asyncio.ensure_future(self.watch(*watched))
                    continue
                reply = await self.call(rid, op, args)
                await self.send({"type": "reply", **reply})
                self.wake.set()  # an action shows at once as requested
        finally:
            if watcher is not None:
                watcher.cancel()

    async def watch(self, op: str, kind: str) -> None:
        """Push what the page shows (``op``'s result, as a ``kind`` message) whenever the
        session changed (at most every MIN_PUSH_INTERVAL_S), and at least every IDLE_PUSH_S.
        A team's page is sent only the feed entries and chart points it has not had."""
        while not self.ws.closed:
            try:
                await asyncio.wait_for(self.wake.wait(), IDLE_PUSH_S)
            except asyncio.TimeoutError:
                pass
            self.wake.clear()
            args = {"since": self.since, "series_since": self.series_since} if op == "state" else {}
            reply = await self.call(f"watch-{self.nonce}-{next(self._ids)}", op, args)
            if reply["ok"]:
                result = reply["result"]
                if op == "state":
                    self.since, self.series_since = result["feed_next"], result["series_next"]
                await self.send({"type": kind, "result": result})
            await asyncio.sleep(MIN_PUSH_INTERVAL_S)

    def close(self) -> None:
        self.client.close()


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _file(name: str, ctype: str):
    return web.Response(body=(STATIC / name).read_bytes(), headers={"Content-Type": ctype})


@web.middleware
async def _add_headers(request, handler):
    try:
        response = await handler(request)
    except web.HTTPException as e:  # the router's own 404 and 405
        e.headers.update(HEADERS)
        raise
    if not response.prepared:  # a WebSocket has sent its headers already
        response.headers.update(HEADERS)
    return response
