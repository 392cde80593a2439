"""Comparing runbooks: whole worlds as Ray tasks, the results table, the statistics and
the comparison report. On tests/playbooks/mini_loop.yaml.j2, a small world where the
surge leaves the loop stuck unless the back-off fix ships (a run takes a fraction of a
second), so many seeds stay cheap."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import orchestrator
from helpers import gameday, interrupt_when
from orchestrator.batch.comparison import compare
from orchestrator.errors import InvalidInput
from orchestrator.runs.runner import RunSpec, execute
from reports import compare_stats as cs
from reports.rundir import load_run

HERE = Path(__file__).parent
ROOT = HERE.parent
MINI = str(HERE / "playbooks" / "mini_loop.yaml.j2")
FIX = str(HERE / "playbooks" / "fix_early.yaml")
FIX_COPY = str(HERE / "playbooks" / "fix_early_copy.yaml")


@pytest.fixture(scope="module")
def on_ray(ray_session):
    """none, the fix, and the fix under another name; 6 seeds each, as Ray tasks."""
    return orchestrator.compare(MINI, ["none", FIX, FIX_COPY], seeds=6, fixed=True)


def test_a_runbook_that_helps_beats_none_and_identical_runbooks_are_not_different(on_ray):
    df = on_ray
    assert len(df) == 18 and list(df.columns[:3]) == ["runbook", "seed", "trigger_s"]
    assert set(df[df["runbook"] == "none"]["outcome"]) == {"stuck"}
    assert set(df[df["runbook"] == "fix-early"]["outcome"]) == {"broken after the runbook acted"}
    tests = cs.pairs(df).set_index(["a", "b"])
    helps = tests.loc[("none", "fix-early")]
    assert helps["p_holm"] < cs.ALPHA and helps["better"] == "fix-early"
    same = tests.loc[("fix-early", "fix-early-copy")]  # (labelled by its name:, as gameday run names it)
    assert same["p"] == 1.0 and same["better"] == "" and "no significant difference" in same["verdict"]
    summ = cs.summary(df).set_index("runbook")
    assert summ.loc["none", "success_rate"] == 0.0 and summ.loc["fix-early", "success_rate"] == 1.0
    assert np.isinf(summ.loc["none", "median_break_s"])
    lo, hi = summ.loc["fix-early", "median_break_ci"]
    assert lo <= summ.loc["fix-early", "median_break_s"] <= hi < 600


def test_a_time_limit_on_ray_stops_the_runs_under_way_and_keeps_whole_seeds(ray_session, tmp_path):
    """As Ray tasks: at the limit, the runs started are stopped, each keeping a run directory
    that reads (complete, or marked interrupted), and the table holds the seeds whose runs
    were all done."""
    # (runs of half an hour, most of a second each, so that the limit usually finds two halfway)
    df = compare(MINI, ["none", FIX], 1000, duration=1800.0, time_limit=15.0, keep_runs=tmp_path / "runs")
    k = df["seed"].max()
    assert 1 <= k < 1000 and len(df) == 2 * k
    assert df.attrs["partial"].startswith(f"time limit 15s: {k} of the 1000 seeds, {2 * k} of the 2000 runs planned")
    for runbook in ("none", "fix-early"):
        assert sorted(df[df["runbook"] == runbook]["seed"]) == list(range(1, k + 1))
    status = {d.name: load_run(d).meta["status"] for d in (tmp_path / "runs").iterdir()}
    assert set(status.values()) <= {"complete", "interrupted"}
    assert all(status[f"{rb}-s{seed}"] == "complete" for rb in ("none", "fix-early") for seed in range(1, k + 1))


def test_stopping_runs_never_cancels_again_a_run_that_has_ended():
    """The comparison's stop (_stop) on a stand-in for Ray's wait, get and cancel: a run that
    ended on its first cancel, with a row or with an error, is not force-cancelled after it
    (real Ray 2.60 then aborts the driver: "Tried to complete task that was not pending");
    one still going after the wait is; a row that came is kept."""
    from orchestrator.batch.comparison import _stop

    class Cancelled(Exception):
        pass

    class StandIn:
        def __init__(self):
            self.cancels: list[tuple[str, bool]] = []
            self.ended = {"row": {"seed": 1}, "error": Cancelled()}  # ref -> result, once cancelled

        def wait(self, refs, num_returns, timeout):
            ready = [r for r in refs if r in self.ended and any(c == r for c, _ in self.cancels)]
            return ready, [r for r in refs if r not in ready]

        def get(self, ref, timeout):
            result = self.ended[ref]
            if isinstance(result, Exception):
                raise result
            return result

        def cancel(self, ref, force):
            self.cancels.append((ref, force))

    ray = StandIn()
    rows = {}
    pending = {"row": 0, "error": 1, "stuck": 2}
    _stop(ray, pending, lambda i, row: rows.update({i: row}), force=False)
    assert sorted(ray.cancels) == [("error", False), ("row", False), ("stuck", False), ("stuck", True)]
    assert rows == {0: {"seed": 1}}


def test_results_in_parallel_equal_results_run_one_by_one(on_ray):
    serial = compare(MINI, ["none", FIX, FIX_COPY], 6, parallel=False)
    pd.testing.assert_frame_equal(on_ray, serial)


@pytest.mark.slow
def test_a_playbook_files_own_runbooks_are_found_by_name(tmp_path):
    """A runbook named, not given as a file, is one of those beside the playbook file; the
    runs (which get the playbook's text without its folder) play that runbook."""
    import shutil

    own = tmp_path / "runbooks" / "mini-loop"  # the playbook's name
    own.mkdir(parents=True)
    shutil.copy(MINI, tmp_path / "mini_loop.yaml.j2")
    shutil.copy(FIX, own / "fix_early.yaml")
    by_name = compare(str(tmp_path / "mini_loop.yaml.j2"), ["none", "fix_early"], 2, parallel=False)
    by_file = compare(MINI, ["none", FIX], 2, parallel=False)
    pd.testing.assert_frame_equal(by_name, by_file)
    assert set(by_name[by_name["runbook"] == "fix-early"]["outcome"]) == {"broken after the runbook acted"}


def test_a_two_node_cluster_gives_the_same_table(cluster_check):
    from tests.cluster_check import COMPARE

    here = compare(str(ROOT / COMPARE["playbook"]), [r if r == "none" else str(ROOT / r) for r in COMPARE["runbooks"]],
                   COMPARE["seeds"], COMPARE["sweep"], parallel=False)
    there = pd.read_csv(io.StringIO(cluster_check["compare"]))
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(here.to_csv(index=False))), there)
    assert set(there["clients"]) == {1000, 2000} and len(there) == 12


