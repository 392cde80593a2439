"""Statistics of a runbook comparison, from its results table (one row per run).

Time to break the loop counts a run whose loop never formed as 0 and a run still stuck
at the horizon as slower than any run that broke it (infinite): runs are censored at
the horizon, never dropped. Medians and p90s come with percentile-bootstrap 95%
confidence intervals (resampling runs; 2,000 resamples from a fixed seed, so the
report is reproducible). Pairs of runbooks are compared with a two-sided Mann-Whitney
U test on time to break the loop (rank-based, so the infinite times of stuck runs are
simply the largest), with the Holm correction over the pairs of a sweep point.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

ALPHA = 0.05
RESAMPLES = 2000
TEST = ("two-sided Mann-Whitney U test on time to break the loop (stuck runs ranked slowest), "
        f"Holm-corrected over the pairs; significant when the adjusted p < {ALPHA}")


def time_to_break(df: pd.DataFrame) -> pd.Series:
    t = df["loop_broken_s"].astype(float).where(df["loop_formed"], 0.0)
    return t.fillna(math.inf)


def quantile(values: np.ndarray, q: float) -> float:
    """An observed value (no interpolation), so that infinite times stay meaningful."""
    return float(np.quantile(values, q, method="inverted_cdf"))


def bootstrap_ci(values: np.ndarray, q: float, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(RESAMPLES, len(values)))
    stats = np.array([quantile(values[row], q) for row in idx])
    return quantile(stats, 0.025), quantile(stats, 0.975)


def summary(df: pd.DataFrame, sweep_vars: list[str] | None = None) -> pd.DataFrame:
    """Per runbook (and sweep point): runs, success rate (loop broken within the
    horizon, or never formed), median and p90 time to break with 95% CIs, median impact
    with its CI, collateral and actions."""
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
                "median_break_s": quantile(t, 0.5), "median_break_ci": (lo, hi),
                "p90_break_s": quantile(t, 0.9), "p90_break_ci": (lo90, hi90),
                "median_impact": quantile(impact, 0.5), "median_impact_ci": (ilo, ihi),
                "mean_collateral": float(g["collateral"].mean()), "mean_actions": float(g["actions"].mean())}
        out.append(rec)
    return pd.DataFrame(out)


def mann_whitney(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p value; 1.0 when both samples hold the same single value."""
    from scipy.stats import mannwhitneyu

    if len(set(a.tolist()) | set(b.tolist())) == 1:
        return 1.0
    # inf compares and ranks like any large number; scipy's rank-based U handles it
    a2, b2 = np.where(np.isinf(a), np.finfo(float).max, a), np.where(np.isinf(b), np.finfo(float).max, b)
    return float(mannwhitneyu(a2, b2, alternative="two-sided").pvalue)


def pairs(df: pd.DataFrame, sweep_vars: list[str] | None = None) -> pd.DataFrame:
    """Every pair of runbooks (per sweep point): the test's p value, Holm-adjusted, and
    which breaks the loop faster with statistical support, if either does."""
    keys = list(sweep_vars or [])
    groups = df.groupby(keys, sort=False) if keys else [((), df)]
    out = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        names = list(dict.fromkeys(g["runbook"]))
        recs = []
        for a, b in itertools.combinations(names, 2):
            ta, tb = time_to_break(g[g["runbook"] == a]).to_numpy(), time_to_break(g[g["runbook"] == b]).to_numpy()
            recs.append({**dict(zip(keys, key)), "a": a, "b": b, "p": mann_whitney(ta, tb),
                         "median_a_s": quantile(ta, 0.5), "median_b_s": quantile(tb, 0.5),
                         "faster_a": float(np.mean([x < y for x in ta for y in tb]) - np.mean([x > y for x in ta for y in tb]))})
        for rec, adj in zip(recs, holm([r["p"] for r in recs])):
            rec["p_holm"] = adj
            if adj < ALPHA and rec["faster_a"] != 0:
                winner, loser = (rec["a"], rec["b"]) if rec["faster_a"] > 0 else (rec["b"], rec["a"])
                rec["verdict"] = f"{winner} breaks the loop faster than {loser}"
                rec["better"] = winner
            else:
                rec["verdict"] = f"no significant difference between {rec['a']} and {rec['b']}"
                rec["better"] = ""
        out += recs
    return pd.DataFrame(out)


def holm(ps: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p values, in the order given."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted
