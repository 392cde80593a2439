"""The commands over many runs: compare, phasemap."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from reports import rundir
from reports.files import write_atomic
from orchestrator.errors import WriteError, os_error_text
from orchestrator.runs.directory import claim_new, interrupt_deferred, release_claim

from reports.decide import DEFAULT_ALPHA, DEFAULT_DELTA_SHARE, DEFAULT_FIRST, DEFAULT_PRIMARY, PRIMARY

from .options import (address_option, cache_option, duration_option, duration_value, out_dir, out_option,
                      playbook_argument, progress_option, say_if_not_compiled, serial_option, stem, tick_option,
                      time_limit_option, variable_options, variables, many_runs_options, axis, parse_sweeps)
from .root import main


def amount_value(ctx, param, value):
    """--delta: a number, or a duration (5m) as it was typed, checked (whether a duration
    fits depends on the primary outcome, which the comparison resolves)."""
    if value is None:
        return None
    try:
        amount = float(value)
    except ValueError:
        duration_value(ctx, param, value)
        return value
    if not amount > 0 or amount == float("inf"):
        raise click.BadParameter(f"{value!r} is not an amount > 0 (impact: a number; times: 5m or seconds)")
    return amount


@main.command("compare")
@playbook_argument
@click.option("--runbook", "-r", "runbooks", multiple=True, required=True,
              help="A runbook to compare (repeatable): a built-in name or a YAML file.")
@click.option("--seeds", type=click.IntRange(min=1), default=20, show_default=True,
              help="The most seeds (1..N) a runbook plays; with --fixed, every runbook plays them all.")
@click.option("--fixed", is_flag=True, help="Play every seed of every runbook (no sequential decision).")
@click.option("--primary", type=click.Choice(tuple(PRIMARY)), default=None,
              help=f"The outcome that ranks the runbooks [default: the playbook's scoring.primary, else "
                   f"{DEFAULT_PRIMARY}].")
@click.option("--delta", callback=amount_value, metavar="AMOUNT", default=None,
              help="The indifference amount: the smallest difference in the primary outcome worth telling apart "
                   "(impact: a number; times: 5m or seconds) [default: the playbook's scoring.indifference, else "
                   f"{DEFAULT_DELTA_SHARE:.0%} of the most a run can score].")
@click.option("--alpha", type=click.FloatRange(0, 0.5, min_open=True), default=DEFAULT_ALPHA, show_default=True,
              help="The error rate: the best is named with probability at least 1 - alpha.")
@click.option("--first-seeds", "first_seeds", type=click.IntRange(min=2), default=DEFAULT_FIRST, show_default=True,
              help="Seeds every runbook plays before any is put out of the race.")
@click.option("--sweep", "sweep", multiple=True, metavar="VAR=V1,V2,...",
              help="A playbook variable and its values (repeatable; every combination is a sweep point).")
@click.option("--vary", multiple=True, metavar="VAR|all",
              help="Draw this playbook variable (repeatable; all: every one) for each seed from the range: [low, "
                   "high] its header declares, the same for every runbook of the seed, and say how often the best "
                   "is best across those worlds and which variable that depends on most.")
@many_runs_options
@click.option("--keep-runs", is_flag=True, help="Keep every run's directory in OUT/runs (this machine's disk); not "
                                                 "with --cache.")
@cache_option
@time_limit_option
@out_option("runs/compare-<playbook>-<time>", "Directory for the results")
@click.option("--report/--no-report", default=True, show_default=True, help="Write compare.md and compare.html.")
@progress_option
def compare_command(playbook, runbooks, seeds, fixed, primary, delta, alpha, first_seeds, sweep, vary, sets, vars_file,
                    duration, tick, address, workers, serial, keep_runs, cache, time_limit, out, report, progress):
    """Name the best runbook, and how sure that is (over seeds, and sweeps of variables).

    Every (runbook, seed, sweep point) is a whole world run in a Ray task; runs of one
    seed share their random streams, so runbooks are compared seed by seed. By default
    the comparison is a race (Kim and Nelson's sequential selection): every runbook plays
    --first-seeds seeds, then seed by seed the runbooks shown worse than another on the
    primary outcome leave the race, until one is left (the best, at 1 - alpha whenever it
    beats the others by at least --delta) or --seeds are played. Writes race.json (the
    decision), paired.csv (each pair's per-seed differences with CIs on impact and the
    times to break the loop and drain the backlog, censored at the horizon, and what
    undecided pairs could show), results.csv (one row per run), summary.csv (per
    runbook), pairs.csv (rank tests) and the report, and prints the decision. Ctrl-C
    keeps the rounds played whole and exits 130; --time-limit does the same and exits 0
    (with --fixed: seeds 1 to k, up to the first seed not every run of which was done).
    Another comparison (or run) writing into OUT at the same time is refused.
    """
    sweeps = parse_sweeps(list(sweep))
    values = variables(sets, vars_file)
    out = out_dir(out, f"runs/compare-{stem(playbook)}")
    with claimed(out, "comparison"):
        _compare(out, playbook, runbooks, seeds, fixed, primary, delta, alpha, first_seeds, sweeps, vary, values, duration,
                 tick, address, workers, serial, keep_runs, cache, time_limit, report, progress)


def _compare(out, playbook, runbooks, seeds, fixed, primary, delta, alpha, first_seeds, sweeps, vary, values, duration,
             tick, address, workers, serial, keep_runs, cache, time_limit, report, progress):
    from reports.compare_report import (disagreement_lines, paired_lines, race_lines, robustness_lines, shared_line,
                                        summary_lines, write_comparison)
    from orchestrator.batch.comparison import ComparisonInterrupted, Decision, compare

    say_if_not_compiled()
    interrupted = None
    try:
        df = compare(playbook, list(runbooks), seeds, sweeps, values, duration, tick, address, parallel=not serial,
                     progress=progress, keep_runs=out / "runs" if keep_runs else None, max_workers=workers,
                     cache=Path(cache) if cache else None, time_limit=time_limit,
                     decision=Decision(primary, delta, alpha, first_seeds, sequential=not fixed), vary=list(vary))
    except ComparisonInterrupted as e:  # what was played is not lost: the tables and the report cover it
        df, interrupted = e.table, e
    info = {"playbook": df.attrs["playbook"], "seeds": seeds}
    if "race" in df.attrs and not df.attrs["race"].get("fixed"):
        info["race"] = True
    if "partial" in df.attrs:  # interrupted, or stopped by the time limit
        info["partial"] = df.attrs["partial"]
    with interrupt_deferred():  # (Ctrl-C again while the tables are written: once they are)
        written = write_comparison(df, out, list(sweeps), info, report=report)
    if cache:
        _say_from_cache(df, cache)
    for line in summary_lines(written.summary, written.pairs, list(sweeps), ranks=False):
        click.echo(line)
    for line in ((race_lines(written.race) if written.race else []) + robustness_lines(df, list(sweeps))
                 + disagreement_lines(written.summary, list(sweeps))
                 + paired_lines(written.paired, list(sweeps)) + shared_line(df)):
        click.echo(line)
    if written.report is not None:
        click.echo(f"report: {written.report}")
    click.echo(f"results: {out / 'results.csv'}")
    if "partial" in info:
        click.echo(f"{info['partial']}: the tables and the report cover those", err=interrupted is not None)
    if interrupted is not None:
        sys.exit(130)


def _say_from_cache(runs, cache: str) -> None:
    """How many runs came from the cache, and once, how many of its rows were not as gameday
    writes them (played again: a row is a convenience, never a traceback or a wrong table)."""
    click.echo(f"{runs.attrs['reused']} of {len(runs)} runs taken from the cache {cache}, "
               f"{len(runs) - runs.attrs['reused']} played")
    aside = runs.attrs.get("cache_set_aside") or []
    if aside:
        click.echo(f"warning: {len(aside)} row{'s' * (len(aside) != 1)} of the cache {cache} not as gameday writes "
                   f"{'them' if len(aside) != 1 else 'it'} ({aside[0]}{'; ...' if len(aside) > 1 else ''}): "
                   "played again", err=True)


@main.command("phasemap")
@playbook_argument
@click.option("--x", "x", required=True, metavar="VAR=V1,V2,...", help="The horizontal axis: a playbook variable and its values.")
@click.option("--y", "y", required=True, metavar="VAR=V1,V2,...", help="The vertical axis.")
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True,
              help="The most runs per cell (seeds 1..N); with --full, every cell plays them all.")
@click.option("--full", is_flag=True, help="Play every seed in every cell, not only where the phase changes.")
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
def phasemap_command(playbook, x, y, seeds, full, runbook, sets, vars_file, duration, tick, address, serial, cache,
                     time_limit, out, progress):
    """Map metastability over two variables: each cell healthy (the loop never formed),
    recovered by itself, broken after the runbook acted (with --runbook), or stuck, by the
    majority of its runs. Writes phasemap.csv
    (cells), runs.csv (every run), phasemap.png (the heat map) and phasemap.md. Every
    cell plays seed 1; then, round by round, only the cells at a boundary between phases
    (or whose runs disagree) play their next seed, up to --seeds, and the command says
    how many runs that saved against the full grid (--full plays it). Ctrl-C writes the
    map of the rounds played whole and exits 130; --time-limit does the same and exits 0
    (with --full: of seeds 1 to k, those played in every cell)."""
    xa, ya = axis(x, "--x"), axis(y, "--y")
    out = out_dir(out, f"runs/phasemap-{stem(playbook)}")
    with claimed(out, "phase map"):
        _phase_map(out, playbook, xa, ya, seeds, full, runbook, sets, vars_file, duration, tick, address, serial, cache,
                   time_limit, progress)


def _phase_map(out, playbook, xa, ya, seeds, full, runbook, sets, vars_file, duration, tick, address, serial, cache,
               time_limit, progress):
    from reports.compare_report import write_phase_map
    from orchestrator.batch.comparison import ComparisonInterrupted
    from orchestrator.batch.phasemap import classify, phase_map

    say_if_not_compiled()
    interrupted = None
    try:
        cells, runs = phase_map(playbook, xa, ya, seeds, runbook, variables(sets, vars_file), duration,
                                tick, address=address, parallel=not serial, progress=progress,
                                cache=Path(cache) if cache else None, time_limit=time_limit, full=full)
    except ComparisonInterrupted as e:  # seeds 1 to k, each played in every cell
        interrupted, runs = e, e.table
        cells = classify(runs, xa[0], ya[0])
    played = runs["seed"].nunique()
    per_cell = runs.groupby([xa[0], ya[0]]).size()
    title = f"{stem(playbook)}, runbook {runbook}, " + (
        f"{played} seed{'s' if played != 1 else ''} per cell" if per_cell.nunique() == 1 else
        f"{per_cell.min()} to {per_cell.max()} seeds per cell (more where the phase changes)")
    partial = runs.attrs.get("partial")
    with interrupt_deferred():
        table = write_phase_map(cells, runs, out, xa[0], ya[0], f"{title} ({partial})" if partial else title)
    click.echo("\n".join(table))
    if cache:
        _say_from_cache(runs, cache)
    if not full and "full_runs" in runs.attrs:
        whole = runs.attrs["full_runs"]
        click.echo(f"runs: {len(runs)} of the {whole} a full grid plays ({whole - len(runs)} saved: cells whose "
                   "neighbours all agree played fewer seeds)")
    click.echo(f"phase map: {out / 'phasemap.png'}")
    if partial:
        click.echo(f"{partial}: the map covers those", err=interrupted is not None)
    if interrupted is not None:
        sys.exit(130)


@contextlib.contextmanager
def claimed(out: Path, what: str):
    """``out`` claimed for this comparison or phase map while the block runs
    (``directory.claim_new``: refused if another process writes it), and let go after (removed
    if nothing was written into it). A write that fails inside (a full disk, an I/O error, a
    kept run's directory) stops it with a ``WriteError`` that says what failed, error.txt in ``out``."""
    try:
        claim = claim_new(out)
    except OSError as e:
        raise WriteError(f"cannot claim the directory {out} for the {what}: {os_error_text(e)}; nothing was played "
                         "nor written") from None
    try:
        yield
    except WriteError as e:  # (a kept run's directory, marked failed already)
        raise _stopped(out, claim, what, f"a run of it could not write its directory: {e}") from None
    except OSError as e:
        raise _stopped(out, claim, what, f"{os_error_text(e)}. This is neither a bug in gameday nor a mistake in your "
                                         "input: the system refused a write (a full disk, a lost mount, a permission "
                                         "changed, an I/O error)") from None
    finally:
        release_claim(claim)


def _stopped(out: Path, claim, what: str, why: str) -> WriteError:
    """The error that says a comparison stopped (``why``) and what it left, error.txt in ``out``."""
    claim.give_back_reserve()  # (room for error.txt on a disk that filled up)
    why = why.rstrip(".")
    error = out / rundir.ERROR
    try:
        write_atomic(error, f"The {what} stopped: {why}.\n")
        said = f"; {error} says what failed"
    except OSError as e:
        said = f"; {rundir.ERROR} could not be written either ({e.strerror or e})"
    release_claim(claim)  # (the directory goes if nothing at all was written into it)
    kept = out.is_dir() and any(p.name != rundir.ERROR for p in out.iterdir())
    left = f"{out} holds what was written before (each file whole)" if kept else "nothing else was written"
    return WriteError(f"the {what} stopped: {why}. {left}{said}.")
