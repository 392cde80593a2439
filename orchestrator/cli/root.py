"""The root ``gameday`` group: a user's mistake is a message and exit code 2, never a traceback."""
from __future__ import annotations

import sys

import click

from orchestrator.errors import GamedayError, os_error_text, speaking

from .options import vocabulary

CONTEXT = {"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "GAMEDAY"}


def from_environment(param: click.Parameter | None, ctx: click.Context | None, args: list[str]) -> str | None:
    """The environment variable a bad value of ``param`` came from (``auto_envvar_prefix``),
    or None where the command line (``args``, the command's own) gave it or none is set."""
    if not isinstance(param, click.Option) or ctx is None or param.resolve_envvar_value(ctx) is None:
        return None
    for a in args:
        if a == "--":
            break
        for opt in param.opts + param.secondary_opts:
            if a == opt or a.startswith(opt + "=") or (not opt.startswith("--") and a.startswith(opt)):
                return None
    return param.envvar or f"{ctx.auto_envvar_prefix}_{param.name.upper()}"


class NamesTheEnvironment:
    """A command whose bad option value read from the environment (``GAMEDAY_RUN_SEED=abc``)
    says which variable it came from: click names only the option."""

    def parse_args(self, ctx, args):
        given = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.BadParameter as e:
            name = from_environment(e.param, e.ctx or ctx, given)
            if name:
                e.param_hint = f"{e.param.get_error_hint(e.ctx or ctx)} (from the environment variable {name})"
            raise


class GamedayCommand(NamesTheEnvironment, click.Command):
    """Every gameday command: the errors below it name the settings as its flags."""

    def invoke(self, ctx):
        with speaking(vocabulary(self)):
            return super().invoke(ctx)


class GamedayGroup(NamesTheEnvironment, click.Group):
    """Turns the project's own errors into a message and exit code 2, never a traceback."""

    command_class = GamedayCommand
    group_class = type  # its sub-groups are GamedayGroups too

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except GamedayError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)
        except OSError as e:  # (an I/O error no command said in its own words: still a message, not a traceback)
            click.echo(f"error: an I/O error stopped gameday: {os_error_text(e)}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=GamedayGroup, context_settings=CONTEXT)
@click.version_option(package_name="gameday")
def main():
    """Chaos game days for feedback-loop outages: simulate, respond, score, report."""
