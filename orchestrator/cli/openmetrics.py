"""Metrics for Prometheus: ``gameday export RUN_DIR --openmetrics FILE`` (a finished run,
with its own timestamps, for ``promtool tsdb create-blocks-from openmetrics``), and the
``--metrics-port`` option of ``gameday run`` and ``gameday serve`` (the metrics of the
world, or every team's, served live while it plays). docs/how-to/prometheus.md says how to use
them."""
from __future__ import annotations

from pathlib import Path

import click

from reports.files import OutsideDirectory
from reports.openmetrics import ExportRefused, iso, write_openmetrics
from reports.rundir import BadRunDirectory, NotARunDirectory, check_run, load_run
from orchestrator.errors import GamedayError, NotFound, RunDirectoryError, WriteError, os_error_text, printable, setting

from .root import main


@main.command("export")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--openmetrics", "openmetrics", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the run's metrics to FILE as OpenMetrics text, each sample stamped with its tick's moment "
                   "(replaced whole, or left as it was).")
@click.option("--start", "start", metavar="WHEN",
              help="The real moment of the run's tick 0: an ISO 8601 date-time with its zone (2021-12-07T07:00:00Z, "
                   "2021-12-07T07:00:00-08:00), or a date (2021-12-07: at the run's start clock, UTC) [default: the "
                   "run's start clock, UTC, on the last day whose clock times it covers had all passed when it was "
                   "played].")
@click.option("--every", "every", type=click.IntRange(min=1), default=1, show_default=True, metavar="TICKS",
              help="A sample every TICKS ticks (those a multiple of it): a smaller file for a long run.")
def export_command(run_dir, openmetrics, start, every):
    """Write RUN_DIR's metrics (metrics.csv) as OpenMetrics text for Prometheus.

    A gauge family per metric (gameday_utilisation{agent="bridge",...}), the simulated
    clock (gameday_tick, gameday_simulated_clock_seconds, gameday_simulated_time_of_day_seconds)
    and gameday_run_info; empty fields (NaN) and columns that are not numbers are left out.
    Load it with `promtool tsdb create-blocks-from openmetrics FILE DATA_DIR`
    (docs/how-to/prometheus.md).
    """
    target = Path(openmetrics)
    folder = target.parent
    if not folder.is_dir():
        raise GamedayError(f"{setting('openmetrics')} {printable(openmetrics, 300)}: the folder {printable(folder, 300)} "
                           f"{'does not exist' if not folder.exists() else 'is not a folder'}; make it first, or "
                           "name a file in a folder that exists")
    try:
        run = load_run(run_dir)
        for text in check_run(run):
            click.echo(f"warning: {text}", err=True)
        incident = run.playbook.get("incident") if isinstance(run.playbook, dict) else None
        done = write_openmetrics(run, target, start=start, every=every)
    except ExportRefused as e:
        raise GamedayError(f"{setting(e.field)}: {e}") from None
    except BadRunDirectory as e:
        raise RunDirectoryError(str(e)) from None
    except NotARunDirectory as e:
        raise NotFound(str(e)) from None
    except OutsideDirectory as e:
        raise RunDirectoryError(str(e)) from None
    except OSError as e:
        raise WriteError(f"writing {target} failed: {os_error_text(e)} (it is written whole or not at all: a file "
                         "that was there is as it was)") from None
    for note in done.notes:
        click.echo(f"note: {note}", err=True)
    span = f"{iso(done.first)} to {iso(done.last)}" if done.first else "no tick"
    click.echo(f"wrote {target}: {done.samples:,} samples of {done.series:,} series in {done.families} families, "
               f"{done.ticks:,} ticks ({span}; tick 0 at {iso(done.t0)})")
    date = incident.get("date") if isinstance(incident, dict) else None
    if start is None and isinstance(date, str):
        click.echo(f"(the incident was on {printable(date, 40)}: --start {printable(date, 40)} places the run there)")
    click.echo(f"load it into Prometheus: promtool tsdb create-blocks-from openmetrics {target} DATA_DIR")


def metrics_port_option(what: str):
    """``--metrics-port PORT``: serve ``what`` to Prometheus while it plays."""
    return click.option(
        "--metrics-port", type=click.IntRange(min=0, max=65535), default=None, metavar="PORT",
        help=f"Serve {what} to Prometheus on http://127.0.0.1:PORT/metrics while it plays (0: a free port): the "
             "latest tick's values of every metric, as metrics.csv holds them (ground truth, not the observed view), "
             "and the simulated clock. Loopback only (docs/how-to/prometheus.md).")


def metrics_endpoint(port: int | None):
    """The live endpoint on ``port`` (None: none asked for), bound now (a port in use is said
    before anything is built), said on stderr, and closed when the command ends."""
    if port is None:
        return None
    from orchestrator.live.metrics_endpoint import MetricsEndpoint

    endpoint = MetricsEndpoint(port)
    click.get_current_context().call_on_close(endpoint.close)
    click.echo(f"metrics for Prometheus: {endpoint.url}", err=True)
    return endpoint
