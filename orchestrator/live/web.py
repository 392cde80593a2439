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
in a referrer, and then inside the WebSocket.

Who a client is: on loopback every page comes from 127.0.0.1, so an address names no one
and a cap per address would lock teams out. A page that has shown a valid token is
counted against its token (``LIVE_PAGES_PER_TOKEN``); one that has not is among the
waiting, all clients together, where the one waiting longest is closed to make room and
a new one is never refused (``LIVE_PAGES_WAITING``, ``LIVE_HELLO_WITHIN_S``). So is an
idle HTTP connection (``LIVE_HTTP_CONNECTIONS``). A wrong token is checked here, before
the page gets a ZeroMQ socket, and a source that keeps showing wrong ones is refused
before any work (``limits.FailureGate``). Pages are static files of this package,
with a strict Content-Security-Policy (nothing inline, nothing from elsewhere: game
days run on closed networks, so the charting library, uPlot, is served from here too).
A bind that is not loopback needs TLS.
"""
from __future__ import annotations

import asyncio
import contextvars
import errno
import functools
import itertools
import json
import logging
import secrets
import socket
import ssl
import threading
from collections import OrderedDict
from pathlib import Path

from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError

from orchestrator import budgets
from orchestrator.errors import GamedayError, printable, setting
from orchestrator.hosting.fabric import AsyncRequestClient, is_loopback
from orchestrator.live import protocol as lp
from orchestrator.live.debrief import READY
from orchestrator.live.limits import FailureGate, TokenBucket
from orchestrator.live.server import binds_loopback, host_of

log = logging.getLogger("gameday.serve")


def _not_a_hang_up(record: logging.LogRecord) -> bool:
    """A tab closed while it was being answered is not an error worth a traceback."""
    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, (ConnectionError, asyncio.CancelledError))


logging.getLogger("aiohttp.server").addFilter(_not_a_hang_up)


class _HttpLog(logging.LoggerAdapter):
    """aiohttp's log, as one pages' server gives it. A request that is not HTTP as it should
    be (no Host, a control character in a header, TLS on the plain port) is the client's
    doing: aiohttp answers it 400, and here it is counted (``malformed``) and said in one
    line, LIVE_HTTP_NOTICE_BURST at once and then one per LIVE_HTTP_NOTICE_EVERY_S, each
    saying how many it stands for; never a traceback each, which a flood would scroll over
    the facilitator's terminal. Every other error is logged as aiohttp logs it."""

    def __init__(self, counters: dict):
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self.counters = counters
        self.notices = TokenBucket(1 / budgets.LIVE_HTTP_NOTICE_EVERY_S, budgets.LIVE_HTTP_NOTICE_BURST)
        self.unsaid = 0  # malformed requests since the last notice

    def log(self, level, msg, *args, exc_info=None, **kwargs):
        if not isinstance(exc_info, HttpProcessingError):
            return super().log(level, msg, *args, exc_info=exc_info, **kwargs)
        self.counters["malformed"] += 1
        self.unsaid += 1
        if self.notices.take():
            what = printable(" ".join(str(exc_info.message or type(exc_info).__name__).split()), 200, lines=False)
            more = f" (and {self.unsaid - 1} more since the last notice)" if self.unsaid > 1 else ""
            log.warning("gameday serve: a malformed HTTP request was answered 400: %s%s", what, more)
            self.unsaid = 0

    def summary(self) -> None:
        """Say the malformed requests no notice has said yet."""
        if self.unsaid:
            log.warning("gameday serve: %d more malformed HTTP requests were answered 400 since the last notice",
                        self.unsaid)
            self.unsaid = 0


STATIC = Path(__file__).parent / "static"
#: the files a page may load; nothing else under STATIC is served
STATIC_FILES = {"team.js": "text/javascript", "scoreboard.js": "text/javascript", "common.js": "text/javascript",
                "facilitator.js": "text/javascript",
                "gameday.css": "text/css", "uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}
PAGES = {"team": "team.html", "scoreboard": "scoreboard.html", "facilitator": "facilitator.html"}

# Only this server's own files and WebSocket; no inline script or style, no frames, no forms posted anywhere.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
# An after-action report is one self-contained file: its own styles and inline charts, and no script.
REPORT_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; "
              "frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store", "X-Frame-Options": "DENY", "Cross-Origin-Opener-Policy": "same-origin"}

