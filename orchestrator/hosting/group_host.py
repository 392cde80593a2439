"""A host for some agents of one world: steps them when the orchestrator says so and
exchanges their tick messages with the other hosts directly, over ZeroMQ.

Plain Python, so it can be tested without Ray; ``ray_hosting`` wraps it in a Ray actor.
Tick messages sent at tick t are delivered for tick t+1. Before stepping tick t a host
waits until it holds, from every other host, as many messages of tick t-1 as the
orchestrator says that host sent it (stepping ahead of the orchestrator, ``control.Ahead``:
as that host's own ``Count`` says); inboxes are then sorted by (sender, sequence), as
in process, so the results do not depend on the hosting.

Surviving the loss of a host. Every ``snapshot_every`` ticks a host sends the
orchestrator a snapshot of its agents. Each host also keeps the frames it sent to each
peer since that peer's last snapshot (the orchestrator says which tick that is with
every tick). A replacement host starts from the snapshot, its peers send it their kept
frames again, and it replays the ticks since then; because agents are deterministic it
sends the very messages the lost host sent, which the receivers recognise by (sender,
sequence) and ignore. While waiting, a host sends the orchestrator a heartbeat.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import time
from collections import deque


from agents import PROTOCOL_VERSION, Agent, Message, WorldInfo
from orchestrator.hosting.control import (Ahead, Beat, Bye, Count, Done, Hello, Replayed, Rewire, Snapshot, Stop, Tick,
                                          pack, unpack)
from orchestrator.hosting.fabric import FabricError, Sockets, node_address, poller, ready, recv, recv_nowait, send
from orchestrator.hosting.inprocess import build_agent, checked_copy, step_agents
from orchestrator.hosting.wire import WireError, admit, checking, decode, encode

HEARTBEAT_S = 0.5
COUNT = b"count"  # the middle frame of a Count between hosts (a message has none)


def sign(key: bytes, blob: bytes) -> bytes:
    """Snapshots are pickled; the signature lets only the orchestrator's own hosts make them."""
    return hmac.new(key, blob, hashlib.sha256).digest()


class Stopped(Exception):
    """The orchestrator said stop."""


