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
from orchestrator.runs import attribution as counterfactual
from orchestrator.errors import GamedayError, NotFound
from orchestrator.playbook.loader import builtin_playbooks, describe, find_playbook, read_template, render, resolve_variables
from orchestrator.hosting.ray_hosting import PLACEMENTS
from orchestrator.runs.runner import HOSTINGS, RunSpec, execute, parse_sets, read_vars_file
from orchestrator.timefmt import parse_duration

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


def _stem(path: str) -> str:
    """A playbook's or run directory's name for a default output directory."""
    return Path(path).name.split(".")[0]


def _out_dir(out: str | None, default: str) -> Path:
    """``out``, or ``default`` with the time appended, so that runs never collide."""
    return Path(out) if out else Path(f"{default}-{time.strftime('%Y%m%d-%H%M%S')}")


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
@click.option("--hosting", type=click.Choice(HOSTINGS), default="ray", show_default=True,
              help="ray: agents on Ray actors exchanging ZeroMQ messages (a local Ray is started unless "
                   "--address); inprocess: every agent in this process (fastest for batch runs). Same results.")
@click.option("--placement", type=click.Choice(PLACEMENTS), default="kind", show_default=True,
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
@click.option("--attribution/--no-attribution", default=True, show_default=True,
              help="Once the run is complete, find which action broke the loop by counterfactual: play the run "
                   f"again from each of the (at most {counterfactual.MAX_ACTIONS}) latest actions before the loop broke, "
                   f"without it, until its loop breaks or {counterfactual.LOOKAHEAD_S / 3600:g} h after it broke in the "
                   "run, and write attribution.json.")
@click.option("--report/--no-report", default=True, show_default=True,
              help="Write the after-action report (report/report.md with its charts, report/report.html) into "
                   "the run directory at the end.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar on a terminal.")
@click.option("--json", "as_json", is_flag=True, help="Print the score as JSON instead of the summary table.")
def run(playbook, runbook, seed, sets, vars_file, out, duration, tick, hosting, placement, shards, address, speed,
        snapshot_every, attribution, report, progress, as_json):
    """Run PLAYBOOK (default: the built-in us-east-1-2021) with a runbook.

    Writes a run directory (rendered playbook and runbook, seed and versions,
    events.jsonl, metrics.csv, columns.json, score.json) and prints the score beside par.
    """
    spec = RunSpec(playbook=playbook, runbook=runbook, seed=seed, sets=_variables(playbook, sets, vars_file),
                   duration=duration, tick=tick, shards=shards)
    out = _out_dir(out, f"runs/{_stem(playbook)}-{Path(runbook or 'default').stem}-s{seed}")
    data = execute(spec, Path(out), progress=progress, hosting=hosting, placement=placement, address=address,
                   speed=speed, snapshot_every=snapshot_every, attribution=attribution)
    if as_json:
        click.echo(json.dumps(data.score, indent=2, sort_keys=True))
    else:
        click.echo(summary_table(data))
        if data.attribution is not None:
            click.echo(f"\nattribution: {data.attribution['text']}")
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
    if info["faults"]:
        click.echo("\nfaults (a live game day's facilitator injects them: gameday facilitate inject NAME):")
        for f in info["faults"]:
            params = ", ".join(f"{k}={v!r}" for k, v in f["params"].items())
            click.echo(f"  {f['name']:28s} {f['description']}" + (f"; params {params}" if params else ""))
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
    from orchestrator.playbook.loader import load_playbook, load_runbook

    pb = load_playbook(file, _variables(file, sets, vars_file))
    click.echo(f"{pb.source}: valid ({len(pb.data['populations'])} populations, {len(pb.data['devices'])} device pools, "
               f"{len(pb.data['mitigations'])} mitigations)")
    for rb in runbooks:
        load_runbook(rb, pb)
        click.echo(f"{rb}: valid")


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
               f"      the format: gameday playbooks reference (or docs/playbook-reference.md)")


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
    that validate YAML as you type (see the README)."""
    from orchestrator.playbook.json_schema import playbook_schema, runbook_schema

    click.echo(json.dumps(runbook_schema() if of_runbook else playbook_schema(), indent=2))


@main.command("compare")
@click.argument("playbook", default="us-east-1-2021")
@click.option("--runbook", "-r", "runbooks", multiple=True, required=True,
              help="A runbook to compare (repeatable): a built-in name or a YAML file.")
@click.option("--seeds", type=click.IntRange(min=1), default=10, show_default=True, help="Seeds 1..N for every runbook.")
@click.option("--sweep", "sweeps", multiple=True, metavar="VAR=V1,V2,...",
              help="A playbook variable and its values (repeatable; every combination is a sweep point).")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Override a playbook variable (repeatable).")
@click.option("--vars", "vars_file", type=click.Path(dir_okay=False), help="YAML file of variable overrides.")
@click.option("--duration", callback=_duration, help="Simulated time of every run (e.g. 3h); default from the playbook.")
@click.option("--tick", callback=_duration, help="Simulated seconds per tick; default from the playbook.")
@click.option("--address", envvar="RAY_ADDRESS", help="Ray cluster to run on (default: RAY_ADDRESS, else a local Ray).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="At most this many runs at once [default: the Ray cluster's CPUs].")
@click.option("--serial", is_flag=True, help="Run one by one in this process instead of as Ray tasks (same results).")
@click.option("--keep-runs", is_flag=True, help="Keep every run's directory in OUT/runs (this machine's disk).")
@click.option("--out", type=click.Path(file_okay=False),
              help="Directory for the results [default: runs/compare-<playbook>-<time>].")
@click.option("--report/--no-report", default=True, show_default=True, help="Write compare.md and compare.html.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar on a terminal.")
def compare_command(playbook, runbooks, seeds, sweeps, sets, vars_file, duration, tick, address, workers, serial,
                    keep_runs, out, report, progress):
    """Compare runbooks over seeds (and sweeps of playbook variables).

    Every (runbook, seed, sweep point) is a whole world run in a Ray task. Writes
    results.csv (one row per run), summary.csv (per runbook: success rate, median and
    p90 time to break the loop with bootstrap 95% CIs, impact), pairs.csv (each pair's
    effect sizes with 95% CIs, Fisher's exact test on success rates and Mann-Whitney U
    on times to break, Holm-corrected, and whether the seeds could show a difference at
    all) and the comparison report, and prints the summary and the verdicts.
    """
    from reports import compare_stats as cs
    from reports.compare_report import write_comparison_report
    from orchestrator.batch.comparison import compare, parse_sweeps

    sweep = parse_sweeps(list(sweeps))
    values = _variables(playbook, sets, vars_file)
    out = _out_dir(out, f"runs/compare-{_stem(playbook)}")
    from orchestrator.engine.journal import check_out_dir

    check_out_dir(out)
    df = compare(playbook, list(runbooks), seeds, sweep, values, duration, tick, address, parallel=not serial,
                 progress=progress, keep_runs=out / "runs" if keep_runs else None, max_workers=workers)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "results.csv", index=False)
    summ, tests = cs.summary(df, list(sweep)), cs.pairs(df, list(sweep))
    summ.to_csv(out / "summary.csv", index=False)
    tests.to_csv(out / "pairs.csv", index=False)
    from reports.compare_report import _fmt_s, pair_lines

    def at_point(rec: dict) -> str:
        point = ", ".join(f"{k}={rec[k]}" for k in sweep)
        return f"{point}: " if point else ""

    for r in summ.to_dict("records"):
        click.echo(f"{at_point(r)}{r['runbook']}: {r['runs']} runs, loop broken in "
                   f"{r['success_rate']:.0%}, median {_fmt_s(r['median_break_s'])} (95% CI "
                   f"{_fmt_s(r['median_break_ci'][0])} to {_fmt_s(r['median_break_ci'][1])}), p90 "
                   f"{_fmt_s(r['p90_break_s'])}, median impact {r['median_impact']:.1f}")
    for line in pair_lines(tests, list(sweep)):
        click.echo(line)
    if len(tests):
        click.echo(f"test: {cs.TEST}")
    if report:
        horizon = df["horizon_s"].max()
        written = write_comparison_report(df, out, list(sweep), {"playbook": _stem(playbook),
                                                                  "seeds": seeds, "horizon": f"{horizon / 3600:g} h"})
        click.echo(f"report: {written[1]}")
    click.echo(f"results: {out / 'results.csv'}")


# -- live game days -----------------------------------------------------------------------------

def _session_tokens(session_dir: str) -> dict:
    path = Path(session_dir) / "tokens.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise NotFound(f"--session {session_dir}: no readable tokens.json there ({e}); is it a session directory "
                       "written by `gameday serve`?") from None


def _client(server, token, server_key, session_dir, role: str, team: str | None = None):
    """A client for --server/--token, or for the tokens in --session DIR."""
    from orchestrator.live.client import LiveClient
    from orchestrator.live.server import load_key

    public = load_key(server_key, secret=False)[0] if server_key else None
    if session_dir:
        toks = _session_tokens(session_dir)
        server = server or toks["server"]
        if token is None:
            token = toks["teams"].get(team) if role == "team" else toks.get(role)
        if public is None and toks.get("server_key"):
            public = toks["server_key"].encode()
    if not server or not token:
        raise click.UsageError("give --server and --token (printed by `gameday serve`), or --session DIR")
    return LiveClient(server, token, server_public=public)


_server_options = [
    click.option("--server", help="The session's address, as printed by `gameday serve` (e.g. tcp://127.0.0.1:7700)."),
    click.option("--token", help="The token printed by `gameday serve` for this role."),
    click.option("--server-key", type=click.Path(dir_okay=False), help="The server's public CURVE key "
                 "(server.key from `gameday keys`), when the session is encrypted."),
    click.option("--session", "session_dir", type=click.Path(file_okay=False),
                 help="A session directory on this machine: read the address and token from its tokens.json."),
]


def server_options(f):
    for opt in reversed(_server_options):
        f = opt(f)
    return f


@main.command()
@click.argument("playbook", default="us-east-1-2021")
@click.option("--team", "teams", multiple=True, required=True, metavar="NAME",
              help="A team (repeatable); each plays its own world of the same scenario and seed.")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True, help="Random seed, the same for every team.")
@click.option("--speed", default="60", show_default=True, callback=lambda c, p, v: _speed(v),
              help="Simulated seconds per wall second (the facilitator can change it), or max.")
@click.option("--bind", default="tcp://127.0.0.1:7700", show_default=True,
              help="Where consoles connect. Port 0 picks a free port. A non-loopback address needs --curve-secret.")
@click.option("--curve-secret", type=click.Path(dir_okay=False),
              help="The server's secret CURVE key (server.key_secret from `gameday keys`): encrypts every connection.")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Override a playbook variable (repeatable).")
@click.option("--vars", "vars_file", type=click.Path(dir_okay=False), help="YAML file of variable overrides.")
@click.option("--duration", callback=_duration, help="Simulated time to play (e.g. 3h); default from the playbook.")
@click.option("--tick", callback=_duration, help="Simulated seconds per tick; default from the playbook.")
@click.option("--out", type=click.Path(file_okay=False),
              help="Session directory to create [default: runs/session-<playbook>-s<seed>-<time>].")
@click.option("--hosting", type=click.Choice(HOSTINGS), default="ray", show_default=True,
              help="ray: each team's world on Ray actors exchanging ZeroMQ messages; inprocess: in this process.")
@click.option("--placement", type=click.Choice(PLACEMENTS), default="single", show_default=True,
              help="With --hosting ray: one actor per team's world, one per kind of agent, or one per agent.")
@click.option("--address", envvar="RAY_ADDRESS", help="Ray cluster to use (default: RAY_ADDRESS, else a local Ray).")
@click.option("--start/--wait", "start_now", default=False, show_default=True,
              help="Start the clock at once, or wait for `gameday facilitate start`.")
@click.option("--web-port", type=click.IntRange(min=0, max=65535), default=7701, show_default=True,
              help="Serve the scoreboard page on http://127.0.0.1:PORT/ (0: a free port).")
@click.option("--web/--no-web", default=True, show_default=True, help="Serve the scoreboard page.")
@click.option("--linger", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to keep answering consoles after the session ends, so they show the final state.")
@click.option("--report/--no-report", default=True, show_default=True,
              help="At the end, write each team's after-action report and the session report.")
def serve(playbook, teams, seed, speed, bind, curve_secret, sets, vars_file, duration, tick, out, hosting, placement,
          address, start_now, web_port, web, linger, report):
    """Host a live game day: one world per team, the same scenario and seed for all.

    Prints the command each team joins with (its own token), the facilitator's and
    the scoreboard's. Writes a session directory: session.json, journal.jsonl (every
    control), tokens.json (owner-only), teams/<team>/ (a run directory per team), and at
    the end ranking.json and report/ (the session report).
    """
    from orchestrator.engine.journal import check_out_dir
    from orchestrator.live.server import LiveServer, check_bind
    from orchestrator.live.session import Session, check_teams

    check_bind(bind, curve_secret)
    check_teams(list(teams))
    out = _out_dir(out, f"runs/session-{_stem(playbook)}-s{seed}")
    check_out_dir(out)
    values = _variables(playbook, sets, vars_file)
    click.echo(f"building {len(teams)} worlds ({hosting}) ...", err=True)
    session = Session(out, list(teams), playbook, seed, values, duration, tick, speed, hosting, placement, address)
    server = web_server = None
    closed = []

    def finish():
        """Close the worlds and print the ranking; quick, so consoles see the end at once."""
        if closed:
            return
        closed.append(True)
        from orchestrator.live.scoreboard_view import render_board

        click.echo(render_board(session.close()))
        sys.stdout.flush()

    def write_reports():
        """After the linger: drawing the charts takes seconds nobody is served in."""
        if report and session.tick > 0:
            from reports.build import write_report
            from reports.session import write_session_report

            for t in session.teams:
                write_report(session.dir / "teams" / t)
            for path in write_session_report(session.dir):
                click.echo(f"session report: {path}")
        click.echo(f"session directory: {session.dir}")

    try:
        server = LiveServer(session, bind, curve_secret)
        server.write_tokens()
        session.write_info("waiting", server=server.address)
        if web:
            from orchestrator.live.scoreboard_web import start_web

            web_server, url = start_web(lambda: server.board_json, web_port)
            session.write_info("waiting", web=url)
        key_opt = " --server-key server.key" if curve_secret else ""
        click.echo(f"session {session.dir}: {session.pb.name}, seed {seed}, {len(teams)} teams, "
                   f"{session.info['start_clock']}-{session.info['end_clock']}, speed {speed or 'max'}")
        for team in session.teams:
            click.echo(f"  team {team}: gameday console --server {server.address} --team {team} "
                       f"--token {server.token_of('team', team)}{key_opt}")
        click.echo(f"  facilitator: gameday facilitate --server {server.address} --token "
                   f"{server.token_of('facilitator')}{key_opt} start|pause|resume|speed X|inject FAULT|message TEXT|end")
        click.echo(f"  scoreboard: gameday scoreboard --server {server.address} --token {server.token_of('viewer')}{key_opt}")
        if web:
            click.echo(f"  scoreboard page: {url}")
        if start_now:
            session.start()
        else:
            click.echo("waiting for the facilitator to start the session")
        sys.stdout.flush()
        server.run(linger_s=linger, on_end=finish)
    finally:
        try:
            finish()
        finally:
            if web_server is not None:
                web_server.shutdown()
            if server is not None:
                server.close()
    write_reports()


@main.command()
@server_options
@click.option("--team", required=True, help="Your team.")
@click.option("--as", "who", default="", help="Your name or role, shown beside the actions you take.")
def console(server, token, server_key, session_dir, team, who):
    """Join a live game day as a team: your world's observed view, alerts, actions.

    Type `help` for the commands; Tab completes them. The screen refreshes itself
    while you type.
    """
    from orchestrator.live.console_app import run_console

    client = _client(server, token, server_key, session_dir, "team", team)
    try:
        client.call("hello", {"team": team, "role": who} if who else {"team": team})
        run_console(client, team, who)
    finally:
        client.close()


@main.group()
@server_options
@click.pass_context
def facilitate(ctx, server, token, server_key, session_dir):
    """Control a live game day: start, pause, resume, speed, inject, message, end, status."""
    ctx.obj = _Lazy(lambda: _client(server, token, server_key, session_dir, "facilitator"))
    ctx.call_on_close(ctx.obj.close)


class _Lazy:
    """The facilitator's client, made when a subcommand first calls (so that
    `facilitate start --help` needs no server)."""

    def __init__(self, make):
        self.make, self.client = make, None

    def call(self, op: str, args: dict | None = None):
        if self.client is None:
            self.client = self.make()
        return self.client.call(op, args)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def _print_result(result) -> None:
    session = result.get("session", result) if isinstance(result, dict) else {}
    if "state" in session:
        click.echo(f"session {session['state']} at {session['clock']} (speed {session['speed']})")
    extra = {k: v for k, v in result.items() if k != "session"} if isinstance(result, dict) else {}
    if extra and "state" not in result:
        click.echo(json.dumps(extra, indent=2, sort_keys=True))


for _op, _help in (("start", "Start the clock."), ("pause", "Stop simulated time for every team."),
                   ("resume", "Start simulated time again."), ("end", "End the session now (run directories, ranking, report).")):
    def _make(op):
        @click.pass_obj
        def command(client):
            _print_result(client.call(op))
        return command

    facilitate.command(_op, help=_help)(_make(_op))


@facilitate.command("speed")
@click.argument("speed", type=float)
@click.pass_obj
def facilitate_speed(client, speed):
    """Simulated seconds per wall second from now on."""
    _print_result(client.call("speed", {"speed": speed}))


@facilitate.command("inject")
@click.argument("fault")
@click.option("--team", "teams", multiple=True, help="Only these teams (repeatable) [default: every team].")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="A parameter of the fault (repeatable).")
@click.pass_obj
def facilitate_inject(client, fault, teams, params):
    """Inject one of the playbook's faults (`gameday playbooks show` lists them)."""
    args = {"fault": fault, "params": parse_sets(list(params))}
    if teams:
        args["teams"] = list(teams)
    _print_result(client.call("inject", args))


