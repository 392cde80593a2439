"""The comparison's statistics on synthetic results tables (no runs, no Ray): effect sizes
with confidence intervals, Fisher's and Mann-Whitney's tests, and what a seed count can
and cannot show. Reference values come from the literature or from brute-force
enumeration, not from the code under test."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from orchestrator.batch.comparison import COLUMNS
from reports import compare_stats as cs
from reports.compare_report import pair_lines, write_comparison_report

Z = 1.959963984540054


def results(times: dict[str, list[float]], relapsed: dict[str, list[int]] | None = None) -> pd.DataFrame:
    """A results table shaped like ``compare``'s: runbook -> the loop_broken_s of each
    seed (NaN: stuck at the horizon); ``relapsed``: runbook -> seeds whose loop re-formed."""
    rows = []
    for rb, ts in times.items():
        for seed, t in enumerate(ts, 1):
            rel = seed in (relapsed or {}).get(rb, [])
            row = dict.fromkeys(COLUMNS, math.nan)
            row |= {"runbook": rb, "seed": seed, "trigger_s": 1800.0, "loop_formed": True,
                    "loop_broken_s": math.nan if rel else t, "loop_broken": "", "backlog_drained": "",
                    "impact": 100.0 + seed, "connections_broken": 0, "turned_away": 0, "actions": 2, "horizon_s": 14400.0,
                    "outcome": "relapsed" if rel else "stuck" if math.isnan(t) else "broken after the runbook acted"}
            rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def stuck_against_fixes(seeds: int, fixes: int) -> pd.DataFrame:
    """none never breaks the loop; each of ``fixes`` runbooks always does, in 5 to 10 minutes."""
    times = {"none": [math.nan] * seeds}
    times |= {f"fix{i}": [300.0 + 30 * s + i for s in range(seeds)] for i in range(1, fixes + 1)}
    return results(times)


# -- the seed count --------------------------------------------------------------------------------

def test_three_seeds_cannot_tell_zero_from_full_success_and_say_how_many_would():
    df = stuck_against_fixes(3, 4)  # 5 runbooks: 10 pairs
    tests = cs.pairs(df).set_index(["a", "b"])
    assert len(tests) == 10
    t = tests.loc[("none", "fix1")]
    assert t["success_a"] == 0.0 and t["success_b"] == 1.0
    # 3 against 3 cannot go below 2 / C(6, 3) = 0.1 with either test, far above 0.05 / 10
    assert t["min_p"] == pytest.approx(0.1) and t["min_p_fisher"] == pytest.approx(0.1)
    assert not t["possible"] and not t["possible_fisher"]
    # 2 / C(12, 6) = 0.0022 < 0.005 <= 2 / C(10, 5) = 0.0079
    assert t["seeds_needed"] == t["seeds_needed_fisher"] == 6
    assert t["power"] == ("3 seeds per runbook cannot show a difference at 0.05 after Holm over 10 pairs; "
                          "use at least 6")
    assert t["verdict"] == "cannot tell: too few seeds to compare none and fix1" and t["better"] == ""
    assert not any("no significant difference" in v for v in tests["verdict"])
    printed = "\n".join(pair_lines(cs.pairs(df), []))
    assert printed.count("cannot show a difference") == 1  # once, not once per pair
    assert "use at least 6" in printed and "Fisher p = 0.1000" in printed and "Mann-Whitney p = 0.1000" in printed
    assert "success rate none vs fix1: 0% vs 100%, difference -100 points (95% CI -100 to -21)" in printed


def test_one_pair_of_three_seeds_needs_four():
    t = cs.pairs(stuck_against_fixes(3, 1)).iloc[0]
    assert t["power"] == "3 seeds per runbook cannot show a difference at 0.05 after Holm over 1 pair; use at least 4"


def test_ten_seeds_show_that_zero_against_full_success_is_significant_by_fisher():
    df = stuck_against_fixes(10, 4)
    tests = cs.pairs(df).set_index(["a", "b"])
    t = tests.loc[("none", "fix2")]
    assert t["p_fisher"] == pytest.approx(2 / math.comb(20, 10))
    assert t["p_fisher_holm"] < cs.ALPHA and t["possible_fisher"] and t["power"] == ""
    assert t["better"] == "fix2" and t["verdict"] == "fix2 breaks the loop faster than none, and more often"
    assert t["success_diff"] == -1.0 and t["success_diff_ci"][1] < 0
    # the fixes all succeed, and their times interleave: no difference
    same = tests.loc[("fix1", "fix2")]
    assert same["p_fisher"] == 1.0 and same["verdict"] == "no significant difference between fix1 and fix2"
    printed = pair_lines(cs.pairs(df), [])
    assert "fix2 breaks the loop faster than none, and more often" in printed
    assert not any("cannot show" in line for line in printed)


def test_unequal_run_counts_can_leave_one_test_able_and_the_other_not():
    # 3 against 4: Mann-Whitney's floor is 2 / C(7, 3) = 0.057, Fisher's 1 / C(7, 3) = 0.029
    t = cs.pairs(results({"a": [math.nan] * 3, "b": [300.0, 330, 360, math.nan]})).iloc[0]
    assert not t["possible"] and t["possible_fisher"]
    assert t["min_p"] == pytest.approx(2 / 35) and t["min_p_fisher"] == pytest.approx(1 / 35)
    assert t["power"] == ("3 and 4 runs cannot show a difference in time to break at 0.05 after Holm over 1 pair; "
                          "use at least 4")
    assert t["verdict"] == ("no significant difference in success rate between a and b; cannot tell time to break: "
                            "too few seeds")


def test_with_enough_seeds_equal_runbooks_are_not_significantly_different():
    df = results({"a": [60.0, 120, math.nan, 90, 30, 300], "b": [60.0, 120, math.nan, 90, 30, 300]})
    t = cs.pairs(df).iloc[0]
    assert t["possible"] and t["possible_fisher"] and t["power"] == ""
    assert t["p"] == 1.0 and t["p_fisher"] == 1.0 and t["verdict"] == "no significant difference between a and b"
    assert t["median_diff_s"] == 0.0


def test_seeds_needed_is_the_fewest_that_could_reach_holms_first_step():
    for pairs in (1, 3, 10, 45):
        threshold = cs.ALPHA / pairs
        for min_p in (cs.min_p_mann_whitney, cs.min_p_fisher):
            n = cs.seeds_needed(min_p, threshold)
            assert min_p(n, n) < threshold <= min_p(n - 1, n - 1)


# -- relapsed runs ----------------------------------------------------------------------------------

def test_a_relapsed_run_is_not_broken_and_the_outcome_table_shows_it(tmp_path):
    df = results({"none": [math.nan] * 3, "fix": [300.0, 330, 360]}, relapsed={"fix": [2]})
    assert cs.time_to_break(df).tolist()[3:] == [300.0, math.inf, 360.0]
    # even with its first break's time in the table, a relapsed loop is not broken
    df2 = df.copy()
    df2.loc[df2["outcome"] == "relapsed", "loop_broken_s"] = 200.0
    assert cs.time_to_break(df2).tolist() == cs.time_to_break(df).tolist()
    summ = cs.summary(df).set_index("runbook")
    assert summ.loc["fix", "success_rate"] == pytest.approx(2 / 3)
    written = write_comparison_report(df, tmp_path, [], {"playbook": "synthetic", "seeds": 3, "horizon": "4 h"})
    md, html = (p.read_text() for p in written)
    assert "| runbook | stuck | broken after the runbook acted | relapsed |" in md and "| fix | 0 | 2 | 1 |" in md
    line = "3 seeds per runbook cannot show a difference at 0.05 after Holm over 1 pair; use at least 4"
    assert f"- {line}" in md and f"<li>{line}</li>" in html
    assert "| all runs | none vs fix | 0% vs 67% | -67 points (-94 to +6) | 0.4000 (0.4000) |" in md
    assert "cannot tell: too few seeds to compare none and fix" in html and "relapsed" in html


# -- effect sizes ---------------------------------------------------------------------------------

def test_newcombe_interval_on_published_examples():
    """Newcombe R.G. (1998), "Interval estimation for the difference between independent
    proportions: comparison of eleven methods", Statistics in Medicine 17:873-890,
    Table II, method 10 (score method, hybrid, from Wilson intervals without continuity
    correction): (a) 56/70 - 48/80 -> 0.0524 to 0.3339; (b) 9/10 - 3/10 -> 0.1705 to 0.8090."""
    assert cs.newcombe(56, 70, 48, 80) == pytest.approx((0.0524, 0.3339), abs=5e-5)
    assert cs.newcombe(9, 10, 3, 10) == pytest.approx((0.1705, 0.8090), abs=5e-5)


def test_newcombe_interval_by_hand_and_its_properties():
    # Wilson's interval for 0/n is 0 to z^2 / (n + z^2), and 1 - that for n/n (by hand:
    # 3.8415 / 13.8415 = 0.2775); so 10/10 - 0/10 is 1 - sqrt(2) * 0.2775 = 0.6075 to 1,
    # and 0/10 - 0/10 is -0.2775 to 0.2775
    w = Z * Z / (10 + Z * Z)
    assert cs.wilson(0, 10) == pytest.approx((0.0, w)) and w == pytest.approx(0.2775, abs=5e-5)
    assert cs.wilson(10, 10) == pytest.approx((1 - w, 1.0))
    assert cs.newcombe(10, 10, 0, 10) == pytest.approx((1 - math.sqrt(2) * w, 1.0))
    assert cs.newcombe(10, 10, 0, 10)[0] == pytest.approx(0.6075, abs=5e-5)
    assert cs.newcombe(0, 10, 0, 10) == pytest.approx((-w, w))
    for x1, n1, x2, n2 in itertools.product(range(0, 7, 2), (6, 12), range(0, 7, 3), (6, 20)):
        lo, hi = cs.newcombe(x1, n1, x2, n2)
        assert -1 <= lo <= x1 / n1 - x2 / n2 <= hi <= 1
        assert cs.newcombe(x2, n2, x1, n1) == pytest.approx((-hi, -lo))  # swapping the runbooks negates it
    # more runs, narrower interval
    widths = [np.subtract(*cs.newcombe(n // 2, n, n // 4, n)[::-1]) for n in (8, 40, 200)]
    assert widths[0] > widths[1] > widths[2]


def test_bootstrap_intervals_are_reproducible_and_say_when_they_are_unbounded():
    rng = np.random.default_rng(7)
    a, b = rng.uniform(100, 900, 12), rng.uniform(300, 1500, 12)
    first = cs.median_difference(a, b)
    assert cs.median_difference(a, b) == first  # a fixed seed: the same report every time
    assert cs.median_difference(a, b, seed=1) != first
    d, (lo, hi) = first
    assert d == cs.quantile(a, 0.5) - cs.quantile(b, 0.5) and lo <= d <= hi and math.isfinite(lo + hi)
    df = results({"x": list(a), "y": list(b)})
    assert cs.summary(df).equals(cs.summary(df)) and cs.pairs(df).equals(cs.pairs(df))
    stuck, fast = np.full(6, np.inf), np.array([60.0, 90, 120, 150, 180, 210])
    assert cs.median_difference(stuck, fast) == (math.inf, (math.inf, math.inf))
    d, ci = cs.median_difference(stuck, stuck)
    assert math.isnan(d) and ci == (-math.inf, math.inf)  # no difference is measurable
    half = np.array([60.0, 90, 120, np.inf, np.inf, np.inf])
    d, (lo, hi) = cs.median_difference(fast, half)  # in some resamples half's median is stuck: no lower bound
    assert lo == -math.inf and math.isfinite(hi)
    t = cs.pairs(results({"fast": list(fast), "half": [60.0, 90, 120, math.nan, math.nan, math.nan]})).iloc[0]
    assert "95% CI at most" in pair_lines(pd.DataFrame([t]), [])[2]


# -- the tests and the smallest p they can reach ----------------------------------------------------

def brute_mann_whitney(a: list[float], b: list[float]) -> float:
    """Two-sided exact p by enumerating every split of the pooled runs (midranks for ties)."""
    from scipy.stats import rankdata

    ranks = rankdata(a + b)
    w = ranks[:len(a)].sum()
    sums = [sum(ranks[list(c)]) for c in itertools.combinations(range(len(ranks)), len(a))]
    lower = sum(s <= w + 1e-9 for s in sums) / len(sums)
    upper = sum(s >= w - 1e-9 for s in sums) / len(sums)
    return min(1.0, 2 * min(lower, upper))


def brute_fisher(x1: int, n1: int, x2: int, n2: int) -> float:
    """Two-sided Fisher p: the hypergeometric probabilities no larger than the table's."""
    k, n = x1 + x2, n1 + n2
    prob = [math.comb(k, x) * math.comb(n - k, n1 - x) / math.comb(n, n1) for x in range(max(0, k - n2), min(k, n1) + 1)]
    here = math.comb(k, x1) * math.comb(n - k, n1 - x1) / math.comb(n, n1)
    return min(1.0, sum(p for p in prob if p <= here * (1 + 1e-7)))


