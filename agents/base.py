"""The contract every simulated part follows.

An agent is a pure step machine: built from its playbook section and a seeded
``numpy.random.Generator``, it consumes the messages addressed to it for tick *t*
and returns the messages it sends, its metrics and its events for that tick.
No clocks, sockets or Ray in here: the hosting layer moves the messages.
"""
from __future__ import annotations

import copy
import functools
import math
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .draws import Draws
from .shards import apply_to_shards

#: Bumped whenever a message body changes shape; hosts refuse other versions.
PROTOCOL_VERSION = 4

#: The world's boundary. Messages an agent sends here leave the world (to a team's
#: console); messages from here come in from outside (a team's commands, a facilitator's
#: fault), each stamped by the hosting with the tick that consumes it.
OUTSIDE = "outside"

#: The unit of a share from 0 to 1 in an agent's METRICS; consoles and pages draw it from 0 to 100%.
RATIO = "ratio"

#: How a METRICS unit ends for a count of what happened during one tick (requests sent,
#: setups failed): metrics.csv holds it per tick, and monitoring's view per second, so
#: that an alarm's or a rule's threshold means the same at any tick.
PER_TICK = " per tick"


def per_second(unit: str) -> str:
    """A METRICS unit as monitoring's view (alarms, runbook conditions) holds it."""
    return unit[:-len(PER_TICK)] + " per second" if unit.endswith(PER_TICK) else unit

#: The unit of an operation's argument that is a clock time: seconds after midnight of the run's
#: first day, written in a playbook as "14:00" (validation converts it)
CLOCK = "clock time"

#: How the requests a fault (toxic) hits fail: their callers wait out their timeout, or are refused at once.
FAULT_KINDS = ("timeout", "error")


@dataclass(frozen=True)
class Arg:
    """What one argument of an operation means. Its type and default are the ``op_``
    method's signature (one source); this adds the meaning, unit and range that the
    playbook reference prints and validation checks before a run."""
    doc: str
    unit: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    names: str = ""  # the kind of thing each value names (device, service, trigger, fault): validation checks it exists

    def problem(self, value) -> str | None:
        """What was expected, if ``value`` is not among the choices (each of a list's, for a
        list) or outside the range; None if it fits. Its type is the signature's to check."""
        if self.choices is not None and isinstance(value, list):
            if any(not isinstance(v, str) or v not in self.choices for v in value):
                return "a list of " + ", ".join(map(str, self.choices))
        elif self.choices is not None and value not in self.choices:
            return "one of " + ", ".join(map(str, self.choices))
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                return "a finite number"
            if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
                return self.describe_range()
        return None

    def describe_range(self) -> str:
        if self.min is not None and self.max is not None:
            return f"a number from {self.min:g} to {self.max:g}"
        if self.min is not None:
            return f"a number >= {self.min:g}"
        return f"a number <= {self.max:g}"


@dataclass(frozen=True)
class Operation:
    """What an ``op_`` method does (its docstring), an example of its arguments, their
    meanings, and the field of its agent's spec it acts on, if it needs one."""
    doc: str
    example: dict
    args: dict
    needs: str | None = None


def operation(example: dict | None = None, needs: str | None = None, **args: Arg):
    """Declares an ``op_`` method an operation a playbook can apply (in a trigger, mitigation
    or fault), with one example of its arguments and what each argument means. ``needs``:
    the field of the agent's spec (``cache``) without which the operation has nothing to act
    on, so that a playbook applying it to an agent without one is warned before a run."""
    def mark(fn):
        fn.operation = Operation(doc=" ".join((fn.__doc__ or "").split()), example=dict(example or {}), args=args,
                                 needs=needs)
        return fn
    return mark


class BadArgument(ValueError):
    """An operation's argument out of its range (a throttle below 0, a share above 1): the
    operation is rejected and journalled, the world goes on."""


