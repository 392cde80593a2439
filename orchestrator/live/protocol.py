"""The live game day's wire protocol: consoles, facilitator and scoreboard talk to
``gameday serve`` with small msgpack maps over a ZeroMQ DEALER -> ROUTER connection.

Request:  {"v": 1, "id": str, "token": str, "op": str, "args": {...}}
Reply:    {"v": 1, "id": the request's id, "ok": true, "result": ...}
          {"v": 1, "id": ..., "ok": false, "error": {"code": str, "message": str}}

Every request carries its own id; the server answers a request it has answered before
(the client resent it after a timeout) with the same reply, without executing it again.
Everything here is plain data: no pickle, nothing that runs code when decoded.
"""
from __future__ import annotations

import msgpack

from orchestrator import budgets
from orchestrator.errors import printable

VERSION = 1
MAX_FRAME = 64 * 1024  # a request bigger than this is refused unread
MAX_ID = 64
MAX_TEXT = budgets.LIVE_TEXT_CHARS

#: who may use an op: "team" (a team's token), "facilitator", "viewer" (scoreboard only)
ROLES = {
    "hello": ("team", "facilitator", "viewer"),
    "ping": ("team", "facilitator", "viewer"),
    "state": ("team", "facilitator"),
    "act": ("team",),
    "note": ("team",),
    "scoreboard": ("facilitator", "viewer"),
    "status": ("facilitator",),
    "overview": ("facilitator",),
    "start": ("facilitator",),
    "pause": ("facilitator",),
    "resume": ("facilitator",),
    "speed": ("facilitator",),
    "inject": ("facilitator",),
    "message": ("facilitator",),
    "hint": ("facilitator",),
    "ranks": ("facilitator",),
    "end": ("facilitator",),
}

#: op -> argument -> (type, required); types: str, int, number, map, strs (a list of str), bool
ARGS: dict[str, dict[str, tuple[str, bool]]] = {
    "hello": {"team": ("str", False), "role": ("str", False)},
    "ping": {},
    "state": {"since": ("int", False), "series_since": ("int", False), "team": ("str", False)},
    "act": {"action": ("str", True), "params": ("map", False), "by": ("str", False)},
    "note": {"text": ("str", True), "by": ("str", False)},
    "scoreboard": {},
    "status": {},
    "overview": {},
    "start": {},
    "pause": {},
    "resume": {},
    "speed": {"speed": ("number", True)},
    "inject": {"fault": ("str", True), "params": ("map", False), "teams": ("strs", False)},
    "message": {"text": ("str", True), "teams": ("strs", False)},
    "hint": {"name": ("str", False), "text": ("str", False), "teams": ("strs", False)},
    "ranks": {"shown": ("bool", True)},
    "end": {},
}

_CHECKS = {
    "str": (lambda v: isinstance(v, str) and 0 < len(v) <= MAX_TEXT, f"a non-empty string of at most {MAX_TEXT} characters"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v == v, "a number"),
    "map": (lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v), "a mapping of name -> value"),
    "strs": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
}


class ProtocolError(ValueError):
    """A request that cannot be served; ``code`` goes back to the client."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def encode(obj: dict) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def request(rid: str, token: str, op: str, args: dict | None = None) -> bytes:
    return encode({"v": VERSION, "id": rid, "token": token, "op": op, "args": args or {}})


def reply(rid: str, result=None, error: ProtocolError | None = None) -> bytes:
    if error is not None:
        return encode({"v": VERSION, "id": rid, "ok": False, "error": {"code": error.code, "message": str(error)}})
    return encode({"v": VERSION, "id": rid, "ok": True, "result": result})


def parse_request(frame: bytes) -> dict:
    """The request in ``frame``, checked field by field; ``ProtocolError`` says what is wrong."""
    if len(frame) > MAX_FRAME:
        raise ProtocolError("malformed", f"request of {len(frame)} bytes; expected at most {MAX_FRAME}")
    try:
        req = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception:  # noqa: BLE001 - msgpack raises several unrelated types for garbage
        raise ProtocolError("malformed", "not a msgpack map") from None
    if not isinstance(req, dict):
        raise ProtocolError("malformed", f"got a {type(req).__name__}; expected a map with v, id, token, op, args")
    if req.get("v") != VERSION:
        raise ProtocolError("malformed", f"v: got {req.get('v')!r}; expected {VERSION}")
    rid = req.get("id")
    if not (isinstance(rid, str) and 0 < len(rid) <= MAX_ID):
        raise ProtocolError("malformed", f"id: got {rid!r}; expected a string of 1 to {MAX_ID} characters")
    if not isinstance(req.get("token"), str):
        raise ProtocolError("malformed", f"token: got {req.get('token')!r}; expected a string")
    op = req.get("op")
    if op not in ARGS:
        raise ProtocolError("malformed", f"op: got {op!r}; expected one of {', '.join(sorted(ARGS))}")
    args = req.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError("malformed", f"args: got {args!r}; expected a map")
    spec = ARGS[op]
    for name in args:
        if name not in spec:
            raise ProtocolError("malformed", f"args.{name}: not an argument of {op} ({', '.join(spec) or 'none'})")
    for name, (kind, required) in spec.items():
        if name not in args:
            if required:
                raise ProtocolError("malformed", f"args.{name}: missing; {op} needs it")
            continue
        ok, expected = _CHECKS[kind]
        if not ok(args[name]):
            raise ProtocolError("malformed", f"args.{name}: got {args[name]!r}; expected {expected}")
    return {"id": rid, "token": req["token"], "op": op, "args": args}


def parse_reply(frame: bytes) -> dict:
    rep = msgpack.unpackb(frame, raw=False)
    if not isinstance(rep, dict) or rep.get("v") != VERSION or "id" not in rep or "ok" not in rep:
        raise ValueError("not a reply of this protocol")
    return rep


def kept_pace(session: dict) -> float | None:
    """From a session summary (the ``session`` of a state, or a scoreboard): the pace the
    worlds really keep, when they fell behind and keep clearly less than the speed asked
    for; None otherwise."""
    speed, pace = session.get("speed"), session.get("pace")
    if (session.get("state") == "running" and session.get("fell_behind") and pace
            and isinstance(speed, (int, float)) and pace < 0.95 * speed):
        return pace
    return None


def for_terminal(text, lines: bool = False) -> str:
    """Text a client, the server or a playbook gave, as a terminal may show it
    (``errors.printable``): newlines and tabs escaped too unless ``lines``."""
    return printable(text, lines=lines)
