"""The message layer's encoding: small, versioned, schema-checked msgpack records.

Every message that crosses a process is encoded and decoded here. Never pickle: a
malformed frame raises ``WireError`` and is counted by the receiver. In one process a
message is handed over as it is (``admit`` makes decode's checks on it), which gives the
receiver what decoding its frame would: a body is plain data that neither its sender
nor its receivers change (``agents.Message``). With ``GAMEDAY_WIRE_CHECK=1`` the
in-process host delivers decoded copies instead and ``same`` checks they equal the
messages sent (tests run the built-in worlds both ways).
"""
from __future__ import annotations

import math
import os
import threading

import msgpack

from agents import PROTOCOL_VERSION, Message

#: message kind -> body keys it must carry
BODY_KEYS: dict[str, tuple[str, ...]] = {
    "flow": ("origin", "sent", "hops", "setups", "requests", "coupled", "closes", "ct", "rt"),
    "flow_result": ("sent", "s_ok", "s_fail", "s_rej", "r_ok", "r_fail", "r_rej", "r_full"),
    "health": ("ratio",),
    "telemetry": ("at", "values"),
    "conn_event": ("dropped",),
    "close": ("origin", "count"),
    "apply": ("op", "args", "by"),
    "action_request": ("id", "action", "params"),
    "action_status": ("id", "action", "state"),
    "observed": ("view", "alarms"),
    "log_result": ("id", "values"),
    "console_command": ("id", "action", "params"),
}


class WireError(ValueError):
    """A frame that is not a valid message of this protocol version."""


#: the body keys of each kind as a set, for the check on every decode
_REQUIRED = {kind: frozenset(keys) for kind, keys in BODY_KEYS.items()}
_local = threading.local()  # a msgpack Packer per thread: building one costs as much as packing


def encode(msg: Message) -> bytes:
    packer = getattr(_local, "packer", None)
    if packer is None:
        packer = _local.packer = msgpack.Packer(use_bin_type=True)
    return packer.pack([PROTOCOL_VERSION, msg.kind, msg.src, msg.dst, msg.seq, msg.tick, msg.body])


def checking() -> bool:
    """Whether the in-process host round-trips every message through the wire, checked."""
    return os.environ.get("GAMEDAY_WIRE_CHECK", "") not in ("", "0")


def admit(msg: Message) -> Message:
    """``msg`` if decoding its frame would accept it, else ``WireError`` (decode's checks)."""
    required = _REQUIRED.get(msg.kind) if isinstance(msg.kind, str) else None
    if required is None:
        raise WireError(f"unknown message kind {msg.kind!r}")
    if not (isinstance(msg.src, str) and isinstance(msg.dst, str) and isinstance(msg.seq, int)
            and isinstance(msg.tick, int) and isinstance(msg.body, dict)):
        raise WireError("bad header types")
    if not msg.body.keys() >= required:
        raise WireError(f"{msg.kind} without {', '.join(k for k in BODY_KEYS[msg.kind] if k not in msg.body)}")
    return msg


def same(a, b) -> bool:
    """Whether two plain values are equal with the same types throughout (a tuple is not
    the list decoding gives back, a numpy integer is not an int), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def decode(frame: bytes) -> Message:
    try:
        rec = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several unrelated types for bad input
        raise WireError(f"not msgpack: {e}") from None
    if not isinstance(rec, list) or len(rec) != 7:
        raise WireError("not a message record")
    version, kind, src, dst, seq, tick, body = rec
    if version != PROTOCOL_VERSION:
        raise WireError(f"protocol version {version!r}, expected {PROTOCOL_VERSION}")
    return admit(Message(kind, src, dst, body, seq, tick))
