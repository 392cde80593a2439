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
import contextvars
import errno
import itertools
import json
import logging
import secrets
import socket
import ssl
import threading
from pathlib import Path

from aiohttp import WSMsgType, web

from orchestrator.errors import GamedayError, setting
from orchestrator.hosting.fabric import AsyncRequestClient
from orchestrator.live import protocol as lp
from orchestrator.live.server import is_loopback

log = logging.getLogger("gameday.serve")


def _not_a_hang_up(record: logging.LogRecord) -> bool:
    """A tab closed while it was being answered is not an error worth a traceback."""
    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, (ConnectionError, asyncio.CancelledError))


logging.getLogger("aiohttp.server").addFilter(_not_a_hang_up)
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
CALL_TRIES = 6  # a request unanswered for a minute is reported as such (the page may send it again)
HELLO_WITHIN_S = 10.0  # a connection that does not say who it is by then is closed
MAX_PAGES = 500  # open at once; past that a page is refused (each holds a ZeroMQ socket)
IDLE_PUSH_S = 1.0  # pushed at least this often: ages grow and the session's state changes without a tick
MAX_MESSAGE = 64 * 1024  # from a page; as the live protocol's frames
#: role -> (the request whose answer is pushed to its pages, the pushed message's type)
WATCHED = {"team": ("state", "state"), "facilitator": ("overview", "overview")}


class InsecureWebBind(GamedayError):
    """A non-loopback web bind without TLS."""


def check_web_bind(host: str, tls: bool) -> None:
    if not is_loopback(host) and not tls:
        raise InsecureWebBind(
            f"{setting('web_host')} {host}: not a loopback address, and without TLS anyone on the network could read "
            f"the pages and their tokens. Pass {setting('tls_cert')} and {setting('tls_key')} (`gameday keys DIR --tls` "
            "makes a self-signed pair), "
            "or serve on 127.0.0.1.")


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise GamedayError(f"{setting('tls_cert')} {cert} {setting('tls_key')} {key}: cannot load the certificate and its key ({e}); "
                           "expected PEM files such as those `gameday keys DIR --tls` writes") from None
    return ctx


class WebServer:
    """The pages and their WebSocket gateway, on an asyncio loop in a daemon thread.
    ``endpoint``: the session's ZeroMQ address; ``board``: the latest scoreboard as JSON."""

    def __init__(self, endpoint: str, board, host: str = "127.0.0.1", port: int = 7701,
                 tls: ssl.SSLContext | None = None, server_public: bytes | None = None, board_access=None):
        """``board_access(token)``: whether a token may read the board (None: anyone may)."""
        check_web_bind(host, tls is not None)
        self.endpoint, self.board, self.host, self.tls, self.server_public = endpoint, board, host, tls, server_public
        self.board_access = board_access
        self.pages: set[_Page] = set()
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        # (in this thread's context: its errors name the settings as the caller speaks them, errors.setting)
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._serve, port),
                                        name="gameday-web", daemon=True)
        self._thread.start()
        if not self._started.wait(30):
            raise GamedayError(f"the pages' server on {host}:{port} did not start within 30 s")
        if self._error is not None:
            raise self._error
        scheme = "https" if tls else "http"
        if host in ("0.0.0.0", "::", "[::]", "*"):  # every interface: the links name this machine
            host = socket.getfqdn()
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        self.url = f"{scheme}://{shown}:{self.port}/"

    def link(self, team: str, token: str) -> str:
        """A team's join link: the token rides in the fragment, never sent to a server."""
        return f"{self.url}team/{team}#{token}"

    def facilitator_link(self, token: str) -> str:
        return f"{self.url}facilitator#{token}"

    def scoreboard_link(self, token: str) -> str:
        return f"{self.url}#{token}"

    # -- the loop's thread ------------------------------------------------------------------------
    def _serve(self, port: int) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=MAX_MESSAGE, middlewares=[_add_headers, self._check_host])
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
            hint = f"; pass another {setting('web_port')} (0 picks a free one), or serve no pages ({setting('web')})" if e.errno == errno.EADDRINUSE else ""
            self._error = GamedayError(f"cannot serve the pages on {self.host}:{port}: {e.strerror or e}{hint}")
            self._started.set()
            return
        except Exception as e:  # noqa: BLE001 - said to the caller, not lost in this thread
            self._error = GamedayError(f"cannot serve the pages on {self.host}:{port}: {type(e).__name__}: {e}")
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

    @web.middleware
    async def _check_host(self, request, handler):
        """Over plain HTTP (loopback only) a request must name a loopback host: a page of
        another site whose name was made to resolve to 127.0.0.1 (DNS rebinding) names its own."""
        if self.tls is None and not is_loopback((request.url.host or "").strip("[]")):
            return web.Response(status=421, text="this server answers only to a loopback name\n")
        return await handler(request)

    async def _board(self, request):
        if self.board_access is not None:
            given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if not given or not self.board_access(given):
                return web.Response(status=401, text="the scoreboard needs the viewer's token\n")
        try:
            return web.Response(body=self.board().encode(), content_type="application/json")
        except Exception:  # noqa: BLE001 - the page shows "connection lost" and retries
            return web.Response(status=503, text="scoreboard unavailable\n")

    async def _socket(self, request):
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":  # a page of another site
            return web.Response(status=403, text="a page of another site cannot talk to this server\n")
        if len(self.pages) >= MAX_PAGES:
            return web.Response(status=503, text="too many pages are open on this session\n")
        ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE, heartbeat=10.0)
        await ws.prepare(request)
        page = _Page(self, ws)
        self.pages.add(page)
        try:
            await page.serve()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the tab went away, or the server is shutting down
        except Exception as e:  # noqa: BLE001 - a bug in one page's gateway must not take the others down
            log.error("gameday serve: a page's connection failed: %s: %s", type(e).__name__, e)
        finally:
            self.pages.discard(page)
            await page.close()
        return ws

    # -- from the session's thread ----------------------------------------------------------------
    def changed(self) -> None:
        """The session stepped or changed state: every page gets its news soon."""
        try:
            self.loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed or shutting down
            pass

    def _wake(self) -> None:
        for page in self.pages:
            page.wake.set()

    def shutdown(self) -> None:
        """Close every page and stop serving; frees the port."""
        async def stop():
            pages = list(self.pages)
            await asyncio.wait_for(asyncio.gather(*(p.ws.close() for p in pages), return_exceptions=True), 5)
            await asyncio.wait_for(self.runner.cleanup(), 5)

        if self.loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(stop(), self.loop).result(12)
            except Exception as e:  # noqa: BLE001 - shutting down anyway
                log.warning("gameday serve: the pages did not close in time (%s)", type(e).__name__)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
        if not self._thread.is_alive():
            self.zmq.destroy(linger=0)
            self.loop.close()


