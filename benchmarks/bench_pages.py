"""How fresh the browser pages of a live game day are, and what the server costs, as
figures (not a test).

Starts a real `gameday serve` (default: ten teams of us-east-1-2021 at 60x, worlds in
process) and opens one WebSocket per team as a page does. For every state pushed after a
new tick it measures the page's update latency: the wall time from the session stepping
that tick to the page holding it (both on this machine's clock). Prints the median and
p99 latency, the pushes per second, the pace the session kept, and the server's peak
resident memory (its process and its children, sampled twice a second).

    python benchmarks/bench_pages.py [--teams 10] [--speed 60] [--seconds 60] [--hosting inprocess|ray]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in out:
            continue
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, in MB (Linux /proc)."""
    total = 0
    for p in tree(pid):
        try:
            total += next(int(line.split()[1]) for line in Path(f"/proc/{p}/status").read_text().splitlines()
                          if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
    return total / 1024


last: dict = {}  # the latest session summary a page got


async def page(web: str, team: str, token: str, until: float, latencies: list, pushes: list) -> None:
    ws_url = web.replace("http", "ws", 1) + "ws"
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(ws_url, headers={"Origin": web.rstrip("/")}, max_msg_size=0) as ws:
            await ws.send_str(json.dumps({"id": "hello", "op": "hello", "token": token, "args": {"team": team}}))
            last_tick = -1
            while time.time() < until:
                try:
                    msg = await ws.receive(timeout=max(0.1, until - time.time()))
                except asyncio.TimeoutError:
                    break
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                got, data = time.time(), json.loads(msg.data)
                if data.get("type") != "state":
                    continue
                s = data["result"]["session"]
                last.update(s)
                pushes.append(got)
                if s["tick"] > last_tick and s.get("stepped_at"):
                    latencies.append(got - s["stepped_at"])
                    last_tick = s["tick"]


async def measure(web: str, tokens: dict, seconds: float) -> tuple[list, list]:
    latencies, pushes = [], []
    until = time.time() + seconds
    await asyncio.gather(*(page(web, team, tok, until, latencies, pushes) for team, tok in tokens["teams"].items()))
    return latencies, pushes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teams", type=int, default=10)
    ap.add_argument("--speed", default="60")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--hosting", default="inprocess", choices=("inprocess", "ray"))
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="bench-pages-")) / "session"
    teams = [f"team{i}" for i in range(args.teams)]
    cmd = [sys.executable, "-m", "orchestrator.cli", "serve", "us-east-1-2021", *sum((["--team", t] for t in teams), []),
           "--hosting", args.hosting, "--speed", args.speed, "--bind", "tcp://127.0.0.1:0", "--web-port", "0",
           "--start", "--no-report", "--linger", "0", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while True:
            info = json.loads((out / "session.json").read_text()) if (out / "session.json").exists() else {}
            if info.get("web") and (out / "tokens.json").exists():
                break
            if proc.poll() is not None or time.time() > deadline:
                sys.exit("gameday serve did not start")
            time.sleep(0.2)
        tokens = json.loads((out / "tokens.json").read_text())
        peak = [rss_mb(proc.pid)]
        stop = False

        async def sample():
            while not stop:
                peak.append(rss_mb(proc.pid))
                await asyncio.sleep(0.5)

        async def run():
            nonlocal stop
            sampler = asyncio.ensure_future(sample())
            result = await measure(info["web"], tokens, args.seconds)
            stop = True
            await sampler
            return result

        latencies, pushes = asyncio.run(run())
    finally:
        proc.kill()
        proc.wait()
    lat = sorted(latencies)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
    print(f"{args.teams} teams of us-east-1-2021 at {args.speed}x, worlds {args.hosting}, {args.seconds:.0f} s measured")
    print(f"  page update latency (tick stepped -> page holds it): median {statistics.median(lat) * 1000:.0f} ms, "
          f"p99 {p99 * 1000:.0f} ms, over {len(lat)} updates")
    print(f"  pushes: {len(pushes) / args.seconds / args.teams:.1f} per second per page")
    print(f"  server peak resident memory: {max(peak):.0f} MB (process and children)")
    if last:
        print(f"  pace the session kept: {last['pace']}x of {args.speed}x asked; it fell behind {last['fell_behind']} "
              f"times; {last['tick']} ticks stepped")


if __name__ == "__main__":
    main()
