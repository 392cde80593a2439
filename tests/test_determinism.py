"""Same playbook, seed and actions give identical results; snapshots restore exactly."""
import filecmp

import msgpack
import numpy as np
import pytest

import orchestrator
from agents import PROTOCOL_VERSION, Message
from orchestrator.hosting.inprocess import InProcessHost, checked_copy
from orchestrator.playbook.loader import load_playbook
from orchestrator.playbook.runbooks import load_runbook
from orchestrator.hosting.wire import WireError, admit, decode, encode
from orchestrator.engine.world import build_plan

pytestmark = pytest.mark.slow  # whole runs played twice and compared file by file


def test_same_seed_gives_identical_run_directories(tmp_path):
    a = orchestrator.run(runbook="protect-early", seed=7, duration="1h", out=tmp_path / "a")
    b = orchestrator.run(runbook="protect-early", seed=7, duration="1h", out=tmp_path / "b")
    for name in ("events.jsonl", "metrics.csv", "score.json", "playbook.yaml", "runbook.yaml", "columns.json"):
        assert filecmp.cmp(a.dir / name, b.dir / name, shallow=False), name
    assert len(a.events) > 5  # trigger, alarms, actions: there is something to compare


def test_different_seeds_differ(tmp_path):
    a = orchestrator.run(runbook="none", seed=1, duration="50m", out=tmp_path / "a")
    b = orchestrator.run(runbook="none", seed=2, duration="50m", out=tmp_path / "b")
    assert not a.metrics.equals(b.metrics)


def _host(seed=3, runbook="protect-early"):
    pb = load_playbook("us-east-1-2021")
    _, rb = load_runbook(runbook, pb)
    return InProcessHost(build_plan(pb, rb, seed, duration=3600))


def test_snapshot_and_restore_continue_bit_identically():
    host = _host()
    for _ in range(2000):  # into the storm, with actions in flight
        host.step()
    snap = host.snapshot()
    first = [host.step() for _ in range(600)]
    host.restore(snap)
    second = [host.step() for _ in range(600)]
    assert [r.metrics for r in first] == [r.metrics for r in second]
    assert [r.events for r in first] == [r.events for r in second]


def test_a_fresh_world_restored_from_a_snapshot_matches_the_original():
    a = _host()
    for _ in range(1900):
        a.step()
    b = _host()
    b.restore(a.snapshot())
    assert [a.step().metrics for _ in range(300)] == [b.step().metrics for _ in range(300)]


def test_wire_roundtrip_and_rejections():
    msg = Message(kind="health", src="a", dst="b", body={"ratio": 0.5}, seq=3, tick=9)
    assert decode(encode(msg)) == msg
    bad = [b"\x00\x01garbage", msgpack.packb([99, "health", "a", "b", 1, 1, {"ratio": 1}]),
           msgpack.packb([PROTOCOL_VERSION, "nonsense", "a", "b", 1, 1, {}]), msgpack.packb([PROTOCOL_VERSION, "health", "a", "b", 1, 1, {}]),
           msgpack.packb({"not": "a list"})]
    for frame in bad:
        with pytest.raises(WireError):
            decode(frame)


def test_in_process_messages_get_the_checks_and_copies_the_wire_gives():
    """Handed over in one process, a message passes decode's checks (``admit``); a checked
    copy refuses a body that would not come back the same from another process."""
    ok = Message(kind="health", src="a", dst="b", body={"ratio": 0.5, "per": [1, 2.0, None]}, seq=3, tick=9)
    assert admit(ok) is ok and checked_copy(ok) == ok and checked_copy(ok).body is not ok.body
    for bad in (Message("nonsense", "a", "b", {}, 1, 1), Message("health", "a", "b", {}, 1, 1),
                Message("health", "a", "b", {"ratio": 1.0}, "1", 1)):
        with pytest.raises(WireError) as admitted:
            admit(bad)
        with pytest.raises(WireError) as decoded:
            decode(encode(bad))  # (encode checks nothing)
        assert str(admitted.value) == str(decoded.value)
    for body in ({"ratio": (1, 2)}, {"ratio": np.int64(3)}, {"ratio": np.float64(0.5)}, {"ratio": {1: 2.0}}):
        with pytest.raises(AssertionError, match="health"):
            checked_copy(Message("health", "a", "b", body, 1, 1))


def test_malformed_frames_are_counted_and_change_nothing():
    clean, dirty = _host(seed=5), _host(seed=5)
    for t in range(900):
        if t % 100 == 50:
            dirty.inject(b"\xffnot a message")
            dirty.inject(msgpack.packb([PROTOCOL_VERSION, "apply", "x", "bridge", 1, t, {"op": "restart"}]))  # no args
        assert clean.step().metrics == dirty.step().metrics
    assert dirty.rejected_frames == 18
