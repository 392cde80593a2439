"""Comparing runbooks: every (runbook, seed, sweep point) is a whole world run in
process inside a Ray task, on this machine or across a Ray cluster; the results are a
tidy table, one row per run, that ``reports.compare_stats`` summarises.

Runs are independent and seeded, so the table does not depend on where or in which
order they ran (a test checks parallel against one by one, and a multi-node cluster).
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from reports import decide
from reports.rundir import OUTCOMES, Score, outcome
from reports.timefmt import format_duration, parse_duration
from orchestrator import budgets
from orchestrator.errors import InvalidInput, Issue, NotFound, closest_first, setting
from orchestrator.batch.run_cache import RunCache, run_key
from orchestrator.engine.world import WorldPlan
from orchestrator.hosting.inprocess import load_kernels
from orchestrator.runs.runner import RunSpec, execute, prepare
from orchestrator.playbook.loader import Playbook
from orchestrator.playbook.files import find_playbook, find_runbook
from orchestrator.playbook.template import read_template
from orchestrator.playbook.variables import Given, resolve_variables

#: the results table's columns, in order (sweep variables come after ``seed``), each with what ``row_of``
#: puts there (a type, or the texts it may be): a cached row holding anything else is played again (``run_cache``)
COLUMNS = {"runbook": str, "seed": int, "trigger_s": float, "loop_formed": bool, "loop_broken_s": float,
           "loop_broken": str, "backlog_scored": bool, "backlog_formed": bool, "backlog_drained_s": float,
           "backlog_drained": str, "impact": float, "first_update_s": float, "connections_broken": int,
           "turned_away": int, "actions": int, "outcome": OUTCOMES, "horizon_s": float}
@dataclass
class Point:
    """One run of a comparison."""

    runbook: str
    seed: int
    sweep: dict = field(default_factory=dict)
    drawn: dict = field(default_factory=dict)  # the variables drawn for its seed (``vary``)

    def variables(self) -> dict:
        """The playbook variables it sets: its sweep point's and its seed's draws."""
        return {**self.sweep, **self.drawn}

    def given(self, sets: Given) -> Given:
        """The variables its run is given: ``sets``, its sweep point's and its seed's draws."""
        return sets.plus(self.sweep, "sweep").plus(self.drawn, "vary")

    def label(self, name: str) -> str:
        """The name of its run directory, ``name`` being its runbook's (any text: what a
        file name cannot hold becomes _)."""
        extra = "".join(f"-{k}={v}" for k, v in self.sweep.items())
        return _file_safe(f"{name}-s{self.seed}{extra}")


def _file_safe(text: str) -> str:
    return re.sub(r"[^\w.=+-]+", "_", text)


def _sweep_issues(playbook: str, sweeps: dict[str, list]) -> list[Issue]:
    """Each swept value checked as a variable of the playbook, named as the sweep it came from."""
    if not sweeps:
        return []
    tpl = read_template(find_playbook(playbook))
    issues: dict[tuple, Issue] = {}  # one per variable and problem: the first value that has it
    for var, values in sweeps.items():
        if var not in tpl.header:  # (the name is what is wrong, not its first value)
            issues[(setting("sweep"), var)] = Issue(setting("sweep"), var, f"one of the playbook's variables "
                                                                           f"({closest_first(var, tpl.header)})")
            continue
        for value in values:
            try:
                resolve_variables(tpl, Given().plus({var: value}, "sweep"), tpl.source)
            except InvalidInput as e:
                for i in e.issues:
                    if i.location == setting("sweep", var):
                        issues.setdefault((i.location, i.expected), i)
    return list(issues.values())


def _vary(playbook: str, vary: list[str], sweeps: dict, sets: dict) -> tuple[tuple[dict, set], list[Issue]]:
    """``vary`` checked against the playbook's variables: ((name -> range, the integer
    ones), issues)."""
    if not vary:
        return ({}, set()), []
    from orchestrator.playbook.variables import variable_ranges

    tpl = read_template(find_playbook(playbook))
    declared = variable_ranges(tpl)
    if "all" in vary and len(vary) > 1:
        return ({}, set()), [Issue(setting("vary"), "all", "all alone, or the names of variables, not both")]
    names = list(declared) if vary == ["all"] else vary
    issues = []
    if vary == ["all"] and not declared:
        issues.append(Issue(setting("vary"), "all", "a playbook with variables that declare a range: [low, high] "
                                             "(this one declares none)"))
    for name in names:
        if name not in declared:
            issues.append(Issue(setting("vary"), name, f"a variable that declares a range ({', '.join(declared) or 'none does'})"
                                if name in tpl.header else f"one of the playbook's variables with a range "
                                                           f"({', '.join(declared) or 'none declares one'})"))
        elif name in sweeps or name in sets:
            issues.append(Issue(setting("vary"), name, f"a variable not also {'swept' if name in sweeps else 'set'}"))
        elif name in COLUMNS:
            issues.append(Issue(setting("vary"), name, "a playbook variable whose name is not a column of the results"))
    ranges = {n: declared[n] for n in names if n in declared}
    integers = {n for n in ranges if isinstance(tpl.header[n]["default"], int)}
    return (ranges, integers), issues


def plan_points(runbooks: list[str], seeds: list[int], sweeps: dict[str, list],
                drawn: dict[int, dict] | None = None) -> list[Point]:
    """Every run, in the order they are started: seed by seed, every runbook and sweep
    point of a seed together, so that the runs done at any moment (an interrupted or
    time-limited comparison's) are spread evenly over them, and whole seeds end first.
    ``drawn``: seed -> the variables drawn for it (``draw_worlds``)."""
    grid = [dict(zip(sweeps, combo)) for combo in itertools.product(*sweeps.values())] or [{}]
    return [Point(rb, seed, point, dict((drawn or {}).get(seed, {}))) for seed in seeds for point in grid
            for rb in runbooks]


def draw_worlds(ranges: dict[str, tuple[float, float]], integers: set[str], seeds: list[int]) -> dict[int, dict]:
    """The variables of each seed's world, drawn from their plausible ranges: point number
    ``seed`` of a scrambled Halton sequence (scrambled by the variables' names, so the same
    for every comparison of them), so that the worlds of any first seeds spread evenly over
    the ranges, and a seed's world does not depend on how many seeds are played.
    ``integers``: the variables drawn as whole numbers (their default is one)."""
    import hashlib

    from scipy.stats import qmc

    names = sorted(ranges)
    if not names:
        return {}
    scramble = int.from_bytes(hashlib.sha256(",".join(names).encode()).digest()[:8], "little")
    out = {}
    for seed in seeds:
        halton = qmc.Halton(d=len(names), scramble=True, seed=scramble)
        halton.fast_forward(seed)
        u = halton.random(1)[0]
        world = {}
        for name, x in zip(names, u):
            lo, hi = ranges[name]
            world[name] = min(int(lo + x * (hi - lo + 1)), int(hi)) if name in integers else \
                float(f"{lo + x * (hi - lo):.6g}")
        out[seed] = world
    return out


def leading_whole_seeds(seeds: list[int], done: list[int], runs_per_seed: int) -> list[int]:
    """The seeds, in the order planned, up to the first one not every run of which is
    ``done`` (the seeds of the runs done, one per run): what a comparison cut short keeps,
    so that every runbook is compared on the same seeds, and which seeds count does not
    depend on which runs happened to be fast (a stuck world can be slower to play)."""
    count = collections.Counter(done)
    return list(itertools.takewhile(lambda seed: count[seed] >= runs_per_seed, seeds))


def past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _limit_text(seconds: float) -> str:
    return format_duration(seconds) if seconds >= 1 else f"{seconds:g}s"


class ComparisonInterrupted(KeyboardInterrupt):
    """Ctrl-C during a comparison once every run of a seed was done: ``table`` holds the
    runs of seeds 1 to k (as a time limit's, ``leading_whole_seeds``; those taken from a
    cache included), as ``compare`` would return them; ``partial`` says how many."""

    def __init__(self, table: pd.DataFrame, partial: str):
        super().__init__(partial)
        self.table, self.partial = table, partial


def row_of(point: Point, score: Score, horizon_s: float) -> dict:
    """One row of the results table from a run's score (``point.runbook``: the runbook's
    name, as its ``name:`` says, the name `gameday run` and the reports give it)."""
    def after_trigger(m: dict | None) -> float:
        return float(m["seconds_after_trigger"]) if m and m.get("reached") and "seconds_after_trigger" in m else math.nan

    broken = score["loop_broken"]
    backlog = score.get("backlog_drained") or {}
    row = {"runbook": point.runbook,
           "seed": point.seed, **point.sweep, **point.drawn,
           "trigger_s": float(score["trigger"].get("seconds_after_start", math.nan)),
           "loop_formed": bool(score["loop_formed"]), "loop_broken_s": after_trigger(broken),
           "loop_broken": broken.get("clock", ""), "backlog_scored": "backlog_drained" in score,
           "backlog_formed": "backlog_drained" in score and backlog.get("impaired") is not False,
           # (a backlog never over its threshold after the trigger had nothing to drain: drained at once,
           # as a loop that never formed counts as broken at once)
           "backlog_drained_s": 0.0 if backlog.get("impaired") is False else after_trigger(backlog),
           "backlog_drained": backlog.get("clock", ""), "impact": float(score["impact"]["weighted_total"]),
           "first_update_s": after_trigger(score.get("first_customer_update")),
           "connections_broken": int(score["collateral"]["connections_broken_by_actions"]),
           "turned_away": int(score["collateral"].get("requests_turned_away", 0)),
           "actions": int(score["actions_taken"]), "outcome": outcome(score), "horizon_s": horizon_s}
    return row


def portable(ref: str):
    """A playbook or runbook as a task can use it on any node: a file's name and text
    (the file may not exist there), or a built-in name as it is."""
    path = Path(ref)
    return {"name": path.name, "text": path.read_text(encoding="utf-8")} if path.is_file() else ref


def portable_runbook(ref: str, playbook: str, loaded: Playbook):
    """``portable`` for a runbook of ``playbook`` (``loaded``, as rendered): a name of one
    of a playbook file's own runbooks travels as that file's text, since a task gets the
    playbook's text without the folder beside it."""
    if Path(playbook).is_file() and not Path(ref).is_file():
        try:
            ref = str(find_runbook(ref, loaded.name, loaded.source))
        except NotFound:
            pass  # "none", which every playbook has
    return portable(ref)


