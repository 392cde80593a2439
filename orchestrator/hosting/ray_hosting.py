"""Multi-process hosting: the agents of a world on Ray actors, their tick messages on ZeroMQ.

The orchestrator places agents on hosts (``placement``), starts one Ray actor per host,
tells each host where the others are, and then runs the tick barrier itself over a
ZeroMQ control socket: tick t starts when every host has finished t-1. Ray carries only
set-up and tear-down calls; nothing per tick goes through Ray. ``RayHost`` has the same
``step()`` as ``InProcessHost``, and gives the same results. Once nothing can come from
outside (``run_ahead``), a world on few hosts steps ahead of the barrier: the hosts count
each other's messages themselves (``control.Ahead``, ``control.Count``).

A host whose process dies (Ray reports its actor dead) or that misses ``MISSED_BEATS``
heartbeats is replaced: a new actor starts from the host's last snapshot, its peers send
it again what they sent since, it replays to the current tick, and the world goes on with
the same results; the restart is an ``orchestrator`` event in the journal. Hosts lost
together are replaced together (one replacement nests in the other and they replay in
lockstep). See ``group_host`` for the host's side.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hmac
import logging
import os
import socket
import time
import uuid


from agents import PROTOCOL_VERSION
from agents.shards import shard_name, source_of
from orchestrator.errors import HostingError, InvalidInput, Issue, setting
from orchestrator.hosting.control import Ahead, Beat, Done, Hello, Replayed, Rewire, Snapshot, Stop, Tick, pack, unpack
from orchestrator.hosting.fabric import LOOPBACK, FabricError, Sockets, is_loopback, node_address, recv, send
from orchestrator.hosting.group_host import HEARTBEAT_S, sign
from orchestrator.hosting.inprocess import TickResult, leaving
from orchestrator.hosting.wire import WireError, decode
from orchestrator.engine.world import WorldPlan

PLACEMENTS = ("kind", "agent", "single")
NAMESPACE = "gameday"
ACTOR_PREFIX = "gameday:"  # actors are named gameday:<run>:<host>, so that leftovers can be found
START_TIMEOUT_S = 120.0
TICK_TIMEOUT_S = 60.0
SNAPSHOT_EVERY = 60  # ticks; a replacement host replays at most this many
MISSED_BEATS = 10  # a host silent for this many heartbeats is taken for lost
AHEAD_TICKS = 32  # run_ahead: how far the hosts may step beyond the last tick collected
# Stepping ahead costs each host a Count to every peer a tick, H(H-1) frames in all, where the
# orchestrator's round trip costs 2H: worlds on more hosts keep the round trip (overlapped with
# the caller's scoring and journalling one tick ahead).
AHEAD_MAX_HOSTS = 3


def place(plan: WorldPlan, placement: str) -> dict[str, list]:
    """Host id -> the agents it hosts: one host per kind of agent (and per shard index:
    the second shards of every sharded population share a host, and so on), per agent,
    or one for all."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r}: expected one of {', '.join(PLACEMENTS)}")
    groups: dict[str, list] = {}
    for a in plan.agents:
        host = {"kind": a.kind.split(":")[0], "agent": a.name, "single": "world"}[placement]
        index = a.name[len(source_of(a.name)) + 1:]
        if placement == "kind" and index not in ("", "0"):
            host = shard_name(host, int(index))
        groups.setdefault(host, []).append(a)
    return groups


#: set to 1 to see the actors' and Ray's own worker output in the terminal (it stays in Ray's log files)
WORKER_LOGS_ENV = "GAMEDAY_RAY_WORKER_LOGS"


def ensure_ray(address: str | None = None):
    """Ray, started or joined: the cluster at ``address`` (else RAY_ADDRESS) if one is
    named, else a Ray of this process's own on loopback (``start_local_ray``)."""
    import ray

    if not ray.is_initialized():
        # A local Ray announces that it chose token authentication (its default, kept as it
        # is): Ray's news, not the user's, and otherwise the first line of every run.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        # Worker output (Ray's notes on starting workers) is not the user's either: it stays in
        # Ray's log files. A host that fails raises its own error, traceback included, here.
        options = dict(logging_level="WARNING", configure_logging=True,
                       log_to_driver=os.environ.get(WORKER_LOGS_ENV, "") not in ("", "0"))
        # A Ray of its own unless told otherwise, as docs/how-to/run.md says: left to itself, ray.init
        # joins any Ray another process started on this machine (and fails when that one goes).
        given = address or os.environ.get("RAY_ADDRESS") or "local"
        if given == "local":
            start_local_ray(**options)
        else:
            _join_ray(ray, given, options)
    return ray


