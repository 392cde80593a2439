"""Deciding which runbook is best, and how sure that is.

Runs of one seed share their random streams (common random numbers), so two runbooks are
compared on their per-seed differences, never as independent samples. One **primary
outcome** ranks them (lower is better for each):

- ``impact``: the playbook's weighted impact (``scoring.impact``);
- ``loop_broken`` / ``backlog_drained``: the time from the trigger to that milestone, a
  run that never got there censored at the horizon. The race compares restricted times
  (a censored run counts as the horizon after the trigger, a difference a run that never
  got there cannot exaggerate); the pairs add Kaplan-Meier medians and a log-rank test.

``Race`` is Kim and Nelson's fully sequential procedure for selecting the best with
common random numbers (Kim & Nelson 2001, "A fully sequential procedure for
indifference-zone selection in simulation", ACM TOMACS 11(3); procedure KN with c = 1):
after a first stage of ``first`` seeds, which fixes the variance of every pair's
differences, it eliminates after each seed every runbook whose mean is worse than
another's by more than a margin that shrinks as seeds come in, and stops when one is
left. Whenever the best is better than every other by at least the indifference amount
``delta``, it selects it with probability at least 1 - ``alpha`` (normal outcomes; a test
plays it on thousands of synthetic races, heavy tails and ties included). It is valid
under optional stopping by construction: it looks after every seed. A race cut short (by
the most seeds allowed, Ctrl-C or a time limit) names the runbooks still in it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

#: the outcomes a comparison can rank runbooks by (lower is better), and what each is
PRIMARY = {"impact": "weighted impact (the playbook's scoring.impact)",
           "loop_broken": "time from the trigger to the loop broken (censored at the horizon)",
           "backlog_drained": "time from the trigger to the backlog drained (censored at the horizon)"}
DEFAULT_PRIMARY = "impact"
#: the indifference amount, when the playbook and the command give none, as a share of the most
#: a run can score on the primary outcome (``scale``): a scale the playbook fixes before any run,
#: so the procedure's guarantee holds (an amount read from the runs would not)
DEFAULT_DELTA_SHARE = 0.01
DEFAULT_ALPHA = 0.05
#: seeds every runbook plays before any is eliminated (they fix the variances; at least 2)
DEFAULT_FIRST = 3
#: how a results table decides without the playbook its comparison resolves them from (a table
#: made by hand): the default primary outcome, an indifference amount of 1 in its unit
WITHOUT_PLAYBOOK = {"primary": DEFAULT_PRIMARY, "delta": 1.0, "alpha": DEFAULT_ALPHA}
#: the power an undecided pair's "smallest detectable difference" is stated at
POWER = 0.8


def unit_text(primary: str, amount: float) -> str:
    """An amount of the primary outcome as text: minutes for times, the number for impact."""
    if primary == "impact":
        return f"{amount:,.1f}"
    return f"{amount / 60:,.1f} min"


def scale(primary: str, impact_weights: dict, duration_s: float) -> float:
    """The most a run can score on ``primary``: for impact, every weighted population
    impaired every minute of the run; for a time, the run's duration."""
    if primary == "impact":
        return sum(impact_weights.values()) * duration_s / 60
    return duration_s


