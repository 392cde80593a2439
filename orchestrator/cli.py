"""The ``gameday`` command line."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import click

from reports.build import FORMATS, write_report
from reports.rundir import NotARunDirectory
from reports.summary import summary_table
from .errors import GamedayError, NotFound
from .playbook import builtin_playbooks, describe, find_playbook, read_template, render, resolve_variables
from .runner import RunSpec, execute, parse_sets, read_vars_file
from .timefmt import parse_duration

CONTEXT = {"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "GAMEDAY"}


class GamedayGroup(click.Group):
    """Turns the project's own errors into a message and exit code 2, never a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except GamedayError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


def _duration(ctx, param, value):
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):  # "inf" and "nan" parse as numbers but no run can last that long
        raise click.BadParameter(f"{value!r} is not a duration (e.g. 30s, 15m, 2h30m)")
    return seconds


def _speed(value: str):
    if value == "max":
        return None
    try:
        speed = float(value)
    except ValueError:
        speed = math.nan
    if not (math.isfinite(speed) and speed > 0):
        raise click.BadParameter(f"{value!r}: expected a number > 0 (simulated seconds per wall second) or max")
    return speed


def _variables(playbook: str, sets: tuple, vars_file: str | None) -> dict:
    values = read_vars_file(vars_file) if vars_file else {}
    where = {name: f"{name} (--vars {vars_file})" for name in values}
    for name, value in parse_sets(list(sets)).items():
        values[name], where[name] = value, f"--set {name}"
    # checked here, while it is known which values came from the vars file, so an error names the right place
    tpl = read_template(find_playbook(playbook))
    resolve_variables(tpl, values, tpl.source, where)
    return values


@click.group(cls=GamedayGroup, context_settings=CONTEXT)
@click.version_option(package_name="gameday")
def main():
    """Chaos game days for feedback-loop outages: simulate, respond, score, report."""


@main.command()
@click.argument("playbook", default="us-east-1-2021")
@click.option("--runbook", "-r", default=None,
              help="Built-in runbook name (see `gameday playbooks show`) or a runbook YAML file "
                   "[default: the playbook's 'historical' runbook if it has one, else 'none'].")
# IntRange: numpy refuses negative seeds, and only after the run directory exists
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True, help="Random seed; same seed, same run.")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Override a playbook variable (repeatable).")
@click.option("--vars", "vars_file", type=click.Path(dir_okay=False), help="YAML file of variable overrides.")
@click.option("--out", type=click.Path(file_okay=False), help="Run directory to create [default: runs/<playbook>-<runbook>-s<seed>-<time>].")
@click.option("--duration", callback=_duration, help="Simulated time to run (e.g. 6h); default from the playbook.")
@click.option("--tick", callback=_duration, help="Simulated seconds per tick; default from the playbook.")
@click.option("--hosting", type=click.Choice(["ray", "inprocess"]), default="ray", show_default=True,
              help="ray: agents on Ray actors exchanging ZeroMQ messages (a local Ray is started unless "
                   "--address); inprocess: every agent in this process (fastest for batch runs). Same results.")
@click.option("--placement", type=click.Choice(["kind", "agent", "single"]), default="kind", show_default=True,
              help="With --hosting ray: one actor per kind of agent, one per agent, or one for the world.")
@click.option("--shards", type=click.IntRange(min=1), default=None, metavar="N",
              help="Split every population into N shards (at most one per client), each its own agent; with "
                   "--hosting ray --placement kind the shards run on N actors [default: each population's "
                   "'shards' setting, 1].")
@click.option("--address", envvar="RAY_ADDRESS", help="Ray cluster to use (default: RAY_ADDRESS, else a local Ray).")
@click.option("--speed", default="max", show_default=True, callback=lambda c, p, v: _speed(v),
              help="Simulated seconds per wall second (e.g. 60), or max: as fast as the machine allows.")
@click.option("--snapshot-every", type=click.IntRange(min=0), default=None, metavar="TICKS",
              help="With --hosting ray: ticks between snapshots of each actor; an actor whose process dies is "
                   "replaced from its last snapshot and the run goes on unchanged (0: off) [default: 60].")
@click.option("--report/--no-report", default=True, show_default=True,
              help="Write the after-action report (report/report.md with its charts, report/report.html) into "
                   "the run directory at the end.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar on a terminal.")
