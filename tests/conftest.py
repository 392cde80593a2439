"""Shared fixtures. Long simulated runs are made once per session and shared."""
from __future__ import annotations

import pytest

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
