"""The options several commands share, declared once, and the parsing of their values.

Each ``*_options`` is a decorator that adds a stack of options; ``what`` words a help
text for the command it decorates ("the run", "every run")."""
from __future__ import annotations

import math
import time
from pathlib import Path

import click

from orchestrator import budgets

from orchestrator.hosting.host import HOSTINGS
from orchestrator.hosting.ray_hosting import PLACEMENTS
from orchestrator.errors import InvalidInput, InvalidPlaybook, Issue
from orchestrator.playbook.variables import Given, coerce_value
from reports.timefmt import parse_duration

DEFAULT_PLAYBOOK = "us-east-1-2021"


def vocabulary(command: click.Command) -> dict[str, str]:
    """How ``command``'s users typed each setting, by its field (``errors.setting``): its
    options' flags (``--web/--no-web`` for a switch) and its arguments' names, read from the
    command's own declarations, so that no flag is written twice."""
    out = {}
    for p in command.params:
        if isinstance(p, click.Argument):
            out[p.name] = p.human_readable_name
            continue
        flag = next((o for o in p.opts if o.startswith("--")), p.opts[0])
        out[p.name] = f"{flag}/{p.secondary_opts[0]}" if p.secondary_opts else flag
    return out


def stacked(*options):
    """One decorator applying ``options`` in the order written (top one first in --help)."""
    def apply(f):
        for opt in reversed(options):
            f = opt(f)
        return f
    return apply


def duration_value(ctx, param, value):
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):  # "inf" and "nan" parse as numbers but no run can last that long
        raise click.BadParameter(f"{value!r} is not a duration (e.g. 30s, 15m, 2h30m)")
    return seconds


def speed_value(ctx, param, value: str):
    if value == "max":
        return None
    try:
        speed = float(value)
    except ValueError:
        speed = math.nan
    if not (math.isfinite(speed) and speed >= budgets.SLOWEST_SPEED):
        raise click.BadParameter(f"{value!r}: expected a number >= {budgets.SLOWEST_SPEED:g} (simulated seconds per "
                                 "wall second) or max")
    return speed


def playbook_argument(f):
    return click.argument("playbook", default=DEFAULT_PLAYBOOK)(f)


def variable_options(with_vars_file: bool = True):
    """--set NAME=VALUE (repeatable) and --vars FILE."""
    opts = [click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
                         help="Override a playbook variable (repeatable).")]
    if with_vars_file:
        opts.append(click.option("--vars", "vars_file", type=click.Path(dir_okay=False),
                                 help="YAML file of variable overrides."))
    return stacked(*opts)


def duration_option(what: str):
    return click.option("--duration", callback=duration_value,
                        help=f"Simulated time of {what} (e.g. 3h); default from the playbook.")


def time_limit_option(f):
    return click.option("--time-limit", callback=duration_value, metavar="DURATION",
                        help="Wall-clock time it may take (e.g. 5m): then no run starts, the runs under way stop, and "
                             "what it writes covers seeds 1 to k, up to the first seed not every run of which was "
                             "done.")(f)


def tick_option(f):
    return click.option("--tick", callback=duration_value, help="Simulated seconds per tick; default from the playbook.")(f)


def seed_option(help: str):
    return click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True, help=help)


def address_option(f):
    return click.option("--address", envvar="RAY_ADDRESS",
                        help="Ray cluster to use (default: RAY_ADDRESS, else a local Ray).")(f)


def hosting_options(placement_default: str):
    """--hosting, --placement and --address: where the agents of a world run."""
    return stacked(
        click.option("--hosting", type=click.Choice(HOSTINGS), default="ray", show_default=True,
                     help="ray: agents on Ray actors exchanging ZeroMQ messages (a local Ray is started unless "
                          "--address); inprocess: every agent in this process (fastest for batch runs). Same results."),
        click.option("--placement", type=click.Choice(PLACEMENTS), default=placement_default, show_default=True,
                     help="With --hosting ray: one actor per kind of agent (kind), one per agent (agent), or one "
                          "for the world (single)."),
        address_option)


