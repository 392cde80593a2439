"""Milestones that stay true (orchestrator/engine/scoring.py): a milestone holds from the start
of the last window after which its condition held to the horizon; a confirmed condition
that fails again for longer than its grace is a relapse, journalled, kept in the score,
and a relapsed loop is not broken in the score, the comparison, the report and the
scoreboard. tests/playbooks/relapse.yaml.j2: durable jobs collapse a worker's queue;
pausing delivery suspends the loop (it is within its bounds only because the demand is
held back: not broken); releasing the herd at once re-forms it, releasing it at a pace
below capacity breaks it with all of the demand back, and releasing the rest of the
backlog at once later makes it relapse."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import orchestrator
from orchestrator.batch.comparison import Point, row_of
from orchestrator.engine.scoring import Milestone
from reports.analysis import analyse
from reports.summary import summary_table

RELAPSE = str(Path(__file__).parent / "playbooks" / "relapse.yaml.j2")
PAUSE = {"when": {"at": "00:12"}, "do": "pause_jobs"}


def feed(ms: Milestone, conditions: str) -> list:
    """Feed a condition per tick ('1' true, '0' false), armed; returns the changes."""
    return [(t, c) for t, ok in enumerate(conditions) if (c := ms.update(t, ok == "1", True)) is not None]


def test_a_milestone_is_confirmed_after_its_hold_and_relapses_after_its_grace():
    ms = Milestone("m", hold_ticks=3)
    assert feed(ms, "0" + "1111" + "00" + "1" + "0000" + "1111") == [
        (4, ("milestone", 1)),  # true from tick 1, held 3 ticks
        (11, ("relapse", 8)),  # the dip at 5-6 is within the grace; the one from 8 is not
        (15, ("milestone", 12))]
    assert ms.first_at == 1 and ms.relapses == [8] and ms.at == 12 and not ms.relapsed


def test_a_milestone_that_relapses_for_good_is_not_reached():
    ms = Milestone("m", hold_ticks=2)
    feed(ms, "0111" + "000000")
    assert ms.at is None and ms.first_at == 1 and ms.relapses == [4] and ms.relapsed


def test_a_condition_true_from_the_start_never_counts():
    ms = Milestone("m", hold_ticks=1)
    assert feed(ms, "1111") == [] and ms.first_at is None


@pytest.fixture(scope="module")
def herd(runbook_file, tmp_path_factory):
    book = runbook_file("herd", [PAUSE, {"when": {"at": "00:20"}, "do": "release_jobs"}])
    return orchestrator.run(RELAPSE, runbook=book, seed=1, out=tmp_path_factory.mktemp("relapse") / "herd")


PACE = {"when": {"at": "00:20"}, "do": {"action": "release_jobs", "params": {"factor": 0.19}}}  # 950 jobs/s


@pytest.fixture(scope="module")
def paced(runbook_file, tmp_path_factory):
    book = runbook_file("paced", [PAUSE, PACE])
    return orchestrator.run(RELAPSE, runbook=book, seed=1, out=tmp_path_factory.mktemp("relapse") / "paced")


@pytest.fixture(scope="module")
def relapsed(runbook_file, tmp_path_factory):
    """Paced from 00:20, then the rest of the backlog let go at once at 00:30."""
    book = runbook_file("relapsed", [PAUSE, PACE, {"when": {"at": "00:30"}, "do": "release_jobs"}])
    return orchestrator.run(RELAPSE, runbook=book, seed=1, out=tmp_path_factory.mktemp("relapse") / "relapsed")


def test_a_loop_that_re_forms_is_not_broken(relapsed):
    lb = relapsed.score["loop_broken"]
    assert relapsed.score["loop_formed"] and not lb["reached"] and lb["relapsed"] and lb["final"] is None
    # broken with all of the demand back (paced), then the rest of the backlog at once re-formed it
    assert "00:20" <= lb["first_at"]["clock"] < "00:21" and [r["clock"][:5] for r in lb["relapses"]] == ["00:30"]
    late = relapsed.metrics[relapsed.metrics["clock"] >= "00:35"]
    assert late["worker.work_useful"].sum() == 0 and late["worker.utilisation"].min() == 1.0
    relapse = relapsed.events[relapsed.events["event"] == "relapse"]
    assert "loop_broken" in set(relapse["milestone"])
    assert relapsed.score["recovered"]["worker"]["relapsed"]  # the worker's recovery relapsed too


def test_a_loop_within_its_bounds_while_an_action_holds_its_demand_back_is_suspended_not_broken(herd):
    """The pause stops the feedback (the worker idle, nothing wasted) only because nothing is
    delivered: the loop is suspended, not broken, and when the release lets the herd in at
    once it re-forms. It never broke, so it did not relapse either (#42: a site turned off
    read as a loop broken, and attribution credited the pause)."""
    lb, score = herd.score["loop_broken"], herd.score
    assert score["loop_formed"] and not lb["reached"] and not lb["relapsed"] and lb["first_at"] is None
    [span] = score["loop_suspended"]
    assert "00:12" <= span["from"]["clock"] < "00:15" and span["to"]["clock"][:5] == "00:20"
    assert score["demand_restored"]["clock"][:5] == "00:20"
    late = herd.metrics[herd.metrics["clock"] >= "00:30"]
    assert late["worker.work_useful"].sum() == 0 and late["worker.utilisation"].min() == 1.0
    assert row_of(Point("herd", 1), score, 2700.0)["outcome"] == "relapsed"  # (suspended, then re-formed)
    a = analyse(herd)
    assert "suspended at 00:1" in a.verdict and "re-formed when the demand came back at 00:20" in a.verdict
    assert any("suspended, not broken; it re-formed once the demand came back" in s for s in a.summary), a.summary


def test_a_loop_that_holds_keeps_its_first_time(paced):
    lb = paced.score["loop_broken"]
    assert lb["reached"] and not lb["relapsed"] and lb["relapses"] == []
    # (broken once the demand was back, at a pace the worker keeps up with: not while it was paused)
    assert lb["clock"] == lb["first_at"]["clock"] == lb["final"]["clock"] and "00:20" <= lb["clock"] < "00:21"
    assert paced.score["demand_restored"]["clock"] == lb["clock"]
    # the worker answers what it is asked again as soon as its stale queue is dropped: idle and
    # ready is recovered (the jobs are not: their demand is held back)
    assert "00:12" <= paced.score["recovered"]["worker"]["clock"] < "00:15"


def test_compare_counts_a_relapsed_run_as_not_broken(relapsed, paced):
    rows = {name: row_of(Point(name, 1), run.score, 2700.0) for name, run in (("relapsed", relapsed), ("paced", paced))}
    assert rows["relapsed"]["outcome"] == "relapsed"
    assert rows["relapsed"]["loop_broken_s"] != rows["relapsed"]["loop_broken_s"]  # NaN
    assert rows["paced"]["outcome"] == "broken after the runbook acted" and rows["paced"]["loop_broken_s"] > 0


def test_a_relapse_is_put_down_to_the_last_change_before_it_whatever_made_it():
    """A trigger firing again (or a fault injected) after the last action is what came
    before a relapse: the report names it, not the innocent action before it."""
    from reports.analysis import _changes, _last_before

    events = [{"event": "action_effective", "tick": 100, "action": "restore_load"},
              {"event": "trigger", "tick": 200, "trigger": "brownout"},
              {"event": "fault_injected", "tick": 300, "fault": "dns-outage"}]
    assert _last_before(_changes(events), 150)["what"] == "restore_load took effect"
    assert _last_before(_changes(events), 222)["what"] == "the trigger brownout fired"
    assert _last_before(_changes(events), 300)["what"] == "the fault dns-outage was injected"
    assert _last_before(_changes(events), 99) is None


def test_the_report_and_the_summary_say_the_loop_re_formed(relapsed):
    herd = relapsed
    a = analyse(herd)
    assert a.verdict.startswith("The loop broke at 00:20") and "re-formed at 00:30" in a.verdict
    relapse = [f for f in a.findings if f.kind == "relapse" and "loop re-formed" in f.title]
    assert relapse and "after release_jobs" in relapse[0].title and "did not hold again" in relapse[0].evidence
    assert not [f for f in a.findings if f.kind == "loop_breaker"]
    assert any(r["what"] == "relapse: loop broken no longer" for r in a.timeline)
    assert "re-formed" in " ".join(a.summary)
    loop_row = next(r for r in a.measures if r["measure"] == "loop broken")
    assert loop_row["yours"].startswith("not reached (first 00:20")
    assert "relapsed 00:30" in summary_table(herd)


def test_the_scoreboard_does_not_rank_a_relapsed_loop_as_broken(relapsed, paced):
    herd = relapsed
    from orchestrator.live.session import team_row

    herd_row, paced_row = team_row("herd", herd.score, True), team_row("paced", paced.score, True)
    assert herd_row["loop"] == f"re-formed {herd.score['loop_broken']['relapses'][-1]['clock']}" and herd_row["relapses"] == 1
    assert paced_row["loop"] == f"broken {paced.score['loop_broken']['clock']}"
    assert paced_row["_key"] < herd_row["_key"]  # the relapsed team ranks behind, though its loop broke as early


@pytest.mark.parametrize("paused", [False, True])
def test_a_population_that_gets_nothing_through_has_not_recovered(tmp_path, paused):
    """Durable work paused for good after a fault: nothing fails any more because nothing
    goes out, and its backlog grows; it used to count as recovered (no attempts, success 1)."""
    from helpers import play

    world = {"name": "paused", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "20m"},
             "services": [{"name": "svc", "capacity": 1000}],
             "populations": [{"name": "jobs", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "svc",
                              "work": "durable", "max_rate": 200, "request": {"timeout": "5s"}}],
             "triggers": [{"name": "trigger", "at": "00:02", "effects": [
                 {"target": "svc", "op": "fault", "args": {"share": 1.0, "kind": "error", "duration": 120}}]}],
             "mitigations": [{"name": "pause", "effects": [{"target": "jobs", "op": "scale_dispatch", "args": {"factor": 0}}]}],
             "scoring": {"recovered": {"populations": ["jobs"]}}}
    r = play(tmp_path, world, [{"when": {"at": "00:03"}, "do": "pause"}] if paused else [])
    recovered = r.score["recovered"]["jobs"]
    assert recovered["reached"] is (not paused)
    if paused:
        assert r.metrics["jobs.attempts"].iloc[300:].sum() == 0 and r.metrics["jobs.backlog"].iloc[-1] > 100_000



DRAIN = str(Path(__file__).parent / "playbooks" / "durable_drain.yaml.j2")


def _clock_s(when: dict) -> float:
    return when["seconds_after_start"]


def test_a_backlog_never_over_its_threshold_counts_as_drained_at_once_in_a_comparison(herd):
    """It had nothing to drain: 0 s, as a loop that never formed counts as broken at once
    (it read 'backlog drained in 0%', the worst figure, for a runbook that kept it small)."""
    import pandas as pd

    from reports import compare_stats as cs

    calm = {**herd.score, "backlog_drained": {"reached": False, "impaired": False, "relapses": []}}
    from reports.compare_report import _drained

    row = row_of(Point("calm", 1), calm, 2700.0)
    assert row["backlog_scored"] and not row["backlog_formed"] and row["backlog_drained_s"] == 0.0
    summ = cs.summary(pd.DataFrame([row]))
    assert summ.loc[0, "drained_rate"] == 1.0 and summ.loc[0, "backlog_never_formed"] == 1
    assert "1 of 1 never over its threshold: drained at once" in _drained(summ.to_dict("records")[0])
    stuck = row_of(Point("stuck", 1), {**calm, "backlog_drained": {"reached": False, "impaired": True}}, 2700.0)
    assert stuck["backlog_formed"] and stuck["backlog_drained_s"] != stuck["backlog_drained_s"]  # NaN: not drained


@pytest.mark.slow
def test_a_durable_backlog_drained_at_full_dispatch_is_not_a_loop_but_a_drain_that_fails_is():
    """Durable work's amplification is attempts per job completed, not per fresh job:
    after a 10-minute fault, 1,000 jobs/s arriving and up to 3,000/s dispatched, the
    backlog drains at 2,000/s, every job at its first try. The loop is broken within 2
    minutes of the fault lifting (the old rule, 3 attempts per fresh job, kept it unbroken
    until the backlog had drained), and the backlog drains when the closed form says,
    (600 s x 1,000/s - 10 s x 1,000/s) / 2,000/s = 295 s after the fault. A worker of
    1,500 jobs/s fails a third of the drain's dispatches and its jobs retry: that loop
    is not broken until the backlog has drained."""
    from reports.charts import amplification

    fault_end = 5 * 60 + 600
    run = orchestrator.run(DRAIN, runbook="none")
    healthy = run.score
    # the report's chart: the fault's minutes (attempts, nothing completed) drawn at its top, not as
    # a gap; the healthy drain (after the fault's last minute) at 1 attempt per job completed
    ratio, unbounded = amplification(run.metrics, "jobs", [(0, "durable")], 60, 1.5)
    assert unbounded and ratio.isna().sum() == 0 and ratio.iloc[fault_end - 60] == ratio.max() >= 1.8
    drain = ratio.iloc[fault_end + 90:fault_end + 280]
    assert drain.between(0.95, 1.1).all(), drain.describe()
    broken, drained = healthy["loop_broken"], healthy["backlog_drained"]
    assert healthy["loop_formed"] and broken["reached"] and not broken["relapses"], broken
    assert fault_end < _clock_s(broken) <= fault_end + 120, broken
    assert _clock_s(drained) == pytest.approx(fault_end + 295, abs=15), drained
    overloaded = orchestrator.run(DRAIN, runbook="none", sets={"capacity": 1500}).score
    assert _clock_s(overloaded["loop_broken"]) >= _clock_s(overloaded["backlog_drained"]) > fault_end + 295, overloaded


@pytest.mark.slow
def test_the_comparison_says_a_runbook_that_pauses_durable_work_for_good_drains_nothing(runbook_file):
    """Pausing delivery for good only suspends the loop (#42: it read as broken as fast as
    pausing and then releasing the jobs at a pace); only the second breaks it and drains the
    backlog, and the comparison's summary, its printed lines and its report say so (they used
    to show only the loop's figures)."""
    from orchestrator.batch.comparison import compare
    from reports import compare_stats as cs
    from reports.compare_report import summary_lines

    forever = runbook_file("pause-forever", [PAUSE])
    paced = runbook_file("pause-and-pace", [PAUSE, {"when": {"at": "00:20"},
                                                     "do": {"action": "release_jobs", "params": {"factor": 0.19}}}])
    df = compare(RELAPSE, [forever, paced], 2, parallel=False, duration=7200.0)  # (paced: 150 jobs/s drained)
    assert set(df["backlog_scored"]) == {True}
    assert dict(zip(df["runbook"], df["outcome"])) == {"pause-forever": "suspended",
                                                       "pause-and-pace": "broken after the runbook acted"}
    summ = cs.summary(df).set_index("runbook")
    assert summ.loc["pause-forever", "success_rate"] == 0.0 and summ.loc["pause-and-pace", "success_rate"] == 1.0
    assert summ.loc["pause-forever", "drained_rate"] == 0.0 and summ.loc["pause-forever", "median_drain_s"] == float("inf")
    assert summ.loc["pause-and-pace", "drained_rate"] == 1.0 and summ.loc["pause-and-pace", "median_drain_s"] < 7200
    lines = summary_lines(cs.summary(df), cs.pairs(df), [])
    assert ", backlog drained in 0% (median " in lines[0] and ", backlog drained in 100% (median " in lines[1], lines
    mini = compare(str(Path(__file__).parent / "playbooks" / "mini_loop.yaml.j2"), ["none"], 1, parallel=False)
    assert not mini["backlog_scored"].any() and "backlog drained" not in summary_lines(cs.summary(mini), cs.pairs(mini), [])[0]


