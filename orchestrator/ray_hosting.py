"""Multi-process hosting: the agents of a world on Ray actors, their tick messages on ZeroMQ.

The orchestrator places agents on hosts (``placement``), starts one Ray actor per host,
tells each host where the others are, and then runs the tick barrier itself over a
ZeroMQ control socket: tick t starts when every host has finished t-1. Ray carries only
set-up and tear-down calls; nothing per tick goes through Ray. ``RayHost`` has the same
``step()`` as ``InProcessHost``, and gives the same results.
"""
from __future__ import annotations

import dataclasses
import time
import uuid

import zmq

from .fabric import FabricError, Sockets, node_address, pack, recv, send, unpack
from .hosting import TickResult
from .world import WorldPlan

PLACEMENTS = ("kind", "agent", "single")
NAMESPACE = "gameday"
ACTOR_PREFIX = "gameday:"  # actors are named gameday:<run>:<host>, so that leftovers can be found
START_TIMEOUT_S = 120.0
TICK_TIMEOUT_S = 60.0


class HostingError(RuntimeError):
    pass


def place(plan: WorldPlan, placement: str) -> dict[str, list]:
    """Host id -> the agents it hosts: one host per kind of agent, per agent, or one for all."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r}: expected one of {', '.join(PLACEMENTS)}")
    groups: dict[str, list] = {}
    for a in plan.agents:
        host = {"kind": a.kind.split(":")[0], "agent": a.name, "single": "world"}[placement]
        groups.setdefault(host, []).append(a)
    return groups


def ensure_ray(address: str | None = None):
    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, logging_level="WARNING", log_to_driver=True,
                 configure_logging=True)
    return ray


class RayHost:
    def __init__(self, plan: WorldPlan, placement: str = "kind", address: str | None = None, spread: bool = False):
        """``spread``: ask Ray to put the hosts on as many nodes as it can."""
        self.plan = plan
        self.groups = place(plan, placement)
        self.owner = {a.name: host for host, agents in self.groups.items() for a in agents}
        self.index = {a.name: i for i, a in enumerate(plan.agents)}
        self.tick = 0
        self.rejected_frames = 0  # malformed frames: the hosts' and the control socket's
        self.control_rejected = 0
        self.expected: dict[str, dict[str, int]] = {h: {} for h in self.groups}
        self.sockets = Sockets()
        self.actors: dict = {}
        self.endpoints: dict[str, str] = {}  # host -> its ROUTER, where the other hosts send
        self.where: dict[str, dict] = {}  # host -> its process id, Ray node and endpoint
        self.loops: list = []
        self.spread = spread
        self.ray = ensure_ray(address)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        ray = self.ray
        from .group_host import GroupHost

        actor_cls = ray.remote(num_cpus=0, max_restarts=0)(GroupHost)
        run_id = uuid.uuid4().hex[:8]
        self.control, control_endpoint = self.sockets.bind_router(node_address())
        info = dataclasses.asdict(self.plan.info)
        for host, agents in self.groups.items():
            options = {"scheduling_strategy": "SPREAD"} if self.spread else {}
            self.actors[host] = actor_cls.options(name=f"{ACTOR_PREFIX}{run_id}:{host}", namespace=NAMESPACE,
                                                  **options).remote(
                host, info, [(a.kind, a.name, a.spec) for a in agents], self.owner)
        self.where = dict(zip(self.actors, ray.get([a.where.remote() for a in self.actors.values()],
                                                   timeout=START_TIMEOUT_S)))
        self.endpoints = {host: w["endpoint"] for host, w in self.where.items()}
        ray.get([a.connect.remote(self.endpoints, control_endpoint) for a in self.actors.values()],
                timeout=START_TIMEOUT_S)
        waiting = set(self.actors)
        deadline = time.monotonic() + START_TIMEOUT_S
        while waiting:
            ident, rec = self._receive(deadline)
            if rec[0] == "hello":
                waiting.discard(ident)
        # Set-up calls are done: now each actor's run() may block its method queue.
        self.loops = [a.run.remote() for a in self.actors.values()]

    def _receive(self, deadline: float) -> tuple[str, list]:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._raise_if_a_host_died()
                raise HostingError("hosts did not answer in time")
            if self.control.poll(int(min(left, 1.0) * 1000)):
                frames = recv(self.control)
                try:
                    return frames[0].decode(), unpack(frames[-1])
                except ValueError:
                    self.control_rejected += 1
                    continue
            self._raise_if_a_host_died()

    def _raise_if_a_host_died(self) -> None:
        if not self.loops:
            return
        done, _ = self.ray.wait(self.loops, timeout=0)
        for ref in done:
            self.ray.get(ref)  # raises the host's error if it failed
            raise HostingError("a host stopped before it was told to")

    def step(self) -> TickResult:
        t = self.tick
        for host in self.groups:
            send(self.control, [host.encode(), pack(["tick", t, self.expected[host]])])
        metrics: dict[str, dict[str, float]] = {}
        events: list[dict] = []
        expected: dict[str, dict[str, int]] = {h: {} for h in self.groups}
        rejected = 0
        waiting = set(self.groups)
        deadline = time.monotonic() + TICK_TIMEOUT_S
        while waiting:
            host, rec = self._receive(deadline)
            if rec[0] != "done" or rec[1] != t or host not in waiting:
                self.control_rejected += 1
                continue
            waiting.discard(host)
            metrics.update(rec[2])
            events.extend(rec[3])
            for dst, n in rec[4].items():
                expected[dst][host] = n
            rejected += rec[5]
        self.expected = expected
        self.rejected_frames = rejected + self.control_rejected
        self.tick += 1
        ordered = {name: metrics[name] for name in sorted(metrics, key=self.index.__getitem__)}
        events.sort(key=lambda e: self.index.get(e["agent"], len(self.index)))  # stable: each agent's own order
        return TickResult(t, ordered, events)

    def close(self) -> None:
        """Ask every host to stop, wait a little, then kill what is left."""
        if self.loops:
            try:
                for host in self.groups:
                    send(self.control, [host.encode(), pack(["stop"])])
                self.ray.wait(self.loops, num_returns=len(self.loops), timeout=5.0)
            except (FabricError, zmq.ZMQError):
                pass
        for actor in self.actors.values():
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors, self.loops = {}, []
        if self.sockets.all:
            self.sockets.close()
