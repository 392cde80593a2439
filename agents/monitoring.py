"""Monitoring as the operators get it, not as it is.

Every component sends telemetry reports here; the reports then have to cross the
monitoring path (in 2021, the congested bridge) before the operators' view is updated.
A report that does not make it leaves a gap; the view keeps the last value with its
age. Ground truth only goes to the journal. Logs are always written but slow: a log
query answers with ground truth after ``log_delay``.
"""
from __future__ import annotations

import numpy as np

from .base import Agent, Arg, Message, StepResult, WorldInfo, in_ticks, operation
from .shards import merge_metrics

#: what an above or below alarm does while its metric is stale: stop firing, or stay as it was
WHEN_STALE = ("clear", "hold")


class Monitoring(Agent):
    kind = "monitoring"
    METRICS = {
        "reports_sent": ("count per tick", "telemetry reports sent across the monitoring path this tick"),
        "reports_arrived": ("count per tick", "telemetry reports that arrived this tick"),
        "visibility": ("ratio", "share of observed metrics whose value is fresh (age below stale_after)"),
        "alarms_firing": ("count", "alarms firing in the observed view"),
    }

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        dt = world.dt
        self.path = list(spec["path"])
        self.timeout = float(spec["timeout"])
        self.observe = list(spec["observe"])
        self.stale_ticks = in_ticks(spec["stale_after"], dt)
        self.log_delay_ticks = in_ticks(spec["log_delay"], dt)
        self.publish_every = in_ticks(spec["publish_every"], dt)
        self.alarms = [dict(a, for_ticks=in_ticks(a["for"], dt)) for a in spec["alarms"]]
        self.view: dict[str, tuple[float, int]] = {}  # metric -> (value, tick measured)
        self.truth: dict[str, tuple[float, int]] = {}
        self.pending: list[tuple[str, dict, int]] = []  # (agent, values, tick measured) waiting to cross
        self.inflight: dict[int, list] = {}
        self.queries: list[dict] = []
        self.alarm_since: dict[str, int] = {}
        self.firing: set[str] = set()
        self.down_until = -1
        self.shard_of = {shard: pop for pop, shards in self.wiring.shards.items() for shard, _ in shards}
        self.shard_count = {pop: len(shards) for pop, shards in self.wiring.shards.items()}

    @operation(example={"reply_to": "$requester"},
               reply_to=Arg("the agent the answer goes to: the operator who asked ($requester)"),
               metrics=Arg("the metrics asked for, as AGENT.METRIC (observed ones only); left out: every observed "
                           "metric"),
               id=Arg("an identifier the answer carries back"))
    def op_query_logs(self, tick: int, reply_to: str = "", metrics: list | None = None, id: str = "") -> None:
        """Ask the logs for ground truth: ``log_delay`` later, ``reply_to`` gets the latest true
        value of each metric asked for, with its age, whatever the telemetry path (a runbook's
        ``log`` conditions read it)."""
        self.queries.append({"due": tick + self.log_delay_ticks, "reply_to": reply_to, "id": id,
                             "metrics": list(metrics or self.observe), "asked": tick})

    @operation(example={"duration": 1800.0}, duration=Arg("how long the pipeline is down", unit="s", min=0))
    def op_outage(self, tick: int, duration: float = 600.0) -> None:
        """The telemetry pipeline itself fails (a facilitator's fault): reports sent meanwhile
        are lost, whatever path they take."""
        self.down_until = max(self.down_until, tick + round(float(duration) / self.world.dt))

    @operation(example={"path": []},
               path=Arg("device pools telemetry crosses from now on, in order; empty or left out: none (out of band)",
                        names="device"))
    def op_set_path(self, tick: int, path: list | None = None) -> None:
        """Move telemetry onto another path; an empty one is out-of-band monitoring: telemetry
        stops depending on the congested path."""
        self.path = list(path or [])

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        arrived = 0
        sent = 0
        parts: dict[tuple[str, int], list[dict]] = {}  # a sharded population's reports, merged below
        for msg in inbox:
            if msg.kind == "telemetry":
                vals, at = msg.body["values"], int(msg.body["at"])
                pop = self.shard_of.get(msg.src)
                if pop is not None:
                    parts.setdefault((pop, at), []).append(vals)
                    continue
                self._telemetry(msg.src, vals, at)
            elif msg.kind == "flow_result":
                batch = self.inflight.pop(int(msg.body["sent"]), [])
                ok = min(int(msg.body["r_ok"]), len(batch))
                chosen = sorted(self.rng.choice(len(batch), size=ok, replace=False).tolist()) if 0 < ok < len(batch) \
                    else range(ok)
                for i in chosen:
                    self._arrive(batch[i])
                arrived += ok
            elif msg.kind == "apply":
                self.handle_apply(tick, msg.body)

        for (pop, at), reports in parts.items():
            if len(reports) == self.shard_count[pop]:  # all shards report at the same ticks, in one inbox
                merged = merge_metrics(reports)  # (the shards also sent the counts behind each ratio)
                self._telemetry(pop, {k: v for k, v in merged.items() if f"{pop}.{k}" in self.observe}, at)

        if self.pending and tick < self.down_until:
            self.pending = []  # lost in the outage
        if self.pending:
            sent = len(self.pending)
            if self.path:
                self.inflight[tick] = self.pending
                self.send_flow(self.path, tick, sent, ct=self.timeout, rt=self.timeout)
            else:
                for rep in self.pending:
                    self._arrive(rep)
                arrived += sent
            self.pending = []

        for q in [q for q in self.queries if q["due"] <= tick]:
            self.queries.remove(q)
            values = {m: [self.truth[m][0], (tick - self.truth[m][1]) * self.world.dt] for m in q["metrics"] if m in self.truth}
            self.send(q["reply_to"], "log_result", {"id": q["id"], "asked": q["asked"], "values": values}, tick)
            self.event(tick, "log_result", id=q["id"], reply_to=q["reply_to"])

        self._evaluate_alarms(tick)
        fresh = sum(1 for m in self.observe if m in self.view and tick - self.view[m][1] <= self.stale_ticks)
        if tick % self.publish_every == 0:
            view = {m: [v, (tick - at) * self.world.dt] for m, (v, at) in sorted(self.view.items())}
            for op in self.wiring.operators:
                self.send(op, "observed", {"view": view, "alarms": sorted(self.firing)}, tick)
        return self.finish({
            "reports_sent": sent,
            "reports_arrived": arrived,
            "visibility": fresh / len(self.observe) if self.observe else 1.0,
            "alarms_firing": len(self.firing),
        })

    def _telemetry(self, agent: str, vals: dict, at: int) -> None:
        for k, v in vals.items():
            self.truth[f"{agent}.{k}"] = (float(v), at)
        self.pending.append((agent, vals, at))

    def _arrive(self, report: tuple) -> None:
        agent, vals, at = report
        for k, v in vals.items():
            key = f"{agent}.{k}"
            if key not in self.view or self.view[key][1] <= at:
                self.view[key] = (float(v), at)

    def _evaluate_alarms(self, tick: int) -> None:
        for a in self.alarms:
            name, metric = a["name"], a["metric"]
            seen = self.view.get(metric)
            stale = seen is None or tick - seen[1] > self.stale_ticks
            if a.get("no_data"):
                cond = stale
            elif stale and a.get("when_stale") == WHEN_STALE[1]:
                continue  # as it was, firing or not, its count of `for` going on
            elif stale:
                cond = False  # an alarm on a value cannot fire without the value
            elif "above" in a:
                cond = seen[0] > float(a["above"])
            else:
                cond = seen[0] < float(a["below"])
            if cond:
                since = self.alarm_since.setdefault(name, tick)
                if name not in self.firing and tick - since + 1 >= a["for_ticks"]:
                    self.firing.add(name)
                    self.event(tick, "alarm_raised", alarm=name, metric=metric)
            else:
                self.alarm_since.pop(name, None)
                if name in self.firing:
                    self.firing.discard(name)
                    # (stale: it cleared for want of data, not on its value; only then, so that other
                    # journals read as before)
                    self.event(tick, "alarm_cleared", alarm=name, metric=metric,
                               **({"stale": True} if stale and not a.get("no_data") else {}))
