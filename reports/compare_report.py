"""The comparison report: the results table summarised per runbook, every pair's effect
sizes with their confidence intervals, both tests and the verdict, what the seed count
cannot show, and two charts per sweep point (the CDF of time to break the loop, box
plots of impact), as Markdown with PNGs beside it and as one self-contained HTML file.
``summary_lines`` words it the same way for the command line; ``write_phase_map`` writes a
phase map's directory."""
from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from . import compare_stats as cs
from . import decide
from .build import data_uri, environment
from .files import write_atomic
from .rundir import PHASES, STUCK
from .timefmt import format_duration, format_minutes, format_minutes_difference


def _fmt_s(seconds: float, never: str = "not broken") -> str:
    return never if seconds is not None and math.isinf(seconds) else format_minutes(seconds)


def _fmt_points(share: float) -> str:
    return f"{round(100 * share):+d}"


def _fmt_p(p: float) -> str:
    return f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}"


def _interval(lo: float, hi: float, fmt) -> str:
    """A CI as text; one side unbounded (infinite times) reads "at least" / "at most", both
    (or a single infinite value: one runbook never broke the loop) "unbounded"."""
    if math.isinf(lo) and math.isinf(hi):
        return "unbounded"
    if math.isinf(hi):
        return f"at least {fmt(lo)}"
    if math.isinf(lo):
        return f"at most {fmt(hi)}"
    return f"{fmt(lo)} to {fmt(hi)}"


def point_label(rec: dict, sweep_vars: list[str]) -> str:
    return ", ".join(f"{k}={rec[k]}" for k in sweep_vars) or "all runs"


def _prefix(rec: dict, sweep_vars: list[str]) -> str:
    """A printed line's sweep point, "clients=2000: " (nothing without a sweep)."""
    return f"{point_label(rec, sweep_vars)}: " if sweep_vars else ""


def pair_cells(rec: dict) -> dict[str, str]:
    """A pair's effect sizes, CIs and p values as text (differences are a minus b)."""
    return {"success": f"{rec['success_a']:.0%} vs {rec['success_b']:.0%}",
            "success_diff": f"{_fmt_points(rec['success_diff'])} points",
            "success_ci": _interval(*rec["success_diff_ci"], _fmt_points),
            "p_fisher": _fmt_p(rec["p_fisher"]), "p_fisher_holm": _fmt_p(rec["p_fisher_holm"]),
            "times": f"{_fmt_s(rec['median_a_s'])} vs {_fmt_s(rec['median_b_s'])}",
            "median_diff": format_minutes_difference(rec["median_diff_s"]),
            "median_ci": _interval(*rec["median_diff_ci"], format_minutes_difference),
            "p": _fmt_p(rec["p"]), "p_holm": _fmt_p(rec["p_holm"])}


def power_notes(tests: pd.DataFrame, sweep_vars: list[str]) -> list[str]:
    """Each sweep point's distinct power sentences, "point: sentence" when swept."""
    notes = [f"{_prefix(t, sweep_vars)}{t['power']}"
             for t in tests.to_dict("records") if t["power"]]
    return list(dict.fromkeys(notes))


def pair_lines(tests: pd.DataFrame, sweep_vars: list[str]) -> list[str]:
    """The pairs for the command line: each verdict, its effect sizes and tests, then
    what the seed count cannot show."""
    lines = []
    for t in tests.to_dict("records"):
        c = pair_cells(t)
        lines += [f"{_prefix(t, sweep_vars)}{t['verdict']}",
                  f"  success rate {t['a']} vs {t['b']}: {c['success']}, difference {c['success_diff']} "
                  f"(95% CI {c['success_ci']}); Fisher p = {c['p_fisher']}, {c['p_fisher_holm']} after Holm",
                  f"  median time to break {t['a']} vs {t['b']}: {c['times']}, difference {c['median_diff']} "
                  f"(95% CI {c['median_ci']}); Mann-Whitney p = {c['p']}, {c['p_holm']} after Holm"]
    return lines + power_notes(tests, sweep_vars)


