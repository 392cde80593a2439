"""Checks on the score, for a CI gate (``gameday check``): thresholds written as k6 writes
its own (``p(90) <= 30m``: "the loop broken within 30 minutes of the trigger in at least
90% of seeds"), each on one measure of a run, judged over the seeds played, with how sure
the verdict is.

A threshold is ``AGGREGATE OPERATOR VALUE``:

- ``p(N)``, ``median`` (p(50)), ``max`` (p(100)) and ``min``: a share of the seeds. ``p(90)
  <= 30m`` holds when at least 90% of the seeds' runs have the measure at most 30 minutes
  (``p(N) > v``: more than 100 - N% of them above v); ``max`` is every seed; ``min > v``,
  every seed above v. Its confidence is an exact (Clopper-Pearson) bound on that share.
- ``mean`` (``avg``, as k6 says it): the mean over the seeds, with a one-sided t bound.
- ``rate``: the share of the seeds whose run reached the milestone at all (``rate >=
  90%``), with the Clopper-Pearson bound.

A time's value is a duration (``30m``, ``1h30m``, ``90s``) after the trigger, or ``par``:
the clock time the playbook's ``par`` gives that milestone. A run that never reached the
milestone (or whose loop broke and formed again) counts as never: above any bound.

**How sure.** A check is *proven* when its one-sided bound at ``1 - alpha`` lies wholly on
one side of its threshold. ``gameday check`` looks after each seed from the first stage
on, and stops a runbook once all its checks are proven (or at the most seeds): each look
spends ``alpha`` over the number of looks it may make (Bonferroni), so a proven verdict is
wrong with probability at most ``alpha`` however early it stopped. A check not proven by
the most seeds is judged on the seeds played (the figure against the threshold), and says
so; ``--strict`` fails it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from scipy import stats

from .timefmt import format_minutes, parse_duration

#: the measures a check can bound: metric -> (its unit: "number" or "time", what it is)
METRICS = {"impact": ("number", "the run's weighted impact (the playbook's scoring.impact)"),
           "loop_broken": ("time", "time from the trigger to the loop broken (a loop that never formed: 0)"),
           "backlog_drained": ("time", "time from the trigger to the backlog drained"),
           "first_customer_update": ("time", "time from the trigger to the first customer update")}
#: the aggregates, in the order the reference gives them
AGGREGATES = ("p(N)", "median", "max", "min", "mean", "avg", "rate")
OPERATORS = ("<=", ">=", "<", ">")
GRAMMAR = ("AGGREGATE OPERATOR VALUE, as k6 writes thresholds: AGGREGATE one of p(N) (N in 1..100), median, max, "
           "min, mean (or avg), rate (times only); OPERATOR one of <, <=, >, >=; VALUE a number (impact), a duration "
           "(30m, 1h30m, 90s after the trigger) or par (times), a share (rate: 0.9 or 90%)")
_EXPRESSION = re.compile(r"^\s*(p\(\s*(\d+(?:\.\d+)?)\s*\)|[a-z]+)\s*(<=|>=|<|>)\s*(\S+)\s*$")


class BadThreshold(ValueError):
    """A threshold that does not say a check (its message: what was expected)."""


@dataclass(frozen=True)
class Threshold:
    """One parsed threshold: the share of seeds ``quantile`` (p(N), median, max, min: 0..1),
    or ``aggregate`` "mean" or "rate"; ``op``; ``value`` (a number, seconds, a share) or
    ``par`` (the playbook's par for the milestone)."""

    text: str
    aggregate: str  # "quantile", "mean" or "rate"
    op: str
    quantile: float | None = None  # (min: 0.0)
    value: float | None = None
    par: bool = False


def parse_threshold(text: str, metric: str) -> Threshold:
    """``text`` as a threshold on ``metric`` (``METRICS``); raises BadThreshold."""
    if metric not in METRICS:
        raise BadThreshold(f"a check's metric is one of {', '.join(METRICS)}")
    unit = METRICS[metric][0]
    m = _EXPRESSION.match(str(text))
    if m is None:
        raise BadThreshold(GRAMMAR)
    head, n, op, raw = m.groups()
    if n is not None:
        q = float(n)
        if not 0 < q <= 100:
            raise BadThreshold(f"p(N) with N in 1..100 (the share of the seeds, in percent); got p({n})")
        kind, quantile = "quantile", q / 100
    elif head == "median":
        kind, quantile = "quantile", 0.5
    elif head == "max":
        kind, quantile = "quantile", 1.0
    elif head == "min":
        kind, quantile = "quantile", 0.0
    elif head in ("mean", "avg"):
        kind, quantile = "mean", None
    elif head == "rate":
        kind, quantile = "rate", None
    else:
        raise BadThreshold(GRAMMAR)
    if head == "max" and op in (">", ">="):
        raise BadThreshold("max bounds every seed from above (max < v, max <= v); for a bound from below, min > v")
    if head == "min" and op in ("<", "<="):
        raise BadThreshold("min bounds every seed from below (min > v, min >= v); for a bound from above, max < v")
    if kind == "quantile" and quantile == 1.0 and op in (">", ">="):
        raise BadThreshold("p(100) > v would hold with no seed above v; write min > v (every seed) or p(N) > v")
    if kind == "rate":
        if unit != "time":
            raise BadThreshold(f"rate is the share of seeds that reached a milestone: a time's ({_times()}), not "
                               f"{metric}")
        share = _share(raw)
        return Threshold(str(text), kind, op, value=share)
    if raw == "par":
        if unit != "time":
            raise BadThreshold(f"par is a milestone's clock time in the playbook's par: for {_times()}, not {metric}")
        return Threshold(str(text), kind, op, quantile, par=True)
    try:
        value = parse_duration(raw) if unit == "time" else float(raw.replace(",", ""))
    except ValueError:
        raise BadThreshold(f"a {'duration (30m, 1h30m, 90s) or par' if unit == 'time' else 'number'} after "
                           f"{op}; got {raw!r}") from None
    if not math.isfinite(value):
        raise BadThreshold(f"a finite value; got {raw!r}")
    return Threshold(str(text), kind, op, quantile, value=value)


def _times() -> str:
    return ", ".join(k for k, (unit, _) in METRICS.items() if unit == "time")


def _share(raw: str) -> float:
    try:
        v = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise BadThreshold(f"a share after the operator: 0.9 or 90%; got {raw!r}") from None
    if not 0 <= v <= 1:
        raise BadThreshold(f"a share from 0 to 1 (or 0% to 100%); got {raw!r}")
    return v


# -- judging ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """A check judged on ``n`` seeds: ``passed`` (on the seeds played), ``proven`` (at 1 -
    alpha, whichever way), ``figure`` (what the seeds show) and ``confidence`` (what is
    proven, or what would be needed)."""

    passed: bool
    proven: bool
    n: int
    figure: str
    confidence: str


def values_of(rows: list[dict], metric: str) -> np.ndarray:
    """Each run's ``metric`` (times in seconds after the trigger; never: inf)."""
    out = []
    for r in rows:
        if metric == "impact":
            out.append(float(r["impact"]))
            continue
        if metric == "loop_broken":
            t = float(r["loop_broken_s"]) if r["loop_formed"] else 0.0
            if r.get("outcome") == "relapsed":
                t = math.nan
        elif metric == "backlog_drained":
            t = float(r["backlog_drained_s"]) if r.get("backlog_scored") else math.nan
        else:
            t = float(r["first_update_s"])
        out.append(t if math.isfinite(t) else math.inf)
    return np.array(out, dtype=float)


