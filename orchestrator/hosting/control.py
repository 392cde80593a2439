"""The records of the tick barrier between the orchestrator and its hosts, named.

Each record is a NamedTuple; on the wire it is a msgpack list, its kind then its fields
in order (``pack``/``unpack``). A record of an unknown kind, or with the wrong number of
fields, does not unpack: the receiver counts it as rejected."""
from __future__ import annotations

from typing import NamedTuple

import msgpack


# -- orchestrator to host ----------------------------------------------------------------------
class Tick(NamedTuple):
    """Step tick ``tick`` once every message of tick-1 counted in ``expected`` has arrived."""
    tick: int
    expected: dict  # {src host: messages it sent this host in tick-1}
    keep_from: dict  # {host: tick of its last snapshot}: keep what was sent it since
    injected: list  # frames from outside the world for agents here, for this tick


class Ahead(NamedTuple):
    """Step on without waiting for Tick records, up to tick ``through``: from tick ``first``
    on (the same for every host), after each tick a host tells each peer how many messages
    it sent it (``Count``); tick ``first`` waits for the ``expected`` counts of tick first-1
    (as a Tick would say), every later tick for its peers' own counts. Sent again to move
    ``through`` on, with ``keep_from`` as in Tick. Nothing comes from outside any more."""
    first: int
    expected: dict
    through: int
    keep_from: dict


class Rewire(NamedTuple):
    """Peer ``host`` was replaced: connect to its new ``endpoint``; it replays from ``since``."""
    host: str
    endpoint: str
    since: int


class Stop(NamedTuple):
    """Close the sockets and return."""


# -- host to orchestrator ----------------------------------------------------------------------
class Hello(NamedTuple):
    host: str
    version: int  # agents.base.PROTOCOL_VERSION of the host's code
    next_tick: int


class Beat(NamedTuple):
    """A heartbeat: the host is alive while it waits."""
    host: str


class Snapshot(NamedTuple):
    host: str
    tick: int  # the tick the host would step next from this state
    blob: bytes
    signature: bytes  # HMAC of the blob with the world's key


class Done(NamedTuple):
    tick: int
    metrics: dict  # {agent: {metric: value}}
    events: list
    sent: dict  # {dst host: messages sent it this tick}
    rejected: int  # frames rejected so far
    outbound: list  # frames to outside the world


# -- host to host ---------------------------------------------------------------------------------
class Count(NamedTuple):
    """Stepping ahead: how many messages the sending host sent this one in tick ``tick``."""
    tick: int
    sent: int


class Replayed(NamedTuple):
    """A replacement host has replayed through ``through`` and waits for the next tick."""
    host: str
    through: int


class Bye(NamedTuple):
    host: str


RECORDS = {cls.__name__.lower(): cls for cls in (Tick, Ahead, Rewire, Stop, Hello, Beat, Snapshot, Done, Count, Replayed,
                                                  Bye)}
KIND = {cls: kind for kind, cls in RECORDS.items()}


def _plain(obj):
    if hasattr(obj, "item"):  # numpy scalars in metrics
        return obj.item()
    raise TypeError(f"cannot send a {type(obj).__name__}")


def pack(record: NamedTuple) -> bytes:
    return msgpack.packb([KIND[type(record)], *record], use_bin_type=True, default=_plain)


def unpack(frame: bytes) -> NamedTuple:
    """The record in ``frame``; ValueError if it is not one."""
    try:
        rec = msgpack.unpackb(frame, raw=False)
    except Exception as e:  # noqa: BLE001 - msgpack raises several types for garbage
        raise ValueError(f"not msgpack: {e}") from None
    if not isinstance(rec, list) or not rec or rec[0] not in RECORDS:
        raise ValueError("not a control record")
    cls = RECORDS[rec[0]]
    if len(rec) - 1 != len(cls._fields):
        raise ValueError(f"a {rec[0]} record has {len(cls._fields)} fields, not {len(rec) - 1}")
    return cls(*rec[1:])