def start_local_ray(**options) -> None:
    """Start a Ray for this process alone, every server of it (GCS, raylet, object manager,
    the workers' and agents' servers) listening on 127.0.0.1 only, without the dashboard.
    ``options``: further ray.init arguments (logging, the tests' CPU count). The one way
    gameday, and the tests' shared Ray, start a local Ray."""
    import ray

    with _loopback_kept():  # (Ray's servers listen on loopback only when the node's address is loopback)
        ray.init(address="local", _node_ip_address=LOOPBACK, include_dashboard=False, **options)


def _join_ray(ray, address: str, options: dict) -> None:
    """Connect to the running cluster at ``address``, as it is configured."""
    unreachable = _unreachable(address)
    if unreachable:
        raise InvalidInput("gameday", "options", [Issue(_address_field(), address, unreachable)])
    # A Ray on loopback (one started as above: the tests' shared Ray) answers only there, so
    # 127.0.0.1 is joined as given, not as the machine's routable address.
    kept = _loopback_kept() if _on_loopback(address) else contextlib.nullcontext()
    try:
        with kept:
            ray.init(address=address, include_dashboard=False, **options)
    except ConnectionError as e:  # (no cluster to join, or one that refused this driver)
        raise InvalidInput("gameday", "options", [Issue(
            _address_field(), address, f"a Ray cluster this machine can join ({str(e).splitlines()[0]})")]) from None


@contextlib.contextmanager
def _loopback_kept():
    """While Ray starts or is joined in here, an address of 127.0.0.1 stays 127.0.0.1: ray.init
    swaps it for the machine's routable address (for other nodes to reach) unless multi-node
    clusters are off, as Ray has them on macOS and Windows. RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    says so, but Ray reads it once, at import: the flag it sets is switched here instead."""
    from ray._private import ray_constants  # (no public API keeps a node on loopback)

    clusters = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = clusters


def _on_loopback(address: str) -> bool:
    """Whether a cluster address (HOST:PORT) names this machine's loopback."""
    return is_loopback(address.removeprefix("ray://").rpartition(":")[0])  # (a name, or no host as "auto": False)


def _address_field() -> str:
    return f"{setting('address')} (or RAY_ADDRESS)"

ADDRESS_WAIT_S = 5.0


def _unreachable(address: str) -> str | None:
    """What is wrong with ``address`` if nothing answers there, else None. Checked before
    ray.init, which retries an address that does not answer for minutes."""
    if address == "auto":  # (Ray's own search of this machine; "local" never gets here)
        return None
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return "auto, local, HOST:PORT (the head's GCS, as `ray start --head` prints) or ray://HOST:PORT"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=ADDRESS_WAIT_S).close()
    except OSError as e:
        why = "no answer" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        return f"the address of a running Ray cluster's head (nothing answered there within {ADDRESS_WAIT_S:g} s: {why})"
    return None


def worker_logs() -> str:
    """Where the actors' output went, for an error message."""
    try:
        import ray._private.worker as worker  # no public API names the session's log folder

        return f"the actors' output is in {worker._global_node.get_logs_dir_path()}"
    except Exception:  # noqa: BLE001 - only a hint
        return "the actors' output is in Ray's session logs"


