"""Agents on real Ray actors exchanging real ZeroMQ messages give exactly the results of
the in-process hosting."""
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import orchestrator
from reports.rundir import load_run
from tests.helpers import built_in_from

pytestmark = [pytest.mark.slow, pytest.mark.ray]  # real Ray actors, some killed, frozen or interrupted

FILES = ("events.jsonl", "metrics.csv", "score.json")


@pytest.fixture(scope="module")
def flagship(tmp_path_factory):
    """The 2021 incident and its first ten minutes of response, after a five-minute prologue
    (the built-in playbook's clock started at 07:25), with the protect-early runbook."""
    path = built_in_from(tmp_path_factory.mktemp("playbook"), "us-east-1-2021", "07:25")
    return dict(playbook=path, runbook="protect-early", duration="15m")


@pytest.fixture(scope="module")
def inprocess_run(tmp_path_factory, flagship):
    return orchestrator.run(seed=11, out=tmp_path_factory.mktemp("ip") / "run", **flagship)


@pytest.mark.parametrize("placement", ["kind", "single", "agent"])
def test_ray_hosted_run_is_identical_to_the_in_process_run(ray_session, flagship, inprocess_run, tmp_path, placement):
    """... and its actors are gone once the run is over (whichever the placement)."""
    ray_run = orchestrator.run(seed=11, out=tmp_path / "run", hosting="ray", placement=placement, **flagship)
    assert live_gameday_actors(ray_session) == []
    assert ray_run.meta["hosting"] == "ray"
    assert len(inprocess_run.events) > 10  # trigger, alarms, actions: the comparison has substance
    for name in FILES:
        assert filecmp.cmp(inprocess_run.dir / name, ray_run.dir / name, shallow=False), name


def test_the_2025_world_on_ray_is_identical_to_the_in_process_run(ray_session, tmp_path):
    """The second scenario, one actor per kind of agent: the DNS race, the leases'
    health reports (with the queue wait they carry) and a repair by the runbook (its
    clients recover from 07:07, confirmed after their hold); from 06:29, a minute before the race."""
    kwargs = dict(playbook=built_in_from(tmp_path, "us-east-1-2025", "06:29"),
                  runbook="restore-dns-fast", seed=5, duration="51m")
    local = orchestrator.run(out=tmp_path / "ip", **kwargs)
    hosted = orchestrator.run(out=tmp_path / "ray", hosting="ray", placement="kind", **kwargs)
    assert local.score["recovered"]["dynamodb-clients"]["reached"]  # the race happened and was repaired
    for name in FILES:
        assert filecmp.cmp(local.dir / name, hosted.dir / name, shallow=False), name


def test_a_sharded_world_on_ray_is_identical_to_the_sharded_world_in_process(ray_session, flagship, tmp_path):
    """Three shards per population, the shards on three actors (placement kind)."""
    kwargs = dict(seed=12, shards=3, **flagship)
    local = orchestrator.run(out=tmp_path / "ip", **kwargs)
    hosted = orchestrator.run(out=tmp_path / "ray", hosting="ray", placement="kind", **kwargs)
    assert hosted.meta["shards"]["internal-clients"] == 3 and "internal-clients#2.ok" in hosted.metrics
    assert len(local.events) > 10
    for name in FILES:
        assert filecmp.cmp(local.dir / name, hosted.dir / name, shallow=False), name


def test_shards_of_a_population_are_placed_on_different_actors():
    from orchestrator.hosting.ray_hosting import place
    from orchestrator.runs.runner import RunSpec, prepare

    _, _, _, plan = prepare(RunSpec(duration=60, shards=3))
    groups = {host: [a.name for a in agents] for host, agents in place(plan, "kind").items()}
    homes = [host for host, names in groups.items() if any(n.startswith("internal-clients#") for n in names)]
    assert sorted(homes) == ["population", "population#1", "population#2"]


def live_gameday_actors(ray):
    return [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("gameday:")]


