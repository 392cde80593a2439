"""After-action reports: their figures are the run's own, computed again here from the
run directory; findings come from the data."""
import itertools
import json
import re

import pytest
import yaml

from helpers import check_score_record, chromium
from reports.analysis import IMPAIRED_ERROR_RATIO, analyse
from reports.build import write_report
from reports.charts import LABEL_GAP, action_labels


def test_the_report_figures_are_those_of_the_score_and_the_metrics(historical):
    r = historical
    a = analyse(r)
    score = json.loads((r.dir / "score.json").read_text())
    m, dt = r.metrics, r.meta["tick_s"]
    impact = {row["population"]: row for row in a.impact}
    for pop, minutes in score["impact"]["error_minutes"].items():
        assert impact[pop]["failed_request_minutes"] == pytest.approx(minutes, abs=1e-3)
        minute = m.index.to_series().reset_index(drop=True) // round(60 / dt)  # minutes from the start
        per = m[[f"{pop}.errors", f"{pop}.ok"]].reset_index(drop=True).groupby(minute).sum()
        share = per[f"{pop}.errors"] / (per[f"{pop}.errors"] + per[f"{pop}.ok"]).where(lambda f: f > 0)
        in_minute = minute.value_counts().sort_index()
        assert impact[pop]["impaired_minutes"] == pytest.approx(in_minute[share > IMPAIRED_ERROR_RATIO].sum() * dt / 60)
        errors = m[f"{pop}.errors"].rolling(60).sum()
        worst = (errors / (errors + m[f"{pop}.ok"].rolling(60).sum())).max()
        assert impact[pop]["worst_error_ratio"] == pytest.approx(worst)
    assert a.weighted_impact == pytest.approx(score["impact"]["weighted_total"], abs=0.01)
    assert a.backlog[0]["peak"] == score["backlog_peak"]["event-delivery"]
    assert a.backlog[0]["drained"] == score["backlog_drained"]["clock"]
    shown = {row["measure"]: row for row in a.measures}
    assert shown["loop broken"]["yours"] == score["loop_broken"]["clock"]
    assert shown["devices healthy"]["yours"] == score["devices_healthy"]["clock"]
    assert shown["first customer update"]["yours"] == score["first_customer_update"]["clock"]
    assert shown["dns-lookups recovered"]["yours"] == score["recovered"]["dns-lookups"]["clock"]
    # every action the operators asked for is on the timeline, with when it took effect
    actions = r.events[r.events["event"] == "action_effective"]
    took = [row for row in a.timeline if row["what"].startswith("took effect: ")]
    assert [(t["clock"], t["what"][13:]) for t in took] == list(zip(actions["clock"], actions["action"]))
    assert not a.partial and ("ahead of" in a.verdict or "behind" in a.verdict)
    check_score_record(score)  # the 2021 world's score has devices_healthy and recoveries too


def test_an_alarm_that_flaps_is_one_timeline_line_with_its_count(historical):
    """The flagship's debrief once read as a wall: one alarm firing and clearing every ten
    minutes for hours, two rows a time. An alarm raised FLAPPING times or more is one row
    (how often, from when to when); one raised fewer times keeps a row per change."""
    from reports.analysis import FLAPPING

    a = analyse(historical)
    ev = historical.events
    raised = ev[ev["event"] == "alarm_raised"].groupby("alarm")["tick"].count().to_dict()
    flapping = {alarm: n for alarm, n in raised.items() if n >= FLAPPING}
    assert flapping, raised  # (the flagship has one: the test has substance)
    for alarm, n in raised.items():
        rows = [row for row in a.timeline if row["what"] in (f"alarm: {alarm}", f"alarm cleared: {alarm}",
                                                             f"alarm flapping: {alarm}")]
        if alarm in flapping:
            assert [row["what"] for row in rows] == [f"alarm flapping: {alarm}"], rows
            first = ev[(ev["event"] == "alarm_raised") & (ev["alarm"] == alarm)]["tick"]
            assert f"fired {n} times from {rows[0]['clock']} to " in rows[0]["detail"]
            assert rows[0]["tick"] == first.iloc[0]
        else:
            assert sum(row["what"] == f"alarm: {alarm}" for row in rows) == n


def test_par_written_without_quotes_is_read_as_the_clock_time_it_says(historical, tmp_path):
    """YAML 1.1 reads an unquoted 07:30 as 450 (sexagesimal minutes); the playbook accepts it,
    and so must the report (it once read 450 as seconds: par at 00:07:30)."""
    import shutil

    from reports.rundir import load_run

    copy = tmp_path / "run"
    shutil.copytree(historical.dir, copy, ignore=shutil.ignore_patterns("report"))
    text = (copy / "playbook.yaml").read_text()
    unquoted = text.replace('trigger: "07:30"', "trigger: 07:30").replace('first_customer_update: "08:22"',
                                                                          "first_customer_update: 08:22")
    assert unquoted != text
    (copy / "playbook.yaml").write_text(unquoted)
    par = {row["measure"]: row["par"] for row in analyse(load_run(copy)).measures}
    assert par == {row["measure"]: row["par"] for row in analyse(historical).measures}
    assert par["first customer update"] == "08:22:00"


def test_the_report_is_written_as_markdown_with_charts_and_as_one_html_file(historical, tmp_path):
    written = write_report(historical.dir, "both", tmp_path / "report")
    names = {p.name for p in written}
    assert {"report.md", "report.html", "loop.png", "amplification.png", "errors.png", "backlog.png",
            "visibility.png"} <= names
    md = (tmp_path / "report" / "report.md").read_text()
    for heading in ("## Summary", "## Impact", "## Timeline", "## Charts", "## Findings", "## Action items", "## Appendix"):
        assert heading in md
    assert "13:34" in md  # the historical loop-broken time, beside ours
    dns = next(line for line in md.splitlines() if "took effect: move_dns_off_bridge" in line)
    assert "09:28:00 (T+1h58m, the real team's" in dns  # AWS's DNS move, beside ours
    html = (tmp_path / "report" / "report.html").read_text()
    # self-contained: its five charts inline, nothing fetched
    assert html.count('<figure class="chart"') == 5 == html.count("<svg ") and "charts/" not in html
    assert not re.search(r'(src|href)="(?!#)', html)
    for png in (tmp_path / "report" / "charts").iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_findings_a_blind_monitoring_and_a_rule_that_never_fired(run_2021):
    r = run_2021("blind")
    findings = {f.kind: f for f in analyse(r).findings}
    blind = (r.metrics["monitoring.visibility"] < 0.5).sum() / 60
    assert findings["monitoring_blind"].title == f"Monitoring was blind for {blind:.0f} min"
    never = [f for f in analyse(r).findings if f.kind == "rule_never_fired"]
    assert [f.title for f in never] == ['Runbook rule "utilisation alarm" never fired']
    assert "bridge-hot never fired" in never[0].evidence and "data missing" in never[0].evidence


def test_a_rule_that_never_fired_is_explained_by_every_condition_it_has_however_nested():
    """A rule waiting for an action nobody asked, inside all: [...] with a metric that held
    and was seen: the action is the reason, and monitoring is not blamed."""
    import pandas as pd
    from reports.analysis import _rules_never_fired

    m = pd.DataFrame({"orders.queue_wait_s": [0.5] * 10, "monitoring.visibility": [1.0] * 10})
    rule = {"name": "restore", "do": "restore_load",
            "when": {"all": [{"done": "shed_load", "after": "10m"}, {"metric": "orders.queue_wait_s", "below": 1}]}}
    (never,) = _rules_never_fired({"rules": [rule]}, [], {}, m, 1.0, str)
    assert never.evidence.startswith("It waits for shed_load, which nobody asked for")
    assert "monitoring saw it (100% of its metrics fresh)" in never.evidence and "data missing" not in never.evidence


def test_findings_an_action_whose_collateral_damage_outweighed_its_benefit(run_2021):
    r = run_2021("restart")
    found = [f for f in analyse(r).findings if f.kind == "collateral"]
    assert len(found) == 1 and found[0].title.startswith("restart_devices broke")
    assert "made things worse" in found[0].title


def test_the_action_that_broke_the_loop_is_named(run_2021):
    r = run_2021("protect-early")
    breaker = [f for f in analyse(r).findings if f.kind == "loop_breaker"]
    assert [f.title for f in breaker] == ["enable_protection broke the loop"]


@pytest.mark.browser
def test_the_html_report_renders_in_headless_chromium_with_its_charts(run_2021, tmp_path):
    """A real browser: Debian's chromium (.ci/run installs it). The page loads without a
    console message, and the screenshot has the charts' lines in it."""
    import subprocess

    import matplotlib.pyplot as plt
    import numpy as np

    browser = chromium()
    r = run_2021("protect-early")
    write_report(r.dir, "html", tmp_path / "report")
    shot = tmp_path / "shot.png"
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
                          "--window-size=1100,5000", f"--screenshot={shot}",
                          (tmp_path / "report" / "report.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "CONSOLE" not in out.stderr, [line for line in out.stderr.splitlines() if "CONSOLE" in line]
    pixels = (plt.imread(shot)[:, :, :3] * 255).round().astype(int)

    def count(rgb):
        return int((np.abs(pixels - np.array(rgb)).sum(axis=2) < 30).sum())

    blue, orange, purple = count((31, 119, 180)), count((255, 127, 14)), count((148, 103, 189))
    print(f"\nchart pixels in the screenshot: blue {blue}, orange {orange}, purple {purple}")
    assert blue > 1000 and orange > 500 and purple > 500  # line colours of the charts: drawn, not blank


@pytest.mark.browser
def test_the_flagships_html_report_opens_with_the_loops_picture_above_its_tables_and_no_labels_overprint(historical,
                                                                                                     tmp_path):
    """The debrief opens with the loop's chart, not a wall of tables: at 1,400 px the loop's
    chart stands below the summary and above the measures, the impact and the timeline (a
    browser reading positions, not pixels), and the other charts keep their section. On
    every chart, no two labels of actions overlap (their boxes as drawn), and each says on
    hover the actions it stands for, at the clock."""
    from helpers import webdriver

    write_report(historical.dir, "html", tmp_path / "report")
    with webdriver(tmp_path) as d:
        d.set_window_size(1400, 900)
        d.get((tmp_path / "report" / "report.html").as_uri())
        top = d.execute_script("""
            const at = (el) => el.getBoundingClientRect().top + window.scrollY;
            const heading = (text) => [...document.querySelectorAll('h2')].find((h) => h.textContent === text);
            const charts = [...document.querySelectorAll('figure.chart')];
            return {loop: at(document.querySelector('figure[data-chart="loop"] svg')), summary: at(heading('Summary')),
                    impact: at(heading('Impact')), timeline: at(heading('Timeline')), charts: at(heading('Charts')),
                    measures: at(document.querySelector('h2 ~ table')),
                    loops: document.querySelectorAll('figure[data-chart="loop"]').length,
                    others: charts.filter((c) => c.dataset.chart !== 'loop').map((c) => at(c)),
                    labels: charts.map((c) => [...c.querySelectorAll('g.mark-label')].map((g) => {
                        const r = g.getBoundingClientRect();
                        return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,
                                title: g.querySelector('title').textContent};
                    }))}""")
    assert top["loops"] == 1 and top["summary"] < top["loop"] < min(top["measures"], top["impact"], top["timeline"]), top
    assert top["others"] and all(y > top["charts"] for y in top["others"]), top
    assert top["loop"] < 900  # (in view as the report opens)
    actions = [a["action"] for a in analyse(historical).actions]
    assert len(actions) >= 8 and len(top["labels"]) == 5
    for labels in top["labels"]:
        # every action is on the chart's labels' hover texts, once; three close to 14:00 are among them
        assert sorted(line.split()[1] for lab in labels for line in lab["title"].split("\n")) == sorted(actions)
        for a, b in itertools.combinations(labels, 2):
            assert a["right"] <= b["left"] or b["right"] <= a["left"] or a["bottom"] <= b["top"] or \
                b["bottom"] <= a["top"], (a, b)
        assert all(lab["right"] - lab["left"] > 3 and lab["bottom"] - lab["top"] > 20 for lab in labels), labels


def test_on_the_historical_run_the_counterfactual_names_the_capacity_addition(historical):
    """AWS's summary: congestion improved once capacity was added and the top talkers were
    isolated, while moving DNS fixed DNS but not the loop (DESIGN.md 2.1, mechanisms d and
    e). Without add_capacity (in effect minutes before the loop broke) the loop was still
    unbroken an hour later; without isolate_top_talker too; without disabling EventBridge
    delivery it broke within the hold period of the same time."""
    att = historical.attribution
    played = {c["action"]: c for c in att["counterfactuals"]}
    assert list(played) == ["add_capacity", "disable_event_delivery", "isolate_top_talker"]
    assert att["breaker"] == "add_capacity" and played["add_capacity"]["loop_broken_without"] is None
    assert "isolate_top_talker" in att["needed"] and not played["disable_event_delivery"]["mattered"]
    found = [f for f in analyse(historical).findings if f.kind == "loop_breaker"]
    assert [f.title for f in found] == ["add_capacity broke the loop (isolate_top_talker was needed too)"]


def test_an_outage_whose_results_come_in_bursts_is_counted_whole(tmp_path):
    """Two clients, every request failing, 0.25 s ticks: three ticks in four bring no
    result. The impact is the share of each minute's finished requests that failed (all
    of them, every minute a request finished in), not a mean over ticks that counts a
    tick without results as nothing failed; the report counts the same."""
    import yaml

    import orchestrator
    from orchestrator.playbook.loader import load_playbook
    from helpers import playbook_path

    doc = yaml.safe_load(load_playbook(playbook_path("fault_lab"), {
        "clients": 2, "share": 1.0, "max_attempts": 1, "tick": "0.25s", "mode": "per_request", "duration": "6m"}).text)
    doc["scoring"] = {"impact": {"clients": 1}}
    (tmp_path / "bursts.yaml.j2").write_text(yaml.safe_dump(doc))
    r = orchestrator.run(str(tmp_path / "bursts.yaml.j2"), runbook="none", seed=1)
    m = r.metrics
    finished = m["clients.errors"] + m["clients.ok"]
    assert m["clients.ok"].sum() == 0 and (finished > 0).mean() < 0.4  # all fail; most ticks bring nothing
    minutes_with_results = finished.groupby(m.index // 240).sum().gt(0).sum()
    assert r.score["impact"]["error_minutes"] == {"clients": pytest.approx(minutes_with_results, abs=1e-3)}
    assert m["clients.error_ratio"].sum() * 0.25 / 60 < 0.5 * minutes_with_results  # what a mean over ticks said
    assert analyse(r).impact[0]["failed_request_minutes"] == pytest.approx(minutes_with_results, abs=1e-3)


@pytest.mark.slow
def test_asking_for_the_score_during_a_run_changes_nothing():
    """A live scoreboard asks for the score every tick; the score at the end is the same
    as a run's that nobody asked (the minute under way is counted, never closed early)."""
    from orchestrator.engine.scoring import Scorer
    from orchestrator.hosting.inprocess import InProcessHost
    from orchestrator.runs.runner import RunSpec, prepare

    pb, _, _, plan = prepare(RunSpec(playbook="us-east-1-2021", runbook="historical", seed=1, duration=2400))
    scores = []
    for ask_every in (0, 7):
        host, scorer = InProcessHost(plan), Scorer(pb.data, plan.info.dt, plan.info.start_s)
        for _ in range(plan.ticks):
            res = host.step()
            scorer.update(res.tick, plan.merge_shards(res.metrics)[0], res.events)
            if ask_every and res.tick % ask_every == 0:
                scorer.score()
        scores.append(scorer.score())
    assert scores[0] == scores[1] and scores[0]["impact"]["weighted_total"] > 0


def test_the_reports_useful_work_counts_an_idle_service_as_the_score_does():
    """Traffic cut (nothing reached it): useful, 1; work waiting that it did not do: 0
    (the chart used to draw a paused service's useful work at 0 while the score said the
    loop was broken)."""
    import pandas as pd
    from reports.analysis import useful_share

    m = pd.DataFrame({"svc.work_done": [10.0] * 3 + [0.0] * 70 + [0.0] * 70,
                      "svc.work_useful": [5.0] * 3 + [0.0] * 140,
                      "svc.work_admitted": [10.0] * 3 + [0.0] * 70 + [5.0] * 70,
                      "svc.queue_backlog": [0.0] * 143})
    share = useful_share(m, "svc", 1.0)
    assert share.iloc[2] == 0.5 and share.iloc[72] == 1.0 and share.iloc[142] == 0.0


def test_a_report_tells_a_shared_backlog_milestone_from_a_population_and_reads_rules_from_the_trigger_on(tmp_path):
    """Durable jobs that drain while a second service's queue stays full: the backlog
    milestone fails on that queue, which the report says, rather than that the jobs' backlog
    was not drained. A rule that never fired is explained by its condition from the trigger
    on, not by the calm before it."""
    from helpers import play

    world = {"name": "shared", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "12m"},
             "services": [{"name": "svc", "capacity": 1000},
                          {"name": "slow", "capacity": 100, "queue": {"limit": "60s"}}],
             "populations": [{"name": "jobs", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "svc",
                              "work": "durable", "max_rate": 300, "request": {"timeout": "5s"}},
                             {"name": "flood", "clients": 200, "rate": 1.0, "mode": "per_request", "target": "slow",
                              "request": {"timeout": "5s"}}],
             "monitoring": {"observe": ["jobs.success_ratio"]},
             "triggers": [{"name": "trigger", "at": "00:02", "effects": [
                 {"target": "svc", "op": "fault", "args": {"share": 1.0, "kind": "error", "duration": 60}}]}],
             "mitigations": [{"name": "noop", "effects": [{"target": "jobs", "op": "scale_rate", "args": {"factor": 1}}]}],
             "scoring": {"backlog": {"populations": ["jobs"], "services": ["slow"]}}}
    rule = {"name": "never", "when": {"all": [{"metric": "jobs.success_ratio", "above": 0.99}, {"at": "23:00"}]},
            "do": "noop"}
    r = play(tmp_path, world, [rule])
    a = analyse(r)
    jobs, slow = a.backlog
    assert jobs["shared"] and "which also needs the queue of slow, was not reached" in jobs["text"]
    assert slow["what"] == "The queue of slow" and "which also needs the backlog of jobs, was not reached" in slow["text"]
    assert r.metrics["jobs.backlog"].iloc[-1] < 300  # the jobs did drain
    (never,) = [f for f in a.findings if f.kind == "rule_never_fired"]
    assert "from 00:02" in never.evidence or "from 00:03" in never.evidence, never.evidence  # not 00:00:00


def test_a_short_gap_to_par_is_said_in_seconds_and_only_the_first_trigger_is_set_against_par(historical, tmp_path):
    """An outsider trial read "loop broken 0h00m behind" for 43 s, and a second trigger (a
    fault lifting) set against par's trigger time as "+0h10m vs par"."""
    import shutil

    from reports.rundir import load_run

    copy = tmp_path / "run"
    shutil.copytree(historical.dir, copy, ignore=shutil.ignore_patterns("report"))
    score = json.loads((copy / "score.json").read_text())
    score["loop_broken"]["vs_par_s"] = 43.0
    (copy / "score.json").write_text(json.dumps(score))
    lines = (copy / "events.jsonl").read_text().splitlines()
    first = next(json.loads(x) for x in lines if json.loads(x)["event"] == "trigger")
    later = dict(first, tick=first["tick"] + 600, clock="later", trigger="lifted", description="a second trigger")
    (copy / "events.jsonl").write_text("\n".join(lines + [json.dumps(later)]) + "\n")
    a = analyse(load_run(copy))
    assert a.verdict == "Loop broken 43 s behind the historical response."
    triggers = [row for row in a.timeline if row["what"] == "trigger"]
    assert [bool(row["par"]) for row in triggers] == [True, False]


def test_a_backlog_never_over_its_threshold_is_not_said_to_be_undrained(tmp_path):
    """An outsider trial's summary said a backlog that peaked far under the milestone's
    threshold 'was not drained by 09:00:00' (the score said 'never impaired')."""
    from pathlib import Path

    import orchestrator

    text = (Path(__file__).parent / "playbooks" / "relapse.yaml.j2").read_text()
    assert "    threshold: 60\n" in text
    (tmp_path / "high.yaml.j2").write_text(text.replace("    threshold: 60\n", "    threshold: 100000\n"))
    run = orchestrator.run(str(tmp_path / "high.yaml.j2"), runbook="none", duration="20m", out=tmp_path / "run")
    assert run.score["backlog_drained"]["impaired"] is False and run.metrics["jobs.backlog"].max() > 0
    a = analyse(run)
    line = next(x for x in a.summary if "backlog peaked" in x)
    assert "never over the backlog milestone's threshold (100000 s of arrivals)" in line and "not drained" not in line


def test_a_never_fired_rules_for_is_explained_by_its_longest_unbroken_stretch():
    """An outsider trial read 'was < 1 for 1 min from 07:15:00' of a wait under 1 for 76 s in
    scattered pieces, the longest 15 s, where the rule needed 5 minutes without a break."""
    import pandas as pd

    from reports.analysis import _why_metric

    m = pd.DataFrame({"db.wait": [2, 0.5, 0.5, 2, 2, 0.1, 0.2, 0.3, 2, 0.4]}, index=range(10, 20))
    text = _why_metric("db.wait", {"metric": "db.wait", "below": 1, "for": "5m"}, m, 1.0, lambda t: f"tick {t}")
    assert text == ("in ground truth db.wait was < 1 for 6 s in all from tick 11, at most 3 s without a break "
                    "(from tick 15) where it needed 5 min")
    assert "without a break" not in _why_metric("db.wait", {"metric": "db.wait", "below": 1}, m, 1.0, str)


def test_action_labels_on_a_chart_never_overlap_and_name_or_count_every_action():
    span = 12.0  # hours on the x axis
    marks = [(1.0, "a"), (1.0, "b"), (1.1, "c"), (1.15, "d"), (1.2, "e"), (3.0, "f"), (3.2, "g"), (9.0, "h")]
    labels = action_labels(marks, span)
    assert labels[0] == (1.0, "a\nb\nc +2 more") and labels[-1] == (9.0, "h")
    for (x, text), (x_next, _) in zip(labels, labels[1:]):  # each label ends before the next begins
        assert x_next - x >= (text.count("\n") + 1) * LABEL_GAP * span
    named = sum(1 for _, t in labels for line in t.split("\n"))
    more = sum(int(line.split("+")[1].split()[0]) for _, t in labels for line in t.split("\n") if " more" in line)
    assert named + more == len(marks)


def _refused_for_ten_minutes(max_attempts: int) -> dict:
    """A world whose service refuses everything 00:05-00:15, its clients retrying up to
    ``max_attempts`` times (0: without limit)."""
    return {"name": "outage", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "20m"},
            "services": [{"name": "api", "capacity": 1_000_000}],
            "populations": [{"name": "clients", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "api",
                             "request": {"timeout": "5s"},
                             "retry": {"max_attempts": max_attempts, "base": "1s", "cap": "5s"}}],
            "triggers": [{"name": "refuse", "at": "00:05", "effects": [
                {"target": "api", "op": "fault", "args": {"share": 1.0, "kind": "error", "duration": "10m"}}]}],
            "scoring": {"impact": {"clients": 1}}}


@pytest.mark.parametrize("max_attempts", [0, 3])
def test_an_outage_costs_its_minutes_whether_requests_are_retried_without_limit_or_given_up(tmp_path, max_attempts):
    """The service refuses everything for 10 minutes. Clients that give up after 3 attempts
    lose nearly every request of those minutes; clients that retry without limit never
    lose one for good, and used to score no impact at all (doing nothing then scored best
    in a comparison). Their attempts are counted instead: both cost about 10 minutes, in
    the score and in the report's impact table alike."""
    from helpers import play

    from reports.analysis import analyse
    from reports.build import environment

    r = play(tmp_path, _refused_for_ten_minutes(max_attempts))
    impact = r.score["impact"]
    assert impact["counted_by_attempts"] == ["clients"] if max_attempts == 0 else "counted_by_attempts" not in impact
    assert 9.5 < impact["weighted_total"] < 11.5, impact  # the 10 minutes, and the retries settling after them
    a = analyse(r)
    row = a.impact[0]
    assert row["by_attempts"] is (max_attempts == 0)
    assert row["failed_request_minutes"] == pytest.approx(impact["error_minutes"]["clients"], abs=0.01)
    assert 9 <= row["impaired_minutes"] <= 12
    for template in ("sections.md.j2", "sections.html.j2"):
        table = str(environment().get_template(template).module.impact_table(a.impact, a.weighted_impact, a.backlog))
        said = "clients retries without limit (retry.max_attempts 0)" in table
        assert said is (max_attempts == 0), table