def test_the_smallest_p_against_brute_force_enumeration():
    for n1, n2 in itertools.product(range(1, 6), repeat=2):
        # every split of n1 + n2 distinct times (ranks 1..n) into the two runbooks, each split's
        # exact p from the distribution of the rank sum over all of them
        sums = [sum(c) for c in itertools.combinations(range(1, n1 + n2 + 1), n1)]
        brute = min(min(1.0, 2 * min(sum(x <= w for x in sums), sum(x >= w for x in sums)) / len(sums))
                    for w in sums)
        assert cs.min_p_mann_whitney(n1, n2) == pytest.approx(brute)
        assert cs.min_p_mann_whitney(n1, n2) == pytest.approx(min(1.0, 2 / math.comb(n1 + n2, n1)))
        # every table of successes
        tables = [(x1, x2) for x1 in range(n1 + 1) for x2 in range(n2 + 1)]
        assert cs.min_p_fisher(n1, n2) == pytest.approx(min(brute_fisher(x1, n1, x2, n2) for x1, x2 in tables))
    for n1, n2 in ((3, 3), (6, 9), (20, 20), (30, 31), (40, 40)):  # the test itself reaches it
        separated = np.arange(n1, dtype=float), np.arange(n1, n1 + n2, dtype=float)
        assert cs.mann_whitney(*separated) == pytest.approx(cs.min_p_mann_whitney(n1, n2))