def test_a_comparison_and_gameday_run_agree_that_an_action_after_the_break_did_not_break_the_loop(runbook_file, tmp_path):
    """The loop of durable_drain breaks by itself once its fault lifts (00:15:41); a runbook
    whose only action takes effect at 00:25 did not break it: the comparison's outcome says
    'recovered by itself', as the run's attribution does (it said 'broken after the runbook
    acted', counting any action at all). One that acts at 00:10, during the fault, did act first."""
    from orchestrator.batch.comparison import compare

    late = runbook_file("late", [{"when": {"at": "00:25"}, "do": "set_dispatch"}])
    early = runbook_file("early", [{"when": {"at": "00:10"}, "do": "set_dispatch"}])
    df = compare(DRAIN, [late, early], 1, parallel=False).set_index("runbook")
    assert df.loc["late", "actions"] == 1 and df.loc["late", "outcome"] == "recovered by itself"
    assert df.loc["early", "outcome"] == "broken after the runbook acted"
    run = orchestrator.run(DRAIN, runbook=late, out=tmp_path / "late", attribution=True)
    assert "broke by itself" in run.attribution["text"], run.attribution
    assert run.score["first_action_effective"]["clock"] >= "00:25" > run.score["loop_broken"]["clock"]


def test_work_made_durable_mid_run_is_scored_and_charted_as_durable_from_then_on(runbook_file, tmp_path):
    """Perishable jobs made durable during the fault (set_work) drain at full dispatch after
    it: the scorer and the report's chart read their amplification per job completed from
    the tick set_work applied, so the loop breaks when the always-durable world's does
    (00:15:41), not when the backlog has drained (00:20:45, reading 3 attempts per fresh job)."""
    from reports.charts import amplification

    book = runbook_file("make-durable", [{"when": {"at": "00:10"}, "do": "make_durable"}])
    run = orchestrator.run(DRAIN, runbook=book, sets={"work": "perishable"}, out=tmp_path / "run")
    always = orchestrator.run(DRAIN, runbook="none", out=tmp_path / "always").score["loop_broken"]
    assert abs(_clock_s(run.score["loop_broken"]) - _clock_s(always)) <= 60, (run.score["loop_broken"], always)
    works = analyse(run).works["jobs"]
    assert works[0] == (0, "perishable") and works[1][1] == "durable" and 600 <= works[1][0] <= 603, works
    ratio, _ = amplification(run.metrics, "jobs", works, 60, 1.5)
    fault_end = 5 * 60 + 600
    assert ratio.iloc[fault_end + 90:fault_end + 280].between(0.95, 1.1).all()