def restricted_times(df: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(time after the trigger, reached) for ``column`` (``loop_broken`` or
    ``backlog_drained``) of each run: a run that never got there, or whose loop re-formed,
    is censored at the horizon after the trigger."""
    if column == "loop_broken":
        t = df["loop_broken_s"].astype(float).where(df["loop_formed"].astype(bool), 0.0)
        if "outcome" in df:
            t = t.mask(df["outcome"] == "relapsed", math.nan)
    else:
        t = df["backlog_drained_s"].astype(float)
    horizon = (df["horizon_s"].astype(float) - df["trigger_s"].astype(float).fillna(0.0)).to_numpy()
    t = t.to_numpy(dtype=float)
    reached = np.isfinite(t)
    return np.where(reached, np.minimum(t, horizon), horizon), reached


def outcome(df: pd.DataFrame, primary: str) -> np.ndarray:
    """The primary outcome of each run of ``df`` (lower is better)."""
    if primary == "impact":
        return df["impact"].to_numpy(dtype=float)
    return restricted_times(df, primary)[0]


# -- the race ----------------------------------------------------------------------------------

def kn_h2(k: int, alpha: float, first: int) -> float:
    """Kim and Nelson's h^2 for k runbooks, error rate alpha and a first stage of ``first``
    seeds: 2 eta (first - 1), eta = ((2 alpha / (k - 1)) ^ (-2 / (first - 1)) - 1) / 2."""
    eta = ((2 * alpha / (k - 1)) ** (-2 / (first - 1)) - 1) / 2
    return 2 * eta * (first - 1)


@dataclass
class Race:
    """Kim and Nelson's procedure KN over ``names`` (minimising). Feed it seed by seed
    (``add``: the outcome of every runbook still in the race on that seed)."""

    names: list[str]
    alpha: float = DEFAULT_ALPHA
    delta: float = 1.0
    first: int = DEFAULT_FIRST
    values: dict = field(default_factory=dict)  # name -> outcomes, one per seed it played
    alive: list = field(default_factory=list)
    #: name -> (seeds it had played, the runbook that put it out)
    out: dict = field(default_factory=dict)
    #: name -> the runbook selected over it at the end, their means equal (within the indifference amount)
    tied: dict = field(default_factory=dict)
    s2: dict = field(default_factory=dict)  # (i, l) -> variance of i - l over the first stage
    h2: float = 0.0
    ended: str = ""  # why it ended: "one left", "all within delta", or "" (still running)

    def __post_init__(self):
        if not self.first >= 2:
            raise ValueError(f"first stage of {self.first} seeds: at least 2 are needed for a variance")
        if not 0 < self.alpha < 1 or not self.delta > 0:
            raise ValueError("alpha in (0, 1) and delta > 0")
        self.alive = list(self.names)
        self.values = {n: [] for n in self.names}
        self.h2 = kn_h2(len(self.names), self.alpha, self.first) if len(self.names) > 1 else 0.0
        if len(self.names) == 1:
            self.ended = "one left"

    @property
    def seeds(self) -> int:
        """Seeds played by the runbooks still in the race."""
        return len(self.values[self.alive[0]])

    @property
    def decided(self) -> bool:
        return bool(self.ended)

    @property
    def best(self) -> str | None:
        """The runbook selected, once decided."""
        return self.alive[0] if self.decided else None

    def mean(self, name: str) -> float:
        return float(np.mean(self.values[name]))

    def add(self, seed_values: dict[str, float]) -> None:
        """One more seed's outcomes, for every runbook still in the race."""
        if self.decided:
            raise ValueError("the race is decided")
        if set(seed_values) != set(self.alive):
            raise ValueError(f"outcomes of {sorted(seed_values)}; the race needs {sorted(self.alive)}")
        for n in self.alive:
            self.values[n].append(float(seed_values[n]))
        r = self.seeds
        if r < self.first:
            return
        if r == self.first:
            # The variances stay those of the first stage: KN++, which updates them as seeds
            # come in, ends sooner but selected the best in only 90% of synthetic races whose
            # spread was twice the indifference amount (3 seeds first), against 95% asked
            for i in self.alive:
                for j in self.alive:
                    if i != j:
                        d = np.asarray(self.values[i]) - np.asarray(self.values[j])
                        self.s2[(i, j)] = float(np.var(d, ddof=1))
        self._screen(r)

    def margin(self, i: str, j: str, r: int) -> float:
        """W_ij(r): how much worse than j runbook i's mean may be after r seeds and stay."""
        return max(0.0, self.delta / (2 * r) * (self.h2 * self.s2[(i, j)] / self.delta ** 2 - r))

    def _screen(self, r: int) -> None:
        means = {n: self.mean(n) for n in self.alive}
        before = list(self.alive)
        keep = []
        for i in before:
            beaten = [j for j in before if j != i and means[i] > means[j] + self.margin(i, j, r)]
            if beaten:
                self.out[i] = (r, min(beaten, key=lambda j: means[j]))
            else:
                keep.append(i)
        self.alive = keep
        if len(keep) == 1:
            self.ended = "one left"
        elif all(r > self.h2 * self.s2[(i, j)] / self.delta ** 2 for i in keep for j in keep if i != j):
            # Every margin is 0 from here on: the means left are equal (within rounding),
            # so any of them is within delta of the best: KN's last stage picks the smallest.
            best = min(keep, key=lambda n: means[n])
            for n in keep:
                if n != best:
                    self.tied[n] = best
            self.alive = [best]
            self.ended = "all within delta"

    def status(self) -> list[dict]:
        """Per runbook, in the order given: seeds played, mean outcome, and its state:
        ``best``, ``in the race`` (undecided), ``out`` (with the seeds it had played and
        the runbook that put it out) or ``as good`` (still in at the end, with the same mean
        as the one selected: within the indifference amount of it)."""
        recs = []
        for n in self.names:
            rec = {"runbook": n, "seeds": len(self.values[n]), "mean": self.mean(n) if self.values[n] else math.nan}
            if n in self.out:
                rec |= {"state": "out", "out_after": self.out[n][0], "out_by": self.out[n][1]}
            elif n in self.tied:
                rec |= {"state": "as good", "out_after": None, "out_by": self.tied[n]}
            else:
                rec |= {"state": "best" if self.decided else "in the race", "out_after": None, "out_by": ""}
            recs.append(rec)
        return recs


# -- pairs -------------------------------------------------------------------------------------

def _t(q: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(q, dof))


def paired_ci(d: np.ndarray, alpha: float = DEFAULT_ALPHA) -> tuple[float, float, float]:
    """(mean, low, high) of per-seed differences ``d``: Student's t interval at 1 - alpha
    (a point interval when every difference is the same; unbounded with one seed)."""
    n = len(d)
    mean = float(np.mean(d))
    if n < 2:
        return mean, -math.inf, math.inf
    half = _t(1 - alpha / 2, n - 1) * float(np.std(d, ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def detectable(sd: float, n: int, alpha: float = DEFAULT_ALPHA) -> float:
    """The smallest mean difference that n paired seeds with this spread of differences
    would show at 1 - alpha with probability POWER (inf below 2 seeds)."""
    if n < 2:
        return math.inf
    return (_t(1 - alpha / 2, n - 1) + _t(POWER, n - 1)) * sd / math.sqrt(n)


def seeds_for(difference: float, sd: float, alpha: float = DEFAULT_ALPHA) -> int:
    """Roughly how many paired seeds show ``difference`` at 1 - alpha with probability
    POWER, given this spread of differences (the normal approximation, then t's)."""
    from scipy.stats import norm

    if sd == 0:
        return 2
    n = max(2, math.ceil(((norm.ppf(1 - alpha / 2) + norm.ppf(POWER)) * sd / difference) ** 2))
    while n < 100_000 and detectable(sd, n, alpha) > difference:
        n += 1
    return n


def km_median(t: np.ndarray, reached: np.ndarray) -> float:
    """The Kaplan-Meier median time: the first time by which at least half the runs got
    there (inf if they never did). Every run is censored at the same horizon, so the
    estimate is the share of runs not yet there, which first reaches 1/2 at the
    ceil(n/2)-th time."""
    k = math.ceil(len(t) / 2)
    times = np.sort(t[reached])
    return float(times[k - 1]) if k and len(times) >= k else math.inf


def logrank(ta: np.ndarray, ra: np.ndarray, tb: np.ndarray, rb: np.ndarray) -> float:
    """Two-sided p of the log-rank test on two sets of censored times (1.0 where no run of
    either got there: nothing to compare)."""
    if not ra.any() and not rb.any():
        return 1.0
    from scipy.stats import CensoredData, logrank as scipy_logrank

    a = CensoredData(uncensored=ta[ra], right=ta[~ra])
    b = CensoredData(uncensored=tb[rb], right=tb[~rb])
    with np.errstate(invalid="ignore", divide="ignore"):  # (every time tied: no variance, nothing to tell)
        p = float(scipy_logrank(a, b).pvalue)
    return 1.0 if math.isnan(p) else p


#: the measures a pair compares; the primary among them decides
MEASURES = ("impact", "loop_broken", "backlog_drained")


def _paired(ga: pd.DataFrame, gb: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs of two runbooks on the seeds both played, in seed order."""
    seeds = sorted(set(ga["seed"]) & set(gb["seed"]))
    return (ga.set_index("seed").loc[seeds].reset_index(), gb.set_index("seed").loc[seeds].reset_index())


def pair(a: str, b: str, ga: pd.DataFrame, gb: pd.DataFrame, primary: str, delta: float,
         alpha: float = DEFAULT_ALPHA) -> dict:
    """Runbook a against b on the seeds both played: per measure, the mean per-seed
    difference a - b with its interval, the share of seeds on which a is better, and for
    times the Kaplan-Meier medians and the log-rank p; on the primary, whether the
    interval settles it and, if not, the smallest difference these seeds could show and
    how many seeds ``delta`` needs."""
    ga, gb = _paired(ga, gb)
    n = len(ga)
    rec = {"a": a, "b": b, "seeds": n, "primary": primary}
    scored_backlog = bool(ga["backlog_scored"].astype(bool).all()) if "backlog_scored" in ga and n else False
    for m in MEASURES:
        if m == "backlog_drained" and not scored_backlog:
            continue
        if m != "impact":
            (ta, ra), (tb, rb) = restricted_times(ga, m), restricted_times(gb, m)
        d = outcome(ga, m) - outcome(gb, m) if m == "impact" else ta - tb
        mean, lo, hi = paired_ci(d, alpha)
        sd = float(np.std(d, ddof=1)) if n > 1 else math.nan
        rec |= {f"{m}_diff": mean, f"{m}_ci": (lo, hi), f"{m}_sd": sd,
                f"{m}_a_better": float(np.mean(d < 0)) if n else math.nan,
                f"{m}_b_better": float(np.mean(d > 0)) if n else math.nan}
        if m != "impact":
            rec |= {f"{m}_median_a": km_median(ta, ra), f"{m}_median_b": km_median(tb, rb),
                    f"{m}_reached_a": float(ra.mean()) if n else math.nan,
                    f"{m}_reached_b": float(rb.mean()) if n else math.nan,
                    f"{m}_logrank_p": logrank(ta, ra, tb, rb) if n else math.nan}
    lo, hi = rec[f"{primary}_ci"]
    sd = rec[f"{primary}_sd"]
    rec["settled"] = bool(lo > 0 or hi < 0 or (sd == 0 and n >= 2))
    rec["detectable"] = 0.0 if sd == 0 else detectable(sd, n, alpha) if n >= 2 else math.inf
    rec["seeds_for_delta"] = seeds_for(delta, sd, alpha) if n >= 2 and not math.isnan(sd) else math.nan
    rec["sentence"] = pair_sentence(rec, delta, alpha)
    return rec


_WORDS = {"impact": ("has less impact", "has more impact"),
          "loop_broken": ("breaks the loop sooner", "breaks the loop later"),
          "backlog_drained": ("drains the backlog sooner", "drains the backlog later")}


def _amount(m: str, x: float) -> str:
    return unit_text(m, abs(x))


def _ci_text(m: str, lo: float, hi: float) -> str:
    if math.isinf(lo) or math.isinf(hi):
        return "unbounded"
    fmt = (lambda v: f"{v:+,.1f}") if m == "impact" else (lambda v: f"{v / 60:+,.1f} min")
    return f"{fmt(lo)} to {fmt(hi)}"


def _shown(rec: dict, m: str) -> int:
    """-1 where a is shown better on m, 1 where b is, 0 where neither (the interval holds 0)."""
    if f"{m}_ci" not in rec:
        return 0
    lo, hi = rec[f"{m}_ci"]
    sd = rec[f"{m}_sd"]
    d = rec[f"{m}_diff"]
    if hi < 0 or (sd == 0 and d < 0 and rec["seeds"] >= 2):
        return -1
    if lo > 0 or (sd == 0 and d > 0 and rec["seeds"] >= 2):
        return 1
    return 0


def _censored(rec: dict, m: str) -> str:
    """For a time: the runs that never got there, counted as the horizon ("" if none)."""
    if m == "impact":
        return ""
    never = [(rec[x], round((1 - rec[f"{m}_reached_{x}"]) * rec["seeds"])) for x in ("a", "b")]
    never = [f"{name} on {k} of {rec['seeds']}" for name, k in never if k]
    return f"; never within the horizon (counted as the horizon): {', '.join(never)}" if never else ""


def pair_sentence(rec: dict, delta: float, alpha: float = DEFAULT_ALPHA) -> str:
    """The pair in words: which is better on the primary and by how much (with its
    interval), or that these seeds cannot tell and what they could; then any other measure
    on which the one better on the primary is shown worse."""
    a, b, m, n = rec["a"], rec["b"], rec["primary"], rec["seeds"]
    conf = f"{1 - alpha:.0%}"
    side = _shown(rec, m)
    d = rec[f"{m}_diff"]
    if side == 0 and rec[f"{m}_sd"] == 0 and n >= 2:
        return f"{a} and {b}: the same {m.replace('_', ' ')} on every one of {n} seeds"
    if side:
        win, lose = (a, b) if side < 0 else (b, a)
        share = rec[f"{m}_a_better"] if side < 0 else rec[f"{m}_b_better"]
        small = f", less than the indifference amount {_amount(m, delta)}" if abs(d) < delta else ""
        text = (f"{win} {_WORDS[m][0]} than {lose}: by {_amount(m, d)} a seed on average{small} ({conf} CI of "
                f"{a} - {b}: {_ci_text(m, *rec[f'{m}_ci'])}), better on {share:.0%} of {n} seeds")
        worse = [o for o in MEASURES if o != m and _shown(rec, o) == -side]
        for o in worse:
            text += f"; but {win} {_WORDS[o][1]} (by {_amount(o, rec[f'{o}_diff'])}, CI {_ci_text(o, *rec[f'{o}_ci'])})"
        return text + _censored(rec, m)
    if n < 2:
        return f"{a} against {b}: {n} seed cannot tell (at least 2 are needed)"
    lo, hi = rec[f"{m}_ci"]
    if -delta < lo and hi < delta:
        return (f"{a} and {b}: as good as each other on {m.replace('_', ' ')}, within the indifference amount "
                f"{_amount(m, delta)} (mean difference {d:+,.1f}{'' if m == 'impact' else ' s'}, {conf} CI "
                f"{_ci_text(m, lo, hi)}, {n} seeds){_censored(rec, m)}")
    return (f"{a} against {b}: cannot tell on {m.replace('_', ' ')} from {n} seeds (mean difference "
            f"{d:+,.1f}{'' if m == 'impact' else ' s'}, {conf} CI {_ci_text(m, *rec[f'{m}_ci'])}); they could show a "
            f"difference of {_amount(m, rec['detectable'])} or more; {_amount(m, delta)} (the indifference amount) "
            f"needs about {rec['seeds_for_delta']:,} seeds{_censored(rec, m)}")


def sweep_points(df: pd.DataFrame, sweep_vars: list[str] | None = None):
    """Each sweep point of a results table, in the order they appear: (its values by
    variable, its runs, its runbooks in order)."""
    keys = list(sweep_vars or [])
    for key, g in (df.groupby(keys, sort=False) if keys else [((), df)]):
        key = key if isinstance(key, tuple) else (key,)
        yield dict(zip(keys, key)), g, list(dict.fromkeys(g["runbook"]))


def pairs(df: pd.DataFrame, primary: str, delta: float, alpha: float = DEFAULT_ALPHA,
          sweep_vars: list[str] | None = None) -> list[dict]:
    """``pair`` for every pair of runbooks (per sweep point), in the order they appear."""
    out = []
    for point, g, names in sweep_points(df, sweep_vars):
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                out.append({**point, **pair(a, b, g[g["runbook"] == a], g[g["runbook"] == b], primary, delta, alpha)})
    return out


# -- the worlds a team is unsure of ------------------------------------------------------------

def robustness(df: pd.DataFrame, primary: str, drawn: dict, sweep_vars: list[str] | None = None,
               best: dict | None = None) -> list[dict]:
    """Where each seed's world was drawn from plausible ranges (``drawn``: variable ->
    [low, high]): per sweep point, on the seeds every runbook played, how often the best
    runbook (``best``: sweep point key -> the race's; else the lowest mean) was best, which
    runbook was best on the others, and the rank correlation (Spearman) of each variable
    with the best one's lead on each seed (the next runbook's outcome less its own), the
    strongest named: what the verdict depends on most."""
    from scipy.stats import spearmanr

    out = []
    for point, g, names in sweep_points(df, sweep_vars):
        if len(names) < 2:
            continue
        values = g.assign(_y=outcome(g, primary)).pivot(index="seed", columns="runbook", values="_y")[names]
        values = values.dropna()
        worlds = g.drop_duplicates("seed").set_index("seed").loc[values.index, list(drawn)]
        top = (best or {}).get(tuple(point.values())) or values.mean().idxmin()
        lowest = values.min(axis=1)
        tied = (values.eq(lowest, axis=0).sum(axis=1) > 1)
        winners = values.idxmin(axis=1)[~tied]
        lead = values.drop(columns=[top]).min(axis=1) - values[top]
        rhos = {}
        for var in drawn:
            x = worlds[var].to_numpy(dtype=float)
            if len(x) >= 3 and np.ptp(x) > 0 and np.ptp(lead.to_numpy()) > 0:
                rhos[var] = float(spearmanr(x, lead.to_numpy()).statistic)
        strongest = max(rhos, key=lambda v: abs(rhos[v])) if rhos else None
        out.append({**point, "best": top, "seeds": len(values),
                    "best_on": int((winners == top).sum()), "winners": winners.value_counts().to_dict(),
                    "tied": int(tied.sum()),
                    "rho": rhos, "depends_on": strongest})
    return out


def robustness_sentence(rec: dict, drawn: dict) -> str:
    """One sweep point's robustness in words."""
    ranges = "; ".join(f"{v} {lo:,g} to {hi:,g}" for v, (lo, hi) in drawn.items())
    n, top = rec["seeds"], rec["best"]
    others = [f"{rb} on {k}" for rb, k in rec["winners"].items() if rb != top]
    others = ", ".join(others + ([f"a tie for the best on {rec['tied']}"] if rec.get("tied") else []))
    text = (f"across the worlds drawn ({ranges}), on the {n} seed{'s' * (n != 1)} every runbook played: {top} is "
            f"best on {rec['best_on']} of {n}{f' ({others})' if others else ''}")
    var = rec["depends_on"]
    if var is None:
        return text + "; no variable moves its lead (too few seeds, or the lead does not vary)"
    rho = rec["rho"][var]
    way = "larger" if rho > 0 else "smaller"
    few = ": a hint, too few seeds for a finding" if n < 10 else ""
    return (f"{text}; its lead depends most on {var} (Spearman {rho:+.2f} over {n} seeds{few}: the higher {var}, "
            f"the {way} its lead)")
