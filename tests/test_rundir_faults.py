"""Every fault said, nothing lost (issue #44): a run's and a comparison's directory is
claimed by one process at a time; a write that fails (a full disk) ends the run marked
failed, with error.txt saying what failed and a message rather than a traceback; `report`
says what a run directory lacks and never follows a link out of it; `replay` tells the
hosting's events apart from the results.

The fault injection follows SQLite's I/O error tests: the N-th write of a command (opening
a file to write, a write or flush, os.replace, mkdir, os.open to create, fsync ...) raises
ENOSPC, for N = 1, 2, 3 ... until the command completes without meeting it. The files are
real; only the failure is injected."""
from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from orchestrator.cli import main
from tests.helpers import copy_run
from reports import rundir
from reports.analysis import analyse
from reports.files import write_atomic
from reports.rundir import BadRunDirectory, check_run, load_run

ROOT = Path(__file__).resolve().parents[1]
MINI = str(ROOT / "tests" / "playbooks" / "mini_loop.yaml.j2")
FIX = str(ROOT / "tests" / "playbooks" / "fix_early.yaml")
NO_SPACE = os.strerror(errno.ENOSPC)
RUN = ["run", MINI, "-r", "none", "--duration", "30s", "--hosting", "inprocess", "--no-progress", "--no-report"]
COMPARE = ["compare", MINI, "-r", "none", "-r", FIX, "--seeds", "2", "--fixed", "--serial", "--duration", "30s",
           "--no-report", "--no-progress"]


