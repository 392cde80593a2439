"""The cohort population's results do not change: small worlds that exercise each of its
features and operations (tests/population_features.py) produce run directories whose
metrics, events, score and attribution are byte for byte those recorded in
tests/fixtures/population_features.json, with the kernels compiled (as runs are) and,
in another process, run as Python (``GAMEDAY_NO_JIT=1``: the choice is made once per
process, at the first kernel call). Each run also proves its own coverage: every
operation it means to exercise was applied (and none rejected), and what it is about
shows in its metrics (a breaker that opened and half-opened, a budget that made errors of
retries, connections a device dropped, refusals by a full queue, ...)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import agents.compiled
from population_features import APPLIED, FAST, RUNS, play
import results_fixture
from results_fixture import digest

HERE = Path(__file__).resolve().parent
FIXTURE = json.loads((HERE / "fixtures" / "population_features.json").read_text(encoding="utf-8"))


def _differences(name: str, recorded: dict, now: dict) -> str | None:
    """What differs from the fixture (metrics columns, then files), or None."""
    columns = sorted(c for c, h in recorded["columns"].items() if now["columns"].get(c) != h)
    extra = sorted(set(now["columns"]) - set(recorded["columns"]))
    if columns or extra:
        return (f"{name}: metrics columns that differ from revision {FIXTURE['revision']}: {columns[:12]}"
                + (f"; columns not recorded: {extra[:12]}" if extra else ""))
    files = sorted(f for f in set(recorded["files"]) | set(now["files"])
                   if now["files"].get(f) != recorded["files"].get(f))
    if files:
        return f"{name}: result files that differ from revision {FIXTURE['revision']}: {files}"
    return None


def _events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines() if line]


# -- what each run is about, in its metrics -------------------------------------------------

def _window(m: pd.DataFrame, start_s: float, end_s: float) -> pd.DataFrame:
    """The ticks from ``start_s`` to before ``end_s`` (simulated seconds from the start)."""
    return m[(m["time_s"] >= start_s) & (m["time_s"] < end_s)]


def _runs(flags: pd.Series) -> list[int]:
    """The lengths of the runs of consecutive true values."""
    out, n = [], 0
    for f in list(flags) + [False]:
        if f:
            n += 1
        elif n:
            out.append(n)
            n = 0
    return out


def _breaker_open(m: pd.DataFrame, pop: str) -> pd.Series:
    """Ticks whose fresh requests all failed at once, none put on the wire: an open breaker."""
    return (m[f"{pop}.fresh"] > 0) & (m[f"{pop}.attempts"] == 0)


def check_breaker(m: pd.DataFrame, events: list[dict], run_dir: Path) -> None:
    c = lambda s: f"clients.{s}"  # noqa: E731
    surge = _window(m, 120, 240)
    assert surge["bridge.rejected"].sum() > 1000 and surge[c("setup_failed")].sum() > 1000, \
        "the surge should overflow the devices' connection table (setups refused)"
    assert _window(m, 0, 120)["bridge.rejected"].sum() == 0
    # the playbook's breaker: open for its 20 s, half-open probes, open again, while the fault lasts
    runs = _runs(_breaker_open(_window(m, 240, 420), "clients"))
    assert len(runs) >= 3 and max(runs) >= 15, f"the breaker should open, half-open and open again: {runs}"
    assert not _breaker_open(_window(m, 420, 540), "clients").any(), "no breaker from 00:07 to 00:09"
    assert len(_runs(_breaker_open(_window(m, 570, 720), "clients"))) >= 2, "the breaker set again at 00:09 opens"
    # reconnections on timeouts (00:04) and on refusals (the error fault at 00:07:30, no breaker)
    baseline = _window(m, 0, 120)[c("conn_attempts")].sum() / 4
    assert _window(m, 240, 270)[c("conn_attempts")].sum() > 5 * baseline
    assert _window(m, 450, 480)[c("conn_attempts")].sum() > 10 * baseline
    # the restart at 00:12 drops every connection (conn_event)
    assert _window(m, 720, 725)[c("broken_connections")].sum() == 1000 == m[c("broken_connections")].sum()
    assert m["bridge.dropped_by_action"].sum() > 0


def check_budget(m: pd.DataFrame, events: list[dict], run_dir: Path) -> None:
    c = lambda s: f"clients.{s}"  # noqa: E731
    # unlimited attempts: errors only where the budget refuses retries
    assert _window(m, 0, 120)[c("errors")].sum() == 0
    assert _window(m, 120, 300)[c("errors")].sum() > 10000, "the budget should make errors of retries"
    no_budget = _window(m, 300, 480)
    assert no_budget[c("failed")].sum() > 10000 and no_budget[c("errors")].sum() == 0, \
        "without a budget (00:05) every failure is retried"
    assert _window(m, 480, 600)[c("errors")].sum() > 10000, "the budget set again at 00:08 makes errors"
    # the per-request surge at 00:10: requests of their own
    assert _window(m, 600, 630)[c("demand")].sum() > 1.15 * _window(m, 0, 30)[c("demand")].sum()
    # retries at once against a full queue (00:11:30): refused again at once, never sent (r_full)
    # (per-request: each request sent is a setup, so attempts beyond the setups were refused at once)
    at_once = m[c("attempts")] - m[c("conn_attempts")]
    assert at_once.min() == 0 and (at_once[m["time_s"] < 660] == 0).all()
    assert at_once[(m["time_s"] >= 690) & (m["time_s"] < 780)].sum() > 10000
    assert _window(m, 690, 780)["api.queue_backlog"].max() > 0


def check_durable(m: pd.DataFrame, events: list[dict], run_dir: Path) -> None:
    c = lambda s: f"events.{s}"  # noqa: E731
    assert (_window(m, 0, 600)[c("attempts")] <= 1200).all(), "dispatch at most max_rate"
    paused = _window(m, 125, 180)
    assert (paused[c("attempts")] == 0).all() and paused[c("backlog")].iloc[-1] > 50000, "scale_dispatch 0 pauses"
    readmitted = [e["share"] for e in events if e["event"] == "readmitted" and e["agent"] == "events"]
    assert readmitted == [0.25, 0.5, 0.75, 1.0]
    assert (_window(m, 181, 210)[c("attempts")] <= 300).all(), "the first step of the readmission: a quarter"
    dropped = [e["requests"] for e in events if e["event"] == "backlog_dropped"]
    assert len(dropped) == 1 and dropped[0] > 10000
    # durable work is never given up: its only errors before 00:14 are the backlog dropped
    assert _window(m, 0, 840)[c("errors")].sum() == dropped[0]
    # a new path and target (00:07): every pooled connection broken, the traffic moves
    assert _window(m, 420, 425)[c("broken_connections")].sum() == 500 == m[c("broken_connections")].sum()
    after = _window(m, 430, 600)
    assert (after["api.offered"] == 0).all() and (after["api2.offered"] > 0).all()
    assert (after["bridge2.connections"] > 0).all()
    assert _window(m, 480, 540)[c("held_back")].sum() > 0, "scale_rate 0.5 holds requests back"
    per_request = _window(m, 602, 720)
    assert (per_request[c("connected")] == 0).all()
    assert (per_request[c("attempts")] == per_request[c("conn_attempts")]).all(), "per-request: every request a setup"
    assert _window(m, 660, 720)[c("failed")].sum() > 0
    back = _window(m, 720, 800)
    assert back[c("connected")].iloc[5] < 200 and back[c("connected")].iloc[-1] == 500, \
        "back to pooled: connections opened over a minute"
    assert _window(m, 840, 845)[c("attempts")].max() > 5000, "made perishable: the waiting work goes out at once"
    assert _window(m, 900, 960)[c("errors")].sum() > 0, "perishable: given up after max_attempts"
    assert (_window(m, 1021, 1080)[c("attempts")] <= 400).all(), "durable again at 800/s, dispatch halved"


def check_perishable(m: pd.DataFrame, events: list[dict], run_dir: Path) -> None:
    c = lambda s: f"clients.{s}"  # noqa: E731
    # set_connection at 00:01: a one-minute lifetime, so renewals at about a client a minute
    assert _window(m, 90, 170)[c("conn_attempts")].mean() > 5 * _window(m, 0, 55)[c("conn_attempts")].mean()
    # the dependency's health falls (00:03): fresh requests fail locally, the target is fine
    dep = _window(m, 182, 240)
    assert dep[c("failed")].sum() > 10000
    assert (dep["api.success_ratio"] == 1).all() and (dep["auth.success_ratio"] < 1).all()
    assert _window(m, 0, 180)[c("failed")].sum() == 0
    dropped = [e["requests"] for e in events if e["event"] == "backlog_dropped"]
    assert len(dropped) == 1 and dropped[0] > 0
    assert _window(m, 390, 420)[c("conn_attempts")].sum() > 1000, "reconnect on refusals (set_connection)"
    assert _window(m, 300, 340)[c("conn_attempts")].sum() < 1000, "no longer on timeouts (set_connection)"
    assert [e["share"] for e in events if e["event"] == "readmitted"] == [0.4, 0.6, 0.8, 1.0]
    assert _window(m, 480, 600)[c("held_back")].sum() > 0 and _window(m, 605, 660)[c("held_back")].sum() == 0
    per_request = _window(m, 662, 780)
    assert (per_request[c("connected")] == 0).all() and per_request[c("failed")].sum() > 0
    back = _window(m, 780, 815)
    assert back[c("errors")].sum() > 1000, "back to pooled: fresh requests fail until their client has a connection"
    assert back[c("connected")].iloc[0] < 200 and back[c("connected")].iloc[-1] > 900, "connections opened over 30 s"


def check_health(m: pd.DataFrame, events: list[dict], run_dir: Path) -> None:
    f = lambda s: f"fetchers.{s}"  # noqa: E731
    fault = _window(m, 125, 210)
    assert fault[f("backlog")].max() > 5000 and (fault[f("attempts")] <= 334).all()
    # failures the store never saw: the breaker's (no dependency, so none fail locally otherwise)
    on_network = fault["store.offered"].sum() - fault[f("ok")].sum()
    assert fault[f("failed")].sum() > on_network + 1000, "the breaker should fail requests without sending them"
    assert fault[f("errors")].sum() == 0
    # the dependent's health is the fetchers' clients without a backlog
    calm, sick = _window(m, 30, 120), _window(m, 150, 210)
    assert calm["users.failed"].sum() < 0.4 * calm["users.fresh"].sum()
    assert sick["users.failed"].sum() > 0.9 * sick["users.fresh"].sum() and (sick["dash.success_ratio"] == 1).all()
    assert (_window(m, 301, 480)[f("attempts")] <= 200).all(), "dispatch at 0.6 x 333.3/s"


def check_nowhere(m: pd.DataFrame, events: list[dict], run_dir: Path) -> None:
    c = lambda s: f"clients.{s}"  # noqa: E731
    assert (m[c("ok")] == m[c("attempts")]).all(), "neither path nor target: every request answered at once"
    assert (m[c("failed")] == m[c("errors")]).all() and m[c("failed")].sum() > 0  # (those without a connection)
    assert _window(m, 60, 90)[c("conn_attempts")].sum() > 1000 and m[c("held_back")].sum() > 0
    assert (_window(m, 181, 240)[c("connected")] == 0).all() and _window(m, 270, 300)[c("connected")].min() == 300


def check_shards(m: pd.DataFrame, events: list[dict], run_dir: Path) -> None:
    assert m["time_s"].iloc[1] - m["time_s"].iloc[0] == 0.5
    for col in ("attempts", "ok", "failed", "broken_connections", "conn_attempts"):
        assert (m[f"clients.{col}"] == m[f"clients#0.{col}"] + m[f"clients#1.{col}"]).all()
    assert _window(m, 120, 180)["bridge.rejected"].sum() > 0
    assert m["clients#0.broken_connections"].sum() > 0 and m["clients#1.broken_connections"].sum() > 0
    assert m["clients.broken_connections"].sum() == 1000
    assert _window(m, 240, 330)["clients.failed"].sum() > 10000


def check_attribution(m: pd.DataFrame, events: list[dict], run_dir: Path) -> None:
    att = json.loads((run_dir / "attribution.json").read_text(encoding="utf-8"))
    assert att["breaker"] == "fix_backoff" and len(att["counterfactuals"]) == 1
    assert _window(m, 180, 300)["clients.conn_attempts"].sum() > 10000  # the loop the fix breaks


CHECKS = {
    "breaker, full table, restart": check_breaker,
    "budget, per-request surge, full queue": check_budget,
    "durable dispatch, path, mode and work": check_durable,
    "perishable hot-fixes, dependency": check_perishable,
    "durable budget, breaker, health of clients": check_health,
    "no path, no target": check_nowhere,
    "shards, decorrelated jitter, 0.5 s ticks": check_shards,
    "attribution": check_attribution,
}


def test_every_run_is_checked_and_recorded():
    assert set(CHECKS) == set(RUNS) == set(APPLIED) == set(FIXTURE["runs"])


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in RUNS])
def test_population_results_are_those_recorded(tmp_path, name):
    run_dir = play(name, tmp_path / "run").dir
    if importlib.util.find_spec("numba") and not os.environ.get("GAMEDAY_NO_JIT"):
        assert agents.compiled.compiling(), "the kernels should have run compiled"
    events = _events(run_dir)
    applied = [(f"{e['agent']}.{e['op']}", e["args"]) for e in events if e["event"] == "applied"]
    missing = [(op, args) for op, args in APPLIED[name]
               if not any(o == op and all(a.get(k, "-") == v for k, v in args.items()) for o, a in applied)]
    assert not missing, f"{name}: operations never applied: {missing}"
    rejected = [(e["agent"], e["op"], e.get("reason")) for e in events if e["event"] == "apply_rejected"]
    assert not rejected, f"{name}: operations rejected: {rejected}"
    CHECKS[name](pd.read_csv(run_dir / "metrics.csv"), events, run_dir)
    differ = _differences(name, results_fixture.recorded(FIXTURE, name), digest(run_dir))
    assert differ is None, differ


#: the runs played with the kernels as Python in another process
_CHILD = """
import json, sys, tempfile
from pathlib import Path
import agents.compiled
from population_features import play
import results_fixture
from results_fixture import digest
out = {}
with tempfile.TemporaryDirectory() as tmp:
    for i, name in enumerate(json.loads(sys.argv[1])):
        out[name] = digest(play(name, Path(tmp) / f"run{i}").dir)