@facilitate.command("message")
@click.argument("text")
@click.option("--team", "teams", multiple=True, help="Only these teams (repeatable) [default: every team].")
@click.pass_obj
def facilitate_message(client, text, teams):
    """Show TEXT on the teams' consoles."""
    _print_result(client.call("message", {"text": text, "teams": list(teams)} if teams else {"text": text}))


@facilitate.command("status")
@click.pass_obj
def facilitate_status(client):
    """The session's state, the consoles connected per team, the server's counters."""
    click.echo(json.dumps(client.call("status"), indent=2, sort_keys=True))


@main.command()
@server_options
@click.option("--once", is_flag=True, help="Print the scoreboard once and exit.")
@click.option("--every", type=click.FloatRange(min=0.2), default=1.0, show_default=True, help="Seconds between refreshes.")
def scoreboard(server, token, server_key, session_dir, once, every):
    """The live scoreboard in the terminal: per team, loop broken, backlog drained,
    impact so far, first customer update, actions, rank."""
    from orchestrator.live.scoreboard_view import render_board

    client = _client(server, token, server_key, session_dir, "viewer")
    try:
        while True:
            board = client.call("scoreboard")
            text = render_board(board)
            if once:
                click.echo(text)
                return
            click.clear()
            click.echo(text)
            if board["session"]["state"] == "ended":
                return
            time.sleep(every)
    finally:
        client.close()


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--out", type=click.Path(file_okay=False), help="Directory for the replayed run [default: RUN_DIR-replay-<time>].")
def replay(run_dir, out):
    """Play RUN_DIR again (a live team's or a scripted run) and check that the replay
    is identical: the same metrics and events, tick by tick."""
    import filecmp

    from orchestrator.runs.runner import replay as replay_run

    out = _out_dir(out, f"{Path(run_dir).as_posix().rstrip('/')}-replay")
    data = replay_run(Path(run_dir), out)
    same = [f for f in ("metrics.csv", "events.jsonl") if filecmp.cmp(Path(run_dir) / f, data.dir / f, shallow=False)]
    click.echo(f"replayed {data.meta['ticks_done']} ticks into {data.dir}")
    if len(same) == 2:
        click.echo("identical to the recording: metrics.csv and events.jsonl")
        return
    click.echo("DIFFERENT from the recording: " + ", ".join(f for f in ("metrics.csv", "events.jsonl") if f not in same), err=True)
    sys.exit(1)


