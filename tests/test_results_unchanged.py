"""A faster engine gives the same results: short runs of the built-in scenarios and of the
model's features (leases, health checks, queues, DNS, retries, faults, a cache) produce
run directories whose metrics, events, score and attribution are byte for byte those
recorded from the revision before the speed work (tests/results_fixture.py), but for
the deliberate changes of results the fixture lists since, each with its reason. Each is
played twice: with messages handed over as they are in one process (as runs are), and
as decoded copies checked against what was sent (``GAMEDAY_WIRE_CHECK``), so that a
body that is not plain data, or is changed after it is sent, shows."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import results_fixture
from results_fixture import FAST, RUNS, digest, play

#: played one way only, to keep the full test run within its 15 minutes (9 s a way; the
#: other runs send every kind of message it sends)
LONGEST = ("us-east-1-2021 shards, 0.5 s ticks",)
FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "results.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name,wire", [
    pytest.param(n, w, marks=() if n in FAST and w == "handed over" else pytest.mark.slow)
    for w in ("handed over", "checked copies") for n in RUNS if w == "handed over" or n not in LONGEST])
def test_results_are_those_recorded_before(tmp_path, monkeypatch, name, wire):
    monkeypatch.setenv("GAMEDAY_WIRE_CHECK", "1" if wire == "checked copies" else "0")
    recorded = results_fixture.recorded(FIXTURE, name)  # with the deliberate changes of results since, each with its reason
    now = digest(play(name, tmp_path / "run").dir)
    differ = sorted(c for c, h in recorded["columns"].items() if now["columns"].get(c) != h)
    assert not differ, f"{name}: metrics columns that differ from revision {FIXTURE['revision']}: {differ[:12]}"
    assert now["files"] == recorded["files"], f"{name}: result files that differ from revision {FIXTURE['revision']}: " \
        f"{sorted(f for f in recorded['files'] if now['files'].get(f) != recorded['files'][f])}"
