"""Statistics of a runbook comparison, from its results table (one row per run).

Time to break the loop counts a run whose loop never formed as 0, and a run still stuck
at the horizon, or whose loop broke and re-formed (``relapsed``), as slower than any run
that broke it (infinite): runs are censored at the horizon, never dropped. The success
rate is the share of runs with a finite time. Medians and p90s come with
percentile-bootstrap 95% confidence intervals (resampling runs; 2,000 resamples from a
fixed seed, so the report is reproducible).

Every pair of runbooks (per sweep point) gets:

- effect sizes with 95% confidence intervals, a minus b: the difference of median times
  to break (percentile bootstrap, resampling each runbook's runs; where a median run did
  not break the loop the difference, or a bound of its interval, is infinite) and the
  difference of success rates (Newcombe's hybrid score interval, from Wilson intervals).
  The intervals are per pair, not adjusted for the number of pairs;
- two tests, each Holm-corrected over the pairs of the sweep point: Fisher's exact test
  on success rates, and the Mann-Whitney U test on time to break (rank-based, so the
  infinite times are simply the largest), exact (the permutation distribution of the
  rank sum, ties as midranks) up to ``EXACT_MAX`` runs in the pair, tie-corrected normal
  approximation beyond;
- their power: the smallest p each test could reach with these numbers of runs (one
  runbook's runs all better than the other's), against the strictest step of Holm's
  procedure, alpha over the number of pairs. Where no data could be significant, the
  verdict is "cannot tell: too few seeds", never "no significant difference", and it
  says how many seeds per runbook could show a difference.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from .decide import sweep_points

ALPHA = 0.05
RESAMPLES = 2000
#: runs in a pair up to which the Mann-Whitney p is exact (the exact distribution's cost grows
#: as the fourth power of the runs); beyond, the normal approximation is close, and the smallest
#: reachable p (below 1e-16) far below any alpha
EXACT_MAX = 60
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
TEST = ("Fisher's exact test on success rates and the Mann-Whitney U test on time to break the loop "
        "(stuck runs ranked slowest), both two-sided and each Holm-corrected over the pairs; significant "
        f"when the adjusted p < {ALPHA}. Differences are the first runbook minus the second, with 95% CIs "
        "(success rates: Newcombe's hybrid score interval; medians: bootstrap), not adjusted for the "
        "number of pairs; inf where a median run did not break the loop within the horizon, and "
        "'at least' / 'at most' where the interval is unbounded on one side. Seeds that 'cannot show a "
        "difference' could not even if every run of one runbook beat every run of the other; the seeds "
        "named are the fewest with which that would be significant (more show smaller differences). They "
        "treat runs as independent samples, so they need more seeds than a race's selection or the seed-by-seed "
        "pairs (which compare the same seeds' runs): their 'cannot tell' does not gainsay a runbook the race "
        "named best")


def time_to_break(df: pd.DataFrame) -> pd.Series:
    t = df["loop_broken_s"].astype(float).where(df["loop_formed"], 0.0)
    if "outcome" in df:  # a loop that re-formed is not broken, whatever time its first break had
        t = t.mask(df["outcome"] == "relapsed", math.inf)
    return t.fillna(math.inf)


def time_to_drain(df: pd.DataFrame) -> pd.Series:
    """Seconds from the trigger until the backlog drained (and stayed drained); inf: not
    drained at the horizon."""
    return df["backlog_drained_s"].astype(float).fillna(math.inf)


def quantile(values: np.ndarray, q: float) -> float:
    """The median as people compute it (over an even number of values, the mean of the two
    middle ones: infinite if either is); any other quantile an observed value (no
    interpolation, which would make 0 x inf of an infinite time next to it)."""
    return float(_quantiles(np.asarray(values, dtype=float)[None, :], q)[0])


def _quantiles(rows: np.ndarray, q: float) -> np.ndarray:
    """``quantile`` of each row."""
    if q == 0.5:
        return np.median(rows, axis=1)  # times are >= 0: a middle pair with inf has the mean inf, never NaN
    return np.quantile(rows, q, axis=1, method="inverted_cdf")


def _resampled(values: np.ndarray, q: float, rng: np.random.Generator) -> np.ndarray:
    """The q-quantile of each of RESAMPLES bootstrap resamples of ``values``."""
    idx = rng.integers(0, len(values), size=(RESAMPLES, len(values)))
    return _quantiles(values[idx], q)


def bootstrap_ci(values: np.ndarray, q: float, seed: int = 0) -> tuple[float, float]:
    stats = _resampled(values, q, np.random.default_rng(seed))
    return _percentile(stats, 0.025), _percentile(stats, 0.975)


def _percentile(stats: np.ndarray, q: float) -> float:
    """A bound of a percentile-bootstrap interval: one of the resampled statistics."""
    return float(np.quantile(stats, q, method="inverted_cdf"))


def median_difference(a: np.ndarray, b: np.ndarray, seed: int = 0) -> tuple[float, tuple[float, float]]:
    """median(a) - median(b) and its 95% percentile-bootstrap CI, resampling a and b
    independently. The difference is NaN when both medians are infinite. A resample in
    which both are infinite has no difference: it counts as -inf for the lower bound and
    +inf for the upper, so that the interval claims no more than the runs show."""
    rng = np.random.default_rng(seed)
    ma, mb = _resampled(a, 0.5, rng), _resampled(b, 0.5, rng)
    with np.errstate(invalid="ignore"):
        d = ma - mb
        point = quantile(a, 0.5) - quantile(b, 0.5)
    undefined = np.isnan(d)
    return float(point), (_percentile(np.where(undefined, -np.inf, d), 0.025),
                          _percentile(np.where(undefined, np.inf, d), 0.975))


def wilson(x: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for the proportion x / n."""
    p, z2 = x / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(x1: int, n1: int, x2: int, n2: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval (his method 10) for x1/n1 - x2/n2."""
    p1, p2 = x1 / n1, x2 / n2
    (l1, u1), (l2, u2) = wilson(x1, n1, z), wilson(x2, n2, z)
    d = p1 - p2
    return max(-1.0, d - math.hypot(p1 - l1, u2 - p2)), min(1.0, d + math.hypot(u1 - p1, p2 - l2))


def fisher(x1: int, n1: int, x2: int, n2: int) -> float:
    """Two-sided p of Fisher's exact test on x1 successes of n1 against x2 of n2."""
    from scipy.stats import fisher_exact

    return float(fisher_exact([[x1, n1 - x1], [x2, n2 - x2]], alternative="two-sided").pvalue)


def _rank_sum_counts(ranks: np.ndarray, k: int) -> np.ndarray:
    """counts[s]: how many k-subsets of ``ranks`` (whole numbers) sum to s."""
    counts = np.zeros((k + 1, int(ranks.sum()) + 1))
    counts[0, 0] = 1.0
    for r in ranks:  # each rank in or out of the subset, as in a 0/1 knapsack
        counts[1:, r:] += counts[:-1, :-r].copy()
    return counts[k]


def mann_whitney(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p of the Mann-Whitney U test (twice the smaller tail); 1.0 when both
    samples hold the same single value. Exact up to EXACT_MAX runs, ties included: the
    distribution of a's rank sum over every equally likely split of the runs."""
    from scipy.stats import mannwhitneyu, rankdata

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    both = np.concatenate([a, b])
    if np.all(both == both[0]):
        return 1.0
    if len(both) > EXACT_MAX:
        # inf ranks like any large number; scipy's rank-based U handles it
        big = np.finfo(float).max
        return float(mannwhitneyu(np.where(np.isinf(a), big, a), np.where(np.isinf(b), big, b),
                                  alternative="two-sided", method="asymptotic").pvalue)
    ranks = np.rint(2 * rankdata(both)).astype(int)  # doubled midranks are whole numbers
    counts = _rank_sum_counts(ranks, len(a))
    w = int(ranks[:len(a)].sum())
    lower, upper = counts[:w + 1].sum(), counts[w:].sum()
    return float(min(1.0, 2 * min(lower, upper) / counts.sum()))


def min_p_mann_whitney(n1: int, n2: int) -> float:
    """The smallest p the Mann-Whitney test can give on n1 against n2 runs: that of a
    complete separation without ties, 2 / C(n1 + n2, n1) where exact (each tail holds
    at least the observed split, so ties cannot go below it)."""
    if n1 + n2 <= EXACT_MAX:
        return min(1.0, 2 / math.comb(n1 + n2, n1))
    return mann_whitney(np.arange(n1, dtype=float), np.arange(n1, n1 + n2, dtype=float))


def min_p_fisher(n1: int, n2: int) -> float:
    """The smallest p Fisher's test can give on n1 against n2 runs: the most extreme
    table, one runbook breaking the loop in every run and the other in none."""
    return fisher(0, n1, n2, n2)


def seeds_needed(min_p, threshold: float, limit: int = 10_000) -> int:
    """The fewest runs per runbook n with which min_p(n, n) < threshold (``limit`` if none)."""
    n = 1
    while n < limit and min_p(n, n) >= threshold:
        n += 1
    return n


def summary(df: pd.DataFrame, sweep_vars: list[str] | None = None) -> pd.DataFrame:
    """Per runbook (and sweep point): runs, success rate (loop broken within the
    horizon and not re-formed, or never formed), the runs whose loop never formed, median and p90 time to break with 95%
    CIs, median impact with its CI, collateral (connections broken, requests turned away) and actions; where
    the playbook scores a backlog, the share of runs whose backlog drained and the median time to drain it
    (NaN where it does not: a loop broken by pausing durable work forever leaves it undrained), and how
    many runs' backlog never went over its threshold (drained at once)."""
    keys = [*(sweep_vars or []), "runbook"]
    out = []
    for key, g in df.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        t = time_to_break(g).to_numpy()
        impact = g["impact"].to_numpy(dtype=float)
        rec = dict(zip(keys, key))
        lo, hi = bootstrap_ci(t, 0.5)
        lo90, hi90 = bootstrap_ci(t, 0.9)
        ilo, ihi = bootstrap_ci(impact, 0.5)
        rec |= {"runs": len(g), "success_rate": float(np.isfinite(t).mean()),
                "never_formed": int((~g["loop_formed"].astype(bool)).sum()),
                "median_break_s": quantile(t, 0.5), "median_break_ci": (lo, hi),
                "p90_break_s": quantile(t, 0.9), "p90_break_ci": (lo90, hi90),
                "median_impact": quantile(impact, 0.5), "median_impact_ci": (ilo, ihi),
                "mean_connections_broken": float(g["connections_broken"].mean()),
                "mean_turned_away": float(g["turned_away"].mean()), "mean_actions": float(g["actions"].mean())}
        scored = "backlog_scored" in g and bool(g["backlog_scored"].astype(bool).all())
        drain = time_to_drain(g).to_numpy() if scored else None
        formed = g["backlog_formed"].astype(bool) if scored and "backlog_formed" in g else None
        rec |= {"drained_rate": float(np.isfinite(drain).mean()) if scored else math.nan,
                "median_drain_s": quantile(drain, 0.5) if scored else math.nan,
                "backlog_never_formed": int((~formed).sum()) if formed is not None else 0}
        out.append(rec)
    return pd.DataFrame(out)


def _compare(a: str, b: str, ta: np.ndarray, tb: np.ndarray) -> dict:
    """One pair's effect sizes, raw p values and smallest reachable p values."""
    sa, sb = int(np.isfinite(ta).sum()), int(np.isfinite(tb).sum())
    na, nb = len(ta), len(tb)
    diff, diff_ci = median_difference(ta, tb)
    return {"a": a, "b": b, "runs_a": na, "runs_b": nb,
            "success_a": sa / na, "success_b": sb / nb, "success_diff": sa / na - sb / nb,
            "success_diff_ci": newcombe(sa, na, sb, nb), "p_fisher": fisher(sa, na, sb, nb),
            "median_a_s": quantile(ta, 0.5), "median_b_s": quantile(tb, 0.5),
            "median_diff_s": diff, "median_diff_ci": diff_ci, "p": mann_whitney(ta, tb),
            "faster_a": float(np.mean([x < y for x in ta for y in tb]) - np.mean([x > y for x in ta for y in tb])),
            "min_p": min_p_mann_whitney(na, nb), "min_p_fisher": min_p_fisher(na, nb)}


#: the columns of ``pairs``, after the sweep variables: per test, its p values, the smallest it could
#: reach, whether it could be significant at all and the seeds per runbook with which it could
PAIR_COLUMNS = ("a", "b", "runs_a", "runs_b",
                "success_a", "success_b", "success_diff", "success_diff_ci",
                "p_fisher", "p_fisher_holm", "min_p_fisher", "possible_fisher", "seeds_needed_fisher",
                "median_a_s", "median_b_s", "median_diff_s", "median_diff_ci", "faster_a",
                "p", "p_holm", "min_p", "possible", "seeds_needed",
                "pairs", "holm_alpha", "power", "verdict", "better")


class _Test(NamedTuple):
    """One test's columns in a pair's record, what it compares and how its winner is said."""

    p: str
    min_p: str
    possible: str
    seeds: str
    measure: str
    how: str
    min_p_of: Callable[[int, int], float]


_TESTS = (_Test("p", "min_p", "possible", "seeds_needed", "time to break", "faster", min_p_mann_whitney),
          _Test("p_fisher", "min_p_fisher", "possible_fisher", "seeds_needed_fisher", "success rate", "more often",
                min_p_fisher))


def power_sentence(rec: dict) -> str:
    """What the run counts cannot show, and how many seeds could ("" if they can)."""
    weak = [t for t in _TESTS if not rec[t.possible]]
    if not weak:
        return ""
    runs = (f"{rec['runs_a']} seeds per runbook" if rec["runs_a"] == rec["runs_b"]
            else f"{rec['runs_a']} and {rec['runs_b']} runs")
    what = "a difference" if len(weak) == len(_TESTS) else f"a difference in {weak[0].measure}"
    need = {rec[t.seeds] for t in weak}
    use = (f"use at least {need.pop()}" if len(need) == 1
           else "use at least " + " and ".join(f"{rec[t.seeds]} ({t.measure})" for t in weak))
    m = rec["pairs"]
    return f"{runs} cannot show {what} at {ALPHA:g} after Holm over {m} pair{'s' * (m != 1)}; {use}"


def _verdict(rec: dict) -> tuple[str, str]:
    """(verdict, better runbook or "")."""
    a, b = rec["a"], rec["b"]
    said = []  # (winner, loser, how) for each significant test
    for t in _TESTS:
        lead = rec["faster_a"] if t.p == "p" else rec["success_diff"]
        if rec[f"{t.p}_holm"] < ALPHA and lead != 0:
            said.append(((a, b) if lead > 0 else (b, a)) + (t.how,))
    if len(said) == 2 and said[0][0] == said[1][0]:
        return f"{said[0][0]} breaks the loop {said[0][2]} than {said[0][1]}, and {said[1][2]}", said[0][0]
    if len(said) == 2:
        return (f"{said[0][0]} breaks the loop {said[0][2]} than {said[0][1]}, but {said[1][0]} breaks it "
                f"{said[1][2]}"), ""
    if said:
        return f"{said[0][0]} breaks the loop {said[0][2]} than {said[0][1]}", said[0][0]
    possible = [t.measure for t in _TESTS if rec[t.possible]]
    if not possible:
        return f"cannot tell: too few seeds to compare {a} and {b}", ""
    if len(possible) == len(_TESTS):
        return f"no significant difference between {a} and {b}", ""
    unknown = next(t.measure for t in _TESTS if t.measure not in possible)
    return (f"no significant difference in {possible[0]} between {a} and {b}; cannot tell {unknown}: "
            "too few seeds"), ""


def pairs(df: pd.DataFrame, sweep_vars: list[str] | None = None) -> pd.DataFrame:
    """Every pair of runbooks (per sweep point): effect sizes with 95% CIs, both tests'
    p values, raw and Holm-adjusted, the smallest p each could reach, whether it could
    be significant at all and the seeds per runbook with which it could, the power
    sentence, the verdict, and the runbook that is better with statistical support."""
    keys = list(sweep_vars or [])
    out = []
    for point, g, names in sweep_points(df, keys):
        recs = [{**point, **_compare(a, b, time_to_break(g[g["runbook"] == a]).to_numpy(),
                                                    time_to_break(g[g["runbook"] == b]).to_numpy()),
                 "formed": int(g.loc[g["runbook"].isin([a, b]), "loop_formed"].astype(bool).sum())}
                for a, b in itertools.combinations(names, 2)]
        m = len(recs)
        for t in _TESTS:
            family_min = min((r[t.min_p] for r in recs), default=1.0)
            need = seeds_needed(t.min_p_of, ALPHA / max(m, 1))
            for rec, adj in zip(recs, holm([r[t.p] for r in recs])):
                # significance needs the family's smallest p to pass Holm's first step (alpha / m)
                # and this pair's p to pass at least its last (alpha)
                rec |= {f"{t.p}_holm": adj, "pairs": m, "holm_alpha": ALPHA / m, t.seeds: need,
                        t.possible: rec[t.min_p] < ALPHA and family_min < ALPHA / m}
        for rec in recs:
            if not rec.pop("formed"):  # more seeds cannot help: there is nothing to compare
                rec["power"], rec["verdict"], rec["better"] = "", f"no run of {rec['a']} or {rec['b']} formed a loop", ""
                continue
            rec["power"] = power_sentence(rec)
            rec["verdict"], rec["better"] = _verdict(rec)
        out += recs
    frame = pd.DataFrame(out)
    return frame[[*keys, *PAIR_COLUMNS]] if out else frame


def holm(ps: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p values, in the order given."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted
