"""The default game day runs end to end and writes a complete run directory."""
import pytest

from reports.rundir import load_run
import orchestrator


@pytest.mark.slow
def test_short_historical_run_writes_a_complete_run_directory(tmp_path):
    r = orchestrator.run(duration="45m", out=tmp_path / "run")
    assert r.complete
    assert len(r.metrics) == 45 * 60
    assert r.score["trigger"]["clock"] == "07:30"
    again = load_run(tmp_path / "run")
    assert again.metrics.equals(r.metrics)
    assert (r.events["event"] == "trigger").sum() == 1
