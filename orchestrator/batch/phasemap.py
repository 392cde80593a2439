"""Mapping metastability: sweep two playbook variables (say baseline load and trigger
size), with nobody acting or with a runbook, and classify each cell by what its runs did:
stayed healthy (the loop never formed), recovered by itself, broken after the runbook
acted, or stuck (still looping at the horizon): ``reports.rundir.PHASES``.

Hysteresis: the load at which a healthy system tips into the loop is higher than the
load to which a stuck system must be brought back before it recovers. ``hysteresis``
measures both on any playbook that has a load variable and an action that scales it.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import yaml

from orchestrator.batch.comparison import compare
from orchestrator.errors import InvalidInput, Issue, setting, speaking
from reports.rundir import PHASE_OF, PHASES, STUCK, SUSPENDED



def phase_map(playbook: str, x: tuple[str, list], y: tuple[str, list], seeds=3, runbook: str = "none",
              sets: dict | None = None, duration: float | None = None, tick: float | None = None,
              address: str | None = None, parallel: bool = True, progress: bool = False,
              cache: Path | None = None, time_limit: float | None = None,
              full: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, runs): per (x, y) cell the count of runs in each phase and the phase of
    the majority ("mixed" on a tie); and the comparison's results table. ``cache`` and
    ``time_limit``: as ``compare``'s (a grid extended plays only its new cells; a map cut
    short has seeds 1 to k, each played in every cell). ``full``: every seed in every
    cell; else ``seeds`` is the most a cell plays, and the runs go where the answer
    changes (``Refinement``; ``runs.attrs["full_runs"]`` says how many a full grid plays)."""
    if x[0] == y[0]:
        raise InvalidInput("gameday phasemap", "options", [Issue(setting("y"), x[0],
                                                                 f"a variable other than {setting('x')}'s ({x[0]})")])
    # (a map's axes are its sweeps: their errors are said as the axes given, a variable by its axis)
    axis_of = {x[0]: setting("x"), y[0]: setting("y")}
    try:
        with speaking({f"sweep {x[0]}": setting("x", x[0]), f"sweep {y[0]}": setting("y", y[0]),
                       "runbooks": setting("runbook")}):
            runs = compare(playbook, [runbook], seeds, {x[0]: list(x[1]), y[0]: list(y[1])}, sets, duration, tick,
                           address, parallel=parallel, progress=progress, cache=cache, time_limit=time_limit,
                           refine=None if full else Refinement(x[0], y[0]))
    except InvalidInput as e:
        issues = [Issue(axis_of.get(i.value, i.location), i.value, i.expected) if i.location == setting("sweep") else i
                  for i in e.issues]
        raise type(e)("gameday phasemap" if e.source == "gameday compare" else e.source, e.stage, issues) from None
    runs.attrs["full_runs"] = len(x[1]) * len(y[1]) * (seeds if isinstance(seeds, int) else len(seeds))
    return classify(runs, x[0], y[0]), runs


class Refinement:
    """A phase map's runs where the answer changes: every cell plays its first seed; then,
    round by round, the next seed only in the cells not settled. A cell is settled when
    every run of it and of its neighbours on the grid (left, right, above, below) is in
    one phase: far from a boundary, more seeds would not change its majority; at a
    boundary (between two phases) or where its own runs disagree, a cell
    plays every seed, as in the full grid."""

    def __init__(self, x: str, y: str):
        self.x, self.y = x, y

    def __call__(self, points: list, rows: list) -> list[int]:
        xs = {v: i for i, v in enumerate(dict.fromkeys(p.sweep[self.x] for p in points))}
        ys = {v: i for i, v in enumerate(dict.fromkeys(p.sweep[self.y] for p in points))}
        cell_of = [(xs[p.sweep[self.x]], ys[p.sweep[self.y]]) for p in points]
        phases: dict[tuple, set] = {}
        waiting: dict[tuple, list[int]] = {}  # a cell's runs not played yet, in the order planned
        for i, (c, row) in enumerate(zip(cell_of, rows)):
            if row is not None:
                phases.setdefault(c, set()).add(PHASE_OF[row["outcome"]])
            else:
                waiting.setdefault(c, []).append(i)
        if not phases:  # the first round: one seed everywhere
            first = points[0].seed
            return [i for i, p in enumerate(points) if p.seed == first]

        def settled(c: tuple) -> bool:
            near = [c] + [(c[0] + dx, c[1] + dy) for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1))]
            seen = set().union(*(phases.get(n, set()) for n in near if n in phases))
            return len(seen) == 1
        # (its next seed; a cell with none left played them all)
        return [waiting[c][0] for c in dict.fromkeys(cell_of) if c in waiting and not settled(c)]


def classify(runs: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    rows = []
    for (xv, yv), g in runs.groupby([x, y], sort=False):
        counts = {p: int((g["outcome"].map(PHASE_OF) == p).sum()) for p in PHASES}
        best = max(counts.values())
        winners = [p for p, n in counts.items() if n == best]
        rows.append({x: xv, y: yv, **counts, "phase": winners[0] if len(winners) == 1 else "mixed"})
    return pd.DataFrame(rows)


def _majority_stuck(runs: pd.DataFrame, at_the_load: bool = False) -> bool:
    """Whether most runs end stuck. ``at_the_load``: the runs' load was lowered on purpose and
    stays lowered, so a loop within its bounds while it is (suspended) let go at that load."""
    stuck = runs["outcome"].map(PHASE_OF) == STUCK
    if at_the_load:
        stuck &= runs["outcome"] != SUSPENDED
    return stuck.sum() * 2 > len(runs)


def hysteresis(playbook: str, load_var: str, loads: list[float], shed_action: str, shed_param: str,
               factors: list[float], shed_at: str, seeds=3, sets: dict | None = None, duration: float | None = None,
               parallel: bool = True, address: str | None = None) -> dict:
    """Tipping: ``load_var`` over ``loads``, nobody acting: the lowest load whose runs
    mostly end stuck. Recovery: at the highest load (stuck), ``shed_action`` with
    ``{shed_param: factor}`` at ``shed_at`` brings the load down to factor x that load:
    the highest such load from which the runs mostly recover. ``shed_action`` must
    scale ``load_var`` by its factor. Returns both and the tables."""
    tip_runs = compare(playbook, ["none"], seeds, {load_var: list(loads)}, sets, duration, parallel=parallel,
                       address=address)
    stuck_at = [load for load in loads if _majority_stuck(tip_runs[tip_runs[load_var] == load])]
    top = max(loads)

    def shed_to(f: float) -> str:  # a recovery runbook's name
        return f"shed-to-{f}"

    with tempfile.TemporaryDirectory(prefix="gameday-hysteresis-") as tmp:
        books = []
        for f in factors:
            path = Path(tmp) / f"{shed_to(f)}.yaml"
            path.write_text(yaml.safe_dump({"name": shed_to(f), "description": f"{shed_action} to {f} at {shed_at}",
                                            "rules": [{"when": {"at": shed_at},
                                                       "do": {"action": shed_action, "params": {shed_param: f}}}]}))
            books.append(str(path))
        rec_runs = compare(playbook, books, seeds, {}, {**(sets or {}), load_var: top}, duration, parallel=parallel,
                           address=address)
    recovered = [f * top for f in factors
                 if not _majority_stuck(rec_runs[rec_runs["runbook"] == shed_to(f)], at_the_load=True)]
    return {"tip_load": min(stuck_at) if stuck_at else None, "recover_load": max(recovered) if recovered else None,
            "tipping": tip_runs, "recovery": rec_runs}
