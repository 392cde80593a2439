"""The cohort model against the client-by-client reference (DESIGN 3.3).

One world (tests/playbooks/cohort_check.yaml.j2), two independent parts:
- ``clients``: 2,000 pooled clients behind the bridge. Healthy at first (utilisation about
  0.5); at 00:03 a one-minute connection surge tips them into a retry storm that the
  latent back-off bug keeps going; at 00:15 the bug is fixed and their exponential
  back-off has to bring the bridge back.
- ``lookups``: 1,000 per-request clients (DNS-like, one new flow per lookup) behind their
  own NAT. A one-minute burst at 00:03 sets off a retry storm that sustains itself (the
  retries keep the NAT overloaded) until half the lookups are shed at 00:15.

Each seed runs twice: with the cohort ``Population`` and with ``ClientByClientPopulation``
in its place (both populations). Over 10 seeds, each population's mean success ratio
(sum ok / sum (ok + failed) over the window) and mean attempt rate ((request attempts +
connection attempts) per second) must agree within 5% in every window.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from agents import AGENT_CLASSES, Population
from agents.reference import ClientByClientPopulation
from tests.helpers import host_with_kind, in_parallel

pytestmark = pytest.mark.slow  # twenty runs, half of them client by client

PLAYBOOK = Path(__file__).parent / "playbooks" / "cohort_check.yaml.j2"
POPULATIONS = ("clients", "lookups")
SEEDS = range(10)
DURATION = 1200  # seconds (ticks of 1 s)
#: window -> [start, end) in seconds. Surge and burst run 180-240; bug fix and shedding at 900.
WINDOWS = {
    "steady": (60, 180),      # after a minute of warm-up, before the surge
    "storm": (300, 900),      # a minute after the surge ended: the storms keep themselves going
    "recovery": (900, 1200),  # bug fixed (back-off has to drain the storm), lookups shed
}
TOLERANCE = 0.05  # relative


def _host(kind: str, seed: int):
    return host_with_kind(str(PLAYBOOK), kind, POPULATIONS, seed, DURATION)


def _run(kind: str, seed: int) -> dict[str, np.ndarray]:
    """Per population, per tick: ok, failed, attempts + conn_attempts."""
    host = _host(kind, seed)
    rows: dict[str, list] = {p: [] for p in POPULATIONS}
    for _ in range(host.plan.ticks):
        metrics = host.step().metrics
        for p in POPULATIONS:
            m = metrics[p]
            rows[p].append((m["ok"], m["failed"], m["attempts"] + m["conn_attempts"]))
    return {p: np.array(r, dtype=float) for p, r in rows.items()}


def _figures(series: np.ndarray, window: tuple[int, int], dt: float = 1.0) -> tuple[float, float]:
    lo, hi = window
    ok, failed, attempts = series[lo:hi].sum(axis=0)
    return ok / (ok + failed), attempts / ((hi - lo) * dt)


@pytest.fixture(scope="module")
def figures() -> dict[str, dict[tuple[str, str], tuple[float, float]]]:
    """model -> (population, window) -> (mean success ratio, mean attempt rate) over the seeds."""
    out = {}
    for model, kind in (("cohort", "population"), ("reference", "population:reference")):
        runs = in_parallel(functools.partial(_run, kind), SEEDS)
        out[model] = {(p, w): tuple(np.mean([_figures(r[p], span) for r in runs], axis=0))
                      for p in POPULATIONS for w, span in WINDOWS.items()}
    return out


@pytest.mark.parametrize("population", POPULATIONS)
def test_the_world_has_a_steady_state_a_storm_and_a_recovery(figures, population):
    ok = {w: figures["reference"][population, w][0] for w in WINDOWS}
    assert ok["steady"] > 0.99
    assert ok["storm"] < 0.5  # most attempts fail while the bug keeps the storm going
    assert ok["storm"] < ok["recovery"] < ok["steady"]


@pytest.mark.parametrize("window", list(WINDOWS))
@pytest.mark.parametrize("population", POPULATIONS)
def test_cohort_model_agrees_with_the_client_by_client_reference(figures, population, window):
    (c_ok, c_rate), (r_ok, r_rate) = figures["cohort"][population, window], figures["reference"][population, window]
    report = (f"{population}, {window} {WINDOWS[window]}: success ratio cohort {c_ok:.4f} vs reference {r_ok:.4f} "
              f"({c_ok / r_ok - 1:+.1%}); attempt rate cohort {c_rate:.1f}/s vs reference {r_rate:.1f}/s "
              f"({c_rate / r_rate - 1:+.1%})")
    assert abs(c_ok - r_ok) <= TOLERANCE * r_ok, report
    assert abs(c_rate - r_rate) <= TOLERANCE * r_rate, report


def test_reference_is_a_drop_in_replacement():
    assert AGENT_CLASSES["population:reference"] is ClientByClientPopulation
    assert ClientByClientPopulation.METRICS == Population.METRICS
    ops = {cls: {n for n in dir(cls) if n.startswith("op_")} for cls in (Population, ClientByClientPopulation)}
    assert ops[Population] == ops[ClientByClientPopulation]
    bodies = {}
    for kind in ("population", "population:reference"):
        host = _host(kind, 0)
        for p in POPULATIONS:
            res = host.agents[p].step(0, [])
            assert set(res.metrics) == set(Population.METRICS)
            bodies[kind, p] = {m.kind: set(m.body) for m in res.messages}
            assert "flow" in bodies[kind, p]
    for p in POPULATIONS:
        assert bodies["population", p] == bodies["population:reference", p]


def test_reference_snapshot_restores_bit_identically():
    host = _host("population:reference", 3)
    for _ in range(200):  # into the surge, with connection attempts and retries pending
        host.step()
    snap = host.snapshot()
    first = [host.step().metrics for _ in range(30)]
    host.restore(snap)
    again = [host.step().metrics for _ in range(30)]
    assert first == again
