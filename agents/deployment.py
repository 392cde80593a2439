"""Deployment tooling: every mitigation goes through it.

An accepted action first waits its lead time (preparation, hardware), then, if it
changes configuration, runs its deployment steps one after the other. Each step is a
request across the deployment path; when that path is congested, steps time out and
are retried, so every remediation slows down. When the last step lands, the action's
effects are sent to their targets as ``apply`` messages.
"""
from __future__ import annotations

import numpy as np

from .base import Agent, Arg, Message, StepResult, WorldInfo, in_ticks, operation


class Deployment(Agent):
    kind = "deployment"
    METRICS = {
        "actions_in_progress": ("count", "actions accepted and not yet effective"),
        "step_attempts": ("count per tick", "deployment steps attempted this tick"),
        "step_failures": ("count per tick", "deployment step attempts that failed (results received this tick)"),
    }

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        dt = world.dt
        self.path = list(spec["path"])
        self.hops = self.path + ([spec["target"]] if spec.get("target") else [])  # a step's way, path then service
        self.step_ticks = in_ticks(spec["step_time"], dt)
        self.retry_ticks = in_ticks(spec["retry_delay"], dt)
        self.timeout = float(spec["timeout"])
        self.catalogue = {m["name"]: m for m in spec.get("catalogue") or []}
        self.actions: list[dict] = []
        self.inflight: dict[int, list[str]] = {}
        self.down_until = -1  # an injected outage: no step succeeds before this tick

    @operation(example={"duration": 1800.0}, duration=Arg("how long the tooling is down", unit="s", min=0))
    def op_outage(self, tick: int, duration: float = 600.0) -> None:
        """The tooling itself fails (a facilitator's fault): every step due meanwhile fails
        and is retried after ``retry_delay``, so every remediation is held up."""
        self.down_until = max(self.down_until, tick + round(float(duration) / self.world.dt))

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        failures = 0
        for msg in inbox:
            if msg.kind == "action_request":
                self._accept(tick, msg.src, msg.body, msg.tick)
            elif msg.kind == "apply":  # (its own operations: a trigger's or a facilitator's outage)
                self.handle_apply(tick, msg.body)
            elif msg.kind == "flow_result":
                ids = self.inflight.pop(int(msg.body["sent"]), [])
                ok = min(int(msg.body["r_ok"]), len(ids))
                good = set(self.rng.choice(len(ids), size=ok, replace=False).tolist()) if 0 < ok < len(ids) else set(range(ok))
                for i, aid in enumerate(ids):
                    a = self._find(aid)
                    if a is None:
                        continue
                    a["stepping"] = False
                    if i in good:
                        a["steps_left"] -= 1
                        a["next"] = tick + self.step_ticks
                    else:
                        failures += 1
                        self._failed(tick, a, "it timed out on the deployment path")
                    self._progress(tick, a)

        attempts: list[str] = []
        for a in self.actions:
            if tick < a["ready_at"] or a["stepping"]:
                continue
            if a["steps_left"] > 0:
                if tick >= a["next"]:
                    if tick < self.down_until:
                        failures += 1
                        self._failed(tick, a, "the deployment tooling is down")
                        self._progress(tick, a)
                    elif self.hops:
                        a["stepping"] = True
                        attempts.append(a["id"])
                    else:
                        a["steps_left"] -= 1
                        a["next"] = tick + self.step_ticks
                        self._progress(tick, a)
                continue
            if tick >= a["next"]:
                self._take_effect(tick, a)
        self.actions = [a for a in self.actions if not a["done"]]
        if attempts:
            self.inflight[tick] = attempts
            self.send_flow(self.hops, tick, len(attempts), ct=self.timeout, rt=self.timeout)
        return self.finish({"actions_in_progress": len(self.actions), "step_attempts": len(attempts),
                            "step_failures": failures})

    def _find(self, aid: str):
        return next((a for a in self.actions if a["id"] == aid), None)

    def _accept(self, tick: int, requester: str, body: dict, asked: int) -> None:
        """A request the requester sent at tick ``asked`` (it arrives a tick later): its lead
        time counts from now, and its action_effective says when it was asked."""
        m = self.catalogue.get(body["action"])
        if m is None:
            self.event(tick, "action_rejected", action=body["action"], by=requester, reason="not in the catalogue")
            return
        params = dict(m["params"]) | dict(body.get("params") or {})
        lead = max(0, round(float(m["lead_time"]) / self.world.dt))
        steps = int(m["steps"]) if m["deploy"] else 0
        a = {"id": body["id"], "action": m["name"], "params": params, "by": requester, "asked": asked,
             "ready_at": tick + lead, "next": tick + lead, "steps_left": steps, "steps": steps, "stepping": False,
             "failed_steps": 0, "done": False, "effects": m["effects"], "risk": m["risk"]}
        self.actions.append(a)
        self.event(tick, "action_started", id=a["id"], action=a["action"], by=requester, params=params,
                   lead_time_s=lead * self.world.dt, steps=steps, risk=a["risk"])
        self._status(tick, a, "started", ready_tick=a["ready_at"])

    def _failed(self, tick: int, a: dict, why: str) -> None:
        """A step of ``a`` failed: journalled (an action whose steps keep failing never takes
        effect, and the report says why), and retried after ``retry_delay``."""
        a["failed_steps"] += 1
        a["next"] = tick + self.retry_ticks
        self.event(tick, "step_failed", id=a["id"], action=a["action"], failed_steps=a["failed_steps"],
                   steps_left=a["steps_left"], why=why)

    def _take_effect(self, tick: int, a: dict) -> None:
        a["done"] = True
        for eff in a["effects"]:
            args = {k: resolve_param(v, a["params"], a["by"]) for k, v in eff["args"].items()}
            self.send_apply(eff["target"], eff["op"], args, a["action"], tick)
        self.event(tick, "action_effective", id=a["id"], action=a["action"], by=a["by"], asked_tick=a["asked"],
                   failed_steps=a["failed_steps"], risk=a["risk"])
        self._status(tick, a, "effective")

    def _status(self, tick: int, a: dict, state: str, **more) -> None:
        """Tell the requester how its action is doing (a console shows it as progress)."""
        self.send(a["by"], "action_status", {"id": a["id"], "action": a["action"], "state": state, "steps": a["steps"],
                                             "steps_done": a["steps"] - a["steps_left"],
                                             "failed_steps": a["failed_steps"], **more}, tick)

    def _progress(self, tick: int, a: dict) -> None:
        self._status(tick, a, "stepping")


def resolve_param(value, params: dict, requester: str):
    """``$name`` in an effect's arguments stands for the action's parameter ``name``;
    ``$requester`` for the operator who asked."""
    if isinstance(value, str) and value.startswith("$"):
        key = value[1:]
        if key == "requester":
            return requester
        return params[key]
    if isinstance(value, list):
        return [resolve_param(v, params, requester) for v in value]
    return value
