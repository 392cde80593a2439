"""Operators: one decision interface, several implementations.

An operator sees only what monitoring delivers (the observed view, with ages and gaps),
the alarms, the results of its log queries and the progress of its own actions; it
never sees ground truth. ``RunbookOperator`` applies rules ``when -> do``; a console
(human team) operator plugs into the same interface later.
"""
from __future__ import annotations

import numpy as np

from .base import OUTSIDE, Agent, Message, StepResult, WorldInfo

#: the team's operator, as the world names it (its actions are the team's; a controller's are the world's)
OPERATOR = "operator"


def by_the_team(e: dict) -> bool:
    """Whether an action's event (requested, started, effective, failed) is of an action the
    team's operator asked for, not one of the world's controllers."""
    return e.get("by", e["agent"]) == OPERATOR


class Watcher(Agent):
    """Whatever acts on what monitoring shows (an operator, the world's controllers, a
    trigger on a condition): keeps the observed view, the alarms and log answers, and
    evaluates the runbook grammar's conditions over them. It never sees ground truth."""

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        self.view: dict[str, list] = {}
        self.view_tick = -1
        self.alarms: set[str] = set()
        self.logs: dict[str, list] = {}
        self.requested: dict[str, int] = {}  # action -> tick first requested
        self.effective: dict[str, int] = {}
        self.true_since: dict[tuple, int] = {}  # a condition (by its path) -> the tick it has held since

    def observe(self, tick: int, inbox: list[Message]) -> None:
        for msg in inbox:
            b = msg.body
            if msg.kind == "observed":
                self.view, self.view_tick, self.alarms = b["view"], tick, set(b["alarms"])
            elif msg.kind == "log_result":
                self.logs.update(b["values"])
            elif msg.kind == "action_status" and b["state"] == "effective":
                self.effective.setdefault(b["action"], tick)

    def seen(self, tick: int, metric: str, max_age: float) -> float | None:
        """The view's value of ``metric``, or None if it is unknown or older than ``max_age``."""
        seen = self.view.get(metric)
        if seen is None or seen[1] + (tick - self.view_tick) * self.world.dt > max_age:
            return None
        return float(seen[0])

    def _ticks(self, seconds: float) -> int:
        return max(0, round(float(seconds) / self.world.dt))

    def _holds(self, tick: int, cond: dict, path: tuple) -> bool:
        """Evaluate one condition; ``for`` makes it hold only after being true that long."""
        now = self.world.clock(tick)
        if "all" in cond or "any" in cond:
            # Every part is evaluated, not only up to the first that decides: each ``for``
            # inside counts its own unbroken stretch, whatever the order of the list.
            items = cond["all"] if "all" in cond else cond["any"]
            parts = [self._holds(tick, c, path + (j,)) for j, c in enumerate(items)]
            ok = all(parts) if "all" in cond else any(parts)
        elif "not" in cond:
            ok = not self._holds(tick, cond["not"], path + ("not",))
        elif "at" in cond:
            ok = now >= cond["at"]
        elif "no_data" in cond:
            seen = self.view.get(cond["no_data"])
            age = tick * self.world.dt if seen is None else seen[1] + (tick - self.view_tick) * self.world.dt
            return age >= float(cond["for"])  # "for" is the age itself here
        elif "metric" in cond:
            value = self.seen(tick, cond["metric"], float(cond["max_age"]))
            if value is None:
                ok = False
            elif "above" in cond:
                ok = value > float(cond["above"])
            else:
                ok = value < float(cond["below"])
        elif "log" in cond:
            seen = self.logs.get(cond["log"])
            ok = seen is not None and (seen[0] > float(cond["above"]) if "above" in cond else seen[0] < float(cond["below"]))
        elif "alarm" in cond:
            ok = cond["alarm"] in self.alarms
        elif "done" in cond:
            when = (self.effective if cond["effective"] else self.requested).get(cond["done"])
            ok = when is not None and tick - when >= self._ticks(cond["after"])
            return ok
        elif "not_done" in cond:
            ok = cond["not_done"] not in self.requested
        else:  # validation rejects this before a run starts
            raise ValueError(f"unknown condition {cond!r}")
        hold = self._ticks(cond["for"]) if "for" in cond else 0  # only some conditions take one
        if not hold:
            return ok
        if not ok:
            self.true_since.pop(path, None)
            return False
        since = self.true_since.setdefault(path, tick)
        return tick - since >= hold