def gameday(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


# -- the fault injector ----------------------------------------------------------------------------

class DiskFull:
    """ENOSPC at the ``n``-th write of this process (and, ``persistent``, at every one after
    it, as a disk that stays full); ``count`` is how many writes there were, ``hit`` the
    kind of the one that failed first."""

    OS_WRITES = ("replace", "rename", "mkdir", "open", "write", "pwrite", "ftruncate", "posix_fallocate", "fsync")
    NAMED = ("replace", "rename", "mkdir", "open")  # (the system names the file of these, not of a write())

    def __init__(self, n: int, persistent: bool = False):
        self.n, self.persistent, self.count, self.hit = n, persistent, 0, None
        self.pid = os.getpid()

    def write(self, kind: str, name=None) -> None:
        if os.getpid() != self.pid:  # (a process forked meanwhile, as the template sandbox is: not this one's writes)
            return
        self.count += 1
        if self.count == self.n or (self.persistent and self.count > self.n):
            self.hit = self.hit or kind
            raise OSError(errno.ENOSPC, NO_SPACE, *([str(name)] if name is not None else []))

    @contextmanager
    def injected(self):
        real_open = builtins.open
        real = {name: getattr(os, name) for name in self.OS_WRITES}

        def open_(file, mode="r", *args, **kwargs):
            if not any(c in mode for c in "wax+"):
                return real_open(file, mode, *args, **kwargs)
            self.write("open", None if isinstance(file, int) else file)
            return _Writing(real_open(file, mode, *args, **kwargs), self)

        def counted(name):
            def call(*args, **kwargs):
                # (opening to read, or making a folder that exists, writes nothing: the system answers EEXIST first)
                if not (name == "open" and not args[1] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
                        or name == "mkdir" and os.path.lexists(args[0])):
                    self.write(name, args[0] if name in self.NAMED else None)
                return real[name](*args, **kwargs)
            return call

        builtins.open = io.open = open_
        for name in real:
            setattr(os, name, counted(name))
        try:
            yield self
        finally:
            builtins.open = io.open = real_open
            for name, f in real.items():
                setattr(os, name, f)


class _Writing:
    """A file opened to write, whose write() and flush() count (and may fail)."""

    def __init__(self, f, fault: DiskFull):
        self._f, self._fault = f, fault

    def write(self, data):
        self._fault.write("write")
        return self._f.write(data)

    def flush(self):
        self._fault.write("flush")
        return self._f.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __iter__(self):
        return iter(self._f)

    def __getattr__(self, name):
        return getattr(self._f, name)


def reads_as_a_report_does(out: Path) -> list[str]:
    """What `gameday report` reads of a run directory, read (its warnings), short of drawing charts."""
    run = load_run(out)
    warnings = check_run(run)
    analyse(run)
    return warnings


def no_leftovers(*where: Path) -> None:
    """No lock file and no temporary file left in (or under) ``where``, nor a directory half-started beside them."""
    left = [p for w in where for p in [*w.rglob("*"), *w.parent.glob(f".{w.name}.*")]
            if p.name == rundir.LOCK or p.name.endswith(".tmp") or ".starting-" in p.name]
    assert not left, left


# -- a run, a fault at every write -----------------------------------------------------------------

@pytest.mark.slow
def test_a_run_meets_a_full_disk_at_every_write_and_says_so_leaving_a_directory_that_reads(tmp_path):
    assert gameday(*RUN, "--out", tmp_path / "warm").exit_code == 0  # (kernels loaded, imports done)
    kinds, phases = set(), {"nothing written": 0, "failed": 0, "complete, attribution lost": 0}
    n = 0
    while True:
        n += 1
        out = tmp_path / f"run{n}"
        with DiskFull(n).injected() as fault:
            result = gameday(*RUN, "--out", out)
        if fault.count < n:  # the run met no fault: it completed
            assert result.exit_code == 0, result.output
            assert load_run(out).meta["status"] == "complete"
            break
        kinds.add(fault.hit)
        said = f"{n}th write ({fault.hit}): {result.output}"
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), said
        assert "Traceback" not in result.output and NO_SPACE in result.stderr, said
        no_leftovers(out)
        if not out.exists():  # failed while the directory was being made: nothing is left
            assert f"cannot create the run directory {out}" in result.stderr and "nothing was written" in result.stderr, said
            phases["nothing written"] += 1
            continue
        meta = json.loads((out / rundir.META).read_text())
        if meta["status"] == rundir.COMPLETE:  # the run was whole: its attribution.json could not be written
            assert "writing attribution.json failed" in result.stderr and not (out / rundir.ATTRIBUTION).exists(), said
            phases["complete, attribution lost"] += 1
        else:
            assert meta["status"] == rundir.FAILED, said
            error = (out / rundir.ERROR).read_text()
            assert NO_SPACE in error and any(name in error for name in rundir.RUN_FILES), said
            assert f"{out / rundir.ERROR} says what failed" in result.stderr and "marked failed" in result.stderr, said
            assert meta["ticks_done"] == len(load_run(out).metrics), said
            phases["failed"] += 1
        reads_as_a_report_does(out)
    print(f"\na run: {n - 1} fault points, {phases}, kinds {sorted(kinds)}")
    assert n > 100 and all(phases.values())  # (a fault at the start, in every tick, at the end, after it)
    assert {"mkdir", "open", "write", "flush", "fsync", "replace", "pwrite"} <= kinds


@pytest.mark.slow
def test_through_the_python_api_a_full_disk_is_a_write_error_and_nothing_else(tmp_path):
    """``execute`` (what orchestrator.run plays) raises WriteError, the documented error, at
    any write; never the OSError itself, nor an error of the cleanup after it."""
    from orchestrator.errors import WriteError
    from orchestrator.runs.runner import RunSpec, execute

    spec = RunSpec(playbook=MINI, runbook="none", duration=120.0)
    execute(spec, tmp_path / "warm")
    with DiskFull(10 ** 9).injected() as counting:
        execute(spec, tmp_path / "counted")
    for n in range(1, counting.count + 1, 13):
        with DiskFull(n).injected(), pytest.raises(WriteError) as raised:
            execute(spec, tmp_path / f"run{n}")
        assert NO_SPACE in str(raised.value) and raised.value.exit_code == 1