REPLY_TIMEOUT_S = 10.0  # a session stepping many worlds can be slow to answer; the page says so meanwhile
MIN_PUSH_INTERVAL_S = 0.25  # at most four state pushes a second per page, whatever the speed
CALL_TRIES = 6  # a request unanswered for a minute is reported as such (the page may send it again)
IDLE_PUSH_S = 1.0  # pushed at least this often: ages grow and the session's state changes without a tick
MAX_MESSAGE = 64 * 1024  # from a page; as the live protocol's frames
#: role -> (the request whose answer is pushed to its pages, the pushed message's type)
WATCHED = {"team": ("state", "state"), "facilitator": ("overview", "overview")}


class InsecureWebBind(GamedayError):
    """A non-loopback web bind without TLS."""


def check_web_bind(host: str, tls: bool) -> None:
    """Refuses, before anything is built, pages served beyond loopback without TLS."""
    if not tls and not binds_loopback(host, f"{setting('web_host')} {host}"):
        raise InsecureWebBind(
            f"{setting('web_host')} {host}: not a loopback address, and without TLS anyone on the network could read "
            f"the pages and their tokens. Pass {setting('tls_cert')} and {setting('tls_key')} (`gameday keys DIR --tls` "
            "makes a self-signed pair), "
            "or serve on 127.0.0.1.")


def listen(host: str, port: int) -> list[socket.socket]:
    """The pages' listening sockets, bound now as asyncio binds them (each address ``host``
    resolves to, on one port; SO_REUSEADDR; an IPv6 one for IPv6 only): bound before a
    session is built, a port in use is said before a session directory is written, and a
    page that connects meanwhile waits until the pages are served (``WebServer(socks=)``)."""
    socks: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(
                socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)):
            s = socket.socket(family, kind, proto)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if len(socks) > 1:  # (port 0: every address on the port the first one got)
                address = (address[0], socks[0].getsockname()[1], *address[2:])
            s.bind(address)
            s.listen(100)
            s.setblocking(False)
    except OSError as e:
        for s in socks:
            s.close()
        raise GamedayError(_cannot_serve(host, port, e)) from None
    return socks


