"""A client of ``gameday serve`` (console, facilitator, scoreboard): requests with ids,
retried in the Lazy Pirate style (no reply in time: close the socket, open a new one,
send the same request again; the server answers a repeated id without executing it
twice)."""
from __future__ import annotations

import uuid

import zmq

from orchestrator.live import protocol as lp
from orchestrator.errors import GamedayError


class ServerUnreachable(GamedayError):
    exit_code = 1


class RequestFailed(GamedayError):
    """The server answered with an error (a wrong token, a bad command)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{message} ({code})")
        self.code = code


class LiveClient:
    def __init__(self, server: str, token: str, timeout_s: float = 2.5, retries: int = 3,
                 server_public: bytes | None = None):
        """``server_public``: the server's public CURVE key (Z85), when it encrypts."""
        self.server, self.token = server, token
        self.timeout_ms, self.retries = int(timeout_s * 1000), retries
        self.server_public = server_public
        self.prefix = uuid.uuid4().hex[:12]
        self.n = 0
        self.ctx = zmq.Context()
        self.sock: zmq.Socket | None = None
        self.reconnects = 0
        self._open()

    def _open(self) -> None:
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        # A DEALER blocks on send while it has no peer (a refused CURVE handshake leaves it
        # without one): give up after the reply timeout instead of hanging.
        s.setsockopt(zmq.SNDTIMEO, self.timeout_ms)
        if self.server_public is not None:
            public, secret = zmq.curve_keypair()
            s.curve_serverkey, s.curve_publickey, s.curve_secretkey = self.server_public, public, secret
        s.connect(self.server)
        self.sock = s

    def _reopen(self) -> None:
        self.sock.close(linger=0)
        self.reconnects += 1
        self._open()

    def next_id(self) -> str:
        self.n += 1
        return f"{self.prefix}-{self.n}"

    def call(self, op: str, args: dict | None = None, rid: str | None = None, retries: int | None = None):
        """The result of ``op``; raises ``RequestFailed`` on an error reply and
        ``ServerUnreachable`` when every try timed out."""
        rid = rid or self.next_id()
        frame = lp.request(rid, self.token, op, args)
        tries = (self.retries if retries is None else retries) + 1
        for _ in range(tries):
            try:
                self.sock.send(frame)
            except zmq.Again:
                self._reopen()
                continue
            while self.sock.poll(self.timeout_ms):
                rep = lp.parse_reply(self.sock.recv())
                if rep["id"] != rid:  # a late answer to an earlier try of another request
                    continue
                if not rep["ok"]:
                    raise RequestFailed(rep["error"]["code"], rep["error"]["message"])
                return rep["result"]
            self._reopen()  # Lazy Pirate: a socket that timed out may hold a lost request; start afresh
        raise ServerUnreachable(f"no answer from {self.server} after {tries} tries; is `gameday serve` running there?")

    def close(self) -> None:
        self.ctx.destroy(linger=0)  # closes the socket too; term() alone waits for open sockets
