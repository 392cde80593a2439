"""Speed of the in-process core, as figures (not a test).

Prints, measured side by side in one run:
  - simulated seconds per wall second for a full scenario (default us-east-1-2021,
    historical runbook, 12 h, 1 s ticks; --playbook us-east-1-2025 for the other,
    --playbook all for both)
  - wall time of the same scenario with client populations scaled to 10^3, 10^5 and 10^7
    clients in all, and the ratio largest / smallest (cohorts: the goal is at most 1.5)
  - peak memory (max RSS of each child process)

The figure measured is the engine's wall time (the run's meta ``wall_seconds``: the
ticks, without imports, the playbook's rendering or the world's building); the child
process's whole wall time (interpreter start, imports, building, writing) is printed
beside it. --sizes chooses the sizes (default: default,10^3,10^5,10^7; "default" is the
playbook as shipped).

Each size runs in a fresh child process so that the peak memory of one does not hide
another's; sizes are interleaved over repeats (--repeats) since this machine is noisy;
the best of the repeats is printed. Before any measurement each checkout plays each
playbook for 3 h unmeasured, so that no measured run includes compiling its kernels.

--against REV also measures another revision of this repository side by side: REV is
checked out in a temporary ``git worktree`` (removed at the end, also on an error or
Ctrl-C) and every measurement runs twice in a row, this checkout (as it is on disk,
uncommitted changes included) then REV, each child with PYTHONPATH set to the root of
the checkout it measures (its own code and its own built-in playbooks; a child that
imports anything else stops the benchmark), from a neutral working directory and with
this process's other PYTHON* variables dropped. A table per playbook then gives each
size's engine wall for both and the ratio (REV / this: "N.Nx faster" when this checkout
is faster, "N.Nx slower" when it is slower); REV's peak memory is printed beside this
checkout's. Both revisions get the same variables, ``{"scale": <float>}`` for a size.

    python benchmarks/bench_core.py [--playbook us-east-1-2021|us-east-1-2025|all] [--duration 12h]
                                    [--repeats 1] [--sizes default,10^3,10^5,10^7] [--against REV]
    python benchmarks/bench_core.py --against 35eff77 --playbook all --repeats 3
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = {"10^3": 1_000, "10^5": 100_000, "10^7": 10_000_000}
# The clients a size counts, at scale 1: in 2021 the two large (bugged) populations,
# 125,000; in 2025 every population, 11,300 (its 50,000 leases scale too). Each
# playbook's ``scale`` variable multiplies every population and every capacity, so each
# size plays the same incident.
COUNTED = {"us-east-1-2021": (125_000, "167,500 clients, 125,000 of them bugged"),
           "us-east-1-2025": (11_300, "11,300 clients, 50,000 leases")}
ALL_SIZES = ["default", *SIZES]
WARM_UP = "3h"  # simulated: past the trigger and into the storm, where every kernel is called


CHILD = r"""
import json, os, resource, sys, tempfile, time
t_start = time.perf_counter()
import orchestrator
root = os.path.realpath(sys.argv[4])
where = os.path.realpath(orchestrator.__file__)
if not where.startswith(root + os.sep):
    sys.exit(f"orchestrator imported from {where}, not from {root}")
sets, duration, playbook = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
r = orchestrator.run(playbook, runbook="historical", duration=duration, sets=sets, out=tempfile.mkdtemp() + "/run")
wall = time.perf_counter() - t0
source = os.path.realpath(r.meta.get("playbook_source", root + os.sep))
if not source.startswith(root + os.sep):
    sys.exit(f"the playbook came from {source}, not from {root}")
print(json.dumps({"wall": wall, "sim": r.meta["duration_s"], "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "loop_broken": r.score["loop_broken"].get("clock"), "engine_wall": r.meta["wall_seconds"],
                  "imports": t0 - t_start, "orchestrator": where}))
"""


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def child_env(root: Path) -> dict:
    """This process's environment without its PYTHON* variables, and PYTHONPATH = ``root``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(root)
    return env


