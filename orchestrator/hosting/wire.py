"""The message layer's encoding: small, versioned, schema-checked msgpack records.

Every message between agents is encoded and decoded here, whether it then crosses a
ZeroMQ socket or stays in the process, so both hostings see exactly the same bytes.
Never pickle: a malformed frame raises ``WireError`` and is counted by the receiver.
"""
from __future__ import annotations

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
    required = _REQUIRED.get(kind) if isinstance(kind, str) else None
    if required is None:
        raise WireError(f"unknown message kind {kind!r}")
    if not (isinstance(src, str) and isinstance(dst, str) and isinstance(seq, int) and isinstance(tick, int)
            and isinstance(body, dict)):
        raise WireError("bad header types")
    if not body.keys() >= required:
        raise WireError(f"{kind} without {', '.join(k for k in BODY_KEYS[kind] if k not in body)}")
    return Message(kind, src, dst, body, seq, tick)
