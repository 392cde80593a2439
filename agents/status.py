"""The status dashboard: a customer update is posted only when its backend path works.

Posting crosses ``path``; when it keeps failing for ``failover.after`` seconds the
dashboard tries to fail over to its standby, which itself needs ``failover.path`` (in
2021 the standby had to be reached across the congested bridge).
"""
from __future__ import annotations

import numpy as np

from .base import Agent, Arg, Message, StepResult, WorldInfo, in_ticks, operation


class StatusDashboard(Agent):
    kind = "status"
    METRICS = {
        "pending_updates": ("count", "customer updates waiting to be posted"),
        "posted": ("count", "customer updates posted so far"),
        "on_standby": ("flag", "1 once the dashboard runs from its standby"),
    }

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        dt = world.dt
        self.path = list(spec["path"])
        self.timeout = float(spec["timeout"])
        self.calls = int(spec["calls"])  # backend calls one post needs; all must succeed
        self.retry_ticks = in_ticks(spec["retry_delay"], dt)
        fo = spec.get("failover") or {}
        self.failover_after = round(float(fo["after"]) / dt) if fo else None
        self.failover_path = list(fo.get("path") or [])
        self.standby_path = list(fo.get("standby_path") or [])
        self.pending: list[dict] = []
        self.posted = 0
        self.on_standby = False
        self.failing_since: int | None = None
        self.next_try = 0
        self.inflight: dict[int, tuple[str, list[dict]]] = {}

    @operation(example={"message": "We are investigating increased error rates in US-EAST-1.", "by": "$requester"},
               message=Arg("the update's text"),
               by=Arg("who asked for it (journalled with the post): the requester"))
    def op_post(self, tick: int, message: str = "", by: str = "") -> None:
        """Queue a customer update on the status dashboard; it is posted once its backend calls
        get through (the first post after the trigger is the first customer update)."""
        self.pending.append({"message": message, "asked": tick, "by": by})

    def _send_flow(self, tick: int, path: list, n: int) -> None:
        self.send_flow(path, tick, n, ct=self.timeout, rt=self.timeout)

    def _posted(self, tick: int, updates: list[dict]) -> None:
        for u in updates:
            self.posted += 1
            self.event(tick, "status_posted", message=u["message"], asked_tick=u["asked"], by=u["by"])

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        for msg in inbox:
            if msg.kind == "apply":
                self.handle_apply(tick, msg.body)
            elif msg.kind == "flow_result":
                what, updates = self.inflight.pop(int(msg.body["sent"]), ("", []))
                ok = int(msg.body["r_ok"]) >= (1 if what == "failover" else self.calls)
                if what == "failover":
                    if ok:
                        self.on_standby = True
                        self.path = self.standby_path
                        self.event(tick, "status_failover", to="standby")
                elif ok:
                    self._posted(tick, updates)
                    self.failing_since = None
                else:
                    self.pending = updates + self.pending
                    if self.failing_since is None:
                        self.failing_since = tick
                if not ok:
                    self.next_try = tick + self.retry_ticks

        if self.pending and tick >= self.next_try and not self.inflight:
            if (self.failover_after is not None and not self.on_standby and self.failing_since is not None
                    and tick - self.failing_since >= self.failover_after):
                if self.failover_path:
                    self.inflight[tick] = ("failover", [])
                    self._send_flow(tick, self.failover_path, 1)
                else:
                    self.on_standby, self.path = True, self.standby_path
                    self.event(tick, "status_failover", to="standby")
            elif self.path:
                self.inflight[tick] = ("post", self.pending)
                self.pending = []
                self._send_flow(tick, self.path, self.calls)
            else:
                self._posted(tick, self.pending)
                self.pending = []
        return self.finish({"pending_updates": len(self.pending), "posted": self.posted,
                            "on_standby": int(self.on_standby)})