def _points(df: pd.DataFrame, sweep_vars: list[str]) -> list[tuple[str, pd.DataFrame]]:
    if not sweep_vars:
        return [("all runs", df)]
    return [(point_label(dict(zip(sweep_vars, key if isinstance(key, tuple) else (key,))), sweep_vars), g)
            for key, g in df.groupby(sweep_vars, sort=False)]


def charts(df: pd.DataFrame, sweep_vars: list[str]) -> dict[str, bytes]:
    """{"break_cdf": png, "impact": png}, a panel per sweep point."""
    from .charts import plt, png

    points = _points(df, sweep_vars)
    out = {}
    for name in ("break_cdf", "impact"):
        fig, axes = plt.subplots(1, len(points), figsize=(max(6, 4.2 * len(points)), 3.4), dpi=100, squeeze=False)
        for ax, (label, g) in zip(axes[0], points):
            names = list(dict.fromkeys(g["runbook"]))
            if name == "break_cdf":
                horizon = float((g["horizon_s"] - g["trigger_s"].fillna(0)).max()) / 60
                for rb in names:
                    t = np.sort(cs.time_to_break(g[g["runbook"] == rb]).to_numpy()) / 60
                    y = np.arange(1, len(t) + 1) / len(t)
                    finite = np.isfinite(t)
                    ax.step(np.r_[0, t[finite], horizon], np.r_[0, y[finite], y[finite][-1] if finite.any() else 0],
                            where="post", label=rb)
                ax.set_xlabel("minutes after the trigger")
                ax.set_ylabel("share of runs with the loop broken")
                ax.set_ylim(0, 1.05)
            else:
                ax.boxplot([g[g["runbook"] == rb]["impact"].to_numpy() for rb in names], tick_labels=names)
                ax.set_ylabel("impact (weighted impaired minutes)")
                ax.tick_params(axis="x", labelrotation=20)
            ax.set_title(label, fontsize=10, loc="left")
            ax.grid(alpha=0.3)
        if name == "break_cdf":
            axes[0][-1].legend(fontsize=8, loc="lower right")
        out[name] = png(fig)
    return out


def _never_formed(r: dict) -> str:
    """Where some runs never formed a loop: how many, since they count as broken at once."""
    n = r["never_formed"]
    return f" ({n} of {r['runs']} never formed one: broken at once)" if n else ""


def _drained_cell(r: dict) -> str:
    """"N% (median T)" of runs whose backlog drained, where the playbook scores a backlog; else ""."""
    rate = r["drained_rate"]
    if rate != rate:
        return ""
    never = r["backlog_never_formed"]
    calm = f"{never} of {r['runs']} never over its threshold: drained at once; " if never else ""
    return f"{rate:.0%} ({calm}median {_fmt_s(r['median_drain_s'], 'not drained')})"


def _drained(r: dict) -> str:
    """", backlog drained in N% (median T)" where the playbook scores a backlog."""
    cell = _drained_cell(r)
    return f", backlog drained in {cell}" if cell else ""


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _turned_away(r: dict) -> str:
    """", N turned away per run (...)": the collateral beside the impact, which counts what the
    runbook's actions held back as failed (``reports.impact``). Two units in one count (a
    throttle refuses attempts, its callers' retries included; a lowered rate holds back
    requests), as score.json counts them: the words say so."""
    n = r["mean_turned_away"]
    return f", {n:,.0f} turned away per run (mean; attempts refused, requests held back)" if n >= 0.5 else ""