def test_work_made_durable_mid_run_counts_its_late_minutes_and_its_backlog(tmp_path):
    """Clients asking 1,000 requests/s made durable at 00:05 with a dispatch rate of 800/s (an
    outsider's runbook): their backlog grows by 200/s, over 60 s of arrivals from about 00:10.
    Those minutes count late, as for work durable from the start, and the population may be
    named in scoring.backlog (before, it was refused there and its late minutes were none,
    so this runbook scored best in a comparison)."""
    from helpers import play

    world = {"name": "made-durable", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "20m"},
             "services": [{"name": "api", "capacity": 1_000_000}],
             "populations": [{"name": "clients", "clients": 100, "rate": 10.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "5s"}, "retry": {"max_attempts": 3}}],
             "mitigations": [{"name": "make_durable", "description": "keep every request until done", "deploy": False,
                              "effects": [{"target": "clients", "op": "set_work",
                                           "args": {"work": "durable", "max_rate": 800}}]}],
             "scoring": {"impact": {"clients": 1}, "backlog": {"populations": ["clients"], "threshold": 60, "hold": "1m"}}}
    r = play(tmp_path, world, [{"when": {"at": "00:05"}, "do": "make_durable"}])
    impact = r.score["impact"]
    assert 9.0 <= impact["late_minutes"]["clients"] <= 10.5, impact
    assert impact["weighted_total"] == pytest.approx(impact["late_minutes"]["clients"] + impact["error_minutes"]["clients"],
                                                     abs=0.01)
    assert not r.score["backlog_drained"]["reached"] and r.score["backlog_peak"]["clients"] > 150_000
    # the printed summary says which figures are weighted (an outsider read per-population minutes as the weighted sum)
    said = f"clients +{impact['error_minutes']['clients']:.1f} error-minutes, {impact['late_minutes']['clients']:.1f} late, weight 1$"
    assert re.search(said, summary_table(r), re.M), summary_table(r)


