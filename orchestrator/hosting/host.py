"""What the tick loop needs of a host, whichever hosting runs the agents, and the one
value that chooses and configures a hosting (``HostingOptions``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from agents import Agent, Message

from orchestrator.engine.world import WorldPlan
from orchestrator.hosting.inprocess import InProcessHost, TickResult
from orchestrator.hosting.ray_hosting import PLACEMENTS

HOSTINGS = ("inprocess", "ray")


class Host(Protocol):
    """A world's agents, stepped a tick at a time (``inprocess.InProcessHost``, or
    ``ray_hosting.RayHost``: Ray actors exchanging ZeroMQ messages)."""

    tick: int  # the next tick to step
    rejected_frames: int  # malformed or misaddressed frames seen so far
    local: bool  # the agents live in this process: ``snapshot``/``restore`` work here

    def inject(self, frame: bytes) -> None:
        """Deliver an encoded message from outside the world in the next tick stepped."""

    def begin(self) -> None:
        """Start stepping tick ``tick`` (a session begins every world before finishing any)."""

    def finish(self) -> TickResult:
        """Collect the tick begun."""

    def step(self) -> TickResult:
        """``begin`` then ``finish``."""

    def run_ahead(self) -> None:
        """Nothing will be injected any more: from now on the host may begin each tick as
        soon as the last is collected, while the caller scores and journals it (the
        results are the same; a host in this process has nothing to overlap)."""

    def facts(self) -> dict:
        """What the run directory's meta.json records of the hosting at the end."""

    def close(self) -> None:
        """Release the processes and sockets (the host steps no more)."""

    # -- hosts whose agents are in this process (``local``) only: what replays, forks,
    # counterfactuals and shared beginnings reach into the world with --------------------

    def snapshot(self) -> dict:
        """The world's state: the tick, the messages on their way and every agent's state."""

    def restore(self, snap: dict) -> None:
        """Back to a ``snapshot`` (or a ``frozen`` one, its agents' states unpickled)."""

    def frozen(self) -> dict:
        """``snapshot`` with the agents' states pickled: plain bytes, for another process."""

    def agent(self, name: str) -> Agent:
        """The agent ``name``."""

    def replace_agent(self, name: str, agent: Agent) -> None:
        """``agent`` plays ``name`` from the next tick on (an operator taking over)."""

    def inbox(self, name: str) -> list[Message]:
        """What ``name`` is delivered in the next tick, in the order it gets it."""

    def drop(self, unwanted: Callable[[Message], bool]) -> None:
        """Take the messages on their way for which ``unwanted`` is true out of the world."""


@dataclass(frozen=True)
class HostingOptions:
    """Where a world's agents run: in this process, or on Ray actors (one per kind of
    agent, per agent, or one for the world) on the cluster at ``address`` (None: the
    RAY_ADDRESS one, else a local Ray), with a snapshot every ``snapshot_every`` ticks to
    replace a lost actor from (None: ``ray_hosting.SNAPSHOT_EVERY``; 0: never)."""

    hosting: str = "inprocess"
    placement: str = "kind"
    address: str | None = None
    snapshot_every: int | None = None

    def __post_init__(self):
        if self.hosting not in HOSTINGS:
            raise ValueError(f"hosting {self.hosting!r}: expected one of {', '.join(HOSTINGS)}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement {self.placement!r}: expected one of {', '.join(PLACEMENTS)}")

    def meta(self) -> dict:
        """What meta.json records of the choice before the run."""
        return {"hosting": self.hosting, "placement": self.placement if self.hosting == "ray" else None}

    def make(self, plan: WorldPlan) -> Host:
        if self.hosting == "inprocess":
            return InProcessHost(plan)
        from orchestrator.hosting.ray_hosting import SNAPSHOT_EVERY, RayHost  # Ray is started only when it is used

        every = SNAPSHOT_EVERY if self.snapshot_every is None else self.snapshot_every
        return RayHost(plan, placement=self.placement, address=self.address, snapshot_every=every)
