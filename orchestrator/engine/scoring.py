"""Scoring from ground truth, tick by tick (docs/contributing/architecture.md, step 4 of a tick).

Milestones are found online so that they can be journalled as they happen. A milestone
is confirmed once its condition, after having been false at some point since the
trigger, stays true for ``hold`` seconds; it then holds from the first tick of that
window. If a confirmed condition fails again for longer than a grace (the same hold
period), the milestone **relapses**: a ``relapse`` event is journalled and the milestone
is no longer reached until it is confirmed again. The score keeps the first time it was
confirmed, every relapse, and the final time (the start of the last window after which
it held to the horizon): a milestone that relapsed and never came back is not reached.

The loop counts as broken when the feedback has stopped, whatever stopped it: every
quantity that sustains the loop is back within bounds over a sliding minute (connection
setups that succeed on the loop's devices, retry amplification of the loop's
populations, the share of the loop services' work that completes within its callers'
timeouts). A service that is idle because its traffic was cut does no wasted work: its
feedback has stopped too. Whether it serves again is a separate milestone
(``scoring.recovered``).
"""
from __future__ import annotations

import math
from collections import deque

from agents.operator import by_the_team
from agents.population import AMPLIFICATION_BASE, work_switch

from orchestrator.playbook.format import milestone_keys
from reports import rundir
from reports.impact import CountedByAttempts, HeldDemand, TurnedAway, failed_and_finished
from reports.timefmt import format_clock

WINDOW_S = 60.0  # ratios are computed over a sliding minute, since per-tick counts are noisy


class Rolling:
    def __init__(self, ticks: int):
        self.q: deque = deque()
        self.ticks = ticks
        self.num = 0.0
        self.den = 0.0

    def add(self, num: float, den: float) -> None:
        self.q.append((num, den))
        self.num += num
        self.den += den
        if len(self.q) > self.ticks:
            a, b = self.q.popleft()
            self.num -= a
            self.den -= b

    def ratio(self, empty: float) -> float:
        return self.num / self.den if self.den > rundir.RESIDUE else empty


class Milestone:
    """Condition must have been false after the trigger, then true for ``hold`` ticks;
    once confirmed, false for more than ``grace`` ticks is a relapse. A stretch true for
    at least half the hold that failed before it was confirmed is kept (``held_briefly``:
    a recovery that did not hold, which the report names)."""

    def __init__(self, name: str, hold_ticks: int, grace_ticks: int | None = None):
        self.name = name
        self.hold = hold_ticks
        self.grace = hold_ticks if grace_ticks is None else grace_ticks
        self.broken_seen = False
        self.since: int | None = None  # first tick of the current run of true (not yet confirmed)
        self.at: int | None = None  # while confirmed: the tick it holds from
        self.first_at: int | None = None
        self.failing_since: int | None = None  # while confirmed: the condition is false since then
        self.relapses: list[int] = []
        self.held_briefly: list[tuple[int, int]] = []  # (first tick true, first tick false again)

    def update(self, tick: int, ok: bool, armed: bool) -> tuple[str, int] | None:
        """("milestone", tick it holds from) the moment it is confirmed, ("relapse", tick
        the condition failed) the moment a confirmed one relapses, else None."""
        if not armed:
            return None
        if self.at is not None:
            if ok:
                self.failing_since = None
                return None
            if self.failing_since is None:
                self.failing_since = tick
            if tick - self.failing_since < self.grace:
                return None
            failed, self.failing_since = self.failing_since, None
            self.relapses.append(failed)
            self.at, self.broken_seen, self.since = None, True, None
            return "relapse", failed
        if not ok:
            if self.since is not None and self.hold > 0 and 2 * (tick - self.since) >= self.hold:
                self.held_briefly.append((self.since, tick))
            self.broken_seen = True
            self.since = None
            return None
        if not self.broken_seen:
            return None
        if self.since is None:
            self.since = tick
        if tick - self.since >= self.hold:
            self.at = self.since
            if self.first_at is None:
                self.first_at = self.at
            return "milestone", self.at
        return None

    @property
    def relapsed(self) -> bool:
        """Reached once, and not holding now."""
        return self.first_at is not None and self.at is None


