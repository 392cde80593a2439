"""The commands on one run: run, report, replay, fork."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from reports import rundir
from reports.analysis import refused_operations
from reports.build import FORMATS, write_report
from reports.files import OutsideDirectory
from reports.rundir import BadRunDirectory, NotARunDirectory, RunData, check_run, load_run
from reports.summary import summary_table
from reports.timefmt import format_clock, parse_clock
from orchestrator.errors import NotFound, RunDirectoryError, WriteError, os_error_text
from orchestrator.hosting.host import HostingOptions
from orchestrator.runs import attribution as counterfactual
from orchestrator.runs.runner import RunSpec, execute

from .openmetrics import metrics_endpoint, metrics_port_option
from .options import (beside, duration_option, hosting_options, out_dir, out_option, playbook_argument,
                      progress_option, say_if_not_compiled, seed_option, speed_value, stem, tick_option, variable_options,
                      variables)
from .root import main


@main.command()
@playbook_argument
@click.option("--runbook", "-r", default=None,
              help="Built-in runbook name (see `gameday playbooks show`) or a runbook YAML file "
                   "[default: the playbook's 'historical' runbook if it has one, else 'none'].")
# IntRange: numpy refuses negative seeds, and only after the run directory exists
@seed_option("Random seed; same seed, same run.")
@variable_options()
@out_option("runs/<playbook>-<runbook>-s<seed>-<time>", "Run directory to create")
@duration_option("the run")
@tick_option
@hosting_options(placement_default="kind")
@click.option("--shards", type=click.IntRange(min=1), default=None, metavar="N",
              help="Split every population into N shards (at most one per client), each its own agent; with "
                   "--hosting ray --placement kind the shards run on N actors [default: each population's "
                   "'shards' setting, 1].")
@click.option("--speed", default="max", show_default=True, callback=speed_value,
              help="Simulated seconds per wall second (e.g. 60), or max: as fast as the machine allows.")
@click.option("--snapshot-every", type=click.IntRange(min=0), default=None, metavar="TICKS",
              help="With --hosting ray: ticks between snapshots of each actor; an actor whose process dies is "
                   "replaced from its last snapshot and the run goes on unchanged (0: off) [default: 60].")
@click.option("--attribution/--no-attribution", default=True, show_default=True,
              help="Once the run is complete, find which action broke the loop by counterfactual: play the run "
                   f"again from each of the (at most {counterfactual.MAX_ACTIONS}) latest distinct actions before the loop broke, "
                   f"without it, until its loop breaks or {counterfactual.LOOKAHEAD_S / 3600:g} h after it broke in the "
                   "run, and write attribution.json.")
@click.option("--report/--no-report", default=True, show_default=True,
              help="Write the after-action report (report/report.md with its charts, report/report.html) into "
                   "the run directory at the end.")
@progress_option
@click.option("--json", "as_json", is_flag=True, help="Print the score as JSON instead of the summary table.")
@metrics_port_option("the world's metrics")
def run(playbook, runbook, seed, sets, vars_file, out, duration, tick, hosting, placement, address, shards, speed,
        snapshot_every, attribution, report, progress, as_json, metrics_port):
    """Run PLAYBOOK (default: the built-in us-east-1-2021) with a runbook.

    Writes a run directory (rendered playbook and runbook, seed and versions,
    events.jsonl, metrics.csv, columns.json, score.json) and prints the score beside par.
    """
    spec = RunSpec(playbook=playbook, runbook=runbook, seed=seed, sets=variables(sets, vars_file),
                   duration=duration, tick=tick, shards=shards)
    out = out_dir(out, f"runs/{stem(playbook)}-{Path(runbook or 'default').stem}-s{seed}")
    say_if_not_compiled()
    endpoint = metrics_endpoint(metrics_port)
    try:
        data = execute(spec, Path(out), progress=progress,
                       hosting=HostingOptions(hosting, placement, address, snapshot_every), speed=speed,
                       attribution=attribution, on_start=endpoint and endpoint.watch)
    except KeyboardInterrupt:
        _say_where_it_stopped(Path(out))
        raise
    for text in data.meta.get("never_reached", []):
        click.echo(f"warning: {text}", err=True)
    for finding in _refused(data):
        click.echo(f"warning: {finding.title}: {finding.evidence}", err=True)
    if as_json:
        click.echo(json.dumps(data.score, indent=2, sort_keys=True))
        click.echo(f"run directory: {data.dir}", err=True)  # (stdout is the score alone, for a pipe)
    else:
        click.echo(summary_table(data))
        if data.attribution is not None:
            click.echo(f"\nattribution: {data.attribution['text']}")
        click.echo(f"\nrun directory: {data.dir}")
    if report:
        written = _report_of_a_run(data)
        if not as_json:
            click.echo(f"report: {next(p for p in written if p.suffix == '.html')}")


def _report_of_a_run(data: "RunData | Path") -> list[Path]:
    """The report of a run just played (or forked): a write that fails says the run is whole."""
    try:
        return _write_report(data)
    except WriteError as e:
        where = data.dir if isinstance(data, RunData) else data
        raise WriteError(f"the run is complete (its directory {where} holds every tick and the score), but {e}; "
                         f"`gameday report {where}` writes the report again") from None


def _write_report(run: "RunData | Path | str", fmt: str = "both", out: Path | None = None) -> list[Path]:
    """``write_report``, its refusals and failed writes said as the CLI says errors."""
    try:
        return write_report(run, fmt, out)
    except BadRunDirectory as e:
        raise RunDirectoryError(str(e)) from None
    except NotARunDirectory as e:
        raise NotFound(str(e)) from None
    except OutsideDirectory as e:
        raise RunDirectoryError(f"the report is not written: {e}") from None
    except OSError as e:
        raise WriteError(f"writing the report failed: {os_error_text(e)} (every report file written is whole: "
                         "each is replaced whole or not at all)") from None


def _say_where_it_stopped(out: Path) -> None:
    """After a Ctrl-C: the run directory, if the run had one, and what it holds."""
    try:
        meta = load_run(out).meta
    except (NotARunDirectory, OSError, ValueError):
        return  # (stopped before it existed: there is none)
    click.echo(f"run directory: {out} (status {meta.get('status')}, {meta.get('ticks_done', '?')} of "
               f"{meta.get('ticks_planned', '?')} ticks played; gameday report {out} writes its report)", err=True)


@main.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="both", show_default=True,
              help="md: report.md with PNG charts beside it; html: one self-contained report.html; both.")
@out_option("RUN_DIR/report", "Directory to write into")
def report_command(run_dir, fmt, out):
    """Write the after-action report of RUN_DIR (also of a run that stopped early).

    Summary and verdict, the score beside par, impact per service, the timeline beside
    the historical one, charts with the actions marked, findings with their evidence,
    action items for the team to fill in, and an appendix (variables, seed, versions).
    """
    try:
        run = load_run(run_dir)
        warnings = check_run(run)
    except BadRunDirectory as e:
        raise RunDirectoryError(str(e)) from None
    except NotARunDirectory as e:
        raise NotFound(str(e)) from None
    for text in warnings:
        click.echo(f"warning: {text}", err=True)
    try:
        written = _write_report(run, fmt, Path(out) if out else None)
    except BadRunDirectory as e:
        raise RunDirectoryError(str(e)) from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as e:
        # (a file of the right name holding what gameday never writes there: a directory someone made or edited)
        raise RunDirectoryError(f"cannot report {run_dir}: {type(e).__name__}: {str(e)[:300]}. Its files are not as "
                                "this version of gameday writes them (edited since, or made elsewhere); a run directory "
                                "gameday wrote and nobody changed always reports, so if this one is such, it is a bug "
                                "in gameday: please report it with the directory") from None
    for path in written:
        if path.suffix in (".md", ".html"):
            click.echo(str(path))


def _refused(data: RunData) -> list:
    """The operations the world refused during the run (a trigger's surge past what the model
    holds, say), as its report's findings say them: the run completes without them."""
    events = data.events
    if events.empty or "apply_rejected" not in set(events["event"]):
        return []
    start, dt = parse_clock(data.meta["start_clock"]), float(data.meta["tick_s"])
    return refused_operations(events[events["event"] == "apply_rejected"].to_dict("records"),
                              lambda tick: format_clock(start + float(tick) * dt))


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@out_option("RUN_DIR-replay-<time>", "Directory for the replayed run")
def replay(run_dir, out):
    """Play RUN_DIR again (a live team's or a scripted run) and check that the replay
    is identical: the same metrics and events, tick by tick."""
    from orchestrator.runs.runner import hosting_note, recorded_ticks, replay as replay_run, same_as_recording

    data = replay_run(Path(run_dir), out_dir(out, beside(run_dir, "replay")))
    ticks, stopped = recorded_ticks(Path(run_dir))
    different = same_as_recording(Path(run_dir), data.dir, ticks if stopped else None)
    click.echo(f"replayed {data.meta['ticks_done']} ticks into {data.dir}")
    if stopped:  # (what the recording holds of a tick it stopped in is no result to compare)
        click.echo(f"warning: the recording is not whole ({stopped}): the replay compares the {ticks} ticks it holds "
                   "whole, and nothing of the rest", err=True)
    hosting = hosting_note(rundir.run_file(Path(run_dir), rundir.EVENTS))
    also = f"; the original run also recorded {hosting} (hosting, not results)" if hosting else ""
    if not different:
        click.echo(f"identical to the recording: metrics.csv and events.jsonl{also}")
        return
    click.echo("DIFFERENT from the recording: " + "; ".join(different) + also, err=True)
    sys.exit(1)


@main.command("fork")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--at", "at", required=True, help="The decision point: a clock time of the run (e.g. 09:30).")
@click.option("--runbook", "-r", required=True, help="The runbook that takes over at that time (a built-in name or a file).")
@out_option("RUN_DIR-fork-<time>", "Directory for the fork")
@click.option("--report/--no-report", default=True, show_default=True,
              help="Write the fork's after-action report (report/report.md with its charts, report/report.html) "
                   "into its directory at the end, as gameday run does.")
def fork_command(run_dir, at, runbook, out, report):
    """Continue RUN_DIR (scripted or live) from its exact state at --at with another
    runbook, to the scenario's end, and say what changed ("loop broken 95 minutes
    sooner"). Up to --at the fork is the original, tick for tick."""
    from orchestrator.runs.fork import fork

    out = out_dir(out, beside(run_dir, "fork"))
    result = fork(Path(run_dir), at, runbook, out)
    click.echo(f"forked {run_dir} at {at}: {result['runbook_before']} -> {result['runbook']}")
    for d in result["differences"]:
        click.echo(f"  {d['text']}")
    click.echo(f"fork: {out}")
    if report:
        written = _report_of_a_run(Path(out))
        click.echo(f"report: {next(p for p in written if p.suffix == '.html')}")