def in_ticks(seconds, dt: float) -> int:
    """A duration as a whole number of ticks, at least one."""
    return max(1, round(float(seconds) / dt))


def share_or_rate(name: str, value, high: float | None = None) -> float:
    """``value`` as a number from 0 (to ``high``), or BadArgument naming it."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = float("nan")
    if not (x >= 0.0 and (high is None or x <= high)):
        raise BadArgument(f"{name} {value!r}: expected a number from 0" + (f" to {high:g}" if high is not None else ""))
    return x


@dataclass
class Message:
    """One tick message between agents. ``body`` holds only plain data (str, int, float,
    bool, None, lists and dicts of them) and is never changed once sent, by its sender or
    its receivers: in one process it is delivered as it is, not as a decoded copy."""

    kind: str
    src: str
    dst: str
    body: dict
    seq: int = 0
    tick: int = 0


@dataclass
class StepResult:
    messages: list[Message] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class WorldInfo:
    """What every agent may know about the world it lives in."""

    dt: float  # seconds per tick
    start_s: float  # clock time of tick 0, seconds after midnight
    seed: int

    def clock(self, tick: int) -> float:
        return self.start_s + tick * self.dt


@dataclass(frozen=True)
class Wiring:
    """How the world builder (orchestrator.engine.world) connected an agent. Every agent of
    a world gets a complete one; ``UNWIRED`` is what an agent built alone is connected to."""

    health_subscribers: tuple[str, ...]  # who hears this agent's health (its dependants)
    monitor: str | None  # where its telemetry goes
    telemetry: tuple[str, ...]  # which of its metrics monitoring observes
    telemetry_every: int  # ticks between two telemetry reports
    operators: tuple[str, ...]  # who monitoring publishes its view and alarms to
    deployment: str | None  # where an operator's action requests go
    shards: dict[str, list[tuple[str, float]]]  # sharded population -> (its shard, share of its clients)
    initial_connections: dict[str, int]  # a device's connections held at tick 0: source -> count


#: Connected to nothing: no dependants, no monitoring, no operators, no shards.
UNWIRED = Wiring(health_subscribers=(), monitor=None, telemetry=(), telemetry_every=1, operators=(), deployment=None,
                 shards={}, initial_connections={})


def agent_rng(seed: int, name: str) -> np.random.Generator:
    """An RNG stream per agent that depends only on the world seed and the agent name,
    so results do not depend on how agents are grouped onto processes."""
    key = zlib.crc32(name.encode("utf-8"))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy=seed, spawn_key=(key,))))


#: an agent's attributes that are not its state: what it was built with, and its generator
#: (whose state a snapshot holds as ``__rng__``) with the ``Draws`` on it
_NOT_STATE = ("rng", "draws", "spec", "world")


class Agent:
    """Base class: subclasses implement ``step`` and, if mitigations can target them, ``apply``."""

    kind = "agent"
    #: attributes that are caches of what the state determines: left out of snapshots (they
    #: may hold C handles) and emptied by ``restore``
    DERIVED: tuple[str, ...] = ()
    #: metric name -> (unit, meaning); documented in the run directory's columns.json
    METRICS: dict[str, tuple[str, str]] = {}

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        self.name = name
        self.spec = spec
        self.rng = rng
        self.draws = Draws(rng)  # the same generator, drawn on without numpy's per-call overhead
        self.world = world
        self.wiring: Wiring = spec["_wiring"]
        self._seq = 0
        self._outbox: list[Message] = []
        self._events: list[dict] = []

    # -- helpers for subclasses -------------------------------------------------
    def send(self, dst: str, kind: str, body: dict, tick: int) -> None:
        self._seq += 1
        self._outbox.append(Message(kind, self.name, dst, body, self._seq, tick))

    def event(self, tick: int, kind: str, **data: Any) -> None:
        self._events.append({"tick": tick, "agent": self.name, "event": kind, **data})

    def finish(self, metrics: dict[str, float]) -> StepResult:
        out = StepResult(messages=self._outbox, metrics=metrics, events=self._events)
        self._outbox, self._events = [], []
        return out

    def send_apply(self, target: str, op: str, args: dict, by: str, tick: int) -> None:
        """An operation for ``target``; a sharded population gets it on every shard."""
        shards = self.wiring.shards.get(target)
        for dst, part in apply_to_shards(op, args, shards) if shards else [(target, args)]:
            self.send(dst, "apply", {"op": op, "args": part, "by": by}, tick)

    def report(self, tick: int, metrics: dict[str, float]) -> None:
        """Send this tick's telemetry to monitoring, if it is due: counts per tick as rates
        per second (``PER_TICK``)."""
        w = self.wiring
        if w.monitor and w.telemetry and tick % w.telemetry_every == 0:
            per_tick, dt = _per_tick_metrics(type(self)), self.world.dt
            self.send(w.monitor, "telemetry", {"at": tick, "values": {
                m: float(metrics[m]) / dt if m in per_tick else float(metrics[m]) for m in w.telemetry}}, tick)

    def send_flow(self, hops: list, tick: int, requests: int, setups: int = 0, coupled: int = 0, closes: int = 0,
                  ct: float = 5.0, rt: float = 5.0) -> None:
        """One tick's traffic of this agent along ``hops`` (devices, then maybe a service);
        ct and rt are the callers' connect and request timeouts."""
        self.send(hops[0], "flow", {
            "origin": self.name, "sent": tick, "hops": hops[1:], "setups": setups, "requests": requests,
            "coupled": coupled, "closes": closes, "ct": ct, "rt": rt,
            "s_fail": 0, "s_rej": 0, "r_fail": 0, "r_rej": 0, "r_full": 0, "delay": 0.0}, tick)

    def handle_apply(self, tick: int, body: dict) -> None:
        op = body.get("op")
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            self.event(tick, "apply_rejected", op=op, reason=f"{self.kind} {self.name!r} has no operation {op!r}")
            return
        args = body.get("args") or {}
        declared = getattr(handler, "operation", None)
        try:
            for name, value in args.items():  # the declared choices and ranges, as validation checks them
                about = declared.args.get(name) if declared is not None else None
                expected = about.problem(value) if about is not None and value is not None else None
                if expected:
                    raise BadArgument(f"{name} {value!r}: expected {expected}")
            handler(tick, **args)
        except BadArgument as e:
            self.event(tick, "apply_rejected", op=op, reason=str(e), by=body["by"])
            return
        self.event(tick, "applied", op=op, args=body.get("args") or {}, by=body["by"])

    # -- the contract -------------------------------------------------------------
    def step(self, tick: int, inbox: list[Message]) -> StepResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def prepare(self) -> None:
        """Make ready now what a tick would otherwise make ready in it (compiled code), and
        change nothing of the agent: a Ray host calls it as it starts, since a host silent
        for a few seconds during a tick is taken for lost."""

    def state_to_serialise(self) -> dict:
        """The agent's whole state, RNG included, as it is (not copied): for a caller that
        serialises it at once (a Ray host's snapshot is pickled)."""
        state = {k: v for k, v in self.__dict__.items() if k not in _NOT_STATE and k not in self.DERIVED}
        state["__rng__"] = self.rng.bit_generator.state
        return state

    def snapshot(self) -> dict:
        """The agent's whole state, RNG included, as a deep copy."""
        return {k: copy.deepcopy(v) for k, v in self.state_to_serialise().items()}

    def restore(self, state: dict) -> None:
        state = copy.deepcopy(state)
        self.rng.bit_generator.state = state.pop("__rng__")
        self.__dict__.update(state)
        for name in self.DERIVED:
            getattr(self, name).clear()


@functools.lru_cache(maxsize=None)
def _per_tick_metrics(cls: type) -> frozenset:
    return frozenset(m for m, (unit, _) in cls.METRICS.items() if unit.endswith(PER_TICK))