@pytest.mark.parametrize("by", ["trigger", "action"])
def test_demand_that_falls_to_nothing_has_recovered_and_traffic_an_action_holds_back_has_not(tmp_path, by):
    """The service refuses everything 00:05-00:10; at 00:11 the clients' rate goes to 0. Set
    by a trigger (the demand fell, which costs no impact), nothing is wanted any more: the
    clients count as recovered from 00:10 or so. Set by an action (paused), what it holds
    back is wanted and gets nothing through: not recovered (an outsider's world read
    'not reached' for the first, though impact counted nothing)."""
    from helpers import play

    stop = {"target": "clients", "op": "scale_rate", "args": {"factor": 0.0}}
    world = {"name": "gone", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "25m"},
             "services": [{"name": "api", "capacity": 1_000_000}],
             "populations": [{"name": "clients", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "5s"}, "retry": {"max_attempts": 1}}],
             "triggers": [{"name": "refuse", "at": "00:05", "effects": [
                 {"target": "api", "op": "fault", "args": {"share": 1.0, "kind": "error", "duration": "5m"}}]}],
             "mitigations": [{"name": "pause", "description": "stop the clients", "deploy": False, "effects": [stop]}],
             "scoring": {"impact": {"clients": 1}, "recovered": {"populations": ["clients"], "hold": "5m"}}}
    rules = []
    if by == "trigger":
        world["triggers"].append({"name": "customers-leave", "at": "00:11", "effects": [stop]})
    else:
        rules = [{"when": {"at": "00:11"}, "do": "pause"}]
    r = play(tmp_path, world, rules)
    recovered = r.score["recovered"]["clients"]
    if by == "trigger":
        assert recovered["reached"] and "00:10" <= recovered["clock"] < "00:12", recovered
    else:
        assert not recovered["reached"] and recovered["impaired"], recovered
        assert r.score["impact"]["error_minutes"]["clients"] > 10  # the paused minutes count failed


