"""What a team's browser page costs, as figures (not a test): how long the page takes to load
and to show its first state in real headless Chromium, and what the server spends in CPU idle
and at speed with pages open.

Starts a real `gameday serve` (four teams of us-east-1-2021, worlds in process, waiting for
its start) from the checkout given by --checkout: it runs as `python -m orchestrator.cli`
with that checkout first on PYTHONPATH and as its working directory, so the checkout's own
code serves (and its own pages), whichever gameday is installed. Then, in order:

  1. the server's CPU idle with no page open (baseline);
  2. page load and first state while the session waits: --repeats times, a fresh headless
     Chromium (its own empty profile: a cold cache, as a team member opening the link) opens
     team t0's page (see "first state" below);
  3. the server's CPU idle with teams t0..t3's pages open, one headless Chromium each;
  4. the session started (`gameday facilitate start --session DIR`, from the same checkout)
     at --speed, and the server's CPU with the same four pages open; with the pace the
     session kept over that window (ticks stepped / wall seconds, the ticks read from t0's
     page: a stall of the pushes to the pages shows as a lower pace) and the one the session
     reports (its last few seconds);
  5. page load and first state as in 2, the session running and the four pages open.

Page load is the Navigation Timing loadEventEnd - startTime. First state is the page's
performance.now() (its clock from navigation start) at the first poll, every --poll-ms from
selenium, that finds window.gamedayTeam.state set. team.js sets it at the top of render()
(so in both the page before its redesign and after); render() runs whole in one task, so a
poll that sees it sees the first state rendered into the DOM (not necessarily painted). The
state may have been rendered at any time since the poll before, and that gap is printed; it
overstates the doubt, since a poll sent while the page renders waits for the render to end
(the gap then holds the render itself). Nothing is injected into the page.

Mind that a page opened while nothing changes gets its first state only when the server's
idle push comes (web.IDLE_PUSH_S, 1 s after the hello is answered): the waiting figures hold
that second; running, a tick wakes the push within a few tens of ms.

CPU is utime + stime of the serve process and its descendants (/proc), over the window, as a
percentage of one core. The browsers' CPU over windows 3 and 4 is printed beside it (the
pages' own cost; on a small machine they compete with the server), and the whole machine's
(/proc/stat), which shows how busy the rest of the machine was meanwhile.

    python benchmarks/bench_team_page.py --checkout PATH [--checkout PATH2] [--rounds 1]
        [--repeats 5] [--seconds 30] [--speed 60] [--poll-ms 10] [--slow-ms 3000] [--settle 3]

Several --checkout run one after the other (with --rounds, alternating: A B A B), and one
table at the end holds every run. A first state slower than --slow-ms is printed with what the
page said meanwhile ("connecting", a lost connection, a refusal), and whatever the server said
after its banner at the end of each run. Needs Debian's chromium and chromium-driver, and selenium.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # (this checkout's helpers, whichever one is measured)
from benchmarks.bench_pages import tree  # noqa: E402
from helpers import CHROMIUM_FLAGS  # noqa: E402

TEAMS = ["t0", "t1", "t2", "t3"]
TICK_S = os.sysconf("SC_CLK_TCK")
# the first state is in when the page's global holds one (team.js, before and after the redesign)
SIGN = "window.gamedayTeam && window.gamedayTeam.state"


# -- the server ------------------------------------------------------------------------------------
def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) of the processes in ``pids`` and their descendants."""
    total = 0
    for root in pids:
        for p in tree(root):
            try:
                fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / TICK_S


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (every core; /proc/stat less idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / TICK_S


def cpu_percent(pids_of, seconds: float) -> tuple[float, ...]:
    """Per list of pids (``pids_of()`` asked at both ends, so processes that come count), the
    CPU over a window of ``seconds`` as a percentage of one core; then the whole machine's."""
    before, m0, t0 = [cpu_s(p) for p in pids_of()], machine_busy_s(), time.monotonic()
    time.sleep(seconds)
    after, m1, wall = [cpu_s(p) for p in pids_of()], machine_busy_s(), time.monotonic() - t0
    return (*(100 * (a - b) / wall for a, b in zip(after, before)), 100 * (m1 - m0) / wall)


def checkout_env(checkout: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(checkout) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


PACKAGES = ("orchestrator", "agents", "reports", "playbooks")  # gameday's top-level packages


def which_code(checkout: Path) -> str:
    """Where a subprocess run from ``checkout`` imports gameday's packages from (must be the
    checkout: the installed gameday may be another's), and the checkout's commit."""
    probe = "; ".join(f"import {p}; print({p}.__file__)" for p in PACKAGES)
    out = subprocess.run([sys.executable, "-c", probe], cwd=checkout, env=checkout_env(checkout),
                         capture_output=True, text=True, check=True)
    for path in out.stdout.split():
        if not Path(path).resolve().is_relative_to(checkout.resolve()):
            sys.exit(f"{checkout}: the subprocess imports {path}, not the checkout's own")
    git = lambda *a: subprocess.run(["git", "--no-optional-locks", "-C", str(checkout), *a],
                                    check=False, capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "not a git checkout"
    changed = len(git("status", "--porcelain", "--untracked-files=no").splitlines())
    return (f"{out.stdout.split()[0]} (and {', '.join(PACKAGES[1:])} beside it); commit {commit}"
            + (f", {changed} files changed since" if changed else ""))


def serve(checkout: Path, out: Path, speed: str) -> subprocess.Popen:
    teams = [arg for t in TEAMS for arg in ("--team", t)]
    cmd = [sys.executable, "-m", "orchestrator.cli", "serve", "us-east-1-2021", *teams,
           "--hosting", "inprocess", "--speed", speed, "--bind", "tcp://127.0.0.1:0", "--web-port", "0",
           "--no-report", "--linger", "0", "--out", str(out)]
    with open(out.parent / "serve.log", "wb") as log:  # (the server holds its own copy)
        return subprocess.Popen(cmd, cwd=checkout, env=checkout_env(checkout), stdout=log, stderr=subprocess.STDOUT)


def wait_served(proc: subprocess.Popen, out: Path) -> tuple[dict, dict]:
    deadline = time.time() + 300
    while True:
        info = json.loads((out / "session.json").read_text()) if (out / "session.json").exists() else {}
        if info.get("web") and (out / "tokens.json").exists():
            return info, json.loads((out / "tokens.json").read_text())
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("gameday serve did not start")
        time.sleep(0.2)


def facilitate(checkout: Path, out: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "orchestrator.cli", "facilitate", "--session", str(out), *args],
                   cwd=checkout, env=checkout_env(checkout), check=True, capture_output=True, timeout=60)


# -- the browsers (the options tests/helpers.py's webdriver gives Debian's chromium) ----------------
def browser(profile: Path):
    from selenium import webdriver as wd
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        sys.exit("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    opts = wd.ChromeOptions()
    opts.binary_location = binary
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    opts.page_load_strategy = "none"  # get() returns at once: the first state may come before the load event
    return wd.Chrome(options=opts, service=Service(driver_path))


# what the page says meanwhile, in both versions: its state ("connecting" until the first one)
# and its status line (a lost connection, a refusal)
SAYS = "['state', 'status'].map((id) => (document.getElementById(id) || {}).textContent)"


def open_page(driver, url: str, poll_s: float, timeout: float = 60) -> tuple[float, float, float, list]:
    """Navigate to ``url``; (page load ms, first state ms, the gap between the poll that saw
    the first state and the one before it, in ms: how late it may have been read, and what
    the page said until then: [(ms, state text, status text)] at each change)."""
    driver.get(url)
    deadline, first, gap, last, said = time.time() + timeout, None, 0.0, None, []
    while first is None:
        now, seen, href, says = driver.execute_script(
            f"return [performance.now(), !!({SIGN}), location.origin + location.pathname, {SAYS}]")
        if href == url.split("#")[0]:  # the team page's document (before it commits, the poll reads the blank one)
            if seen:
                first, gap = now, now - (last if last is not None else 0.0)
            last = now
            if not said or said[-1][1:] != tuple(says):
                said.append((now, *says))
        if time.time() > deadline:
            raise TimeoutError(f"no state on {url} in {timeout:.0f} s")
        if first is None:
            time.sleep(poll_s)
    while True:
        load = driver.execute_script("const n = performance.getEntriesByType('navigation')[0];"
                                     "return n && n.loadEventEnd > 0 ? n.loadEventEnd - n.startTime : null")
        if load is not None:
            return load, first, gap, said
        if time.time() > deadline:
            raise TimeoutError(f"{url} did not finish loading in {timeout:.0f} s")
        time.sleep(poll_s)


def opens(url: str, profile: Path, args, when: str) -> dict:
    """--repeats cold opens of ``url``, each in a fresh browser (a fresh profile): page load
    and first state times (ms)."""
    loads, firsts, gaps = [], [], []
    for i in range(args.repeats):
        d = browser(profile.with_name(f"{profile.name}-{i}"))
        try:
            load, first, gap, said = open_page(d, url, args.poll_ms / 1000)
        finally:
            d.quit()
        loads.append(load), firsts.append(first), gaps.append(gap)
        print(f"  open {i + 1} {when}: page load {load:.0f} ms, first state {first:.0f} ms (read up to {gap:.0f} ms "
              f"late)", flush=True)
        if first > args.slow_ms:  # what the page said while it waited
            print("    slow; the page said: " + "; ".join(f"at {t:.0f} ms {state!r}, {status!r}"
                                                       for t, state, status in said))
    return {"load": loads, "first": firsts, "gap": max(gaps)}


def quit_all(drivers: list) -> None:
    for d in drivers:
        with contextlib.suppress(Exception):  # (a browser already gone)
            d.quit()
    drivers.clear()


def driver_pids(drivers: list) -> list[int]:
    """The chromedriver processes (their descendants are the browsers)."""
    return [d.service.process.pid for d in drivers if d.service.process]


# -- one run -----------------------------------------------------------------------------------------
def run(checkout: Path, args) -> dict:
    print(f"\n== {checkout}: {which_code(checkout)}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-team-page-"))
    out = work / "session"
    proc = serve(checkout, out, args.speed)
    drivers: list = []
    try:
        info, tokens = wait_served(proc, out)
        web = info["web"].rstrip("/") + "/"
        url = {t: f"{web}team/{t}#{tokens['teams'][t]}" for t in TEAMS}
        time.sleep(args.settle)
        idle_none, machine_idle_none = cpu_percent(lambda: [[proc.pid]], args.seconds)
        print(f"  server CPU idle, no pages: {idle_none:.1f}% (whole machine {machine_idle_none:.0f}% of "
              f"{os.cpu_count() * 100}%)", flush=True)

        waiting = opens(url["t0"], work / "profile-waiting", args, "while waiting")

        for t in TEAMS:
            drivers.append(browser(work / f"profile-{t}"))
            open_page(drivers[-1], url[t], args.poll_ms / 1000)
        time.sleep(args.settle)
        both = lambda: [[proc.pid], driver_pids(drivers)]
        idle_pages, browsers_idle, machine_idle = cpu_percent(both, args.seconds)
        print(f"  server CPU idle, 4 pages: {idle_pages:.1f}% (browsers {browsers_idle:.1f}%, whole machine "
              f"{machine_idle:.0f}%)", flush=True)

        facilitate(checkout, out, "start")
        session = lambda: drivers[0].execute_script(f"return {SIGN}.session")
        deadline = time.time() + 60
        while session()["state"] != "running":
            if time.time() > deadline:
                raise TimeoutError("the session did not start")
            time.sleep(0.2)
        time.sleep(args.settle)
        s0, t0 = session(), time.monotonic()
        running, browsers_running, machine_running = cpu_percent(both, args.seconds)
        s1, wall = session(), time.monotonic() - t0
        tick_s = 1.0  # us-east-1-2021 steps a simulated second a tick
        kept = (s1["tick"] - s0["tick"]) * tick_s / wall
        print(f"  server CPU at {args.speed}x, 4 pages: {running:.1f}% (browsers {browsers_running:.1f}%, whole "
              f"machine {machine_running:.0f}%); "
              f"kept {kept:.1f}x over the window (ticks {s0['tick']} -> {s1['tick']}), the session says pace "
              f"{s1.get('pace')}x, fell behind {s1.get('fell_behind')} times", flush=True)
        running_opens = opens(url["t0"], work / "profile-running", args, f"at {args.speed}x, 4 pages open")
        return {"checkout": str(checkout), "waiting": waiting, "running_opens": running_opens,
                "idle_none": idle_none, "idle_pages": idle_pages, "running": running,
                "browsers_idle": browsers_idle, "browsers_running": browsers_running,
                "machine": (machine_idle_none, machine_idle, machine_running),
                "kept": kept, "pace": s1.get("pace"), "fell_behind": s1.get("fell_behind")}
    finally:
        quit_all(drivers)
        proc.kill()
        proc.wait()
        said = (work / "serve.log").read_text(errors="replace").splitlines()
        start = next((i + 1 for i, line in enumerate(said) if line.startswith("waiting for the facilitator")), 0)
        for line in said[start:][-10:]:  # what the server said after its banner (a warning, an error)
            print(f"  the server said: {line}")
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", type=Path, action="append", required=True,
                    help="a gameday checkout to serve from (repeatable: run one after the other)")
    ap.add_argument("--rounds", type=int, default=1, help="run every checkout this many times, alternating")
    ap.add_argument("--repeats", type=int, default=5, help="fresh page opens timed")
    ap.add_argument("--seconds", type=float, default=30.0, help="each CPU window")
    ap.add_argument("--speed", default="60")
    ap.add_argument("--poll-ms", type=float, default=10.0, help="selenium's polls for the first state")
    ap.add_argument("--slow-ms", type=float, default=3000.0,
                    help="a first state later than this: print what the page said meanwhile")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds waited before each CPU window")
    args = ap.parse_args()
    rows = []
    for _ in range(args.rounds):
        for checkout in args.checkout:
            try:
                rows.append(run(checkout.resolve(), args))
            except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as e:  # the others still run
                print(f"  {checkout}: this run failed: {e}", flush=True)
    if not rows:
        sys.exit("no run finished")

    print(f"\nus-east-1-2021, teams {', '.join(TEAMS)}, worlds in process. Page: {args.repeats} cold opens of t0's page "
          f"while the session waits (w) and while it runs at {args.speed}x with the 4 pages open (r), median/max ms. "
          f"CPU: {args.seconds:.0f} s windows, % of one core, the server's (the 4 browsers' in brackets); the whole "
          f"machine's in each window, of {os.cpu_count() * 100}%.")
    mm = lambda xs: f"{statistics.median(xs):.0f}/{max(xs):.0f}"
    cols = [("checkout", 20), ("load w", 9), ("load r", 9), ("1st state w", 11), ("1st state r", 11),
            ("CPU idle 0p", 11), ("CPU idle 4p", 15), (f"CPU {args.speed}x 4p", 15), ("pace kept/said", 14),
            ("machine busy", 12)]
    print("  ".join(f"{name:>{w}}" for name, w in cols))
    for r in rows:
        cells = [r["checkout"][-20:], mm(r["waiting"]["load"]), mm(r["running_opens"]["load"]),
                 mm(r["waiting"]["first"]), mm(r["running_opens"]["first"]), f"{r['idle_none']:.1f}%",
                 f"{r['idle_pages']:.1f}% ({r['browsers_idle']:.0f}%)",
                 f"{r['running']:.1f}% ({r['browsers_running']:.0f}%)", f"{r['kept']:.1f}x/{r['pace']}x",
                 "/".join(f"{m:.0f}" for m in r["machine"]) + "%"]
        print("  ".join(f"{c:>{w}}" for c, (_, w) in zip(cells, cols)))
    late = max(max(r["waiting"]["gap"], r["running_opens"]["gap"]) for r in rows)
    print(f"first state: the page's clock at the first poll that saw window.gamedayTeam.state; at most {late:.0f} ms "
          f"after the poll before (that gap holds the render when the poll waited for it)")


if __name__ == "__main__":
    main()