@pytest.mark.parametrize("before,after", [(3, 0), (0, 3)])
def test_an_outage_costs_its_minutes_when_the_retry_limit_changes_during_it(tmp_path, before, after):
    """As above, with the clients' retry limit changed at 00:07, two minutes into the 10-minute
    outage. Lifting it (3 -> 0) used to stop the outage costing anything from then on (no
    request fails for good any more): a runbook could game its impact so. Both ways the
    outage costs about its 10 minutes, counted by requests while the limit held and by
    attempts while there was none, in the score and the report alike."""
    from helpers import play

    from reports.analysis import analyse
    from reports.build import environment

    world = _refused_for_ten_minutes(before)
    world["triggers"].append({"name": "change-the-limit", "at": "00:07", "effects": [
        {"target": "clients", "op": "set_retry_policy", "args": {"max_attempts": after}}]})
    r = play(tmp_path, world)
    impact = r.score["impact"]
    assert impact["counted_by_attempts"] == ["clients"]
    first, changed = impact["counted_by_attempts_from"]["clients"]
    assert first == {"tick": 0, "clock": "00:00", "by_attempts": before == 0}
    assert changed["by_attempts"] is (after == 0) and 420 <= changed["tick"] <= 421, changed
    assert 9.5 < impact["weighted_total"] < 11.5, impact
    row = analyse(r).impact[0]
    assert row["failed_request_minutes"] == pytest.approx(impact["error_minutes"]["clients"], abs=0.01)
    assert 9 <= row["impaired_minutes"] <= 12
    at = r.metrics["clock"].iloc[changed["tick"]]
    assert row["by_attempts_while"] == (f"from {at}" if after == 0 else f"until {at}")
    for template in ("sections.md.j2", "sections.html.j2"):
        a = analyse(r)
        table = str(environment().get_template(template).module.impact_table(a.impact, a.weighted_impact, a.backlog))
        assert f"clients retried without limit (retry.max_attempts 0) {row['by_attempts_while']} only" in table, table
        assert "clients retries without limit" not in table


