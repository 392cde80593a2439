"""The world's own automation that reacts to it: controllers.

A controller sees what monitoring delivers, as an operator does (stale values, gaps),
and acts on its own, before, during and after the incident:

- its ``rules`` (the runbook grammar) request mitigations through the deployment tooling,
  as an operator's would;
- its ``autoscaler`` sets the number of instances serving one service, tracking a target
  value of an observed metric. Instances it adds are asked of a provisioning service
  (a control plane with its own capacity) across a path, one request each; a request that
  fails is asked again after ``retry_delay``; one that succeeds is an instance that serves
  after ``lead_time``. Instances it removes stop serving at once.

Operators can switch a controller off or change its autoscaler as an action.
"""
from __future__ import annotations

import math

import numpy as np

from .base import Arg, BadArgument, Message, StepResult, WorldInfo, in_ticks, operation, share_or_rate
from .operator import RunbookOperator

#: how an autoscaler's metric relates to its instances: an average over them (CPU
#: utilisation: desired = instances x value / target) or a total they share (requests
#: per second: desired = value / target)
METRIC_IS = ("average", "total")


class Autoscaler:
    """Target tracking of one service's instances; the controller feeds it what it sees."""

    def __init__(self, spec: dict, dt: float):
        self.service = spec["service"]
        self.instances0 = int(spec["instances"])  # the service's playbook capacity is theirs
        self.running = self.instances0
        self.metric, self.metric_is = spec["metric"], spec["metric_is"]
        self.target, self.low, self.high = float(spec["target"]), int(spec["min"]), int(spec["max"])
        self.max_step = int(spec["max_step"])  # 0: no limit
        self.max_age = float(spec["max_age"])
        self.scale_in = bool(spec["scale_in"])
        self.out_cooldown = in_ticks(spec["scale_out_cooldown"], dt)
        self.in_cooldown = in_ticks(spec["scale_in_cooldown"], dt)
        # (as a cloud's target tracking does: a reading must ask for more, or for fewer, for a
        # while before it acts, so that one odd reading does not scale)
        self.out_after = round(float(spec["scale_out_after"]) / dt)
        self.in_after = round(float(spec["scale_in_after"]) / dt)
        self.more_since: int | None = None  # the tick readings have asked for more instances since
        self.fewer_since: int | None = None
        self.lead = in_ticks(spec["lead_time"], dt) if spec["lead_time"] else 0
        prov = spec.get("provision")
        self.hops = [*prov["path"], prov["service"]] if prov else []
        self.timeout = float(prov["timeout"]) if prov else 0.0
        self.retry = in_ticks(prov["retry_delay"], dt) if prov else 0
        self.due: dict[int, int] = {}  # tick -> instances to ask the provisioning service for then
        self.inflight: dict[int, int] = {}  # tick sent -> instances asked then, answer pending
        self.booting: dict[int, int] = {}  # tick in service -> instances provisioned, not serving yet
        self.last_out = self.last_in = -(10 ** 9)

    @property
    def waiting(self) -> int:
        """Instances asked for and not provisioned yet (due to be asked, or asked)."""
        return sum(self.due.values()) + sum(self.inflight.values())

    @property
    def coming(self) -> int:
        return self.waiting + sum(self.booting.values())

    def desired(self, value: float) -> int:
        raw = self.running * value / self.target if self.metric_is == "average" else value / self.target
        return min(self.high, max(self.low, math.ceil(raw - 1e-9)))

    def cancel(self, n: int) -> int:
        """Withdraw up to ``n`` instances not yet asked of the provisioning service (latest
        first); the number withdrawn."""
        left = n
        for t in sorted(self.due, reverse=True):
            take = min(left, self.due[t])
            self.due[t] -= take
            left -= take
            if not self.due[t]:
                del self.due[t]
        return n - left


