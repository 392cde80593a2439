"""A Ray that gameday starts listens on loopback only, and so do gameday's own sockets
(docs/how-to/live-game-day.md: a session binds loopback): every listening TCP socket of a `gameday serve` on a
Ray of its own (which starts its Ray, actors and tick barriers as a `gameday run` does) and
of a `gameday run` joining a Ray, and of every process below them (the Ray it starts: its
GCS, raylet, agents and the actors), read from /proc while they play; and the tests' shared Ray."""
from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # (the tests that use the shared Ray are marked ray by conftest; the others start their own)

ROOT = Path(__file__).resolve().parents[1]
PLAYBOOK = str(ROOT / "tests" / "playbooks" / "mini_loop.yaml.j2")
LISTEN = "0A"  # TCP_LISTEN, as /proc/net/tcp writes a socket's state


def _address(hex_address: str) -> str:
    """An address as /proc/net/tcp{,6} writes it: 32-bit words in the host's byte order."""
    raw = b"".join(struct.pack("=I", int(hex_address[i:i + 8], 16)) for i in range(0, len(hex_address), 8))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def listening_sockets() -> dict[int, tuple[str, int]]:
    """Every listening TCP socket of this machine: inode -> (address, port)."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:  # (no IPv6)
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == LISTEN:
                address, port = fields[1].split(":")
                found[int(fields[9])] = (_address(address), int(port, 16))
    return found


def process_tree(pid: int) -> dict[int, str]:
    """``pid`` and every process below it: process id -> command line."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue  # (ended meanwhile)
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = {}, [pid]
    while todo:
        p = todo.pop()
        try:
            tree[p] = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        todo += children.get(p, [])
    return tree


def listening_of(processes: dict[int, str]) -> dict[tuple[int, str, int], str]:
    """The listening sockets the processes hold: (process id, address, port) -> its command line."""
    listening = listening_sockets()
    held = {}
    for pid, command in processes.items():
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and int(target[8:-1]) in listening:
                held[(pid, *listening[int(target[8:-1])])] = command
    return held


def on_loopback(address: str) -> bool:
    """Whether ``address`` is loopback: 127.0.0.0/8, ::1, or 127.0.0.1 as an IPv6 socket bound
    to it is written (::ffff:127.0.0.1, which ipaddress does not take for loopback)."""
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def watch(argv: list[str], timeout_s: float = 240) -> tuple[dict, str, subprocess.CompletedProcess]:
    """Run `gameday ARGV` (no RAY_ADDRESS: a Ray of its own unless ARGV names one) and look
    at the listening sockets of its processes every fraction of a second until it ends:
    (every socket seen, every command line seen, the finished process)."""
    ray_tmp = tempfile.mkdtemp(prefix="gd", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    env = dict(os.environ) if "--address" in argv else dict(os.environ, RAY_TMPDIR=ray_tmp)
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, commands = {}, set()
    try:
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            tree = process_tree(proc.pid)
            commands |= set(tree.values())
            seen.update(listening_of(tree))
            time.sleep(0.3)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return seen, "\n".join(commands), subprocess.CompletedProcess(argv, proc.returncode, out, err)


def held_by(seen: dict, name: str) -> int:
    """How many of the sockets ``seen`` processes whose command line names ``name`` hold."""
    return sum(name in command for command in seen.values())


def check_all_on_loopback(seen: dict) -> None:
    """Ray's servers and the actors' were among the sockets ``seen``, and every one was on loopback."""
    for holder in ("gcs_server", "raylet", "GroupHost"):
        assert held_by(seen, holder), (holder, seen)
    exposed = sorted((address, port, command[:100]) for (_, address, port), command in seen.items()
                     if not on_loopback(address))
    assert exposed == [], exposed
    print(f"\n{len(seen)} listening sockets, all on {sorted({address for _, address, _ in seen})}")


def test_a_served_game_day_on_ray_listens_on_loopback_only(tmp_path):
    """`gameday serve --hosting ray`, two teams and the pages, started at once and left to end.

    It stands for `gameday run --hosting ray` on a Ray of its own too (one Ray start-up
    instead of two): a session builds each team's world as a run does (``WorldRun`` ->
    ``HostingOptions.make`` -> ``RayHost``, whose ``ensure_ray`` starts the Ray with
    ``start_local_ray``; the same ``GroupHost`` actors; the same tick barrier ROUTER per
    world), so a run's own Ray, actors and barrier are the ones seen here. A run's own
    sockets are checked when it joins a Ray (below), and one actor per kind of agent on
    the tests' shared Ray (the last test)."""
    seen, commands, done = watch(["serve", PLAYBOOK, "--team", "red", "--team", "blue", "--hosting", "ray",
                                  "--bind", "tcp://127.0.0.1:0", "--web-port", "0", "--start", "--speed", "20",
                                  "--duration", "2m", "--linger", "1", "--no-report", "--out", str(tmp_path / "s")])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gcs_server" in commands
    check_all_on_loopback(seen)
    assert held_by(seen, "orchestrator.cli") >= 3  # Ray's driver, the session's ROUTER, the pages (and the worlds')


def test_a_run_joins_a_ray_on_loopback_at_its_address(ray_session, tmp_path):
    """`--address 127.0.0.1:PORT` of a Ray started as gameday starts one (the tests' shared
    Ray): the command joins it there (Ray would swap 127.0.0.1 for the machine's routable
    address, where that Ray does not answer), starts no Ray, and listens on loopback only."""
    gcs = ray_session.get_runtime_context().gcs_address
    assert gcs.startswith("127.0.0.1:"), gcs
    seen, commands, done = watch(["run", PLAYBOOK, "--runbook", "none", "--duration", "2m", "--hosting", "ray",
                                  "--placement", "single", "--address", gcs, "--no-progress", "--no-report",
                                  "--out", str(tmp_path / "run")])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gcs_server" not in commands  # (the actors are the shared Ray's, below this process)
    assert held_by(seen, "orchestrator.cli") >= 2  # Ray's driver and the tick barrier's ROUTER
    assert [address for _, address, _ in seen if not on_loopback(address)] == []


def test_the_tests_shared_ray_listens_on_loopback_only(ray_session):
    """The tests' Ray (conftest starts it as gameday does), with a world's hosts on it."""
    from orchestrator.hosting.ray_hosting import RayHost
    from orchestrator.runs.runner import RunSpec, prepare

    plan = prepare(RunSpec(playbook=PLAYBOOK, runbook="none", duration=60))[3]
    hosted = RayHost(plan, placement="kind")
    try:
        for _ in range(5):
            hosted.step()
        seen = listening_of(process_tree(os.getpid()))  # (this process started the session's Ray)
    finally:
        hosted.close()
    check_all_on_loopback(seen)
