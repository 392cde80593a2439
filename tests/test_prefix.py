"""A seed's runs share their beginning, played once (``orchestrator.runs.prefix``): every
run so played is identical, score for score, to the same run played whole, and the ticks
saved are those of the shared beginning."""
from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.playbook.files import find_playbook, runbook_files
from orchestrator.runs.prefix import play_shared, trunk
from orchestrator.runs.runner import RunSpec, execute

HERE = Path(__file__).resolve().parent
MINI = str(HERE / "playbooks" / "mini_loop.yaml.j2")
FIX = str(HERE / "playbooks" / "fix_early.yaml")


def shared_against_whole(specs: list[RunSpec]) -> dict:
    shared, ticks = play_shared(specs)
    for spec, data in zip(specs, shared):
        whole = execute(spec, None)
        assert data.score == whole.score, spec.runbook
        assert data.meta["runbook"] == whole.meta["runbook"] and data.meta["ticks_done"] == whole.meta["ticks_done"]
    return ticks


@pytest.mark.slow
def test_runs_branching_from_the_trunk_are_the_runs_played_whole(tmp_path):
    """none (the trunk itself), a fix at 00:04 (branches then), the same fix under another
    name, and a runbook whose rule never holds within the run (it never leaves the trunk:
    it branches at the trunk's last checkpoint)."""
    late = tmp_path / "late.yaml"
    late.write_text("name: too-late\nrules:\n  - {when: {at: \"23:00\"}, do: fix_backoff}\n")
    specs = [RunSpec(playbook=MINI, runbook=rb, seed=4) for rb in ("none", FIX, str(late))]
    ticks = shared_against_whole(specs)
    assert ticks["whole"] == 3 * 1200 and ticks["ticks"] < ticks["whole"]
    whole, branches, played, per_run = trunk(specs)
    assert set(whole) == {0} and set(branches) == {1, 2} and played == per_run == 1200
    assert branches[1].tick <= 240 < branches[1].tick + 30  # the fix acts at 00:04, tick 240
    assert branches[2].tick >= 1200 - 30  # the last checkpoint


def test_without_a_runbook_that_never_acts_the_trunk_stops_when_the_last_one_branches():
    specs = [RunSpec(playbook=MINI, runbook=FIX, seed=2)]
    ticks = shared_against_whole(specs)
    whole, branches, played, per_run = trunk(specs)
    assert not whole and played <= 270 and ticks["ticks"] < per_run + 270


@pytest.mark.slow
@pytest.mark.parametrize("playbook", ["us-east-1-2021", "us-east-1-2025", "us-east-1-2015"])
def test_every_built_in_runbook_played_from_the_shared_beginning_is_the_run_played_whole(playbook):
    books = sorted(runbook_files(playbook, find_playbook(playbook)))
    specs = [RunSpec(playbook=playbook, runbook=rb, seed=3, duration=5400.0) for rb in books]
    ticks = shared_against_whole(specs)
    assert ticks["ticks"] < ticks["whole"]