class RayHost:
    """A world's agents on Ray actors exchanging ZeroMQ messages (a ``host.Host``)."""

    local = False

    def __init__(self, plan: WorldPlan, placement: str = "kind", address: str | None = None, spread: bool = False,
                 snapshot_every: int = SNAPSHOT_EVERY):
        """``spread``: put the hosts on the cluster's live nodes in turn (a host goes elsewhere
        if its node cannot take it). ``snapshot_every``:
        ticks between snapshots of each host, from which a lost host is replaced (0: never;
        then a lost host ends the run)."""
        self.plan = plan
        self.groups = place(plan, placement)
        self.owner = {a.name: host for host, agents in self.groups.items() for a in agents}
        self.index = {a.name: i for i, a in enumerate(plan.agents)}
        self.tick = 0
        self.rejected_frames = 0  # malformed frames: the hosts' and the control socket's
        self.control_rejected = 0
        self.rejected_by: dict[str, int] = {h: 0 for h in self.groups}  # as last reported by each host
        self.rejected_before_restarts = 0
        self.expected: dict[str, dict[str, int]] = {h: {} for h in self.groups}
        self.sockets = Sockets()
        self.actors: dict = {}
        self.loops: dict = {}  # host -> the reference of its run() call
        self.endpoints: dict[str, str] = {}  # host -> its ROUTER, where the other hosts send
        self.where: dict[str, dict] = {}  # host -> its process id, Ray node and endpoint
        self.spread = spread
        self.snapshot_every = snapshot_every
        self.key = os.urandom(32)  # signs the hosts' snapshots
        self.snapshots: dict[str, tuple[int, bytes]] = {}  # host -> (tick, state) it can restart from
        self.fresh: dict[str, tuple[int, bytes]] = {}  # a snapshot whose tick's "done" has not come yet
        self.sent_log: dict[int, dict[str, dict[str, int]]] = {}  # tick -> destination host -> source -> count
        self.injected: dict[int, dict[str, list[bytes]]] = {}  # tick consumed -> host -> frames from outside
        self.last_done: dict[str, int] = {h: -1 for h in self.groups}
        self.last_heard: dict[str, float] = {}
        self.generation: dict[str, int] = {h: 0 for h in self.groups}
        self.pending: list[tuple[str, list]] = []  # records read while waiting for another one
        self.journal: list[dict] = []  # the orchestrator's own events, for the next tick's result
        self.restarts = 0
        self.replacing = 0  # replacements under way (one nests in another when hosts die together)
        self.stepping = False
        self.begun = -1  # the last tick sent to the hosts
        self.ahead = False  # run_ahead was called
        self.ahead_from: int | None = None  # the first tick the hosts stepped ahead (control.Ahead)
        self.ahead_counts: dict[str, dict[str, int]] = {}  # what was sent in the tick before it, by destination
        self.granted = -1  # the last tick they may step
        self.early: dict[int, dict[str, Done]] = {}  # tick -> host -> its Done, come before the tick is collected
        self.deadline = 0.0
        self.checked = 0.0
        self.run_id = uuid.uuid4().hex[:8]
        self.ray = ensure_ray(address)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # -- start-up ---------------------------------------------------------------------------
    def _launch(self, host: str, snapshot: bytes | None = None):
        from orchestrator.hosting.group_host import GroupHost

        actor_cls = self.ray.remote(num_cpus=0, max_restarts=0)(GroupHost)
        generation = self.generation[host]
        name = f"{ACTOR_PREFIX}{self.run_id}:{host}" + (f":{generation}" if generation else "")
        options = {"scheduling_strategy": self._node_for(host)} if self.spread else {}
        agents = [(a.kind, a.name, a.spec) for a in self.groups[host]]
        return actor_cls.options(name=name, namespace=NAMESPACE, **options).remote(
            host, dataclasses.asdict(self.plan.info), agents, self.owner, self.snapshot_every, self.key, snapshot)

    def _node_for(self, host: str):
        """The hosts dealt over the live nodes in turn. Ray's own SPREAD strategy is best
        effort: it put every host of a fresh two-node cluster on one node (a CI run)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = sorted(n["NodeID"] for n in self.ray.nodes() if n["Alive"])
        turn = list(self.groups).index(host) + self.generation[host]  # a replacement tries the next node
        return NodeAffinitySchedulingStrategy(nodes[turn % len(nodes)], soft=True)

    def _start(self) -> None:
        from orchestrator.hosting.inprocess import load_kernels

        ray = self.ray
        load_kernels(self.plan)  # (once here, not in every host at once)
        self.control, self.control_endpoint = self.sockets.bind_router(node_address())
        for host in self.groups:
            self.actors[host] = self._launch(host)
        self.where = dict(zip(self.actors, ray.get([a.where.remote() for a in self.actors.values()],
                                                   timeout=START_TIMEOUT_S)))
        self.endpoints = {host: w["endpoint"] for host, w in self.where.items()}
        ray.get([a.connect.remote(self.endpoints, self.control_endpoint) for a in self.actors.values()],
                timeout=START_TIMEOUT_S)
        self.deadline = time.monotonic() + START_TIMEOUT_S
        def fail(lost: str, reason: str):
            raise HostingError(f"host {lost} was lost while starting ({reason}); {worker_logs()}")

        for host in self.groups:
            self._await(host, Hello, fail)
        # Set-up calls are done: now each actor's run() may block its method queue.
        self.loops = {host: a.run.remote() for host, a in self.actors.items()}

    # -- reading the control socket -------------------------------------------------------------
    def _read(self, on_lost) -> tuple[str, tuple]:
        """The next record from a host. Heartbeats and snapshots are taken in passing; a
        lost host is handed to ``on_lost(host, reason)``."""
        while True:
            if self.pending:
                return self.pending.pop(0)
            now = time.monotonic()
            # Judge silence only with nothing left unread: the orchestrator may not have read
            # this socket for a while (a session building other worlds, or paused).
            if now - self.checked > HEARTBEAT_S and not self.control.poll(0):
                self.checked = now
                for host, generation, reason in self._lost_hosts():
                    if self.generation[host] == generation:  # not replaced meanwhile by a nested call
                        on_lost(host, reason)
                continue
            if now > self.deadline:
                raise HostingError(f"hosts did not answer in time; {worker_logs()}")
            if not self.control.poll(int(HEARTBEAT_S * 1000)):
                continue
            frames = recv(self.control)
            host = frames[0].decode("utf-8", "replace")
            try:
                rec = unpack(frames[-1])
            except ValueError:
                rec = None
            if rec is None or len(frames) != 2 or host not in self.groups:
                self.control_rejected += 1
                continue
            self.last_heard[host] = time.monotonic()
            if isinstance(rec, Beat):
                continue
            if isinstance(rec, Snapshot):
                self._take_snapshot(host, rec)
                continue
            if isinstance(rec, Hello) and rec.version != PROTOCOL_VERSION:
                raise HostingError(f"host {host} speaks protocol version {rec.version!r}, expected {PROTOCOL_VERSION}")
            return host, rec

    def _await(self, host: str, kind: type, on_lost) -> tuple:
        """Wait for one record from ``host``, keeping the others for later."""
        held = []
        try:
            while True:
                got = self._read(on_lost)
                if got[0] == host and isinstance(got[1], kind):
                    return got[1]
                held.append(got)
        finally:
            self.pending[:0] = held

    def _take_snapshot(self, host: str, rec: Snapshot) -> None:
        blob, signature = rec.blob, rec.signature
        if not (isinstance(blob, bytes) and isinstance(signature, bytes)
                and hmac.compare_digest(sign(self.key, blob), signature)):
            self.control_rejected += 1
            return
        self.fresh[host] = (int(rec.tick), blob)

    def _lost_hosts(self) -> list[tuple[str, int, str]]:
        """(host, generation, why) of every host whose process died or that went silent."""
        lost = []
        if self.loops:
            refs = {ref: host for host, ref in self.loops.items()}
            done, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=0)
            for ref in done:
                try:
                    self.ray.get(ref)  # raises the host's own error if it failed: that ends the run
                except self.ray.exceptions.RayActorError as e:
                    lost.append((refs[ref], self.generation[refs[ref]], f"its process died: {type(e).__name__}"))
                    continue
                raise HostingError(f"host {refs[ref]} stopped before it was told to; {worker_logs()}")
        now = time.monotonic()
        for host in self.loops:
            silent = now - self.last_heard.get(host, now)
            if silent > HEARTBEAT_S * MISSED_BEATS and host not in {h for h, _, _ in lost}:
                lost.append((host, self.generation[host], f"no heartbeat for {silent:.1f} s"))
        return lost

    # -- the tick barrier ---------------------------------------------------------------------
    def _keep_from(self) -> dict[str, int]:
        """Host -> the tick of its last snapshot: its peers keep what they sent it since."""
        return {host: self.snapshots.get(host, (0, b""))[0] for host in self.groups}

    def _send_tick(self, host: str, t: int, keep_from: dict) -> None:
        record = Tick(t, self.expected[host], keep_from, self.injected.get(t, {}).get(host, []))
        try:
            send(self.control, [host.encode(), pack(record)])
        except FabricError:
            pass  # the host is gone: the liveness check finds it, and its replacement gets this tick

    def inject(self, frame: bytes) -> None:
        """Deliver an encoded message from outside the world (e.g. a console) in the next
        tick stepped (``self.tick``); kept until no replacement host can need it again."""
        if self.ahead and (self.begun == self.tick or self.ahead_from is not None):  # (run_ahead: nothing more comes)
            raise HostingError(f"a message from outside the world came for tick {self.tick}, already under way")
        try:
            host = self.owner.get(decode(frame).dst)
        except WireError:
            host = None
        if host is None:
            self.control_rejected += 1
            return
        self.injected.setdefault(self.tick, {}).setdefault(host, []).append(frame)

    def step(self) -> TickResult:
        self.begin()
        return self.finish()

    def begin(self) -> None:
        """Send tick t to every host; ``finish`` collects it. Between the two a session
        can start the same tick on its other worlds."""
        self.stepping = True
        if self.begun == self.tick or self.ahead_from is not None:  # sent ahead by finish, or granted
            return
        self.begun = self.tick
        keep_from = self._keep_from()
        for host in self.groups:
            self._send_tick(host, self.tick, keep_from)

    def run_ahead(self) -> None:
        """From the next tick collected on, the hosts of a world on at most AHEAD_MAX_HOSTS
        hosts step up to AHEAD_TICKS ticks beyond it without waiting for Tick records
        (control.Ahead): each tells its peers how many messages it sent them, so no tick
        waits for the orchestrator's round trip. On more hosts, ``finish`` sends the next
        tick before it returns the last, so the hosts step it while the caller scores and
        journals. ``inject`` is then refused: the next ticks are under way."""
        self.ahead = True

    def finish(self) -> TickResult:
        t = self.tick
        metrics: dict[str, dict[str, float]] = {}
        events: list[dict] = []
        outbound: list[bytes] = []
        expected: dict[str, dict[str, int]] = {h: {} for h in self.groups}
        waiting = set(self.groups)
        self.deadline = time.monotonic() + TICK_TIMEOUT_S
        early = self.early.pop(t, {})
        while waiting:
            if early:
                host, rec = early.popitem()
            else:
                host, rec = self._read(self._replace)
                if (isinstance(rec, Done) and self.ahead_from is not None and t < rec.tick <= self.granted
                        and host in self.groups and host not in self.early.get(rec.tick, {})):
                    self.early.setdefault(rec.tick, {})[host] = rec  # a host ahead of this tick
                    self._took(host, rec)
                    continue
                if not isinstance(rec, Done) or rec.tick != t or host not in waiting:
                    self.control_rejected += 1
                    continue
                self._took(host, rec)
            waiting.discard(host)
            metrics.update(rec.metrics)
            events.extend(rec.events)
            for dst, n in rec.sent.items():
                expected[dst][host] = n
            self.rejected_by[host] = rec.rejected
            outbound.extend(rec.outbound)
        self.stepping = False
        self.expected = expected
        if self.snapshot_every:
            oldest = min(self._keep_from().values()) - 1
            for log in (self.sent_log, self.injected):  # what no replacement can need any more
                for old in [k for k in log if k < oldest]:
                    del log[old]
        else:
            self.injected.pop(t, None)
        self.rejected_frames = sum(self.rejected_by.values()) + self.rejected_before_restarts + self.control_rejected
        self.tick += 1
        if self.ahead and self.tick < self.plan.ticks:
            if len(self.groups) <= AHEAD_MAX_HOSTS:
                self._grant()
            else:
                self.begin()
        ordered = {name: metrics[name] for name in sorted(metrics, key=self.index.__getitem__)}
        events.sort(key=lambda e: self.index.get(e["agent"], len(self.index)))  # stable: each agent's own order
        events.extend(self.journal)
        self.journal = []
        return TickResult(t, ordered, events, leaving([decode(f) for f in outbound]))

    def _took(self, host: str, rec: Done) -> None:
        """``host``'s Done of tick ``rec.tick`` is in hand (collected now or kept for later):
        its snapshot of the next tick can be restarted from, and what it sent is logged, for a
        replacement's replay."""
        self.last_done[host] = max(self.last_done[host], int(rec.tick))
        if self.fresh.get(host, (None,))[0] == rec.tick + 1:
            self.snapshots[host] = self.fresh.pop(host)
        if self.snapshot_every:
            log = self.sent_log.setdefault(int(rec.tick), {h: {} for h in self.groups})
            for dst, n in rec.sent.items():
                log[dst][host] = n

    def _grant(self) -> None:
        """Let the hosts step on to AHEAD_TICKS beyond the next tick to collect; the first
        time, from that tick on (with this tick's counts for it), as control.Ahead says.
        Granted again when half the window is used."""
        through = min(self.tick + AHEAD_TICKS, self.plan.ticks - 1)
        if self.ahead_from is not None and (self.granted - self.tick >= AHEAD_TICKS // 2 or through <= self.granted):
            return
        if self.ahead_from is None:
            self.ahead_from, self.ahead_counts = self.tick, self.expected
        self.granted = max(self.granted, through)
        for host in self.groups:
            self._send_ahead(host)

    def _send_ahead(self, host: str) -> None:
        record = Ahead(self.ahead_from, self.ahead_counts.get(host, {}), self.granted, self._keep_from())
        try:
            send(self.control, [host.encode(), pack(record)])
        except FabricError:
            pass  # the host is gone: the liveness check finds it, and its replacement gets the grant

    # -- replacing a lost host ------------------------------------------------------------------
    def _replace(self, host: str, reason: str) -> None:
        """Start a new actor for ``host`` from its last snapshot, have its peers send it
        again what it needs, let it replay to where the world is, and carry on."""
        if not self.snapshot_every:
            raise HostingError(f"host {host} was lost ({reason}); with snapshots off it cannot be replaced; "
                               f"{worker_logs()}")
        if self.replacing > 2 * len(self.groups):
            raise HostingError(f"hosts are lost faster than they can be replaced (last: {host}, {reason}); "
                               f"{worker_logs()}")
        self.replacing += 1
        try:
            self._start_replacement(host, reason)
        finally:
            self.replacing -= 1

    def _start_replacement(self, host: str, reason: str) -> None:
        began = time.perf_counter()
        self.loops.pop(host, None)
        self.last_heard.pop(host, None)
        try:
            self.ray.kill(self.actors.pop(host))
        except Exception:  # noqa: BLE001 - it is gone already
            pass
        self.rejected_before_restarts += self.rejected_by[host]
        self.rejected_by[host] = 0
        self.fresh.pop(host, None)
        since, blob = self.snapshots.get(host, (0, None))
        self.generation[host] += 1
        actor = self.actors[host] = self._launch(host, blob)
        self.deadline = time.monotonic() + START_TIMEOUT_S
        self.where[host] = self.ray.get(actor.where.remote(), timeout=START_TIMEOUT_S)
        self.endpoints[host] = self.where[host]["endpoint"]
        self.ray.get(actor.connect.remote(self.endpoints, self.control_endpoint), timeout=START_TIMEOUT_S)
        # Another host lost meanwhile is replaced by a nested call: the replacements replay in lockstep.
        self._await(host, Hello, self._replace)
        for peer in self.groups:
            if peer != host:
                try:
                    send(self.control, [peer.encode(), pack(Rewire(host, self.endpoints[host], since))])
                except FabricError:
                    pass  # lost too: its replacement connects to the new address from the start
        through = self.last_done[host]
        counted = through if self.ahead_from is None else min(through, self.ahead_from)  # (then the peers' Counts)
        counts = {t: self.sent_log[t].get(host, {}) for t in range(since - 1, counted) if t in self.sent_log}
        injected = {t: self.injected[t][host] for t in range(since, through + 1) if host in self.injected.get(t, {})}
        self.loops[host] = actor.run.remote({"through": through, "counts": counts, "injected": injected,
                                             "ahead_from": self.ahead_from})
        self._await(host, Replayed, self._replace)
        if self.ahead_from is not None:
            self._send_ahead(host)
        elif self.stepping and through < self.tick:
            self._send_tick(host, self.tick, self._keep_from())
        self.restarts += 1
        self.deadline = time.monotonic() + TICK_TIMEOUT_S
        self.journal.append({"tick": self.tick, "agent": "orchestrator", "event": "host_restarted", "host": host,
                             "reason": reason, "agents": [a.name for a in self.groups[host]],
                             "snapshot_tick": since, "replayed_ticks": through + 1 - since,
                             "seconds": round(time.perf_counter() - began, 3)})

    def facts(self) -> dict:
        return {"snapshot_every": self.snapshot_every, "host_restarts": self.restarts}

    def close(self) -> None:
        """Ask every host to stop, wait a little, then kill what is left."""
        if self.loops:
            for host in self.loops:
                try:
                    send(self.control, [host.encode(), pack(Stop())])
                except FabricError:
                    pass
            try:
                self.ray.wait(list(self.loops.values()), num_returns=len(self.loops), timeout=5.0)
            except Exception:  # noqa: BLE001 - tearing down regardless
                pass
        for actor in self.actors.values():
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors, self.loops = {}, {}
        if self.sockets.all:
            self.sockets.close()