def test_ties_never_go_below_the_smallest_p():
    levels = (60.0, 120.0, math.inf)  # with stuck runs, ties are the rule
    for n1, n2 in ((2, 2), (3, 3), (2, 4)):
        floor = cs.min_p_mann_whitney(n1, n2)
        for values in itertools.product(levels, repeat=n1 + n2):
            a, b = np.array(values[:n1]), np.array(values[n1:])
            assert cs.mann_whitney(a, b) >= floor - 1e-12


def test_mann_whitney_is_the_exact_permutation_test_with_ties():
    rng = np.random.default_rng(3)
    for _ in range(40):
        n1, n2 = rng.integers(2, 7, size=2)
        a = list(rng.choice([30.0, 60, 90, 120, math.inf], n1))
        b = list(rng.choice([30.0, 60, 90, 120, math.inf], n2))
        assert cs.mann_whitney(np.array(a), np.array(b)) == pytest.approx(brute_mann_whitney(a, b))
    for _ in range(10):
        a, b = list(rng.normal(0, 1, 5)), list(rng.normal(1, 1, 6))
        assert cs.mann_whitney(np.array(a), np.array(b)) == pytest.approx(brute_mann_whitney(a, b))


def test_fisher_against_the_hypergeometric_by_hand():
    for x1, n1, x2, n2 in ((0, 3, 3, 3), (0, 10, 10, 10), (2, 7, 6, 8), (5, 56, 0, 29), (56, 70, 48, 80)):
        assert cs.fisher(x1, n1, x2, n2) == pytest.approx(brute_fisher(x1, n1, x2, n2))


