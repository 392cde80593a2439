"""All ZeroMQ code in one place: the sockets a world's hosts talk over, and those a live
game day's consoles talk to its server over (``RequestServer``, ``RequestClient``).

Every host (a Ray actor hosting some agents) binds one ROUTER for the tick messages its
agents receive, and opens one DEALER to each peer's ROUTER to send them. The
orchestrator binds a ROUTER for control (the tick barrier); each host connects a DEALER
to it. DEALER -> ROUTER keeps each pair's messages in order and never drops on a high
water mark the way PUB/SUB does. Every socket closes with linger 0; a ZeroMQ error comes
out as ``FabricError``.

What travels on the control sockets is named in ``control.py``.
"""
from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import zmq

from orchestrator import budgets


class FabricError(RuntimeError):
    """A socket could not send or receive."""


LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether ``host``, as written, names loopback: an address of the loopback network
    (127.0.0.0/8, ::1, in brackets or not), or the name localhost exactly. Nothing is
    resolved, and a name that merely starts like an address (127.0.0.1.evil.example) is
    a name."""
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def node_address() -> str:
    """The address the other hosts reach this one on: loopback while every Ray node is
    on this machine (traffic never leaves it), the node's own address on a real cluster."""
    try:
        import ray

        if ray.is_initialized():
            ips = {n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}
            if len(ips) > 1:
                return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - any failure here means: use loopback
        pass
    return LOOPBACK


class Sockets:
    """One context and the sockets made from it, closed together."""

    def __init__(self):
        self.ctx = zmq.Context()
        self.all: list[zmq.Socket] = []

    def make(self, kind: int, identity: bytes | None = None) -> zmq.Socket:
        s = self.ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)  # tick messages are few and must never be dropped
        s.setsockopt(zmq.RCVHWM, 0)
        if identity is not None:
            s.setsockopt(zmq.IDENTITY, identity)
        self.all.append(s)
        return s

    def bind_router(self, host: str) -> tuple[zmq.Socket, str]:
        s = self.make(zmq.ROUTER)
        s.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer is an error, not a silent drop
        s.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a replacement host takes over its predecessor's identity
        try:
            port = s.bind_to_random_port(f"tcp://{host}")
        except zmq.ZMQError as e:
            raise FabricError(f"cannot bind on {host}: {e}") from None
        return s, f"tcp://{host}:{port}"

    def connect_dealer(self, endpoint: str, identity: bytes) -> zmq.Socket:
        s = self.make(zmq.DEALER, identity)
        try:
            s.connect(endpoint)
        except zmq.ZMQError as e:
            raise FabricError(f"cannot connect to {endpoint}: {e}") from None
        return s

    def drop(self, sock: zmq.Socket) -> None:
        """Close one socket (a peer that was replaced)."""
        self.all.remove(sock)
        sock.close(linger=0)

    def close(self) -> None:
        for s in self.all:
            try:
                s.close(linger=0)
            except zmq.ZMQError:
                pass
        self.all = []
        self.ctx.term()


def send(sock: zmq.Socket, frames: list[bytes]) -> None:
    try:
        sock.send_multipart(frames, copy=False)
    except zmq.ZMQError as e:
        raise FabricError(f"send failed: {e}") from None


def recv(sock: zmq.Socket) -> list[bytes]:
    try:
        return sock.recv_multipart()
    except zmq.ZMQError as e:
        raise FabricError(f"receive failed: {e}") from None



def poller(*socks: zmq.Socket) -> zmq.Poller:
    p = zmq.Poller()
    for s in socks:
        p.register(s, zmq.POLLIN)
    return p


def ready(p: zmq.Poller, wait_s: float) -> set:
    """The sockets of ``p`` with something to read within ``wait_s``."""
    return set(dict(p.poll(int(wait_s * 1000))))


def recv_nowait(sock: zmq.Socket) -> list[bytes] | None:
    """The next message waiting on ``sock``, or None."""
    try:
        return sock.recv_multipart(zmq.NOBLOCK)
    except zmq.Again:
        return None
    except zmq.ZMQError as e:
        raise FabricError(f"receive failed: {e}") from None


def try_send(sock: zmq.Socket, frames: list[bytes]) -> bool:
    """Send unless ZeroMQ refuses (a peer gone); False then, for callers that do not care."""
    try:
        sock.send_multipart(frames, zmq.NOBLOCK)
        return True
    except zmq.ZMQError:
        return False


# -- a live game day's requests: consoles, the facilitator, the scoreboard --------------------------

def generate_curve_keys(directory: Path) -> tuple[Path, Path]:
    """A CURVE key pair in ``directory``: (public key file, secret key file, owner-only)."""
    import zmq.auth

    directory.mkdir(parents=True, exist_ok=True)
    public, secret = zmq.auth.create_certificates(str(directory), "server")
    os.chmod(secret, 0o600)
    return Path(public), Path(secret)