class GroupHost:
    def __init__(self, host_id: str, info: dict, agents: list[tuple[str, str, dict]], owner: dict[str, str],
                 snapshot_every: int = 0, key: bytes = b"", snapshot: bytes | None = None):
        """``snapshot``: start from this state (a replacement host) instead of tick 0."""
        self.host_id = host_id
        self.info = WorldInfo(**info)
        self.order = [name for _, name, _ in agents]
        self.agents: dict[str, Agent] = {name: build_agent(kind, name, spec, self.info) for kind, name, spec in agents}
        for agent in self.agents.values():  # (compiled code loaded now: no heartbeat goes out during a tick)
            agent.prepare()
        self.owner = owner  # agent name -> host id
        self.snapshot_every = snapshot_every
        self.key = key
        self.sockets = Sockets()
        self.router, self.address = self.sockets.bind_router(node_address())
        self.peers: dict = {}  # peer host -> the DEALER sending to it
        self.control = None  # the DEALER to the orchestrator's control ROUTER
        self.poller = None
        # tick sent -> source host -> (sender agent, sequence) -> message; the key drops repeats
        self.received: dict[int, dict[str, dict[tuple[str, int], Message]]] = {}
        self.local: dict[int, list[Message]] = {}  # messages between agents of this host, by tick sent
        self.kept: dict[str, deque[tuple[int, list[bytes]]]] = {}  # peer -> (tick, frames) sent it since its snapshot
        self.next_tick = 0
        # Stepping ahead (control.Ahead): from tick ahead_from on, Counts go to the peers after
        # each tick, and ticks after it wait for the peers' Counts instead of Tick records.
        self.ahead_from: int | None = None
        self.ahead_expected: dict = {}  # the orchestrator's counts of tick ahead_from - 1
        self.granted = -1  # the last tick it may step ahead
        self.keep_from: dict = {}
        self.counts: dict[int, dict[str, int]] = {}  # tick sent -> peer -> messages it says it sent here
        self.rejected = 0
        self.repeats = 0  # messages received twice (after a replacement host replayed)
        self.last_told = 0.0
        if snapshot is not None:
            self._restore(snapshot)

    # -- set-up (finish these before run) ------------------------------------------------
    def where(self) -> dict:
        """The process and Ray node this host runs in (for diagnostics and placement checks)."""
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
        self.poller = poller(self.control, self.router)
        self._tell(Hello(self.host_id, PROTOCOL_VERSION, self.next_tick))

    # -- the loop --------------------------------------------------------------------------
    def run(self, replay: dict | None = None) -> int:
        """Serve the orchestrator until it says stop; returns the ticks stepped.
        ``replay`` (a replacement host): {"through": last tick to replay, "counts":
        {tick sent: {peer: messages it sent here}} up to the first tick stepped ahead,
        "injected": {tick: frames from outside}, "ahead_from": that tick, or None}."""
        stepped = 0
        try:
            if replay is not None:
                if replay.get("ahead_from") is not None:
                    self.ahead_from = int(replay["ahead_from"])
                stepped += self._replay(int(replay["through"]), replay["counts"], replay["injected"])
            while True:
                rec = self._wait(lambda: self.next_tick <= self.granted)
                if rec is None:  # a tick granted ahead
                    t = self.next_tick
                    expected = self.ahead_expected if t == self.ahead_from else None
                    metrics, events, sent, outbound = self._step(t, expected, self.keep_from, [])
                    self._tell(Done(t, metrics, events, sent, self.rejected, outbound))
                    stepped += 1
                elif isinstance(rec, Tick) and int(rec.tick) >= self.next_tick:  # (not a repeat)
                    t = int(rec.tick)
                    metrics, events, sent, outbound = self._step(t, rec.expected, rec.keep_from, rec.injected)
                    self._tell(Done(t, metrics, events, sent, self.rejected, outbound))
                    stepped += 1
        except Stopped:
            self._tell(Bye(self.host_id))
            return stepped
        finally:
            self.sockets.close()

    def _wait(self, satisfied) -> tuple | None:
        """Receive peers' frames until ``satisfied()`` or a control record that is not
        handled here (returned); heartbeats go out meanwhile."""
        while not satisfied():
            readable = ready(self.poller, HEARTBEAT_S)
            if self.router in readable:
                self._drain_router()
            if self.control in readable:
                rec = unpack(recv(self.control)[0])
                if isinstance(rec, Stop):
                    raise Stopped()
                if isinstance(rec, Rewire):
                    self._rewire(str(rec.host), str(rec.endpoint), int(rec.since))
                elif isinstance(rec, Ahead):
                    self._grant(rec)
                else:
                    return rec
            self._beat_if_due()
        return None

    def _grant(self, rec: Ahead) -> None:
        if self.next_tick <= int(rec.first):  # (a replacement may learn it only after replaying)
            self.ahead_from, self.ahead_expected = int(rec.first), dict(rec.expected)
        self.granted = max(self.granted, int(rec.through))
        self.keep_from = dict(rec.keep_from)

    def _beat_if_due(self) -> None:
        if time.monotonic() - self.last_told > HEARTBEAT_S:
            self._tell(Beat(self.host_id))

    def _tell(self, record: tuple) -> None:
        send(self.control, [pack(record)])
        self.last_told = time.monotonic()

    def _drain_router(self) -> None:
        while True:
            frames = recv_nowait(self.router)
            if frames is None:
                return
            self._accept(frames)

    def _accept(self, frames: list[bytes]) -> None:
        """A frame from a peer: kept if it is a valid message from an agent that peer hosts,
        or a Count from a peer."""
        if len(frames) == 3 and frames[1] == COUNT:
            self._accept_count(frames[0].decode("utf-8", "replace"), frames[2])
            return
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
        if msg.tick < self.next_tick - 1:  # already delivered: a replayed repeat
            self.repeats += 1
            return
        held = self.received.setdefault(msg.tick, {}).setdefault(sender, {})
        if (msg.src, msg.seq) in held:
            self.repeats += 1
        held[(msg.src, msg.seq)] = msg

    def _accept_count(self, sender: str, payload: bytes) -> None:
        try:
            rec = unpack(payload)
        except ValueError:
            rec = None
        if not (isinstance(rec, Count) and sender in self.peers and isinstance(rec.tick, int) and isinstance(rec.sent, int)):
            self.rejected += 1
            return
        if rec.tick >= self.next_tick - 1:  # (else already used: a replayed repeat)
            self.counts.setdefault(rec.tick, {})[sender] = rec.sent

    def _step(self, t: int, expected: dict | None, keep_from: dict | None, injected: list) -> tuple[dict, list, dict, list]:
        """Step tick t. ``expected``: how many messages of tick t-1 each other host sent
        here (None: as the peers' Counts say). ``injected``: frames from outside the world
        for agents here, to be consumed this tick."""
        if keep_from is not None:
            for peer, frames in self.kept.items():
                first = int(keep_from.get(peer, 0)) - 1
                while frames and frames[0][0] < first:
                    frames.popleft()

        # Wait for every message of tick t-1 the other hosts sent here.
        def arrived() -> bool:
            counts = self.counts.get(t - 1, {}) if expected is None else expected
            if expected is None and len(counts) < len(self.peers):
                return False
            got = self.received.get(t - 1, {})
            return all(len(got.get(h, ())) >= int(n) for h, n in counts.items())

        rec = self._wait(arrived)
        if rec is not None:
            raise FabricError(f"host {self.host_id}: unexpected control record {type(rec).__name__} during tick {t}")
        self.counts.pop(t - 1, None)
        inbound = [m for held in self.received.pop(t - 1, {}).values() for m in held.values()] + self.local.pop(t - 1, [])
        for frame in injected:
            try:
                msg = decode(frame)
            except WireError:
                self.rejected += 1
                continue
            if self.owner.get(msg.dst) == self.host_id:
                inbound.append(msg)
            else:
                self.rejected += 1
        self.next_tick = t + 1
        boxes: dict[str, list[Message]] = {}
        for m in inbound:
            boxes.setdefault(m.dst, []).append(m)
        sent: dict[str, int] = {}
        hand_over = checked_copy if checking() else admit

        def route(msg: Message) -> bool:
            host = self.owner.get(msg.dst)
            if host is None:
                return False
            if host == self.host_id:
                try:  # handed over as in process: a message never changes once sent
                    self.local.setdefault(t, []).append(hand_over(msg))
                except WireError:
                    self.rejected += 1
            else:
                self._send_peer(host, t, [encode(msg)])
                sent[host] = sent.get(host, 0) + 1
            return True

        metrics, events, to_outside = step_agents(self.agents, self.order, boxes, t, route)
        if self.ahead_from is not None and t >= self.ahead_from:
            for peer in self.peers:
                self._send_peer(peer, t, [COUNT, pack(Count(t, sent.get(peer, 0)))])
        outbound = [encode(m) for m in to_outside]
        if self.snapshot_every and (t + 1) % self.snapshot_every == 0:
            blob = self._snapshot(t + 1)
            self._tell(Snapshot(self.host_id, t + 1, blob, sign(self.key, blob)))  # before "done", on one socket
        return metrics, events, sent, outbound

    def _send_peer(self, peer: str, t: int, frames: list[bytes]) -> None:
        send(self.peers[peer], frames)
        if self.snapshot_every:
            self.kept.setdefault(peer, deque()).append((t, frames))

    # -- replacement ------------------------------------------------------------------------
    def _snapshot(self, tick: int) -> bytes:
        state = {"tick": tick, "agents": {n: a.state_to_serialise() for n, a in self.agents.items()},  # pickled at once: no copy
                 "local": self.local, "kept": self.kept}
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)

    def _restore(self, blob: bytes) -> None:
        state = pickle.loads(blob)  # signed by a host of this run; checked by the orchestrator
        for name, agent_state in state["agents"].items():
            self.agents[name].restore(agent_state)
        self.local, self.kept = state["local"], state["kept"]
        self.next_tick = int(state["tick"])

    def _replay(self, through: int, counts: dict, injected: dict) -> int:
        """Step again every tick from the snapshot up to ``through``; the messages go out
        again (receivers drop repeats), the metrics, events and messages to outside the
        world were taken already."""
        start = self.next_tick
        for peer, kept in self.kept.items():  # a peer replaying too may need them; repeats are dropped
            for _, frames in kept:
                send(self.peers[peer], frames)
        for t in range(start, through + 1):  # (the orchestrator's counts up to the first tick stepped ahead)
            ahead = self.ahead_from is not None and t > self.ahead_from
            self._step(t, None if ahead else counts.get(t - 1, {}), None, injected.get(t, []))
            self._beat_if_due()
        self._tell(Replayed(self.host_id, through))
        return through + 1 - start

    def _rewire(self, host: str, endpoint: str, since: int) -> None:
        """``host`` was replaced: send to its new address, and send it again what it
        needs to replay from its snapshot at tick ``since``."""
        self.sockets.drop(self.peers[host])  # (the orchestrator never sends a host its own rewire)
        self.peers[host] = self.sockets.connect_dealer(endpoint, self.host_id.encode())
        for tick, frames in self.kept.get(host, []):
            if tick >= since - 1:
                send(self.peers[host], frames)