def _cannot_serve(host: str, port: int, e: OSError) -> str:
    hint = (f"; pass another {setting('web_port')} (0 picks a free one), or serve no pages ({setting('web')})"
            if e.errno == errno.EADDRINUSE else "")
    return f"cannot serve the pages on {host}:{port}: {e.strerror or e}{hint}"


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
                 tls: ssl.SSLContext | None = None, server_public: bytes | None = None, board_access=None,
                 holder=None, socks: list[socket.socket] | None = None, reports=None):
        """``board_access(token)``: whether a token may read the board (None: anyone may);
        ``holder(token)``: who a token is, (role, team) or None, so that a wrong token is
        refused before its page gets a ZeroMQ socket (None: the session says so); ``socks``:
        what ``listen(host, port)`` bound already (None: bound here); ``reports``: the
        session's ``debrief.Debriefs`` (None: it writes no reports)."""
        check_web_bind(host, tls is not None)
        self.endpoint, self.board, self.host, self.tls, self.server_public = endpoint, board, host, tls, server_public
        self.board_access, self.holder, self.reports = board_access, holder, reports
        #: a report's address -> its file. A page holding a token is given the address of its
        #: own report (its team's; the facilitator's: the session's), random and never shown
        #: to another page: the token itself stays out of addresses.
        self.report_links: dict[str, str] = {}
        self.report_link_of: dict[str | None, str] = {}
        self.pages: set[_Page] = set()  # every open page
        self.waiting: OrderedDict[_Page, None] = OrderedDict()  # pages yet to say hello, the oldest first
        self.by_token: dict[str, set[_Page]] = {}  # the pages that said hello, by their token
        self.busy: set = set()  # the HTTP connections a request is being handled on
        self.closing: set[asyncio.Task] = set()  # pages being closed to make room
        self.failures = FailureGate(budgets.LIVE_FAILURES_PER_S, budgets.LIVE_FAILURE_BURST,
                                    budgets.LIVE_ALL_FAILURES_PER_S, budgets.LIVE_ALL_FAILURE_BURST,
                                    budgets.LIVE_CONNECTIONS_KEPT)
        self.board_buckets: dict[str, TokenBucket] = {}  # a valid token -> its reads of the board
        #: what the pages' server refused before the session saw it (shown with the session's: LiveServer.counts)
        self.counters = {"unauthorized": 0, "malformed": 0, "rate_limited": 0, "over_cap": 0}
        self.http_log = _HttpLog(self.counters)
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        # (in this thread's context: its errors name the settings as the caller speaks them, errors.setting)
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._serve, port, socks),
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
    def _serve(self, port: int, socks: list[socket.socket] | None) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application(client_max_size=MAX_MESSAGE, middlewares=[self._track, _add_headers, self._check_host])
        app.router.add_get("/", self._scoreboard_page)
        app.router.add_get("/scoreboard.json", self._board)
        app.router.add_get("/team/{team}", self._team_page)
        app.router.add_get("/facilitator", self._facilitator_page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/report/{link}", self._report)
        app.router.add_get("/ws", self._socket)
        # (URLs hold no tokens, but nobody needs a line per poll; an idle connection, or one
        # that has not sent its whole request, is closed after LIVE_HTTP_IDLE_S)
        self.runner = web.AppRunner(app, access_log=None, keepalive_timeout=budgets.LIVE_HTTP_IDLE_S,
                                    logger=self.http_log)
        try:
            self.loop.run_until_complete(self.runner.setup())
            self._make_room_for_connections(self.runner.server)
            sites = ([web.SockSite(self.runner, sock, ssl_context=self.tls) for sock in socks] if socks else
                     [web.TCPSite(self.runner, self.host, port, ssl_context=self.tls)])
            for site in sites:
                self.loop.run_until_complete(site.start())
            self.port = sites[0]._server.sockets[0].getsockname()[1]
        except OSError as e:
            self._error = GamedayError(_cannot_serve(self.host, port, e))
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

    async def _report(self, request):
        """A report, at the address given to the page of a token that may read it."""
        source = request.remote or ""
        if not self.gate_open(source):
            return web.Response(status=429, text=self.gated() + "\n", headers={"Retry-After": "5"})
        path = self.report_links.get(request.match_info["link"])
        if path is None:
            self.failed(source, "unauthorized")
            return web.Response(status=404, text="no report at this address: the page of your team gives its own\n")
        return web.FileResponse(path, headers={"Content-Type": "text/html; charset=utf-8",
                                               "Content-Security-Policy": REPORT_CSP})

    def report_answer(self, role: str, team: str | None) -> dict:
        """The answer to a page's ``report``: how its report stands and, once written, its
        address (a team's page: its team's report; the facilitator's: the session's)."""
        if role not in ("team", "facilitator"):
            return {"ok": False, "error": {"code": "forbidden", "message": f"a {role} token has no report"}}
        if self.reports is None:
            return {"ok": False, "error": {"code": "no_report",
                                           "message": "this game day writes no reports (it was served without them)"}}
        who = team if role == "team" else None
        status = self.reports.status(who)
        if status["state"] != READY:
            return {"ok": True, "result": {k: v for k, v in status.items() if k != "path"}}
        if who not in self.report_link_of:
            link = secrets.token_urlsafe(24)
            self.report_link_of[who], self.report_links[link] = link, status["path"]
        return {"ok": True, "result": {"state": READY, "url": f"/report/{self.report_link_of[who]}"}}

    @web.middleware
    async def _check_host(self, request, handler):
        """Over plain HTTP (loopback only) a request must name a loopback host: a page of
        another site whose name was made to resolve to 127.0.0.1 (DNS rebinding) names its own.
        The Host header is read as an address (127.0.0.1.evil.example is a name), never resolved."""
        if self.tls is None and not is_loopback(host_of(request.headers.get("Host", ""))):
            return web.Response(status=421, text="this server answers only to a loopback name or address "
                                                 "(127.0.0.1, [::1] or localhost)\n")
        return await handler(request)

    @web.middleware
    async def _track(self, request, handler):
        """While a request is handled (a page's WebSocket: while it is open), its connection
        is busy and never closed to make room for another."""
        connection = request.protocol
        self.busy.add(connection)
        try:
            return await handler(request)
        finally:
            self.busy.discard(connection)

    def _make_room_for_connections(self, http: web.Server) -> None:
        """Past LIVE_HTTP_CONNECTIONS open, each new connection closes the oldest idle one:
        a client holding connections open cannot keep others from connecting, and a browser
        opens an idle connection again when it needs one. (aiohttp's server is told of every
        new connection through its connection_made.)"""
        made = http.connection_made

        def connection_made(handler, transport) -> None:
            made(handler, transport)
            connections = http.connections  # the oldest first
            if len(connections) > budgets.LIVE_HTTP_CONNECTIONS:
                idle = next((c for c in connections  # (one closed already is listed until its close is done)
                             if c is not handler and c not in self.busy and c.transport is not None), None)
                if idle is not None:
                    self.counters["over_cap"] += 1
                    idle.force_close()

        http.connection_made = connection_made

    def gate_open(self, source: str) -> bool:
        """Whether a request without a valid token yet, from ``source``, may be read; counted if not."""
        self.failures.forget_quiet()
        if self.failures.open_to(source):
            return True
        self.counters["rate_limited"] += 1
        return False

    def failed(self, source: str, counter: str) -> None:
        """``source`` showed a wrong token, or something malformed."""
        self.counters[counter] += 1
        self.failures.failed(source)

    def gated(self) -> str:
        return (f"too many requests without a valid token: at most {self.failures.limits()}; wait a few seconds, "
                "and check the token")

    async def _board(self, request):
        if self.board_access is not None:
            if not self.gate_open(request.remote or ""):
                return web.Response(status=429, text=self.gated() + "\n", headers={"Retry-After": "5"})
            given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if not given or not self.board_access(given):
                self.failed(request.remote or "", "unauthorized")
                return web.Response(status=401, text="the scoreboard needs the viewer's token\n")
            if not self.board_buckets.setdefault(given, TokenBucket(budgets.LIVE_RATE_PER_TOKEN,
                                                                    budgets.LIVE_BURST_PER_TOKEN)).take():
                self.counters["rate_limited"] += 1
                return web.Response(status=429, text=f"more than {budgets.LIVE_RATE_PER_TOKEN:g} requests a second "
                                                     "with this token; slow down\n", headers={"Retry-After": "1"})
        try:
            return web.Response(body=self.board().encode(), content_type="application/json")
        except Exception:  # noqa: BLE001 - the page shows "connection lost" and retries
            return web.Response(status=503, text="scoreboard unavailable\n")

    async def _socket(self, request):
        origin = request.headers.get("Origin")
        if origin is not None and origin != f"{request.scheme}://{request.host}":  # a page of another site
            return web.Response(status=403, text="a page of another site cannot talk to this server\n")
        source = request.remote or ""
        if not self.gate_open(source):  # before the WebSocket costs anything
            return web.Response(status=429, text=self.gated() + "\n", headers={"Retry-After": "5"})
        ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE, heartbeat=10.0, timeout=budgets.LIVE_CLOSE_WITHIN_S)
        await ws.prepare(request)
        page = _Page(self, ws, source)
        self.pages.add(page)
        self._wait_for_hello(page)
        try:
            await page.serve()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the tab went away, or the server is shutting down
        except Exception as e:  # noqa: BLE001 - a bug in one page's gateway must not take the others down
            log.error("gameday serve: a page's connection failed: %s: %s", type(e).__name__, lp.for_terminal(str(e)))
        finally:
            self._forget(page)
            await page.close()
        return ws

    def _wait_for_hello(self, page: _Page) -> None:
        """Among the pages yet to say hello; past LIVE_PAGES_WAITING the one waiting longest
        is closed (a page says hello at once: only a silent one waits long)."""
        self.waiting[page] = None
        while len(self.waiting) > budgets.LIVE_PAGES_WAITING:
            oldest, _ = self.waiting.popitem(last=False)
            self.counters["over_cap"] += 1
            reason = f"more than {budgets.LIVE_PAGES_WAITING} pages waiting to say hello; the longest waiting is closed"
            task = asyncio.ensure_future(oldest.ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=reason.encode()))
            self.closing.add(task)
            task.add_done_callback(self.closing.discard)

    def admit(self, page: _Page, token: str) -> dict | None:
        """``page`` said hello with ``token``: counted against the token, or the error it is
        refused with (a wrong token, or the token's pages at their cap)."""
        self.waiting.pop(page, None)
        if self.holder is not None and self.holder(token) is None:
            self.failed(page.source, "unauthorized")
            return {"code": "unauthorized", "message": "this token grants nothing here"}
        pages = self.by_token.setdefault(token, set())
        if len(pages) >= budgets.LIVE_PAGES_PER_TOKEN:
            self.counters["over_cap"] += 1
            return {"code": "too_many_pages",
                    "message": f"{len(pages)} pages are open with this token, the most one token may have "
                               f"({budgets.LIVE_PAGES_PER_TOKEN}); close one, and this page tries again by itself"}
        pages.add(page)
        page.token = token
        return None

    def _forget(self, page: _Page) -> None:
        """Nothing of a closed page stays behind."""
        self.pages.discard(page)
        self.waiting.pop(page, None)
        pages = self.by_token.get(page.token)
        if pages is not None:
            pages.discard(page)
            if not pages:
                del self.by_token[page.token]

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
            for task in list(self.closing):
                task.cancel()
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
        self.http_log.summary()


