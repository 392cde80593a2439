"""Shared fixtures. Long simulated runs are made once per session and shared; one Ray
instance serves every test that uses Ray."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import orchestrator
from reports.rundir import load_run
from tests.helpers import register_reference_population
from tests.long_runs import LONG_RUNS, claim, play

# `gameday run` hosts on Ray by default; the CLI tests check the command line, not the
# hosting, so they (and the subprocesses they start) run in process unless a test asks
# for --hosting ray. tests/test_ray_hosting.py covers the Ray path.
os.environ.setdefault("GAMEDAY_RUN_HOSTING", "inprocess")

# The client-by-client reference population checks the cohort model; only tests build it.
register_reference_population()


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


_long_dir: list[Path] = []  # where the long runs are played this session (tests/long_runs.py)
_long_proc: list[subprocess.Popen] = []
_long_log: list = []


def pytest_itemcollected(item):
    """Marks that follow from what a test uses (setup.cfg lists them), set as it is
    collected, before -m selects by them: Ray, and slow for Ray, a browser or a long run."""
    used = set(getattr(item, "fixturenames", ()))
    if used & {"ray_session", "cluster_check"}:
        item.add_marker(pytest.mark.ray)
    if used & {"ray_session", "cluster_check", "run_2021"} or item.get_closest_marker("browser"):
        item.add_marker(pytest.mark.slow)


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected what they deselect
def pytest_collection_modifyitems(session, config, items):
    if not any("run_2021" in getattr(item, "fixturenames", ()) for item in items):
        return
    _long_dir.append(Path(tempfile.mkdtemp(prefix="gameday-long-runs-")))
    log = open(_long_dir[0] / "stderr.txt", "w+")
    _long_proc.append(subprocess.Popen([sys.executable, "-m", "tests.long_runs", str(_long_dir[0])],
                                       cwd=Path(__file__).resolve().parents[1], stdout=subprocess.DEVNULL, stderr=log))
    _long_log.append(log)


def _wait_for(out: Path) -> None:
    import time

    proc = _long_proc[0]
    deadline = time.monotonic() + 900
    while not Path(f"{out}.done").exists():
        if proc.poll() is not None and not Path(f"{out}.done").exists():
            _long_log[0].seek(0)
            raise AssertionError(f"the long run {out.name} failed in the second process: {_long_log[0].read()[-3000:]}")
        assert time.monotonic() < deadline, f"the long run {out.name} took too long"
        time.sleep(0.2)


def pytest_sessionfinish(session, exitstatus):
    for proc in _long_proc:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def run_2021(tmp_path_factory):
    """run_2021(key): the long run ``LONG_RUNS[key]`` (tests/long_runs.py), played once per
    session, here or by the second process."""
    cache = {}

    def get(key: str):
        if key not in cache:
            if not _long_dir:  # no second process this session
                _long_dir.append(tmp_path_factory.mktemp("long-runs"))
            out = _long_dir[0] / key
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