def summary_lines(summ: pd.DataFrame, tests: pd.DataFrame, sweep_vars: list[str], ranks: bool = True) -> list[str]:
    """The comparison for the command line: each runbook's success rate and times to break
    the loop, then (``ranks``) the rank tests' pairs (``pair_lines``) and the test used."""
    lines = [f"{_prefix(r, sweep_vars)}{r['runbook']}: {_runs(r['runs'])}, loop broken in "
             f"{r['success_rate']:.0%}{_never_formed(r)}, median {_fmt_s(r['median_break_s'])} (95% CI "
             f"{_fmt_s(r['median_break_ci'][0])} to {_fmt_s(r['median_break_ci'][1])}), p90 "
             f"{_fmt_s(r['p90_break_s'])}{_drained(r)}, median impact {r['median_impact']:.1f}{_turned_away(r)}"
             for r in summ.to_dict("records")]
    if len(summ) and (summ["never_formed"] == summ["runs"]).all():
        lines.append("no run formed a loop: the times and tests say nothing about the runbooks (does the "
                     "duration hold the trigger and the storm after it?)")
    if not ranks:
        return lines
    lines += pair_lines(tests, sweep_vars)
    return lines + ([f"test: {cs.TEST}"] if len(tests) else [])


_MEAN_OF = {"impact": "mean impact", "loop_broken": "mean time to break the loop",
            "backlog_drained": "mean time to drain the backlog"}


def _of_primary(primary: str, mean: float) -> str:
    return f"{_MEAN_OF[primary]} {decide.unit_text(primary, mean)}"


def race_lines(race: dict) -> list[str]:
    """A sequential comparison's decision in words: per sweep point, which runbook is best
    on the primary outcome at the stated confidence, or which are still in the race, and
    what became of each runbook."""
    primary, alpha = race["primary"], race["alpha"]
    head = (f"the race: {primary.replace('_', ' ')} (lower is better), {1 - alpha:.0%} confidence, "
            f"indifference {decide.unit_text(primary, race['delta'])} ({race['delta_from']}); "
            f"Kim-Nelson sequential selection, {race['first']} seeds first, then one at a time, "
            f"at most {race['seeds_max']}" + (" (read over the seeds a fixed comparison played: every seed)"
                                              if race.get("fixed") else "")
            + "; it guarantees the runbook it names, not each one it puts out, which may be within the "
              "indifference amount of the best: the pairs say how far apart each two are")
    lines = [head]
    for point in race["points"]:
        where = ", ".join(f"{k}={v}" for k, v in point["point"].items())
        where = f"{where}: " if where else ""
        n = point["seeds"]
        if point["best"] is not None:
            ties = [s["runbook"] for s in point["status"] if s["state"] == "as good"]
            also = (f" (as good: {', '.join(ties)}, with the same mean: any of them is within the indifference "
                    "amount of the best)") if ties else ""
            after = "would have been named after" if race.get("fixed") else "after"
            lines.append(f"{where}best: {point['best']}, {after} {n} seed{'s' * (n != 1)}{also}")
        else:
            alive = [s["runbook"] for s in point["status"] if s["state"] == "in the race"]
            why = {"seeds": f"the most seeds allowed, {race['seeds_max']}", "time limit": "the time limit",
                   "interrupted": "Ctrl-C"}.get(race["ended"], race["ended"])
            lines.append(f"{where}undecided after {n} seed{'s' * (n != 1)} ({why}): still in the race: "
                         f"{', '.join(alive)}")
        for s in point["status"]:
            state = {"best": "best", "in the race": "in the race",
                     "as good": f"as good as {s['out_by']}"}.get(s["state"], "")
            if s["state"] == "out":
                state = f"out after {s['out_after']} seeds, worse than {s['out_by']}"
            lines.append(f"  {s['runbook']}: {state}, {_of_primary(primary, s['mean'])} over {s['seeds']} seeds")
    return lines


def shared_line(df: pd.DataFrame) -> list[str]:
    """What playing each seed's common beginning once saved (``attrs["ticks"]``)."""
    ticks = df.attrs.get("ticks")
    if not ticks or not ticks.get("whole"):
        return []
    saved = 1 - ticks["ticks"] / ticks["whole"]
    return [f"shared beginnings: played {ticks['ticks']:,} of the {ticks['whole']:,} ticks its runs hold ({saved:.0%} "
            "saved: a seed's runs are identical until one's runbook acts, and that part was played once)"]


