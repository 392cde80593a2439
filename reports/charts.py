"""The report's charts (matplotlib, drawn off screen): PNG bytes by name. Actions that
took effect are drawn as markers on every chart."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")  # no display: reports are built in batch and in CI
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from .analysis import Analysis, amplification, loop_signals, populations, useful_share  # noqa: E402
from .timefmt import format_clock, parse_clock  # noqa: E402

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


def _finish(fig, ax, analysis: Analysis, dt: float, start_label: str) -> bytes:
    marks = [(a["tick"] * dt / 3600.0, a["action"]) for a in analysis.actions]
    for x, _ in marks:
        ax.axvline(x, color="tab:red", alpha=0.5, lw=1, ls="--")
    lo, hi = ax.get_xlim()
    for x, text in action_labels(marks, hi - lo):
        ax.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=7, color="tab:red",
                    va="top", ha="left", linespacing=1.0)
    start_s = parse_clock(start_label)  # the x axis in hours after the start, labelled with the simulated clock
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_clock((start_s + x * 3600.0) % 86400)))
    ax.set_xlabel("simulated clock")
    if ax.get_yscale() == "linear":  # whole numbers with thousands separators, never an offset (1e7) above the axis
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: readable(v)))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png(fig)


def readable(v: float) -> str:
    """An axis value as people read it: 12,500, 3.5, 0.25 (no scientific notation)."""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}" if v != int(v) else f"{v:.0f}"


def png(fig) -> bytes:
    """A finished figure as PNG bytes; the figure is closed."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def run_charts(run, analysis: Analysis, only: tuple[str, ...] | None = None) -> dict[str, bytes]:
    """The charts of a run directory, following the scoring section the analysis read;
    ``only``: draw just these."""
    return make_charts(run.metrics, analysis, float(run.meta["tick_s"]), str(run.meta["start_clock"]),
                       analysis.scoring, only)


def make_charts(m: pd.DataFrame, analysis: Analysis, dt: float, start_label: str, scoring: dict,
                only: tuple[str, ...] | None = None) -> dict[str, bytes]:
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
        charts["loop"] = _finish(fig, ax, analysis, dt, start_label)
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
        charts["loop"] = _finish(fig, ax, analysis, dt, start_label)

    loop_populations = [p for p in loop["populations"] if f"{p}.tries" in m]
    if loop_populations and wanted("amplification"):
        fig, ax = _figure("Retry amplification (tries per wanted request; durable: per one done)", "x")
        for p in loop_populations:
            ratio, unbounded = amplification(m, p, analysis.works[p], window, float(loop["amplification_max"]))
            ax.plot(hours, ratio.iloc[::every], label=f"{p} (at the top: unbounded)" if unbounded else p)
        charts["amplification"] = _finish(fig, ax, analysis, dt, start_label)

    if wanted("errors"):
        fig, ax = _figure("Error rate per service (requests failed for good, 1-minute mean)", "ratio")
        for p in populations(m):
            ax.plot(hours, m[f"{p}.error_ratio"].rolling(window, min_periods=1).mean().iloc[::every],
                    label=p)
        ax.set_ylim(-0.02, 1.05)
        charts["errors"] = _finish(fig, ax, analysis, dt, start_label)

    backlog_populations = [p for p in backlog["populations"] if f"{p}.backlog" in m]
    queues = [s for s in backlog["services"] if f"{s}.queue_wait_s" in m]
    if backlog_populations and wanted("backlog"):
        fig, ax = _figure("Backlog of durable work", "requests")
        for p in backlog_populations:
            ax.plot(hours, part[f"{p}.backlog"], label=p)
        charts["backlog"] = _finish(fig, ax, analysis, dt, start_label)
    elif queues and wanted("backlog"):
        fig, ax = _figure("Backlog: how long new work waits in the queue", "minutes")
        for s in queues:
            ax.plot(hours, part[f"{s}.queue_wait_s"] / 60.0, label=s)
        charts["backlog"] = _finish(fig, ax, analysis, dt, start_label)

    if "monitoring.visibility" in m and wanted("visibility"):
        fig, ax = _figure("Monitoring visibility (share of observed metrics that are fresh)", "ratio")
        ax.plot(hours, part["monitoring.visibility"], color="tab:purple", label="visibility")
        ax.set_ylim(-0.02, 1.05)
        charts["visibility"] = _finish(fig, ax, analysis, dt, start_label)
    return charts
