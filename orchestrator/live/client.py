"""A client of ``gameday serve`` (console, facilitator, scoreboard): requests with ids,
retried in the Lazy Pirate style (no reply in time: close the socket, open a new one,
send the same request again; the server answers a repeated id without executing it
twice)."""
from __future__ import annotations

import uuid

from orchestrator.hosting.fabric import RequestClient
from orchestrator.live import protocol as lp
from orchestrator.errors import GamedayError


class ServerUnreachable(GamedayError):
    exit_code = 1


class RequestFailed(GamedayError):
    """The server answered with an error (a wrong token, a bad command)."""

    def __init__(self, code: str, message: str):
        code, message = lp.for_terminal(code), lp.for_terminal(message)  # (the server's words, printed as they are)
        super().__init__(f"{message} ({code})")
        self.code = code


class LiveClient:
    def __init__(self, server: str, token: str, timeout_s: float = 2.5, retries: int = 3,
                 server_public: bytes | None = None):
        """``server_public``: the server's public CURVE key (Z85), when it encrypts."""
        self.server, self.token, self.retries = server, token, retries
        self.prefix = uuid.uuid4().hex[:12]
        self.n = 0
        self.sock = RequestClient(server, timeout_s, server_public)

    @property
    def reconnects(self) -> int:
        return self.sock.reopens

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
            if not self.sock.send(frame):
                continue
            for reply in self.sock.replies():  # none in time: the socket is reopened, and the request sent again
                rep = lp.parse_reply(reply)
                # a late answer to an earlier try of another request is not this one's; a
                # refusal without an id is (the server refused it unread: malformed, or
                # too many requests without a valid token)
                if rep["id"] != rid and not (rep["id"] == "" and not rep["ok"]):
                    continue
                if not rep["ok"]:
                    raise RequestFailed(rep["error"]["code"], rep["error"]["message"])
                return rep["result"]
        raise ServerUnreachable(f"no answer from {self.server} after {tries} tries; is `gameday serve` running there?")

    def close(self) -> None:
        self.sock.close()