def _materialise(ref, where: Path) -> str:
    if isinstance(ref, str):
        return ref
    where.mkdir(parents=True, exist_ok=True)
    (where / ref["name"]).write_text(ref["text"], encoding="utf-8")
    return str(where / ref["name"])


def _spec(playbook, point: dict, sets: Given, duration, tick, tmp: Path) -> RunSpec:
    """A point's run, its files (``portable``) written in ``tmp``."""
    p = Point(**point)
    return RunSpec(playbook=_materialise(playbook, tmp / "playbook"),
                   runbook=_materialise(p.runbook, tmp / "runbook" / str(id(point))),
                   seed=p.seed, sets=p.given(sets), duration=duration, tick=tick)


def _row(point: dict, data) -> dict:
    p = Point(**point)
    return row_of(Point(data.meta["runbook"], p.seed, p.sweep, p.drawn), data.score, float(data.meta["duration_s"]))


def run_point(playbook, point: dict, sets: Given, duration: float | None, tick: float | None,
              keep: str | None = None) -> dict:
    """Play one point in process and return its row; the run directory is written in
    ``keep`` if given, else none is (the row needs only the score).
    ``playbook`` and ``point["runbook"]``: names, or ``portable`` files."""
    with _files() as tmp:
        return _row(point, execute(_spec(playbook, point, sets, duration, tick, tmp), Path(keep) if keep else None))