def test_a_recovery_that_did_not_hold_is_in_the_score_and_named_by_the_report(tmp_path):
    """The service refuses everything 00:05-00:09 and again 00:12-00:16. The clients'
    recovery holds about 3 minutes in between, over half its 4-minute hold but short of it:
    never confirmed, so no relapse says it, and a team would not know its fix had worked
    for a while. The score keeps the stretch (held_briefly), and a finding names it."""
    from helpers import play

    from reports.analysis import analyse

    def refuse(at, name):
        return {"name": name, "at": at, "effects": [
            {"target": "api", "op": "fault", "args": {"share": 1.0, "kind": "error", "duration": "4m"}}]}

    world = {"name": "flap", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "30m"},
             "services": [{"name": "api", "capacity": 1_000_000}],
             "populations": [{"name": "clients", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "5s"}, "retry": {"max_attempts": 1}}],
             "triggers": [refuse("00:05", "first"), refuse("00:12", "again")],
             "scoring": {"impact": {"clients": 1}, "recovered": {"populations": ["clients"], "hold": "4m"}}}
    r = play(tmp_path, world)
    rec = r.score["recovered"]["clients"]
    assert rec["reached"] and not rec["relapses"]
    (held,) = rec["held_briefly"]
    assert held["hold_s"] == 240 and 120 <= held["for_s"] < 240, held
    assert "00:09" <= held["clock"] < "00:11" and held["clock"] < rec["clock"]
    (finding,) = [f for f in analyse(r).findings if f.kind == "held_briefly"]
    assert finding.title.startswith("clients recovered held for ") and "short of its 4 min hold" in finding.title
    assert "(after the trigger again fired at 00:12:00)" in finding.evidence and f"it was reached at {rec['clock']}" in finding.evidence, finding


def test_a_scored_service_queue_has_its_peak_in_the_report(tmp_path):
    """scoring.backlog.services names a queue: the report gives its peak and whether it
    drained, as for a durable population's backlog (an outsider's queue that peaked at
    22,000 units had no line)."""
    from helpers import play

    from reports.analysis import analyse
    from reports.build import environment

    world = {"name": "queue", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "15m"},
             "services": [{"name": "db", "capacity": 100, "queue": {"limit": "20s"}}],
             "populations": [{"name": "clients", "clients": 100, "rate": 0.5, "mode": "per_request", "target": "db",
                              "request": {"timeout": "30s"}, "retry": {"max_attempts": 1}}],
             "triggers": [{"name": "surge", "at": "00:05", "effects": [
                 {"target": "clients", "op": "scale_rate", "args": {"factor": 4.0}}]}],
             "scoring": {"impact": {"clients": 1}, "backlog": {"services": ["db"], "threshold": 5}}}
    r = play(tmp_path, world)
    a = analyse(r)
    (row,) = a.backlog
    assert row["what"] == "The queue of db" and row["peak"] == int(r.metrics["db.queue_backlog"].max()) > 1000, row
    assert row["text"] == "not drained by 00:15:00" and not r.score["backlog_drained"]["reached"]
    table = str(environment().get_template("sections.md.j2").module.impact_table(a.impact, a.weighted_impact, a.backlog))
    assert f"The queue of db: peak **{row['peak']:,}** units of work at {row['peak_at']}; not drained by 00:15:00." in table


def test_a_world_failing_before_its_trigger_is_said_to_be_so_not_blamed_on_the_trigger():
    """mini_loop with a bridge too small for its steady demand fails from the start: the
    report's summary says so first (an outsider's world, broken by a capacity typo, was
    reported as set off by its trigger). With its own capacity it says nothing of the kind."""
    import orchestrator
    from helpers import playbook_path

    from reports.analysis import analyse

    summaries = {cpu: analyse(orchestrator.run(playbook_path("mini_loop"), runbook="none", seed=1,
                                               sets={"device_cpu": cpu}, duration="5m")).summary
                 for cpu in (4000, 1500)}
    assert summaries[1500][0].startswith("Before the trigger at 00:03:00, bridge setup success was already out of "
                                         "bounds (")
    assert "against 95%): this world was failing before its incident began" in summaries[1500][0]
    assert summaries[4000][0].startswith("The trigger at 00:03:00 set off the loop")
    assert not any("already out of bounds" in line for line in summaries[4000])