class ImpactMinute:
    """One minute's counts per population, for its impact: requests failed for good and
    finished (``failed_and_finished``), ticks, and ticks in which its durable work was
    late. A share per minute, not per tick: a tick with no results says nothing about the
    requests still out, and counting it as 0 failed would undercount an outage whose
    results come in bursts."""

    def __init__(self, populations: list[str], ticks: int):
        self.populations, self.length = populations, ticks
        self.clear()

    def add(self, metrics: dict[str, dict[str, float]], late: dict[str, bool], shed: dict[str, bool],
            by_attempts) -> None:
        self.ticks += 1
        for p, c in self.counts.items():
            failed, finished = failed_and_finished(metrics[p].__getitem__, p in by_attempts, shed.get(p, False))
            c[0] += failed
            c[1] += finished
            c[2] += late[p]

    @property
    def full(self) -> bool:
        return self.ticks >= self.length

    def clear(self) -> None:
        """A fresh minute."""
        self.ticks = 0
        self.counts = {p: [0.0, 0.0, 0] for p in self.populations}


#: what a run measures beside its milestones (par can name these too)
class Scorer:
    def __init__(self, data: dict, dt: float, start_s: float):
        self.dt, self.start_s = dt, start_s
        sc = data["scoring"]
        self.sc = sc
        w = max(1, round(WINDOW_S / dt))
        self.loop_devices = sc["loop"]["devices"]
        self.loop_pops = sc["loop"]["populations"]
        self.setup = Rolling(w)
        self.amp = Rolling(w)
        works = {p["name"]: p["work"] for p in data["populations"]}
        self.amp_base = {p: AMPLIFICATION_BASE[works[p]] for p in self.loop_pops}
        self.loop_services = sc["loop"]["services"]
        self.useful = Rolling(w)
        self.admitted = Rolling(w)
        self.healthy_devices = sc["healthy"]["devices"] or self.loop_devices
        self.dev_util = {d: Rolling(w) for d in self.healthy_devices}
        self.dev_ok = {d: Rolling(w) for d in self.healthy_devices}
        self.pop_ok = {p: Rolling(w) for p in sc["recovered"]["populations"]}
        self.pop_wanted = {p: Rolling(w) for p in sc["recovered"]["populations"]}  # requests asked or held back
        self.svc_ok = {s: Rolling(w) for s in sc["recovered"]["services"]}
        self.svc_useful = {s: Rolling(w) for s in sc["recovered"]["services"]}
        self.svc_asked = {s: Rolling(w) for s in sc["recovered"]["services"]}
        hold = lambda s: max(0, round(s / dt))  # noqa: E731
        holds = {"loop_broken": sc["loop"]["hold"], "devices_healthy": sc["healthy"]["hold"],
                 "backlog_drained": sc["backlog"]["hold"]}
        self.milestones = {k: Milestone(k, hold(holds.get(k, sc["recovered"]["hold"]))) for k in milestone_keys(data)}
        self.arrival = {p["name"]: p["rate"] * p["clients"] for p in data["populations"]}
        self.impact_w = sc["impact"]
        self.impact = {p: 0.0 for p in self.impact_w}  # impaired minutes: failing, or late (durable work)
        self.error_minutes = {p: 0.0 for p in self.impact_w}
        durable = {p["name"] for p in data["populations"] if p["work"] == "durable"}
        self.late_minutes = {p: 0.0 for p in self.impact_w if p in durable}  # (and those made durable later)
        self.counting = CountedByAttempts({p["name"]: (p["work"], p["retry"]["max_attempts"])
                                           for p in data["populations"] if p["name"] in self.impact_w})
        self.by_attempts = self.counting.now()
        self.by_attempts_ever = set(self.by_attempts)
        self.by_attempts_from: dict[str, list[list]] = {}  # population -> [[tick, by attempts]], once that changed
        self.minute = ImpactMinute(list(self.impact_w), w)
        self.trigger_tick: int | None = None
        self.first_update: int | None = None
        self.first_effective: int | None = None  # the first tick an action took effect
        self.actions = 0
        self.collateral = 0
        self.turned_away = 0.0
        self.turning = TurnedAway()
        self.turned_away_by: dict[str, float] = {}
        # the largest backlog of each part scoring.backlog names: a population's waiting work, a
        # service's queue (its metric: the part's backlog metric)
        self.backlog_metric = {p: "backlog" for p in sc["backlog"]["populations"]} | \
            {q: "queue_backlog" for q in sc["backlog"]["services"]}
        self.peak_backlog = {part: 0 for part in self.backlog_metric}
        self.par = data.get("par") or {}
        self.last_tick = -1
        # The demand that feeds the loop: the loop's populations, or every one if it names none. While
        # an action holds some of it back, a loop within its bounds is suspended, not broken.
        self.feeding = list(self.loop_pops) or [p["name"] for p in data["populations"]]
        self.holding = HeldDemand({p["name"]: (p["work"], p.get("max_rate"), p["rate"] * p["clients"])
                                   for p in data["populations"]})
        self.suspended: list[list[int]] = []  # [from, to] ticks the loop was suspended (to: None while it is)
        self.held_ever = False  # an action has held demand back
        self.restored_tick: int | None = None  # from when nothing has been held back since

    def update(self, tick: int, metrics: dict[str, dict[str, float]], events: list[dict]) -> list[dict]:
        """Feed one tick; returns the milestone events confirmed at this tick."""
        self.last_tick = tick
        work_changed = False
        for e in events:
            self.turning.see(e)
            self.holding.see(e)
            work_changed |= self.counting.see(e)
            if e["event"] in rundir.STARTS_INCIDENT and self.trigger_tick is None:
                self.trigger_tick = tick
            elif e["event"] == "status_posted" and self.first_update is None and self.trigger_tick is not None:
                self.first_update = tick
            elif e["event"] == "action_requested" and by_the_team(e):
                self.actions += 1
            elif e["event"] == "action_effective" and self.first_effective is None and by_the_team(e):
                self.first_effective = tick
            elif (switch := work_switch(e)) and switch[0] in self.amp_base:
                self.amp_base[switch[0]] = AMPLIFICATION_BASE[switch[1]]  # (from this tick on)
        setups = sum(metrics[d]["setups"] for d in self.loop_devices)
        ok = sum(metrics[d]["setups"] * metrics[d]["setup_success_ratio"] for d in self.loop_devices)
        self.setup.add(ok, setups)
        self.amp.add(sum(metrics[p]["tries"] for p in self.loop_pops),
                     sum(metrics[p][k] for p, base in self.amp_base.items() for k in base))
        # (the minute's useful work is counted at most its work done, not each tick's: work is useful when it is
        # credited, which need not be the tick in which it is done, as a lease's work queued across a tick)
        self.useful.add(sum(metrics[s]["work_useful"] for s in self.loop_services),
                        sum(metrics[s]["work_done"] for s in self.loop_services))
        # (ticks with work taken on or waiting: a count, so that a window without any sums to 0 exactly)
        self.admitted.add(float(any(metrics[s]["work_admitted"] + metrics[s]["queue_backlog"] > 0
                                    for s in self.loop_services)), 1)
        for d in self.healthy_devices:
            self.dev_util[d].add(metrics[d]["utilisation"], 1)
            self.dev_ok[d].add(metrics[d]["request_success_ratio"] * metrics[d]["setup_success_ratio"], 1)
        for p, r in self.pop_ok.items():
            r.add(metrics[p]["ok"], metrics[p]["ok"] + metrics[p]["failed"])
            # (held back by an action: wanted; by a trigger or fault: demand that fell, as impact counts it)
            self.pop_wanted[p].add(metrics[p]["demand"] + metrics[p]["held_back"] * self.turning.shed.get(p, False), 1)
        for s, r in self.svc_ok.items():
            r.add(metrics[s]["success_ratio"], 1)
            self.svc_useful[s].add(metrics[s]["work_useful"], 1)
            self.svc_asked[s].add(metrics[s]["offered"], 1)
        thr = self.sc["backlog"]["threshold"]
        if work_changed:
            self._follow_work(tick)
        self.minute.add(metrics, {p: self.counting.work[p] == "durable" and self._late(p, metrics, thr)
                                  for p in self.impact}, self.turning.shed, self.by_attempts)
        if self.minute.full:
            self.error_minutes, self.late_minutes, self.impact = self._with_minute()
            self.minute.clear()
        # collateral: connections broken, and traffic turned away (refused by a service's throttle, or
        # held back by a population's scaled-down rate) counted against what set it; one pass
        broken = 0
        for part, m in metrics.items():
            broken += m.get("broken_connections", 0)
            away = m.get("throttled", 0) + m.get("held_back", 0)
            if away:
                self.turned_away += away
                who = self.turning.by.get(part, part)
                self.turned_away_by[who] = self.turned_away_by.get(who, 0.0) + away
        self.collateral += int(broken)
        for part, metric in self.backlog_metric.items():
            self.peak_backlog[part] = max(self.peak_backlog[part], int(metrics[part][metric]))

        armed = self.trigger_tick is not None
        loop = self.sc["loop"]
        setup, amp, useful = self._loop_quantities()
        held = self.holding.held()
        self._follow_demand(tick, held)
        in_bounds = setup >= loop["setup_success_min"] and amp <= loop["amplification_max"] \
            and (useful is None or useful >= loop["useful_work_min"])
        suspended = armed and in_bounds and any(p in held for p in self.feeding)
        if suspended and not (self.suspended and self.suspended[-1][1] is None):
            self.suspended.append([tick, None])
        elif not suspended and self.suspended and self.suspended[-1][1] is None:
            self.suspended[-1][1] = tick
        conds = {
            "loop_broken": in_bounds and not any(p in held for p in self.feeding),
            "devices_healthy": all(self.dev_util[d].ratio(0.0) <= self.sc["healthy"]["utilisation_max"]
                                   and self.dev_ok[d].ratio(1.0) >= self.sc["healthy"]["success_min"] for d in self.healthy_devices),
        }
        if "backlog_drained" in self.milestones:
            conds["backlog_drained"] = (all(not self._late(p, metrics, thr) for p in self.sc["backlog"]["populations"])
                                        and all(metrics[s]["queue_wait_s"] <= thr for s in self.sc["backlog"]["services"]))
        for p, r in self.pop_ok.items():  # served again, all of its demand: one that wants requests and gets
            # none through has not, nor one whose demand an action holds back in part
            conds[f"recovered:{p}"] = (r.ratio(1.0) >= self.sc["recovered"]["success_min"]
                                       and (r.den > 0 or self.pop_wanted[p].num <= 0) and p not in held)
        for s, r in self.svc_ok.items():  # answering what it is asked: idle and ready is recovered (its success
            # ratio without traffic is its readiness), asked and answering nothing in time is not
            conds[f"recovered:{s}"] = (r.ratio(0.0) >= self.sc["recovered"]["success_min"]
                                       and (self.svc_useful[s].num > 0 or self.svc_asked[s].num <= 0))
        out = []
        for name, ms in self.milestones.items():
            change = ms.update(tick, conds[name], armed)
            if change is not None:
                event, at = change
                out.append({"tick": tick, "agent": "scorer", "event": event, "milestone": name,
                            "at_tick": at, "clock": format_clock(self.start_s + at * self.dt)})
        return out

    def _follow_demand(self, tick: int, held: set[str]) -> None:
        """When the demand actions held back was all back (``demand_restored``)."""
        if held:
            self.held_ever, self.restored_tick = True, None
        elif self.held_ever and self.restored_tick is None:
            self.restored_tick = tick

    def _follow_work(self, tick: int) -> None:
        """Which populations count their attempts from this tick on (a change is kept, with
        the state before it, for the score: the report counts as the scorer did), and which
        count their late minutes (durable work, made so at the start or later)."""
        for p, work in self.counting.work.items():
            if work == "durable":
                self.late_minutes.setdefault(p, 0.0)
        now = self.counting.now()
        for p in now ^ self.by_attempts:
            self.by_attempts_from.setdefault(p, [[0, p in self.by_attempts]]).append([tick, p in now])
        self.by_attempts = now
        self.by_attempts_ever |= now

    def _with_minute(self) -> tuple[dict, dict, dict]:
        """The error minutes, late minutes and impact of each population with the minute
        under way (or the part of one the run ends in) added: the share of its requests
        that failed for good in the minute, for every tick but those in which its durable
        work was late, which count whole."""
        minutes = self.dt / 60.0
        errors_out, late_out, impact_out = dict(self.error_minutes), dict(self.late_minutes), dict(self.impact)
        for p, (errors, final, late) in self.minute.counts.items():
            share = errors / final if final else 0.0
            errors_out[p] += share * self.minute.ticks * minutes
            if p in late_out:
                late_out[p] += late * minutes
            impact_out[p] += share * (self.minute.ticks - late) * minutes + late * minutes
        return errors_out, late_out, impact_out

    def _late(self, population: str, metrics: dict[str, dict[str, float]], threshold_s: float) -> bool:
        """A durable population's backlog is above steady state: more than ``threshold_s``
        seconds of its arrivals (rate x clients) wait."""
        return metrics[population]["backlog"] > threshold_s * self.arrival[population]

    def _loop_quantities(self) -> tuple[float, float, float | None]:
        """Over the last minute: setup success on the loop's devices, attempts per fresh
        request of its populations (per request completed, for durable work:
        AMPLIFICATION_BASE), useful share of its services' work (None: no services)."""
        useful = min(1.0, self.useful.ratio(self._idle_share())) if self.loop_services else None
        # (attempts against nothing fresh or completed: unbounded; no attempts at all: at rest)
        return self.setup.ratio(1.0), self.amp.ratio(math.inf if self.amp.num > 0 else 1.0), useful

    def loop_health(self) -> float:
        """How far the loop is from broken, from 0 to 1: each quantity the loop_broken
        milestone reads, as a share of its bound (setup success over its minimum, the
        amplification bound over the amplification, useful work over its minimum), the
        worst of them, capped at 1. 1: every quantity within bounds (held for the
        milestone's hold, the loop is broken)."""
        loop = self.sc["loop"]
        setup, amp, useful = self._loop_quantities()
        shares = [setup / loop["setup_success_min"] if loop["setup_success_min"] > 0 else 1.0,
                  loop["amplification_max"] / amp if amp > 0 else 1.0]
        if useful is not None:
            shares.append(useful / loop["useful_work_min"] if loop["useful_work_min"] > 0 else 1.0)
        return max(0.0, min(1.0, *shares))

    def _idle_share(self) -> float:
        """The useful share to count for loop services that did no work over the window:
        1 (no wasted work, the feedback has stopped) if they took nothing on and nothing
        waits in their queues, as when traffic is cut or refused by a throttle; 0 (no
        progress) if work reached them that they could not do."""
        return 1.0 if self.admitted.num <= 0 else 0.0

    def _when(self, tick: int | None, par_key: str | None = None) -> rundir.When:
        out: rundir.When = {"reached": tick is not None}
        if tick is not None:
            clock = self.start_s + tick * self.dt
            out["clock"] = format_clock(clock)
            out["seconds_after_start"] = tick * self.dt
            if self.trigger_tick is not None:
                out["seconds_after_trigger"] = (tick - self.trigger_tick) * self.dt
        if par_key and par_key in self.par:
            out["par_clock"] = format_clock(self.par[par_key])
            if tick is not None:
                out["vs_par_s"] = self.start_s + tick * self.dt - self.par[par_key]
        return out

    def _milestone(self, key: str) -> rundir.Milestone:
        """A milestone's final time (``reached``: it holds at the horizon), with its first
        time, its relapses and whether it relapsed for good."""
        m = self.milestones[key]
        out = self._when(m.at, key)
        brief = lambda t: {k: v for k, v in self._when(t).items() if k != "reached"}  # noqa: E731
        out["final"] = brief(m.at) if m.at is not None else None
        out["first_at"] = brief(m.first_at) if m.first_at is not None else None
        out["relapses"] = [brief(t) for t in m.relapses]
        out["relapsed"] = m.relapsed
        out["impaired"] = m.broken_seen  # its condition failed after the trigger: there was something to reach
        if m.held_briefly:  # (only where there are some: the score of every other run reads as before)
            out["held_briefly"] = [{**brief(a), "for_s": (b - a) * self.dt, "hold_s": m.hold * self.dt}
                                   for a, b in m.held_briefly]
        return out

    def score(self) -> rundir.Score:
        """The score so far (a live scoreboard asks during the run: nothing changes here)."""
        errors, late, impact = self._with_minute()
        ms = self.milestones
        loop_formed = ms["loop_broken"].broken_seen
        result = {
            "trigger": self._when(self.trigger_tick, "trigger"),
            "loop_formed": loop_formed,
            "loop_broken": self._milestone("loop_broken"),
            "first_customer_update": self._when(self.first_update, "first_customer_update"),
            "recovered": {k.split(":", 1)[1]: self._milestone(k) for k in ms if k.startswith("recovered:")},
            "impact": {"error_minutes": {p: round(v, 3) for p, v in errors.items()},
                       "late_minutes": {p: round(v, 3) for p, v in late.items()},
                       "weighted_total": round(sum(v * self.impact_w[p] for p, v in impact.items()), 3),
                       # (only where there are some: the score of every other run reads as before)
                       **({"counted_by_attempts": sorted(self.by_attempts_ever)} if self.by_attempts_ever else {}),
                       **({"counted_by_attempts_from": {
                           p: [{"tick": t, "clock": format_clock(self.start_s + t * self.dt), "by_attempts": on}
                               for t, on in changes] for p, changes in sorted(self.by_attempts_from.items())}}
                          if self.by_attempts_from else {})},
            "collateral": {"connections_broken_by_actions": self.collateral,
                           "requests_turned_away": int(round(self.turned_away)),
                           "requests_turned_away_by": {k: int(round(v)) for k, v in sorted(self.turned_away_by.items())}},
            "actions_taken": self.actions,
            # (only where an action held demand back: the score of every other run reads as before)
            **({"demand_restored": self._when(self.restored_tick, "demand_restored")} if self.held_ever else {}),
            **({"loop_suspended": [{"from": self._when(a), "to": self._when(b)} for a, b in self.suspended]}
               if self.suspended else {}),
            # (only once one has: the score of a run in which none did reads as before)
            **({"first_action_effective": self._when(self.first_effective)} if self.first_effective is not None else {}),
            "simulated_until": format_clock(self.start_s + (self.last_tick + 1) * self.dt),
        }
        if "devices_healthy" in ms:
            result["devices_healthy"] = self._milestone("devices_healthy")
        if "backlog_drained" in ms:
            result["backlog_drained"] = self._milestone("backlog_drained")
            result["backlog_peak"] = self.peak_backlog
        return result
