"""Small helpers shared by the tests: build and step worlds in process."""
from __future__ import annotations

from contextlib import contextmanager
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import orchestrator
from orchestrator.hosting.inprocess import InProcessHost
from orchestrator.playbook.loader import load_playbook
from orchestrator.engine.world import build_plan

HERE = Path(__file__).parent


def playbook_path(name: str) -> str:
    return str(HERE / "playbooks" / f"{name}.yaml.j2")


def step_world(playbook: str, sets: dict | None = None, seed: int = 1, duration: float | None = None,
               runbook: dict | None = None, tick: float | None = None) -> pd.DataFrame:
    """Run a world in process without a run directory; one row per tick, columns agent.metric."""
    pb = load_playbook(playbook, sets or {})
    plan = build_plan(pb, runbook, seed, duration, tick)
    host = InProcessHost(plan)
    rows = []
    for _ in range(plan.ticks):
        res = host.step()
        rows.append({f"{a}.{m}": v for a, ms in res.metrics.items() for m, v in ms.items()})
    return pd.DataFrame(rows)


def host_with_kind(playbook: str, kind: str, agents, seed: int, duration: float | None = None) -> InProcessHost:
    """``playbook`` in process, with the agents named in ``agents`` built as ``kind``: the
    client-by-client reference population (``population:reference``) in the tests that
    check the cohort model against it, in worker processes too."""
    register_reference_population()
    plan = build_plan(load_playbook(playbook), None, seed, duration)
    for a in plan.agents:
        if a.name in agents:
            a.kind = kind
    return InProcessHost(plan)


def play(tmp_path: Path, world: dict, rules: list | None = None, **kw):
    """Run ``world`` (a playbook as a dict) with a runbook of ``rules`` into ``tmp_path``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "world.yaml.j2").write_text(yaml.safe_dump(world))
    book = tmp_path / "rules.yaml"
    book.write_text(yaml.safe_dump({"name": "rules", "rules": rules or []}))
    kw.setdefault("out", tmp_path / "run")
    return orchestrator.run(str(tmp_path / "world.yaml.j2"), runbook=str(book), seed=3, **kw)


def at(r, clock: str, length: int = 60):
    """The metrics of the ``length`` seconds from ``clock`` on."""
    i = r.metrics.index[r.metrics["clock"] == clock][0]
    return r.metrics.iloc[i:i + length]


def window(m: pd.DataFrame, start: str, end: str) -> pd.DataFrame:
    """The rows of a metrics table from clock ``start`` up to (not including) ``end``."""
    return m[(m["clock"] >= start) & (m["clock"] < end)]


def chromium() -> str:
    """Debian's chromium (.ci/run installs it): missing, the test fails in CI and is skipped elsewhere."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it")
        pytest.skip("chromium is not installed (.ci/run installs it)")
    return browser


#: headless Chromium as the tests (and benchmarks/bench_team_page.py) drive it; the closed network
#: refuses Chromium's own background connections, so it is kept from making them
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000")


@contextmanager
def webdriver(tmp_path: Path, name: str = "browser"):
    """Headless Chromium driven through Debian's chromedriver (.ci/run installs both), with
    its console log kept; quits at the end."""
    from selenium import webdriver as wd
    from selenium.webdriver.chrome.service import Service

    browser = chromium()
    driver_path = shutil.which("chromedriver")
    if driver_path is None:
        if os.environ.get("CI"):
            pytest.fail("chromedriver is missing: .ci/run installs Debian's chromium-driver")
        pytest.skip("chromedriver is not installed (.ci/run installs Debian's chromium-driver)")
    opts = wd.ChromeOptions()
    opts.binary_location = browser
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / f'profile-{name}'}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = wd.Chrome(options=opts, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def dump_dom(browser, url, tmp_path, budget_ms):
    """The page's DOM after ``budget_ms`` of virtual time (timers run, fetches are waited for)."""
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          f"--user-data-dir={tmp_path / f'profile-{budget_ms}'}", "--enable-logging=stderr", "--v=0",
                          f"--virtual-time-budget={budget_ms}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout, out.stderr


def shown(dom: str) -> dict:
    """What the scoreboard page shows, read from its DOM."""
    def one(id_):
        m = re.search(rf'id="{id_}"[^>]*>([^<]*)<', dom)
        return m.group(1) if m else None

    return {"clock": one("clock"), "state": one("state"), "title": one("title"), "status": one("status"),
            "teams": re.findall(r'<td class="team">([^<]*)</td>', dom),
            "impacts": [float(v) for v in re.findall(r'<td class="num impact">([^<]*)</td>', dom)]}


def serve(args: list[str], out: Path):
    """`gameday serve ARGS --out OUT` in a subprocess; returns (process, tokens.json) once
    the session has written its tokens."""
    import json
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", *args, "--out", str(out)],
                            cwd=HERE.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "tokens.json").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the session did not start"
        time.sleep(0.2)
    time.sleep(0.2)  # (written atomically enough: one small file, read after its size settles)
    return proc, json.loads((out / "tokens.json").read_text())


