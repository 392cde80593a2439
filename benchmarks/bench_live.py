"""A live game day under load, as figures (not a test).

Ten teams (by default) play the 2021 world at 60x, each world on its own Ray actor
(placement single), served by `gameday serve`'s server on a real socket, while a
console client per team polls its state twice a second and one console keeps sending
commands. Prints, measured in the same run:
  - how far simulated time ran behind the target pace (lag: median, p99, max, and the
    achieved pace against the target)
  - console round trips through the server: `state` and `act` (median, p99)
  - the raw ZeroMQ DEALER/ROUTER round trip between two processes, for comparison

    python benchmarks/bench_live.py [--teams 10] [--speed 60] [--seconds 30] [--hosting ray]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_fabric import raw_round_trip_ms  # noqa: E402
from orchestrator.hosting.host import HostingOptions  # noqa: E402
from orchestrator.live.client import LiveClient, RequestFailed  # noqa: E402
from orchestrator.live.server import LiveServer  # noqa: E402
from orchestrator.live.session import Session  # noqa: E402


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teams", type=int, default=10)
    ap.add_argument("--speed", type=float, default=60.0)
    ap.add_argument("--seconds", type=float, default=30.0, help="wall seconds to measure")
    ap.add_argument("--hosting", default="ray", choices=["ray", "inprocess"])
    ap.add_argument("--placement", default="single", choices=["single", "kind", "agent"])
    a = ap.parse_args()

    raw = raw_round_trip_ms(3000, size=120, endpoint="tcp://127.0.0.1:5793")
    out = Path(tempfile.mkdtemp(prefix="bench-live-")) / "session"
    teams = [f"team{i}" for i in range(a.teams)]
    t0 = time.perf_counter()
    session = Session(out, teams, duration=4 * 3600, speed=a.speed, hosting=HostingOptions(a.hosting, a.placement))
    built = time.perf_counter() - t0
    server = LiveServer(session, "tcp://127.0.0.1:0", rate=1000, burst=1000)
    lags: list[float] = []
    orig_step = session.step

    def step():  # record each tick's lag behind its due time
        orig_step()
        lags.append(session.lag_s)

    session.step = step
    stop = threading.Event()
    serving = threading.Thread(target=server.run, kwargs={"linger_s": 0, "should_stop": stop.is_set}, daemon=True)
    session.start()
    serving.start()
    state_ms: list[float] = []
    act_ms: list[float] = []

    def console(team: str, acting: bool) -> None:
        c = LiveClient(server.address, server.token_of("team", team), timeout_s=10)
        since = 0
        try:
            while not stop.is_set():
                t = time.perf_counter()
                st = c.call("state", {"since": since})
                state_ms.append((time.perf_counter() - t) * 1000)
                since = st["feed_next"]
                if acting:
                    t = time.perf_counter()
                    try:
                        c.call("act", {"action": "query_logs"})
                    except RequestFailed:
                        pass
                    act_ms.append((time.perf_counter() - t) * 1000)
                time.sleep(0.5)
        finally:
            c.close()

    clients = [threading.Thread(target=console, args=(t, i == 0), daemon=True) for i, t in enumerate(teams)]
    for c in clients:
        c.start()
    wall0, tick0 = time.monotonic(), session.tick
    time.sleep(a.seconds)
    wall, ticks = time.monotonic() - wall0, session.tick - tick0
    stop.set()
    for c in clients:
        c.join(15)
    serving.join(30)
    session.close()
    server.close()

    pace = ticks * session.dt / wall
    print(f"{a.teams} teams, {a.hosting} hosting (placement {a.placement}), target {a.speed:g}x, "
          f"{a.seconds:g} s measured; worlds built in {built:.1f} s")
    print(f"  pace achieved: {pace:.1f}x ({pace / a.speed:.3f} of the target); {ticks} ticks per world, "
          f"{ticks * a.teams / wall:.0f} world-ticks/s in all")
    print(f"  lag behind the target pace: median {statistics.median(lags) * 1000:.0f} ms, "
          f"p99 {pct(lags, 99) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms")
    print(f"  console `state` round trip: median {statistics.median(state_ms):.2f} ms, p99 {pct(state_ms, 99):.2f} ms "
          f"({len(state_ms)} calls)")
    print(f"  console `act` round trip:   median {statistics.median(act_ms):.2f} ms, p99 {pct(act_ms, 99):.2f} ms "
          f"({len(act_ms)} calls)")
    print(f"  raw ZeroMQ round trip:      median {statistics.median(raw):.3f} ms, p99 {pct(raw, 99):.3f} ms")
    print(f"  ratio console state / raw (medians): {statistics.median(state_ms) / statistics.median(raw):.0f}x")


if __name__ == "__main__":
    main()
