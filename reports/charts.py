"""The report's charts (matplotlib, drawn off screen), each drawn once and rendered as
PNG (the Markdown report's files) and/or SVG (inline in the HTML report, where a browser
reads its elements: each label of actions and notes is a group with its details on hover).
Actions that took effect, and a live team's notes, are marked on every chart."""
from __future__ import annotations

import hashlib
import html
import io
import re
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")  # no display: reports are built in batch and in CI
matplotlib.rcParams["svg.hashsalt"] = "gameday"  # the same run draws the same SVG (its ids are hashes)
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from .analysis import Analysis, amplification, loop_signals, populations, useful_share  # noqa: E402
from .timefmt import format_clock, parse_clock  # noqa: E402

FORMATS = ("png", "svg")


@dataclass(frozen=True)
class Chart:
    """One chart as each report wants it: ``png`` (bytes) and ``svg`` (an ``<svg>``
    element to inline), each None unless asked for."""

    png: bytes | None = None
    svg: str | None = None


MAX_POINTS = 1500  # a 12-hour run at 1 s ticks is thinned to this many points per line


def _thin(m: pd.DataFrame, dt: float) -> tuple[pd.DataFrame, pd.Series]:
    step = max(1, len(m) // MAX_POINTS)
    part = m.iloc[::step]
    return part, part.index.to_series() * dt / 3600.0  # hours since the start


def _figure(title: str, ylabel: str):
    fig, ax = plt.subplots(figsize=(9, 3.2), dpi=100)
    ax.set_title(title, fontsize=11, loc="left")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


LABEL_GAP = 0.022  # an action label's line (7-point text, drawn upright) as a share of the x axis' width
LABEL_LINES = 3  # names under one marker at most; the rest are counted


def action_labels(hours: list[tuple[float, str]], span: float) -> list[tuple[float, str]]:
    """(hours, text) of the labels of actions at ``hours`` (hours, name) on an x axis
    ``span`` hours wide, each drawn to the right of its first action's marker, so that no
    two overlap: an action closer to the label before than that label's width takes a
    line of it (up to LABEL_LINES names, then "+N more")."""
    groups: list[tuple[float, list[str], int]] = []  # (hours of the first, names shown, names in all)
    for x, name in sorted(hours, key=lambda h: h[0]):
        if groups:
            at, names, n = groups[-1]
            if x - at < min(n, LABEL_LINES) * LABEL_GAP * span:
                groups[-1] = (at, names + [name] if n < LABEL_LINES else names, n + 1)
                continue
        groups.append((x, [name], 1))
    return [(at, "\n".join(names[:-1] + [f"{names[-1]} +{n - len(names)} more"] if n > len(names) else names))
            for at, names, n in groups]


MARK_COLOURS = {"action": "tab:red", "note": "tab:blue"}  # an action taking effect; a team's note


def _marks(analysis: Analysis, dt: float) -> list[tuple[float, str, str, str]]:
    """(hours, label line, kind, details on hover) of what is marked on a chart: the actions
    that took effect and the team's notes, in time order."""
    marks = [(a["tick"] * dt / 3600.0, a["action"], "action", f"{a['clock']} {a['action']} took effect")
             for a in analysis.actions]
    marks += [(n["tick"] * dt / 3600.0, f"note by {n['by']}", "note", f"{n['clock']} note by {n['by']}: {n['text']}")
              for n in analysis.notes]
    return sorted(marks, key=lambda m: m[0])


def _finish(fig, ax, analysis: Analysis, dt: float, start_label: str, formats: tuple[str, ...]) -> Chart:
    start_s = parse_clock(start_label)
    marks = _marks(analysis, dt)
    for x, _, kind, _ in marks:
        ax.axvline(x, color=MARK_COLOURS[kind], alpha=0.5, lw=1, ls="--" if kind == "action" else ":")
    lo, hi = ax.get_xlim()
    labels = action_labels([(x, text) for x, text, _, _ in marks], hi - lo)
    starts = [x for x, _ in labels] + [float("inf")]
    details = []
    for i, (x, text) in enumerate(labels):
        members = [m for m in marks if starts[i] <= m[0] < starts[i + 1]]
        kinds = {m[2] for m in members}
        label = ax.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                            color=MARK_COLOURS["action" if "action" in kinds else "note"], va="top", ha="left",
                            linespacing=1.0)
        label.set_gid(f"mark-label-{i}")
        details.append("\n".join(m[3] for m in members))
    # the x axis in hours after the start, labelled with the simulated clock
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_clock((start_s + x * 3600.0) % 86400)))
    ax.set_xlabel("simulated clock")
    if ax.get_yscale() == "linear":  # whole numbers with thousands separators, never an offset (1e7) above the axis
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: readable(v)))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return render(fig, formats, details)