def test_pausing_for_good_leaves_the_loop_suspended_in_the_score_the_report_and_the_scoreboard(runbook_file, tmp_path):
    """#42: with the site off nothing retries, so a loop read only from its measures looks
    broken; it is suspended to the end, and every reader says so."""
    from orchestrator.live.session import team_row
    from reports.rundir import outcome

    run = orchestrator.run(RELAPSE, runbook=runbook_file("forever", [PAUSE]), seed=1, out=tmp_path / "forever")
    score = run.score
    assert not score["loop_broken"]["reached"] and not score["demand_restored"]["reached"]
    [span] = score["loop_suspended"]
    assert "00:12" <= span["from"]["clock"] < "00:15" and not span["to"]["reached"]
    assert outcome(score) == "suspended"
    assert "it was suspended from 00:1" in analyse(run).verdict
    assert team_row("forever", score, True)["loop"] == f"suspended {span['from']['clock']}"


def test_a_service_answering_what_it_is_asked_is_recovered_idle_or_not_but_not_while_it_could_not_answer(tmp_path):
    """#42: a healthy database a warm cache left idle read as a relapse of its recovery. Idle
    and ready is recovered; idle and failed by a fault (its readiness 0) is not."""
    from helpers import play

    world = {"name": "idle", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "25m"},
             "services": [{"name": "db", "capacity": 1000}],
             "populations": [{"name": "app", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "db",
                              "request": {"timeout": "2s"}, "retry": {"max_attempts": 2}}],
             "triggers": [{"name": "fault", "at": "00:02", "effects": [
                              {"target": "db", "op": "fault", "args": {"share": 1.0, "kind": "error", "duration": 600}}]},
                          {"name": "quiet", "at": "00:04", "effects": [  # (its callers stop asking: demand falls)
                              {"target": "app", "op": "scale_rate", "args": {"factor": 0}}]}],
             "scoring": {"recovered": {"services": ["db"], "hold": "2m"}}}
    r = play(tmp_path, world)
    db = r.score["recovered"]["db"]
    assert r.metrics["db.offered"].iloc[300:].sum() == 0  # idle from 00:04 on
    assert db["reached"] and not db["relapses"] and "00:12" <= db["clock"] < "00:13"  # once the fault lifted


def test_a_loop_that_broke_and_re_formed_with_nobody_acting_is_stuck_not_relapsed(relapsed):
    """#42: under a slow ramp of traffic, runbook none's loop dipped into its bounds long
    enough to count as broken, then formed for good, and the run read 'relapsed' (a fix that
    did not hold) where nothing was fixed. Relapsed needs an action before the relapse."""
    from reports.rundir import outcome

    score = relapsed.score
    assert outcome(score) == "relapsed"  # the paced release broke it, letting the rest go at once re-formed it
    nobody = {k: v for k, v in score.items() if k not in ("first_action_effective", "loop_suspended")}
    assert nobody["loop_broken"]["relapsed"] and outcome(nobody) == "stuck"


def test_the_report_shows_when_the_demand_was_back_beside_par(paced):
    from reports.analysis import analyse

    row = next(r for r in analyse(paced).measures if r["measure"] == "demand restored")
    assert row["yours"] == paced.score["demand_restored"]["clock"]