def robustness_lines(df: pd.DataFrame, sweep_vars: list[str]) -> list[str]:
    """Where the seeds' worlds were drawn (``--vary``): how often the best runbook is best
    across them, and which variable its lead depends on most."""
    drawn = df.attrs.get("drawn")
    if not drawn:
        return []
    how = _decision(df)
    race = df.attrs.get("race")
    best = {tuple(p["point"].values()): p["best"] for p in race["points"] if p["best"]} if race else None
    return [f"{_prefix(r, sweep_vars)}{decide.robustness_sentence(r, drawn)}"
            for r in decide.robustness(df, how["primary"], drawn, sweep_vars, best)]


def disagreement_lines(summ: pd.DataFrame, sweep_vars: list[str]) -> list[str]:
    """Per sweep point, one sentence where impact and the loop rank the runbooks differently:
    the runbook with the least median impact is not the one that breaks the loop most often
    and soonest (turning traffic away lowers the loop's load and can leave users failing; a
    runbook can break the loop and still cost more). Nothing where they agree."""
    out = []
    keys = [*sweep_vars]
    groups = summ.groupby(keys, sort=False) if keys else [((), summ)]
    for _, g in groups:
        if len(g) < 2:
            continue
        least = g.loc[g["median_impact"].idxmin()]
        loop = g.sort_values(["success_rate", "median_break_s"], ascending=[False, True], na_position="last").iloc[0]
        if least["runbook"] == loop["runbook"] or least["median_impact"] == loop["median_impact"]:
            continue
        out.append(f"{_prefix(least, sweep_vars)}impact and the loop rank the runbooks differently: "
                   f"{least['runbook']} has the least impact (median {least['median_impact']:.1f}, loop broken in "
                   f"{least['success_rate']:.0%}), {loop['runbook']} breaks the loop most often and soonest (in "
                   f"{loop['success_rate']:.0%}, median {_fmt_s(loop['median_break_s'])}; impact "
                   f"{loop['median_impact']:.1f}): the primary outcome decides, and the other is worth a look")
    return out


def decision_lines(df: pd.DataFrame, sweep_vars: list[str], summ: pd.DataFrame | None = None) -> list[str]:
    """The report's decision: the race, how it holds across drawn worlds, where impact and the
    loop disagree, what sharing saved."""
    summ = cs.summary(df, sweep_vars) if summ is None else summ
    return ((race_lines(df.attrs["race"]) if "race" in df.attrs else []) + robustness_lines(df, sweep_vars)
            + disagreement_lines(summ, sweep_vars) + shared_line(df))


def _decision(df: pd.DataFrame) -> dict:
    """How a results table's comparison decides (``attrs["decision"]``); a table that did not
    come from ``compare`` has no playbook to scale an amount by (``decide.WITHOUT_PLAYBOOK``)."""
    return df.attrs.get("decision") or decide.WITHOUT_PLAYBOOK


def _paired(df: pd.DataFrame, sweep_vars: list[str]) -> list[dict]:
    """Every pair seed by seed, on the comparison's primary outcome and indifference amount."""
    how = _decision(df)
    return decide.pairs(df, how["primary"], how["delta"], how["alpha"], sweep_vars)


def paired_lines(paired: list[dict], sweep_vars: list[str]) -> list[str]:
    """Every pair, seed by seed, in words (``decide.pair_sentence``)."""
    return [f"{_prefix(p, sweep_vars)}{p['sentence']}" for p in paired]


def paired_table(paired: list[dict]) -> pd.DataFrame:
    """The paired comparisons as a table (intervals as two columns each)."""
    rows = []
    for p in paired:
        row = {}
        for k, v in p.items():
            if isinstance(v, tuple):
                row[f"{k}_low"], row[f"{k}_high"] = v
            else:
                row[k] = v
        rows.append(row)
    return pd.DataFrame(rows)