def readable(v: float) -> str:
    """An axis value as people read it: 12,500, 3.5, 0.25 (no scientific notation)."""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}" if v != int(v) else f"{v:.0f}"


def png(fig) -> bytes:
    """A finished figure as PNG bytes; the figure is closed."""
    return render(fig, ("png",)).png


def render(fig, formats: tuple[str, ...], details: list[str] = ()) -> Chart:
    """A finished figure in ``formats`` (laid out once for all of them); the figure is
    closed. ``details[i]``: what hovering over the figure's i-th mark label shows (in the SVG)."""
    fig.tight_layout()
    svg = png_bytes = None
    if "svg" in formats:
        text = io.StringIO()
        fig.savefig(text, format="svg", metadata={"Date": None})
        svg = inline_svg(text.getvalue(), details)
    if "png" in formats:
        data = io.BytesIO()
        fig.savefig(data, format="png")
        png_bytes = data.getvalue()
    plt.close(fig)
    return Chart(png=png_bytes, svg=svg)


_TOP = re.compile(r"\A.*?(?=<svg\b)", re.S)  # the XML declaration and doctype, out of place inside HTML
_COMMENT = re.compile(r"<!--.*?-->", re.S)  # (matplotlib escapes '--' in what it comments)
_SIZE = re.compile(r'<svg([^>]*?) width="[^"]*" height="[^"]*"')


def inline_svg(svg: str, details: list[str] = ()) -> str:
    """matplotlib's SVG as an element of an HTML page: no declaration, no comments; its ids
    made its own (a report inlines several charts, whose ids would repeat); as wide as the
    page; each mark label (``mark-label-I``, a class) with ``details[I]`` as its title."""
    svg = _COMMENT.sub("", _TOP.sub("", svg, count=1))
    svg = _SIZE.sub(r'<svg\1 class="chart" preserveAspectRatio="xMinYMin meet"', svg, count=1)
    own = "c" + hashlib.sha1(svg.encode()).hexdigest()[:10] + "-"  # (the same chart: the same ids)
    svg = re.sub(r'\bid="', f'id="{own}', svg)
    svg = svg.replace('href="#', f'href="#{own}').replace("url(#", f"url(#{own}")
    for i, text in enumerate(details):
        svg = svg.replace(f'<g id="{own}mark-label-{i}">',
                          f'<g id="{own}mark-label-{i}" class="mark-label"><title>{html.escape(text)}</title>', 1)
    return svg


def run_charts(run, analysis: Analysis, only: tuple[str, ...] | None = None,
               formats: tuple[str, ...] = FORMATS) -> dict[str, Chart]:
    """The charts of a run directory, following the scoring section the analysis read;
    ``only``: draw just these; ``formats``: render each in these (``FORMATS``)."""
    return make_charts(run.metrics, analysis, float(run.meta["tick_s"]), str(run.meta["start_clock"]),
                       analysis.scoring, only, formats)


