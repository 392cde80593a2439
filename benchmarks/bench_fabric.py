"""Speed of the multi-process fabric, as figures (not a test).

Prints, measured in the same run:
  - the raw pyzmq DEALER/ROUTER round-trip rate between two processes (one outstanding)
  - the tick rate of the Ray-hosted 2021 world at --speed max (placement kind and agent)
  - their ratio (goal: the world ticks at least 1/20 of the raw round-trip rate)
  - actor start-up time and the resident memory of the actors
  - the cost of snapshots (every 60 ticks, the default, against none) and the time to
    replace an actor whose process was killed

    python benchmarks/bench_fabric.py [--ticks 3000] [--round-trips 20000]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import zmq


def _echo(endpoint: str, n: int) -> None:
    ctx = zmq.Context()
    s = ctx.socket(zmq.ROUTER)
    s.setsockopt(zmq.LINGER, 0)
    s.bind(endpoint)
    for _ in range(n):
        s.send_multipart(s.recv_multipart())
    ctx.destroy(linger=0)


def raw_round_trip_ms(n: int, size: int = 64, endpoint: str = "tcp://127.0.0.1:5791") -> list[float]:
    """Each of ``n`` DEALER -> ROUTER round trips to another process, in milliseconds."""
    p = mp.Process(target=_echo, args=(endpoint, n + 100))
    p.start()
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    for _ in range(100):  # warm up, and wait for the connection
        s.send(b"x")
        s.recv()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        s.send(b"x" * size)
        s.recv()
        out.append((time.perf_counter() - t0) * 1000)
    ctx.destroy(linger=0)
    p.join()
    return out


def raw_round_trips(n: int) -> float:
    """Round trips per second."""
    return n / (sum(raw_round_trip_ms(n)) / 1000)


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def world_tick_rate(ticks: int, placement: str, snapshot_every: int = 60, kill_at: int | None = None) -> dict:
    """``kill_at``: SIGKILL the populations' actor at this tick and time its replacement."""
    import signal

    from orchestrator.hosting.ray_hosting import RayHost
    from orchestrator.runs.runner import RunSpec, prepare

    _, _, _, plan = prepare(RunSpec(runbook="historical", duration=ticks))
    t0 = time.perf_counter()
    host = RayHost(plan, placement=placement, snapshot_every=snapshot_every)
    started = time.perf_counter() - t0
    restarts = []
    try:
        t1 = time.perf_counter()
        for t in range(ticks):
            if t == kill_at:
                os.kill(host.where["population"]["pid"], signal.SIGKILL)
            restarts += [e for e in host.step().events if e["event"] == "host_restarted"]
        rate = ticks / (time.perf_counter() - t1)
        worker_rss = sum(rss_mb(int(line.split()[0])) for line in os.popen("ps -eo pid,args").read().splitlines()[1:]
                         if "ray::GroupHost" in line)
    finally:
        host.close()
    return {"actors": len(host.groups), "start_s": started, "ticks_per_s": rate, "actor_rss_mb": worker_rss,
            "restarts": restarts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ticks", type=int, default=3000)
    ap.add_argument("--round-trips", type=int, default=20000)
    args = ap.parse_args()
    import ray

    t0 = time.perf_counter()
    ray.init(include_dashboard=False, logging_level="ERROR")
    print(f"ray.init: {time.perf_counter() - t0:.1f} s")
    raw = raw_round_trips(args.round_trips)
    print(f"raw pyzmq DEALER/ROUTER round trips between two processes: {raw:,.0f} /s ({1e6 / raw:.0f} us each)")
    for placement in ("kind", "agent"):
        r = world_tick_rate(args.ticks, placement)
        print(f"2021 world on Ray, placement {placement}: {r['actors']} actors started in {r['start_s']:.1f} s; "
              f"{r['ticks_per_s']:.0f} ticks/s at --speed max; ratio to raw round trips 1/{raw / r['ticks_per_s']:.0f} "
              f"(goal: at least 1/20); actors' resident memory {r['actor_rss_mb']:.0f} MiB")
    plain = world_tick_rate(args.ticks, "kind", snapshot_every=0)
    snap = world_tick_rate(args.ticks, "kind", snapshot_every=60)
    print(f"snapshots every 60 ticks: {snap['ticks_per_s']:.0f} ticks/s against {plain['ticks_per_s']:.0f} without "
          f"(ratio {snap['ticks_per_s'] / plain['ticks_per_s']:.2f})")
    killed = world_tick_rate(args.ticks, "kind", snapshot_every=60, kill_at=args.ticks // 2 + 30)
    for r in killed["restarts"]:
        print(f"populations' actor SIGKILLed: replaced in {r['seconds']:.2f} s (noticed, restarted from tick "
              f"{r['snapshot_tick']}, {r['replayed_ticks']} ticks replayed); the run's rate "
              f"{killed['ticks_per_s']:.0f} ticks/s")
    raw_after = raw_round_trips(args.round_trips)
    print(f"raw round trips again (noise check): {raw_after:,.0f} /s")
    ray.shutdown()


if __name__ == "__main__":
    main()
