"""How a run's impact counts requests, one rule for the scorer (as the run goes) and the
report (from the run's files): which requests failed for good, and which turned away
traffic is the response's doing."""
from __future__ import annotations

from agents.shards import source_of

#: operations that turn traffic away while they hold, and the metric that counts it
TURNS_AWAY = {"throttle": "throttled", "scale_rate": "held_back", "readmit": "held_back"}


def retried_without_limit(work: str, max_attempts: int) -> bool:
    """Perishable work whose requests are retried until they succeed (``retry.max_attempts``
    0): they never fail for good, however long they fail, so their impact counts the share
    of their attempts that failed (else a world that never answered them would score no
    impact at all)."""
    return work == "perishable" and max_attempts == 0


class CountedByAttempts:
    """Which populations' impact counts their attempts (``retried_without_limit``) as the run
    goes, fed the journal tick by tick: a ``set_work`` or a ``set_retry_policy`` that changes
    ``max_attempts`` changes it from its tick on (else a runbook lifting the retry limit in
    an outage would stop the outage from costing anything: no request fails for good)."""

    def __init__(self, populations: dict[str, tuple[str, int]]):
        """``populations``: name -> (work, retry.max_attempts) at the start."""
        self.work = {p: w for p, (w, _) in populations.items()}
        self.limit = {p: n for p, (_, n) in populations.items()}

    def see(self, e: dict) -> bool:
        """Take a journalled event; whether it changed a population's work or retry limit."""
        if e["event"] != "applied" or e.get("op") not in ("set_work", "set_retry_policy"):
            return False
        pop, args = source_of(e["agent"]), e.get("args") or {}
        if pop not in self.work:
            return False
        if e["op"] == "set_work":
            self.work[pop] = args["work"]
        elif args.get("max_attempts") is not None:
            self.limit[pop] = int(args["max_attempts"])
        else:
            return False
        return True

    def now(self) -> set[str]:
        """The populations whose impact counts their attempts now."""
        return {p for p, w in self.work.items() if retried_without_limit(w, self.limit[p])}


def failed_and_finished(field, by_attempts: bool, shed):
    """A population's requests failed for good and its requests finished (ok + failed), for
    its impact, over a tick (``field(name)`` its metric) or over a metrics table (a column):
    for ``by_attempts`` (``retried_without_limit`` then) its attempts failed and resolved instead.
    Requests an action held back (``shed``: true while what last set the population's rate
    below 1 was an action) count as failed: wanted and never served, as the customer sees
    them; a trigger or fault that lowers the rate models demand falling, not harm."""
    failed = field("failed" if by_attempts else "errors") + field("held_back") * shed
    return failed, failed + field("ok")


def _sources(e: dict, an_action: dict[str, bool]) -> bool:
    """Keep ``an_action`` (source name -> whether it is an action, not a trigger or fault) up to
    date with ``e``; whether ``e`` named a source."""
    kind = e["event"]
    if kind == "action_effective":
        an_action[e["action"]] = True
    elif kind == "trigger":
        an_action[e["trigger"]] = False
    elif kind == "fault_injected":
        an_action[e["fault"]] = False
    else:
        return False
    return True


class HeldDemand:
    """Which populations an action holds demand back from, fed the journal tick by tick:
    fresh requests cut by a scale_rate below 1, or durable work paced by a scale_dispatch
    below what arrives (dispatch x max_rate under rate x arrivals), where what set it last
    was an action, or a readmission an action started and has not finished. A trigger's or
    a fault's cut is demand that fell, which nobody holds back."""

    def __init__(self, populations: dict[str, tuple[str, float | None, float]]):
        """``populations``: name -> (work, max_rate, arrivals per second) at the start."""
        self.work = {p: w for p, (w, _, _) in populations.items()}
        self.max_rate = {p: m for p, (_, m, _) in populations.items()}
        self.arrivals = {p: a for p, (_, _, a) in populations.items()}
        # as the population keeps them: the world's demand factor apart from the response's cut
        self.demand = {p: 1.0 for p in populations}
        self.rate = {p: 1.0 for p in populations}
        self.dispatch = {p: 1.0 for p in populations}
        self.dispatch_by_action = {p: False for p in populations}
        self.readmitting_by_action = {p: False for p in populations}
        self._an_action: dict[str, bool] = {}

    def see(self, e: dict) -> None:
        if _sources(e, self._an_action):
            return
        kind, part = e["event"], source_of(e["agent"])
        if part not in self.work:
            return
        args = e.get("args") or {}
        by_action = kind == "applied" and self._an_action.get(e.get("by") or e["agent"], False)
        if kind == "applied" and e.get("op") == "scale_rate":
            (self.rate if by_action else self.demand)[part] = float(args["factor"])
        elif kind == "applied" and e.get("op") == "scale_dispatch":
            self.dispatch[part], self.dispatch_by_action[part] = float(args["factor"]), by_action
        elif kind == "applied" and e.get("op") == "readmit":
            self.readmitting_by_action[part] = by_action
        elif kind == "readmitted":  # (a step of a readmission: the factor it lifts, as the population chose)
            if self.work[part] == "durable":
                self.dispatch[part] = float(e["share"])
            else:
                (self.rate if self.readmitting_by_action[part] else self.demand)[part] = float(e["share"])
        elif kind == "applied" and e.get("op") == "set_work":
            self.work[part] = args["work"]
            if args.get("max_rate") is not None:
                self.max_rate[part] = float(args["max_rate"])

    def held(self) -> set[str]:
        out = set()
        for p in self.work:
            paced = self.work[p] == "durable" and self.max_rate[p] is not None and self.dispatch_by_action[p] and \
                self.dispatch[p] * self.max_rate[p] < self.demand[p] * self.rate[p] * self.arrivals[p]
            if self.rate[p] < 1.0 or paced:
                out.add(p)
        return out


class TurnedAway:
    """What turns each part's traffic away (a service's throttle, a population's rate below 1,
    a readmission), fed the journal tick by tick: the name of what last set it (an action, a
    trigger or a fault; what a readmission still holds back counts against the cut it lifts)
    and whether that was an action (``shed``)."""

    def __init__(self):
        self.by: dict[str, str] = {}
        self.shed: dict[str, bool] = {}
        self._an_action: dict[str, bool] = {}  # source name -> whether its last journalled source was an action

    def see(self, e: dict) -> None:
        kind = e["event"]
        if not _sources(e, self._an_action) and kind == "applied" and e.get("op") in TURNS_AWAY:
            part = source_of(e["agent"])
            if e.get("op") != "readmit" or part not in self.by:
                self.by[part] = e.get("by") or e["agent"]
                self.shed[part] = self._an_action.get(self.by[part], False)

    @classmethod
    def shed_from(cls, events: list[dict]) -> dict[str, list[tuple[int, bool]]]:
        """Per part, (tick, shed) from each tick on which whether an action holds its traffic
        back changed, read from a run's journal."""
        turned, out = cls(), {}
        for e in events:
            turned.see(e)
            if e["event"] == "applied" and e.get("op") in TURNS_AWAY:
                part = source_of(e["agent"])
                out.setdefault(part, []).append((e["tick"], turned.shed[part]))
        return out