class _Page:
    """One open page: its token, its DEALER to the session (opened once the page has said
    hello), and what it has already had."""

    _ids = itertools.count()

    def __init__(self, web_server: WebServer, ws):
        self.web, self.ws = web_server, ws
        self.client: AsyncRequestClient | None = None
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.token: str | None = None
        self.since = 0
        self.series_since = 0
        self.nonce = secrets.token_hex(4)
        self.watcher: asyncio.Future | None = None

    async def call(self, rid: str, op: str, args: dict) -> dict:
        """The session's answer; asked again with the same id while it does not come (the
        server runs an id once), as long as the page is there."""
        try:
            frame = lp.request(rid, self.token, op, args)
        except (ValueError, TypeError, OverflowError) as e:  # what msgpack cannot carry (an integer over 64 bits)
            return {"id": rid, "ok": False, "error": {"code": "malformed", "message": f"cannot send that: {e}"}}
        async with self.lock:
            for _ in range(CALL_TRIES):
                raw = await self.client.call(frame)
                if raw is not None or self.ws.closed:
                    break
        if raw is None:
            return {"id": rid, "ok": False, "error": {"code": "unreachable", "message": "the session does not answer"}}
        return lp.parse_reply(raw)

    async def send(self, obj: dict) -> None:
        if not self.ws.closed:
            await self.ws.send_str(json.dumps(obj))

    async def next_request(self, timeout: float | None) -> tuple | None:
        """(id, op, args, the message) of the page's next request; None when it is gone."""
        while True:
            msg = await (self.ws.receive(timeout=timeout) if timeout else self.ws.receive())
            if msg.type != WSMsgType.TEXT:
                return None
            try:
                req = json.loads(msg.data)
                rid, op, args = str(req["id"])[:lp.MAX_ID], str(req["op"]), req.get("args") or {}
                if not isinstance(args, dict):
                    raise TypeError("args")
                return rid, op, args, req
            except (ValueError, KeyError, TypeError, RecursionError):
                await self.send({"type": "reply", "id": None, "ok": False,
                                 "error": {"code": "malformed", "message": "expected {id, op, args}"}})

    async def serve(self) -> None:
        try:
            first = await self.next_request(HELLO_WITHIN_S)
        except asyncio.TimeoutError:
            return  # said nothing: a page says hello at once
        if first is None:
            return
        rid, op, args, req = first
        if op != "hello" or not isinstance(req.get("token"), str):
            await self.send({"type": "reply", "id": rid, "ok": False,
                             "error": {"code": "unauthorized", "message": "say hello with a token first"}})
            return
        # the first message says who the page is, and where its feed was
        self.token = req["token"][:lp.MAX_TEXT]
        self.since, self.series_since = _count(req.get("since")), _count(req.get("series_since"))
        self.client = AsyncRequestClient(self.web.zmq, self.web.endpoint, REPLY_TIMEOUT_S, self.web.server_public)
        hello = {"role": str(args.get("by") or "")[:lp.MAX_TEXT] or "page"}
        if isinstance(args.get("team"), str) and args["team"]:
            hello["team"] = args["team"][:lp.MAX_TEXT]  # a team's page: the server refuses another team's token
        reply = await self.call(rid, "hello", hello)
        await self.send({"type": "reply", **reply})
        if not reply["ok"]:
            return  # a wrong token sees nothing, and gets nothing more
        watched = WATCHED.get(reply["result"]["role"])
        if watched is not None:
            self.watcher = asyncio.ensure_future(self.watch(*watched))
        while (request := await self.next_request(None)) is not None:
            rid, op, args, _ = request
            await self.send({"type": "reply", **await self.call(rid, op, args)})
            self.wake.set()  # an action shows at once as requested

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
                try:
                    await self.send({"type": kind, "result": result})
                except ConnectionError:
                    return
            await asyncio.sleep(MIN_PUSH_INTERVAL_S)

    async def close(self) -> None:
        if self.watcher is not None:
            self.watcher.cancel()
            await asyncio.gather(self.watcher, return_exceptions=True)
        if self.client is not None:
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
