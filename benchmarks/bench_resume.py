"""How long a session takes to come back after its server died, as figures (not a test).

Plays a live session in process (default: ten teams of us-east-1-2021) for some
simulated minutes with a command per team, abandons it as a killed server would, and
times ``Session.rebuild`` (what `gameday serve --resume` does before it serves): every
world played again from the journal. The time grows with the ticks done; the figure is
printed beside the time the session took to play those ticks in the first place.

    python benchmarks/bench_resume.py [--teams 10] [--minutes 10 30]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from orchestrator.hosting.host import HostingOptions
from orchestrator.live.session import Session


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teams", type=int, default=10)
    ap.add_argument("--minutes", type=float, nargs="+", default=[10.0, 30.0])
    args = ap.parse_args()
    teams = [f"team{i}" for i in range(args.teams)]
    print(f"{args.teams} teams of us-east-1-2021, worlds in process")
    for minutes in args.minutes:
        out = Path(tempfile.mkdtemp(prefix="bench-resume-")) / "session"
        s = Session(out, teams, duration=12 * 3600, speed=None, hosting=HostingOptions())
        s.start()
        t0 = time.perf_counter()
        ticks = round(minutes * 60 / s.dt)
        while s.tick < ticks:
            if s.tick == ticks // 2:
                for t in teams:
                    s.act(t, "enable_protection", {}, "bench", f"{t}:1")
            s.step()
        played = time.perf_counter() - t0
        s._lock.close()  # the server dies: the system drops its lock
        t0 = time.perf_counter()
        back = Session.rebuild(out)
        rebuilt = time.perf_counter() - t0
        assert back.tick == ticks
        back.close()
        print(f"  after {minutes:g} simulated minutes ({ticks} ticks): rebuilt in {rebuilt:.1f} s "
              f"(played in {played:.1f} s; {ticks / rebuilt:.0f} session ticks/s)")


if __name__ == "__main__":
    main()