class Operator(Watcher):
    """Base: keeps the observed view and the action log; decides nothing."""

    kind = "operator"
    METRICS = {"actions_requested": ("count", "actions this operator has requested so far")}

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        self.n_requested = 0
        # The rules of the runbooks that will take over from this operator, in order (a fork
        # played again): their conditions are watched, never acted on, so that a `for` of
        # the next one counts from before it takes over, as it would have.
        self.watching: list[list[dict]] = []

    def request(self, tick: int, action: str, params: dict | None = None, reason: str = "", **ref) -> None:
        """``ref``: more to journal with the request (a console's command id)."""
        self.n_requested += 1
        self.requested.setdefault(action, tick)
        aid = f"{self.name}-{self.n_requested}"
        self.send(self.wiring.deployment, "action_request", {"id": aid, "action": action, "params": params or {}}, tick)
        self.event(tick, "action_requested", id=aid, action=action, params=params or {}, reason=reason, **ref)

    def decide(self, tick: int) -> None:
        """Subclasses choose actions here."""

    def take_over(self, old: Operator) -> None:
        """Carry on from ``old`` (a fork hands the world to another runbook mid-run): what
        it has seen, what it has asked for and what took effect, and its message sequence."""
        self.view, self.view_tick, self.alarms = old.view, old.view_tick, set(old.alarms)
        self.logs, self.requested, self.effective = dict(old.logs), dict(old.requested), dict(old.effective)
        self.n_requested, self._seq = old.n_requested, old._seq
        # the next runbook's conditions as ``old`` watched them; the later ones watched on
        watched = {key[1:]: since for key, since in old.true_since.items() if key[0] == "watch"}  # (k, path...)
        self.true_since = {key[1:]: since for key, since in watched.items() if key[0] == 0}
        self.true_since.update({("watch", key[0] - 1, *key[1:]): since for key, since in watched.items() if key[0] > 0})
        self.watching = old.watching[1:]

    def watch(self, tick: int) -> None:
        """Keep the watched runbooks' conditions up to date (no action comes of them)."""
        for k, rules in enumerate(self.watching):
            for i, rule in enumerate(rules):
                self._holds(tick, rule["when"], ("watch", k, i))

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        self.observe(tick, inbox)
        self.watch(tick)
        self.decide(tick)
        return self.finish({"actions_requested": self.n_requested})


class NoOperator(Operator):
    """Nobody acts: the baseline that shows the loop does not heal itself."""


class ConsoleOperator(Operator):
    """A human team: its commands come in from outside the world (``console_command``,
    stamped with the tick that consumes them), and what it sees goes back out."""

    FORWARDED = ("observed", "log_result", "action_status")

    def step(self, tick: int, inbox: list[Message]) -> StepResult:
        self.observe(tick, inbox)
        self.watch(tick)
        for msg in inbox:
            if msg.kind in self.FORWARDED:
                self.send(OUTSIDE, msg.kind, msg.body, tick)
            elif msg.kind == "console_command":
                b = msg.body
                self.request(tick, b["action"], b["params"], reason=f"console {b.get('by', '')}".strip(), command=b["id"])
        return self.finish({"actions_requested": self.n_requested})


class RunbookOperator(Operator):
    """Rules over the observed view: time, thresholds, missing data, alarms, earlier actions."""

    def __init__(self, name: str, spec: dict, rng: np.random.Generator, world: WorldInfo):
        super().__init__(name, spec, rng, world)
        self.rules = spec.get("rules") or []
        self.fired: dict[int, int] = {}  # rule index -> times fired
        self.last_fired: dict[int, int] = {}

    def take_over(self, old: Operator) -> None:
        """As ``Operator.take_over``; the same rules keep their state, and new rules whose
        action was already asked for count as fired (so it is not asked again)."""
        super().take_over(old)
        if isinstance(old, RunbookOperator) and old.rules == self.rules:
            self.fired, self.last_fired = dict(old.fired), dict(old.last_fired)
            self.true_since.update({key: since for key, since in old.true_since.items() if key[0] != "watch"})
            return
        for i, rule in enumerate(self.rules):
            asked = [old.requested[do["action"]] for do in rule["do"] if do["action"] in old.requested]
            if asked:  # (one of its actions asked: firing again would ask it twice)
                self.fired[i], self.last_fired[i] = 1, max(asked)

    def decide(self, tick: int) -> None:
        for i, rule in enumerate(self.rules):
            if self.fired.get(i) and not rule["repeat"]:
                continue
            # A repeating rule's conditions are watched while it waits out ``every``, so that
            # a ``for`` counts an unbroken stretch, not one with a gap nobody looked at.
            holds = self._holds(tick, rule["when"], (i,))
            if rule["repeat"] and self.fired.get(i) and tick - self.last_fired[i] < self._ticks(rule["every"]):
                continue
            if holds:
                self.fired[i] = self.fired.get(i, 0) + 1
                self.last_fired[i] = tick
                for do in rule["do"]:  # (its actions in order, as rules of one condition would be)
                    self.event(tick, "rule_fired", rule=rule_label(rule, i), action=do["action"])
                    self.request(tick, do["action"], do.get("params"), reason=rule["name"])


def rule_label(rule: dict, index: int) -> str:
    """How a runbook's rule is named in the journal and the report: its name, or "rule N" (its
    place in the list) when it has none."""
    return rule.get("name") or f"rule {index + 1}"