def bounds_of(rows: list[dict], th: Threshold, par_s: float | None, start_s: float) -> np.ndarray:
    """The threshold's value for each run, in the measure's unit: its value, or for par the
    time from the run's trigger to the par clock."""
    if not th.par:
        return np.full(len(rows), float(th.value))
    return np.array([par_s - (start_s + float(r["trigger_s"])) for r in rows], dtype=float)


_HOLDS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}


def judge(rows: list[dict], metric: str, th: Threshold, alpha: float, par_s: float | None = None,
          start_s: float = 0.0, looks: int = 1) -> Verdict:
    """``th`` on ``metric`` over ``rows`` (one per seed), proven at ``1 - alpha`` over
    ``looks`` looks: each bound is at level ``alpha / looks`` (Bonferroni)."""
    level, alpha = f"{1 - alpha:.4g}", alpha / looks
    x, n = values_of(rows, metric), len(rows)
    unit = METRICS[metric][0]
    if th.aggregate == "mean":
        return _judge_mean(x, th, alpha, unit, bounds_of(rows, th, par_s, start_s), level)
    if th.aggregate == "rate":
        ok = np.isfinite(x)
        need = float(th.value)
        return _judge_share(int(ok.sum()), n, need, th.op, alpha, f"{int(ok.sum())} of {n} seeds reached it",
                            "of the seeds reach it", level)
    v = bounds_of(rows, th, par_s, start_s)
    ok = _HOLDS[th.op](x, v)
    # the share of seeds that must hold: p(N) <= v needs N% at most v; p(N) > v, more than 100-N% above v;
    # min > v, every seed
    need = th.quantile if th.op in ("<", "<=") else (1.0 if th.quantile == 0.0 else 1.0 - th.quantile)
    bound = "par" if th.par else _amount(unit, float(th.value))
    k = int(ok.sum())
    figure = f"{k} of {n} seeds {th.op} {bound}" + _spread(x, unit)
    return _judge_share(k, n, need, ">=" if th.op in ("<", "<=") or need == 1.0 else ">", alpha, figure,
                        f"of the seeds are {th.op} {bound}", level)


