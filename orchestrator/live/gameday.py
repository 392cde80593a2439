"""A live game day assembled: its session (one world per team), the server the consoles
join and the pages, checked before anything is built (``Serving.check``), their ports
bound before anything is written (``Serving.open``), served until the session ends, and
closed together (``GameDay.play``). ``gameday serve`` and ``orchestrator.serve`` both go
through here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from orchestrator.errors import GamedayError, setting
from orchestrator.live.debrief import Debriefs
from orchestrator.live.server import LiveServer, bind_requests, check_bind
from orchestrator.live.session import Session


@dataclass(frozen=True)
class Serving:
    """Where a game day is served: the consoles' address (``bind``, encrypted with the
    server's CURVE secret key file), and the pages (``web``) on ``web_host``:``web_port``,
    over HTTPS with ``tls_cert`` and ``tls_key``; ``linger_s``: how long the server keeps
    answering after the session ends, so that the consoles show the final state."""

    bind: str = "tcp://127.0.0.1:7700"
    curve_secret: str | None = None
    web: bool = True
    web_host: str = "127.0.0.1"
    web_port: int = 7701
    tls_cert: str | None = None
    tls_key: str | None = None
    linger_s: float = 30.0

    def check(self):
        """Every check of where it is served, before anything is built; returns the pages'
        TLS context (None: plain HTTP, or no pages)."""
        check_bind(self.bind, self.curve_secret)
        if bool(self.tls_cert) != bool(self.tls_key):
            raise GamedayError(f"{setting('tls_cert')} and {setting('tls_key')} go together: give both, or neither")
        if not self.web:
            return None
        from orchestrator.live.web import check_web_bind, tls_context

        check_web_bind(self.web_host, bool(self.tls_cert))
        return tls_context(self.tls_cert, self.tls_key) if self.tls_cert else None

    def open(self) -> "Ports":
        """The consoles' port and the pages' bound now (after ``check``), before any world is
        built: a port in use is said before a session directory is written, or a resumed one
        changed."""
        return Ports(self)


class Ports:
    """Where a game day is served, bound (``Serving.open``): the consoles' ZeroMQ socket and
    the pages' listening sockets. What connects before the session serves waits in them."""

    def __init__(self, serving: Serving):
        from orchestrator.live.web import listen

        self.requests = bind_requests(serving.bind, serving.curve_secret)
        try:
            self.pages = listen(serving.web_host, serving.web_port) if serving.web else []
        except BaseException:
            self.requests.close()
            raise

    def close(self) -> None:
        """Closes what the servers did not take (closing twice changes nothing)."""
        self.requests.close()
        for sock in self.pages:
            sock.close()


class GameDay:
    """``session`` served as ``serving`` says (``tls``: what ``serving.check()`` gave, before
    the session was built; ``tokens``: a rebuilt session's, so that everyone reconnects;
    ``ports``: what ``serving.open()`` bound before the session was built, None: bound by
    ``play``; ``reports``: write the after-action reports as soon as it ends, and link each
    team's from its page)."""

    def __init__(self, session: Session, serving: Serving, tls=None, tokens: dict | None = None,
                 ports: Ports | None = None, reports: bool = False):
        self.session, self.serving, self.tls, self.tokens, self.ports = session, serving, tls, tokens, ports
        self.server: LiveServer | None = None
        self.web = None  # the pages' server (``web.WebServer``), if it serves them
        self.debriefs = Debriefs(session.dir, list(session.teams)) if reports else None

    def play(self, start: bool = False, announce: Callable[["GameDay"], None] = lambda game: None,
             on_end: Callable[[dict], None] = lambda ranking: None,
             on_failure: Callable[[Session], None] = lambda session: None) -> None:
        """Start the server and the pages, ``announce`` them (the tokens and links are then
        known), start the clock if ``start`` (else the facilitator does), and answer until the
        session ends and ``linger_s`` after (after its reports are written, if it writes
        them: ``debriefs``). ``on_end(ranking)`` as soon as it ends, so that consoles see the
        end at once; Ctrl-C ends it too (its reports are then written before this returns).
        Any other failure leaves the worlds as they were, for a resume
        (``Session.rebuild``): ``on_failure(session)``, then it is raised."""
        ended = []
        debriefs = self.debriefs

        def end():
            if not ended:
                ended.append(True)
                on_end(self.session.close())
                if debriefs is not None and self.session.tick > 0:
                    debriefs.start()
                elif debriefs is not None:
                    debriefs.skip("the game day ended before it started")

        try:
            if self.ports is None:
                self.ports = self.serving.open()
            self.server = server = LiveServer(self.session, self.serving.bind, self.serving.curve_secret,
                                              tokens=self.tokens, sock=self.ports.requests)
            server.write_tokens()
            self.session.write_info(self.session.state, server=server.address)
            if self.serving.web:
                self.web = serve_pages(server, self.serving.web_host, self.serving.web_port, self.tls,
                                       self.ports.pages, debriefs)
                self.session.write_info(self.session.state, web=self.web.url)
            announce(self)
            if start:
                self.session.start()
            server.run(linger_s=self.serving.linger_s, on_end=end,
                       hold=lambda: debriefs is not None and debriefs.busy)
        except KeyboardInterrupt:
            raise  # Ctrl-C ends the game day: the ranking and the reports are written
        except BaseException:
            if not ended:  # a failure is not an end: the session can be resumed
                ended.append(True)
                self.session.interrupt()
                on_failure(self.session)
            raise
        finally:
            try:
                end()
                if debriefs is not None:
                    debriefs.wait()
            finally:
                if self.web is not None:
                    self.web.shutdown()
                if self.server is not None:
                    self.server.close()
                if self.ports is not None:
                    self.ports.close()



def serve_pages(server: LiveServer, host: str = "127.0.0.1", port: int = 7701, tls=None, socks=None,
                debriefs: Debriefs | None = None):
    """The pages of ``server``'s session (``web.WebServer``; on ``socks`` if ``web.listen``
    bound them already), told of its every change: a wrong token is refused before its page
    gets a ZeroMQ socket, the scoreboard is read with the viewer's or the facilitator's
    token, what the pages refuse is counted with what the session refuses, and each team's
    page links its report once ``debriefs`` wrote it (None: it writes none)."""
    from orchestrator.live.web import WebServer

    web = WebServer(connectable(server.address), lambda: server.board_json, host, port, tls, server.public_key,
                    board_access=lambda token: (server.holder(token) or ("",))[0] in ("viewer", "facilitator"),
                    holder=server.holder, socks=socks, reports=debriefs)
    server.on_change = web.changed
    server.also_counted.append(web.counters)
    return web


def connectable(address: str) -> str:
    """The session's address as this process connects to it: a wildcard bind over loopback."""
    for wildcard in ("tcp://0.0.0.0:", "tcp://*:", "tcp://[::]:"):
        if address.startswith(wildcard):
            return "tcp://127.0.0.1:" + address[len(wildcard):]
    return address
