"""A host for some agents of one world: steps them when the orchestrator says so and
exchanges their tick messages with the other hosts directly, over ZeroMQ.

Plain Python, so it can be tested without Ray; ``ray_hosting`` wraps it in a Ray actor.
Tick messages sent at tick t are delivered for tick t+1. Before stepping tick t a host
waits until it holds, from every other host, as many messages of tick t-1 as the
orchestrator says that host sent it; inboxes are then sorted by (sender, sequence), as
in process, so the results do not depend on the hosting.
"""
from __future__ import annotations

import zmq

from agents import Agent, Message, WorldInfo
from .fabric import FabricError, Sockets, node_address, pack, recv, send, unpack
from .hosting import build_agent, step_agents
from .wire import WireError, decode


class GroupHost:
    def __init__(self, host_id: str, info: dict, agents: list[tuple[str, str, dict]], owner: dict[str, str]):
        self.host_id = host_id
        self.info = WorldInfo(**info)
        self.order = [name for _, name, _ in agents]
        self.agents: dict[str, Agent] = {name: build_agent(kind, name, spec, self.info) for kind, name, spec in agents}
        self.owner = owner  # agent name -> host id
        self.sockets = Sockets()
        self.router, self.address = self.sockets.bind_router(node_address())
        self.peers: dict[str, zmq.Socket] = {}
        self.control: zmq.Socket | None = None
        self.received: dict[int, dict[str, list[Message]]] = {}  # tick sent -> source host -> messages
        self.local: dict[int, list[Message]] = {}  # messages between agents of this host, by tick sent
        self.rejected = 0

    # -- set-up (finish these before run) ------------------------------------------------
    def endpoint(self) -> str:
        return self.address

    def where(self) -> dict:
        """The process and Ray node this host runs in (for diagnostics and placement checks)."""
        import os

        node = None
        try:
            import ray

            if ray.is_initialized():
                node = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - outside Ray there is no node
            pass
        return {"pid": os.getpid(), "node": node, "endpoint": self.address}

    def connect(self, peers: dict[str, str], control: str) -> None:
        for host, endpoint in sorted(peers.items()):
            if host != self.host_id:
                self.peers[host] = self.sockets.connect_dealer(endpoint, self.host_id.encode())
        self.control = self.sockets.connect_dealer(control, self.host_id.encode())
        send(self.control, [pack(["hello", self.host_id])])

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> int:
        """Serve the orchestrator until it says stop; returns the ticks stepped."""
        poller = zmq.Poller()
        poller.register(self.control, zmq.POLLIN)
        poller.register(self.router, zmq.POLLIN)
        stepped = 0
        try:
            while True:
                ready = dict(poller.poll(1000))
                if self.router in ready:
                    self._drain_router()
                if self.control not in ready:
                    continue
                rec = unpack(recv(self.control)[0])
                if rec[0] == "tick":
                    self._step(int(rec[1]), {k: int(v) for k, v in rec[2].items()}, poller)
                    stepped += 1
                elif rec[0] == "stop":
                    send(self.control, [pack(["bye", self.host_id])])
                    return stepped
        finally:
            self.sockets.close()

    def _drain_router(self) -> None:
        while True:
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError as e:
                raise FabricError(f"receive failed: {e}") from None
            self._accept(frames)

    def _accept(self, frames: list[bytes]) -> None:
        """A frame from a peer: kept if it is a valid message from an agent that peer hosts."""
        if len(frames) != 2:
            self.rejected += 1
            return
        sender = frames[0].decode("utf-8", "replace")
        try:
            msg = decode(frames[1])
        except WireError:
            self.rejected += 1
            return
        if self.owner.get(msg.src) != sender or self.owner.get(msg.dst) != self.host_id:
            self.rejected += 1
            return
        self.received.setdefault(msg.tick, {}).setdefault(sender, []).append(msg)

    def _step(self, t: int, expected: dict[str, int], poller: zmq.Poller) -> None:
        # Wait for every message of tick t-1 the other hosts sent here.
        def missing() -> bool:
            got = self.received.get(t - 1, {})
            return any(len(got.get(h, [])) < n for h, n in expected.items())

        while missing():
            if self.router in dict(poller.poll(1000)):
                self._drain_router()
        inbound = [m for msgs in self.received.pop(t - 1, {}).values() for m in msgs] + self.local.pop(t - 1, [])
        boxes: dict[str, list[Message]] = {}
        for m in inbound:
            boxes.setdefault(m.dst, []).append(m)
        sent: dict[str, int] = {}

        def route(msg: Message, frame: bytes) -> bool:
            host = self.owner.get(msg.dst)
            if host == self.host_id:
                self.local.setdefault(t, []).append(decode(frame))  # same bytes as any other hop
            elif host is not None:
                send(self.peers[host], [frame])
                sent[host] = sent.get(host, 0) + 1
            return host is not None

        metrics, events = step_agents(self.agents, self.order, boxes, t, route)
        send(self.control, [pack(["done", t, metrics, events, sent, self.rejected])])
