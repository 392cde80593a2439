"""The scenario's own automation: triggers (e.g. the scaling activity that set off the
2021 surge), at clock times or when a condition on what monitoring delivers holds, sent
as ``apply`` messages to their targets. A mitigation can
disable a trigger, like any other piece of automation. A live game day's facilitator
injects the playbook's extra ``faults`` through here too, so that they reach their
targets (every shard of a population) the way triggers do."""
from __future__ import annotations

import numpy as np

from .base import Arg, Message, StepResult, WorldInfo, operation
from .deployment import resolve_param
from .operator import Watcher


class Automation(Watcher):
    kind = "automation"
    METRICS = {"fired": ("count per tick", "triggers fired this tick"), "enabled": ("count", "triggers still enabled")}

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        self.faults = {f["name"]: f for f in spec.get("faults") or []}
        self.triggers = []
        for t in spec.get("triggers") or []:
            # (on a condition: it may fire from its first tick, and again `every` after it fired)
            first = 0 if t.get("when") else round((t["at"] - world.start_s) / world.dt)
            every = round(t["repeat_every"] / world.dt) if t.get("repeat_every") else 0
            self.triggers.append({"name": t["name"], "next": first, "every": every, "enabled": True,
                                  "when": t.get("when"), "effects": t["effects"], "description": t["description"]})

    @operation(example={"fault": "blind_monitoring", "params": {"seconds": 600}},
               fault=Arg("the name of one of the playbook's faults", names="fault"),
               params=Arg("values for some of the fault's params, overriding their defaults"),
               by=Arg("who injected it (journalled)"))
    def op_inject(self, tick: int, fault: str = "", params: dict | None = None, by: str = "facilitator") -> None:
        """Inject one of the playbook's faults (a live game day's facilitator does): its effects
        are applied to their targets, with its params; an unknown fault is journalled as
        rejected."""
        f = self.faults.get(fault)
        if f is None:  # the session checks names before injecting; a replayed journal could still hold one
            self.event(tick, "fault_rejected", fault=fault, reason="not in the playbook's faults")
            return
        values = dict(f["params"]) | dict(params or {})
        self.event(tick, "fault_injected", fault=fault, params=values, by=by, description=f["description"])
        for eff in f["effects"]:
            args = {k: resolve_param(v, values, by) for k, v in eff["args"].items()}
            self.send_apply(eff["target"], eff["op"], args, fault, tick)

    def handle_apply(self, tick: int, body: dict) -> None:
        """(A fault a trigger injects is journalled as injected by that trigger, not by a facilitator.)"""
        if body.get("op") == "inject" and "by" not in (body.get("args") or {}) and body.get("by"):
            body = body | {"args": {**(body.get("args") or {}), "by": body["by"]}}
        super().handle_apply(tick, body)

    @operation(example={"trigger": "scaling-activity"},
               trigger=Arg("the trigger's name; \"*\": every trigger", names="trigger"))
    def op_disable(self, tick: int, trigger: str = "*") -> None:
        """Disable a trigger of the scenario's automation, so that it never fires again (an
        unknown name disables nothing)."""
        for t in self.triggers:
            if trigger in ("*", t["name"]):
                t["enabled"] = False

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        self.observe(tick, inbox)
        for msg in inbox:
            if msg.kind == "apply":
                self.handle_apply(tick, msg.body)
        fired = 0
        for i, t in enumerate(self.triggers):
            # (a condition is watched every tick, so that its `for` counts an unbroken stretch)
            holds = t["when"] is None or self._holds(tick, t["when"], (i,))
            due = tick == t["next"] if t["when"] is None else 0 <= t["next"] <= tick
            if t["enabled"] and due and holds:
                fired += 1
                self.event(tick, "trigger", trigger=t["name"], description=t["description"])
                for eff in t["effects"]:
                    self.send_apply(eff["target"], eff["op"], eff["args"], t["name"], tick)
                t["next"] = tick + t["every"] if t["every"] else -1
        return self.finish({"fired": fired, "enabled": sum(t["enabled"] for t in self.triggers)})
