"""Shared fixtures. Long simulated runs are made once per session and shared; one Ray
instance serves every test that uses Ray."""
from __future__ import annotations

import os

import pytest

# `gameday run` hosts on Ray by default; the CLI tests check the command line, not the
# hosting, so they (and the subprocesses they start) run in process unless a test asks
# for --hosting ray. tests/test_ray_hosting.py covers the Ray path.
os.environ.setdefault("GAMEDAY_RUN_HOSTING", "inprocess")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for the whole session."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()

import subprocess
import sys
import tempfile
from pathlib import Path

import orchestrator
from reports.rundir import load_run

#: The longest in-process run (12 h 40 min of the world with nobody acting) is started in
#: a process of its own when the session begins, on the second core, while the first
#: core runs the other tests; the test that needs it waits for it (about a minute saved).
PREWARMED = {"none": ("test_with_nobody_acting_the_bridge_is_still_congested_12_hours_after_the_trigger",
                      {"runbook": "none", "duration": "12h40m"})}
_prewarm: dict[str, tuple[subprocess.Popen, Path, dict]] = {}


def pytest_collection_modifyitems(session, config, items):
    names = {item.originalname for item in items}
    for key, (test, kwargs) in PREWARMED.items():
        if test in names:
            out = Path(tempfile.mkdtemp(prefix="gameday-prewarm-")) / key
            code = f"import orchestrator; orchestrator.run(out={str(out)!r}, **{kwargs!r})"
            _prewarm[key] = (subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                                              stderr=subprocess.PIPE, text=True), out, kwargs)


def pytest_sessionfinish(session, exitstatus):
    for proc, _, _ in _prewarm.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def run_2021(tmp_path_factory):
    """run_2021(key, **kwargs): an in-process run of us-east-1-2021, cached by key."""
    cache = {}

    def get(key: str, **kwargs):
        if key not in cache:
            if key in _prewarm and _prewarm[key][2] == kwargs:
                proc, out, _ = _prewarm[key]
                _, err = proc.communicate(timeout=900)
                assert proc.returncode == 0, err[-3000:]
                cache[key] = load_run(out)
            else:
                cache[key] = orchestrator.run(out=tmp_path_factory.mktemp("run") / key, **kwargs)
        return cache[key]

    return get


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