def _axis(value: str):
    from orchestrator.batch.comparison import parse_sweeps

    (name, values), = parse_sweeps([value]).items()
    return name, values


@main.command("phasemap")
@click.argument("playbook", default="us-east-1-2021")
@click.option("--x", "x", required=True, metavar="VAR=V1,V2,...", help="The horizontal axis: a playbook variable and its values.")
@click.option("--y", "y", required=True, metavar="VAR=V1,V2,...", help="The vertical axis.")
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True, help="Runs per cell (seeds 1..N).")
@click.option("--runbook", "-r", default="none", show_default=True, help="Who acts (none: the system alone).")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Override a playbook variable (repeatable).")
@click.option("--duration", callback=_duration, help="Simulated time of every run; default from the playbook.")
@click.option("--address", envvar="RAY_ADDRESS", help="Ray cluster to run on (default: RAY_ADDRESS, else a local Ray).")
@click.option("--serial", is_flag=True, help="Run one by one in this process instead of as Ray tasks (same results).")
@click.option("--out", type=click.Path(file_okay=False), help="Directory [default: runs/phasemap-<playbook>-<time>].")
def phasemap_command(playbook, x, y, seeds, runbook, sets, duration, address, serial, out):
    """Map metastability over two variables: each cell healthy (the loop never formed),
    recovered by itself, or stuck, by the majority of its runs. Writes phasemap.csv
    (cells), runs.csv (every run), phasemap.png (the heat map) and phasemap.md."""
    from reports.compare_report import phase_chart
    from orchestrator.engine.journal import check_out_dir
    from orchestrator.batch.phasemap import phase_map

    xa, ya = _axis(x), _axis(y)
    out = _out_dir(out, f"runs/phasemap-{_stem(playbook)}")
    check_out_dir(out)
    cells, runs = phase_map(playbook, xa, ya, seeds, runbook, _variables(playbook, sets, None), duration,
                            address=address, parallel=not serial, progress=True)
    out.mkdir(parents=True, exist_ok=True)
    cells.to_csv(out / "phasemap.csv", index=False)
    runs.to_csv(out / "runs.csv", index=False)
    (out / "phasemap.png").write_bytes(phase_chart(cells, xa[0], ya[0]))
    grid = cells.pivot(index=ya[0], columns=xa[0], values="phase")
    lines = [f"# Phase map: {_stem(playbook)}, runbook {runbook}, {seeds} seeds per cell", "",
             f"| {ya[0]} \\ {xa[0]} | " + " | ".join(map(str, grid.columns)) + " |",
             "|---|" + "---|" * len(grid.columns)]
    lines += [f"| {idx} | " + " | ".join(grid.loc[idx]) + " |" for idx in grid.index]
    lines += ["", "![phase map](phasemap.png)", ""]
    (out / "phasemap.md").write_text("\n".join(lines), encoding="utf-8")
    click.echo("\n".join(lines[2:-3]))
    click.echo(f"phase map: {out / 'phasemap.png'}")