# -- loops that never formed ------------------------------------------------------------------------

def never_formed(df: pd.DataFrame, runbook: str, seeds: list[int]) -> pd.DataFrame:
    """``df`` with the loop of these seeds of ``runbook`` never formed (healthy runs)."""
    df = df.copy()
    rows = (df["runbook"] == runbook) & df["seed"].isin(seeds)
    df.loc[rows, ["loop_formed", "loop_broken_s", "outcome"]] = [False, math.nan, "healthy"]
    return df


def test_the_summary_says_how_many_runs_never_formed_a_loop_and_warns_when_none_did():
    from reports.compare_report import summary_lines

    df = never_formed(results({"none": [math.nan] * 3, "fix": [300.0, 330, 360]}), "fix", [1, 3])
    summ = cs.summary(df).set_index("runbook")
    assert summ["never_formed"].to_dict() == {"none": 0, "fix": 2}
    assert summ.loc["fix", "success_rate"] == 1.0  # a loop that never formed counts as broken at once
    lines = summary_lines(cs.summary(df), cs.pairs(df), [])
    assert lines[0].startswith("none: 3 runs, loop broken in 0%, median")
    assert lines[1].startswith("fix: 3 runs, loop broken in 100% (2 of 3 never formed one: broken at once), median")
    assert not any(line.startswith("no run formed a loop") for line in lines)
    calm = never_formed(never_formed(df, "fix", [2]), "none", [1, 2, 3])
    lines = summary_lines(cs.summary(calm), cs.pairs(calm), [])
    assert "(3 of 3 never formed one: broken at once)" in lines[0] and lines[2].startswith("no run formed a loop")


