"""All ZeroMQ code in one place: the sockets a world's hosts talk over.

Every host (a Ray actor hosting some agents) binds one ROUTER for the tick messages its
agents receive, and opens one DEALER to each peer's ROUTER to send them. The
orchestrator binds a ROUTER for control (the tick barrier); each host connects a DEALER
to it. DEALER -> ROUTER keeps each pair's messages in order and never drops on a high
water mark the way PUB/SUB does. Every socket closes with linger 0; a ZeroMQ error comes
out as ``FabricError``.

What travels on the control sockets is named in ``control.py``.
"""
from __future__ import annotations

import zmq


class FabricError(RuntimeError):
    """A socket could not send or receive."""


LOOPBACK = "127.0.0.1"


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

