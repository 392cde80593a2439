"""Deciding the best runbook (``reports.decide``): the sequential procedure itself played on
synthetic races whose truth is known (its probability of correct selection is a test, not
a claim), the paired comparisons' intervals and words against values computed here by
hand, and a real sequential comparison of a small world."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from helpers import gameday
from orchestrator.batch.comparison import COLUMNS, Decision, compare
from reports import decide

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MINI = str(HERE / "playbooks" / "mini_loop.yaml.j2")
FIX = str(HERE / "playbooks" / "fix_early.yaml")
FIX_COPY = str(HERE / "playbooks" / "fix_early_copy.yaml")


# -- synthetic races -----------------------------------------------------------------------------

def noise(dist: str, rng, size: int, sigma: float) -> np.ndarray:
    """Outcome noise of variance sigma^2: normal, heavy-tailed (Student's t, 3 dof) or skewed
    (a centred lognormal)."""
    if dist == "normal":
        return rng.normal(0, sigma, size)
    if dist == "t3":
        return rng.standard_t(3, size) * sigma / math.sqrt(3)
    return (rng.lognormal(0, 1, size) - math.exp(0.5)) * sigma / math.sqrt((math.e - 1) * math.e)


def play(means, sigma: float, dist: str, rng, first: int = decide.DEFAULT_FIRST, censor: float | None = None):
    """One race of runbooks r0.. with these true means (delta 1): each seed's outcomes share
    a common random number, as runs of one seed do; ``censor``: outcomes are times censored
    there (a run that never got there counts as the horizon). Returns (best, runs used)."""
    race = decide.Race([f"r{i}" for i in range(len(means))], delta=1.0, first=first)
    while not race.decided:
        common = rng.normal(0, 3)
        x = np.asarray(means) + noise(dist, rng, len(means), sigma) + common
        if censor is not None:
            x = np.minimum(np.abs(x), censor)
        race.add({n: x[i] for i, n in enumerate(race.names) if n in race.alive})
    return race.best, sum(len(v) for v in race.values.values())


def pcs_floor(n: int, alpha: float = decide.DEFAULT_ALPHA) -> float:
    """1 - alpha less three standard errors of a proportion observed over n races."""
    return 1 - alpha - 3 * math.sqrt(alpha * (1 - alpha) / n)


# (name, true means, spread, outcome noise, runbooks counted correct, censoring)
RACES = [
    ("normal, slippage by delta", [0, 1, 1, 1, 1], 0.5, "normal", {"r0"}, None),
    ("heavy tails (t, 3 dof)", [0, 1, 1, 1, 1], 0.5, "t3", {"r0"}, None),
    ("skewed (lognormal)", [0, 1, 1, 1, 1], 0.5, "lognormal", {"r0"}, None),
    ("spread as large as delta", [0, 1, 1], 1.0, "normal", {"r0"}, None),
    # two runbooks closer than delta: either is a correct selection (the indifference zone)
    ("a tie inside delta", [0, 0.4, 1.4, 1.4], 0.5, "normal", {"r0", "r1"}, None),
    # times: the worst two never get there within the horizon (censored at 12)
    ("censored times", [8, 9, 30, 30], 0.5, "normal", {"r0"}, 12.0),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,means,sigma,dist,correct,censor", RACES, ids=[r[0] for r in RACES])
def test_the_race_selects_the_best_at_its_stated_confidence(name, means, sigma, dist, correct, censor):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    n = 600
    results = [play(means, sigma, dist, rng, censor=censor) for _ in range(n)]
    pcs = np.mean([best in correct for best, _ in results])
    assert pcs >= pcs_floor(n), (name, pcs)


def test_a_race_without_spread_decides_on_the_first_round_it_can():
    """Outcomes that do not vary between seeds (apart from what the seed shares): decided
    when the first stage ends, every other runbook out after it."""
    rng = np.random.default_rng(1)
    for first in (2, 3, 5):
        best, runs = play([0, 1, 1, 2], 0.0, "normal", rng, first=first)
        assert best == "r0" and runs == 4 * first


def test_identical_runbooks_end_the_race_as_equally_good():
    race = decide.Race(["a", "b", "c"], delta=1.0)
    for seed in range(3):
        race.add({"a": 10.0 + seed, "b": 10.0 + seed, "c": 20.0 + seed})
    assert race.decided and race.best == "a" and race.ended == "all within delta"
    states = {s["runbook"]: s["state"] for s in race.status()}
    assert states == {"a": "best", "b": "as good", "c": "out"}


def test_the_race_stops_sooner_on_large_differences_than_on_small_ones():
    rng = np.random.default_rng(2)
    small = np.mean([play([0, 1, 1, 1], 0.5, "normal", rng)[1] for _ in range(200)])
    large = np.mean([play([0, 4, 4, 4], 0.5, "normal", rng)[1] for _ in range(200)])
    assert large < small


def test_h2_is_kim_and_nelsons_constant():
    # eta = ((2 alpha / (k - 1)) ^ (-2 / (n0 - 1)) - 1) / 2, h^2 = 2 eta (n0 - 1): k = 2, alpha 0.05,
    # n0 = 3: (0.1)^-1 = 10, eta = 4.5, h^2 = 18
    assert decide.kn_h2(2, 0.05, 3) == pytest.approx(18.0)
    assert decide.kn_h2(5, 0.05, 11) == pytest.approx(((0.025 ** -0.2) - 1) * 10)


def test_a_race_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="at least 2"):
        decide.Race(["a", "b"], first=1)
    race = decide.Race(["a", "b"], delta=1.0)
    with pytest.raises(ValueError, match="needs"):
        race.add({"a": 1.0})


# -- pairs, seed by seed -------------------------------------------------------------------------

def table(outcomes: dict[str, list[tuple[float, float | None]]]) -> pd.DataFrame:
    """A results table: runbook -> per seed (impact, seconds to break the loop or None:
    never within the 2-hour horizon after the trigger)."""
    rows = []
    for rb, runs in outcomes.items():
        for seed, (impact, broke) in enumerate(runs, 1):
            row = dict.fromkeys(COLUMNS, math.nan)
            row |= {"runbook": rb, "seed": seed, "trigger_s": 600.0, "loop_formed": True,
                    "loop_broken_s": math.nan if broke is None else broke, "backlog_scored": False,
                    "impact": impact, "horizon_s": 7800.0,
                    "outcome": "stuck" if broke is None else "broken after the runbook acted"}
            rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def test_a_pair_is_compared_on_its_per_seed_differences():
    """Large spread between seeds, small and steady difference within each: paired, the
    difference is clear (an unpaired comparison would drown it in the seeds' spread)."""
    base = [100.0, 300.0, 200.0, 500.0, 50.0]
    df = table({"a": [(b, 600.0) for b in base], "b": [(b + 10 + 0.5 * i, 900.0) for i, b in enumerate(base)]})
    rec = decide.pair("a", "b", df[df.runbook == "a"], df[df.runbook == "b"], "impact", delta=5.0)
    d = np.array([-10 - 0.5 * i for i in range(5)])
    half = 2.7764451051977987 * d.std(ddof=1) / math.sqrt(5)  # t(0.975, 4)
    assert rec["impact_diff"] == pytest.approx(d.mean())
    assert rec["impact_ci"] == pytest.approx((d.mean() - half, d.mean() + half))
    assert rec["impact_a_better"] == 1.0 and rec["settled"]
    assert rec["sentence"].startswith("a has less impact than b: by 11.0 a seed on average")
    assert "better on 100% of 5 seeds" in rec["sentence"]
    assert rec["loop_broken_diff"] == pytest.approx(-300.0)


def test_better_on_the_primary_and_worse_on_another_says_so():
    df = table({"fast": [(100.0 + i, 600.0 + 10 * i) for i in range(4)],
                "slow": [(50.0 + i, 3000.0 + 7 * i) for i in range(4)]})
    rec = decide.pair("fast", "slow", df[df.runbook == "fast"], df[df.runbook == "slow"], "impact", delta=5.0)
    assert rec["sentence"].startswith("slow has less impact than fast: by 50.0")
    assert "; but slow breaks the loop later (by 39.9 min, CI -40.0 min to -39.8 min)" in rec["sentence"]


def test_times_never_reached_are_censored_at_the_horizon_not_infinite():
    df = table({"stuck": [(500.0, None)] * 3, "fix": [(50.0, 900.0), (60.0, 960.0), (55.0, None)]})
    rec = decide.pair("stuck", "fix", df[df.runbook == "stuck"], df[df.runbook == "fix"], "loop_broken", 60.0)
    horizon = 7800.0 - 600.0
    assert rec["loop_broken_diff"] == pytest.approx(np.mean([horizon - 900, horizon - 960, 0.0]))
    assert rec["loop_broken_median_a"] == math.inf and rec["loop_broken_median_b"] == 960.0
    # Kaplan-Meier by hand: 4 runs, 2 there by 20: the survival 2/4 reaches 1/2 at 20
    assert decide.km_median(np.array([10.0, 20.0, 99.0, 99.0]), np.array([True, True, False, False])) == 20.0
    assert decide.km_median(np.array([10.0, 99.0, 99.0]), np.array([True, False, False])) == math.inf
    assert rec["loop_broken_reached_b"] == pytest.approx(2 / 3)
    assert "never within the horizon (counted as the horizon): stuck on 3 of 3, fix on 1 of 3" in rec["sentence"]
    # log-rank by hand: at 900 s 6 at risk (3 each), fix's event, 0.5 expected of stuck, variance 0.25;
    # at 960 s 5 at risk (3 stuck), 0.6 expected, variance 0.24: z = -1.1 / sqrt(0.49), p = 0.1161
    assert rec["loop_broken_logrank_p"] == pytest.approx(0.11608, abs=1e-4)


def test_a_pair_whose_interval_lies_inside_the_indifference_amount_is_as_good_as_each_other():
    """us-east-1-2021's none and restart-devices: the same impact within 0.5 a seed, where
    57.6 is worth telling apart; 'cannot tell' would send the team after seeds for nothing."""
    df = table({"none": [(5148.6 + 0.1 * i, None) for i in range(3)], "restart": [(5148.5 + 0.2 * i, None)
                                                                                    for i in range(3)]})
    rec = decide.pair("none", "restart", df[df.runbook == "none"], df[df.runbook == "restart"], "impact", 57.6)
    assert rec["sentence"].startswith("none and restart: as good as each other on impact, within the indifference "
                                      "amount 57.6 (mean difference +0.0, 95% CI ")


def test_an_undecided_pair_says_what_its_seeds_could_show_and_what_delta_needs():
    rng = np.random.default_rng(5)
    diffs = rng.normal(0.5, 4.0, 6)
    df = table({"a": [(100.0 + d, 600.0) for d in diffs], "b": [(100.0, 600.0)] * 6})
    rec = decide.pair("a", "b", df[df.runbook == "a"], df[df.runbook == "b"], "impact", delta=2.0)
    sd = float(np.std(diffs, ddof=1))
    lo, hi = rec["impact_ci"]
    assert lo < 0 < hi and not rec["settled"]
    assert rec["detectable"] == pytest.approx((2.5705818366147395 + 0.9195437503366504) * sd / math.sqrt(6))
    n = rec["seeds_for_delta"]  # the fewest with which delta is detectable at that spread
    assert decide.detectable(sd, n) <= 2.0 < decide.detectable(sd, n - 1)
    assert f"cannot tell on impact from 6 seeds" in rec["sentence"]
    assert f"could show a difference of {rec['detectable']:,.1f} or more" in rec["sentence"]
    assert f"2.0 (the indifference amount) needs about {n:,} seeds" in rec["sentence"]


# -- a real comparison ---------------------------------------------------------------------------

@pytest.mark.slow
def test_a_sequential_comparison_plays_only_what_its_decision_needs_and_the_same_runs():
    """none, the fix, and the fix under another name, at most 10 seeds: the cohort model's
    runs of one seed barely differ, so the race ends with its first stage; its rows are
    those a fixed comparison plays for those seeds."""
    race = compare(MINI, ["none", FIX, FIX_COPY], 10, parallel=False, decision=Decision())
    record = race.attrs["race"]
    point = record["points"][0]
    assert point["best"] == "fix-early" and point["seeds"] == decide.DEFAULT_FIRST
    assert {s["runbook"]: s["state"] for s in point["status"]} == {"none": "out", "fix-early": "best",
                                                                    "fix-early-copy": "as good"}
    assert len(race) == 3 * decide.DEFAULT_FIRST and race.attrs["planned"] == 30
    assert record["primary"] == "impact" and record["delta"] == pytest.approx(0.2)  # 1% of 1 x 20 minutes
    fixed = compare(MINI, ["none", FIX, FIX_COPY], decide.DEFAULT_FIRST, parallel=False)
    pd.testing.assert_frame_equal(race, fixed, check_like=False)


@pytest.mark.slow  # (the fast subset keeps the race itself and the refusals)
def test_the_command_decides_writes_the_race_and_refuses_a_race_it_cannot_run(tmp_path):
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "compare", MINI, "-r", "none", "-r", FIX,
                           "--primary", "loop_broken", "--delta", "30s", "--serial", "--no-progress",
                           "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "the race: loop broken (lower is better), 95% confidence, indifference 0.5 min (--delta)" in proc.stdout
    assert "best: fix-early, after 3 seeds" in proc.stdout
    assert "none: out after 3 seeds, worse than fix-early" in proc.stdout
    assert "fix-early breaks the loop sooner than none: by " in proc.stdout
    assert len(pd.read_csv(out / "results.csv")) == 6 and (out / "race.json").exists()
    md = (out / "compare.md").read_text()
    assert "## Decision" in md and "## Seed by seed" in md
    for args, words in ((["--seeds", "2"], "--seeds: got 2; expected at least the first stage's 3 seeds"),
                        (["--delta", "-1"], "'-1' is not an amount > 0"),
                        (["--first-seeds", "1"], "--first-seeds")):
        bad = subprocess.run([sys.executable, "-m", "orchestrator.cli", "compare", MINI, "-r", "none", "-r", FIX,
                              *args, "--serial", "--out", str(tmp_path / "bad")], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
        assert not (tmp_path / "bad").exists()


# -- worlds the team is unsure of ----------------------------------------------------------------

def test_each_seeds_world_is_drawn_evenly_from_the_ranges_and_does_not_depend_on_the_seed_count():
    from orchestrator.batch.comparison import draw_worlds

    ranges = {"clients": (1000.0, 3000.0), "share": (0.1, 0.4)}
    worlds = draw_worlds(ranges, {"clients"}, list(range(1, 17)))
    assert draw_worlds(ranges, {"clients"}, [5, 9]) == {5: worlds[5], 9: worlds[9]}
    clients = [w["clients"] for w in worlds.values()]
    shares = [w["share"] for w in worlds.values()]
    assert all(isinstance(c, int) and 1000 <= c <= 3000 for c in clients)
    assert all(isinstance(s, float) and 0.1 <= s <= 0.4 for s in shares)
    # space-filling: each quarter of each range holds 4 of the 16 worlds, give or take one
    for values, (lo, hi) in ((clients, ranges["clients"]), (shares, ranges["share"])):
        quarters = np.histogram(values, bins=4, range=(lo, hi))[0]
        assert quarters.min() >= 3 and quarters.max() <= 5, quarters


@pytest.mark.slow  # (the fast subset keeps the draws)
def test_a_comparison_over_uncertain_variables_says_how_often_the_best_is_best(tmp_path):
    out = tmp_path / "vary"
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "compare", MINI, "-r", "none", "-r", FIX,
                           "--vary", "all", "--seeds", "6", "--fixed", "--serial", "--no-progress", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_csv(out / "results.csv")
    assert list(df.columns[:4]) == ["runbook", "seed", "clients", "device_cpu"]
    assert (df.groupby("seed")[["clients", "device_cpu"]].nunique() == 1).all().all()  # one world per seed
    assert df["clients"].between(1000, 3000).all() and df["device_cpu"].between(3500, 6000).all()
    assert df["clients"].nunique() == 6
    line = next(x for x in proc.stdout.splitlines() if x.startswith("across the worlds drawn"))
    assert "(clients 1,000 to 3,000; device_cpu 3,500 to 6,000), on the 6 seeds every runbook played:" in line
    wide = df.pivot(index="seed", columns="runbook", values="impact")
    wins = int((wide["fix-early"] < wide["none"]).sum())
    assert f"fix-early is best on {wins} of 6" in line and "its lead depends most on" in line
    for args, words in ((["--vary", "rate"], "--vary: got 'rate'; expected a variable that declares a range"),
                        (["--vary", "clients", "--sweep", "clients=1000,2000"], "a variable not also swept")):
        bad = subprocess.run([sys.executable, "-m", "orchestrator.cli", "compare", MINI, "-r", "none", "-r", FIX,
                              *args, "--serial", "--out", str(tmp_path / "bad")], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
        assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_a_range_is_checked_with_the_variables(tmp_path):
    from orchestrator.errors import InvalidPlaybook
    from orchestrator.playbook.loader import load_playbook

    text = Path(MINI).read_text()
    for bad, words in (("range: [1000, 3000]", None), ("range: [3000, 1000]", "two numbers, low < high"),
                       ("range: [1000]", "two numbers, low < high"), ("range: [a, 3000]", "two numbers")):
        path = tmp_path / "pb.yaml.j2"
        path.write_text(text.replace("range: [1000, 3000]", bad))
        if words is None:
            load_playbook(str(path), {})
            continue
        with pytest.raises(InvalidPlaybook) as e:
            load_playbook(str(path), {})
        assert "variables.clients.range" in str(e.value) and words in str(e.value)


# -- what an outsider's trial found ----------------------------------------------------------------

def test_a_primary_outcome_the_playbook_does_not_score_is_refused_before_any_run(tmp_path):
    """--primary backlog_drained on a playbook without a scored backlog played every run and
    then crashed (KeyError, exit 1, half a directory); scoring.primary so passed validate."""
    from orchestrator.errors import InvalidPlaybook
    from orchestrator.playbook.loader import load_playbook

    cases = ((["--primary", "backlog_drained"], "--primary: got 'backlog_drained'; expected an outcome the "
                                                  "playbook scores: it declares no scoring.backlog"),
             (["--delta", "5m"], "--delta: got '5m'; expected a number of weighted error-minutes: the primary "
                                 "outcome is impact"),
             (["--delta", "50"], "expected an amount below the most a run can score on impact, 20.0"),
             (["--vary", "all", "--vary", "clients"], "--vary: got 'all'; expected all alone, or the names"))
    for args, words in cases:
        code, _, err = gameday(["compare", MINI, "-r", "none", "-r", FIX, *args, "--serial", "--out", str(tmp_path / "bad")])
        assert code == 2 and words in err, (args, err)
        assert not (tmp_path / "bad").exists()
    path = tmp_path / "pb.yaml.j2"
    path.write_text(Path(MINI).read_text().replace("scoring:\n", "scoring:\n  primary: backlog_drained\n"))
    with pytest.raises(InvalidPlaybook, match="scoring.primary: got 'backlog_drained'"):
        load_playbook(str(path), {})


def test_a_misspelt_key_of_a_variable_is_warned_of(tmp_path):
    from orchestrator.playbook.variables import unused_variables

    path = tmp_path / "pb.yaml.j2"
    path.write_text(Path(MINI).read_text().replace("range: [1000, 3000]", "rnage: [1000, 3000]"))
    assert ("variables.clients.rnage means nothing and is ignored: a variable takes default, description, range "
            "(did you mean range?)") in unused_variables(str(path))
    assert not [w for w in unused_variables(MINI) if "means nothing" in w]


def test_a_range_that_leaves_out_its_default_is_warned_of(tmp_path):
    """A range that leaves out the variable's default was accepted silently: a comparison
    drawing it never plays the world as written. A warning (an error would refuse a playbook
    that validated before), in validate's words."""
    from click.testing import CliRunner

    from orchestrator.cli import main

    path = tmp_path / "pb.yaml.j2"
    path.write_text(Path(MINI).read_text().replace("range: [1000, 3000]", "range: [2500, 3000]"))
    said = CliRunner().invoke(main, ["playbooks", "validate", str(path)])
    assert said.exit_code == 0 and ("warning: variables.clients.range [2500, 3000] leaves out its default, 2000: a "
                                    "comparison that draws it never plays the world as the playbook writes it") in said.stderr
    assert "leaves out its default" not in CliRunner().invoke(main, ["playbooks", "validate", MINI]).stderr


def test_ties_for_the_best_are_not_credited_to_one_runbook():
    rows = []
    for seed, (a, b, world) in enumerate(((1.0, 2.0, 10), (3.0, 3.0, 20), (1.0, 5.0, 30)), 1):
        for rb, impact in (("a", a), ("b", b)):
            row = dict.fromkeys(COLUMNS, math.nan) | {"runbook": rb, "seed": seed, "impact": impact, "x": world}
            rows.append(row)
    df = pd.DataFrame(rows)
    rec = decide.robustness(df, "impact", {"x": [0, 40]})[0]
    assert rec["best"] == "a" and rec["best_on"] == 2 and rec["tied"] == 1 and rec["winners"] == {"a": 2}
    assert "a is best on 2 of 3 (a tie for the best on 1)" in decide.robustness_sentence(rec, {"x": [0, 40]})


def test_a_race_whose_first_stage_does_not_fit_the_time_limit_says_so():
    from orchestrator.errors import InvalidInput

    with pytest.raises(InvalidInput, match=r"time_limit: got '1e-09s'; expected time for the race's first stage "
                                           r"\(6 runs\)"):
        compare(MINI, ["none", FIX], 10, parallel=False, time_limit=1e-9, decision=Decision())