@main.command("fork")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--at", "at", required=True, help="The decision point: a clock time of the run (e.g. 09:30).")
@click.option("--runbook", "-r", required=True, help="The runbook that takes over at that time (a built-in name or a file).")
@click.option("--out", type=click.Path(file_okay=False), help="Directory for the fork [default: RUN_DIR-fork-<time>].")
def fork_command(run_dir, at, runbook, out):
    """Continue RUN_DIR (scripted or live) from its exact state at --at with another
    runbook, to the scenario's end, and say what changed ("loop broken 95 minutes
    sooner"). Up to --at the fork is the original, tick for tick."""
    from orchestrator.runs.fork import fork

    out = _out_dir(out, f"{Path(run_dir).as_posix().rstrip('/')}-fork")
    result = fork(Path(run_dir), at, runbook, out)
    click.echo(f"forked {run_dir} at {at}: {result['runbook_before']} -> {result['runbook']}")
    for d in result["differences"]:
        click.echo(f"  {d['text']}")
    click.echo(f"fork: {out}")


@main.command()
@click.argument("directory", type=click.Path(file_okay=False))
def keys(directory):
    """Generate the server's CURVE key pair in DIRECTORY: server.key (public: give it to
    the consoles) and server.key_secret (for `gameday serve --curve-secret`)."""
    from orchestrator.live.server import generate_keys

    public, secret = generate_keys(Path(directory))
    click.echo(f"public key (for consoles, --server-key): {public}\nsecret key (for serve, --curve-secret): {secret}")


if __name__ == "__main__":  # pragma: no cover
    main()
