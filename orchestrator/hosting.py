"""In-process hosting: every agent of a world in this process, stepped tick by tick.

Messages sent during tick t are delivered at tick t+1, through the same encoding as
the multi-process hosting, ordered by (sender, sequence) so that the result does not
depend on stepping order or hosting.
"""
from __future__ import annotations

from dataclasses import dataclass

from agents import AGENT_CLASSES, Agent, agent_rng
from .wire import WireError, decode, encode
from .world import WorldPlan


@dataclass
class TickResult:
    tick: int
    metrics: dict[str, dict[str, float]]
    events: list[dict]


class InProcessHost:
    def __init__(self, plan: WorldPlan):
        self.plan = plan
        self.agents: dict[str, Agent] = {}
        for a in plan.agents:
            cls = AGENT_CLASSES[a.kind]
            self.agents[a.name] = cls(a.name, a.spec, agent_rng(plan.info.seed, a.name), plan.info)
        self.order = [a.name for a in plan.agents]
        self.pending: dict[str, list[bytes]] = {n: [] for n in self.order}
        self.tick = 0
        self.rejected_frames = 0
        self.undeliverable = 0

    def inject(self, frame: bytes) -> None:
        """Deliver an encoded message from outside the world (e.g. a console) next tick."""
        try:
            msg = decode(frame)
        except WireError:
            self.rejected_frames += 1
            return
        if msg.dst in self.pending:
            self.pending[msg.dst].append(frame)
        else:
            self.undeliverable += 1

    def step(self) -> TickResult:
        t = self.tick
        delivered, self.pending = self.pending, {n: [] for n in self.order}
        metrics: dict[str, dict[str, float]] = {}
        events: list[dict] = []
        for name in self.order:
            inbox = []
            for frame in delivered[name]:
                try:
                    inbox.append(decode(frame))
                except WireError:
                    self.rejected_frames += 1
            inbox.sort(key=lambda m: (m.src, m.seq))
            res = self.agents[name].step(t, inbox)
            metrics[name] = res.metrics
            events.extend(res.events)
            for msg in res.messages:
                if msg.dst in self.pending:
                    self.pending[msg.dst].append(encode(msg))
                else:
                    self.undeliverable += 1
                    events.append({"tick": t, "agent": name, "event": "undeliverable", "dst": msg.dst, "kind": msg.kind})
        self.tick += 1
        return TickResult(t, metrics, events)

    def snapshot(self) -> dict:
        return {"tick": self.tick, "pending": {k: list(v) for k, v in self.pending.items()},
                "agents": {n: a.snapshot() for n, a in self.agents.items()}}

    def restore(self, snap: dict) -> None:
        self.tick = snap["tick"]
        self.pending = {k: list(v) for k, v in snap["pending"].items()}
        for n, s in snap["agents"].items():
            self.agents[n].restore(s)