@pytest.mark.slow
def test_a_world_without_a_loop_or_a_status_page_is_not_said_to_miss_them(tmp_path):
    """A healthy world (at_rest: no loop forms, nothing can post a customer update): the
    printed table has no 'first customer update: not reached' row and the report's summary
    says no loop formed, not that it 'was not broken' (an outsider read both)."""
    import orchestrator
    from reports.summary import summary_table

    run = orchestrator.run(str(__import__("pathlib").Path(__file__).parent / "playbooks" / "at_rest.yaml.j2"),
                           runbook="none", out=tmp_path / "run")
    assert run.score["loop_formed"] is False and not run.score["first_customer_update"]["reached"]
    table = summary_table(run)
    assert "first customer update" not in table and "loop never formed" in table, table
    summary = " ".join(analyse(run).summary)
    assert "no feedback loop formed" in summary and "not broken" not in summary, summary
    historical = orchestrator.run("us-east-1-2021", runbook="none", duration="40m", out=tmp_path / "2021")
    assert re.search(r"first customer update +not reached", summary_table(historical))  # (it can post one; none did)


@pytest.mark.slow
def test_a_run_directory_written_before_it_kept_its_validated_playbook_reads_as_it_did(tmp_path):
    """The run directory keeps the playbook as validated (playbook.json: every default filled
    in by the format), and the reports read it, so they restate no default; a run directory
    from before has its rendered playbook and the defaults of then, and reads the same."""
    import orchestrator
    from reports.rundir import load_run

    out = tmp_path / "run"
    orchestrator.run("us-east-1-2021", runbook="historical", seed=1, duration="2h", out=out)
    now = analyse(load_run(out))
    validated = json.loads((out / "playbook.json").read_text())
    assert validated["scoring"]["loop"]["useful_work_min"] == 0.9  # (a default: the rendered playbook omits it)
    assert "useful_work_min" not in yaml.safe_load((out / "playbook.yaml").read_text())["scoring"]["loop"]
    assert {p["name"]: p["work"] for p in validated["populations"]}["event-delivery"] == "durable"
    (out / "playbook.json").unlink()
    before = analyse(load_run(out))
    assert before.summary == now.summary and before.verdict == now.verdict and before.works == now.works
    assert before.timeline == now.timeline and before.findings == now.findings
    for bound in ("setup_success_min", "amplification_max", "useful_work_min"):
        assert before.scoring["loop"][bound] == now.scoring["loop"][bound], bound


def test_a_repeating_trigger_is_one_timeline_row_with_its_count(tmp_path):
    """A trigger that fires every 30 s added a timeline row each time (about 45 rows in an
    outsider's world): it is one row, at its first firing, that says how often it fired."""
    from helpers import play
    from reports.rundir import load_run

    world = {"name": "poked", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "5m"},
             "services": [{"name": "api", "capacity": 5000}],
             "populations": [{"name": "clients", "clients": 1000, "rate": 1.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "2s"}}],
             "triggers": [{"name": "poke", "description": "a poke", "at": "00:01", "repeat_every": "30s",
                           "effects": [{"target": "clients", "op": "scale_rate", "args": {"factor": 1}}]}],
             "mitigations": []}
    run = play(tmp_path, world)
    fired = run.events[run.events["event"] == "trigger"]
    assert len(fired) == 8  # 00:01, 00:01:30, ... 00:04:30
    rows = [row for row in analyse(load_run(run.dir)).timeline if row["what"] == "trigger"]
    assert len(rows) == 1 and rows[0]["clock"] == "00:01:00"
    assert rows[0]["detail"] == "a poke (it fired 8 times, the last at 00:04:30)"


def test_an_action_whose_steps_keep_failing_is_journalled_and_named_as_never_in_effect(tmp_path):
    """An outsider's operator actions stayed 'started' to the end of the run, every deployment
    step failing, with no event and no finding: each failed step is a step_failed event (with
    why), and the report names the action that never took effect and why."""
    from helpers import play
    from reports.rundir import load_run

    world = {"name": "stuck-deploys", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "6m"},
             "services": [{"name": "api", "capacity": 5000}],
             "populations": [{"name": "clients", "clients": 1000, "rate": 1.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "2s"}}],
             "deployment": {"path": [], "step_time": "30s", "retry_delay": "30s"},
             "triggers": [{"name": "tooling-down", "at": "00:01",
                           "effects": [{"target": "deployment", "op": "outage", "args": {"duration": 3600}}]}],
             "mitigations": [{"name": "restart_api", "steps": 2,
                              "effects": [{"target": "clients", "op": "scale_rate", "args": {"factor": 1}}]},
                             {"name": "noop", "deploy": False,
                              "effects": [{"target": "clients", "op": "scale_rate", "args": {"factor": 1}}]}]}
    rules = [{"name": "restart", "when": {"at": "00:02"}, "do": ["restart_api", "noop"]}]
    run = play(tmp_path, world, rules)
    failed = run.events[run.events["event"] == "step_failed"]
    assert len(failed) >= 5 and set(failed["action"]) == {"restart_api"}
    assert set(failed["why"]) == {"the deployment tooling is down"}
    assert run.score["actions_taken"] == 2 and "restart_api" not in set(
        run.events[run.events["event"] == "action_effective"]["action"])
    findings = {f.title: f.evidence for f in analyse(load_run(run.dir)).findings}
    assert "noop never took effect" not in findings  # (it took effect: no deployment)
    said = findings["restart_api never took effect"]
    assert f"its deployment steps failed {len(failed)} times (the deployment tooling is down)" in said
    assert "with 2 of 2 steps still to do" in said and "when the run ended at 00:06:00" in said


