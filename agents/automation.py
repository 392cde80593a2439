"""The scenario's own automation: scheduled triggers (e.g. the scaling activity that
set off the 2021 surge), sent as ``apply`` messages to their targets. A mitigation can
disable a trigger, like any other piece of automation."""
from __future__ import annotations

import numpy as np

from .base import Agent, Message, StepResult, WorldInfo


class Automation(Agent):
    kind = "automation"
    METRICS = {"fired": ("count", "triggers fired this tick"), "enabled": ("count", "triggers still enabled")}

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        self.triggers = []
        for t in spec.get("triggers") or []:
            first = round((t["at"] - world.start_s) / world.dt)
            every = round(t["repeat_every"] / world.dt) if t.get("repeat_every") else 0
            self.triggers.append({"name": t["name"], "next": first, "every": every, "enabled": True,
                                  "effects": t["effects"], "description": t.get("description", "")})

    def op_disable(self, tick: int, trigger: str = "*") -> None:
        for t in self.triggers:
            if trigger in ("*", t["name"]):
                t["enabled"] = False

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        for msg in inbox:
            if msg.kind == "apply":
                self.handle_apply(tick, msg.body)
        fired = 0
        for t in self.triggers:
            if t["enabled"] and tick == t["next"]:
                fired += 1
                self.event(tick, "trigger", trigger=t["name"], description=t["description"])
                for eff in t["effects"]:
                    self.send_apply(eff["target"], eff["op"], eff.get("args") or {}, t["name"], tick)
                t["next"] = tick + t["every"] if t["every"] else -1
        return self.finish({"fired": fired, "enabled": sum(t["enabled"] for t in self.triggers)})
