"""Hostile input and faults in what `report`, `replay` and a comparison's cache read (#44):
a recording that stopped mid-tick is replayed and compared on its whole ticks, never
called different for the part of a tick it holds; metrics.csv and events.jsonl are read
only within what the run can have written; meta.json's tick, start clock and tick counts,
and every field the reports read of score.json, attribution.json, columns.json,
playbook.json, runbook.yaml and events.jsonl, are checked as they are read, a refusal
naming the file, the field, the value and what was expected; a cached row not as gameday
writes it is played again, and said once. The files are real (a sparse file for size)."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from orchestrator.batch.comparison import COLUMNS
from orchestrator.batch.run_cache import RunCache
from orchestrator.cli import main
from tests.helpers import copy_run
from reports import rundir
from reports.files import METRICS_VALUE_BYTES

ROOT = Path(__file__).resolve().parents[1]
MINI = str(ROOT / "tests" / "playbooks" / "mini_loop.yaml.j2")
FIX = str(ROOT / "tests" / "playbooks" / "fix_early.yaml")
GIB = 2**30


def gameday(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _edit_json(path: Path, **changes) -> None:
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def _refused(result, path: Path, said: str) -> None:
    """A refusal (exit 2, no traceback) naming ``path`` and saying ``said``."""
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and result.stderr.startswith(f"error: {path}: "), result.stderr
    assert said in result.stderr, result.stderr


# -- replay: the whole ticks of a recording, and nothing of a tick it stopped in -------------------

def test_a_replay_of_a_killed_run_plays_the_ticks_its_metrics_hold_whole(recorded, tmp_path):
    """As a SIGKILL leaves it: meta.json as written before the first tick (running, ticks_done
    0), a last row cut short and the events of the tick being written; replay plays the whole
    rows (it said "did not get through a single tick"), is identical on them, and says why it
    compared those alone."""
    run = copy_run(recorded, tmp_path / "run")
    _edit_json(run / rundir.META, status=rundir.RUNNING, ticks_done=0)
    lines = (run / rundir.METRICS).read_bytes().splitlines(keepends=True)
    (run / rundir.METRICS).write_bytes(b"".join(lines[:401]) + lines[401][:25])  # 400 rows, then half of tick 400's
    assert rundir.load_run(run).meta["ticks_done"] == 400  # (the whole rows: RunWriter.close counts them so)
    result = gameday("replay", run, "--out", tmp_path / "again")
    assert result.exit_code == 0, result.output
    assert "replayed 400 ticks" in result.stdout and "identical to the recording" in result.stdout
    assert ("its writer was killed: meta.json still says running; the last line of metrics.csv is cut short): the "
            "replay compares the 400 ticks it holds whole") in result.stderr
    assert any(json.loads(line)["tick"] >= 400 for line in (run / rundir.EVENTS).open())  # (left out, not a difference)


def test_a_replay_of_a_recording_cut_short_is_never_called_different_for_the_cut_line(recorded, tmp_path):
    """metrics.csv and events.jsonl cut mid-line: the cut lines are left out and said (it
    said DIFFERENT at the cut tick); a difference in a whole tick is still one."""
    run = copy_run(recorded, tmp_path / "run")
    metrics = (run / rundir.METRICS).read_bytes()
    (run / rundir.METRICS).write_bytes(metrics[:len(metrics) // 2])
    events = (run / rundir.EVENTS).read_bytes()
    (run / rundir.EVENTS).write_bytes(events[:-10])
    rows = metrics[:len(metrics) // 2].count(b"\n") - 1
    result = gameday("replay", run, "--out", tmp_path / "again")
    assert result.exit_code == 0, result.output
    assert f"replayed {rows} ticks" in result.stdout and "identical to the recording" in result.stdout
    assert (f"(meta.json says 600 ticks were done; the last line of metrics.csv is cut short; the last line of "
            f"events.jsonl is cut short): the replay compares the {rows} ticks it holds whole") in result.stderr
    lines = (run / rundir.METRICS).read_text().split("\n")
    lines[11] = lines[11].replace(",", ",9", 4)  # a value of tick 10, a whole row
    (run / rundir.METRICS).write_text("\n".join(lines))
    result = gameday("replay", run, "--out", tmp_path / "third")
    assert result.exit_code == 1 and "DIFFERENT from the recording: metrics.csv (first at tick 10 " in result.stderr


@pytest.mark.slow
def test_a_replay_of_a_run_killed_by_sigkill_is_identical_on_its_whole_ticks(tmp_path):
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", MINI, "-r", FIX, "--duration", "2h",
                             "--speed", "600", "--hosting", "inprocess", "--no-progress", "--no-report", "--out",
                             str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not ((out / rundir.METRICS).exists() and (out / rundir.METRICS).stat().st_size > 60_000):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert json.loads((out / rundir.META).read_text())["ticks_done"] == 0  # (written at the end, which never came)
    ticks = rundir.complete_ticks(out)
    result = gameday("replay", out, "--out", tmp_path / "again")
    assert result.exit_code == 0, result.output
    assert f"replayed {ticks} ticks" in result.stdout and "identical to the recording" in result.stdout


# -- metrics.csv and events.jsonl: read within what the run can have written -------------------------

@pytest.mark.parametrize("name", [rundir.METRICS, rundir.EVENTS])
def test_a_journal_file_past_what_the_run_can_have_written_is_refused_before_it_is_read(recorded, tmp_path, name):
    run = copy_run(recorded, tmp_path / "run")
    os.truncate(run / name, GIB)  # (sparse: a GiB of NULs after the file's lines)
    tracemalloc.start()
    try:
        report = gameday("report", run, "--format", "md")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    _refused(report, run / name, f"{GIB:,} bytes; expected at most ")
    assert "for a run of 600 ticks" in report.stderr and peak < 200 * 2**20  # (it read 2 GB)
    _refused(gameday("replay", run, "--out", tmp_path / "again"), run / name, f"{GIB:,} bytes")
    assert not (tmp_path / "again").exists()


def test_the_bound_on_metrics_csv_follows_the_ticks_the_run_planned(recorded, tmp_path):
    """A 12-hour run at 0.1 s ticks writes hundreds of MB: what is legitimate for the ticks
    meta.json says is read (here a file padded past a 600-tick run's bound is read, its
    NULs a last line cut short, once the run says it planned ten times the ticks)."""
    run = copy_run(recorded, tmp_path / "run")
    header = (run / rundir.METRICS).open("rb").readline()
    columns = header.count(b",") + 1
    bound = len(header) + 600 * columns * METRICS_VALUE_BYTES
    os.truncate(run / rundir.METRICS, bound + 1)
    _refused(gameday("report", run, "--format", "md"), run / rundir.METRICS,
             f"{bound + 1:,} bytes; expected at most {bound:,} bytes for a run of 600 ticks (its header and a row a "
             f"tick of at most {METRICS_VALUE_BYTES} bytes for each of its {columns} columns")
    _edit_json(run / rundir.META, ticks_planned=6000)
    result = gameday("report", run, "--format", "md")
    assert result.exit_code == 0 and "its last row is cut short" in result.stderr, result.output


# -- meta.json: what the readers rely on -------------------------------------------------------------

@pytest.mark.parametrize("field, value, said", [
    ("tick_s", 1e-300, "tick_s is 1e-300; expected the tick in seconds (a number from 1e-06 to 60)"),
    ("tick_s", 1e300, "tick_s is 1e+300; expected the tick in seconds"),
    ("tick_s", "1", "tick_s is '1'; expected the tick in seconds"),
    ("tick_s", True, "tick_s is True; expected the tick in seconds"),
    ("start_clock", 5, "start_clock is 5; expected the clock time the run starts at (a text HH:MM[:SS])"),
    ("start_clock", "25:99", "start_clock is '25:99'; expected the clock time"),
    ("ticks_planned", 10**30, ("ticks_planned is 1000000000000000000000000000000; expected a count of ticks (an "
                               "integer from 0 to 2,000,000)")),
    ("ticks_done", -1, "ticks_done is -1; expected a count of ticks"),
    ("ticks_done", 1.5, "ticks_done is 1.5; expected a count of ticks"),
])
def test_a_meta_field_the_readers_rely_on_is_refused_naming_it_and_what_was_expected(recorded, tmp_path, field, value,
                                                                                     said):
    run = copy_run(recorded, tmp_path / "run")
    _edit_json(run / rundir.META, **{field: value})
    _refused(gameday("report", run, "--format", "md"), run / rundir.META, said)
    assert not (run / "report").exists()
    _refused(gameday("replay", run, "--out", tmp_path / "again"), run / rundir.META, said)


def test_a_replay_names_a_seed_that_is_not_one(recorded, tmp_path):
    run = copy_run(recorded, tmp_path / "run")
    _edit_json(run / rundir.META, seed="abc")
    _refused(gameday("replay", run, "--out", tmp_path / "again"), run / rundir.META,
             "seed is 'abc'; expected the run's seed (an integer >= 0)")


# -- the other files: each field the reports read ----------------------------------------------------

def _score(run: Path, **changes) -> None:
    _edit_json(run / rundir.SCORE, **changes)


def _nested(path: Path, keys: tuple, value) -> None:
    doc = json.loads(path.read_text())
    inner = doc
    for k in keys[:-1]:
        inner = inner[k]
    inner[keys[-1]] = value
    path.write_text(json.dumps(doc))


def _append_event(run: Path, event: dict) -> None:
    with open(run / rundir.EVENTS, "a") as f:
        f.write(json.dumps(event) + "\n")


@pytest.mark.parametrize("name, damage, said", [
    (rundir.SCORE, lambda run: (run / rundir.SCORE).write_text("[1]"), "got [1]; expected an object"),
    (rundir.SCORE, lambda run: _score(run, loop_broken="x"), "loop_broken is 'x'; expected an object"),
    (rundir.SCORE, lambda run: _nested(run / rundir.SCORE, ("impact", "weighted_total"), "banana"),
     "impact.weighted_total is 'banana'; expected a number"),
    (rundir.SCORE, lambda run: _nested(run / rundir.SCORE, ("loop_broken", "relapses"), {}),
     "loop_broken.relapses is {}; expected a list"),
    (rundir.ATTRIBUTION, lambda run: (run / rundir.ATTRIBUTION).write_text('{"text": "t", "counterfactuals": "x"}'),
     "counterfactuals is 'x'; expected a list"),
    (rundir.ATTRIBUTION, lambda run: (run / rundir.ATTRIBUTION).write_text('{"breaker": [1]}'),
     "no field text; expected a text"),
    (rundir.COLUMNS, lambda run: (run / rundir.COLUMNS).write_text("[1, 2]"), "got [1, 2]; expected an object"),
    (rundir.COLUMNS, lambda run: _nested(run / rundir.COLUMNS, ("bridge.devices",), {"agent": "bridge"}),
     "no field ['bridge.devices'].unit; expected a text"),
    (rundir.VALIDATED, lambda run: (run / rundir.VALIDATED).write_text("[]"), "got []; expected an object"),
    (rundir.VALIDATED, lambda run: _nested(run / rundir.VALIDATED, ("scoring", "loop", "devices"), "bridge"),
     "scoring.loop.devices is 'bridge'; expected a list"),
    (rundir.VALIDATED, lambda run: _nested(run / rundir.VALIDATED, ("mitigations", 0, "effects"), 5),
     "mitigations[0].effects is 5; expected a list"),
    (rundir.RUNBOOK, lambda run: (run / rundir.RUNBOOK).write_text("[1, 2]\n"), "got [1, 2]; expected an object"),
    (rundir.METRICS, lambda run: os.truncate(run / rundir.METRICS, 50), "its one line, the header, is cut short"),
    (rundir.EVENTS, lambda run: _append_event(run, {"tick": "x", "clock": 5, "agent": [], "event": {}}),
     "tick is 'x'; expected an integer"),
    (rundir.EVENTS, lambda run: _append_event(run, {"tick": 1e308, "event": "trigger"}),
     "tick is 1e+308; expected an integer"),
    (rundir.EVENTS, lambda run: _append_event(run, {"tick": 5, "clock": "00:00:05", "agent": "ops",
                                                    "event": "action_requested", "action": [1], "reason": "r"}),
     "action is [1]; expected a text"),
    (rundir.EVENTS, lambda run: _append_event(run, {"tick": 5, "clock": "00:00:05", "agent": "triggers",
                                                    "event": "trigger"}),
     "the trigger event of tick 5 has no 'trigger'; expected the details gameday writes with it"),
], ids=["score a list", "score loop_broken a text", "score impact a text", "score relapses an object",
        "attribution counterfactuals a text", "attribution without text", "columns a list", "a column without unit",
        "playbook.json a list", "scoring.loop.devices a text", "effects a number", "runbook a list", "a header cut short",
        "event tick a text", "event tick a float", "event detail a list", "event without its detail"])
def test_a_file_holding_what_gameday_never_writes_there_is_refused_naming_the_file_and_the_field(recorded, tmp_path,
                                                                                                 name, damage, said):
    """Each of these was "cannot report DIR: AttributeError ..." (or TypeError, KeyError), naming
    neither the file nor the field."""
    run = copy_run(recorded, tmp_path / "run")
    damage(run)
    result = gameday("report", run, "--format", "md")
    _refused(result, run / name, said)
    assert "cannot report" not in result.stderr and not (run / "report").exists()


# -- a comparison's cache: a row not as gameday writes it is played again, and said once -------------

def test_a_cached_row_not_as_gameday_writes_it_is_not_used_and_counted(tmp_path):
    good = {"runbook": "none", "seed": 1, "trigger_s": 180.0, "loop_formed": True, "loop_broken_s": math.nan,
            "loop_broken": "", "backlog_scored": False, "backlog_formed": False, "backlog_drained_s": math.nan,
            "backlog_drained": "", "impact": 6.4, "first_update_s": math.nan, "connections_broken": 0,
            "turned_away": 0, "actions": 0, "outcome": "stuck", "horizon_s": 600.0}
    store = RunCache(tmp_path, COLUMNS)
    rows = {"good": good, "banana": good | {"impact": "banana"}, "list": good | {"actions": [1]},
            "bool": good | {"actions": True}, "outcome": good | {"outcome": "banana"}, "missing": {"runbook": "none"},
            "not an object": [1, 2]}
    for key, row in rows.items():
        store.put(key, row)
    kept = store.get("good")
    assert kept is not None and kept["impact"] == 6.4 and math.isnan(kept["loop_broken_s"])  # (NaN: never reached)
    assert [k for k in rows if store.get(k) is None] == [k for k in rows if k != "good"]
    assert [text.split(": ", 1)[1] for text in store.set_aside] == [
        "impact is 'banana'; expected a number", "actions is [1]; expected an integer",
        "actions is True; expected an integer",
        "outcome is 'banana'; expected one of " + ", ".join(rundir.OUTCOMES), "no seed",
        "got [1, 2]; expected an object"]
    assert store.get("none") is None and len(store.set_aside) == 6  # (none kept: nothing to say)


def test_a_comparison_plays_again_the_runs_whose_cached_rows_are_not_as_gameday_writes_them(tmp_path):
    """Rows edited to an impact "banana" and a list for a number: played again, said once on
    stderr with their count, the table the same as the first comparison's, and the rows
    written again (a third comparison takes them all)."""
    cache = tmp_path / "cache"
    args = ["compare", MINI, "-r", "none", "-r", FIX, "--seeds", "1", "--fixed", "--serial", "--duration", "5m",
            "--no-report", "--no-progress", "--cache", cache]
    first = gameday(*args, "--out", tmp_path / "first")
    assert first.exit_code == 0, first.output
    rows = sorted(cache.glob("*/*.json"))
    assert len(rows) == 2
    for path, change in zip(rows, ({"impact": "banana"}, {"connections_broken": [1, 2]})):
        _edit_json(path, **change)
    second = gameday(*args, "--out", tmp_path / "second")
    assert second.exit_code == 0 and "Traceback" not in second.output, second.output
    assert "0 of 2 runs taken from the cache" in second.stdout
    assert second.stderr.count(f"warning: 2 rows of the cache {cache} not as gameday writes them (") == 1
    assert "played again" in second.stderr and ("impact is 'banana'; expected a number" in second.stderr or
                                                "connections_broken is [1, 2]; expected an integer" in second.stderr)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "first" / "results.csv"),
                                  pd.read_csv(tmp_path / "second" / "results.csv"))
    third = gameday(*args, "--out", tmp_path / "third")
    assert "2 of 2 runs taken from the cache" in third.stdout and "warning" not in third.stderr


def test_a_cached_row_that_is_a_directory_is_played_again_and_left_alone(tmp_path):
    """(The row's place held a directory: the run was played again, then writing its row over
    the directory failed as a full disk would, exit 1.)"""
    cache = RunCache(tmp_path / "cache", COLUMNS)
    key = "ab" + "0" * 62
    cache._path(key).mkdir(parents=True)
    assert cache.get(key) is None and cache.set_aside
    cache.put(key, {"runbook": "none"})  # (nothing written through it, no error)
    assert cache._path(key).is_dir() and list(cache._path(key).iterdir()) == []