def test_malformed_frames_sent_to_a_host_are_counted_and_change_nothing_and_a_lost_actor_without_snapshots_ends_the_run(
        ray_session):
    """Random bytes, a wrong protocol version, an unknown kind, and a well-formed message
    from a peer that is not part of the world, sent to a host's real ROUTER socket in the
    middle of a run. Then, the same world's hosts having taken no snapshots, one of them is
    killed: the run ends with a clear error. (One world on Ray for both: snapshots play no
    part in how a host reads its frames.)"""
    import signal

    import msgpack
    from agents import PROTOCOL_VERSION
    import zmq

    from orchestrator.errors import HostingError
    from orchestrator.hosting.inprocess import InProcessHost
    from orchestrator.hosting.ray_hosting import RayHost
    from orchestrator.runs.runner import RunSpec, prepare

    _, _, _, plan = prepare(RunSpec(runbook="protect-early", seed=4, duration=900))
    clean = InProcessHost(plan)
    hosted = RayHost(plan, placement="kind", snapshot_every=0)
    ctx = zmq.Context()
    try:
        endpoint = hosted.endpoints["device"]  # (an actor's methods wait behind its run loop)
        attacker = ctx.socket(zmq.DEALER)
        attacker.setsockopt(zmq.LINGER, 0)
        attacker.setsockopt(zmq.IDENTITY, b"intruder")
        attacker.connect(endpoint)
        bad = [b"\x00\xffrandom bytes", msgpack.packb([99, "flow", "x", "bridge", 1, 1, {}]),
               msgpack.packb([PROTOCOL_VERSION, "nonsense", "x", "bridge", 1, 1, {}]),
               msgpack.packb([PROTOCOL_VERSION, "apply", "internal-clients", "bridge", 1, 100, {"op": "restart", "args": {}}])]
        for t in range(600):
            if t == 100:
                for frame in bad:
                    attacker.send(frame)
            a, b = clean.step(), hosted.step()
            assert a.metrics == b.metrics and a.events == b.events, t
        assert hosted.rejected_frames == len(bad)

        os.kill(hosted.where["status"]["pid"], signal.SIGKILL)
        with pytest.raises(HostingError, match="host status was lost"):
            for _ in range(250):
                hosted.step()
    finally:
        hosted.close()
        ctx.destroy(linger=0)


def test_control_records_round_trip_by_name_and_malformed_ones_do_not_unpack():
    import msgpack

    from agents import PROTOCOL_VERSION
    from orchestrator.hosting import control as c

    records = [c.Tick(3, {"a": 2}, {"a": 0}, [b"x"]), c.Ahead(4, {"a": 2}, 36, {"a": 0}), c.Count(5, 2),
               c.Rewire("a", "tcp://127.0.0.1:1", 60), c.Stop(),
               c.Hello("a", PROTOCOL_VERSION, 0), c.Beat("a"), c.Snapshot("a", 61, b"blob", b"sig"),
               c.Done(3, {"x": {"m": 1.5}}, [{"tick": 3}], {"b": 1}, 0, []), c.Replayed("a", 59), c.Bye("a")]
    assert {type(r) for r in records} == set(c.RECORDS.values())  # every kind is here
    for r in records:
        assert c.unpack(c.pack(r)) == r and type(c.unpack(c.pack(r))) is type(r)
    for frame in (b"\x00\xff", msgpack.packb(["tick", 1, {}]), msgpack.packb(["launch", 1]), msgpack.packb({"tick": 1}),
                  msgpack.packb([])):
        with pytest.raises(ValueError):
            c.unpack(frame)