print(json.dumps({"compiling": agents.compiled.compiling(), "runs": out}))
"""


@pytest.fixture(scope="module")
def played_as_python(request):
    """name -> the digest of run ``name`` played with GAMEDAY_NO_JIT=1, in one other process
    for every run this session selects (the kernels' choice is made once per process)."""
    wanted = [item.callspec.params["name"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_same_results_with_the_kernels_as_python"]
    root = HERE.parent
    env = {**os.environ, "GAMEDAY_NO_JIT": "1",
           "PYTHONPATH": os.pathsep.join([str(root), str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(wanted)], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["compiling"] is False, "GAMEDAY_NO_JIT=1 should make the kernels run as Python"
    return out["runs"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in RUNS])
def test_same_results_with_the_kernels_as_python(played_as_python, name):
    differ = _differences(name, results_fixture.recorded(FIXTURE, name), played_as_python[name])
    assert differ is None, f"kernels as Python: {differ}"


#: the kernels loaded for one world's plan, then every run above played, in a process
#: whose kernel cache (``NUMBA_CACHE_DIR``, argv[1]) starts empty
_LOAD_THEN_PLAY = """
import json, sys, tempfile
from pathlib import Path
from orchestrator.hosting.inprocess import load_kernels
from orchestrator.runs.runner import RunSpec, prepare
from population_features import RUNS, play


def cache():
    return sorted((str(p.relative_to(sys.argv[1])), p.stat().st_mtime_ns) for p in Path(sys.argv[1]).rglob("*")
                  if p.is_file())


load_kernels(prepare(RunSpec(playbook="us-east-1-2021", duration=60.0))[3])
loaded = cache()
with tempfile.TemporaryDirectory() as tmp:
    for i, name in enumerate(RUNS):
        play(name, Path(tmp) / f"run{i}")
print(json.dumps({"loaded": loaded, "played": cache()}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not importlib.util.find_spec("numba") or bool(os.environ.get("GAMEDAY_NO_JIT")),
                    reason="the kernels run as Python")
def test_loading_the_kernels_for_one_world_leaves_none_for_any_run_to_compile(tmp_path):
    """``load_kernels`` is what a driver calls before it starts the processes that play a
    world (Ray hosts, a comparison's runs), so that they do not compile at once into the
    same cache: it must compile every kernel any population uses, whatever its spec. Here
    it is given the 2021 scenario, and the runs above (every population feature) must then
    find all they need in the cache: none is compiled or written again."""
    root = HERE.parent
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONPATH": os.pathsep.join([str(root), str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _LOAD_THEN_PLAY, str(tmp_path / "numba")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any(name.endswith(".nbc") for name, _ in out["loaded"])  # (compiled into this empty cache)
    assert out["played"] == out["loaded"]


def test_a_readmission_ends_at_a_clock_time_given_as_one(tmp_path):
    """#42: a readmission that should end at a clock time had its step and interval worked out
    by hand; ``until`` takes the time, as a playbook writes one, in a mitigation's params or a
    runbook's override of them."""
    from helpers import play
    from orchestrator.errors import InvalidRunbook

    world = {"name": "reopen", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "12m"},
             "services": [{"name": "api", "capacity": 5000}],
             "populations": [{"name": "users", "clients": 100, "rate": 1.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "2s"}, "retry": {"max_attempts": 2}}],
             "mitigations": [{"name": "close", "deploy": False,
                              "effects": [{"target": "users", "op": "scale_rate", "args": {"factor": 0}}]},
                             {"name": "reopen", "deploy": False, "params": {"until": "00:11"},
                              "effects": [{"target": "users", "op": "readmit", "args": {"until": "$until", "every": "1m"}}]}],
             "scoring": {"impact": {"users": 1}}}
    rules = [{"when": {"at": "00:02"}, "do": "close"},
             {"when": {"at": "00:04"}, "do": {"action": "reopen", "params": {"until": "00:09"}}}]
    r = play(tmp_path / "ok", world, rules)
    steps = r.events[r.events["event"] == "readmitted"]
    # applied at 00:04:02 (asked, effective, applied: a tick each), so 4:58 to go: all of it back by 00:09
    assert list(steps["share"]) == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert list(steps["clock"]) == ["00:04:02", "00:05:02", "00:06:02", "00:07:02", "00:08:02"]
    with pytest.raises(InvalidRunbook) as e:
        play(tmp_path / "bad", world, [{"when": {"at": "00:04"}, "do": {"action": "reopen", "params": {"until": "9am"}}}])
    assert "a clock time such as" in str(e.value)


def test_an_actions_cut_and_its_readmission_return_to_the_demand_of_the_moment(tmp_path):
    """An outsider's trial (#42): a shed (scale_rate 0.1) replaced the morning peak's factor
    (1.2, a trigger's), so the readmission let back the playbook's rate, not the peak's, and
    flattered the runbook. The world's factor and the response's are kept apart."""
    from helpers import play

    world = {"name": "peak", "title": "t", "clock": {"start": "00:00", "tick": "1s", "duration": "12m"},
             "services": [{"name": "api", "capacity": 50_000}],
             "populations": [{"name": "users", "clients": 1000, "rate": 1.0, "mode": "per_request", "target": "api",
                              "request": {"timeout": "2s"}, "retry": {"max_attempts": 2}}],
             "triggers": [{"name": "peak", "at": "00:02", "effects": [
                 {"target": "users", "op": "scale_rate", "args": {"factor": 1.2}}]}],
             "mitigations": [{"name": "shed", "deploy": False,
                              "effects": [{"target": "users", "op": "scale_rate", "args": {"factor": 0.1}}]},
                             {"name": "reopen", "deploy": False,
                              "effects": [{"target": "users", "op": "readmit", "args": {"over": "2m", "every": "1m"}}]}],
             "scoring": {"loop": {"populations": ["users"]}, "impact": {"users": 1}}}
    r = play(tmp_path, world, [{"when": {"at": "00:04"}, "do": "shed"}, {"when": {"at": "00:07"}, "do": "reopen"}])
    m = r.metrics.set_index("clock")
    peak, shed, back = (m.loc[a:b, "users.demand"].mean() for a, b in
                        (("00:02:30", "00:03:59"), ("00:04:30", "00:06:59"), ("00:09:30", "00:11:59")))
    assert peak == pytest.approx(1200, rel=0.03) and shed == pytest.approx(120, rel=0.1)
    assert back == pytest.approx(1200, rel=0.03)  # the peak's demand, not the playbook's 1,000
    assert m.loc["00:09:30":, "users.held_back"].sum() == 0
    held = m.loc["00:04:30":"00:06:59", "users.held_back"].mean()
    assert held == pytest.approx(1080, rel=0.01)  # of the peak's 1,200, the shed keeps 1,080 back