def load_curve_key(path: str) -> tuple[bytes, bytes | None]:
    """(public key, secret key or None) from a key file; OSError or ValueError if unreadable."""
    import zmq.auth

    return zmq.auth.load_certificate(path)


class RequestServer:
    """The ROUTER a live session answers on: a request is [identity, frame]; a console
    that reconnects keeps its identity's place; frames over ``max_frame`` drop their
    connection unread; with ``curve`` (public, secret) every connection is encrypted."""

    def __init__(self, host: str, port: int, max_frame: int, curve: tuple[bytes, bytes] | None = None):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.sock.setsockopt(zmq.MAXMSGSIZE, max_frame)
        # a connection that never completes the handshake is dropped, and one whose peer
        # vanished without closing is found by TCP keepalives (ZeroMQ never says who left)
        self.sock.setsockopt(zmq.HANDSHAKE_IVL, int(budgets.LIVE_HANDSHAKE_S * 1000))
        self.sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
        self.sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, 60)
        if curve is not None:
            self.sock.curve_publickey, self.sock.curve_secretkey = curve
            self.sock.curve_server = True
        try:
            if port == 0:
                port = self.sock.bind_to_random_port(f"tcp://{host}")
            else:
                self.sock.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as e:
            self.close()
            raise FabricError(f"cannot bind tcp://{host}:{port}: {e}") from None
        self.address = f"tcp://{host}:{port}"

    def wait(self, wait_s: float) -> bool:
        """Whether a request arrives within ``wait_s``."""
        return bool(self.sock.poll(int(wait_s * 1000)))

    def next_request(self) -> list[bytes] | None:
        return recv_nowait(self.sock)

    def answer(self, ident: bytes, payload: bytes) -> None:
        try_send(self.sock, [ident, payload])  # a client gone resends when it is back

    def close(self) -> None:
        self.ctx.destroy(linger=0)


class RequestClient:
    """A DEALER to a ``RequestServer``, reopened whenever a reply does not come in time
    (the Lazy Pirate pattern: a socket that timed out may hold a lost request)."""

    def __init__(self, endpoint: str, timeout_s: float, server_public: bytes | None = None):
        self.endpoint, self.timeout_ms, self.server_public = endpoint, int(timeout_s * 1000), server_public
        self.ctx = zmq.Context()
        self.sock: zmq.Socket | None = None
        self.reopens = 0
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
        s.connect(self.endpoint)
        self.sock = s

    def reopen(self) -> None:
        self.sock.close(linger=0)
        self.reopens += 1
        self._open()

    def send(self, frame: bytes) -> bool:
        """False if it could not be sent within the timeout (the socket is reopened)."""
        try:
            self.sock.send(frame)
            return True
        except zmq.Again:
            self.reopen()
            return False

    def replies(self):
        """The frames that arrive, each within the timeout of the last; reopens when one does not."""
        while self.sock.poll(self.timeout_ms):
            yield self.sock.recv()
        self.reopen()

    def close(self) -> None:
        self.ctx.destroy(linger=0)  # closes the socket too; term() alone waits for open sockets


class AsyncRequestClient:
    """A ``RequestClient`` for an asyncio loop: one web page's way to the session's
    ``RequestServer``, exactly as a terminal console's. One request at a time; a reply
    that does not come in time reopens the socket (Lazy Pirate) and returns None."""

    def __init__(self, ctx, endpoint: str, timeout_s: float, server_public: bytes | None = None):
        self.ctx, self.endpoint, self.timeout_ms, self.server_public = ctx, endpoint, int(timeout_s * 1000), server_public
        self.sock = None
        self._open()

    @staticmethod
    def context():
        """The context every page's client of one web server shares (asyncio sockets)."""
        import zmq.asyncio

        return zmq.asyncio.Context()

    def _open(self) -> None:
        s = self.ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        if self.server_public is not None:
            public, secret = zmq.curve_keypair()
            s.curve_serverkey, s.curve_publickey, s.curve_secretkey = self.server_public, public, secret
        s.connect(self.endpoint)
        self.sock = s

    async def call(self, frame: bytes) -> bytes | None:
        """The reply to ``frame``, or None if none came within the timeout."""
        try:
            if await self.sock.poll(self.timeout_ms, zmq.POLLOUT):
                await self.sock.send(frame)
                if await self.sock.poll(self.timeout_ms):
                    return await self.sock.recv()
        except zmq.ZMQError:
            pass
        self.sock.close(linger=0)
        self._open()
        return None

    def close(self) -> None:
        self.sock.close(linger=0)