@pytest.mark.slow
def test_a_disk_that_stays_full_still_gets_a_message_saying_what_could_not_be_written(tmp_path):
    """From the N-th write on, every write fails: meta.json cannot be marked failed nor
    error.txt written, and the message says so; what is left reads (a run still "running")."""
    assert gameday(*RUN, "--out", tmp_path / "warm").exit_code == 0
    with DiskFull(10 ** 9).injected() as counting:
        gameday(*RUN, "--out", tmp_path / "counted")
    said_so = 0
    for n in range(1, counting.count, 8):  # (a sample: the run's every write is the test above's)
        out = tmp_path / f"run{n}"
        with DiskFull(n, persistent=True).injected():
            result = gameday(*RUN, "--out", out)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        assert "Traceback" not in result.output and NO_SPACE in result.stderr
        if out.exists() and json.loads((out / rundir.META).read_text())["status"] == rundir.RUNNING:
            assert "its meta.json could not be marked failed" in result.stderr, result.stderr
            assert "error.txt could not be written either" in result.stderr, result.stderr
            reads_as_a_report_does(out)  # (a run "running", as a killed one is)
            said_so += 1
    assert said_so > 5


@pytest.mark.slow
def test_a_report_that_meets_a_full_disk_says_so_and_leaves_no_half_written_file(tmp_path):
    out = tmp_path / "run"
    assert gameday(*RUN, "--out", out).exit_code == 0
    assert gameday("report", out, "--format", "md").exit_code == 0  # (matplotlib's caches written, if it writes any)
    with DiskFull(10 ** 9).injected() as counting:
        assert gameday("report", out, "--format", "md").exit_code == 0
    before = (out / "report" / "report.md").read_bytes()
    for n in (1, counting.count):  # (its first write, and its last: report.md put in place)
        with DiskFull(n).injected() as fault:
            result = gameday("report", out, "--format", "md")
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (fault.hit, result.output)
        assert "writing the report failed" in result.stderr and NO_SPACE in result.stderr and "Traceback" not in result.output
        assert (out / "report" / "report.md").read_bytes() == before  # (rewritten whole, or left as it was)
        no_leftovers(out)


# -- a comparison, a fault at every write ----------------------------------------------------------

@pytest.mark.slow
def test_a_comparison_meets_a_full_disk_at_every_write_and_says_so(tmp_path):
    assert gameday(*COMPARE, "--out", tmp_path / "warm").exit_code == 0
    kinds = set()
    n = 0
    while True:
        n += 1
        out = tmp_path / f"cmp{n}"
        with DiskFull(n).injected() as fault:
            result = gameday(*COMPARE, "--out", out)
        if fault.count < n:
            assert result.exit_code == 0, result.output
            assert len(pd.read_csv(out / "results.csv")) == 4
            break
        kinds.add(fault.hit)
        said = f"{n}th write ({fault.hit}): {result.output}"
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), said
        assert "Traceback" not in result.output and NO_SPACE in result.stderr, said
        no_leftovers(out)
        if out.exists():
            assert NO_SPACE in (out / rundir.ERROR).read_text(), said
            assert f"{out / rundir.ERROR} says what failed" in result.stderr, said
            for table in out.glob("*.csv"):
                pd.read_csv(table)  # each whole
            for record in out.glob("*.json"):
                json.loads(record.read_text())
        else:
            assert "nothing" in result.stderr, said
    print(f"\na comparison: {n - 1} fault points, kinds {sorted(kinds)}")
    assert n > 40 and {"mkdir", "open", "write", "replace"} <= kinds


# -- one process per directory ---------------------------------------------------------------------

