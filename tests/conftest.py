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

#: The longest in-process runs (12 hours with nobody acting, and the historical responses)
#: are played one after the other in a process of their own, started when the session
#: begins: it uses the second core while the first runs the other tests, and the tests
#: that need the runs wait for them (about a minute and a half saved).
PREWARMED = {"none": ("test_with_nobody_acting_the_bridge_is_still_congested_12_hours_after_the_trigger",
                      {"runbook": "none", "duration": "12h40m"}),
             "historical": ("test_the_report_figures_are_those_of_the_score_and_the_metrics",
                            {"runbook": "historical", "attribution": True}),
             "capacity-only": ("test_historical_capacity_addition_alone_does_not_break_the_loop",
                               {"runbook": str(Path(__file__).parent / "playbooks" / "runbooks" / "capacity-only.yaml"),
                                "duration": "9h"}),
             "2025-historical": ("test_historical_reproduces_the_shape_of_aws_timeline",
                                 {"playbook": "us-east-1-2025", "runbook": "historical"})}
_prewarm: dict[str, tuple[Path, dict]] = {}
_prewarm_proc: list[subprocess.Popen] = []
_prewarm_log: list = []


def pytest_collection_modifyitems(session, config, items):
    names = {item.originalname for item in items}
    jobs = []
    for key, (test, kwargs) in PREWARMED.items():
        if test in names:
            out = Path(tempfile.mkdtemp(prefix="gameday-prewarm-")) / key
            _prewarm[key] = (out, kwargs)
            jobs.append((str(out), kwargs))
    if jobs:
        code = ("import orchestrator, pathlib\n"
                f"for out, kwargs in {jobs!r}:\n"
                "    orchestrator.run(out=out, **kwargs)\n"
                "    pathlib.Path(out + '.done').touch()\n")
        log = open(Path(tempfile.mkdtemp(prefix="gameday-prewarm-")) / "stderr.txt", "w+")
        _prewarm_proc.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=log))
        _prewarm_log.append(log)


def _wait_for(out: Path) -> None:
    import time

    proc = _prewarm_proc[0]
    deadline = time.monotonic() + 900
    while not Path(f"{out}.done").exists():
        if proc.poll() is not None and not Path(f"{out}.done").exists():
            _prewarm_log[0].seek(0)
            raise AssertionError(f"the prewarmed run {out.name} failed: {_prewarm_log[0].read()[-3000:]}")
        assert time.monotonic() < deadline, f"the prewarmed run {out.name} took too long"
        time.sleep(0.2)


def pytest_sessionfinish(session, exitstatus):
    for proc in _prewarm_proc:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def run_2021(tmp_path_factory):
    """run_2021(key, **kwargs): an in-process run (of us-east-1-2021 unless kwargs name
    another playbook), cached by key."""
    cache = {}

    def get(key: str, **kwargs):
        if key not in cache:
            if key in _prewarm and _prewarm[key][1] == kwargs:
                _wait_for(_prewarm[key][0])
                cache[key] = load_run(_prewarm[key][0])
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
