"""``gameday serve``: a live session served over ZeroMQ to consoles, the facilitator and
the scoreboard.

One ROUTER socket; each client is a DEALER sending ``live.protocol`` requests. The
server is one loop: it answers requests until the next tick is due, then steps every
team's world. A token grants one team's world, or the facilitator's controls, or the
scoreboard alone. A request id answered before gets the same reply again without being
executed twice (clients resend after a timeout). Malformed requests get an error reply
and are counted; each token has a rate limit. A connection that has not shown a valid
token is read only while the failure gate (``limits.FailureGate``) is open to it, so that
a flood of wrong tokens is refused before any work and cannot slow the teams down. What
is kept per connection is forgotten once the connection falls silent (ZeroMQ does not
say when a peer leaves). The server binds loopback unless ZeroMQ CURVE keys are given
(``gameday keys``); a name is loopback only if every address it resolves to is.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import re
import secrets
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from reports import rundir
from orchestrator import budgets
from orchestrator.hosting.fabric import FabricError, RequestServer, generate_curve_keys, is_loopback, load_curve_key
from orchestrator.live import protocol as lp
from orchestrator.errors import GamedayError, Issue, printable, setting, shown
from orchestrator.live.limits import FailureGate, TokenBucket
from orchestrator.live.session import ENDED, FACILITATOR_REQUESTS, TEAM_NAME, Session

log = logging.getLogger("gameday.serve")  # a bug in a request: said on stderr, the game day goes on

RATE_PER_S = budgets.LIVE_RATE_PER_TOKEN
BURST = budgets.LIVE_BURST_PER_TOKEN
REPLIES_KEPT = budgets.LIVE_REPLIES_KEPT
CONSOLE_GONE_S = 5.0  # a console not heard from for this long is shown as disconnected
READS = ("state", "scoreboard", "ping", "status", "hello", "overview")  # requests that change nothing
LARGEST_PORT = 65535
#: a token as tokens.json may hold one: the server makes them with secrets.token_urlsafe(12),
#: 16 characters of this alphabet (nothing a terminal would read as a control sequence)
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")


class InsecureBind(GamedayError):
    """A non-loopback bind without encryption."""


def parse_bind(bind: str) -> tuple[str, int]:
    m = re.fullmatch(r"tcp://(\[[0-9a-fA-F:]+\]|[^:/]+):([0-9]+)", bind) if isinstance(bind, str) else None
    if not m:
        raise InsecureBind(f"{setting('bind')} {shown(bind)}: expected tcp://HOST:PORT (e.g. tcp://127.0.0.1:7700; port 0 "
                           "picks a free one)")
    digits = m.group(2)
    if len(digits) > 5 or int(digits) > LARGEST_PORT:  # (ZeroMQ would take 99999 as 99999 mod 65536)
        port = digits if len(digits) <= 12 else digits[:9] + "..."
        raise InsecureBind(f"{setting('bind')} {shown(bind)}: port {port}: expected 0 to {LARGEST_PORT} (0 picks a free one)")
    return m.group(1), int(digits)


_AUTHORITY = re.compile(r"\[(?P<v6>[^\[\]]*)\](?::\d{1,5})?|(?P<host>[^:\[\]]*)(?::\d{1,5})?")


def host_of(authority: str) -> str:
    """The host of ``HOST[:PORT]`` as a Host header names it: an IPv6 address in brackets,
    with or without a port, or a name or IPv4 address with or without one; anything else
    as it is (a bare IPv6 address, or something that names no loopback host)."""
    m = _AUTHORITY.fullmatch(authority)
    if m is None:
        return authority
    return m.group("v6") if m.group("v6") is not None else m.group("host")


def binds_loopback(host: str, what: str) -> bool:
    """Whether binding ``host`` listens on loopback only: a loopback address, or a name every
    address of which, resolved as the bind will resolve it, is one. ``what``: the setting and
    its value, named when the name does not resolve (``InsecureBind``)."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(bare)
        return is_loopback(bare)
    except ValueError:
        pass
    if bare == "*":  # (ZeroMQ's every interface)
        return False
    try:
        found = {info[4][0] for info in socket.getaddrinfo(bare, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError) as e:
        raise InsecureBind(f"{printable(what, 300)}: cannot resolve {printable(bare, 200)} "
                           f"({getattr(e, 'strerror', None) or e}); expected a loopback address such as 127.0.0.1, or a "
                           "name of this machine's loopback") from None
    return bool(found) and all(is_loopback(a) for a in found)


def check_bind(bind: str, curve_secret: str | None) -> None:
    """Refuses, before anything is built, a bind beyond loopback without encryption."""
    host, _ = parse_bind(bind)
    if curve_secret:  # encrypted: any interface will do (ZeroMQ also binds interface names)
        return
    if not binds_loopback(host, f"{setting('bind')} {bind}"):
        raise InsecureBind(f"{setting('bind')} {printable(bind, 300)}: {printable(host, 200)} is not a loopback address, "
                           "and without encryption anyone on the network could read the session and its tokens. "
                           f"Generate keys with `gameday keys DIR` and pass {setting('curve_secret')} DIR/server.key_secret "
                           "(consoles then need `gameday console --server-key DIR/server.key`), or bind "
                           "tcp://127.0.0.1:PORT.")


def bind_requests(bind: str, curve_secret: str | None = None) -> RequestServer:
    """The socket the session answers on, bound at ``bind`` (checked as ``check_bind``
    does; encrypted with the CURVE key in ``curve_secret``). Bound before a session is built
    (``gameday.Serving.open``), a port in use is said before a session directory is written;
    a console's requests wait in it until the session serves."""
    check_bind(bind, curve_secret)
    curve = load_key(curve_secret, secret=True) if curve_secret else None
    host, port = parse_bind(bind)
    try:
        return RequestServer(host, port, lp.MAX_FRAME * 2, curve)
    except FabricError as e:  # (it says "cannot bind ADDRESS: why (addr=ADDRESS)": the why, once)
        why = str(e).removeprefix(f"cannot bind tcp://{host}:{port}: ").split(" (addr=")[0]
        raise GamedayError(f"{setting('bind')} {printable(bind, 300)}: cannot bind it: {why}") from None


def read_tokens(session_dir: Path) -> dict | None:
    """A session's tokens.json (``LiveServer.write_tokens``), or None if it has none: read
    as a run directory's JSON file is (``rundir.read_json``: a regular file inside the
    directory, of bounded size and depth) and checked field by field, so that a token that
    would be printed (with a control sequence in it) or a port out of range is refused,
    naming the file, the field and the value."""
    try:
        toks = rundir.read_json(Path(session_dir), rundir.TOKENS, "the session's address and tokens")
    except rundir.NotARunDirectory as e:
        raise GamedayError(str(e)) from None
    if toks is None:
        return None

    def refuse(field: str, value, expected: str):
        return GamedayError(f"{Path(session_dir) / rundir.TOKENS}: {Issue(field, value, expected)}, as `gameday serve` "
                            "writes it")

    token = "a token of 16 to 64 letters, digits, - or _"
    if not isinstance(toks, dict):
        raise refuse("the file", toks, "a JSON object of server, server_key, facilitator, viewer and teams")
    try:
        parse_bind(toks.get("server"))
    except GamedayError:
        raise refuse("server", toks.get("server"), f"tcp://HOST:PORT, a port from 0 to {LARGEST_PORT}") from None
    key = toks.get("server_key")
    if key is not None and not (isinstance(key, str) and re.fullmatch(r"[!-~]{40}", key)):
        raise refuse("server_key", key, "nothing, or the server's public CURVE key (40 characters)")
    for role in ("facilitator", "viewer"):
        if not (isinstance(toks.get(role), str) and TOKEN.fullmatch(toks[role])):
            raise refuse(role, toks.get(role), token)
    teams = toks.get("teams")
    if not (isinstance(teams, dict) and teams):
        raise refuse("teams", teams, "a JSON object of team -> token")
    for team, given in teams.items():
        if not TEAM_NAME.match(team):
            raise refuse("teams", team, "team names of 1-32 letters, digits, - or _")
        if not (isinstance(given, str) and TOKEN.fullmatch(given)):
            raise refuse(f"teams.{team}", given, token)
    every = [toks["facilitator"], toks["viewer"], *teams.values()]
    if len(set(every)) < len(every):
        raise refuse("teams", list(teams), "a different token for every role and team (and the facilitator's, the "
                                            "viewer's)")
    return toks


def generate_keys(directory: Path) -> tuple[Path, Path]:
    """A CURVE key pair for the server: (public key file to give consoles, secret key file)."""
    return generate_curve_keys(directory)


def load_key(path: str, secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, sec = load_curve_key(path)
    except (OSError, ValueError) as e:
        raise GamedayError(f"cannot read the CURVE key file {path}: {e}") from None
    if secret and sec is None:
        raise GamedayError(f"{path} holds no secret key; pass the server.key_secret file written by `gameday keys`")
    return public, sec


@dataclass
class Connection:
    """What the server knows of a connection (a ROUTER identity) that has shown a valid
    token: when it was last heard, the token, its reads' rate bucket, and for a team's
    console its team and the name its people go by."""

    heard: float
    token: str
    reads: TokenBucket
    team: str | None = None
    by: str = ""


class LiveServer:
    def __init__(self, session: Session, bind: str = "tcp://127.0.0.1:7700", curve_secret: str | None = None,
                 rate: float = RATE_PER_S, burst: int = BURST, tokens: dict | None = None,
                 forget_s: float = budgets.LIVE_FORGET_S, sock: RequestServer | None = None):
        """``tokens``: a tokens.json's, for a session resumed with the tokens its people hold;
        ``forget_s``: how long a silent connection's state is kept; ``sock``: the socket
        ``bind_requests(bind, curve_secret)`` bound already (None: bound here)."""
        check_bind(bind, curve_secret)
        self.session = session
        if tokens is None:
            self.tokens: dict[str, tuple[str, str | None]] = {secrets.token_urlsafe(12): ("facilitator", None),
                                                                secrets.token_urlsafe(12): ("viewer", None)}
            for team in session.teams:
                self.tokens[secrets.token_urlsafe(12)] = ("team", team)
        else:
            self.tokens = {tokens["facilitator"]: ("facilitator", None), tokens["viewer"]: ("viewer", None)}
            self.tokens |= {tokens["teams"][team]: ("team", team) for team in session.teams}
        self.rate, self.burst, self.forget_s = rate, burst, forget_s
        self.buckets: dict[str, TokenBucket] = {}  # token -> its commands' bucket
        self.answered: dict[str, OrderedDict] = {}
        for request, result in session.answers.items():  # a resumed session: a request resent is not run twice
            who, rid = request.split(":", 1)
            token = self.token_of("facilitator") if who == FACILITATOR_REQUESTS else self.token_of("team", who)
            self.answered.setdefault(token, OrderedDict())[rid] = lp.reply(rid, result)
        #: the connections that have shown a valid token, the longest silent first
        self.connections: OrderedDict[bytes, Connection] = OrderedDict()
        self.failures = FailureGate(budgets.LIVE_FAILURES_PER_S, budgets.LIVE_FAILURE_BURST,
                                    budgets.LIVE_ALL_FAILURES_PER_S, budgets.LIVE_ALL_FAILURE_BURST,
                                    budgets.LIVE_CONNECTIONS_KEPT)
        self.gated = lp.reply("", error=lp.ProtocolError(
            "rate_limited", f"too many requests without a valid token: at most {self.failures.limits()}; "
                            "wait a few seconds, and check the token"))  # (the same bytes every time: no work)
        self.forgot_at = 0.0
        self.counters = {"requests": 0, "malformed": 0, "unauthorized": 0, "forbidden": 0, "rate_limited": 0,
                         "repeats": 0, "internal_errors": 0}
        self.also_counted: list[dict] = []  # others' counters shown with these (the pages' server's)
        curve = load_key(curve_secret, secret=True) if curve_secret else None
        self.server_key: str | None = curve[0].decode() if curve else None
        self.public_key: bytes | None = curve[0] if curve else None
        self.on_change = lambda: None  # told when the session has stepped or a request changed it (the web pages)
        self.sock = sock if sock is not None else bind_requests(bind, curve_secret)
        self.address = self.sock.address
        self.board_json = "{}"
        self.board_at = 0.0

    def holder(self, token: str) -> tuple[str, str | None] | None:
        """Who ``token`` is (role, team), or None. Compared with every token in constant
        time, so that how long a refusal takes says nothing of how near a guess was."""
        given = token.encode("utf-8", "surrogatepass")
        found = None
        for known, who in self.tokens.items():
            if hmac.compare_digest(known.encode(), given):
                found = who
        return found

    def token_of(self, role: str, team: str | None = None) -> str:
        return next(t for t, who in self.tokens.items() if who == (role, team))

    def write_tokens(self) -> Path:
        """tokens.json in the session directory, readable by its owner only."""
        path = self.session.dir / rundir.TOKENS
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"server": self.address, "server_key": self.server_key,
                       "facilitator": self.token_of("facilitator"), "viewer": self.token_of("viewer"),
                       "teams": {team: self.token_of("team", team) for team in self.session.teams}}, f, indent=2)
        return path

    # -- the loop -----------------------------------------------------------------------------------
    def run(self, linger_s: float = 30.0, should_stop=lambda: False, on_end=None, hold=lambda: False) -> None:
        """Serve until the session has ended and ``linger_s`` more seconds have passed
        (consoles show the final state meanwhile) since ``hold()`` last held it (the reports
        being written: the pages link them once written), or ``should_stop()``."""
        ended_at = None
        while not should_stop():
            due = self.session.due()
            now = time.monotonic()
            wait = 0.1 if due is None else max(0.0, min(0.1, due - now))
            self.serve_requests(wait)
            if self.session.state == ENDED:
                if ended_at is None:
                    ended_at = time.monotonic()
                    if on_end is not None:
                        on_end()
                    self.publish(force=True)
                if hold():
                    ended_at = time.monotonic()
                elif time.monotonic() - ended_at >= linger_s:
                    break
                continue
            due = self.session.due()
            if due is not None and time.monotonic() >= due:
                self.session.step()
                self.on_change()
            self.publish()

    def publish(self, force: bool = False) -> None:
        """The scoreboard as JSON for the web page, at most twice a second."""
        now = time.monotonic()
        if force or now - self.board_at >= 0.5:
            board = self.session.scoreboard()
            board["consoles"] = self.connected()
            self.board_json = json.dumps(board)
            self.board_at = now

    def serve_requests(self, wait_s: float) -> None:
        """Answer what arrives within ``wait_s``; at most a batch, so ticks are not starved."""
        self.forget_silent()
        if not self.sock.wait(wait_s):
            return
        for _ in range(200):
            frames = self.sock.next_request()
            if frames is None:
                return
            self.handle(frames)

    def forget_silent(self) -> None:
        """Forget, about once a second, the connections silent for ``forget_s`` and the
        failures that no longer count: nothing stays behind a connection that left."""
        now = time.monotonic()
        if now - self.forgot_at < 1.0:
            return
        self.forgot_at = now
        while self.connections and now - next(iter(self.connections.values())).heard > self.forget_s:
            self.connections.popitem(last=False)
        self.failures.forget_quiet()

    def handle(self, frames: list[bytes]) -> None:
        self.counters["requests"] += 1
        ident = frames[0]
        if ident not in self.connections and not self.failures.open_to(ident):  # before reading it
            self.counters["rate_limited"] += 1
            self._send(ident, self.gated)
            return
        if len(frames) != 2:
            self._failed(ident, "malformed")
            self._send(ident, lp.reply("", error=lp.ProtocolError("malformed", f"{len(frames) - 1} frames; expected 1")))
            return
        try:
            req = lp.parse_request(frames[1])
        except lp.ProtocolError as e:
            self._failed(ident, "malformed")
            self._send(ident, lp.reply("", error=e))
            return
        who = self.holder(req["token"])
        if who is None:
            self._failed(ident, "unauthorized")
            self._send(ident, lp.reply(req["id"], error=lp.ProtocolError("unauthorized", "this token grants nothing here")))
            return
        token = req["token"]
        conn = self._heard(ident, token)
        kept = self.answered.setdefault(token, OrderedDict())
        if req["id"] in kept:  # resent after a timeout: same answer, not done twice
            self.counters["repeats"] += 1
            self._send(ident, kept[req["id"]])
            return
        # Commands are limited per token, however many consoles and pages a team has open;
        # reads per connection, so that every page of a team gets its pushes.
        bucket = conn.reads if req["op"] in READS else self.buckets.setdefault(token, TokenBucket(self.rate, self.burst))
        if not bucket.take():
            self.counters["rate_limited"] += 1
            self._send(ident, lp.reply(req["id"], error=lp.ProtocolError(
                "rate_limited", f"more than {self.rate:g} requests per second with this token; slow down")))
            return
        try:
            result = self.execute(conn, who, req)
            out = lp.reply(req["id"], result)
        except lp.ProtocolError as e:
            if e.code == "forbidden":
                self.counters["forbidden"] += 1
            out = lp.reply(req["id"], error=e)
        except Exception as e:  # noqa: BLE001 - a bug must not take the game day down with it
            self.counters["internal_errors"] += 1
            log.error("gameday serve: internal error on %s: %s: %s", req["op"], type(e).__name__, lp.for_terminal(str(e)))
            out = lp.reply(req["id"], error=lp.ProtocolError("internal", f"the server failed on {req['op']}: {e}"))
        if req["op"] not in READS:  # reads are cheap to redo; keep the cache small
            kept[req["id"]] = out
            self.on_change()
            while len(kept) > REPLIES_KEPT:
                kept.popitem(last=False)
        self._send(ident, out)

    def _send(self, ident: bytes, payload: bytes) -> None:
        self.sock.answer(ident, payload)

    def _failed(self, ident: bytes, counter: str) -> None:
        """A request without a valid token: counted, against its connection, which is no
        longer trusted (its requests are read while the failure gate is open to it)."""
        self.counters[counter] += 1
        self.failures.failed(ident)
        self.connections.pop(ident, None)

    def _heard(self, ident: bytes, token: str) -> Connection:
        """The connection, heard now with a valid token (the longest silent forgotten past
        LIVE_CONNECTIONS_KEPT)."""
        now = time.monotonic()
        conn = self.connections.pop(ident, None)
        if conn is None or conn.token != token:
            conn = Connection(now, token, TokenBucket(self.rate, self.burst))
        conn.heard = now
        self.connections[ident] = conn
        while len(self.connections) > budgets.LIVE_CONNECTIONS_KEPT:
            self.connections.popitem(last=False)
        return conn

    def execute(self, conn: Connection, who: tuple[str, str | None], req: dict):
        role, team = who
        op, args, s = req["op"], req["args"], self.session
        if role not in lp.ROLES[op]:
            raise lp.ProtocolError("forbidden", f"a {role} token cannot use {op}")
        if role == "team" and args.get("team") not in (None, team):
            raise lp.ProtocolError("forbidden", f"this token grants team {team}'s world, not {args['team']}'s")
        if role == "team":
            conn.team = team
            conn.by = args.get("role") if op == "hello" and args.get("role") else args.get("by") or conn.by
        if op == "ping":
            return {"pong": True, "session": s.summary()}
        if op == "hello":
            out = {"role": role, "team": team, "session": s.summary()}
            if role == "team":
                out["catalogue"] = s.teams[team].view.catalogue
            if role == "facilitator":
                out["faults"] = [{"name": f["name"], "description": f["description"], "params": f["params"]}
                                 for f in s.faults.values()]
            return out
        if op == "state":
            target = team or args.get("team")
            if target not in s.teams:
                raise lp.ProtocolError("bad_request", f"team: got {target!r}; expected one of {', '.join(s.teams)}")
            series = args.get("series_since")
            return s.team_state(target, int(args.get("since", 0)), None if series is None else int(series))
        if op == "act":
            return s.act(team, args["action"], args.get("params"), args.get("by") or conn.by or "console",
                         f"{team}:{req['id']}")
        if op == "note":
            return s.note(team, args["text"], args.get("by") or conn.by or "console", f"{team}:{req['id']}")
        if op == "scoreboard":
            board = s.scoreboard()
            board["consoles"] = self.connected()
            return board
        if op == "status":
            return {"session": s.summary(), "consoles": self.connected(), "counters": self.counts()}
        if op == "overview":
            return s.overview() | {"consoles": self.connected(), "counters": self.counts()}
        if role == "facilitator" and op not in READS:
            with s.answering(f"{FACILITATOR_REQUESTS}:{req['id']}"):
                return self._control(op, args)
        raise lp.ProtocolError("malformed", f"op {op!r}")  # (parse_request refuses unknown ops first)

    def _control(self, op: str, args: dict):
        s = self.session
        if op == "start":
            return s.start()
        if op == "pause":
            return s.pause()
        if op == "resume":
            return s.resume()
        if op == "speed":
            return s.set_speed(args["speed"])
        if op == "ranks":
            return s.show_ranks(args["shown"])
        if op == "inject":
            return s.inject(args["fault"], args.get("params"), args.get("teams"))
        if op == "message":
            return s.message(args["text"], args.get("teams"))
        if op == "hint":
            return s.hint(args.get("name"), args.get("text"), args.get("teams"))
        if op == "end":
            return s.end()
        raise lp.ProtocolError("malformed", f"op {op!r}")  # (parse_request refuses unknown ops first)

    def connected(self) -> dict[str, int]:
        """Team -> consoles heard from in the last few seconds."""
        now = time.monotonic()
        out = {team: 0 for team in self.session.teams}
        for c in reversed(self.connections.values()):  # the most recently heard first
            if now - c.heard > CONSOLE_GONE_S:
                break
            if c.team is not None:
                out[c.team] += 1
        return out

    def counts(self) -> dict[str, int]:
        """The counters, with those of the pages' server (what it refused before the session saw it)."""
        out = dict(self.counters)
        for other in self.also_counted:
            for name, n in dict(other).items():
                out[name] = out.get(name, 0) + n
        return out

    def close(self) -> None:
        self.sock.close()
