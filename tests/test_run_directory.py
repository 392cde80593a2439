"""The run directory survives a kill, records an interrupt, and the built-in playbooks
ship with a normal (non-editable) install."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reports.rundir import UNCLOSED, check_run, load_run

ROOT = Path(__file__).resolve().parents[1]


def _start_run(out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", "--runbook", "none", "--duration", "4h",
                             "--out", str(out), "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_ticks(out: Path, ticks: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    metrics = out / "metrics.csv"
    while time.monotonic() < deadline:
        if metrics.exists() and metrics.stat().st_size > 0:
            with open(metrics, "rb") as f:
                if sum(1 for _ in f) > ticks:
                    return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("run did not get far enough")


@pytest.mark.slow
def test_a_run_killed_halfway_leaves_a_readable_directory(tmp_path):
    out = tmp_path / "killed"
    proc = _start_run(out)
    _wait_for_ticks(out, 7000, proc)  # past the 07:30 trigger, into the storm
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run = load_run(out)
    # (meta.json says "running"; no live process holds the directory: read as interrupted, and said)
    assert json.loads((out / "meta.json").read_text())["status"] == "running"
    assert run.meta["status"] == "interrupted" and run.meta[UNCLOSED] and not run.complete
    assert any("ended without closing it" in w for w in check_run(run))
    m = run.metrics
    assert len(m) >= 7000
    assert list(m["tick"]) == list(range(len(m)))  # no gaps, no torn last row
    assert not m.isna().any().any()
    assert (run.events["event"] == "trigger").sum() == 1
    assert run.events["tick"].max() <= m["tick"].max() + 1
    assert run.score is None

    # ... and its after-action report builds, saying it is partial
    from click.testing import CliRunner

    from orchestrator.cli import main

    result = CliRunner().invoke(main, ["report", str(out)])
    assert result.exit_code == 0, result.output
    md = (out / "report" / "report.md").read_text()
    assert "Partial run" in md and "no verdict" in md
    assert "it stopped at" in (out / "report" / "report.html").read_text()


@pytest.mark.slow
def test_ctrl_c_exits_130_and_marks_the_run_interrupted(tmp_path):
    out = tmp_path / "interrupted"
    proc = _start_run(out)
    _wait_for_ticks(out, 2000, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "Traceback" not in err
    run = load_run(out)
    assert run.meta["status"] == "interrupted"
    assert run.score is not None and run.score["trigger"]["reached"] in (True, False)
    assert len(run.metrics) == run.meta["ticks_done"]
    # it says where the run is and how far it got (an outsider got a bare "interrupted")
    said = (f"run directory: {out} (status interrupted, {run.meta['ticks_done']} of {run.meta['ticks_planned']} "
            f"ticks played; gameday report {out} writes its report)")
    assert said in err, err


@pytest.mark.slow
def test_builtin_playbooks_are_found_after_a_non_editable_install(tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(ROOT)], check=True, capture_output=True)
    code = ("import orchestrator.playbook.files as p, json; "
            "print(json.dumps([p.builtin_playbooks(), p.builtin_runbooks('us-east-1-2021'), p.__file__]))")
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True, capture_output=True, text=True)
    playbooks, runbooks, where = json.loads(out.stdout)
    assert "us-east-1-2021" in playbooks
    assert {"none", "historical"} <= set(runbooks)
    assert where.startswith(str(target))


def test_a_bug_during_a_run_ends_it_with_a_message_and_a_readable_directory(tmp_path, monkeypatch):
    """Everything a playbook can say is checked before a run; should a bug still raise
    mid-run, the user gets a message (not a traceback), exit 1 and a directory to read."""
    from click.testing import CliRunner

    from agents.device import DevicePool
    from orchestrator.cli import main

    step = DevicePool.step

    def failing_step(self, tick, inbox):  # stands in for a bug in an agent
        if tick == 30:
            raise ZeroDivisionError("division by zero")
        return step(self, tick, inbox)

    monkeypatch.setattr(DevicePool, "step", failing_step)
    out = tmp_path / "bug"
    result = CliRunner().invoke(main, ["run", "--runbook", "none", "--duration", "10m", "--hosting", "inprocess",
                                       "--no-progress", "--no-report", "--out", str(out)])
    assert result.exit_code == 1
    assert "the simulation failed at tick 30 (ZeroDivisionError: division by zero). This is a bug in gameday" in result.output
    assert "Traceback" not in result.output and str(out / "error.txt") in result.output
    assert "ZeroDivisionError" in (out / "error.txt").read_text()
    run = load_run(out)
    assert run.meta["status"] == "failed" and run.meta["ticks_done"] == 30


@pytest.mark.slow
def test_a_run_stopped_at_any_line_of_its_start_leaves_no_directory_or_one_that_reads(tmp_path):
    """A stop (Ctrl-C, or a comparison's time limit cancelling its runs) can land on any line
    between checking the run directory and the first tick: what it leaves is either nothing
    or a directory that reads, marked interrupted. (A comparison on Ray once kept a run
    directory without meta.json.) The stop is raised, line after line, by a trace function."""
    import linecache
    import sys

    from orchestrator.engine.journal import RunWriter
    from orchestrator.runs import runner
    from orchestrator.runs.runner import RunSpec, WorldRun, execute

    mini = str(ROOT / "tests" / "playbooks" / "mini_loop.yaml.j2")
    starting = {RunWriter.__init__.__code__, RunWriter._write_first_files.__code__, WorldRun.__init__.__code__,
                runner.execute.__code__}
    spec = RunSpec(playbook=mini, runbook="none", duration=3.0)

    def stop_at(line: int):
        seen = 0
        ticking = False

        def trace(frame, event, arg):
            nonlocal seen, ticking
            if frame.f_code not in starting or ticking:
                return None
            text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            ticking = text.startswith("run.step()")  # (the start is over)
            # (a `try:` line is a no-op, where Python delivers no signal)
            if event == "line" and not ticking and not text.startswith("try:"):
                seen += 1
                if seen == line:
                    raise KeyboardInterrupt
            return trace
        return trace

    stopped = 0
    for line in range(1, 400):
        out = tmp_path / f"stop{line}"
        sys.settrace(stop_at(line))
        try:
            execute(spec, out)
        except KeyboardInterrupt:
            stopped += 1
        else:
            break  # the run got past every line: no more to stop at
        finally:
            sys.settrace(None)
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], line  # nothing half-started beside it
        if out.exists():
            run = load_run(out)
            assert run.meta["status"] == "interrupted", line
    assert stopped > 30  # (the start has that many lines)
    assert load_run(out).meta["status"] == "complete"


def test_an_interrupt_while_a_run_is_closed_lands_after_its_score_and_status_are_written(tmp_path):
    """A Ctrl-C (or a comparison's time limit cancelling a Ray task, which raises it the same
    way) that lands while a finished run writes its score: the score and the status are
    written whole, then the interrupt is raised. It once left meta.json saying "running"."""
    from orchestrator.runs.runner import RunSpec, WorldRun

    run = WorldRun(RunSpec(playbook="us-east-1-2021", runbook="none", duration=60.0), tmp_path / "run")
    while not run.done:
        run.step()
    scored = run.scorer.score

    def score_then_interrupted():
        os.kill(os.getpid(), signal.SIGINT)  # (a real signal, handled at the next bytecode)
        return scored()
    run.scorer.score = score_then_interrupted
    with pytest.raises(KeyboardInterrupt):
        run.close("complete")
    done = load_run(tmp_path / "run")
    assert done.meta["status"] == "complete" and done.score is not None
    assert not (tmp_path / "run" / ".lock").exists()
    with pytest.raises(KeyboardInterrupt):  # (and Ctrl-C is Ctrl-C again after)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