def _wait_for_holder(out: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while rundir.lock_holder(out) != proc.pid:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command did not claim its directory"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_second_comparison_into_a_directory_being_written_is_refused_and_a_killed_ones_is_taken_over(tmp_path):
    out = tmp_path / "cmp"
    first = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "compare", MINI, "-r", "none", "-r", FIX,
                              "--seeds", "20", "--fixed", "--serial", "--duration", "1h", "--no-report", "--no-progress",
                              "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_holder(out, first)
        second = gameday(*COMPARE, "--out", out)
        assert second.exit_code == 2
        assert f"{out} is being written by process {first.pid}" in second.stderr, second.stderr
        assert not (out / "results.csv").exists()  # (nothing of the second mixed in)
    finally:
        first.kill()
        first.communicate()
    assert (out / rundir.LOCK).exists() and rundir.lock_holder(out) is None  # left by the killed one, and free
    third = gameday(*COMPARE, "--out", out)
    assert third.exit_code == 0, third.output
    assert len(pd.read_csv(out / "results.csv")) == 4 and not (out / rundir.LOCK).exists()
    again = gameday(*COMPARE, "--out", out)
    assert again.exit_code == 2 and f"directory {out} exists and is not empty" in again.stderr
    bad = gameday("compare", MINI, "-r", "no-such-runbook", "--out", tmp_path / "bad")
    assert bad.exit_code == 2 and not (tmp_path / "bad").exists()  # (bad input: no directory made)


@pytest.mark.slow
def test_a_second_run_into_a_directory_being_written_is_refused_naming_the_process(tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", MINI, "-r", "none", "--duration", "6h",
                              "--speed", "600", "--hosting", "inprocess", "--no-progress", "--no-report", "--out", str(out)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_holder(out, first)
        second = gameday(*RUN, "--out", out)
        assert second.exit_code == 2
        assert f"{out} is being written by process {first.pid}" in second.stderr, second.stderr
        report = gameday("report", out, "--format", "md", "--out", tmp_path / "report")  # (a report of it so far)
        assert report.exit_code == 0, report.output
        assert f"process {first.pid} is still writing it" in report.stderr
    finally:
        first.kill()
        first.communicate()
    assert rundir.lock_holder(out) is None  # (the lock of a killed process is free: its file says nothing more)
    third = gameday(*RUN, "--out", out)
    assert third.exit_code == 2 and f"run directory {out} exists and is not empty" in third.stderr  # (never mixed)
    report = gameday("report", out, "--format", "md")
    assert report.exit_code == 0 and "still writing" not in report.stderr, report.output


# -- replay: the hosting apart from the results ----------------------------------------------------

def test_a_replay_of_a_run_that_recovered_from_a_lost_host_is_identical_and_says_the_restart_apart(recorded, tmp_path):
    """The recording's host_restarted event (as Ray hosting journals one: a host lost and
    replaced from its snapshot) is hosting, not results: the replay (in process) has none,
    and is identical all the same; a world's event changed is still a difference."""
    run = copy_run(recorded, tmp_path / "run")
    lines = (run / rundir.EVENTS).read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if json.loads(line)["tick"] >= 100)
    restart = {"tick": 100, "clock": "00:01:40", "agent": "orchestrator", "event": "host_restarted", "host": "populations",
               "reason": "its process died", "agents": ["clients"], "snapshot_tick": 60, "replayed_ticks": 40, "seconds": 1.2}
    lines.insert(at, json.dumps(restart) + "\n")
    (run / rundir.EVENTS).write_text("".join(lines))
    result = gameday("replay", run, "--out", tmp_path / "again")
    assert result.exit_code == 0, result.output
    assert ("identical to the recording: metrics.csv and events.jsonl; the original run also recorded 1 host restart "
            "(hosting, not results)") in result.stdout
    world = json.loads(lines[at + 1])
    lines[at + 1] = json.dumps({**world, "clock": "99:99"}) + "\n"
    (run / rundir.EVENTS).write_text("".join(lines))
    result = gameday("replay", run, "--out", tmp_path / "third")
    assert result.exit_code == 1
    assert f"events.jsonl (first at line {at + 2}, tick {world['tick']})" in result.stderr  # (numbered as recorded)


# -- report: what a run directory lacks -----------------------------------------------------------

def test_a_header_only_metrics_csv_is_reported_as_no_ticks_without_figures_that_contradict_it(recorded, tmp_path):
    run = copy_run(recorded, tmp_path / "run")
    header = (run / rundir.METRICS).read_text().splitlines(keepends=True)[0]
    (run / rundir.METRICS).write_text(header)
    result = gameday("report", run, "--format", "md")
    assert result.exit_code == 0, result.output
    assert f"warning: {run / rundir.METRICS}: its header and no tick, though meta.json says 600 ticks were done" in result.stderr
    md = (run / "report" / "report.md").read_text()
    summary = md.split("## Summary")[1].split("##")[0]
    assert "holds no tick" in summary and "no figures" in summary and "No verdict" in summary
    assert "00:03" not in summary and "not broken by" not in summary  # (it had said the trigger fired in no tick)


def test_a_truncated_metrics_csv_and_a_half_written_events_line_are_warned_and_read_up_to_where_they_end(recorded, tmp_path):
    run = copy_run(recorded, tmp_path / "run")
    metrics = (run / rundir.METRICS).read_bytes()
    (run / rundir.METRICS).write_bytes(metrics[:len(metrics) // 2])
    events = (run / rundir.EVENTS).read_bytes()
    (run / rundir.EVENTS).write_bytes(events[:len(events) - 10])
    rows = metrics[:len(metrics) // 2].count(b"\n") - 1
    result = gameday("report", run, "--format", "md")
    assert result.exit_code == 0, result.output
    assert f"{run / rundir.METRICS}: its last row is cut short" in result.stderr
    assert f"{run / rundir.METRICS}: {rows} rows, where meta.json says 600 ticks were done" in result.stderr
    assert f"{run / rundir.EVENTS}: its last line is cut short" in result.stderr
    md = (run / "report" / "report.md").read_text()
    assert f"metrics.csv holds {rows} of the 600 ticks" in md and "Partial run" in md
    assert load_run(run).score is not None and "**Verdict:** Partial run" in md  # (not the whole run's score's)


@pytest.mark.parametrize("damage, said", [
    (lambda run: (run / "meta.json").write_text('{"status": "comp'), "meta.json: not valid JSON"),
    (lambda run: (run / "meta.json").write_text("[1, 2]"), "meta.json: got list; expected an object"),
    (lambda run: (run / "meta.json").write_text(json.dumps({"status": "complete", "start_clock": "00:00"})),
     "meta.json: tick_s is None; expected the tick in seconds"),
    (lambda run: (run / "metrics.csv").unlink(), "metrics.csv: missing"),
    (lambda run: (run / "score.json").write_text("{"), "score.json: not valid JSON"),
    (lambda run: (run / "events.jsonl").write_text('{"tick": 0, "event": "x"}\nnot json\n{"tick": 1, "event": "y"}\n'),
     "events.jsonl: line 2 is not JSON"),
], ids=["meta not JSON", "meta not an object", "meta without tick_s", "no metrics.csv", "score not JSON",
        "an events line not JSON"])
def test_a_run_directory_that_cannot_be_reported_is_refused_naming_the_file(recorded, tmp_path, damage, said):
    run = copy_run(recorded, tmp_path / "run")
    damage(run)
    result = gameday("report", run)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output and f"error: {run}/{said}" in result.stderr, result.stderr
    assert not (run / "report").exists()


def test_a_missing_score_of_a_complete_run_is_warned(recorded, tmp_path):
    run = copy_run(recorded, tmp_path / "run")
    (run / rundir.SCORE).unlink()
    result = gameday("report", run, "--format", "md")
    assert result.exit_code == 0, result.output
    assert f"{run / rundir.SCORE}: missing, though meta.json says the run is complete" in result.stderr


# -- no link out of a run directory ----------------------------------------------------------------

def test_no_command_reads_or_writes_through_a_link_out_of_a_run_directory(recorded, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # a report/ folder linked elsewhere: refused, and nothing written there
    run = copy_run(recorded, tmp_path / "run")
    (run / "report").symlink_to(elsewhere, target_is_directory=True)
    result = gameday("report", run)
    assert result.exit_code == 2 and f"{run / 'report'} is a symbolic link to {elsewhere}, outside" in result.stderr
    assert list(elsewhere.iterdir()) == []
    # a file of the run linked elsewhere: refused by report and by replay
    run = copy_run(recorded, tmp_path / "run2")
    shutil.move(run / rundir.SCORE, elsewhere / rundir.SCORE)
    (run / rundir.SCORE).symlink_to(elsewhere / rundir.SCORE)
    for command in (["report", run], ["replay", run, "--out", tmp_path / "again"], ["fork", run, "--at", "00:05", "-r",
                                                                                   "none", "--out", tmp_path / "f"]):
        result = gameday(*command)
        assert result.exit_code == 2 and f"{run / rundir.SCORE} is a symbolic link" in result.stderr, (command, result.output)
        assert "Traceback" not in result.output
    run = copy_run(recorded, tmp_path / "run3")
    shutil.move(run / rundir.PLAYBOOK, elsewhere / rundir.PLAYBOOK)
    (run / rundir.PLAYBOOK).symlink_to(elsewhere / rundir.PLAYBOOK)
    result = gameday("replay", run, "--out", tmp_path / "again3")
    assert result.exit_code == 2 and f"{run / rundir.PLAYBOOK} is a symbolic link" in result.stderr
    # a link that stays inside the directory is fine
    run = copy_run(recorded, tmp_path / "run4")
    (run / "kept").mkdir()
    shutil.move(run / rundir.METRICS, run / "kept" / rundir.METRICS)
    (run / rundir.METRICS).symlink_to(Path("kept") / rundir.METRICS)
    assert gameday("report", run, "--format", "md").exit_code == 0


# -- the one way files are replaced ----------------------------------------------------------------

def test_a_file_replaced_whole_or_not_at_all_whichever_of_its_writes_fails(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text("before\n")
    with DiskFull(10 ** 9).injected() as counting:
        write_atomic(path, "after\n")
    assert path.read_text() == "after\n"
    for n in range(1, counting.count + 1):
        path.write_text("before\n")
        with DiskFull(n).injected(), pytest.raises(OSError) as raised:
            write_atomic(path, "after\n")
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)  # (named, even for a write())
        assert path.read_text() == "before\n" and [p.name for p in tmp_path.iterdir()] == ["meta.json"]
    assert counting.count >= 5  # (open, write, flush, fsync, replace)


def test_a_bad_run_directory_reads_as_a_named_refusal_not_an_exception_of_pandas_or_json(recorded, tmp_path):
    run = copy_run(recorded, tmp_path / "run")
    with open(run / rundir.METRICS, "a") as f:
        f.write("1,2,3," + ",".join(["4"] * 400) + "\n")  # a row longer than the header
    with pytest.raises(BadRunDirectory, match="metrics.csv: cannot be read as CSV"):
        reads_as_a_report_does(run)


@pytest.mark.parametrize("name", [rundir.SCORE, rundir.META, rundir.COLUMNS, rundir.EVENTS])
def test_a_fifo_in_place_of_a_run_file_is_refused_not_waited_on(recorded, tmp_path, name):
    run = copy_run(recorded, tmp_path / "run")
    (run / name).unlink()
    os.mkfifo(run / name)
    result = gameday("report", run, "--format", "md")  # (a FIFO without a writer: reading it would wait for ever)
    assert result.exit_code == 2 and f"{run / name}: a FIFO; expected a regular file" in result.stderr, result.output


@pytest.mark.parametrize("name, content", [(rundir.ATTRIBUTION, "[1, 2, 3]"), (rundir.COLUMNS, '"text"'),
                                           (rundir.SCORE, "[" * 100_000 + "]" * 100_000)])
def test_a_run_file_holding_what_gameday_never_writes_there_is_refused_with_a_message(recorded, tmp_path, name,
                                                                                      content):
    run = copy_run(recorded, tmp_path / "run")
    (run / name).write_text(content)
    result = gameday("report", run, "--format", "md")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert str(run) in result.stderr and result.stderr.startswith("error: "), result.stderr
