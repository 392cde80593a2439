"""In-process hosting: every agent of a world in this process, stepped tick by tick.

Messages sent during tick t are delivered at tick t+1, through the same encoding as
the multi-process hosting, ordered by (sender, sequence) so that the result does not
depend on stepping order or hosting.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable

from agents import AGENT_CLASSES, OUTSIDE, Agent, Message, WorldInfo, agent_rng
from orchestrator.hosting.wire import WireError, decode, encode
from orchestrator.engine.world import WorldPlan


@dataclass
class TickResult:
    tick: int
    metrics: dict[str, dict[str, float]]
    events: list[dict]
    outbound: list[Message] = field(default_factory=list)  # sent to OUTSIDE, ordered by (sender, sequence)


def build_agent(kind: str, name: str, spec: dict, info: WorldInfo) -> Agent:
    """An agent with its own RNG stream, whichever host builds it."""
    return AGENT_CLASSES[kind](name, spec, agent_rng(info.seed, name), info)


_BY_SENDER = attrgetter("src", "seq")  # the order every host delivers an inbox in


def step_agents(agents: dict[str, Agent], order: list[str], inboxes: dict[str, list[Message]], t: int,
                route: Callable[[Message, bytes], bool]) -> tuple[dict[str, dict[str, float]], list[dict], list[bytes]]:
    """Step every agent once, in ``order``, with its inbox sorted by (sender, sequence);
    each message it sends goes to ``route(message, encoded)``, which says whether anyone
    hosts the destination, except messages to ``OUTSIDE``, which are returned encoded.
    Both hostings step through here, so they cannot drift apart."""
    metrics: dict[str, dict[str, float]] = {}
    events: list[dict] = []
    outbound: list[bytes] = []
    for name in order:
        inbox = inboxes.get(name, [])
        if len(inbox) > 1:
            inbox = sorted(inbox, key=_BY_SENDER)
        res = agents[name].step(t, inbox)
        metrics[name] = res.metrics
        events.extend(res.events)
        for msg in res.messages:
            if msg.dst == OUTSIDE:
                outbound.append(encode(msg))
            elif not route(msg, encode(msg)):
                events.append({"tick": t, "agent": name, "event": "undeliverable", "dst": msg.dst, "kind": msg.kind})
    return metrics, events, outbound


def leaving(frames: list[bytes]) -> list[Message]:
    """Messages to OUTSIDE in a hosting-independent order."""
    return sorted((decode(f) for f in frames), key=_BY_SENDER)


class InProcessHost:
    """Every agent in this process (a ``host.Host``): the fastest, and the one whose state
    can be snapshot and restored (counterfactuals, forks)."""

    local = True

    def __init__(self, plan: WorldPlan):
        self.plan = plan
        self.agents: dict[str, Agent] = {a.name: build_agent(a.kind, a.name, a.spec, plan.info) for a in plan.agents}
        self.order = [a.name for a in plan.agents]
        self.pending: dict[str, list[bytes]] = {n: [] for n in self.order}
        self.tick = 0
        self.rejected_frames = 0
        self.undeliverable = 0

    def inject(self, frame: bytes) -> None:
        """Deliver an encoded message from outside the world (e.g. a console) in the next
        tick stepped (``self.tick``)."""
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
        inboxes: dict[str, list[Message]] = {}
        for name, frames in delivered.items():
            inbox = inboxes[name] = []
            for frame in frames:
                try:
                    inbox.append(decode(frame))
                except WireError:
                    self.rejected_frames += 1

        def route(msg: Message, frame: bytes) -> bool:
            if msg.dst not in self.pending:
                self.undeliverable += 1
                return False
            self.pending[msg.dst].append(frame)
            return True

        metrics, events, outbound = step_agents(self.agents, self.order, inboxes, t, route)
        self.tick += 1
        return TickResult(t, metrics, events, leaving(outbound))

    def begin(self) -> None:
        """(The two halves of ``step`` that let a session step several hosts at once.)"""

    def finish(self) -> TickResult:
        return self.step()

    def run_ahead(self) -> None:
        """(Every agent steps in this process, when the caller asks.)"""

    def facts(self) -> dict:
        return {}

    def close(self) -> None:
        """(Nothing to release.)"""

    def snapshot(self) -> dict:
        return {"tick": self.tick, "pending": {k: list(v) for k, v in self.pending.items()},
                "agents": {n: a.snapshot() for n, a in self.agents.items()}}

    def restore(self, snap: dict) -> None:
        self.tick = snap["tick"]
        self.pending = {k: list(v) for k, v in snap["pending"].items()}
        for n, s in snap["agents"].items():
            self.agents[n].restore(s)
