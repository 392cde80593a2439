"""The root ``gameday`` group: a user's mistake is a message and exit code 2, never a traceback."""
from __future__ import annotations

import sys

import click

from orchestrator.errors import GamedayError

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


@click.group(cls=GamedayGroup, context_settings=CONTEXT)
@click.version_option(package_name="gameday")
def main():
    """Chaos game days for feedback-loop outages: simulate, respond, score, report."""