class _Page:
    """One open page: its token, its DEALER to the session (opened once the page has said
    hello), and what it has already had."""

    _ids = itertools.count()

    def __init__(self, web_server: WebServer, ws, source: str):
        self.web, self.ws, self.source = web_server, ws, source
        self.client: AsyncRequestClient | None = None
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.token: str | None = None
        self.role, self.team = "", None  # as the session answered its hello
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
        reply = lp.parse_reply(raw)
        if reply["id"] == "":  # refused unread (the session's failure gate): the answer to this request
            reply["id"] = rid
        return reply

    async def send(self, obj: dict) -> None:
        if not self.ws.closed:
            await self.ws.send_str(json.dumps(obj))

    async def next_request(self, before_hello: bool = False) -> tuple | None:
        """(id, op, args, the message) of the page's next request; None when it is gone.
        ``before_hello``: the page has shown no valid token yet, so a message is read only
        while the failure gate is open to its source, and a malformed one counts against it."""
        while True:
            msg = await self.ws.receive()
            if msg.type != WSMsgType.TEXT:
                return None
            if before_hello and not self.web.gate_open(self.source):
                await self.send({"type": "reply", "id": None, "ok": False,
                                 "error": {"code": "rate_limited", "message": self.web.gated()}})
                return None
            try:
                req = json.loads(msg.data)
                rid, op, args = str(req["id"])[:lp.MAX_ID], str(req["op"]), req.get("args") or {}
                if not isinstance(args, dict):
                    raise TypeError("args")
                return rid, op, args, req
            except (ValueError, KeyError, TypeError, RecursionError):
                if before_hello:
                    self.web.failed(self.source, "malformed")
                await self.send({"type": "reply", "id": None, "ok": False,
                                 "error": {"code": "malformed", "message": "expected {id, op, args}"}})

    async def serve(self) -> None:
        try:  # (the whole hello within the time, however many malformed messages come first)
            first = await asyncio.wait_for(self.next_request(before_hello=True), budgets.LIVE_HELLO_WITHIN_S)
        except asyncio.TimeoutError:  # said nothing: a page says hello at once
            await self.ws.close(code=WSCloseCode.POLICY_VIOLATION,
                                message=f"no hello within {budgets.LIVE_HELLO_WITHIN_S:g} s".encode())
            return
        if first is None or self.ws.closed:  # (closed to make room, its hello read already: it goes)
            return
        rid, op, args, req = first
        if op != "hello" or not isinstance(req.get("token"), str):
            self.web.failed(self.source, "unauthorized")
            await self.send({"type": "reply", "id": rid, "ok": False,
                             "error": {"code": "unauthorized", "message": "say hello with a token first"}})
            return
        # the first message says who the page is, and where its feed was
        refused = self.web.admit(self, req["token"][:lp.MAX_TEXT])
        if refused is not None:
            await self.send({"type": "reply", "id": rid, "ok": False, "error": refused})
            return
        self.since, self.series_since = _count(req.get("since")), _count(req.get("series_since"))
        self.client = AsyncRequestClient(self.web.zmq, self.web.endpoint, REPLY_TIMEOUT_S, self.web.server_public)
        hello = {"role": str(args.get("by") or "")[:lp.MAX_TEXT] or "page"}
        if isinstance(args.get("team"), str) and args["team"]:
            hello["team"] = args["team"][:lp.MAX_TEXT]  # a team's page: the server refuses another team's token
        reply = await self.call(rid, "hello", hello)
        await self.send({"type": "reply", **reply})
        if not reply["ok"]:
            if reply["error"]["code"] == "unauthorized":  # (the session counted it)
                self.web.failures.failed(self.source)
            return  # a wrong token sees nothing, and gets nothing more
        self.role, self.team = reply["result"]["role"], reply["result"].get("team")
        watched = WATCHED.get(self.role)
        if watched is not None:
            self.wake.set()  # its first state at once, not at the next idle push
            self.watcher = asyncio.ensure_future(self.watch(*watched))
        while (request := await self.next_request()) is not None:
            rid, op, args, _ = request
            if op == "report":  # (the pages' own request: the reports are served here)
                await self.send({"type": "reply", "id": rid, **self.web.report_answer(self.role, self.team)})
                continue
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


@functools.lru_cache(maxsize=None)
def _contents(name: str) -> bytes:
    """A page's file, read once: a flood of page loads costs no disk reads."""
    return (STATIC / name).read_bytes()


def _file(name: str, ctype: str):
    return web.Response(body=_contents(name), headers={"Content-Type": ctype})


@web.middleware
async def _add_headers(request, handler):
    try:
        response = await handler(request)
    except web.HTTPException as e:  # the router's own 404 and 405
        e.headers.update(HEADERS)
        raise
    if not response.prepared:  # a WebSocket has sent its headers already
        for name, value in HEADERS.items():  # (a report says its own Content-Security-Policy)
            response.headers.setdefault(name, value)
    return response
