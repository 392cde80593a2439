"""Metrics in Prometheus (issue 46, item 2): ``gameday export RUN_DIR --openmetrics FILE``
and the live endpoint of a paced run and of a session (``--metrics-port``).

The exporter's text is read back by an independent parser (prometheus_client's OpenMetrics
parser) and compared, sample by sample, with metrics.csv's text; then a real Prometheus
(Debian's ``prometheus`` and ``promtool``, which .ci/run installs) loads a backfilled run
and scrapes a paced run, and PromQL through its HTTP API answers with the values
metrics.csv holds for those ticks."""
from __future__ import annotations

import contextlib
import csv
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as text_format_families

from orchestrator.cli import main
from reports import openmetrics as om
from helpers import copy_run, stop_gently

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOKS = Path(__file__).parent / "playbooks"
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def csv_rows(run: Path) -> tuple[list[str], dict[int, dict[str, str]]]:
    """metrics.csv as its text: the header, and tick -> column -> the field as written."""
    with open(run / "metrics.csv", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, {int(row[0]): dict(zip(header, row)) for row in reader}


def samples(text: str):
    """(family, sample) of OpenMetrics text, as prometheus_client's own parser reads it."""
    return [(fam, s) for fam in text_string_to_metric_families(text) for s in fam.samples]


# -- the names, the labels, the moment of tick 0 ---------------------------------------------------------
@pytest.mark.parametrize("metric, family", [
    ("utilisation", "gameday_utilisation"), ("queue-delay.ms", "gameday_queue_delay_ms"),
    ("5xx", "gameday_5xx"), ("été", "gameday__t_"), ("requests_total", "gameday_requests_total_value"),
    ("leases_count", "gameday_leases_count_value"), ("run_info", "gameday_run_info_value"), ("a:b", "gameday_a:b"),
    ("tick", "gameday_tick_value"), ("simulated_clock_seconds", "gameday_simulated_clock_seconds_value"),
    ("run", "gameday_run_value")])
def test_a_metric_name_becomes_a_family_name_in_the_prometheus_grammar(metric, family):
    assert om.family_name(metric) == family
    assert NAME.match(family)


def test_label_values_and_help_are_escaped_as_openmetrics_says():
    assert om.escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert om.labels_text({"agent": 'x"y', "run": "r"}) == '{agent="x\\"y",run="r"}'
    assert om.escape_help("one\ntwo \\ \"three\"") == 'one\\ntwo \\\\ \\"three\\"'


def test_a_value_is_the_one_metrics_csv_holds():
    assert om.value(0.1 + 0.2) == float("%.10g" % (0.1 + 0.2)) == 0.3
    assert om.value(2 / 3) == 0.6666666667
    assert om.value(float("nan")) is None and om.value(None) is None and om.value("x") is None
    assert om.value(True) == 1.0 and om.value(7) == 7.0
    assert om.number_text(float("inf")) == "+Inf" and om.number_text(1e-05) == "1e-05"


def test_tick_0_by_default_is_the_last_day_that_had_passed_the_runs_clock_times_when_it_was_played():
    meta = {"start_clock": "07:00", "tick_s": 1.0, "ticks_planned": 12 * 3600, "started_at": "2026-12-06T05:26:19+0000"}
    assert om.iso(om.start_moment(meta)) == "2026-12-05T07:00:00Z"  # (07:00-19:00 of the 6th had not passed)
    assert om.iso(om.start_moment(meta | {"started_at": "2026-12-06T20:00:00+0000"})) == "2026-12-06T07:00:00Z"
    assert om.iso(om.start_moment(meta | {"start_clock": "00:00", "ticks_planned": 300})) == "2026-12-06T00:00:00Z"
    # (a zone in started_at is a moment: 01:00 at -08:00 is 09:00 UTC, when 07:00-19:00 UTC had not passed)
    assert om.iso(om.start_moment(meta | {"started_at": "2026-12-06T01:00:00-0800"})) == "2026-12-05T07:00:00Z"
    assert om.iso(om.start_moment(meta, "2021-12-07T07:00:00-08:00")) == "2021-12-07T15:00:00Z"
    assert om.iso(om.start_moment(meta, "2021-12-07T07:00:00Z")) == "2021-12-07T07:00:00Z"
    assert om.iso(om.start_moment(meta, "2021-12-07")) == "2021-12-07T07:00:00Z"
    for bad, said in (("2021-12-07T07:00:00", "no zone"), ("yesterday", "not a date-time"), ("1969-12-31", "1970")):
        with pytest.raises(om.ExportRefused, match=said):
            om.start_moment(meta, bad)
    with pytest.raises(om.ExportRefused, match="started_at"):
        om.start_moment({k: v for k, v in meta.items() if k != "started_at"})


def test_a_sessions_team_is_labelled_with_the_session_and_the_team():
    meta = {"playbook": "mini-loop", "runbook": "console", "seed": 3, "team": "blue", "session": "runs/session-x"}
    assert om.run_labels(meta, "runs/session-x/teams/blue") == {
        "run": "session-x", "team": "blue", "playbook": "mini-loop", "runbook": "console", "seed": "3"}
    assert om.run_labels({"playbook": "p", "runbook": "r", "seed": 1}, "runs/one") == {
        "run": "one", "playbook": "p", "runbook": "r", "seed": "1"}


# -- the export, read back -----------------------------------------------------------------------------
@pytest.mark.slow
def test_the_export_holds_every_value_of_metrics_csv_at_its_ticks_moment(recorded, tmp_path):
    out = tmp_path / "run.om"
    result = invoke("export", str(recorded), "--openmetrics", str(out), "--start", "2021-12-07T07:00:00Z")
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert text.endswith("\n# EOF\n") and text.count("# EOF") == 1
    header, rows = csv_rows(recorded)
    meta = json.loads((recorded / "meta.json").read_text())
    columns = json.loads((recorded / "columns.json").read_text())
    t0 = dt.datetime(2021, 12, 7, 7, tzinfo=dt.timezone.utc).timestamp()
    seen: dict[tuple[str, int], float] = {}
    for fam, s in samples(text):
        assert NAME.match(s.name), s.name
        tick = round((float(s.timestamp) - t0) / meta["tick_s"])
        assert float(s.timestamp) == t0 + tick * meta["tick_s"]
        assert s.labels["run"] == recorded.name and s.labels["playbook"] == "mini-loop"
        assert s.labels["runbook"] == "fix-early" and s.labels["seed"] == "1" and "team" not in s.labels
        if fam.name == "gameday_run":
            assert fam.type == "info" and s.value == 1 and s.labels["tick_s"] == "1.0"
            continue
        if fam.name in om.CLOCK_HELP:
            column = {om.TICK: "tick", om.CLOCK_S: "time_s", om.TIME_OF_DAY_S: "clock"}[fam.name]
            assert "agent" not in s.labels
        else:
            column = f"{s.labels['agent']}.{fam.name.removeprefix('gameday_')}"
            assert s.labels["kind"] == columns[column]["kind"]
            assert fam.documentation.startswith(columns[column]["meaning"])
        assert (column, tick) not in seen, (column, tick)
        seen[column, tick] = s.value
    for tick, row in rows.items():
        for column in header:
            if column == "clock":
                h, m, *sec = map(int, row[column].split(":"))
                assert seen[column, tick] == h * 3600 + m * 60 + (sec[0] if sec else 0)
            elif row[column] == "":
                assert (column, tick) not in seen
            else:
                assert seen[column, tick] == float(row[column]), (column, tick)  # exactly: the same double
    assert len(seen) == len(rows) * len(header)
    assert f"{len(seen) + len(rows):,} samples" in result.stdout  # (and gameday_run_info at every tick)


def test_empty_fields_are_no_sample_and_a_column_of_text_is_left_out_said(recorded, tmp_path):
    run = copy_run(recorded, tmp_path / "run")
    header, rows = csv_rows(run)
    header = header + ["bridge.colour"]
    for tick, row in rows.items():
        row["bridge.colour"] = "red"
        if tick == 70:
            row["bridge.utilisation"] = ""
    with open(run / "metrics.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows([row[c] for c in header] for row in rows.values())
    meta = json.loads((run / "meta.json").read_text())
    meta["runbook"] = 'fix "early"\\\nnow'  # (a label value with every character OpenMetrics escapes)
    (run / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "run.om"
    result = invoke("export", str(run), "--openmetrics", str(out), "--start", "2021-12-07", "--every", "10")
    assert result.exit_code == 0, result.output
    assert "column 'bridge.colour': not numbers; left out" in result.stderr
    parsed = samples(out.read_text(encoding="utf-8"))
    assert not any(f.name == "gameday_colour" for f, _ in parsed)
    t0 = dt.datetime(2021, 12, 7, 0, tzinfo=dt.timezone.utc).timestamp()  # (mini_loop starts at 00:00)
    util = {round(float(s.timestamp) - t0) for f, s in parsed if f.name == "gameday_utilisation"}
    assert util == {tick for tick in rows if tick % 10 == 0} - {70}
    assert {s.labels["runbook"] for _, s in parsed} == {'fix "early"\\\nnow'}


def test_every_n_ticks(recorded, tmp_path):
    out = tmp_path / "run.om"
    assert invoke("export", str(recorded), "--openmetrics", str(out), "--every", "60").exit_code == 0
    ticks = {s.value for f, s in samples(out.read_text()) if f.name == om.TICK}
    assert ticks == {0.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 420.0, 480.0, 540.0}


def test_the_file_is_replaced_whole(recorded, tmp_path):
    out = tmp_path / "run.om"
    out.write_text("before\n")
    assert invoke("export", str(recorded), "--openmetrics", str(out), "--every", "100").exit_code == 0
    assert out.read_text().startswith("# TYPE ") and [p.name for p in tmp_path.iterdir()] == ["run.om"]


@pytest.mark.slow
def test_an_export_that_meets_a_full_disk_at_any_write_says_so_and_leaves_the_file_as_it_was(recorded, tmp_path):
    from tests.test_rundir_faults import NO_SPACE, DiskFull

    out = tmp_path / "run.om"
    args = ["export", str(recorded), "--openmetrics", str(out), "--every", "100"]
    with DiskFull(10 ** 9).injected() as counting:
        assert invoke(*args).exit_code == 0
    for n in range(1, counting.count + 1):
        out.write_text("before\n")
        with DiskFull(n).injected():
            result = invoke(*args)
        assert result.exit_code == 1 and f"writing {out} failed: {out}: {NO_SPACE}" in result.stderr, (n, result.output)
        assert "Traceback" not in result.output
        assert out.read_text() == "before\n" and [p.name for p in tmp_path.iterdir()] == ["run.om"], n
    assert counting.count >= 5


@pytest.mark.parametrize("case", ["missing run dir", "not a run dir", "file in a missing folder", "bad start",
                                  "start without zone", "every 0", "a folder as the file"])
def test_bad_input_names_the_thing_and_exits_2_without_a_traceback(case, recorded, tmp_path):
    args = {"missing run dir": [str(tmp_path / "nowhere"), "--openmetrics", str(tmp_path / "x.om")],
            "not a run dir": [str(tmp_path), "--openmetrics", str(tmp_path / "x.om")],
            "file in a missing folder": [str(recorded), "--openmetrics", str(tmp_path / "no" / "x.om")],
            "bad start": [str(recorded), "--openmetrics", str(tmp_path / "x.om"), "--start", "tomorrow"],
            "start without zone": [str(recorded), "--openmetrics", str(tmp_path / "x.om"), "--start", "2021-12-07T07:00"],
            "every 0": [str(recorded), "--openmetrics", str(tmp_path / "x.om"), "--every", "0"],
            "a folder as the file": [str(recorded), "--openmetrics", str(tmp_path)]}[case]
    said = {"missing run dir": [str(tmp_path / "nowhere"), "no such directory"],
            "not a run dir": [str(tmp_path), "not a run directory", "meta.json"],
            "file in a missing folder": ["--openmetrics", str(tmp_path / "no"), "does not exist"],
            "bad start": ["--start", "'tomorrow'", "ISO 8601"],
            "start without zone": ["--start", "no zone"],
            "every 0": ["--every", "0"],
            "a folder as the file": ["--openmetrics", "directory"]}[case]
    result = invoke("export", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for words in said:
        assert words in result.output, (words, result.output)
    assert not (tmp_path / "x.om").exists()


def test_a_tick_shorter_than_a_millisecond_needs_every(recorded, tmp_path):
    run = copy_run(recorded, tmp_path / "run")
    meta = json.loads((run / "meta.json").read_text()) | {"tick_s": 0.0004}
    (run / "meta.json").write_text(json.dumps(meta))
    result = invoke("export", str(run), "--openmetrics", str(tmp_path / "x.om"))
    assert result.exit_code == 2 and "--every" in result.output and "every 3 ticks" in result.output
    assert invoke("export", str(run), "--openmetrics", str(tmp_path / "x.om"), "--every", "3").exit_code == 0


# -- a real Prometheus -----------------------------------------------------------------------------------
def binaries() -> tuple[str, str]:
    """Debian's prometheus and promtool (.ci/run installs them): missing, the test fails in
    CI and is skipped elsewhere."""
    found = shutil.which("prometheus"), shutil.which("promtool")
    if None in found:
        if os.environ.get("CI"):
            pytest.fail("prometheus or promtool is missing: .ci/run installs Debian's prometheus")
        pytest.skip("prometheus is not installed (.ci/run installs Debian's prometheus)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def prometheus(where: Path, data: Path, targets: list[str] = ()):
    """A Prometheus of its own on a free loopback port, over ``data`` (kept a hundred years:
    a backfilled run is years old), scraping ``targets`` every second; yields its URL once
    ready, and stops it."""
    prom, _ = binaries()
    config = where / "prometheus.yml"
    jobs = "".join(f"  - job_name: gameday\n    static_configs:\n      - targets: ['{t}']\n" for t in targets)
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                      f"scrape_configs:{'' if jobs else ' []'}\n{jobs}")
    port = free_port()
    log = open(where / "prometheus.log", "w")
    proc = subprocess.Popen([prom, f"--config.file={config}", f"--storage.tsdb.path={data}",
                             "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (where / "prometheus.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Prometheus did not get ready in 60 s"
            time.sleep(0.2)
        yield url
    finally:
        stop_gently(proc, signal.SIGTERM, 20)
        log.close()


def query(url: str, promql: str, at: float | str | None = None) -> list[dict]:
    """PromQL through Prometheus' HTTP API (``/api/v1/query``), at ``at`` (seconds) or now."""
    args = {"query": promql} | ({"time": str(at)} if at is not None else {})
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode(args)}", timeout=30) as r:
        answer = json.load(r)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def column_of(labels: dict) -> str:
    name = labels["__name__"]
    if name in (om.TICK, om.CLOCK_S, om.TIME_OF_DAY_S):
        return {om.TICK: "tick", om.CLOCK_S: "time_s", om.TIME_OF_DAY_S: "clock"}[name]
    return f"{labels['agent']}.{name.removeprefix('gameday_')}"


def csv_value(row: dict, column: str) -> float:
    if column == "clock":
        h, m, *s = map(int, row["clock"].split(":"))
        return h * 3600 + m * 60 + (s[0] if s else 0)
    return float(row[column])


def endpoint_of(proc: subprocess.Popen, pattern: str) -> re.Match:
    """The endpoint a gameday command says it serves on (stderr), as ``pattern`` finds it."""
    said = []
    for line in proc.stderr:
        said.append(line)
        if found := re.search(pattern, line):
            return found
    raise AssertionError("".join(said)[-3000:])


@pytest.mark.slow
def test_a_backfilled_run_answers_promql_with_the_values_of_metrics_csv(recorded, tmp_path):
    _, promtool = binaries()
    om_file, data = tmp_path / "run.om", tmp_path / "data"
    result = invoke("export", str(recorded), "--openmetrics", str(om_file), "--start", "2021-12-07T07:00:00Z")
    assert result.exit_code == 0, result.output
    made = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(om_file), str(data)],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-3000:]
    header, rows = csv_rows(recorded)
    t0 = dt.datetime(2021, 12, 7, 7, tzinfo=dt.timezone.utc).timestamp()
    with prometheus(tmp_path, data) as url:
        for tick in (0, 1, 179, 181, 240, 333, max(rows)):  # (the surge is at 00:03, the fix at 00:04)
            answer = query(url, f'{{__name__=~"gameday_.+",run="{recorded.name}"}}', t0 + tick)
            got = {column_of(r["metric"]): float(r["value"][1]) for r in answer if r["metric"]["__name__"] != "gameday_run_info"}
            want = {c: csv_value(rows[tick], c) for c in header if rows[tick][c] != ""}
            assert got == want, tick
            assert all(r["value"][0] == t0 + tick for r in answer)
        # a query as a dashboard asks it: the bridge's utilisation, a minute apart, as metrics.csv says
        answer = query(url, f'gameday_utilisation{{agent="bridge",run="{recorded.name}"}}[10m]', t0 + 599)
        (series,) = answer
        assert [(round(t - t0), float(v)) for t, v in series["values"]] == [
            (tick, float(row["bridge.utilisation"])) for tick, row in rows.items()]
        (info,) = query(url, "gameday_run_info", t0 + 10)
        assert info["metric"]["runbook"] == "fix-early" and info["metric"]["start_clock"] == "00:00"


@pytest.mark.slow
@pytest.mark.live
def test_prometheus_scraping_a_paced_run_reads_the_values_of_metrics_csv_at_the_clocks_tick(tmp_path):
    binaries()
    out = tmp_path / "paced"
    env = os.environ | {"PYTHONPATH": str(ROOT), "GAMEDAY_RUN_HOSTING": "inprocess"}
    run = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(PLAYBOOKS / "mini_loop.yaml.j2"),
                            "--duration", "6m", "--speed", "30", "--metrics-port", "0", "--no-report",
                            "--no-attribution", "--no-progress", "--out", str(out)],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        found = endpoint_of(run, r"metrics for Prometheus: http://(127\.0\.0\.1:\d+)/metrics")
        with prometheus(tmp_path, tmp_path / "data", [found.group(1)]) as url:
            deadline = time.monotonic() + 30
            while len(scraped := query(url, 'gameday_tick{run="paced"}[1m]')) == 0 or len(scraped[0]["values"]) < 4:
                assert run.poll() is None and time.monotonic() < deadline, "fewer than 4 scrapes while the run played"
                time.sleep(0.5)
            everything = query(url, '{__name__=~"gameday_.+",run="paced"}[1m]')
            # one instant query at one of the scrapes' moments: the clock's tick, and a metric, of that scrape
            at = scraped[0]["values"][-2][0]
            (tick_now,) = query(url, 'gameday_tick{run="paced"}', at)
            (util_now,) = query(url, 'gameday_utilisation{run="paced",agent="bridge"}', at)
        assert run.wait(timeout=60) == 0, run.stderr.read()[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    header, rows = csv_rows(out)  # (the run is over: metrics.csv holds every tick)
    by_scrape: dict[float, dict[str, float]] = {}
    for series in everything:
        assert series["metric"]["job"] == "gameday" and "team" not in series["metric"]
        if series["metric"]["__name__"] == "gameday_run_info":
            continue
        for t, v in series["values"]:
            by_scrape.setdefault(t, {})[column_of(series["metric"])] = float(v)
    assert len(by_scrape) >= 4
    for t, values in by_scrape.items():
        tick = int(values["tick"])
        want = {c: csv_value(rows[tick], c) for c in header if rows[tick][c] != ""}
        assert values == want, (t, tick)
    ticks = sorted(int(v["tick"]) for v in by_scrape.values())
    assert ticks[-1] > ticks[0]  # (the run went on between the scrapes)
    tick = int(float(tick_now["value"][1]))
    assert float(util_now["value"][1]) == float(rows[tick]["bridge.utilisation"])
    assert tick_now["value"][0] == util_now["value"][0] == at


@pytest.mark.slow
@pytest.mark.live
def test_a_live_session_serves_each_teams_world_labelled_by_team(tmp_path):
    """`gameday serve --metrics-port`: each team's world, labelled with its team and the
    session, at the tick its clock says, as the team's metrics.csv holds it."""
    out = tmp_path / "session"
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    serve = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", str(PLAYBOOKS / "mini_loop.yaml.j2"),
                              "--team", "blue", "--team", "red", "--start", "--speed", "40", "--duration", "3m",
                              "--bind", "tcp://127.0.0.1:0", "--no-web", "--linger", "0", "--hosting", "inprocess",
                              "--no-report", "--metrics-port", "0", "--out", str(out)],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    scrapes = []
    try:
        found = endpoint_of(serve, r"metrics for Prometheus: (http://127\.0\.0\.1:\d+/metrics)")
        while serve.poll() is None and len(scrapes) < 20:
            try:
                with urllib.request.urlopen(found.group(1), timeout=5) as r:
                    scrapes.append(r.read().decode())
            except OSError:
                break  # (the session ended)
            time.sleep(0.2)
        assert serve.wait(timeout=120) == 0, serve.stderr.read()[-3000:]
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    teams_seen = {}
    for text in scrapes:
        for fam in text_format_families(text):
            for s in fam.samples:
                if s.name.startswith("gameday_") and "team" in s.labels:
                    assert s.labels["run"] == "session"
                    teams_seen.setdefault((text, s.labels["team"]), {})[
                        column_of({"__name__": s.name, **s.labels}) if s.name != "gameday_run_info" else "info"] = s.value
    assert {team for _, team in teams_seen} == {"blue", "red"}
    checked = 0
    for (_, team), values in teams_seen.items():
        header, rows = csv_rows(out / "teams" / team)
        tick = int(values.pop("tick"))
        values.pop("info", None)
        assert values == {c: csv_value(rows[tick], c) for c in header if c != "tick" and rows[tick][c] != ""}
        checked += 1
    assert checked >= 4 and any(v["time_s"] > 0 for v in teams_seen.values())


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_metrics_port_in_use_is_refused_before_anything_is_written(command, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = tmp_path / "out"
        args = [command, str(PLAYBOOKS / "mini_loop.yaml.j2"), "--hosting", "inprocess", "--metrics-port", str(port),
                "--out", str(out)] + (["--team", "blue", "--bind", "tcp://127.0.0.1:0", "--no-web"] if command == "serve"
                                      else ["--no-progress"])
        result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert f"cannot serve the metrics on 127.0.0.1:{port}: " in result.stderr and "another --metrics-port" in result.stderr
    assert "Traceback" not in result.output and not out.exists()
