"""The root ``gameday`` group: a user's mistake is a message and exit code 2, never a traceback."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading

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


@contextlib.contextmanager
def interrupt_deferred():
    """Ctrl-C inside the block takes effect at its end (KeyboardInterrupt): for writing
    what a first Ctrl-C saved, which a second one would leave half-written."""
    if threading.current_thread() is not threading.main_thread():  # (signals reach the main thread only)
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


@click.group(cls=GamedayGroup, context_settings=CONTEXT)
@click.version_option(package_name="gameday")
def main():
    """Chaos game days for feedback-loop outages: simulate, respond, score, report."""
