"""The commands of a live game day: serve, console, facilitate, scoreboard, keys."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
from click.core import ParameterSource

from reports import rundir
from orchestrator.errors import GamedayError, Issue, NotFound
from orchestrator.live.protocol import for_terminal

from .openmetrics import metrics_endpoint, metrics_port_option
from .options import (duration_option, hosting_options, out_dir, out_option, playbook_argument, seed_option,
                      speed_value, stacked, stem, tick_option, variable_options, variables, parse_pairs, vocabulary)
from .root import main


def _session_tokens(session_dir: str, flag: str = "--session") -> dict:
    """The tokens of the session in ``session_dir`` (given as ``flag``: --session, or serve's
    --resume), checked (``server.read_tokens``)."""
    from orchestrator.live.server import read_tokens

    toks = read_tokens(Path(session_dir))
    if toks is None:
        raise NotFound(f"{flag} {session_dir}: no readable tokens.json there (there is none); is it a session directory "
                       "written by `gameday serve`?")
    return toks


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


#: how a console, the facilitator or the scoreboard finds a session
server_options = stacked(
    click.option("--server", help="The session's address, as printed by `gameday serve` (e.g. tcp://127.0.0.1:7700)."),
    click.option("--token", help="The token printed by `gameday serve` for this role."),
    click.option("--server-key", type=click.Path(dir_okay=False), help="The server's public CURVE key "
                 "(server.key from `gameday keys`), when the session is encrypted."),
    click.option("--session", "session_dir", type=click.Path(file_okay=False),
                 help="A session directory on this machine: read the address and token from its tokens.json."))


@main.command()
@playbook_argument
@click.option("--team", "teams", multiple=True, metavar="NAME",
              help="A team (repeatable); each plays its own world of the same scenario and seed.")
@click.option("--resume", "resume", type=click.Path(file_okay=False, exists=True), metavar="SESSION_DIR",
              help="Go on with the session in SESSION_DIR after its server died: every world rebuilt from the "
                   "journal, the same tokens, address and pages; a running session waits, paused, for `gameday "
                   "facilitate resume` (a waiting one for start).")
@seed_option("Random seed, the same for every team.")
@click.option("--speed", default="60", show_default=True, callback=speed_value,
              help="Simulated seconds per wall second (the facilitator can change it), or max.")
@click.option("--bind", default="tcp://127.0.0.1:7700", show_default=True,
              help="Where consoles connect. Port 0 picks a free port. A non-loopback address needs --curve-secret.")
@click.option("--curve-secret", type=click.Path(dir_okay=False),
              help="The server's secret CURVE key (server.key_secret from `gameday keys`): encrypts every connection.")
@variable_options()
@duration_option("the game day")
@tick_option
@out_option("runs/session-<playbook>-s<seed>-<time>", "Session directory to create")
@hosting_options(placement_default="single")
@click.option("--start/--wait", "start_now", default=False, show_default=True,
              help="Start the clock at once, or wait for `gameday facilitate start`.")
@click.option("--web-port", type=click.IntRange(min=0, max=65535), default=7701, show_default=True,
              help="Serve the pages (the teams' consoles and the scoreboard) on this port (0: a free one).")
@click.option("--web-host", default="127.0.0.1", show_default=True,
              help="Where the pages are served. A non-loopback address needs --tls-cert and --tls-key.")
@click.option("--tls-cert", type=click.Path(dir_okay=False), help="The pages' TLS certificate (PEM; "
              "`gameday keys DIR --tls` makes a self-signed one): serves HTTPS.")
@click.option("--tls-key", type=click.Path(dir_okay=False), help="The private key of --tls-cert (PEM).")
@click.option("--web/--no-web", default=True, show_default=True, help="Serve the pages.")
@click.option("--linger", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to keep answering consoles and pages after the session ends and its reports are "
                   "written, so they show the final state and link the reports.")
@click.option("--report/--no-report", default=True, show_default=True,
              help="As it ends, write each team's after-action report (linked from its page) and the session "
                   "report (linked from the facilitator's).")
@metrics_port_option("the metrics of every team's world")
def serve(playbook, teams, resume, seed, speed, bind, curve_secret, sets, vars_file, duration, tick, out, hosting,
          placement, address, start_now, web_port, web_host, tls_cert, tls_key, web, linger, report, metrics_port):
    """Host a live game day: one world per team, the same scenario and seed for all.

    Prints the command and the browser link each team joins with (its own token), the
    facilitator's and the scoreboard's. Writes a session directory: session.json,
    journal.jsonl (every control and team command), tokens.json (owner-only),
    teams/<team>/ (a run directory per team), restarts/ after a --resume, and at the end
    ranking.json and report/ (the session report).
    """
    from orchestrator.engine.journal import check_out_dir
    from orchestrator.hosting.host import HostingOptions
    from orchestrator.live.gameday import GameDay, Serving
    from orchestrator.live.scoreboard_view import render_board
    from orchestrator.live.session import Session, check_teams, resumable

    tokens = None
    if resume:
        ctx = click.get_current_context()
        said = vocabulary(ctx.command)  # (--set, not --sets; --start/--wait, not --start-now)
        given = [said[name] for name in RESUME_TAKES if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT, None)]
        if teams or given:
            raise click.UsageError(f"--resume takes the teams, the playbook, its options and where it was served from "
                                   f"the session itself; leave out {', '.join((['--team'] if teams else []) + given)}")
        tokens = _session_tokens(resume, "--resume")
        bind, (scheme, web_host, web_port) = tokens["server"], _web_place(resume, web_host, web_port)
        if tokens.get("server_key") and not curve_secret:
            raise click.UsageError(f"the session in {resume} was encrypted: pass its --curve-secret again")
        if web and scheme == "https" and not tls_cert:
            raise click.UsageError(f"the session in {resume} served its pages over HTTPS: pass --tls-cert and "
                                   "--tls-key again, or its pages cannot come back")
    elif not teams:
        raise click.UsageError("give at least one --team NAME (or --resume SESSION_DIR)")
    serving = Serving(bind, curve_secret, web, web_host, web_port, tls_cert, tls_key, linger)
    try:
        tls = serving.check()  # (before any world is built)
    except GamedayError as e:
        if resume:  # (the addresses were the session's, not options given now)
            raise GamedayError(f"{e}\n(--resume serves the session where {Path(resume) / rundir.TOKENS} and "
                               f"{Path(resume) / rundir.SESSION_INFO} say it was served)") from None
        raise
    if resume:  # every file of the session read and checked: a refusal changes nothing in it
        checked = resumable(Path(resume), tokens)
    else:
        check_teams(list(teams))
        out = out_dir(out, f"runs/session-{stem(playbook)}-s{seed}")
        check_out_dir(out)
    endpoint = metrics_endpoint(metrics_port)
    try:
        ports = serving.open()  # a port in use is said here, before anything is written
    except GamedayError as e:
        if resume:
            raise GamedayError(f"{e}\n--resume serves the session where it was served: free that port, then resume "
                               f"again (nothing in {resume} was changed)") from None
        raise
    try:
        if resume:
            click.echo(f"rebuilding the worlds of {resume} from its journal ...", err=True)
            session = Session.rebuild(checked, address)
            speed = session.clock.speed
        else:
            click.echo(f"building {len(teams)} worlds ({hosting}) ...", err=True)
            session = Session(out, list(teams), playbook, seed, variables(sets, vars_file), duration, tick, speed,
                              HostingOptions(hosting, placement, address))
    except BaseException:
        ports.close()
        raise
    if endpoint:
        endpoint.watch_session(session)

    def announce(game: GameDay) -> None:
        _announce(session, game.server, session.seed, speed, game.web, with_key=bool(curve_secret))
        if resume:
            click.echo(f"resumed at {session.clock_text()} ({session.state}); "
                       + ("go on with `gameday facilitate resume`" if session.state == "paused" else
                          "waiting for the facilitator to start the session"))
        elif not start_now:
            click.echo("waiting for the facilitator to start the session")
        sys.stdout.flush()

    def ranking(board: dict) -> None:
        click.echo(render_board(board))
        sys.stdout.flush()

    game = GameDay(session, serving, tls, tokens, ports, reports=report)
    try:
        game.play(start=start_now and not resume, announce=announce, on_end=ranking, on_failure=lambda s: click.echo(
            f"the server failed; go on with `gameday serve --resume {s.dir}`", err=True))
    finally:
        if game.debriefs is not None:
            _say_reports(game.debriefs)
    click.echo(for_terminal(f"session directory: {session.dir}"))


def _say_reports(debriefs) -> None:
    """The reports written at the end, and why any could not be (`gameday report` writes one again)."""
    for path in debriefs.written:
        if path.suffix == ".html":
            click.echo(for_terminal(f"{'session' if path.name.startswith('session') else 'team'} report: {path}"))
    for who, why in debriefs.failures().items():
        click.echo(for_terminal(f"{f'team {who}' if who else 'the session'}'s report could not be written: {why}"),
                   err=True)


#: what `serve --resume` takes from the session, not from the command line
RESUME_TAKES = ("playbook", "seed", "speed", "sets", "vars_file", "duration", "tick", "out", "hosting", "placement",
                "start_now", "bind", "web_port", "web_host")


def _web_place(session_dir: str, host: str, port: int) -> tuple[str | None, str, int]:
    """(scheme, host, port) where the session's pages were served (session.json's web), so
    that they reconnect by themselves; else (it served none yet) no scheme, ``host`` and
    ``port``. session.json is read as a run directory's JSON file is, and a web address
    gameday would not have written is refused, naming it."""
    from urllib.parse import urlsplit

    from orchestrator.live.session import NotResumable

    path = Path(session_dir) / rundir.SESSION_INFO
    try:
        info = rundir.read_json(Path(session_dir), rundir.SESSION_INFO, "what the session is and where it was served")
    except rundir.NotARunDirectory as e:
        raise NotResumable(str(e)) from None
    if info is not None and not isinstance(info, dict):
        raise NotResumable(f"{path}: {Issue('the file', info, 'a JSON object, as `gameday serve` writes it')}")
    web = (info or {}).get("web")
    if web is None:
        return None, host, port
    try:
        url = urlsplit(web)
        if url.scheme in ("http", "https") and url.hostname and url.port is not None:  # (.port: 0 to 65535)
            return url.scheme, url.hostname, url.port
    except (TypeError, ValueError, AttributeError):
        pass
    wanted = "the address the pages were served at, http(s)://HOST:PORT/ with a port from 0 to 65535"
    raise NotResumable(f"{path}: {Issue('web', web, wanted)}, as `gameday serve` writes it")


def _announce(session, server, seed, speed, web, with_key: bool) -> None:
    """The session's line, then the command each role joins with."""
    key_opt = " --server-key server.key" if with_key else ""
    click.echo(for_terminal(f"session {session.dir}: {session.pb.name}, seed {seed}, {len(session.teams)} teams, "
                            f"{session.info['start_clock']}-{session.info['end_clock']}, speed {speed or 'max'}"))
    for team in session.teams:
        click.echo(f"  team {team}: gameday console --server {server.address} --team {team} "
                   f"--token {server.token_of('team', team)}{key_opt}")
        if web is not None:
            click.echo(f"    or in a browser: {web.link(team, server.token_of('team', team))}")
    click.echo(f"  facilitator: gameday facilitate --server {server.address} --token "
               f"{server.token_of('facilitator')}{key_opt} start|pause|resume|speed X|inject FAULT|message TEXT|end")
    if web is not None:
        click.echo(f"    or in a browser: {web.facilitator_link(server.token_of('facilitator'))}")
    click.echo(f"  scoreboard: gameday scoreboard --server {server.address} --token {server.token_of('viewer')}{key_opt}")
    if web is not None:
        click.echo(f"  scoreboard page: {web.scoreboard_link(server.token_of('viewer'))}")


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
        click.echo(for_terminal(f"session {session['state']} at {session['clock']} (speed {session['speed']})"))
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
    args = {"fault": fault, "params": parse_pairs(list(params), "--param")}
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