@click.option("--json", "as_json", is_flag=True, help="Print the score as JSON instead of the summary table.")
def run(playbook, runbook, seed, sets, vars_file, out, duration, tick, hosting, placement, shards, address, speed,
        snapshot_every, report, progress, as_json):
    """Run PLAYBOOK (default: the built-in us-east-1-2021) with a runbook.

    Writes a run directory (rendered playbook and runbook, seed and versions,
    events.jsonl, metrics.csv, columns.json, score.json) and prints the score beside par.
    """
    spec = RunSpec(playbook=playbook, runbook=runbook, seed=seed, sets=_variables(playbook, sets, vars_file),
                   duration=duration, tick=tick, shards=shards)
    if out is None:
        name = Path(playbook).name.split(".")[0]
        out = Path("runs") / f"{name}-{Path(runbook or 'default').stem}-s{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    data = execute(spec, Path(out), progress=progress, hosting=hosting, placement=placement, address=address,
                   speed=speed, snapshot_every=snapshot_every)
    if as_json:
        click.echo(json.dumps(data.score, indent=2, sort_keys=True))
    else:
        click.echo(summary_table(data))
        click.echo(f"\nrun directory: {data.dir}")
    if report:
        written = write_report(data.dir)
        if not as_json:
            click.echo(f"report: {next(p for p in written if p.suffix == '.html')}")


@main.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="both", show_default=True,
              help="md: report.md with PNG charts beside it; html: one self-contained report.html; both.")
@click.option("--out", type=click.Path(file_okay=False), help="Directory to write into [default: RUN_DIR/report].")
def report_command(run_dir, fmt, out):
    """Write the after-action report of RUN_DIR (also of a run that stopped early).

    Summary and verdict, the score beside par, impact per service, the timeline beside
    the historical one, charts with the actions marked, findings with their evidence,
    action items for the team to fill in, and an appendix (variables, seed, versions).
    """
    try:
        written = write_report(run_dir, fmt, Path(out) if out else None)
    except NotARunDirectory as e:
        raise NotFound(str(e)) from None
    for path in written:
        if path.suffix in (".md", ".html"):
            click.echo(str(path))


@main.group()
def playbooks():
    """List, show, render and validate playbooks."""


@playbooks.command("list")
def playbooks_list():
    """List the built-in playbooks."""
    for name in builtin_playbooks():
        info = describe(read_template(find_playbook(name)))
        click.echo(f"{name:20s} {info['title']}")


@playbooks.command("show")
@click.argument("name")
def playbooks_show(name):
    """Description, variables with defaults, mitigations and runbooks of NAME."""
    info = describe(read_template(find_playbook(name)))
    click.echo(f"{info['name']}: {info['title']}\n")
    click.echo(info["description"].strip() + "\n")
    click.echo("variables (override with --set NAME=VALUE or --vars FILE):")
    for var, decl in info["variables"].items():
        click.echo(f"  {var} = {decl.get('default')!r}\n      {decl.get('description', '')}")
    click.echo("\nmitigations:")
    for m in info["mitigations"]:
        lead = f"lead {m['lead_time'] / 60:g} min" if m["lead_time"] else "no lead time"
        dep = f"{m['steps']} deployment steps" if m["deploy"] else "no deployment"
        params = ", ".join(f"{k}={v!r}" for k, v in m["params"].items())
        click.echo(f"  {m['name']:28s} risk {m['risk']:6s} {lead}, {dep}" + (f"; params {params}" if params else ""))
        if m["description"]:
            click.echo(f"      {m['description']}")
    if info["par"]:
        click.echo("\npar (the historical response):")
        for k, v in info["par"].items():
            click.echo(f"  {k:32s} {v}")
    click.echo("\nrunbooks: " + (", ".join(info["runbooks"]) or "none"))


@playbooks.command("render")
@click.argument("name")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE")
@click.option("--vars", "vars_file", type=click.Path(dir_okay=False))
def playbooks_render(name, sets, vars_file):
    """Print NAME (a built-in playbook or a file) rendered with its variables."""
    tpl = read_template(find_playbook(name))
    click.echo(render(tpl, resolve_variables(tpl, _variables(name, sets, vars_file), tpl.source)), nl=False)


@playbooks.command("validate")
@click.argument("file")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE")
@click.option("--vars", "vars_file", type=click.Path(dir_okay=False))
@click.option("--runbook", "-r", "runbooks", multiple=True, help="Also validate these runbooks against it.")
def playbooks_validate(file, sets, vars_file, runbooks):
    """Render, parse and validate FILE; report every error with its location."""
    from .playbook import load_playbook, load_runbook

    pb = load_playbook(file, _variables(file, sets, vars_file))
    click.echo(f"{pb.source}: valid ({len(pb.data['populations'])} populations, {len(pb.data['devices'])} device pools, "
               f"{len(pb.data['mitigations'])} mitigations)")
    for rb in runbooks:
        load_runbook(rb, pb)
        click.echo(f"{rb}: valid")


if __name__ == "__main__":  # pragma: no cover
    main()