def test_the_statistics_on_known_samples():
    assert cs.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert cs.mann_whitney(np.array([1.0, 2, 3, 4]), np.array([5.0, 6, 7, 8])) == pytest.approx(2 / 70 * 2 / 2, abs=0.01)
    assert cs.mann_whitney(np.array([np.inf] * 4), np.array([np.inf] * 4)) == 1.0
    df = pd.DataFrame({"runbook": ["a"] * 4, "seed": range(4), "loop_formed": [True, True, False, True],
                       "loop_broken_s": [60.0, np.nan, np.nan, 120.0], "impact": [1.0, 2, 3, 4],
                       "connections_broken": 0, "turned_away": 0, "actions": 1})
    t = cs.time_to_break(df).tolist()
    assert t == [60.0, np.inf, 0.0, 120.0]  # never formed counts 0, stuck counts slowest
    s = cs.summary(df).iloc[0]
    # a median over an even number of runs is the mean of the middle two (two outsider trials
    # read the lower one as wrong); a p90 is a run's own value
    assert s["success_rate"] == 0.75 and s["median_break_s"] == 90.0 and np.isinf(s["p90_break_s"])
    assert s["median_impact"] == 2.5
    assert np.isinf(cs.quantile(np.array([0.0, 60.0, np.inf, np.inf]), 0.5))  # a middle run stuck: infinite, never NaN
    assert cs.quantile(np.array([0.0, 60.0, np.inf]), 0.5) == 60.0