def workers_option(f):
    return click.option("--workers", type=click.IntRange(min=1), default=None,
                        help="At most this many runs at once [default: the Ray cluster's CPUs].")(f)


def serial_option(f):
    return click.option("--serial", is_flag=True,
                        help="Run one by one in this process instead of as Ray tasks (same results).")(f)


def many_runs_options(f):
    """What a command over many runs takes for each run and for where they run: the playbook's
    variables, the duration and tick of every run, the Ray cluster, how many at once, or one
    by one here."""
    return stacked(variable_options(), duration_option("every run"), tick_option, address_option, workers_option,
                   serial_option)(f)


def out_option(default: str, what: str = "Directory to create"):
    return click.option("--out", type=click.Path(file_okay=False), help=f"{what} [default: {default}].")


def cache_option(f):
    return click.option("--cache", type=click.Path(file_okay=False), default=None, metavar="DIR",
                        help="Keep each run's results in DIR, and take from there the runs played before instead of "
                             "playing them again (the same rendered playbook, runbook, seed, duration, tick and "
                             "code).")(f)


def progress_option(f):
    return click.option("--progress/--no-progress", default=True, show_default=True,
                        help="Show a progress bar on a terminal.")(f)


def stem(path: str) -> str:
    """A playbook's or run directory's name for a default output directory."""
    return Path(path).name.split(".")[0]


def out_dir(out: str | None, default: str) -> Path:
    """``out``, or ``default`` with the time appended, so that runs never collide."""
    return Path(out) if out else Path(f"{default}-{time.strftime('%Y%m%d-%H%M%S')}")


def beside(run_dir: str, suffix: str) -> str:
    """RUN_DIR-suffix: the default directory of what is made from a run directory."""
    return f"{Path(run_dir).as_posix().rstrip('/')}-{suffix}"


def parse_pairs(pairs: list[str], flag: str = "--set") -> dict:
    """NAME=VALUE flags (``--set``, ``--param``) -> {name: value}, each value typed as YAML reads it."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise InvalidPlaybook(flag, "variables" if flag == "--set" else "options", [Issue(flag, pair, "name=value")])
        k, v = pair.split("=", 1)
        out[k.strip()] = coerce_value(v)
    return out


def variables(sets: tuple, vars_file: str | None = None) -> Given:
    """The values of --vars and --set (--set wins), each with where it was said: the
    playbook checks them when it loads, once."""
    return Given.of(parse_pairs(list(sets)), vars_file)


def parse_sweeps(items: list[str], flag: str = "--sweep") -> dict[str, list]:
    """``--sweep var=v1,v2`` (repeatable; or a phase map's ``--x``) -> {var: [v1, v2]}."""
    out: dict[str, list] = {}
    issues = []
    for item in items:
        name, _, values = item.partition("=")
        vals = [coerce_value(v.strip()) for v in values.split(",") if v.strip()]
        if not name.strip() or not vals:
            issues.append(Issue(flag, item, "name=value1,value2,... (a playbook variable and its values)"))
        elif name.strip() in out:
            issues.append(Issue(flag, item, f"each variable swept once ({name.strip()} is twice)"))
        else:
            out[name.strip()] = vals
    if issues:
        raise InvalidInput(flag, "options", issues)
    return out


def axis(value: str, flag: str) -> tuple[str, list]:
    """A phase map's ``--x``/``--y``: VAR=V1,V2,... as (variable, values)."""
    (name, values), = parse_sweeps([value], flag).items()
    return name, values


def say_if_not_compiled() -> None:
    """Before a command plays worlds: why the compiled kernels are not in use, if they are
    not (a run is then several times slower, and nothing else would say why)."""
    from agents.compiled import why_not_compiled

    why = why_not_compiled()
    if why:
        click.echo(f"note: compiled kernels are not in use ({why}): runs are several times slower", err=True)