def test_paced_mode_never_runs_ahead_of_the_target_pace(ray_session, tmp_path):
    """`gameday run --hosting ray --speed 60`: 60 simulated seconds per wall second, on Ray:
    the pacer holds every tick back until its wall time, so the run can fall behind on a
    loaded machine but never get ahead. (How close it keeps to the pace is a figure of
    benchmarks/bench_live.py, not a test.) It is also the test of the command line on Ray.

    300 ticks: the run's wall time (from its hosts being up to its end) is at least its 299
    tick intervals (4.98 s) plus its closing (about 0.02 s), so the bound below catches a
    pacer about 1% fast, as it did over 600 ticks (10 s)."""
    from click.testing import CliRunner

    from orchestrator.cli import main

    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["run", "--runbook", "none", "--duration", "5m", "--speed", "60", "--out", str(out),
                                       "--hosting", "ray", "--no-progress", "--no-report", "--json"])
    assert result.exit_code == 0, result.output
    assert '"hosting": "ray"' in (out / "meta.json").read_text()
    run = load_run(out)
    pace = run.meta["duration_s"] / run.meta["wall_seconds"]
    print(f"\npaced at 60x: {pace:.2f} simulated s per wall s ({100 * (pace / 60 - 1):+.2f}%)")
    assert run.meta["ticks_done"] == 300 and pace <= 60 * 1.01