@facilitate.command("ranks")
@click.argument("shown", type=click.Choice(["on", "off"]))
@click.pass_obj
def facilitate_ranks(client, shown):
    """Show each team its rank on its own consoles (on), or not (off: the start)."""
    _print_result(client.call("ranks", {"shown": shown == "on"}))


@facilitate.command("hint")
@click.argument("name", required=False)
@click.option("--text", help="A hint of your own instead of one the playbook prepared.")
@click.option("--team", "teams", multiple=True, help="Only these teams (repeatable) [default: every team].")
@click.pass_obj
def facilitate_hint(client, name, text, teams):
    """Release the playbook's hint NAME (`gameday playbooks show` lists them), or --text, to the teams."""
    args = {"name": name} if name is not None else {"text": text} if text is not None else {}
    _print_result(client.call("hint", args | ({"teams": list(teams)} if teams else {})))


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
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--tls", is_flag=True, help="Also a self-signed TLS certificate for the pages: web.crt and web.key "
              "(for `gameday serve --tls-cert --tls-key`).")
@click.option("--tls-host", "tls_hosts", multiple=True, metavar="HOST",
              help="A name or address the pages are reached at (repeatable); localhost and 127.0.0.1 always are.")
def keys(directory, tls, tls_hosts):
    """Generate the server's CURVE key pair in DIRECTORY: server.key (public: give it to
    the consoles) and server.key_secret (for `gameday serve --curve-secret`); with
    --tls, a self-signed certificate for the pages too."""
    from orchestrator.live.server import generate_keys

    kept = (tls or tls_hosts) and (Path(directory) / "server.key_secret").exists()
    if kept:  # handed to consoles already: a certificate for the pages does not replace them
        click.echo(f"the CURVE key pair in {directory} is kept")
    else:
        public, secret = generate_keys(Path(directory))
        click.echo(f"public key (for consoles, --server-key): {public}\nsecret key (for serve, --curve-secret): {secret}")
    if tls or tls_hosts:
        from orchestrator.live.tls import make_self_signed

        cert, key, fingerprint = make_self_signed(Path(directory), list(tls_hosts))
        click.echo(f"TLS certificate (for serve, --tls-cert): {cert}\nTLS key (for serve, --tls-key): {key}\n"
                   f"certificate fingerprint (SHA-256, for the browsers' warning): {fingerprint}")