def _retry_loop_world(capacity: int, loop: dict) -> dict:
    """Clients retrying against an API that a bad configuration makes fail 80% of its answers
    from 00:03: the loop is visible in the clients' retries (a database beside it stays
    healthy)."""
    return {"name": "retry-loop", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "8m"},
            "services": [{"name": "api", "capacity": capacity}, {"name": "db", "capacity": 1000}],
            "populations": [{"name": "clients", "clients": 1000, "rate": 1.0, "mode": "per_request", "target": "api",
                             "request": {"timeout": "2s"}, "retry": {"max_attempts": 4, "base": "1s"}}],
            "triggers": [{"name": "bad-config", "at": "00:03",
                          "effects": [{"target": "api", "op": "fault", "args": {"share": 0.8}}]}],
            "mitigations": [],
            "scoring": {"loop": {**loop, "amplification_max": 1.5, "hold": "1m"}, "impact": {"clients": 1}}}


@pytest.mark.parametrize("loop", [{"populations": ["clients"]}, {"services": ["db"], "populations": ["clients"]}],
                         ids=["retries only", "retries beside a service in bounds"])
def test_the_summary_follows_the_loop_measure_that_left_its_bounds(tmp_path, loop, monkeypatch):
    """The summary followed one fixed measure (a loop device's setup success, else a loop
    service's useful work): of a world whose retries ran away while its service's useful work
    stayed in bounds, it said the trigger pushed nothing out of bounds. It follows whichever
    of the loop milestone's measures left its bounds, and says a world failing before its
    incident in that measure's words; the loop chart draws that measure with its bound (it
    drew the service's flat useful work, or nothing for a loop of populations only)."""
    from helpers import play
    from reports import charts
    from reports.rundir import load_run

    run = load_run(play(tmp_path / "healthy", _retry_loop_world(5000, loop)).dir)
    a = analyse(run)
    titles, figure = [], charts._figure
    monkeypatch.setattr(charts, "_figure", lambda title, ylabel: (titles.append(title), figure(title, ylabel))[1])
    assert list(charts.run_charts(run, a, only=("loop",))) == ["loop"]
    assert titles[0].startswith("The loop: clients retries, the measure that left its bounds")
    assert a.summary[0].startswith("The trigger at 00:03:00 set off the loop: clients retries rose out of bounds at 00:03:")
    assert [row["what"] for row in a.timeline if row["what"].startswith("ground truth")] == [
        "ground truth: clients retries above 1.50 tries per request"]
    failing = analyse(load_run(play(tmp_path / "failing", _retry_loop_world(400, loop)).dir))
    assert re.match(r"Before the trigger at 00:03:00, clients retries was already out of bounds \([0-9.]+ tries per "
                    r"request over the minute before it, against 1\.50 tries per request\)", failing.summary[0])


def test_a_rule_without_a_name_is_named_as_the_journal_names_it(tmp_path):
    """A rule without a name is "rule N" in the journal and in the report alike (its place in
    the list: one function names it for both, agents.operator.rule_label)."""
    from helpers import play
    from reports.rundir import load_run

    world = {"name": "unnamed", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "3m"},
             "services": [{"name": "api", "capacity": 5000}],
             "populations": [{"name": "clients", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "2s"}}],
             "triggers": [{"name": "t", "at": "00:01", "effects": [{"target": "clients", "op": "scale_rate",
                                                                   "args": {"factor": 1}}]}],
             "mitigations": [{"name": "noop", "deploy": False,
                              "effects": [{"target": "clients", "op": "scale_rate", "args": {"factor": 1}}]}]}
    rules = [{"when": {"at": "00:02"}, "do": "noop"}, {"when": {"at": "09:00"}, "do": "noop"}]
    run = play(tmp_path, world, rules)
    assert list(run.events[run.events["event"] == "rule_fired"]["rule"]) == ["rule 1"]
    never = [f.title for f in analyse(load_run(run.dir)).findings if f.kind == "rule_never_fired"]
    assert never == ['Runbook rule "rule 2" never fired']


def test_a_session_report_gives_the_facilitators_controls_at_the_simulated_clock_and_the_speed_as_it_changed():
    """Not ticks and request ids: each control at its clock time, said as the facilitator's
    page says it; the teams' commands left to their sections; the speed first and as changed."""
    from reports.session import session_controls, speeds
    from reports.timefmt import parse_clock

    journal = [{"tick": 0, "control": "created"}, {"tick": 0, "control": "start", "request": "_facilitator:a1"},
               {"tick": 120, "control": "speed", "speed": 120.0},
               {"tick": 130, "control": "inject", "fault": "second_surge", "params": {"seconds": 60}, "teams": ["red"]},
               {"tick": 131, "control": "act", "team": "red", "action": "x", "params": {}, "by": "ana", "command": "red:1"},
               {"tick": 200, "control": "end", "reason": "ended by the facilitator"}]
    controls = session_controls(journal, parse_clock("07:00"), 0.5)
    assert [(c["clock"], c["control"], c["detail"]) for c in controls] == [
        ("07:00:00", "start", ""), ("07:01:00", "speed", "120x"), ("07:01:05", "inject", "second_surge seconds=60 into red"),
        ("07:01:40", "end", "ended by the facilitator")]
    assert speeds({"speed": 60.0}, controls) == "60x, then 120x from 07:01:00"
    assert speeds({"speed": "max"}, []) == "max"