def stop(proc, clients) -> None:
    """Close the test's console clients and kill a `gameday serve` still running."""
    for c in clients:
        c.close()
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def stop_gently(proc, sig: int, within: float) -> None:
    """Send ``proc`` the signal ``sig`` and wait ``within`` seconds for it to end; kill it
    if it has not."""
    import subprocess

    proc.send_signal(sig)
    try:
        proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def check_score_record(score: dict) -> None:
    """score.json holds what reports/rundir.py's Score record declares, and nothing else."""
    from reports import rundir

    declared = lambda typed: set(typed.__annotations__)  # noqa: E731
    assert set(score) <= declared(rundir.Score), set(score) - declared(rundir.Score)
    assert {"trigger", "loop_formed", "loop_broken", "recovered", "impact", "collateral"} <= set(score)
    milestones = [score["loop_broken"], *score["recovered"].values(),
                  *(score[k] for k in ("devices_healthy", "backlog_drained") if k in score)]
    assert len(milestones) >= 2
    for m in milestones:
        assert set(m) <= declared(rundir.Milestone), set(m) - declared(rundir.Milestone)
        for when in [m["final"], m["first_at"], *m["relapses"]]:
            assert when is None or set(when) <= declared(rundir.When)
    for key in ("trigger", "first_customer_update"):
        assert set(score[key]) <= declared(rundir.When)


def fresh(read, tries: int = 20):
    """``read()`` of a page's element, read again if the page re-rendered the element between
    its being found and being read (the value itself is taken as it is the first time it is
    read whole)."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(tries - 1):
        try:
            return read()
        except StaleElementReferenceException:
            time.sleep(0.05)
    return read()


def wait_for(what, timeout=30.0, every=0.1):
    """``what()`` once it is true, polled every ``every`` s. An element a page re-rendered
    between being found and being read is read again on the next try (the condition
    itself is unchanged)."""
    from selenium.common.exceptions import StaleElementReferenceException

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            value = what()
        except StaleElementReferenceException:
            value = None
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s: {what.__doc__ or what}")


def interrupt_when(proc: subprocess.Popen, ready, timeout: float = 60.0) -> str:
    """Send SIGINT to ``proc`` (a command started with text pipes) once ``ready()`` holds,
    as Ctrl-C does; its stderr once it has exited. Fails if it exits before, or if
    ``ready()`` does not hold within ``timeout`` s; a command left running is killed."""
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"not within {timeout} s: {ready.__doc__ or ready}"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def built_in_from(tmp_path: Path, name: str, start: str) -> str:
    """The built-in playbook ``name`` with its clock starting at ``start`` (its triggers keep
    their clock times), as a file in ``tmp_path``: the same incident after a shorter quiet
    prologue, for tests that compare two ways of playing it (the world starts in its steady
    state either way). Its runbooks are found by name, as a copied built-in's are."""
    from orchestrator.playbook.files import builtin_dir

    text = (builtin_dir() / f"{name}.yaml.j2").read_text()
    starts = re.findall(r'^  start: "[0-9:]+"$', text, flags=re.M)
    assert len(starts) == 1, starts
    path = tmp_path / f"{name}.yaml.j2"
    path.write_text(text.replace(starts[0], f'  start: "{start}"'))
    return str(path)


_pool = None  # the worker processes of in_parallel, started once per test session


def in_parallel(fn, items) -> list:
    """``[fn(x) for x in items]``, spread over this machine's cores: for tests that need many
    independent simulations (seeds). The workers are started afresh (spawned, not forked:
    this process may hold Ray's threads) once per session; ``fn`` and the items must pickle,
    and the results come back in the order of the items."""
    global _pool
    if _pool is None:
        import atexit
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # At the lowest priority, as the long runs' player: the session's Ray actors run niced,
        # and a test on the other pytest-xdist worker must not starve them of the cores.
        _pool = ProcessPoolExecutor(max_workers=min(4, os.cpu_count() or 1), initializer=os.nice, initargs=(19,),
                                    mp_context=multiprocessing.get_context("spawn"))
        atexit.register(_pool.shutdown)
    return list(_pool.map(fn, items))


def register_reference_population() -> None:
    """Make the client-by-client reference population (``agents.reference``) a kind worlds
    can build, ``population:reference``: only tests build it (conftest, and the worker
    processes of ``in_parallel``, which do not read conftest)."""
    from agents import AGENT_CLASSES
    from agents.reference import ClientByClientPopulation

    AGENT_CLASSES.setdefault("population:reference", ClientByClientPopulation)


def gameday(args: list[str]) -> tuple[int, str, str]:
    """The command line in this process (tests/test_bad_input.py plays it as a process too):
    (exit code, stdout, stderr); a traceback fails the test."""
    from click.testing import CliRunner

    from orchestrator.cli import main

    result = CliRunner().invoke(main, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.stdout, result.stderr


def copy_run(run: Path, where: Path) -> Path:
    """A copy of the run directory ``run`` (its links kept as links), to alter."""
    shutil.copytree(run, where, symlinks=True)
    return where