def run_child(root: Path, sets: dict, duration: str, playbook: str, neutral: Path) -> dict:
    """One run in a fresh interpreter that imports the code under ``root``; adds the
    child's whole wall time (``whole``: start to exit, as this process sees it)."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(sets), duration, playbook, str(root)],
                         cwd=neutral, env=child_env(root), capture_output=True, text=True)
    whole = time.perf_counter() - t0
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"the run of {playbook} ({sets or 'as shipped'}) with the code of {root} failed "
                         f"(exit status {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"whole": whole}


def ratio_text(this: float, other: float) -> str:
    """REV / this as 'N.Nx faster', or this / REV as 'N.Nx slower'."""
    if this <= 0 or other <= 0:
        return "n/a"
    return f"{other / this:.1f}x faster" if other >= this else f"{this / other:.1f}x slower"


class Worktree:
    """A detached ``git worktree`` of ``rev`` in a temporary directory, removed on exit
    (also on an error, Ctrl-C or SIGTERM)."""

    def __init__(self, repo: Path, rev: str):
        self.repo, self.rev = repo, rev
        self.tmp: Path | None = None
        self.path: Path | None = None

    def __enter__(self) -> Path:
        try:
            self.commit = git("rev-parse", "--verify", "--quiet", f"{self.rev}^{{commit}}", cwd=self.repo)
        except subprocess.CalledProcessError:
            raise SystemExit(f"--against {self.rev}: not a revision of {self.repo}") from None
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-core-against-"))
        self.path = self.tmp / "checkout"
        try:
            done = subprocess.run(["git", "worktree", "add", "--detach", str(self.path), self.commit], cwd=self.repo,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        except BaseException:  # Ctrl-C meanwhile: what was added is removed
            self.__exit__()
            raise
        if done.returncode != 0:
            self.__exit__()
            raise SystemExit(f"git worktree add {self.path} {self.rev} failed: {done.stderr.strip()}")
        return self.path

    def __exit__(self, *exc) -> None:
        with shielded():
            if self.path is not None:
                done = subprocess.run(["git", "worktree", "remove", "--force", str(self.path)], cwd=self.repo,
                                      capture_output=True, text=True)
                if done.returncode != 0:
                    print(f"could not remove the worktree {self.path}: {done.stderr.strip()}", file=sys.stderr)
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)


@contextlib.contextmanager
def shielded():
    """Ctrl-C and SIGTERM ignored meanwhile: a second one does not cut a clean-up short."""
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _terminated(signum, frame):  # noqa: ARG001 - a signal handler's signature
    raise SystemExit(128 + signum)  # unwinds through the finally blocks (the worktree's removal)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--playbook", default="us-east-1-2021", choices=sorted(COUNTED) + ["all"])
    ap.add_argument("--duration", default="12h")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--sizes", default=",".join(ALL_SIZES),
                    help=f"comma-separated, of {', '.join(ALL_SIZES)} (default: all of them)")
    ap.add_argument("--against", metavar="REV", help="also measure this revision of the repository, side by side")
    args = ap.parse_args()
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in ALL_SIZES]
    if bad or not sizes:
        ap.error(f"--sizes: {', '.join(bad) or 'none given'}; choose from {', '.join(ALL_SIZES)}")
    sizes = list(dict.fromkeys(sizes))
    if args.repeats < 1:
        ap.error("--repeats: at least 1")
    playbooks = sorted(COUNTED) if args.playbook == "all" else [args.playbook]

    here = Path(__file__).resolve().parent
    repo = Path(git("rev-parse", "--show-toplevel", cwd=here))
    signal.signal(signal.SIGTERM, _terminated)
    neutral = Path(tempfile.mkdtemp(prefix="bench-core-cwd-"))
    try:
        if args.against:
            with Worktree(repo, args.against) as other:
                measure(args, playbooks, sizes, repo, other, neutral)
        else:
            measure(args, playbooks, sizes, repo, None, neutral)
    finally:
        with shielded():
            shutil.rmtree(neutral, ignore_errors=True)


def measure(args, playbooks: list[str], sizes: list[str], repo: Path, other: Path | None, neutral: Path) -> None:
    roots = {"this": repo} | ({"rev": other} if other is not None else {})
    head = git("rev-parse", "--short", "HEAD", cwd=repo)
    dirty = git("status", "--porcelain", cwd=repo).splitlines()
    print(f"this checkout: {repo} at {head}" + (f", as on disk: {len(dirty)} files changed or untracked" if dirty else ""))
    if other is not None:
        print(f"against: {args.against} ({git('rev-parse', '--short', 'HEAD', cwd=other)}), a worktree in {other}")
    print(f"child processes: {sys.executable}, from {neutral}, PYTHONPATH = the checkout measured", flush=True)

    # numba compiles a checkout's kernels at their first call and caches them beside its
    # source: a checkout whose cache is cold (a fresh worktree, kernels just edited) would pay
    # the compilation (up to 20 s) inside its first measured run. One unmeasured run each first.
    for pb in playbooks:
        for rev, root in roots.items():
            warm = run_child(root, {}, WARM_UP, pb, neutral)
            print(f"warm-up ({pb}, {WARM_UP}, {rev}): {warm['whole']:.1f} s", flush=True)

    # results[playbook][size][revision]: one dict per repeat
    results = {pb: {s: {k: [] for k in roots} for s in sizes} for pb in playbooks}
    for _ in range(args.repeats):
        for pb in playbooks:
            counted = COUNTED[pb][0]
            for size in sizes:
                sets = {} if size == "default" else {"scale": SIZES[size] / counted}
                for rev, root in roots.items():  # this checkout, then REV: side by side
                    results[pb][size][rev].append(run_child(root, sets, args.duration, pb, neutral))

    for pb in playbooks:
        report(args, pb, results[pb], sizes, other is not None)
    every = [r for per_pb in results.values() for per_size in per_pb.values() for rs in per_size.values() for r in rs]
    print(f"\npeak memory over all runs: {max(r['rss_mb'] for r in every):.0f} MiB")
    print(f"this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          f"machine noise: best of {args.repeats}")


def report(args, playbook: str, res: dict, sizes: list[str], against: bool) -> None:
    def best(size: str, rev: str = "this") -> dict:
        return min(res[size][rev], key=lambda r: r["engine_wall"])

    def rss(size: str) -> str:
        text = f"peak RSS {best(size)['rss_mb']:5.0f} MiB"
        return text + (f" ({args.against}: {best(size, 'rev')['rss_mb']:.0f} MiB)" if against else "")

    what = COUNTED[playbook][1]
    print(f"\n== {playbook}, historical runbook, {args.duration} at 1 s ticks ==")
    if "default" in sizes:
        d = best("default")
        print(f"full scenario ({what}):")
        print(f"  engine wall {d['engine_wall']:.2f} s  ->  {d['sim'] / d['engine_wall']:.0f} simulated s per wall s"
              f"  (child's whole wall {d['whole']:.1f} s; loop broken {d['loop_broken']}, {rss('default')})")
    scaled = [s for s in sizes if s in SIZES]
    if scaled:
        counted = "the clients counted above" if "default" in sizes else f"counting as in the full scenario: {what}"
        print(f"same scenario at other sizes ({counted}; cost should not depend on it):")
        for name in scaled:
            r = best(name)
            print(f"  {name:>5} clients: engine wall {r['engine_wall']:6.2f} s (whole {r['whole']:6.1f} s)   "
                  f"{rss(name)}   loop broken {r['loop_broken']}")
    if "10^3" in sizes and "10^7" in sizes:
        ratio = best("10^7")["engine_wall"] / best("10^3")["engine_wall"]
        print(f"ratio wall(10^7) / wall(10^3) = {ratio:.2f}   (goal <= 1.5)")
    if "10^7" in sizes:
        print(f"10^7 clients, {args.duration}: {best('10^7')['engine_wall']:.1f} s (guide: under 45 s for 12 h)")
    if against:
        rev = args.against
        print(f"\nthis checkout against {rev} (engine wall, best of {args.repeats}; whole child wall in brackets):")
        print(f"  {'size':>7}  {'this':>17}  {rev:>17}  ratio ({rev} / this)")
        for size in sizes:
            a, b = best(size), best(size, "rev")
            print(f"  {size:>7}  {a['engine_wall']:7.2f} s ({a['whole']:5.1f})  {b['engine_wall']:7.2f} s ({b['whole']:5.1f})"
                  f"  {ratio_text(a['engine_wall'], b['engine_wall'])}")
        changed = [s for s in sizes if best(s)["loop_broken"] != best(s, "rev")["loop_broken"]]
        for size in changed:
            print(f"  note: at {size} the loop broke at {best(size)['loop_broken']} here, "
                  f"at {best(size, 'rev')['loop_broken']} in {rev} (not the same run)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the worktree is gone by now
        sys.exit("interrupted")
