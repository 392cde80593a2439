"""A run's metrics in Prometheus' terms, once for the two ways they leave gameday: a run
directory written as OpenMetrics text with the run's own timestamps (``write_openmetrics``,
for ``promtool tsdb create-blocks-from openmetrics``), and a run being played, served
live (``orchestrator/live/metrics_endpoint.py`` reads ``layout``, ``run_labels`` and
``value`` here, so that a scraped run and its backfill answer the same query with the same
series and the same values).

The names (docs/how-to/prometheus.md says them for users):

- metrics.csv's column ``AGENT.METRIC`` is a sample of the gauge family
  ``gameday_METRIC`` (``family_name``: the Prometheus grammar, a reserved suffix kept
  apart) with the labels ``agent`` and ``kind`` (the agent's kind: device, service ...),
  after the run's (``run_labels``: ``run``, ``team`` in a live session, ``playbook``,
  ``runbook``, ``seed``);
- the clock: ``gameday_tick``, ``gameday_simulated_clock_seconds`` (seconds since the
  simulated start: metrics.csv's ``time_s``) and ``gameday_simulated_time_of_day_seconds``
  (seconds after the simulated midnight: the ``clock`` column, in seconds);
- ``gameday_run_info`` (value 1): the run's labels and its ``tick_s`` and ``start_clock``.

A value is what metrics.csv holds (``value``: a float as the journal writes it, to ten
significant digits); a NaN (an empty field) is no sample, and a column that is not numbers
is left out, said in the export's notes.

A sample's timestamp is a real moment: tick 0 at ``t0`` (``start_moment``: by default the
simulated clock times on the last day that had passed them all when the run was played,
in UTC, so that a run shows in the recent past at its own clock times), tick ``k`` at
``t0 + k * tick_s``, to the millisecond (Prometheus' resolution).
"""
from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import rundir
from .files import writing_atomic
from .timefmt import parse_clock

PREFIX = "gameday_"
TICK, CLOCK_S, TIME_OF_DAY_S, RUN_INFO = (f"{PREFIX}tick", f"{PREFIX}simulated_clock_seconds",
                                          f"{PREFIX}simulated_time_of_day_seconds", f"{PREFIX}run")
#: the clock's families: name -> help
CLOCK_HELP = {
    TICK: "the tick these values are of (metrics.csv's tick column)",
    CLOCK_S: "simulated seconds since the run's start at this tick (metrics.csv's time_s column)",
    TIME_OF_DAY_S: "the simulated clock at this tick, in seconds after the simulated midnight (metrics.csv's clock "
                   "column, in seconds; past 86400 on the next simulated day)"}
RUN_INFO_HELP = "the run these series are of (value 1): its playbook, runbook, seed, tick and simulated start clock"
#: suffixes OpenMetrics gives the samples of other types: a gauge whose name ends in one is
#: read by a parser as a sample of another family, so the name is kept apart with SUFFIX_GUARD
RESERVED_SUFFIXES = ("_total", "_created", "_count", "_sum", "_bucket", "_gcount", "_gsum", "_info")
SUFFIX_GUARD = "_value"
#: the labels of the run, in their order; ``team`` only where the run is a team's
RUN_LABELS = ("run", "team", "playbook", "runbook", "seed")
SERIES_LABELS = ("kind", "agent")
#: Prometheus keeps milliseconds: a tick (or every how many) shorter than this would give
#: two samples one timestamp
MIN_STEP_S = 0.001
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_:]")