def run_group(playbook, points: list[dict], sets: Given, duration, tick, keep: list, nested: bool = False) \
        -> tuple[list[dict], dict]:
    """Play the runs of one seed and sweep point (``points``, differing only in their
    runbook) and return their rows and {"ticks": played, "whole": what playing each whole
    takes}: their common beginning is played once (``runs.prefix``), unless their run
    directories are kept (each needs its whole journal) or there is one. ``nested``:
    within a Ray task, the branches are Ray tasks of their own."""
    if len(points) == 1 or any(keep):
        rows = [run_point(playbook, p, sets, duration, tick, k) for p, k in zip(points, keep)]
        return rows, {}
    from orchestrator.runs import prefix

    with _files() as tmp:
        specs = [_spec(playbook, p, sets, duration, tick, tmp) for p in points]
        if not nested:
            datas, ticks = prefix.play_shared(specs)
            return [_row(p, data) for p, data in zip(points, datas)], ticks
        import ray  # each branch a Ray task of its own, started as it leaves the trunk

        task = ray.remote(num_cpus=1, max_retries=1)(run_branch)
        refs: dict = {}

        def start(i, at):
            refs[i] = task.remote(playbook, points[i], sets, duration, tick, at)
        whole, _, ticks, per_run = prefix.trunk(specs, start)
        rows: list = [None] * len(points)
        for i, data in whole.items():
            rows[i] = _row(points[i], data)
        played = ticks
        for i, ref in refs.items():
            rows[i], n = ray.get(ref)
            played += n
        return rows, {"ticks": played, "whole": per_run * len(points)}


def run_branch(playbook, point: dict, sets: Given, duration, tick, at) -> tuple[dict, int]:
    """A run played on from where it leaves its trunk (``runs.prefix.Branch``), in a Ray
    task: its row and the ticks it played."""
    from orchestrator.runs import prefix

    with _files() as tmp:
        data = prefix.branch(_spec(playbook, point, sets, duration, tick, tmp), at)
        return _row(point, data), int(data.meta["ticks_done"]) - at.tick


@contextlib.contextmanager
def _files():
    """A directory for a run's playbook and runbook files (``_spec``), removed after."""
    with tempfile.TemporaryDirectory(prefix="gameday-compare-", ignore_cleanup_errors=True) as tmp:
        yield Path(tmp)