def test_where_impact_and_the_loop_rank_the_runbooks_differently_one_sentence_says_so():
    """A runbook that turns traffic away for good breaks the loop every time and leaves users
    failing; one that keeps them served breaks it less often and costs less: the comparison
    said nothing of the two figures pointing opposite ways. Where they agree, nothing."""
    from reports.compare_report import disagreement_lines

    def table(times: dict) -> pd.DataFrame:
        rows = [{"runbook": rb, "seed": i, "loop_formed": True, "loop_broken_s": t, "impact": imp,
                 "connections_broken": 0, "turned_away": 0, "actions": 1, "outcome": "stuck" if math.isnan(t) else
                 "broken after the runbook acted", "horizon_s": 7200.0}
                for rb, runs in times.items() for i, (t, imp) in enumerate(runs, 1)]
        return pd.DataFrame(rows)

    shed = [(600.0, 300.0), (660.0, 310.0), (620.0, 305.0)]
    serve = [(math.nan, 120.0), (3000.0, 110.0), (math.nan, 125.0)]
    said = disagreement_lines(cs.summary(table({"shed-all": shed, "serve-slowly": serve})), [])
    assert said == ["impact and the loop rank the runbooks differently: serve-slowly has the least impact (median "
                    "120.0, loop broken in 33%), shed-all breaks the loop most often and soonest (in 100%, median 10.3 min; "
                    "impact 305.0): the primary outcome decides, and the other is worth a look"]
    good = [(600.0, 100.0), (660.0, 90.0), (620.0, 95.0)]
    assert disagreement_lines(cs.summary(table({"good": good, "serve-slowly": serve})), []) == []
