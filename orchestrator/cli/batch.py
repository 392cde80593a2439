"""The commands over many runs: compare, phasemap."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from orchestrator.engine.journal import check_out_dir

from .options import (address_option, cache_option, duration_option, out_dir, out_option, playbook_argument,
                      progress_option, serial_option, stem, tick_option, time_limit_option, variable_options, variables)
from .root import interrupt_deferred, main


@main.command("compare")
@playbook_argument
@click.option("--runbook", "-r", "runbooks", multiple=True, required=True,
              help="A runbook to compare (repeatable): a built-in name or a YAML file.")
@click.option("--seeds", type=click.IntRange(min=1), default=10, show_default=True, help="Seeds 1..N for every runbook.")
@click.option("--sweep", "sweeps", multiple=True, metavar="VAR=V1,V2,...",
              help="A playbook variable and its values (repeatable; every combination is a sweep point).")
@variable_options()
@duration_option("every run")
@tick_option
@address_option
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="At most this many runs at once [default: the Ray cluster's CPUs].")
@serial_option
@click.option("--keep-runs", is_flag=True, help="Keep every run's directory in OUT/runs (this machine's disk); not "
                                                 "with --cache.")
@cache_option
@time_limit_option
@out_option("runs/compare-<playbook>-<time>", "Directory for the results")
@click.option("--report/--no-report", default=True, show_default=True, help="Write compare.md and compare.html.")
@progress_option
def compare_command(playbook, runbooks, seeds, sweeps, sets, vars_file, duration, tick, address, workers, serial,
                    keep_runs, cache, time_limit, out, report, progress):
    """Compare runbooks over seeds (and sweeps of playbook variables).

    Every (runbook, seed, sweep point) is a whole world run in a Ray task. Writes
    results.csv (one row per run), summary.csv (per runbook: success rate, median and
    p90 time to break the loop with bootstrap 95% CIs, impact), pairs.csv (each pair's
    effect sizes with 95% CIs, Fisher's exact test on success rates and Mann-Whitney U
    on times to break, Holm-corrected, and whether the seeds could show a difference at
    all) and the comparison report, and prints the summary and the verdicts. Runs start
    seed by seed; Ctrl-C writes all of them for seeds 1 to k, up to the first seed not
    every run of which was done, and exits 130; --time-limit does the same and exits 0.
    """
    from reports.compare_report import summary_lines, write_comparison
    from orchestrator.batch.comparison import ComparisonInterrupted, compare, parse_sweeps

    sweep = parse_sweeps(list(sweeps))
    values = variables(playbook, sets, vars_file)
    out = out_dir(out, f"runs/compare-{stem(playbook)}")
    check_out_dir(out)
    interrupted = None
    try:
        df = compare(playbook, list(runbooks), seeds, sweep, values, duration, tick, address, parallel=not serial,
                     progress=progress, keep_runs=out / "runs" if keep_runs else None, max_workers=workers,
                     cache=Path(cache) if cache else None, time_limit=time_limit)
    except ComparisonInterrupted as e:  # what was played is not lost: the tables and the report cover it
        df, interrupted = e.table, e
    from orchestrator.playbook.loader import load_playbook

    name = load_playbook(playbook, values).name  # (checked by compare already)
    info = {"playbook": name, "seeds": seeds}
    if "partial" in df.attrs:  # interrupted, or stopped by the time limit
        info["partial"] = df.attrs["partial"]
    with interrupt_deferred():  # (Ctrl-C again while the tables are written: once they are)
        written = write_comparison(df, out, list(sweep), info, report=report)
    if cache:
        click.echo(_from_cache(df, cache))
    for line in summary_lines(written.summary, written.pairs, list(sweep)):
        click.echo(line)
    if written.report is not None:
        click.echo(f"report: {written.report}")
    click.echo(f"results: {out / 'results.csv'}")
    if "partial" in info:
        click.echo(f"{info['partial']}: the tables and the report cover those", err=interrupted is not None)
    if interrupted is not None:
        sys.exit(130)


def _from_cache(runs, cache: str) -> str:
    return f"{runs.attrs['reused']} of {len(runs)} runs taken from the cache {cache}, {len(runs) - runs.attrs['reused']} played"


@main.command("phasemap")
@playbook_argument
@click.option("--x", "x", required=True, metavar="VAR=V1,V2,...", help="The horizontal axis: a playbook variable and its values.")
@click.option("--y", "y", required=True, metavar="VAR=V1,V2,...", help="The vertical axis.")
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True, help="Runs per cell (seeds 1..N).")
@click.option("--runbook", "-r", default="none", show_default=True, help="Who acts (none: the system alone).")
@variable_options()
@duration_option("every run")
@tick_option
@address_option
@serial_option
@cache_option
@time_limit_option
@out_option("runs/phasemap-<playbook>-<time>", "Directory")
@progress_option
def phasemap_command(playbook, x, y, seeds, runbook, sets, vars_file, duration, tick, address, serial, cache,
                     time_limit, out, progress):
    """Map metastability over two variables: each cell healthy (the loop never formed),
    recovered by itself, or stuck, by the majority of its runs. Writes phasemap.csv
    (cells), runs.csv (every run), phasemap.png (the heat map) and phasemap.md. Runs
    start seed by seed over the whole grid; Ctrl-C writes the map of seeds 1 to k, those
    played in every cell, and exits 130; --time-limit does the same and exits 0."""
    from reports.compare_report import write_phase_map
    from orchestrator.batch.comparison import ComparisonInterrupted
    from orchestrator.batch.phasemap import axis, classify, phase_map

    xa, ya = axis(x, "--x"), axis(y, "--y")
    out = out_dir(out, f"runs/phasemap-{stem(playbook)}")
    check_out_dir(out)
    interrupted = None
    try:
        cells, runs = phase_map(playbook, xa, ya, seeds, runbook, variables(playbook, sets, vars_file), duration,
                                tick, address=address, parallel=not serial, progress=progress,
                                cache=Path(cache) if cache else None, time_limit=time_limit)
    except ComparisonInterrupted as e:  # seeds 1 to k, each played in every cell
        interrupted, runs = e, e.table
        cells = classify(runs, xa[0], ya[0])
    played = runs["seed"].nunique()
    title = f"{stem(playbook)}, runbook {runbook}, {played} seed{'s' if played != 1 else ''} per cell"
    partial = runs.attrs.get("partial")
    with interrupt_deferred():
        table = write_phase_map(cells, runs, out, xa[0], ya[0], f"{title} ({partial})" if partial else title)
    click.echo("\n".join(table))
    if cache:
        click.echo(_from_cache(runs, cache))
    click.echo(f"phase map: {out / 'phasemap.png'}")
    if partial:
        click.echo(f"{partial}: the map covers those", err=interrupted is not None)
    if interrupted is not None:
        sys.exit(130)