def _judge_share(k: int, n: int, need: float, op: str, alpha: float, figure: str, what: str, level: str) -> Verdict:
    """A share ``k / n`` against ``need`` (``op``: >=, or > ; for rate any operator), its
    bounds at ``alpha``, said at ``level``."""
    share = k / n if n else 0.0
    lo = stats.beta.ppf(alpha, k, n - k + 1) if k > 0 else 0.0  # Clopper-Pearson, one-sided
    hi = stats.beta.ppf(1 - alpha, k + 1, n - k) if k < n else 1.0
    holds = _HOLDS[op]
    passed = bool(holds(share, need)) if n else False
    above = op in (">", ">=")  # a share bounded from below: its lower bound proves a pass (else its upper bound)
    near, far = (lo, hi) if above else (hi, lo)
    proven_pass, proven_fail = bool(holds(near, need)), not bool(holds(far, need))
    if proven_pass:
        said = f"at {level} confidence, {'at least' if above else 'at most'} {_pct(near)} {what}"
    elif proven_fail:
        said = f"at {level} confidence, {'at most' if above else 'at least'} {_pct(far)} {what}"
    else:
        said = f"not proven at {level}: between {_pct(lo)} and {_pct(hi)} {what} (needed {op} {_pct(need)})"
    return Verdict(passed, proven_pass or proven_fail, n, figure, said)


def _judge_mean(x: np.ndarray, th: Threshold, alpha: float, unit: str, v: np.ndarray, level: str) -> Verdict:
    n = len(x)
    bound = float(v.mean()) if n else math.nan  # (par: the seeds' own bounds, averaged)
    shown = "par" if th.par else _amount(unit, bound)
    holds = _HOLDS[th.op]
    if n and not np.isfinite(x).all():  # a seed that never got there: the mean is unbounded
        never = int((~np.isfinite(x)).sum())
        passed = th.op in (">", ">=")
        return Verdict(passed, True, n, f"mean unbounded: {never} of {n} seeds never got there",
                       "proven: a milestone some runs never reach has no finite mean")
    mean = float(x.mean()) if n else math.nan
    figure = f"mean {_amount(unit, mean)} over {n} seeds (bound {shown})"
    if n < 2:
        return Verdict(bool(holds(mean, bound)) if n else False, False, n, figure, "not proven: one seed has no spread")
    half = stats.t.ppf(1 - alpha, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    lo, hi = mean - half, mean + half
    passed = bool(holds(mean, bound))
    upper_side = th.op in ("<", "<=")
    proven_pass = bool(holds(hi if upper_side else lo, bound))
    proven_fail = not bool(holds(lo if upper_side else hi, bound))
    said = (f"proven at {level}: the mean is between {_amount(unit, lo)} and {_amount(unit, hi)}"
            if proven_pass or proven_fail else
            f"not proven at {level}: the mean is between {_amount(unit, lo)} and {_amount(unit, hi)}")
    return Verdict(passed, proven_pass or proven_fail, n, figure, said)


def _spread(x: np.ndarray, unit: str) -> str:
    finite = x[np.isfinite(x)]
    never = len(x) - len(finite)
    if not len(finite):
        return " (none got there)"
    median = _amount(unit, float(np.median(x)))
    return f" (median {median}, worst {_amount(unit, float(x.max()))})" if never == 0 else \
        f" (median {median}; {never} never got there)"


def _amount(unit: str, v: float) -> str:
    if not math.isfinite(v):
        return "never"
    return format_minutes(v, 1) if unit == "time" else f"{v:,.1f}"


def _pct(v: float) -> str:
    return f"{100 * v:.0f}%"


def par_seconds(par: dict, metric: str) -> float | None:
    """The playbook's par clock for ``metric`` in seconds after midnight (None: it has none)."""
    v = par.get(metric)
    return None if v is None else float(v)