def test_ctrl_c_stops_a_ray_hosted_run_and_leaves_no_process(tmp_path):
    """SIGINT to `gameday run --hosting ray`: exit 130, a readable partial run directory,
    and no process of the run's own Ray (everything the command started) left running."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    from reports.rundir import load_run

    import shutil
    import tempfile

    root = Path(__file__).resolve().parents[1]
    ray_tmp = Path(tempfile.mkdtemp(prefix="gd", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    out = tmp_path / "run"
    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp), GAMEDAY_RUN_HOSTING="ray")
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", "--runbook", "none", "--duration", "4h",
                             "--out", str(out), "--no-progress"], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        metrics = out / "metrics.csv"
        if metrics.exists() and metrics.read_text().count("\n") > 300:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    family = _descendants(proc.pid)
    assert any("GroupHost" in args for args in family.values()), family  # the actors are there to be stopped
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    run = load_run(out)
    # (the metrics had a header and 300 rows when SIGINT was sent: 300 ticks at least)
    assert run.meta["status"] == "interrupted" and len(run.metrics) == run.meta["ticks_done"] >= 300

    def leftovers():
        return [pid for pid in family if Path(f"/proc/{pid}").exists()
                and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]]

    end = time.monotonic() + 30
    while leftovers() and time.monotonic() < end:
        time.sleep(0.5)
    assert leftovers() == []
    shutil.rmtree(ray_tmp, ignore_errors=True)


def _descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid``: its id and command line."""
    import subprocess

    rows = [line.split(None, 2) for line in subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True,
                                                            text=True).stdout.splitlines()[1:]]
    children: dict[int, list] = {}
    args = {}
    for row in rows:
        p, pp = int(row[0]), int(row[1])
        children.setdefault(pp, []).append(p)
        args[p] = row[2] if len(row) > 2 else ""
    found, todo = {}, [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found[c] = args[c]
            todo.append(c)
    return found


def test_a_two_node_cluster_with_hosts_on_both_nodes_gives_identical_results(cluster_check):
    """A separate Ray (a local multi-node cluster) in its own process, since this session's
    Ray is already running."""
    assert cluster_check["same"]
    assert cluster_check["cluster_nodes"] == 2 and cluster_check["host_nodes"] == 2  # the agents really are spread


def _group_hosts(pid: int) -> dict[int, int]:
    """The Ray actor processes hosting agents below ``pid``: process id -> resident KiB."""
    from pathlib import Path

    out = {}
    for p, args in _descendants(pid).items():
        if "GroupHost" in args:
            try:
                status = Path(f"/proc/{p}/status").read_text()
            except OSError:
                continue
            out[p] = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return out


def test_sigkilled_actors_are_replaced_and_the_run_is_unchanged(ray_session, tmp_path):
    """SIGKILL two actors' processes, one after the other, in the middle of a
    `gameday run --hosting ray`: the run completes, every file but the restart lines of
    events.jsonl is identical to the in-process run, and the restarts are journalled.
    (The command joins the tests' shared Ray rather than starting one of its own: a
    replacement is the orchestrator's, whoever started the Ray, and the other tests of a
    command on Ray start theirs.)"""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    # 07:25 to 08:05: the incident, its alarms and the historical runbook's first actions (the
    # last of the 17 events at 08:02:03), 5 simulated minutes after the second kill. No report:
    # the files compared are the run's own, and the report is made from them after the run.
    args = ["run", built_in_from(tmp_path, "us-east-1-2021", "07:25"), "--runbook", "historical", "--seed", "2",
            "--duration", "40m", "--no-progress", "--json", "--no-report"]
    clean = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args, "--out", str(tmp_path / "clean"),
                            "--hosting", "inprocess"], cwd=root, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr[-2000:]

    out = tmp_path / "killed"
    gcs = ray_session.get_runtime_context().gcs_address
    # (this process started the shared Ray: its actors' processes are below this one; any of an
    # earlier test's still on their way out are not this run's)
    earlier = set(_group_hosts(os.getpid()))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args, "--out", str(out), "--hosting", "ray",
                             "--address", gcs], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        victims = []
        deadline = time.monotonic() + 240
        for rows in (600, 2100):  # 07:35 and 08:00
            while time.monotonic() < deadline:
                metrics = out / "metrics.csv"
                if metrics.exists() and metrics.read_bytes().count(b"\n") > rows:  # (MBs read every 50 ms)
                    break
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                time.sleep(0.05)
            hosts = {p: kib for p, kib in _group_hosts(os.getpid()).items() if p not in earlier}
            if not victims:  # first the biggest (the populations), then another of the original actors
                victims.append(max(hosts, key=hosts.get))
                originals = set(hosts)
            else:
                victims.append(min(originals - set(victims), key=lambda p: hosts.get(p, 0)))
            os.kill(victims[-1], signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()

    for name in ("metrics.csv", "score.json"):
        assert (out / name).read_text() == (tmp_path / "clean" / name).read_text(), name
    lines = (out / "events.jsonl").read_text().splitlines()
    restarts = [json.loads(line) for line in lines if '"agent": "orchestrator"' in line]
    kept = [line for line in lines if '"agent": "orchestrator"' not in line]
    assert kept == (tmp_path / "clean" / "events.jsonl").read_text().splitlines()
    assert len(kept) > 15  # trigger, alarms, actions, a status post: the comparison has substance
    print("\n" + "\n".join(f"restart at tick {r['tick']}: {r['host']} ({r['reason']}), replayed "
                            f"{r['replayed_ticks']} ticks from {r['snapshot_tick']} in {r['seconds']} s" for r in restarts))
    assert [r["event"] for r in restarts] == ["host_restarted", "host_restarted"]
    assert restarts[0]["host"] != restarts[1]["host"] and all(r["replayed_ticks"] <= 60 for r in restarts)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["host_restarts"] == 2


def test_a_frozen_actor_is_noticed_by_its_missing_heartbeats_and_replaced(ray_session, monkeypatch):
    """SIGSTOP: the process is alive to Ray but silent; the orchestrator notices the
    missing heartbeats, replaces it, and the world goes on with the same results: in
    lockstep, then stepping ahead (``run_ahead``), where the hosts tell each other their
    counts and the replacement replays with its peers' Counts sent again. (One world on
    Ray for both: it steps ahead from tick 500, and its host frozen then is the one that
    replaced the first.)"""
    import os
    import signal
    import time

    from orchestrator.hosting import ray_hosting
    from orchestrator.hosting.inprocess import InProcessHost
    from orchestrator.hosting.ray_hosting import AHEAD_TICKS, RayHost
    from orchestrator.runs.runner import RunSpec, prepare

    _, _, _, plan = prepare(RunSpec(runbook="protect-early", seed=9, duration=1000))
    # (on the kind placement's 8 hosts, which keep the round trip unless told otherwise)
    monkeypatch.setattr(ray_hosting, "AHEAD_MAX_HOSTS", 8)
    clean, hosted = InProcessHost(plan), RayHost(plan, placement="kind", snapshot_every=50)
    journal = {"lockstep": [], "stepping ahead": []}
    frozen = []
    try:
        for t in range(1000):
            if t == 500:
                hosted.run_ahead()
            if t in (180, 680):
                frozen.append(hosted.where["device"]["pid"])
                os.kill(frozen[-1], signal.SIGSTOP)
            a, b = clean.step(), hosted.step()
            journal["lockstep" if t < 500 else "stepping ahead"] += [e for e in b.events if e["agent"] == "orchestrator"]
            assert a.metrics == b.metrics, t
            assert a.events == [e for e in b.events if e["agent"] != "orchestrator"], t
    finally:
        hosted.close()
    lockstep, ahead = journal["lockstep"], journal["stepping ahead"]
    assert [(e["host"], e["snapshot_tick"], e["replayed_ticks"]) for e in lockstep] == [("device", 150, 30)]
    # (how far the hosts were ahead when it froze depends on timing)
    assert [e["host"] for e in ahead] == ["device"] and ahead[0]["snapshot_tick"] % 50 == 0
    assert 0 < ahead[0]["replayed_ticks"] <= 50 + AHEAD_TICKS
    assert "heartbeat" in lockstep[0]["reason"] and "heartbeat" in ahead[0]["reason"]
    assert frozen[0] != frozen[1]  # (the second is the replacement of the first)
    end = time.monotonic() + 30
    for pid in frozen:
        while os.path.exists(f"/proc/{pid}") and "Z" not in open(f"/proc/{pid}/stat").read().split(")")[-1][:3]:
            assert time.monotonic() < end, "a frozen process was left behind"
            time.sleep(0.2)


def test_a_world_left_unread_longer_than_the_heartbeat_limit_keeps_its_hosts(ray_session):
    """A live session pauses, or builds other teams' worlds, while this world's hosts keep
    sending heartbeats nobody reads: when stepping resumes, the queued heartbeats count,
    and no live host is taken for lost (replacing them all made a 10-team session crawl)."""
    import time

    from orchestrator.hosting.ray_hosting import MISSED_BEATS, RayHost
    from orchestrator.hosting.group_host import HEARTBEAT_S
    from orchestrator.runs.runner import RunSpec, prepare

    _, _, _, plan = prepare(RunSpec(runbook="none", duration=60))
    host = RayHost(plan, placement="single")
    try:
        host.step()
        time.sleep(HEARTBEAT_S * MISSED_BEATS + 1.5)
        for _ in range(5):
            res = host.step()
        assert host.restarts == 0 and not any(e["event"] == "host_restarted" for e in res.events)
    finally:
        host.close()


def test_a_first_run_on_a_machine_compiles_its_kernels_before_the_ticks_and_prints_only_gamedays_own_output(tmp_path):
    """On a machine whose compiled kernels are not cached yet (a fresh install), a Ray host
    compiles them as it starts (Agent.prepare), not in the tick of the first failed
    request: a host compiling for seconds sends no heartbeat and would be replaced, again
    and again (before, the built-in scenario went no further than its trigger).

    And a newcomer's first `gameday run` (Ray hosting by default, so it starts a local Ray)
    prints only gameday's own output: its first line is the run's title, not Ray's news
    that it chose token authentication (which stays on, Ray's default). (One command checks
    both: each is a first run starting its own Ray.)"""
    ray_tmp = Path(tempfile.mkdtemp(prefix="gd", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp), NUMBA_CACHE_DIR=str(tmp_path / "numba"))  # an empty cache
    for name in ("RAY_ADDRESS", "GAMEDAY_RUN_HOSTING"):  # a Ray of its own, by the default hosting
        env.pop(name, None)
    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(root / "tests/playbooks/mini_loop.yaml.j2"),
                              "--runbook", "none", "--duration", "10m", "--no-progress", "--no-report",
                              "--out", str(tmp_path / "run")], capture_output=True, text=True, timeout=420, env=env,
                             cwd=root)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[0].startswith("mini-loop / runbook none"), out.stdout[:500]
    assert "Token authentication" not in out.stderr + out.stdout, out.stderr[-2000:]
    run = load_run(tmp_path / "run")
    assert run.meta["hosting"] == "ray"  # (the default hosting)
    assert run.meta["host_restarts"] == 0
    assert run.metrics["clients.failed"].sum() > 0  # failed requests were settled (the kernels ran)
    assert any((tmp_path / "numba").rglob("*.nbc"))  # compiled here, not loaded from the checkout's cache