class ExportRefused(ValueError):
    """What asked of an export cannot be done (a start time that is not one, a step shorter
    than Prometheus keeps); ``field``: the setting at fault (``start``, ``every``), which a
    front end names as its users typed it."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def family_name(metric: str) -> str:
    """``gameday_METRIC`` in the Prometheus grammar ``[a-zA-Z_:][a-zA-Z0-9_:]*``: every other
    character an underscore; a name ending in a suffix OpenMetrics reserves for other types'
    samples (``_total``, ``_count`` ...), or one of the clock's or the run's own families,
    gets ``_value`` after it."""
    name = PREFIX + _NOT_NAME.sub("_", metric)
    return name + SUFFIX_GUARD if name.endswith(RESERVED_SUFFIXES) or name in (*CLOCK_HELP, RUN_INFO) else name


def escape_label(value) -> str:
    """A label value as OpenMetrics writes it between double quotes: backslash, double quote
    and line feed escaped (``\\\\``, ``\\"``, ``\\n``)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text) -> str:
    """A HELP text as OpenMetrics writes it: escaped as a label value, on one line."""
    return escape_label(" ".join(str(text).split("\r")))


def labels_text(labels: dict) -> str:
    """``{a="x",b="y"}`` in the order given; "" for none."""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items()) + "}" if labels else ""


def value(v) -> float | None:
    """A metric's value as metrics.csv holds it (engine/journal.py writes a float as
    rundir.METRIC_FLOAT, an integer as it is, NaN as nothing): a float, or None where the
    file holds no number. True and False are 1 and 0."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, float):
        return None if v != v else float(rundir.METRIC_FLOAT % v)
    if isinstance(v, int):
        return float(v)
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if f != f else f


def number_text(v: float) -> str:
    """A float as OpenMetrics writes it, exactly (``repr``: the shortest text that reads back
    as the same double, as Prometheus' API gives it back)."""
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def run_labels(meta: dict, run_dir: Path | str | None) -> dict[str, str]:
    """The labels every series of a run carries: ``run`` (the run directory's name; a live
    session's team: the session directory's, with ``team``), ``playbook``, ``runbook``,
    ``seed``; those the meta lacks are left out."""
    session, team = meta.get("session"), meta.get("team")
    run = Path(session).name if isinstance(session, str) and session and team else \
        Path(run_dir).name if run_dir is not None else ""
    out = {"run": run, "team": team if isinstance(team, str) else "", "playbook": meta.get("playbook"),
           "runbook": meta.get("runbook"), "seed": meta.get("seed")}
    return {k: str(v) for k, v in out.items() if v is not None and v != ""}


def info_labels(meta: dict, run_dir: Path | str | None) -> dict[str, str]:
    """``gameday_run_info``'s labels: the run's, its tick in seconds and its simulated start clock."""
    more = {"tick_s": repr(float(meta["tick_s"])) if isinstance(meta.get("tick_s"), (int, float)) else None,
            "start_clock": meta.get("start_clock")}
    return run_labels(meta, run_dir) | {k: str(v) for k, v in more.items() if v is not None}


@dataclass
class Family:
    """A gauge family: its name, its HELP, and its series as (column ``AGENT.METRIC``, the
    series' own labels: kind and agent)."""
    name: str
    help: str
    series: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def layout(columns, info: Callable[[str], dict | None]) -> tuple[list[Family], list[str]]:
    """The families of a run's metric columns (``AGENT.METRIC``, in the order given), sorted
    by name, each series in column order, and notes on the columns left out (two columns
    whose names become one series: the first is kept). ``info(column)``: its kind, unit and
    meaning (columns.json's entry, or the plan's), or None."""
    families: dict[str, Family] = {}
    meanings: dict[str, dict[str, str]] = {}  # family -> kind -> "meaning (unit)"
    taken: dict[tuple[str, str], str] = {}
    notes = []
    for column in columns:
        agent, _, metric = column.partition(".")
        if not metric:
            notes.append(f"column {column!r}: not AGENT.METRIC; left out")
            continue
        about = info(column) or {}
        kind = about.get("kind") if isinstance(about.get("kind"), str) else ""
        name = family_name(metric)
        if (name, agent) in taken:
            notes.append(f"column {column!r}: its series would be {name}{{agent={agent!r}}}, as column "
                         f"{taken[name, agent]!r}'s; left out")
            continue
        taken[name, agent] = column
        fam = families.setdefault(name, Family(name, ""))
        fam.series.append((column, {"kind": kind, "agent": agent} if kind else {"agent": agent}))
        meaning, unit = about.get("meaning"), about.get("unit")
        said = " ".join(str(x) for x in (meaning, f"({unit})" if unit else None) if x) or f"metric {metric}"
        meanings.setdefault(name, {}).setdefault(kind, said)
    for name, fam in families.items():
        said = meanings[name]
        texts = list(dict.fromkeys(said.values()))
        fam.help = texts[0] if len(texts) == 1 else "; ".join(f"{k or 'other'}: {t}" for k, t in said.items())
    return [families[n] for n in sorted(families)], notes


# -- when tick 0 was -----------------------------------------------------------------------------
def start_moment(meta: dict, start: str | None = None) -> dt.datetime:
    """The real moment (aware, UTC) of the run's tick 0. ``start``: an ISO 8601 date-time
    with its zone (``2021-12-07T07:00:00Z``, ``...-08:00``): that moment; or a date
    (``2021-12-07``): that date at the run's start clock, UTC. None: the last day whose
    simulated clock times (start to end of the run, UTC) had all passed when the run was
    played (meta.json's started_at), at the start clock; ``ExportRefused`` if the run does
    not say when it was played."""
    clock_s = parse_clock(meta["start_clock"])
    if start is not None:
        try:
            when = dt.datetime.fromisoformat(start.strip())
        except ValueError:
            raise ExportRefused("start", f"{start!r} is not a date-time: expected ISO 8601 with its zone, as "
                                "2021-12-07T07:00:00Z or 2021-12-07T07:00:00-08:00, or a date, 2021-12-07 (at the "
                                f"run's start clock, {meta['start_clock']}, UTC)") from None
        if len(start.strip()) == 10:  # (a date alone)
            when = dt.datetime.combine(when.date(), dt.time(), dt.timezone.utc) + dt.timedelta(seconds=clock_s)
        elif when.tzinfo is None:
            raise ExportRefused("start", f"{start!r} has no zone: add Z (UTC) or an offset such as -08:00, so that the moment "
                                "is one")
        return _in_range(when.astimezone(dt.timezone.utc), start)
    played = meta.get("started_at")
    try:
        played_at = dt.datetime.strptime(played, "%Y-%m-%dT%H:%M:%S%z") if isinstance(played, str) else None
    except ValueError:
        played_at = None
    if played_at is None:
        raise ExportRefused("start", f"{rundir.META} does not say when the run was played (started_at is "
                            f"{played!r}): say when its tick 0 was")
    span = float(meta.get("ticks_planned") or meta.get("ticks_done") or 0) * float(meta["tick_s"])
    day = dt.datetime.combine(played_at.astimezone(dt.timezone.utc).date(), dt.time(), dt.timezone.utc)
    t0 = day + dt.timedelta(seconds=clock_s)
    while t0 + dt.timedelta(seconds=span) > played_at:
        t0 -= dt.timedelta(days=1)
    return t0


def _in_range(when: dt.datetime, said: str) -> dt.datetime:
    if when < dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc):
        raise ExportRefused("start", f"{said!r} is before 1970: Prometheus keeps times from 1970-01-01 on")
    return when