def test_the_command_writes_the_table_the_statistics_and_the_report(ray_session, tmp_path):
    out = tmp_path / "cmp"
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "compare", MINI, "-r", "none", "-r", FIX,
                           "--seeds", "4", "--fixed", "--sweep", "clients=1000,2000", "--serial", "--out", str(out),
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 16 and {"runbook", "seed", "clients", "loop_broken_s", "impact", "outcome"} <= set(df.columns)
    assert set(pd.read_csv(out / "pairs.csv")["clients"]) == {1000, 2000}
    assert "clients=2000: fix-early has less impact than none: by " in proc.stdout  # (seed by seed)
    assert "better on 100% of 4 seeds" in proc.stdout and "Mann-Whitney" not in proc.stdout
    assert set(pd.read_csv(out / "paired.csv")["clients"]) == {1000, 2000}
    race = json.loads((out / "race.json").read_text())  # (read over the seeds played)
    assert race["fixed"] and {p["point"]["clients"]: p["best"] for p in race["points"]}[2000] == "fix-early"
    md = (out / "compare.md").read_text()
    assert md.startswith("# Runbook comparison: mini-loop")  # the playbook's name, not its file's
    assert "16 runs (4 seeds per runbook and sweep point), each 20m of simulated time." in md
    assert "| clients=2000 | none vs fix-early |" in md and "![time to break the loop](charts/break_cdf.png)" in md
    for name in ("break_cdf", "impact"):
        assert (out / "charts" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "compare.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "src=\"charts/" not in html


def test_bad_input_stops_the_comparison_before_any_run(tmp_path):
    for i, (args, words) in enumerate(((["-r", "none", "-r", "no-such-runbook"], "no-such-runbook"),
                        (["-r", "none", "--sweep", "clients"], "--sweep"),
                        (["-r", "none", "--sweep", "cleints=1,2"], "--sweep: got 'cleints'; expected one of the "
                                                                     "playbook's variables"),
                        (["-r", "none", "--sweep", "clients=1000,many"], "--sweep clients: got 'many'; expected a "
                                                                         "value of the same type as the default 2000"),
                        (["-r", "none", "--sweep", "clients=1000,2000", "--set", "clients=500"],
                         "--set clients: got 500; expected a variable that is not also swept"),
                        (["-r", FIX, "-r", FIX], "expected each runbook once"),
                        (["-r", FIX, "-r", "SAME_NAME"], "expected runbooks with different names: its name, "
                                                         "'fix-early', is also"),
                        (["-r", "none", "--time-limit", "0s"], "--time-limit: got '0s'; expected a wall-clock time"),
                        (["-r", "none", "--time-limit", "soon"], "'soon' is not a duration"))):
        out = tmp_path / f"cmp{i}"
        same_name = tmp_path / "another_file.yaml"  # (another file, the same name: as FIX)
        same_name.write_text(Path(FIX).read_text())
        args = [str(same_name) if a == "SAME_NAME" else a for a in args]
        code, _, err = gameday(["compare", MINI, *args, "--seeds", "2", "--fixed", "--serial", "--out", str(out)])
        assert code == 2 and words in err, err
        assert not out.exists()


def test_a_runbook_file_is_named_in_the_tables_by_its_name_field_as_gameday_run_names_it(tmp_path):
    """The results (and the kept runs' directories) use a runbook's ``name:``, the name
    ``gameday run``, its report and a fork give it, not the name of the file it is in."""
    book = tmp_path / "v2-final.yaml"
    book.write_text(Path(FIX).read_text().replace("name: fix-early", "name: backoff-at-4-min", 1))
    df = compare(MINI, ["none", str(book)], 1, parallel=False, keep_runs=tmp_path / "runs")
    assert list(df["runbook"]) == ["none", "backoff-at-4-min"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["backoff-at-4-min-s1", "none-s1"]
    meta = json.loads((tmp_path / "runs" / "backoff-at-4-min-s1" / "meta.json").read_text())
    assert meta["runbook"] == "backoff-at-4-min"


@pytest.mark.slow
def test_the_table_counts_the_requests_a_runbook_turned_away_beside_the_connections_it_broke(tmp_path):
    """Shedding load is collateral too: a runbook that halves the rate shows the requests it
    held back, as its runs' score.json counts them (it used to show 0)."""
    shed = tmp_path / "shed.yaml"
    shed.write_text('name: shed\nrules:\n  - {name: shed, when: {at: "00:04"}, do: shed_load}\n')
    df = compare(MINI, ["none", str(shed)], 2, parallel=False, keep_runs=tmp_path / "runs")
    assert set(df[df["runbook"] == "none"]["turned_away"]) == {0}
    for _, row in df[df["runbook"] == "shed"].iterrows():
        score = json.loads((tmp_path / "runs" / f"shed-s{row['seed']}" / "score.json").read_text())
        assert row["turned_away"] == score["collateral"]["requests_turned_away"] > 0
        assert row["connections_broken"] == score["collateral"]["connections_broken_by_actions"]
    # the printed lines say it beside the impact, which counts what the shedding held back as failed
    from reports import compare_stats as cs
    from reports.compare_report import summary_lines

    lines = summary_lines(cs.summary(df), cs.pairs(df), [])
    shed_line = next(line for line in lines if line.startswith("shed:"))
    assert "turned away per run (mean; attempts refused, requests held back)" in shed_line and "turned away" not in lines[0], lines


@pytest.mark.slow
def test_runs_played_without_a_directory_give_the_rows_and_scores_of_runs_kept(tmp_path):
    """A comparison that keeps no run writes no run directory (journal.ScoreOnly): its table
    is the one of a comparison that keeps them, and a run's score in memory is its score.json."""
    kept = compare(MINI, ["none", FIX], 2, parallel=False, keep_runs=tmp_path / "runs")
    pd.testing.assert_frame_equal(compare(MINI, ["none", FIX], 2, parallel=False), kept)
    data = execute(RunSpec(playbook=MINI, runbook=FIX, seed=2), None)
    run_dir = tmp_path / "runs" / "fix-early-s2"
    assert data.dir is None and data.score == json.loads((run_dir / "score.json").read_text())
    meta = json.loads((run_dir / "meta.json").read_text())
    assert data.meta["status"] == meta["status"] == "complete" and data.meta["ticks_done"] == meta["ticks_done"] > 0
    with pytest.raises(ValueError, match="without a run directory"):
        data.metrics


@pytest.mark.slow
def test_ctrl_c_keeps_the_runs_a_comparison_played(tmp_path):
    """A real ``gameday compare`` sent SIGINT once a few runs are in its cache: it writes the
    tables and the report of seeds 1 to k, every runbook's, and exits 130; a run of a later
    seed stays in the cache."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "compare", MINI, "-r", "none", "-r", FIX,
                             "--seeds", "500", "--fixed", "--serial", "--cache", str(cache), "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err = interrupt_when(proc, lambda: len(list(cache.glob("*/*.json"))) >= 3, timeout=300)
    assert proc.returncode == 130, err
    runs = pd.read_csv(out / "results.csv")
    k = runs["seed"].max()
    for runbook in ("none", "fix-early"):  # seed by seed, whole seeds
        assert sorted(runs[runs["runbook"] == runbook]["seed"]) == list(range(1, k + 1))
    assert 1 <= k < 500 and len(list(cache.glob("*/*.json"))) in (2 * k, 2 * k + 1)  # (a run after seed k: cached)
    said = f"interrupted: {k} of the 500 seeds, {2 * k} of the 1000 runs planned"
    assert f"{said}" in err and f"{2 * k} runs ({said}" in (out / "compare.md").read_text()
    assert len(pd.read_csv(out / "summary.csv")) == 2 and len(pd.read_csv(out / "pairs.csv")) == 1


@pytest.mark.slow
def test_a_time_limit_keeps_the_seeds_done_in_time_and_caches_the_other_runs(tmp_path):
    """A real ``gameday compare --time-limit``, one by one: it stops starting runs at the
    limit, its tables and report cover whole seeds only (every runbook on the same seeds,
    1 to k), say so, and exit 0; a run of a seed not finished is kept in the cache."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "compare", MINI, "-r", "none", "-r", FIX,
                           "--seeds", "500", "--fixed", "--serial", "--time-limit", "4s", "--cache", str(cache),
                           "--out", str(out),
                           "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = pd.read_csv(out / "results.csv")
    k = runs["seed"].max()
    assert 1 <= k < 500
    for runbook in ("none", "fix-early"):
        assert sorted(runs[runs["runbook"] == runbook]["seed"]) == list(range(1, k + 1))
    played = len(list(cache.glob("*/*.json")))
    assert played in (2 * k, 2 * k + 1)  # one by one: at most one run of the seed the limit cut
    left_out = f"; left out: 1 run done of seed {k + 1}" if played > 2 * k else ""
    said = f"time limit 4s: {k} of the 500 seeds, {2 * k} of the 1000 runs planned{left_out}"
    assert f"{said}: the tables and the report cover those" in proc.stdout
    assert f"{2 * k} runs ({said})" in (out / "compare.md").read_text()
    first = compare(MINI, ["none", FIX], [1, 2][:k], parallel=False)  # the rows of a comparison played whole
    pd.testing.assert_frame_equal(runs[runs["seed"] <= 2].reset_index(drop=True),
                                  pd.read_csv(io.StringIO(first.to_csv(index=False))))


def test_a_comparison_cut_short_keeps_the_first_seeds_whose_runs_were_all_done():
    """Not any seed whose runs happened to end (on Ray, runs end out of order, and a stuck
    world can be slower to play): which seeds count must not depend on the runs' results."""
    from orchestrator.batch.comparison import leading_whole_seeds

    assert leading_whole_seeds([1, 2, 3, 4], [1, 1, 3, 3, 2, 4, 4], 2) == [1]
    assert leading_whole_seeds([1, 2, 3], [1, 1, 2, 2, 3, 3], 2) == [1, 2, 3]
    assert leading_whole_seeds([5, 3], [3, 3], 2) == []  # in the order planned
    with pytest.raises(InvalidInput, match=r"seeds: got \[1, 2, 1\]; expected seeds without repeats"):
        compare(MINI, ["none"], [1, 2, 1], parallel=False)


def test_a_time_limit_too_short_for_one_seed_says_so():
    with pytest.raises(InvalidInput, match=r"time_limit: got '1e-09s'; expected time for every run of one seed "
                                           r"\(2 runs; 0 runs were done\)"):
        compare(MINI, ["none", FIX], 3, parallel=False, time_limit=1e-9)


# -- the cache of runs ------------------------------------------------------------------------------

@pytest.mark.slow  # (the fast subset keeps the cache's command-line checks and counts)
def test_a_cache_plays_only_the_runs_not_played_before_and_changes_no_result(tmp_path, monkeypatch):
    from orchestrator.batch import comparison

    cache = tmp_path / "cache"
    played = []
    real = comparison.run_group
    monkeypatch.setattr(comparison, "run_group",
                        lambda pb, group, *a, **k: played.extend(t["seed"] for t in group) or real(pb, group, *a, **k))
    first = compare(MINI, ["none", FIX], 3, parallel=False, cache=cache)
    assert len(played) == 6 and first.attrs["reused"] == 0
    # a runbook and a seed more: only their runs are played, and the table is the one played afresh
    played.clear()
    second = compare(MINI, ["none", FIX, FIX_COPY], 4, parallel=False, cache=cache)
    assert second.attrs["reused"] == 6 and len(played) == 12 - 6
    fresh = compare(MINI, ["none", FIX, FIX_COPY], 4, parallel=False)
    pd.testing.assert_frame_equal(second, fresh)
    # the same runbook text in a file of another name is the same run: taken from the cache,
    # and named by its name: as the runs played were
    renamed = tmp_path / "the_fix.yaml"
    renamed.write_text(Path(FIX).read_text())
    played.clear()
    third = compare(MINI, [str(renamed)], 4, parallel=False, cache=cache)
    assert played == [] and set(third["runbook"]) == {"fix-early"}
    pd.testing.assert_frame_equal(third, fresh[fresh["runbook"] == "fix-early"].reset_index(drop=True))
    # another value of a variable, another duration or another tick is another run
    for kw in ({"sets": {"clients": 1500}}, {"duration": 1500.0}, {"tick": 0.5}):
        played.clear()
        other = compare(MINI, ["none"], 2, parallel=False, cache=cache, **kw)
        assert other.attrs["reused"] == 0 and len(played) == 2, kw
    # an entry that cannot be read is played again, and written whole
    entries = sorted(cache.rglob("*.json"))
    assert len(entries) == 12 + 3 * 2 and not list(cache.rglob("*.tmp"))
    for entry in entries:
        entry.write_text("{not json")
    played.clear()
    again = compare(MINI, ["none", FIX], 3, parallel=False, cache=cache)
    assert again.attrs["reused"] == 0 and len(played) == 6
    pd.testing.assert_frame_equal(again, first)


def test_a_cache_key_holds_everything_that_decides_a_run():
    from orchestrator.batch.run_cache import code_digest, run_key

    base = ("playbook text", "runbook text", 1, None, None)
    keys = {run_key(*base), run_key("playbook text ", *base[1:]), run_key(base[0], "runbook", *base[2:]),
            run_key(*base[:2], 2, None, None), run_key(*base[:3], 3600.0, None), run_key(*base[:4], 0.5)}
    assert len(keys) == 6 and run_key(*base) == run_key(*base)
    assert len(code_digest()) == 64


def test_the_code_digest_changes_with_any_file_of_the_model_and_not_with_compiled_files(tmp_path):
    import shutil

    from orchestrator.batch.run_cache import CODE_PACKAGES, digest_of

    for package in CODE_PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    before = digest_of(tmp_path)
    (tmp_path / "agents" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "agents" / "__pycache__" / "wheel.cpython-311.pyc").write_bytes(b"compiled")
    assert digest_of(tmp_path) == before
    for changed in ("agents/wheel.py", "playbooks/us-east-1-2021.yaml.j2", "orchestrator/engine/scoring.py"):
        path = tmp_path / changed
        text = path.read_text()
        path.write_text(text + "\n# changed\n")
        assert digest_of(tmp_path) != before, changed
        path.write_text(text)
    assert digest_of(tmp_path) == before


def test_a_comparison_cut_short_counts_every_run_it_leaves_out():
    """Played in parallel, runs of seeds after the first not finished may be done: they are
    left out of the tables too, and the words count them all with their seeds (they said
    "left out: N runs from the first seed not finished on", runs of later seeds included)."""
    from orchestrator.batch.comparison import Point, _seeds_cut

    points = [Point(rb, seed) for seed in (1, 2, 3, 4) for rb in ("a", "b", "c")]
    done = {(1, "a"), (1, "b"), (1, "c"), (2, "a"), (2, "c"), (3, "a"), (3, "b"), (3, "c")}
    rows = [{"seed": p.seed} if (p.seed, p.runbook) in done else None for p in points]
    said = _seeds_cut(points, rows, [1, 2, 3, 4], False, 300.0, False)
    assert said == ("time limit 5m: 1 of the 4 seeds, 3 of the 12 runs planned; left out: 5 runs done of seeds 2, 3, "
                    "from seed 2 on, the first not finished")
    assert [r is not None for r in rows] == [True] * 3 + [False] * 9
    rows = [{"seed": p.seed} if p.seed == 1 or (p.seed, p.runbook) == (2, "b") else None for p in points]
    assert _seeds_cut(points, rows, [1, 2, 3, 4], False, 300.0, False).endswith("; left out: 1 run done of seed 2")


@pytest.mark.slow
def test_the_cache_option_is_checked_before_any_run(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    for i, (args, words) in enumerate(((["--cache", str(a_file)], "--cache"),
                                       (["--cache", str(tmp_path / "c"), "--keep-runs"], "--cache or --keep-runs, not both"))):
        out = tmp_path / f"cmp{i}"
        code, _, err = gameday(["compare", MINI, "-r", "none", *args, "--seeds", "2", "--serial", "--out", str(out)])
        assert code == 2 and words in err, err
        assert not out.exists()
    out = tmp_path / "cmp"
    args = ["compare", MINI, "-r", "none", "--seeds", "2", "--serial", "--no-progress", "--cache", str(tmp_path / "c")]
    for n, words in ((1, "0 of 2 runs taken from the cache"), (2, "2 of 2 runs taken from the cache")):
        code, said, err = gameday([*args, "--out", str(out / str(n))])
        assert code == 0 and words in said, err
    assert (out / "1" / "results.csv").read_text() == (out / "2" / "results.csv").read_text()


# -- the phase map ---------------------------------------------------------------------------------

GRID = (("clients", [1000, 2000]), ("surge_setups", [50, 200]))


@pytest.mark.slow
def test_the_phase_map_has_a_stuck_region_with_the_bug_and_none_without():
    from orchestrator.batch.phasemap import phase_map

    with_bug, runs = phase_map(MINI, *GRID, seeds=2, parallel=False, full=True)
    without, _ = phase_map(MINI, *GRID, seeds=2, sets={"latent_bug": False}, parallel=False, full=True)
    phase = {(r["clients"], r["surge_setups"]): r["phase"] for r in with_bug.to_dict("records")}
    assert len(runs) == 8 and set(runs["runbook"]) == {"none"}
    assert phase[(1000, 50)] == "healthy"  # a small surge on a light load: nothing happens
    assert phase[(2000, 200)] == "stuck"  # a big surge on a heavy load: the loop sustains itself
    assert phase[(1000, 200)] == "recovered by itself"
    assert (without["phase"] == "stuck").sum() < (with_bug["phase"] == "stuck").sum()
    assert (without["phase"] == "stuck").sum() == 0


def test_a_phase_map_with_a_runbook_counts_its_runs_broken_after_it_acted_as_their_own_phase():
    """A runbook that acts breaks the loop where it would have stayed stuck: those cells are
    in the phase of that outcome (a map with a runbook once lost them: they were in no phase)."""
    from orchestrator.batch.phasemap import phase_map

    cells, runs = phase_map(MINI, ("clients", [1000, 2000]), ("surge_setups", [200]), seeds=1, runbook=FIX,
                            duration=1800.0, parallel=False, full=True)
    assert set(runs["outcome"]) == {"broken after the runbook acted"}
    assert list(cells["phase"]) == ["broken after the runbook acted"] * 2
    assert list(cells["broken after the runbook acted"]) == [1, 1] and cells["stuck"].sum() == 0


@pytest.mark.slow
def test_the_phasemap_command_writes_its_directory_and_prints_the_grid(tmp_path):
    """(with the options its runs share with compare's: --vars, --tick, --no-progress)"""
    out = tmp_path / "map"
    (tmp_path / "vars.yaml").write_text("device_cpu: 4000\n")
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", "phasemap", MINI, "--x", "clients=1000,2000",
                           "--y", "surge_setups=50,200", "--seeds", "1", "--serial", "--out", str(out),
                           "--vars", str(tmp_path / "vars.yaml"), "--duration", "10m", "--tick", "0.5s", "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "1 seed per cell" in (out / "phasemap.md").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["phasemap.csv", "phasemap.md", "phasemap.png", "runs.csv"]
    cells = pd.read_csv(out / "phasemap.csv")
    assert len(cells) == 4 and len(pd.read_csv(out / "runs.csv")) == 4
    grid = proc.stdout.splitlines()[:4]
    assert grid[0] == "| surge_setups \\ clients | 1000 | 2000 |"
    for line, y in zip(grid[2:], (50, 200)):  # each row's phases, as the cells say
        phases = [cells[(cells["clients"] == x) & (cells["surge_setups"] == y)]["phase"].item() for x in (1000, 2000)]
        assert line == f"| {y} | " + " | ".join(phases) + " |"
    assert "\n".join(grid) in (out / "phasemap.md").read_text()


def test_a_phasemaps_bad_axes_are_said_as_its_options_before_any_run(tmp_path):
    """One variable on both axes crashed after the runs (pandas), leaving half a directory;
    an axis's errors were said as compare's --sweep."""
    from click.testing import CliRunner

    from orchestrator.cli import main

    cases = {("clients=1000", "clients=1000,2000"): "--y: got 'clients'; expected a variable other than --x's (clients)",
             # (the name is what is wrong, not its first value; an outsider read "got 1")
             ("nosuch=1,2", "clients=1000"): "--x: got 'nosuch'; expected one of the playbook's variables",
             ("clients=1000", "clients"): "--y: got 'clients'; expected name=value1,value2,...",
             ("clients=1000", "surge_setups=lots"): "--y surge_setups: got 'lots'; expected a value of the same type"}
    for (x, y), said in cases.items():
        out = tmp_path / "map"
        result = CliRunner().invoke(main, ["phasemap", MINI, "--x", x, "--y", y, "--serial", "--out", str(out)])
        assert result.exit_code == 2 and said in result.stderr, (x, y, result.output)
        assert "gameday compare" not in result.stderr and "--sweep" not in result.stderr
        assert not out.exists()
    result = CliRunner().invoke(main, ["phasemap", MINI, "--x", "clients=1000,2000", "--y", "surge_setups=50",
                                       "--set", "clients=100", "--serial", "--out", str(tmp_path / "map")])
    assert result.exit_code == 2 and "--set clients: got 100; expected a variable that is not also swept (--x " \
                                      "clients gives its values" in result.stderr and "--sweep" not in result.stderr


def _every_cell_on_the_same_seeds(runs: pd.DataFrame) -> int:
    """The number of seeds, once checked that every cell of a 2 x 2 map has runs of seeds 1 to it."""
    k = runs["seed"].max()
    for _, cell in runs.groupby(["clients", "surge_setups"]):
        assert sorted(cell["seed"]) == list(range(1, k + 1))
    assert len(runs) == 4 * k
    return k


@pytest.mark.slow
def test_a_phase_map_cut_short_maps_the_seeds_played_in_every_cell(tmp_path):
    """``gameday phasemap`` one by one, stopped by --time-limit (exit 0), then by a real
    SIGINT (exit 130): either way the map covers the seeds played in every cell, and says so."""
    args = [sys.executable, "-m", "orchestrator.cli", "phasemap", MINI, "--x", "clients=1000,2000",
            "--y", "surge_setups=50,200", "--seeds", "500", "--full", "--serial"]
    timed = tmp_path / "timed"
    proc = subprocess.run([*args, "--time-limit", "4s", "--out", str(timed)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    k = _every_cell_on_the_same_seeds(pd.read_csv(timed / "runs.csv"))
    assert 1 <= k < 500 and f"{k} seeds per cell (time limit 4s: {k} of the 500 seeds" in (timed / "phasemap.md").read_text()
    cache, stopped = tmp_path / "cache", tmp_path / "stopped"
    proc = subprocess.Popen([*args, "--cache", str(cache), "--out", str(stopped)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    err = interrupt_when(proc, lambda: len(list(cache.glob("*/*.json"))) >= 9, timeout=300)  # two seeds and more
    assert proc.returncode == 130, err
    k = _every_cell_on_the_same_seeds(pd.read_csv(stopped / "runs.csv"))
    assert k >= 2 and f"interrupted: {k} of the 500 seeds, {4 * k} of the 2000 runs planned" in err
    assert len(pd.read_csv(stopped / "phasemap.csv")) == 4


@pytest.mark.slow  # (the fast subset keeps the cache's command-line checks and counts)
def test_a_phase_map_extended_through_its_cache_plays_only_its_new_cells(tmp_path):
    args = [sys.executable, "-m", "orchestrator.cli", "phasemap", MINI, "--y", "surge_setups=50,200", "--seeds", "1",
            "--serial", "--cache", str(tmp_path / "cache")]
    outs = []
    for n, (xs, words) in enumerate((("1000,2000", "0 of 4 runs taken from the cache"),
                                     ("1000,2000,3000", "4 of 6 runs taken from the cache"))):
        outs.append(tmp_path / f"map{n}")
        proc = subprocess.run([*args, "--x", f"clients={xs}", "--out", str(outs[-1])], cwd=ROOT, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0 and words in proc.stdout, proc.stderr
    first, second = (pd.read_csv(out / "runs.csv") for out in outs)
    pd.testing.assert_frame_equal(first, second[second["clients"] != 3000].reset_index(drop=True))


@pytest.mark.slow
@pytest.mark.slow
def test_a_refined_phase_map_spends_its_runs_at_the_boundaries_and_classifies_as_the_full_grid():
    """Seeds go where the phase changes: the same map as every seed in every cell, from
    fewer runs; the cells far from a boundary played one seed, those at one all three."""
    from orchestrator.batch.phasemap import phase_map

    grid = (("clients", [500, 1000, 1500, 2000, 2500]), ("surge_setups", [25, 50, 100, 200]))
    full, full_runs = phase_map(MINI, *grid, seeds=3, parallel=False, full=True)
    refined, runs = phase_map(MINI, *grid, seeds=3, parallel=False)
    cols = ["clients", "surge_setups", "phase"]
    pd.testing.assert_frame_equal(refined[cols], full[cols])
    assert len(full_runs) == runs.attrs["full_runs"] == 60 and len(runs) < 50
    per_cell = runs.groupby(["clients", "surge_setups"]).size()
    assert per_cell[(500, 25)] == 1 and per_cell[(2000, 50)] == 3  # deep in the healthy corner; on the edge
    # a refined cell's runs are the full grid's runs of the same seeds
    merged = runs.merge(full_runs, on=["runbook", "seed", "clients", "surge_setups"], suffixes=("", "_full"))
    assert len(merged) == len(runs) and (merged["impact"] == merged["impact_full"]).all()


@pytest.mark.slow
def test_hysteresis_a_stuck_system_recovers_only_well_below_the_load_that_tipped_it():
    from orchestrator.batch.phasemap import hysteresis

    h = hysteresis(MINI, "rate", [0.8, 0.9, 1.0, 1.1], "shed_load", "factor", [0.3, 0.4, 0.5, 0.7, 0.9], "00:10",
                   seeds=2, duration=1800, parallel=False)
    print(f"\ntips at rate {h['tip_load']}, recovers from stuck at rate {h['recover_load']}")
    assert h["tip_load"] is not None and h["recover_load"] is not None
    assert h["recover_load"] < h["tip_load"]
    # and a stuck system brought to just under the tipping load stays stuck
    just_under = h["recovery"][h["recovery"]["runbook"] == "shed-to-0.9"]
    assert set(just_under["outcome"]) == {"stuck"}


def test_a_sweep_point_where_no_run_formed_a_loop_is_not_a_matter_of_seeds():
    """An outsider trial's sweep point where all six runs stayed healthy read 'cannot tell:
    too few seeds ... use at least 4'; more seeds cannot help there."""
    rows = [{"runbook": rb, "seed": s, "load": load, "loop_formed": formed, "loop_broken_s": 100.0 + s if formed else np.nan,
             "impact": 1.0, "connections_broken": 0, "turned_away": 0, "actions": 1}
            for load, formed in ((0.2, False), (0.6, True)) for rb in ("none", "shed") for s in range(3)]
    p = cs.pairs(pd.DataFrame(rows), ["load"]).set_index("load")
    assert p.loc[0.2, "verdict"] == "no run of none or shed formed a loop" and p.loc[0.2, "power"] == ""
    assert p.loc[0.6, "verdict"].startswith("cannot tell") and "use at least" in p.loc[0.6, "power"]
