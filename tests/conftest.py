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

import orchestrator


@pytest.fixture(scope="session")
def run_2021(tmp_path_factory):
    """run_2021(key, **kwargs): an in-process run of us-east-1-2021, cached by key."""
    cache = {}

    def get(key: str, **kwargs):
        if key not in cache:
            out = tmp_path_factory.mktemp("run") / key
            cache[key] = orchestrator.run(out=out, **kwargs)
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