def iso(when: dt.datetime) -> str:
    """A moment as ``2021-12-07T07:00:00Z`` (milliseconds if it has them)."""
    text = when.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return text.replace(".000Z", "Z")


# -- a run directory written as OpenMetrics ---------------------------------------------------------
@dataclass
class Exported:
    """What ``write_openmetrics`` wrote: the file, its families, series and samples, the
    ticks and the moments of the first and last, and notes on what it left out."""
    path: Path
    families: int
    series: int
    samples: int
    ticks: int
    first: dt.datetime | None
    last: dt.datetime | None
    t0: dt.datetime
    notes: list[str]


def write_openmetrics(run: rundir.RunData, path: Path | str, start: str | None = None, every: int = 1) -> Exported:
    """The run's metrics (``run.metrics``: metrics.csv's whole rows) as OpenMetrics text at
    ``path``, written whole or not at all: a gauge family per metric, then the clock's and
    ``gameday_run_info``, each series' samples in tick order, every ``every``-th tick (those
    a multiple of it), each stamped with its moment (``start_moment(run.meta, start)``),
    then ``# EOF``. ``ExportRefused`` if ``every`` is not a count from 1, or makes samples
    closer than a millisecond."""
    meta = run.meta
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ExportRefused("every", f"every {every!r} ticks: expected a count of ticks, from 1")
    tick_s = float(meta["tick_s"])
    if tick_s * every < MIN_STEP_S:
        raise ExportRefused("every", f"a sample every {every} tick{'s' * (every != 1)} of {tick_s:g} s is {tick_s * every:g} s "
                            f"apart, and Prometheus keeps times to the millisecond: export every "
                            f"{math.ceil(MIN_STEP_S / tick_s)} ticks or more")
    t0 = start_moment(meta, start)
    t0_ms = round(t0.timestamp() * 1000)
    table = run.metrics
    notes: list[str] = []
    if table.empty or "tick" not in table.columns:
        rows = table.iloc[0:0]
    else:
        rows = table[table["tick"] % every == 0]
    ticks = rows["tick"].tolist() if len(rows) else []
    moments = [t0_ms + round(t * tick_s * 1000) for t in ticks]
    stamps = [f" {ms // 1000}.{ms % 1000:03d}\n" for ms in moments]
    columns_info = run.columns
    metric_columns = [c for c in table.columns if c not in rundir.METRIC_INDEX]
    families, skipped = layout(metric_columns, lambda c: columns_info.get(c) if isinstance(columns_info.get(c), dict)
                               else None)
    notes += skipped
    base = run_labels(meta, run.dir)
    counts = {"families": 0, "series": 0, "samples": 0}

    def series_lines(name: str, labels: dict, values: list) -> str:
        head = name + labels_text(labels) + " "
        lines = [head + number_text(v) + stamp for v, stamp in zip(values, stamps) if v is not None]
        counts["samples"] += len(lines)
        counts["series"] += bool(lines)
        return "".join(lines)

    def family_text(name: str, help: str, series: list[tuple[dict, list]], kind: str = "gauge") -> str:
        body = "".join(series_lines(name + ("_info" if kind == "info" else ""), labels, values)
                       for labels, values in series)
        if not body:
            return ""
        counts["families"] += 1
        return f"# TYPE {name} {kind}\n# HELP {name} {escape_help(help)}\n{body}"

    start_s = parse_clock(meta["start_clock"])
    with writing_atomic(path) as out:
        for fam in families:
            series = []
            for column, own in fam.series:
                values = _column_values(rows[column])
                if values is None:
                    notes.append(f"column {column!r}: not numbers; left out")
                    continue
                series.append((base | own, values))
            out.write(family_text(fam.name, fam.help, series).encode("utf-8"))
        clock = (_column_values(rows["time_s"]) if "time_s" in rows.columns else None) or [t * tick_s for t in ticks]
        for name, values in ((TICK, [float(t) for t in ticks]), (CLOCK_S, clock),
                             (TIME_OF_DAY_S, [None if v is None else start_s + v for v in clock])):
            out.write(family_text(name, CLOCK_HELP[name], [(base, values)]).encode("utf-8"))
        out.write(family_text(RUN_INFO, RUN_INFO_HELP, [(info_labels(meta, run.dir), [1.0] * len(ticks))],
                              kind="info").encode("utf-8"))
        out.write(b"# EOF\n")
    first, last = (_moment(moments[0]), _moment(moments[-1])) if moments else (None, None)
    return Exported(Path(path), counts["families"], counts["series"], counts["samples"], len(ticks), first, last, t0,
                    notes)


def _moment(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)


def _column_values(col) -> list | None:
    """A column's values as floats (None where it holds no number: an empty field), or None
    if it is not a column of numbers (text, which pandas reads as objects)."""
    kind = col.dtype.kind
    if kind in "iub":
        return [float(v) for v in col.tolist()]
    if kind == "f":
        return [None if v != v else v for v in col.tolist()]
    out = []
    for v in col.tolist():
        number = value(v)
        if number is None and not (v is None or isinstance(v, float) or (isinstance(v, str) and not v.strip())):
            return None
        out.append(number)
    return out
