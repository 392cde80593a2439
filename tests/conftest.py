"""Shared fixtures. Long simulated runs are made once per session and shared; one Ray
instance serves every test that uses Ray."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

import orchestrator
from reports.rundir import load_run
from tests.helpers import register_reference_population
from tests.long_runs import claim, play

# `gameday run` hosts on Ray by default; the CLI tests check the command line, not the
# hosting, so they (and the subprocesses they start) run in process unless a test asks
# for --hosting ray. tests/test_ray_hosting.py covers the Ray path.
os.environ.setdefault("GAMEDAY_RUN_HOSTING", "inprocess")

# The client-by-client reference population checks the cohort model; only tests build it.
register_reference_population()


@pytest.fixture(autouse=True, scope="session")
def runs_without_a_directory_named_go_under_pytests_temporary_directory(tmp_path_factory):
    """orchestrator.run without ``out`` makes a temporary run directory the caller keeps (its
    documented behaviour); the tests' ones go where pytest clears old test runs' files,
    rather than piling up in /tmp (a few MB each, dozens a test run)."""
    import functools
    import types

    import orchestrator.api as api

    where = tmp_path_factory.mktemp("runs")
    api.tempfile = types.SimpleNamespace(mkdtemp=functools.partial(tempfile.mkdtemp, dir=where))
    yield
    api.tempfile = tempfile


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session, started as gameday starts one (on loopback)."""
    import ray

    from orchestrator.hosting.ray_hosting import start_local_ray

    if not ray.is_initialized():
        start_local_ray(num_cpus=2, logging_level="WARNING")
    yield ray
    ray.shutdown()


def pytest_configure(config):
    """The directory the long runs of this test run are played into (tests/long_runs.py),
    made once by the process that owns the run: pytest-xdist's workers (setup.cfg runs
    the tests in two) inherit it through the environment and share its runs."""
    if not hasattr(config, "workerinput"):  # (named here, made when first used)
        os.environ["GAMEDAY_LONG_RUNS_DIR"] = str(Path(tempfile.gettempdir()) / f"gameday-long-runs-{uuid.uuid4().hex}")
        _compile_kernels_once()


def _compile_kernels_once() -> None:
    """Load the compiled kernels here, compiling them if a clean clone has none cached, before
    the workers start: processes compiling them at once and writing the same cache can crash
    one another (numba issue 4807; a CI worker died so, running its first Ray comparison)."""
    from orchestrator.hosting.inprocess import load_kernels
    from orchestrator.runs.runner import RunSpec, prepare

    load_kernels(prepare(RunSpec(playbook="us-east-1-2021", duration=60.0))[3])


def _long_dir() -> Path:
    where = Path(os.environ["GAMEDAY_LONG_RUNS_DIR"])
    where.mkdir(exist_ok=True)
    return where


def pytest_itemcollected(item):
    """Marks that follow from what a test uses (setup.cfg lists them), set as it is
    collected, before -m selects by them: Ray, and slow for Ray, a browser or a long run.
    Then the worker it runs on (pytest-xdist's --dist loadgroup): every test that uses Ray
    on the one worker that starts the session's Ray, the others with their module (whose
    fixtures are made once)."""
    used = set(getattr(item, "fixturenames", ()))
    if used & {"ray_session", "cluster_check"}:
        item.add_marker(pytest.mark.ray)
    if used & {"ray_session", "cluster_check", "run_2021"} or item.get_closest_marker("browser"):
        item.add_marker(pytest.mark.slow)
    item.add_marker(pytest.mark.xdist_group("ray" if item.get_closest_marker("ray") else item.nodeid.split("::")[0]))


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what they deselect
def pytest_collection_modifyitems(session, config, items):
    """If a selected test uses a long run, start the process that plays them, once per test
    run (the first worker to claim it)."""
    if not any("run_2021" in getattr(item, "fixturenames", ()) for item in items):
        return
    where = _long_dir()
    if not claim(where / "player"):
        return
    with open(where / "stderr.txt", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.long_runs", str(where)],
                                cwd=Path(__file__).resolve().parents[1], stdout=subprocess.DEVNULL, stderr=log)
    (where / "player.pid").write_text(str(proc.pid))


def _wait_for(out: Path) -> None:
    import time

    deadline = time.monotonic() + 900
    while not Path(f"{out}.done").exists():
        if Path(f"{out}.failed").exists():
            log = out.parent / "stderr.txt"  # (the player's; a worker's failure is in its own test's report)
            raise AssertionError(f"the long run {out.name} failed in another process: "
                                 f"{log.read_text()[-3000:] if log.exists() else ''}")
        assert time.monotonic() < deadline, f"the long run {out.name} took too long"
        time.sleep(0.2)


def pytest_sessionfinish(session, exitstatus):
    """The process that owns the test run (after its workers) stops the long runs' player,
    if it still plays, and removes their directory."""
    if hasattr(session.config, "workerinput"):
        return
    import shutil
    import signal

    where = Path(os.environ["GAMEDAY_LONG_RUNS_DIR"])
    pid_file = where / "player.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            if b"tests.long_runs" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass  # it has ended
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="session")
def run_2021():
    """run_2021(key): the long run ``LONG_RUNS[key]`` (tests/long_runs.py), played once per
    test run, here, by another worker or by the player process."""
    cache = {}

    def get(key: str):
        if key not in cache:
            out = _long_dir() / key
            if claim(out):
                play(out, key)
            else:
                _wait_for(out)
            cache[key] = load_run(out)
        return cache[key]

    return get


@pytest.fixture(scope="module")
def historical(run_2021):
    """The 2021 world played by its historical runbook (a shared long run)."""
    return run_2021("historical")


@pytest.fixture(scope="session")
def runbook_file(tmp_path_factory):
    """runbook_file(name, rules): a runbook YAML file with these rules."""
    import yaml

    def make(name: str, rules: list) -> str:
        path = tmp_path_factory.mktemp("runbooks") / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"name": name, "description": "test runbook", "rules": rules}))
        return str(path)

    return make


@pytest.fixture(scope="session")
def cluster_check():
    """tests/cluster_check.py's JSON: a two-node Ray cluster started once, in its own
    process (this session's Ray is already running), for the hosting and comparison tests."""
    import json

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "tests.cluster_check", "600"], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A 10-minute run of mini_loop with an action (fix_early), no report: each test that
    alters it alters a copy (``helpers.copy_run``)."""
    from click.testing import CliRunner

    from orchestrator.cli import main

    out = tmp_path_factory.mktemp("recorded") / "run"
    playbooks = Path(__file__).parent / "playbooks"
    result = CliRunner().invoke(main, ["run", str(playbooks / "mini_loop.yaml.j2"), "-r", str(playbooks / "fix_early.yaml"),
                                       "--duration", "10m", "--hosting", "inprocess", "--no-progress", "--no-report",
                                       "--no-attribution", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out