def _can_write_dir(path: Path) -> bool:
    """``path`` is a directory this user can write in, or one it can create."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _texts_key(p: Point) -> tuple:
    return p.runbook, tuple(sorted(p.variables().items()))


def check_points(playbook: str, points: list[Point], sets: Given, duration, tick, deadline: float | None = None,
                 time_limit: float | None = None) -> tuple[dict, dict, dict, tuple[Playbook, WorldPlan]]:
    """Load the playbook and runbook of every distinct (runbook, sweep point) before any
    run starts: bad input stops the comparison with every problem named. Returns their
    texts, the rendered playbook's and the runbook's, by (runbook, sweep point), each
    runbook as the runs get it (``portable_runbook``) and its name (its ``name:``), and
    the first point's loaded playbook and world plan. Checking counts against the time
    limit (``deadline``): a grid of thousands of points is refused once it is clear that
    checking them alone would pass it, not after."""
    texts, shipped, names, first = {}, {}, {}, None
    distinct = len({_texts_key(p) for p in points})
    started = None  # (timed from the second: the first pays for what is loaded once)
    for p in points:
        key = _texts_key(p)
        if key not in texts:
            if deadline is not None and len(texts) > 1:
                each = (time.monotonic() - started) / (len(texts) - 1)
                if time.monotonic() + each * (distinct - len(texts)) > deadline:
                    raise InvalidInput("gameday compare", "options", [Issue(
                        setting("time_limit"), _limit_text(time_limit),
                        f"time to check the {distinct:,} sweep points before any run (each playbook is rendered and "
                        f"validated first, {each * 1000:.0f} ms each here, about {each * distinct:.0f} s in all): a "
                        "longer limit, or fewer points")])
            try:
                pb, rb_text, rb, plan = prepare(RunSpec(playbook=playbook, runbook=p.runbook, seed=p.seed,
                                                        sets=p.given(sets), duration=duration, tick=tick))
            except InvalidInput as e:
                if not p.drawn:
                    raise
                drew = ", ".join(f"{k}={v}" for k, v in p.drawn.items())
                raise type(e)(e.source, e.stage, [Issue(i.location, i.value, f"{i.expected}; {setting('vary')} drew {drew} for "
                                                        f"seed {p.seed} from the ranges the header declares: narrow "
                                                        "them to values the playbook takes") for i in e.issues]) from None
            texts[key] = (pb.text, rb_text)
            started = started or time.monotonic()
            shipped.setdefault(p.runbook, portable_runbook(p.runbook, playbook, pb))
            names.setdefault(p.runbook, rb["name"])
            first = first or (pb, plan)
    return texts, shipped, names, first


def _same_names(names: dict[str, str]) -> list[Issue]:
    """Two runbooks of one comparison with the same ``name:`` could not be told apart in its
    tables (nor in its kept runs' directories, where what a file name cannot hold is _)."""
    first: dict[str, tuple[str, str]] = {}
    issues = []
    for ref, name in names.items():
        if _file_safe(name) in first:
            other, other_name = first[_file_safe(name)]
            same = f"its name, {name!r}, is also the name of {other}" if name == other_name else \
                f"its name, {name!r}, and the name of {other}, {other_name!r}, are one as a directory name"
            issues.append(Issue(setting("runbooks"), ref, f"runbooks with different names: {same} (change one's name: field)"))
        first.setdefault(_file_safe(name), (ref, name))
    return issues


def _check_options(playbook: str, runbooks: list[str], seeds: list[int], sweeps: dict[str, list], sets: Given,
                   cache: Path | None, keep_runs: Path | None, vary: list[str], decision: "Decision | None",
                   time_limit: float | None) -> tuple[dict, set]:
    """Every problem with a comparison's options, said at once before anything is played
    (``InvalidInput``); returns the ranges ``vary`` draws from (``_vary``)."""
    issues = []
    if not runbooks:
        issues.append(Issue(setting("runbooks"), None, "at least one runbook"))
    if not seeds or any(s < 0 for s in seeds):
        issues.append(Issue(setting("seeds"), seeds, "a number of seeds >= 1"))
    elif len(set(seeds)) < len(seeds):
        issues.append(Issue(setting("seeds"), seeds, "seeds without repeats"))
    if cache is not None and keep_runs is not None:
        issues.append(Issue(setting("cache"), str(cache), f"{setting('cache')} or {setting('keep_runs')}, not both (a run "
                                                          "taken from the cache has no directory to keep)"))
    elif cache is not None and not _can_write_dir(Path(cache)):
        issues.append(Issue(setting("cache"), str(cache), "a directory this user can create or write in"))
    issues += [Issue(setting("runbooks"), rb, "each runbook once") for i, rb in enumerate(runbooks) if rb in runbooks[:i]]
    issues += [Issue(setting("sweep"), var, "a playbook variable whose name is not a column of the results")
               for var in sweeps if var in COLUMNS]
    issues += [Issue(sets.where(var), sets.values[var], f"a variable that is not also swept ({setting('sweep', var)} "
                     "gives its values, which would override this one)") for var in sweeps if var in sets.values]
    issues += _sweep_issues(playbook, sweeps)
    ranges, vary_issues = _vary(playbook, vary, sweeps, sets.values)
    issues += vary_issues
    if decision is not None and seeds and len(runbooks) > 1:
        issues += decision_issues(decision, seeds)
    if time_limit is not None and not time_limit > 0:
        issues.append(Issue(setting("time_limit"), _limit_text(time_limit), "a wall-clock time longer than 0 (e.g. 5m)"))
    if issues:
        raise InvalidInput("gameday compare", "options", issues)
    return ranges


class _Player:
    """How a comparison's runs are played: those in the cache taken from it, the others in
    groups of one seed and sweep point (their beginning played once), one by one here or as
    Ray tasks, until the deadline; ``rows[i]`` is run i's row once played."""

    def __init__(self, points: list[Point], shipped: dict, names: dict, playbook: str, sets: Given, duration, tick,
                 keep: list, parallel: bool, address, max_workers, deadline: float | None, plan: WorldPlan,
                 seeds: list[int] | None):
        """``seeds``: a fixed design's, whose progress bar counts the seeds done against the
        deadline (None: a race, whose bar names the runbooks in it)."""
        self.points, self.shipped, self.names, self.playbook, self.sets = points, shipped, names, playbook, sets
        self.duration, self.tick, self.keep = duration, tick, keep
        self.parallel, self.address, self.max_workers, self.deadline, self.plan = parallel, address, max_workers, deadline, plan
        self.seeds = seeds
        self.rows: list[dict | None] = [None] * len(points)
        self.from_cache: dict[int, dict] = {}
        self.store, self.keys = None, None
        self.bar = None
        self.kernels_loaded = False
        self.ticks_saved = {"ticks": 0, "whole": 0}  # (of the groups whose beginning was shared)

    def use_cache(self, store: RunCache, keys: list[str]) -> None:
        self.store, self.keys = store, keys
        for i, (p, key) in enumerate(zip(self.points, keys)):
            row = store.get(key)
            if row is not None:  # the point's own names: the same run may be another runbook file's or sweep's
                self.from_cache[i] = {**row, "runbook": self.names[p.runbook], "seed": p.seed, **p.sweep, **p.drawn}

    def play(self, indices: list[int]) -> bool:
        """Play the runs ``indices`` (those in the cache taken from it); whether the
        deadline stopped them."""
        for i in indices:
            if i in self.from_cache:
                self.rows[i] = self.from_cache[i]
                if self.bar is not None:
                    self.bar.update(1)
        groups: dict[tuple, list[int]] = {}  # runs of one seed and sweep point: their beginning is played once
        for i in (i for i in indices if self.rows[i] is None):
            p = self.points[i]
            groups.setdefault((p.seed, *p.variables().items()), []).append(i)
        tasks = {tuple(g): [{"runbook": self.shipped[self.points[i].runbook], "seed": self.points[i].seed,
                             "sweep": self.points[i].sweep, "drawn": self.points[i].drawn} for i in g]
                 for g in groups.values()}
        if not self.parallel:
            for key, group in tasks.items():
                if past(self.deadline):
                    return True
                self._played_group(key, run_group(self.playbook, group, self.sets, self.duration, self.tick,
                                                  [self.keep[i] for i in key]))
            return False
        if tasks and not self.kernels_loaded:
            load_kernels(self.plan)  # (once here, not in every Ray worker at once)
            self.kernels_loaded = True
        return _run_on_ray(self.playbook, tasks, self.sets, self.duration, self.tick, self.keep, self._played_group,
                           self.address, self.max_workers, self.deadline)

    def _played_group(self, key: tuple, result: tuple[list[dict], dict]) -> None:
        group_rows, ticks = result
        for i, row in zip(key, group_rows):
            self._played(i, row)
        for k in self.ticks_saved:
            self.ticks_saved[k] += ticks.get(k, 0)

    def _played(self, i: int, row: dict) -> None:
        self.rows[i] = row
        if self.store is not None:
            self.store.put(self.keys[i], row)
        if self.bar is not None:
            if self.deadline is not None and self.seeds is not None:  # (its time left for all the runs would be past the limit)
                done = [p.seed for p, r in zip(self.points, self.rows) if r is not None]
                per_seed = len(self.points) // len(self.seeds)
                self.bar.set_postfix_str(f"{len(leading_whole_seeds(self.seeds, done, per_seed))} seeds done, "
                                         f"{format_duration(max(0.0, self.deadline - time.monotonic()))} of the limit "
                                         "left", refresh=False)
            self.bar.update(1)


def _why_cut(interrupted: bool, time_limit: float | None) -> str:
    return "interrupted" if interrupted else f"time limit {_limit_text(time_limit)}"


def _rounds_cut(rows: list, rounds_done: list[list[int]], interrupted: bool, time_limit: float | None) -> str:
    """A refinement cut short keeps the rounds played whole (the others' runs leave ``rows``);
    what it says of it."""
    played_whole = {i for done_round in rounds_done for i in done_round}
    for i in range(len(rows)):
        if i not in played_whole:
            rows[i] = None
    return f"{_why_cut(interrupted, time_limit)}: after {len(rounds_done)} round{'s' * (len(rounds_done) != 1)} of refinement"


def _seeds_cut(points: list[Point], rows: list, seeds: list[int], interrupted: bool, time_limit: float | None,
               cached: bool) -> str:
    """A fixed comparison cut short keeps its first seeds every run of which was played (the
    others' runs leave ``rows``); what it says of it. None kept: Ctrl-C is raised again, a time
    limit is said too short."""
    per_seed = len(points) // len(seeds)
    kept = set(leading_whole_seeds(seeds, [p.seed for p, row in zip(points, rows) if row is not None], per_seed))
    played_runs = sum(r is not None for r in rows)
    if not kept and interrupted:
        raise KeyboardInterrupt  # (nothing to write)
    if not kept:
        raise InvalidInput("gameday compare", "options", [Issue(
            setting("time_limit"), _limit_text(time_limit),
            f"time for every run of one seed ({per_seed} runs; {played_runs} runs were done"
            f"{', kept in the cache' if cached else ''})")])
    left_out = [i for i, (p, r) in enumerate(zip(points, rows)) if r is not None and p.seed not in kept]
    for i in left_out:
        rows[i] = None
    partial = (f"{_why_cut(interrupted, time_limit)}: {len(kept)} of the {len(seeds)} seeds, "
               f"{played_runs - len(left_out)} of the {len(points)} runs planned")
    if left_out:  # (played in parallel, runs of later seeds may be done, and are left out too)
        n, first = len(left_out), seeds[len(kept)]
        of = sorted({points[i].seed for i in left_out}, key=seeds.index)
        partial += (f"; left out: {n} {'run' if n == 1 else 'runs'} done of seed{'s' * (len(of) > 1)} "
                    f"{', '.join(map(str, of))}" + ("" if of == [first] else
                                                     f", from seed {first} on, the first not finished"))
    return partial


def compare(playbook: str, runbooks: list[str], seeds, sweeps: dict[str, list] | None = None, sets: Given | dict | None = None,
            duration: float | None = None, tick: float | None = None, address: str | None = None,
            parallel: bool = True, progress: bool = False, keep_runs: Path | None = None,
            max_workers: int | None = None, cache: Path | None = None, time_limit: float | None = None,
            decision: "Decision | None" = None, vary: list[str] | None = None,
            refine: "Callable[[list[Point], list[dict | None]], list[int]] | None" = None) -> pd.DataFrame:
    """Run every (runbook, seed, sweep point) and return the results table.
    ``seeds``: a number N (seeds 1..N) or a list. ``parallel``: as Ray tasks (on the
    cluster at ``address``, else a local Ray), or one by one in this process.
    ``max_workers``: at most this many runs at once (default: as many as Ray has CPUs).
    ``cache``: a directory of the rows of runs played before (``run_cache``): a run
    found there is not played again, and a run played is kept there; the table's
    ``attrs["reused"]`` counts the runs taken from it (``attrs["cache_set_aside"]``: the rows
    found there not as gameday writes them, each its file and why, played again). ``time_limit``: seconds of wall
    time from the call after which no run starts and the runs under way are stopped; the
    table then holds the seeds, in order, up to the first not every run of which was done
    (``attrs["partial"]`` says how many of those planned); runs of later seeds are left out
    of it (kept in the cache, and their directories with ``keep_runs``). One by one, the
    run under way at the limit finishes first.
    ``attrs["playbook"]`` is the playbook's name (its ``name:``).
    ``decision``: None, every seed played; else the primary outcome and indifference
    amount are resolved (``attrs["decision"]``) and, unless ``decision.sequential`` is
    False or there is one runbook, the comparison is a race (``_run_race``): ``seeds`` is
    the most a runbook plays, ``attrs["race"]`` the decision, and a time limit or Ctrl-C
    keeps the rounds played whole.
    ``vary``: playbook variables with a ``range`` (or ["all"]: every one) drawn for each
    seed (``draw_worlds``), the same for every runbook of the seed; ``attrs["drawn"]``
    holds their ranges, and the table a column each.
    ``refine(points, rows)``: the runs to play next, from those played (``rows``, None
    where not), or [] when done; the comparison plays round after round of them instead
    of every run (a phase map's refinement), a round counting whole or not at all."""
    deadline = None if time_limit is None else time.monotonic() + time_limit
    planned = (int(seeds) if isinstance(seeds, int) else len(seeds)) * max(1, len(runbooks)) \
        * math.prod(len(v) for v in dict(sweeps or {}).values())
    if planned > budgets.MOST_RUNS:  # (before a run, or a point, is planned: each takes memory)
        raise InvalidInput("gameday compare", "options", [Issue(
            setting("seeds"), f"{planned:,} runs planned (seeds x runbooks x sweep points)",
            f"at most {budgets.MOST_RUNS:,} (gameday's budget for a comparison): fewer seeds or sweep points")])
    seeds = list(range(1, int(seeds) + 1)) if isinstance(seeds, int) else [int(s) for s in seeds]
    sets = Given.of(sets)
    ranges = _check_options(playbook, runbooks, seeds, dict(sweeps or {}), sets, cache, keep_runs, list(vary or []),
                            decision, time_limit)
    points = plan_points(list(runbooks), seeds, dict(sweeps or {}), draw_worlds(*ranges, seeds) if ranges[0] else None)
    texts, shipped, names, (pb, plan) = check_points(playbook, points, sets, duration, tick, deadline, time_limit)
    same = _same_names(names)
    if same:
        raise InvalidInput("gameday compare", "options", same)
    resolved = resolve_decision(decision, pb, duration) if decision is not None else None
    # the race: played round by round, or (--fixed) read over the seeds played, after them
    book = _start_race(decision, resolved, points, names, seeds, dict(sweeps or {})) \
        if decision is not None and len(runbooks) > 1 else None
    race = book if book is not None and decision.sequential else None
    keep = [str(keep_runs / p.label(names[p.runbook])) if keep_runs else None for p in points]
    player = _Player(points, shipped, names, portable(playbook), sets, duration, tick, keep, parallel, address,
                     max_workers, deadline, plan, seeds if race is None else None)
    if cache is not None:
        player.use_cache(RunCache(cache, COLUMNS), [run_key(*texts[_texts_key(p)], p.seed, duration, tick) for p in points])
    rows, play = player.rows, player.play
    if progress:
        from tqdm import tqdm

        player.bar = tqdm(total=len(points), unit="run", desc="comparing", disable=None, leave=False)
    rounds_done: list = []  # (a refinement's rounds played whole)
    interrupted = stopped = False
    try:
        if race is not None:
            stopped = _run_race(race, rows, play, player.bar)
        elif refine is not None:
            stopped = _run_rounds(refine, points, rows, play, rounds_done)
        else:
            stopped = play(list(range(len(points))))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if player.bar is not None:
            player.bar.close()
    partial = None
    if race is not None:
        partial = _race_cut(race, points, rows, seeds, interrupted, stopped, time_limit)
    elif refine is not None and (stopped or interrupted):
        partial = _rounds_cut(rows, rounds_done, interrupted, time_limit)
    elif stopped or interrupted:
        partial = _seeds_cut(points, rows, seeds, interrupted, time_limit, cache is not None)
    done = [r for r in rows if r is not None]  # (all of them unless interrupted or stopped)
    if not done and interrupted:
        raise KeyboardInterrupt
    if not done:
        first = (f"the race's first stage ({sum(len(r.names) for r in race.races.values()) * decision.first} runs"
                 if race is not None else "the first round of the refinement (one seed in every cell")
        raise InvalidInput("gameday compare", "options", [Issue(
            setting("time_limit"), _limit_text(time_limit),
            f"time for {first}{', those done kept in the cache' if cache is not None else ''})")])
    df = table(done, list(dict(sweeps or {})), sorted(ranges[0]))
    df.attrs["playbook"] = pb.name  # (its name: field)
    df.attrs["names"] = dict(names)  # each runbook as it was given -> its name (its name: field)
    if ranges[0]:
        df.attrs["drawn"] = {name: list(r) for name, r in sorted(ranges[0].items())}
    df.attrs["reused"] = sum(rows[i] is not None for i in player.from_cache)
    if player.store is not None and player.store.set_aside:
        df.attrs["cache_set_aside"] = player.store.set_aside
    df.attrs["planned"] = len(points)
    if player.ticks_saved["whole"]:
        df.attrs["ticks"] = dict(player.ticks_saved)
    if resolved is not None:
        df.attrs["decision"] = resolved
    if book is not None and race is None and not interrupted:
        _replay_race(book, rows)
    if book is not None and (race is not None or not interrupted):
        df.attrs["race"] = book.record()
    if partial:
        df.attrs["partial"] = partial
    if interrupted:
        raise ComparisonInterrupted(df, partial)
    return df


@dataclass(frozen=True)
class Decision:
    """How a sequential comparison decides (``reports.decide``): its primary outcome and
    indifference amount (None: the playbook's ``scoring.primary`` / ``indifference``, else
    impact and ``DEFAULT_DELTA_SHARE`` of the primary's scale), its error rate and the
    seeds of its first stage."""

    primary: str | None = None
    delta: float | str | None = None  # a number in the primary's unit, or a duration as text for a time
    alpha: float = decide.DEFAULT_ALPHA
    first: int = decide.DEFAULT_FIRST
    sequential: bool = True  # False: every seed played (``fixed``)


def decision_issues(decision: Decision, seeds: list[int]) -> list[Issue]:
    issues = []
    if decision.primary is not None and decision.primary not in decide.PRIMARY:
        issues.append(Issue(setting("primary"), decision.primary, f"one of {', '.join(decide.PRIMARY)}"))
    if isinstance(decision.delta, (int, float)) and not decision.delta > 0:
        issues.append(Issue(setting("delta"), decision.delta, "an amount > 0 in the primary outcome's unit"))
    if not 0 < decision.alpha <= 0.5:
        issues.append(Issue(setting("alpha"), decision.alpha, "an error rate > 0 and <= 0.5 (0.05: 95% confidence)"))
    if decision.first < 2:
        issues.append(Issue(setting("first_seeds"), decision.first, "at least 2 seeds (a variance needs two)"))
    elif decision.sequential and len(seeds) < decision.first:
        issues.append(Issue(setting("seeds"), len(seeds), f"at least the first stage's {decision.first} seeds "
                                                          f"({setting('first_seeds')}), or {setting('fixed')}"))
    return issues


class RaceBook:
    """The races of a sequential comparison, one per sweep point, and how they were set:
    the primary outcome, the indifference amount and where it came from."""

    def __init__(self, races: dict[tuple, decide.Race], primary: str, delta: float, delta_from: str,
                 seeds: list[int], sweep_vars: list[str], index: dict[tuple, int]):
        self.races, self.primary, self.delta, self.delta_from = races, primary, delta, delta_from
        self.seeds, self.sweep_vars = seeds, sweep_vars
        self.index = index  # (seed, sweep point, runbook name) -> its run's place in the plan
        self.ended = ""
        self.fixed = False  # read over a fixed comparison's seeds, after they were played

    @property
    def decided(self) -> bool:
        return all(r.decided for r in self.races.values())

    def runs(self, seed: int) -> list[int]:
        """The runs of ``seed`` of the runbooks still in an undecided race."""
        return [self.index[(seed, key, rb)] for key, race in self.races.items() if not race.decided
                for rb in race.alive]

    def take(self, seed: int, rows: list) -> None:
        """``seed``'s outcomes, for every undecided race whose runs of it were all played."""
        for key, race in self.races.items():
            got = {} if race.decided else {rb: rows[self.index[(seed, key, rb)]] for rb in race.alive}
            if got and all(row is not None for row in got.values()):
                race.add({rb: decide.outcome(pd.DataFrame([row]), self.primary)[0] for rb, row in got.items()})

    def record(self) -> dict:
        """What the comparison's tables and report say of the race (``reports.decide``)."""
        first = next(iter(self.races.values()))
        return {"primary": self.primary, "delta": self.delta, "delta_from": self.delta_from, "alpha": first.alpha,
                "first": first.first, "seeds_max": len(self.seeds), "ended": self.ended, "sweep_vars": self.sweep_vars,
                "fixed": self.fixed,
                "points": [{"point": dict(zip(self.sweep_vars, key)), "seeds": r.seeds, "ended": r.ended,
                            "best": r.best, "status": r.status()} for key, r in self.races.items()]}


def resolve_decision(decision: Decision, pb: Playbook, duration) -> dict:
    """The primary outcome, indifference amount (and where it came from) and error rate a
    comparison of ``pb`` decides with: the options', else the playbook's ``scoring``, else
    the defaults. ``decision.delta`` may be a duration as text ("5m"), for a time."""
    from orchestrator.playbook.checks import primary_issue

    scoring = pb.data["scoring"]
    primary = decision.primary or scoring["primary"]
    unscored = primary_issue(pb.data, primary, setting("primary"))  # (the playbook's own is checked when it loads)
    if unscored:
        raise InvalidInput("gameday compare", "options", [unscored])
    top = decide.scale(primary, scoring["impact"], float(duration or pb.data["clock"]["duration"]))
    if decision.delta is not None:
        if isinstance(decision.delta, str):  # a duration: only for a time
            if primary == "impact":
                raise InvalidInput("gameday compare", "options", [Issue(
                    setting("delta"), decision.delta, "a number of weighted error-minutes: the primary outcome is impact "
                                               "(a duration such as 5m is for loop_broken or backlog_drained)")])
            delta = parse_duration(decision.delta)
        else:
            delta = float(decision.delta)
        if top > 0 and delta >= top:
            raise InvalidInput("gameday compare", "options", [Issue(
                setting("delta"), decision.delta, f"an amount below the most a run can score on {primary}, "
                                           f"{decide.unit_text(primary, top)}: with more, every runbook is as good "
                                           "as every other")])
        delta_from = setting("delta")
    elif scoring.get("indifference") is not None and primary == scoring["primary"]:  # (no default: optional)
        delta, delta_from = float(scoring["indifference"]), "the playbook's scoring.indifference"
    else:
        delta = decide.DEFAULT_DELTA_SHARE * top if top > 0 else 1.0
        delta_from = (f"{decide.DEFAULT_DELTA_SHARE:.0%} of the most a run can score, "
                      f"{decide.unit_text(primary, top)}" if top > 0 else "no impact weights: 1")
    return {"primary": primary, "delta": delta, "delta_from": delta_from, "alpha": decision.alpha,
            "sequential": decision.sequential}


def _start_race(decision: Decision, resolved: dict, points: list[Point], names: dict, seeds: list[int],
                sweeps: dict) -> RaceBook:
    grid = [tuple(combo) for combo in itertools.product(*sweeps.values())] or [()]
    books = list(dict.fromkeys(names[p.runbook] for p in points))
    races = {key: decide.Race(books, decision.alpha, resolved["delta"], decision.first) for key in grid}
    index = {(p.seed, tuple(p.sweep.values()), names[p.runbook]): i for i, p in enumerate(points)}
    return RaceBook(races, resolved["primary"], resolved["delta"], resolved["delta_from"], seeds, list(sweeps), index)


def _run_race(book: RaceBook, rows: list, play, bar) -> bool:
    """Play the race round by round: the first stage's seeds, then one seed at a time, each
    round only the runbooks still in its sweep point's race; after each, every race takes
    its seeds' outcomes. Stops when every race is decided or the seeds run out; returns
    whether the deadline stopped it (then the round under way is not counted)."""
    first = next(iter(book.races.values())).first
    rounds = [book.seeds[:first]] + [[s] for s in book.seeds[first:]]
    for seeds in rounds:
        if book.decided:
            break
        todo = [i for s in seeds for i in book.runs(s)]
        if bar is not None:
            names = next(iter(book.races.values())).names
            alive = sorted({rb for race in book.races.values() for rb in race.alive}, key=names.index)
            bar.set_postfix_str(f"in the race: {', '.join(alive)}", refresh=False)
        if play(todo):
            for i in todo:  # (a round counts whole or not at all)
                rows[i] = None
            book.ended = "time limit"
            return True
        for s in seeds:
            book.take(s, rows)
    book.ended = "decided" if book.decided else "seeds"
    return False


def _run_rounds(next_round, points: list[Point], rows: list, play, rounds_done: list) -> bool:
    """Play ``next_round(points, rows)`` until it asks for nothing; returns whether the
    deadline stopped it (the round under way is then left out by the caller)."""
    while True:
        todo = next_round(points, rows)
        if not todo:
            return False
        if play(todo):
            return True
        rounds_done.append(todo)


def _replay_race(book: RaceBook, rows: list) -> None:
    """The race read over the seeds a fixed comparison played, in order, until it decides:
    which runbook it would have named, and after how many seeds (a seed not played whole,
    in a comparison cut short, is not read)."""
    book.fixed = True
    for s in book.seeds:
        book.take(s, rows)
    book.ended = "decided" if book.decided else "seeds"


def _race_cut(book: RaceBook, points: list[Point], rows: list, seeds: list[int], interrupted: bool, stopped: bool,
              time_limit) -> str | None:
    """After a race: drop the runs of a round not played whole (Ctrl-C), and say what a
    race cut short covers."""
    if not (interrupted or stopped):
        return None
    played_seeds = max((r.seeds for r in book.races.values()), default=0)
    kept = set(seeds[:played_seeds])
    for i, p in enumerate(points):
        if rows[i] is not None and p.seed not in kept:
            rows[i] = None
    if interrupted:
        book.ended = "interrupted"
    return f"{_why_cut(interrupted, time_limit)}: the race stopped after {played_seeds} of at most {len(seeds)} seeds, undecided"


def _run_on_ray(playbook, tasks: dict[tuple, list[dict]], sets, duration, tick, keep, played, address, max_workers,
                deadline: float | None = None) -> bool:
    """Play ``tasks`` (the point indices of a group -> its points, ``run_group``) as Ray
    tasks; ``played(indices, result)`` as each ends. Returns whether the ``deadline``
    (``time.monotonic()``) stopped it before the end."""
    if not tasks:
        return False
    if past(deadline):
        return True
    from orchestrator.hosting.ray_hosting import ensure_ray

    ray = ensure_ray(address)
    task = ray.remote(num_cpus=1, max_retries=1)(run_group)
    limit = max_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    pending: dict = {}
    todo = list(tasks.items())
    try:
        while todo or pending:
            while todo and len(pending) < limit and not past(deadline):  # (starting Ray takes seconds)
                key, group = todo.pop(0)
                pending[task.remote(playbook, group, sets, duration, tick, [keep[i] for i in key], nested=True)] = key
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, _ = ray.wait(list(pending), num_returns=1, timeout=wait) if pending else ([], [])
            for ref in done:
                played(pending.pop(ref), ray.get(ref))
            if past(deadline) and (todo or pending):
                # Interrupted as by Ctrl-C, so that a run keeping its directory closes it
                # (status "interrupted"); waited for, so that none is still writing.
                _stop(ray, pending, played, force=False)
                return True
        return False
    except KeyboardInterrupt:
        _stop(ray, pending, played, force=True)  # (a cluster's CPUs are not left to runs nobody waits for)
        raise


def _stop(ray, pending: dict, played, force: bool) -> None:
    """Stop the runs of ``pending`` (ref -> point index), keeping those that ended before
    they could be stopped. ``force``: kill them (Ctrl-C) rather than interrupt them and
    wait. Nothing here may raise: a local Ray may be stopping on the same Ctrl-C."""
    def collect(timeout: float) -> None:
        with contextlib.suppress(Exception):
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
            for ref in ready:
                # Ended, with a row or not: never cancelled again (a task that ended on its
                # first cancel and is force-cancelled aborts this process: Ray 2.60's "Check
                # failed: Tried to complete task that was not pending", a CI worker's death).
                i = pending.pop(ref)
                with contextlib.suppress(Exception):  # (cancelled, or failed: not a row)
                    played(i, ray.get(ref, timeout=0))

    collect(0)
    for ref in pending:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=force)
    if not force:
        collect(60)
        for ref in pending:  # (a run that did not stop within the minute)
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)


def table(rows: list[dict], sweep_vars: list[str], drawn_vars: list[str] | None = None) -> pd.DataFrame:
    """The tidy results table, sorted by sweep point, runbook and seed; the variables drawn
    for each seed follow the sweep's."""
    df = pd.DataFrame(rows)
    cols = ["runbook", "seed", *sweep_vars, *(drawn_vars or []), *[c for c in COLUMNS if c not in ("runbook", "seed")]]
    df = df[cols]
    order = {rb: i for i, rb in enumerate(dict.fromkeys(df["runbook"]))}
    df = df.sort_values([*sweep_vars, "runbook", "seed"], key=lambda s: s.map(order) if s.name == "runbook" else s,
                        kind="stable").reset_index(drop=True)
    return df
