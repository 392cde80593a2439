"""In-process hosting: every agent of a world in this process, stepped tick by tick.

Messages sent during tick t are delivered at tick t+1, ordered by (sender, sequence) so
that the result does not depend on stepping order or hosting. They are handed over as
they are, after the checks decoding would make (``wire.admit``); with
``GAMEDAY_WIRE_CHECK=1``, as decoded copies checked against what was sent.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable

from agents import AGENT_CLASSES, OUTSIDE, Agent, Message, WorldInfo, agent_rng
from orchestrator.hosting.wire import WireError, admit, checking, decode, encode, same
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


def load_kernels(plan: WorldPlan) -> None:
    """Prepare one agent of each kind of ``plan`` in this process (``Agent.prepare``), so that
    the processes started next to play it load its compiled kernels from the cache. Left to
    compile them themselves, the first time on a machine, they would do it at once and write
    the same cache, which can crash one of them (numba issue 4807)."""
    first = {}
    for a in plan.agents:
        first.setdefault(a.kind, a)
    for a in first.values():
        build_agent(a.kind, a.name, a.spec, plan.info).prepare()


_BY_SENDER = attrgetter("src", "seq")  # the order every host delivers an inbox in


def step_agents(agents: dict[str, Agent], order: list[str], inboxes: dict[str, list[Message]], t: int,
                route: Callable[[Message], bool]) -> tuple[dict[str, dict[str, float]], list[dict], list[Message]]:
    """Step every agent once, in ``order``, with its inbox sorted by (sender, sequence);
    each message it sends goes to ``route(message)``, which says whether anyone hosts the
    destination, except messages to ``OUTSIDE``, which are returned.
    Both hostings step through here, so they cannot drift apart."""
    metrics: dict[str, dict[str, float]] = {}
    events: list[dict] = []
    outbound: list[Message] = []
    for name in order:
        inbox = inboxes.get(name, [])
        if len(inbox) > 1:
            inbox = sorted(inbox, key=_BY_SENDER)
        res = agents[name].step(t, inbox)
        metrics[name] = res.metrics
        events.extend(res.events)
        for msg in res.messages:
            if msg.dst == OUTSIDE:
                outbound.append(msg)
            elif not route(msg):
                events.append({"tick": t, "agent": name, "event": "undeliverable", "dst": msg.dst, "kind": msg.kind})
    return metrics, events, outbound


def leaving(messages: list[Message]) -> list[Message]:
    """Messages to OUTSIDE in a hosting-independent order."""
    return sorted(messages, key=_BY_SENDER)


def checked_copy(msg: Message) -> Message:
    """``msg`` through the wire, as another process would receive it: ``WireError`` where
    ``admit`` refuses it, an error where the wire would not give back what ``admit``
    lets through (a body that is not plain data)."""
    admit(msg)
    try:
        copy = decode(encode(msg))
    except (TypeError, ValueError, OverflowError) as e:  # (WireError is a ValueError)
        raise AssertionError(f"{msg.src} sent a {msg.kind} that does not go through the wire: {e}") from None
    if not same([copy.kind, copy.src, copy.dst, copy.seq, copy.tick, copy.body], [msg.kind, msg.src, msg.dst, msg.seq, msg.tick, msg.body]):
        raise AssertionError(f"{msg.src} sent a {msg.kind} whose decoded copy differs: {msg.body!r} -> {copy.body!r}")
    return copy


class InProcessHost:
    """Every agent in this process (a ``host.Host``): the fastest, and the one whose state
    can be snapshot and restored (counterfactuals, forks)."""

    local = True

    def __init__(self, plan: WorldPlan):
        self.plan = plan
        self.agents: dict[str, Agent] = {a.name: build_agent(a.kind, a.name, a.spec, plan.info) for a in plan.agents}
        self.order = [a.name for a in plan.agents]
        self.pending: dict[str, list[Message]] = {n: [] for n in self.order}  # delivered at tick ``tick``
        self.tick = 0
        self.rejected_frames = 0
        self.undeliverable = 0
        self.hand_over = checked_copy if checking() else admit

    def inject(self, frame: bytes) -> None:
        """Deliver an encoded message from outside the world (e.g. a console) in the next
        tick stepped (``self.tick``)."""
        try:
            msg = decode(frame)
        except WireError:
            self.rejected_frames += 1
            return
        if msg.dst in self.pending:
            self.pending[msg.dst].append(msg)
        else:
            self.undeliverable += 1

    def step(self) -> TickResult:
        t = self.tick
        inboxes, self.pending = self.pending, {n: [] for n in self.order}
        hand_over = self.hand_over

        def route(msg: Message) -> bool:
            box = self.pending.get(msg.dst)
            if box is None:
                self.undeliverable += 1
                return False
            try:
                box.append(hand_over(msg))
            except WireError:
                self.rejected_frames += 1
            return True

        metrics, events, outbound = step_agents(self.agents, self.order, inboxes, t, route)
        self.tick += 1
        return TickResult(t, metrics, events, leaving([hand_over(m) for m in outbound]))

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

    def agent(self, name: str) -> Agent:
        return self.agents[name]

    def replace_agent(self, name: str, agent: Agent) -> None:
        self.agents[name] = agent

    def inbox(self, name: str) -> list[Message]:
        """What ``name`` is delivered in the next tick, in the order it gets it."""
        return sorted(self.pending.get(name, []), key=_BY_SENDER)

    def drop(self, unwanted: Callable[[Message], bool]) -> None:
        """Take the messages on their way for which ``unwanted`` is true out of the world."""
        for dst, messages in self.pending.items():
            self.pending[dst] = [m for m in messages if not unwanted(m)]

    def frozen(self) -> dict:
        """``snapshot`` with the agents' states pickled at once (a deep copy of a large
        world's state costs several times as much); ``restore`` takes it unpickled."""
        return {"tick": self.tick, "pending": self._frames(),
                "agents": pickle.dumps({n: a.state_to_serialise() for n, a in self.agents.items()})}

    def snapshot(self) -> dict:
        return {"tick": self.tick, "pending": self._frames(), "agents": {n: a.snapshot() for n, a in self.agents.items()}}

    def _frames(self) -> dict[str, list[bytes]]:
        """The messages on their way, as frames: a restored world gets its own copies."""
        return {k: [encode(m) for m in v] for k, v in self.pending.items()}

    def restore(self, snap: dict) -> None:
        self.tick = snap["tick"]
        self.pending = {k: [decode(f) for f in v] for k, v in snap["pending"].items()}
        for n, s in snap["agents"].items():
            self.agents[n].restore(s)
