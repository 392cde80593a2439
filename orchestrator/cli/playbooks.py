"""The ``gameday playbooks`` commands: list, show, render, validate, new, reference, schema."""
from __future__ import annotations

import json

import click

from orchestrator.playbook.files import builtin_playbooks, find_playbook
from orchestrator.playbook.loader import describe
from orchestrator.playbook.template import read_template, render
from orchestrator.playbook.variables import resolve_variables

from .options import duration_option, tick_option, variable_options, variables
from .root import main


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
        dep = f"{m['steps']} deployment step{'s' if m['steps'] != 1 else ''}" if m["deploy"] else "no deployment"
        params = ", ".join(f"{k}={v!r}" for k, v in m["params"].items())
        click.echo(f"  {m['name']:28s} risk {m['risk']:6s} {lead}, {dep}" + (f"; params {params}" if params else ""))
        if m["description"]:
            click.echo(f"      {m['description']}")
    if info["faults"]:
        click.echo("\nfaults (a live game day's facilitator injects them: gameday facilitate inject NAME):")
        for f in info["faults"]:
            params = ", ".join(f"{k}={v!r}" for k, v in f["params"].items())
            click.echo(f"  {f['name']:28s} {f['description']}" + (f"; params {params}" if params else ""))
    if info["hints"]:
        click.echo("\nhints (a live game day's facilitator releases them: gameday facilitate hint NAME):")
        for h in info["hints"]:
            click.echo(f"  {h['name']:28s} {h['text']}")
    if info["par"]:
        click.echo("\npar (the historical response):")
        for k, v in info["par"].items():
            click.echo(f"  {k:32s} {v}")
    click.echo("\nrunbooks: " + (", ".join(info["runbooks"]) or "none"))


@playbooks.command("render")
@click.argument("name")
@variable_options()
def playbooks_render(name, sets, vars_file):
    """Print NAME (a built-in playbook or a file) rendered with its variables."""
    tpl = read_template(find_playbook(name))
    click.echo(render(tpl, resolve_variables(tpl, variables(sets, vars_file), tpl.source)), nl=False)


@playbooks.command("validate")
@click.argument("file")
@variable_options()
@click.option("--runbook", "-r", "runbooks", multiple=True,
              help="Also validate these runbooks (names or files) against it.")
@duration_option("the runs to check it for")
@tick_option
def playbooks_validate(file, sets, vars_file, runbooks, duration, tick):
    """Render, parse and validate FILE, then its own runbooks (runbooks/PLAYBOOK/*.yaml beside
    it) and any other given with --runbook; report every error with its location. With
    --tick or --duration, also check them as gameday run does (a tick too coarse for the
    playbook's timeouts, too many ticks), and warn of what a run that long never reaches."""
    import sys

    from orchestrator.errors import InvalidPlaybook, InvalidRunbook
    from orchestrator.playbook.checks import timing_issues
    from orchestrator.playbook.loader import load_playbook
    from orchestrator.playbook.runbooks import load_runbook
    from orchestrator.playbook.hints import never_reached, retried_without_limit_by_default
    from orchestrator.playbook.files import runbook_files
    from orchestrator.playbook.variables import unused_variables

    pb = load_playbook(file, variables(sets, vars_file))
    timing = timing_issues(pb.data, duration, tick)
    if timing:
        raise InvalidPlaybook(pb.source, "options", timing)
    counts = ", ".join(f"{n} {what}{'s' if n != 1 else ''}" for n, what in (
        (len(pb.data["populations"]), "population"), (len(pb.data["devices"]), "device pool"),
        (len(pb.data["mitigations"]), "mitigation")))
    click.echo(f"{pb.source}: valid ({counts})")
    end = pb.data["clock"]["start"] + (duration or pb.data["clock"]["duration"])
    for text in [*unused_variables(file), *never_reached(pb.data, None, end), *retried_without_limit_by_default(pb)]:
        click.echo(f"warning: {text}", err=True)
    invalid = 0
    # its own: those in runbooks/PLAYBOOK/ (a shared runbooks/ folder may hold other playbooks' too)
    own = [name for name, path in runbook_files(pb.name, pb.source).items() if path.parent.name == pb.name]
    for rb in [*runbooks, *(name for name in own if name not in runbooks)]:
        try:
            _, runbook = load_runbook(rb, pb)
        except InvalidRunbook as e:  # (each runbook is checked: one broken does not hide the next)
            click.echo(f"error: {e}", err=True)
            invalid += 1
            continue
        click.echo(f"{rb}: valid")
        for text in never_reached({"triggers": []}, runbook, end):
            click.echo(f"warning: {rb}: {text}", err=True)
    if invalid:
        sys.exit(InvalidRunbook.exit_code)


@playbooks.command("new")
@click.argument("name")
@click.option("--from", "origin", default="starter", show_default=True, metavar="PLAYBOOK",
              help="Start from the starter (a small retry storm) or a copy of a built-in playbook.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Where to write NAME.yaml.j2 and runbooks/NAME/.")
def playbooks_new(name, origin, directory):
    """Write a new playbook NAME.yaml.j2 with its runbooks (runbooks/NAME/*.yaml, found by name
    with --runbook), from the starter or a built-in; it validates and runs as written."""
    from orchestrator.playbook.scaffold import new_playbook

    files = new_playbook(name, origin, directory)
    for f in files:
        click.echo(f"wrote {f}")
    click.echo(f"\nnext: gameday run {files[0]} --runbook historical --hosting inprocess\n"
               f"      the format: gameday playbooks reference (or docs/reference/playbook.md)")


@playbooks.command("reference")
def playbooks_reference():
    """Print the playbook reference (Markdown): every field, runbook condition, operation and
    metric, with its type, default, range, unit, meaning and an example."""
    from orchestrator.playbook.reference import reference_markdown

    click.echo(reference_markdown(), nl=False)


@playbooks.command("schema")
@click.option("--runbook", "of_runbook", is_flag=True, help="The schema of a runbook instead of a playbook.")
def playbooks_schema(of_runbook):
    """Print the JSON Schema (draft 2020-12) of a rendered playbook, or of a runbook, for editors
    that validate YAML as you type (docs/how-to/your-own-system.md, "Check files as you type")."""
    from orchestrator.playbook.json_schema import playbook_schema, runbook_schema

    click.echo(json.dumps(runbook_schema() if of_runbook else playbook_schema(), indent=2))