class Comparison(NamedTuple):
    summary: pd.DataFrame  # per runbook (and sweep point): cs.summary
    pairs: pd.DataFrame  # per pair: cs.pairs
    report: Path | None  # compare.html, if written
    paired: list  # per pair, seed by seed: decide.pairs
    race: dict | None  # a sequential comparison's race (``df.attrs["race"]``)


def write_comparison(df: pd.DataFrame, out: Path, sweep_vars: list[str], info: dict,
                     report: bool = True) -> Comparison:
    """A comparison's directory: results.csv (a row per run), summary.csv, paired.csv
    (every pair seed by seed, on the primary outcome and indifference amount of
    ``df.attrs["decision"]``), pairs.csv (rank tests), race.json (the race, or the race read
    over a fixed comparison's seeds) and, with ``report``, compare.md and compare.html.
    ``info`` heads the report (playbook, seeds)."""
    import json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "results.csv", df.to_csv(index=False))
    summ, tests = cs.summary(df, sweep_vars), cs.pairs(df, sweep_vars)
    race = df.attrs.get("race")
    paired = _paired(df, sweep_vars)
    write_atomic(out / "summary.csv", summ.to_csv(index=False))
    write_atomic(out / "pairs.csv", tests.to_csv(index=False))
    write_atomic(out / "paired.csv", paired_table(paired).to_csv(index=False))
    if race:
        write_atomic(out / "race.json", json.dumps(race, indent=1, default=str) + "\n")
    written = None
    if report:
        info = {**info, "horizon": format_duration(df["horizon_s"].max()), "paired": paired_lines(paired, sweep_vars)}
        written = write_comparison_report(df, out, sweep_vars, info, (summ, tests))[1]
    return Comparison(summ, tests, written, paired, race)


def _intro(n: int, info: dict) -> str:
    """The comparison report's first sentence, in both formats: how many runs, of what."""
    if "partial" in info:  # interrupted, or stopped by a time limit: what the table covers
        what = f" ({info['partial']})"
    elif "race" in info:
        what = f" (a race of at most {info['seeds']} seeds per runbook: runbooks out of it played fewer)"
    else:
        what = f" ({info['seeds']} seeds per runbook and sweep point)" if "seeds" in info else ""
    each = f", each {info['horizon']} of simulated time" if "horizon" in info else ""
    return f"{_runs(n)}{what}{each}. Time to break the loop counts from the trigger; a run whose loop never formed " \
           f"counts as 0, a run still stuck at the horizon as not broken."


def write_comparison_report(df: pd.DataFrame, out: Path, sweep_vars: list[str] | None = None,
                            info: dict | None = None, stats: tuple[pd.DataFrame, pd.DataFrame] | None = None
                            ) -> list[Path]:
    """compare.md (charts in charts/) and compare.html (self-contained) in ``out``;
    ``stats`` is (summary, pairs) if already computed."""
    sweep_vars = list(sweep_vars or [])
    out = Path(out)
    (out / "charts").mkdir(parents=True, exist_ok=True)
    summ, tests = stats if stats is not None else (cs.summary(df, sweep_vars), cs.pairs(df, sweep_vars))
    info = dict(info or {})
    info.setdefault("decision", decision_lines(df, sweep_vars, summ))
    info.setdefault("paired", paired_lines(_paired(df, sweep_vars), sweep_vars))
    rows = [{**r, "median": f"{_fmt_s(r['median_break_s'])} ({_fmt_s(r['median_break_ci'][0])} to "
                              f"{_fmt_s(r['median_break_ci'][1])})",
             "p90": f"{_fmt_s(r['p90_break_s'])} ({_fmt_s(r['p90_break_ci'][0])} to {_fmt_s(r['p90_break_ci'][1])})",
             "impact": f"{r['median_impact']:.1f} ({r['median_impact_ci'][0]:.1f} to {r['median_impact_ci'][1]:.1f})",
             "point": point_label(r, sweep_vars), "drained": _drained_cell(r)}
            for r in summ.to_dict("records")]
    verdicts = [{**t, **pair_cells(t), "point": point_label(t, sweep_vars)} for t in tests.to_dict("records")]
    pngs = charts(df, sweep_vars)
    for name, png in pngs.items():
        write_atomic(out / "charts" / f"{name}.png", png)
    outcomes = df.groupby([*sweep_vars, "runbook"], sort=False)["outcome"].value_counts().unstack(fill_value=0)
    records = outcomes.reset_index().to_dict("records")
    keys = [*sweep_vars, "runbook"]
    heads = keys + list(outcomes.columns)
    outcome_lines = ["| " + " | ".join(map(str, heads)) + " |", "|" + "---|" * len(keys) + "---:|" * len(outcomes.columns)]
    outcome_lines += ["| " + " | ".join(str(r[h]) for h in heads) + " |" for r in records]
    env = environment()
    ctx = {"info": info or {}, "intro": _intro(len(df), info or {}), "rows": rows, "verdicts": verdicts, "test": cs.TEST,
           "outcomes": records, "outcome_names": list(outcomes.columns), "keys": keys, "outcome_lines": outcome_lines,
           "power_notes": power_notes(tests, sweep_vars), "backlog": any(r["drained"] for r in rows)}
    write_atomic(out / "compare.md", env.get_template("compare.md.j2").render(
        **ctx, charts={k: f"charts/{k}.png" for k in pngs}))
    write_atomic(out / "compare.html", env.get_template("compare.html.j2").render(
        **ctx, charts={k: data_uri(v) for k, v in pngs.items()}))
    return [out / "compare.md", out / "compare.html"]


