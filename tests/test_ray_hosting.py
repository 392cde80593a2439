"""Agents on real Ray actors exchanging real ZeroMQ messages give exactly the results of
the in-process hosting."""
import filecmp

import pytest

import orchestrator

FILES = ("events.jsonl", "metrics.csv", "score.json")


@pytest.fixture(scope="module")
def inprocess_run(tmp_path_factory):
    return orchestrator.run(runbook="protect-early", seed=11, duration="40m", out=tmp_path_factory.mktemp("ip") / "run")


@pytest.mark.parametrize("placement", ["kind", "single", "agent"])
def test_ray_hosted_run_is_identical_to_the_in_process_run(ray_session, inprocess_run, tmp_path, placement):
    ray_run = orchestrator.run(runbook="protect-early", seed=11, duration="40m", out=tmp_path / "run",
                               hosting="ray", placement=placement)
    assert ray_run.meta["hosting"] == "ray"
    assert len(inprocess_run.events) > 10  # trigger, alarms, actions: the comparison has substance
    for name in FILES:
        assert filecmp.cmp(inprocess_run.dir / name, ray_run.dir / name, shallow=False), name


def live_gameday_actors(ray):
    return [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("gameday:")]


def test_actors_are_gone_after_the_run(ray_session, tmp_path):
    orchestrator.run(runbook="none", duration="5m", out=tmp_path / "run", hosting="ray", placement="kind")
    assert live_gameday_actors(ray_session) == []


def test_cli_runs_on_ray(ray_session, tmp_path):
    from click.testing import CliRunner

    from orchestrator.cli import main

    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--runbook", "none", "--duration", "3m", "--out", str(out),
                                       "--hosting", "ray", "--no-progress", "--json"])
    assert result.exit_code == 0, result.output
    meta = (out / "meta.json").read_text()
    assert '"hosting": "ray"' in meta


def test_malformed_frames_sent_to_a_host_are_counted_and_change_nothing(ray_session):
    """Random bytes, a wrong protocol version, an unknown kind, and a well-formed message
    from a peer that is not part of the world, sent to a host's real ROUTER socket in the
    middle of a run."""
    import msgpack
    import zmq

    from orchestrator.hosting import InProcessHost
    from orchestrator.ray_hosting import RayHost
    from orchestrator.runner import RunSpec, prepare

    _, _, _, plan = prepare(RunSpec(runbook="protect-early", seed=4, duration=600))
    clean = InProcessHost(plan)
    hosted = RayHost(plan, placement="kind")
    ctx = zmq.Context()
    try:
        endpoint = hosted.endpoints["device"]  # (an actor's methods wait behind its run loop)
        attacker = ctx.socket(zmq.DEALER)
        attacker.setsockopt(zmq.LINGER, 0)
        attacker.setsockopt(zmq.IDENTITY, b"intruder")
        attacker.connect(endpoint)
        bad = [b"\x00\xffrandom bytes", msgpack.packb([99, "flow", "x", "bridge", 1, 1, {}]),
               msgpack.packb([1, "nonsense", "x", "bridge", 1, 1, {}]),
               msgpack.packb([1, "apply", "internal-clients", "bridge", 1, 100, {"op": "restart", "args": {}}])]
        for t in range(600):
            if t == 100:
                for frame in bad:
                    attacker.send(frame)
            a, b = clean.step(), hosted.step()
            assert a.metrics == b.metrics and a.events == b.events, t
        assert hosted.rejected_frames == len(bad)
    finally:
        hosted.close()
        ctx.destroy(linger=0)