class Controller(RunbookOperator):
    kind = "controller"
    METRICS = {
        "enabled": ("flag", "1 while the controller acts (an operator can switch it off)"),
        "actions_requested": ("count", "mitigations its rules have requested so far"),
        "instances": ("count", "autoscaler: instances serving its service (0 without an autoscaler)"),
        "instances_desired": ("count", "autoscaler: the instances its last reading asked for (what it serves "
                              "without one)"),
        "instances_waiting": ("count", "autoscaler: instances asked for and not provisioned yet"),
        "instances_booting": ("count", "autoscaler: instances provisioned, serving after their lead time"),
        "provision_requests": ("requests per tick", "autoscaler: requests sent to the provisioning service this tick"),
        "provision_failures": ("requests per tick", "autoscaler: provisioning requests that failed (results received "
                               "this tick), asked again after retry_delay"),
    }

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        self.enabled = bool(spec["enabled"])
        self.scaler = Autoscaler(spec["autoscaler"], world.dt) if spec.get("autoscaler") else None
        self.wanted = self.scaler.running if self.scaler else 0

    @operation(example={})
    def op_disable(self, tick: int) -> None:
        """Switch the controller off: its rules and its autoscaler stop acting (instances
        already asked for still arrive and serve)."""
        self.enabled = False

    @operation(example={})
    def op_enable(self, tick: int) -> None:
        """Switch the controller back on."""
        self.enabled = True

    @operation(needs="autoscaler", example={"min": 40, "scale_in": False},
               target=Arg("the value of the metric it aims at from now on", min=0),
               min=Arg("fewest instances from now on", unit="instances", min=0),
               max=Arg("most instances from now on", unit="instances", min=0),
               max_step=Arg("most instances one scaling adds or removes from now on; 0: no limit", unit="instances",
                            min=0),
               scale_in=Arg("false: it never removes instances from now on"))
    def op_set_autoscaler(self, tick: int, target: float | None = None, min: int | None = None,
                          max: int | None = None, max_step: int | None = None, scale_in: bool | None = None) -> None:
        """Change the autoscaler's settings (those left out keep their value)."""
        a = self.scaler
        if a is None:
            return
        if target is not None:
            if not share_or_rate("target", target) > 0:
                raise BadArgument(f"target {target!r}: expected a number above 0")
            a.target = float(target)
        a.low = a.low if min is None else int(min)
        a.high = a.high if max is None else int(max)
        a.max_step = a.max_step if max_step is None else int(max_step)
        a.scale_in = a.scale_in if scale_in is None else bool(scale_in)

    def decide(self, tick: int) -> None:
        if self.enabled:
            super().decide(tick)

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        self.observe(tick, inbox)
        failures = 0
        for msg in inbox:
            if msg.kind == "apply":
                self.handle_apply(tick, msg.body)
            elif msg.kind == "flow_result" and self.scaler is not None:
                failures += self._provisioned(tick, msg.body)
        self.decide(tick)
        sent = self._scale(tick) if self.scaler is not None else 0
        a = self.scaler
        metrics = {
            "enabled": float(self.enabled), "actions_requested": self.n_requested,
            "instances": a.running if a else 0, "instances_desired": self.wanted,
            "instances_waiting": a.waiting if a else 0, "instances_booting": sum(a.booting.values()) if a else 0,
            "provision_requests": sent, "provision_failures": failures}
        self.report(tick, metrics)
        return self.finish(metrics)

    def _provisioned(self, tick: int, body: dict) -> int:
        """The provisioning service's answers to the requests sent at ``body['sent']``: those
        that succeeded boot, the others are asked again later. Returns the failures."""
        a = self.scaler
        asked = a.inflight.pop(int(body["sent"]), 0)
        ok = min(int(body["r_ok"]), asked)
        if ok:
            a.booting[tick + a.lead] = a.booting.get(tick + a.lead, 0) + ok
        if asked - ok:
            a.due[tick + a.retry] = a.due.get(tick + a.retry, 0) + asked - ok
        return asked - ok

    def _scale(self, tick: int) -> int:
        """Instances that finished booting serve; then, if on, one reading of the metric may
        scale out or in; then what is due is asked of the provisioning service. Returns the
        requests sent."""
        a = self.scaler
        ready = sum(a.booting.pop(t) for t in [t for t in a.booting if t <= tick])
        if ready:
            self._serve(tick, a.running + ready, "instances_in_service", ready=ready)
        value = self.seen(tick, a.metric, a.max_age)
        if self.enabled and value is not None:
            self.wanted = want = a.desired(value)
            limit = a.max_step or 10 ** 9
            have = a.running + a.coming
            a.more_since = (tick if a.more_since is None else a.more_since) if want > have else None
            a.fewer_since = (tick if a.fewer_since is None else a.fewer_since) if want < have else None
            if want > have and tick - a.more_since >= a.out_after and tick - a.last_out >= a.out_cooldown:
                n = min(want - have, limit)
                a.due[tick] = a.due.get(tick, 0) + n
                a.last_out = tick
                self.event(tick, "scale_out", service=a.service, instances=n, desired=want, metric=a.metric,
                           value=value, running=a.running)
            elif want < have and a.scale_in and tick - a.fewer_since >= a.in_after and tick - a.last_in >= a.in_cooldown:
                extra = min(have - want, limit)
                withdrawn = a.cancel(extra)
                stop = min(extra - withdrawn, max(0, a.running - max(want, a.low)))
                if withdrawn or stop:
                    a.last_in = tick
                    self.event(tick, "scale_in", service=a.service, instances=stop, withdrawn=withdrawn, desired=want,
                               metric=a.metric, value=value, running=a.running)
                if stop:
                    self._serve(tick, a.running - stop, "instances_stopped", stopped=stop)
        else:  # (no reading, or switched off: a stretch of readings starts again)
            a.more_since = a.fewer_since = None
        n = sum(a.due.pop(t) for t in [t for t in a.due if t <= tick])
        if not n:
            return 0
        if a.hops:
            a.inflight[tick] = a.inflight.get(tick, 0) + n
            self.send_flow(a.hops, tick, n, ct=a.timeout, rt=a.timeout)
            return n
        a.booting[tick + a.lead] = a.booting.get(tick + a.lead, 0) + n  # (no provisioning service: every ask succeeds)
        return 0

    def _serve(self, tick: int, running: int, event: str, **what) -> None:
        """The service's capacity follows its instances (as a multiple of the playbook's)."""
        a = self.scaler
        a.running = running
        self.send_apply(a.service, "scale_capacity", {"factor": running / a.instances0}, self.name, tick)
        self.event(tick, event, service=a.service, running=running, **what)