PHASE_COLOURS = dict(zip((*PHASES, "mixed"), ("#4caf50", "#ffc107", "#2196f3", "#d32f2f", "#9e9e9e"), strict=True))


def phase_chart(cells: pd.DataFrame, x: str, y: str, title: str = "") -> bytes:
    """The phase map as a heat map: a cell per (x, y), coloured by its phase, with the
    count of stuck runs written in it."""
    from matplotlib.patches import Patch

    from .charts import plt, png

    xs, ys = list(dict.fromkeys(cells[x])), list(dict.fromkeys(cells[y]))
    fig, ax = plt.subplots(figsize=(max(4.5, 1.1 * len(xs) + 2.5), max(3, 0.7 * len(ys) + 1.6)), dpi=100)
    for _, c in cells.iterrows():
        i, j = xs.index(c[x]), ys.index(c[y])
        ax.add_patch(plt.Rectangle((i - 0.5, j - 0.5), 1, 1, color=PHASE_COLOURS[c["phase"]]))
        runs = int(sum(c[p] for p in PHASES))
        ax.text(i, j, f"{int(c[STUCK])}/{runs}", ha="center", va="center", fontsize=9)
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.set_ylim(-0.5, len(ys) - 0.5)
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or "phases (stuck runs / runs in each cell)", fontsize=10, loc="left")
    ax.legend(handles=[Patch(color=c, label=p) for p, c in PHASE_COLOURS.items()], fontsize=8,
              loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return png(fig)


def write_phase_map(cells: pd.DataFrame, runs: pd.DataFrame, out: Path, x: str, y: str, title: str) -> list[str]:
    """A phase map's directory: phasemap.csv (cells), runs.csv (every run), phasemap.png
    and phasemap.md (``title``, the grid, the chart). Returns the grid's Markdown lines."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "phasemap.csv", cells.to_csv(index=False))
    write_atomic(out / "runs.csv", runs.to_csv(index=False))
    write_atomic(out / "phasemap.png", phase_chart(cells, x, y))
    grid = cells.pivot(index=y, columns=x, values="phase")
    table = [f"| {y} \\ {x} | " + " | ".join(map(str, grid.columns)) + " |", "|---|" + "---|" * len(grid.columns)]
    table += [f"| {idx} | " + " | ".join(grid.loc[idx]) + " |" for idx in grid.index]
    lines = [f"# Phase map: {title}", "", *table, "", "![phase map](phasemap.png)", ""]
    write_atomic(out / "phasemap.md", "\n".join(lines))
    return table
