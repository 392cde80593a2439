"""The run directory (docs/reference/run-directory.md; docs/contributing/architecture.md, step 4 of a tick).

Written so that a run killed at any moment leaves a readable directory: the rendered
inputs and ``meta.json`` are written before the first tick, beside it, and the directory
renamed into place (it never exists without them); ``events.jsonl``
and ``metrics.csv`` are appended and flushed every tick; ``score.json`` and the final
``meta.json`` status come last. A reader loses at most the tick being written.

The files and their first columns are named once, in ``reports/rundir.py``.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
from importlib import metadata
from operator import itemgetter
from pathlib import Path

from reports import rundir
from reports.files import write_json_atomic
from orchestrator.errors import RunDirectoryError, setting
from reports.timefmt import format_clock
from orchestrator.engine.world import WorldPlan


def versions() -> dict:
    out = {"python": platform.python_version()}
    for pkg in ("gameday", "numpy", "pandas", "msgpack", "jinja2", "pyyaml", "click"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return rundir.METRIC_FLOAT % v if v == v else ""
    return str(v)


class RowFormat:
    """A metrics row as ``_fmt`` writes each value, formatted a row at a time: the values
    are fetched per agent in C (``itemgetter``) and laid out by one format string per
    combination of value types (a run has a handful). A NaN, which ``_fmt`` writes as an
    empty field, sends its row the value-by-value way."""

    def __init__(self, columns: list[tuple[str, str]]):
        runs: list[tuple[str, list[str]]] = []  # consecutive columns of one agent
        for agent, metric in columns:
            if runs and runs[-1][0] == agent:
                runs[-1][1].append(metric)
            else:
                runs.append((agent, [metric]))
        self.getters = [(agent, itemgetter(*ms), len(ms) == 1) for agent, ms in runs]
        self.formats: dict[tuple, str] = {}

    def values(self, metrics: dict[str, dict[str, float]]) -> list:
        out: list = []
        for agent, get, single in self.getters:
            if single:  # itemgetter of one key gives the value, of several a tuple
                out.append(get(metrics[agent]))
            else:
                out.extend(get(metrics[agent]))
        return out

    def line(self, head: list[str], metrics: dict[str, dict[str, float]]) -> str:
        values = self.values(metrics)
        kinds = tuple(map(type, values))
        fmt = self.formats.get(kinds)
        if fmt is None:
            fmt = self.formats[kinds] = ",".join(rundir.METRIC_FLOAT if issubclass(k, float) else "%s" for k in kinds)
        text = fmt % tuple(values)
        if "nan" in text:
            text = ",".join(_fmt(v) for v in values)
        return ",".join(head) + "," + text + "\n" if values else ",".join(head) + "\n"


def check_out_dir(out: Path) -> None:
    """A run directory must be new or empty: a run never writes over another."""
    out = Path(out)
    if out.is_symlink():  # (the directory is put in place by a rename, which replaces a link, never follows it)
        raise RunDirectoryError(f"run directory {out} is a symbolic link (to {os.readlink(out)}); give the directory "
                                f"itself, or a new path, as {setting('out')}")
    if out.exists() and not out.is_dir():
        raise RunDirectoryError(f"run directory {out} exists and is not a directory; choose another {setting('out')}")
    if out.exists() and any(out.iterdir()):
        raise RunDirectoryError(f"run directory {out} exists and is not empty; choose another {setting('out')}")


def run_meta(plan: WorldPlan, meta: dict) -> dict:
    """``meta.json`` as a run starts: ``meta`` and what every run records."""
    return dict(meta) | {"status": rundir.RUNNING, "versions": versions(), "tick_s": plan.info.dt,
                         "start_clock": format_clock(plan.info.start_s), "ticks_planned": plan.ticks, "ticks_done": 0}


class ScoreOnly:
    """Where a run goes when nobody will read its directory (a comparison's runs, unless
    it keeps them): what ``meta.json`` and ``score.json`` would hold, in memory. It writes
    no file, and so skips what a run directory costs: formatting every metric of every
    tick (a tenth of a 12-hour run's time, measured on us-east-1-2021)."""

    def __init__(self, plan: WorldPlan, meta: dict):
        self.meta = run_meta(plan, meta)
        self.score: dict | None = None

    def write_tick(self, tick: int, metrics: dict[str, dict[str, float]], events: list[dict]) -> None:
        self.meta["ticks_done"] = tick + 1

    def event(self, tick: int, event: dict) -> None:
        """(Nothing is kept of the events: the score has what a comparison reads.)"""

    def close(self, status: str, score: dict | None) -> None:
        self.meta["status"] = status
        self.score = None if score is None else json.loads(json.dumps(score, default=str))  # as score.json gives it back


class RunWriter:
    def __init__(self, out: Path, plan: WorldPlan, meta: dict, files: dict[str, str]):
        """``files``: name -> text of the files a run directory starts with besides its
        journal (the rendered playbook, the runbook), written with meta.json."""
        self.dir = Path(out)
        check_out_dir(self.dir)
        self.plan = plan
        self.info = plan.info
        self.meta = run_meta(plan, meta)
        self.columns = plan.columns()
        self.rows = RowFormat(self.columns)
        # The first files are written beside it and renamed into place, so that the run
        # directory never exists without its meta.json: a run stopped while starting (a
        # comparison's time limit cancels its runs wherever they are) leaves nothing.
        starting = self.dir.with_name(f".{self.dir.name}.starting-{os.getpid()}")
        try:
            shutil.rmtree(starting, ignore_errors=True)  # (one this process left when killed)
            starting.mkdir(parents=True)
            self._write_first_files(starting, plan, files)
            os.replace(starting, self.dir)  # (an empty directory there is replaced)
        except BaseException as e:
            if hasattr(self, "metrics") and not starting.exists():  # (stopped once in place: it says so)
                self.close(rundir.INTERRUPTED, None)
                raise
            for f in ("events", "metrics"):
                if hasattr(self, f):
                    getattr(self, f).close()
            shutil.rmtree(starting, ignore_errors=True)
            if isinstance(e, OSError):
                raise RunDirectoryError(f"cannot create run directory {self.dir}: {e.strerror}") from None
            raise

    def _write_first_files(self, where: Path, plan: WorldPlan, files: dict[str, str]) -> None:
        for name, text in files.items():
            (where / name).write_text(text, encoding="utf-8")
        write_json_atomic(where / rundir.COLUMNS, {
            "tick": "tick number, from 0", "time_s": "simulated seconds since the start of the run",
            "clock": "simulated clock time (HH:MM[:SS])",
            **{f"{a}.{m}": plan.metric_info(f"{a}.{m}") for a, m in self.columns}})
        # (in its own order: a fork's takeover runbooks are played again from it, and the order
        # of an action's params is the order its events give them)
        write_json_atomic(where / rundir.META, self.meta, sort_keys=False)
        # (the files stay open across the rename: it moves the directory, not them)
        self.events = open(where / rundir.EVENTS, "w", encoding="utf-8")
        self.metrics = open(where / rundir.METRICS, "w", encoding="utf-8")
        self.metrics.write(",".join([*rundir.METRIC_INDEX] + [f"{a}.{m}" for a, m in self.columns]) + "\n")
        self.metrics.flush()

    def write_tick(self, tick: int, metrics: dict[str, dict[str, float]], events: list[dict]) -> None:
        t = tick * self.info.dt
        clock = format_clock(self.info.start_s + t)
        for e in events:
            e = dict(e)
            tk = e.pop("tick")
            self.events.write(json.dumps({"tick": tk, "clock": format_clock(self.info.start_s + tk * self.info.dt), **e},
                                         sort_keys=False, default=str) + "\n")
        self.metrics.write(self.rows.line([str(tick), _fmt(t), clock], metrics))
        self.events.flush()
        self.metrics.flush()
        self.meta["ticks_done"] = tick + 1

    def event(self, tick: int, event: dict) -> None:
        self.events.write(json.dumps({"tick": tick, "clock": format_clock(self.info.start_s + tick * self.info.dt), **event}) + "\n")
        self.events.flush()

    def close(self, status: str, score: dict | None) -> None:
        self.events.close()
        self.metrics.close()
        # An interrupt (Ctrl-C) can land between a tick's row and its count: the rows are the truth.
        with open(self.dir / rundir.METRICS, "rb") as f:
            self.meta["ticks_done"] = max(0, sum(1 for _ in f) - 1)
        if score is not None:
            write_json_atomic(self.dir / rundir.SCORE, score)
        self.meta["status"] = status
        write_json_atomic(self.dir / rundir.META, self.meta, sort_keys=False)