def make_charts(m: pd.DataFrame, analysis: Analysis, dt: float, start_label: str, scoring: dict,
                only: tuple[str, ...] | None = None, formats: tuple[str, ...] = FORMATS) -> dict[str, Chart]:
    """loop (the loop's devices or services), amplification (if the loop has populations),
    errors, backlog (if the scoring names backlogs) and visibility."""
    if m.empty:
        return {}
    loop, backlog = scoring["loop"], scoring["backlog"]
    part, hours = _thin(m, dt)
    window = max(1, round(60 / dt))
    every = max(1, len(m) // MAX_POINTS)
    charts = {}

    def wanted(name: str) -> bool:
        return only is None or name in only

    devices = [d for d in loop["devices"] if f"{d}.utilisation" in m]
    services = [s for s in loop["services"] if f"{s}.work_done" in m]
    signals = loop_signals(loop, m, dt, analysis.works) if wanted("loop") else []
    followed = next((s for s in signals if s.name == analysis.loop_measure), None)
    if followed is not None and followed.high_is_bad:
        # the measure that left its bounds is a population's retries: the loop is drawn as they are
        fig, ax = _figure(f"The loop: {followed.name}, the measure that left its bounds (tries per wanted request; "
                          f"durable: per one done)", "x")
        for s in signals:
            if s.high_is_bad:
                ax.plot(hours, s.series.iloc[::every], label=s.name, linewidth=2.2 if s is followed else 1.2)
        ax.axhline(followed.bound, linestyle="--", color="grey", label=f"its bound ({followed.bound:g})")
        charts["loop"] = _finish(fig, ax, analysis, dt, start_label, formats)
    elif (devices or services) and wanted("loop"):
        what = "utilisation and connection-setup success" if devices else "utilisation and useful share of the work"
        fig, ax = _figure(f"The loop: {', '.join(devices + services)} {what}", "ratio")
        for d in devices:
            ax.plot(hours, part[f"{d}.utilisation"], label=f"{d} utilisation")
            ax.plot(hours, part[f"{d}.setup_success_ratio"], label=f"{d} setup success")
        for s in services:
            ax.plot(hours, part[f"{s}.utilisation"], label=f"{s} utilisation")
            ax.plot(hours, useful_share(m, s, dt).iloc[::every], label=f"{s} useful work (1-minute)")
        if followed is not None:
            ax.axhline(followed.bound, linestyle="--", color="grey", label=f"{followed.name} bound ({followed.bound:g})")
        ax.set_ylim(-0.02, 1.05)
        charts["loop"] = _finish(fig, ax, analysis, dt, start_label, formats)

    loop_populations = [p for p in loop["populations"] if f"{p}.tries" in m]
    if loop_populations and wanted("amplification"):
        fig, ax = _figure("Retry amplification (tries per wanted request; durable: per one done)", "x")
        for p in loop_populations:
            ratio, unbounded = amplification(m, p, analysis.works[p], window, float(loop["amplification_max"]))
            ax.plot(hours, ratio.iloc[::every], label=f"{p} (at the top: unbounded)" if unbounded else p)
        charts["amplification"] = _finish(fig, ax, analysis, dt, start_label, formats)

    if wanted("errors"):
        fig, ax = _figure("Error rate per service (requests failed for good, 1-minute mean)", "ratio")
        for p in populations(m):
            ax.plot(hours, m[f"{p}.error_ratio"].rolling(window, min_periods=1).mean().iloc[::every],
                    label=p)
        ax.set_ylim(-0.02, 1.05)
        charts["errors"] = _finish(fig, ax, analysis, dt, start_label, formats)

    backlog_populations = [p for p in backlog["populations"] if f"{p}.backlog" in m]
    queues = [s for s in backlog["services"] if f"{s}.queue_wait_s" in m]
    if backlog_populations and wanted("backlog"):
        fig, ax = _figure("Backlog of durable work", "requests")
        for p in backlog_populations:
            ax.plot(hours, part[f"{p}.backlog"], label=p)
        charts["backlog"] = _finish(fig, ax, analysis, dt, start_label, formats)
    elif queues and wanted("backlog"):
        fig, ax = _figure("Backlog: how long new work waits in the queue", "minutes")
        for s in queues:
            ax.plot(hours, part[f"{s}.queue_wait_s"] / 60.0, label=s)
        charts["backlog"] = _finish(fig, ax, analysis, dt, start_label, formats)

    if "monitoring.visibility" in m and wanted("visibility"):
        fig, ax = _figure("Monitoring visibility (share of observed metrics that are fresh)", "ratio")
        ax.plot(hours, part["monitoring.visibility"], color="tab:purple", label="visibility")
        ax.set_ylim(-0.02, 1.05)
        charts["visibility"] = _finish(fig, ax, analysis, dt, start_label, formats)
    return charts
