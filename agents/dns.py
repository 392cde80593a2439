"""DNS automation for a service's endpoint: a planner and several enactors, and the race
that can leave the endpoint with no records (AWS us-east-1, 2025-10-19, generically).

A planner makes a new plan every ``plan_every``. Each enactor picks the newest plan,
takes a while to apply it (now and then much longer), applies it, and a little later
cleans up the plans older than its own by ``keep`` generations. The race: a delayed
enactor applies its stale plan over a newer one, and another enactor's clean-up then
deletes that plan, now the one in place: the endpoint has no records, and the
enactors cannot apply anything on top of that broken state. Only a person repairs it
(``restore``). The ``guard`` makes enactors skip a plan older than the one in place and
clean-ups spare the plan in place. Plain state machine, drawn from the owner's RNG.
"""
from __future__ import annotations

import numpy as np

from .base import in_ticks


class DnsAutomation:
    def __init__(self, spec: dict, dt: float):
        self.plan_every = in_ticks(spec["plan_every"], dt)
        self.delay = in_ticks(spec["delay"], dt)
        self.slow_chance = float(spec["slow_chance"])
        self.slow_delay = in_ticks(spec["slow_delay"], dt)
        self.cleanup_after = in_ticks(spec["cleanup_after"], dt)
        self.keep = int(spec["keep"])
        self.guard = bool(spec["guard"])
        self.enabled = True
        self.delay_next = 0  # ticks the next application takes, when a fault has slowed an enactor
        self.newest = 0
        self.plans = {0}
        self.active: int | None = 0  # None: the plan in place was deleted, the endpoint has no records
        self.enactors = [{"plan": None, "done_at": 0} for _ in range(int(spec["enactors"]))]
        self.cleanups: list[tuple[int, int]] = []  # (due tick, delete plans older than this)

    @property
    def ok(self) -> bool:
        return self.active is not None

    def restore(self) -> None:
        """A person puts the newest plan in place by hand."""
        self.plans.add(self.newest)
        self.active = self.newest

    def step(self, tick: int, rng: np.random.Generator) -> list[str]:
        """Advance one tick; returns what happened worth journalling."""
        happened = []
        if tick % self.plan_every == 0 and tick > 0:
            self.newest += 1
            self.plans.add(self.newest)
        for e in self.enactors:
            if e["plan"] is None:
                if self.enabled and self.newest != self.active:
                    slow = rng.random() < self.slow_chance
                    e["plan"] = self.newest
                    e["done_at"] = tick + (self.slow_delay if slow else max(1, round(self.delay * (0.5 + rng.random()))))
                    if self.delay_next:
                        e["done_at"], self.delay_next = tick + self.delay_next, 0
            elif tick >= e["done_at"]:
                plan, e["plan"] = e["plan"], None
                if self.active is None or (self.guard and plan < self.active):
                    continue  # cannot build on a broken endpoint; the guard skips a stale plan
                if plan < self.active:
                    happened.append(f"a delayed enactor applied plan {plan} over the newer plan {self.active}")
                if plan not in self.plans:  # cleaned up while it was being applied: nothing to point at
                    self.active = None
                    happened.append(f"plan {plan} was applied after its clean-up: the endpoint has no records")
                    continue
                self.active = plan
                self.cleanups.append((tick + self.cleanup_after, plan - self.keep))
        for due, older_than in [c for c in self.cleanups if c[0] <= tick]:
            self.cleanups.remove((due, older_than))
            doomed = {p for p in self.plans if p < older_than and not (self.guard and p == self.active)}
            self.plans -= doomed
            if self.active in doomed:
                self.active = None
                happened.append("the clean-up deleted the plan in place: the endpoint has no records")
        return happened
