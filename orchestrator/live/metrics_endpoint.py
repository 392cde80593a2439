"""The metrics of worlds being played, served to Prometheus while they play: a paced run's
world (``gameday run --speed 60 --metrics-port 9400``) or every team's world of a live
session (``gameday serve --metrics-port 9400``), on ``http://127.0.0.1:PORT/metrics``.

prometheus_client serves them (both text formats, by the scraper's Accept header); a
custom collector reads, at each scrape, the last tick each world finished (``WorldRun.latest``:
its tick and its metrics as journalled, one reference taken once, so that a scrape's
values and its clock are of one tick) and nothing is copied per tick. The families, labels
and values are ``reports/openmetrics.py``'s, as ``gameday export`` writes them: a run
scraped live and the same run backfilled answer one query alike (the scrape adds
Prometheus' ``job`` and ``instance``).

What is served is the ground truth of each world, as metrics.csv holds it, not the
team's observed view: the endpoint binds loopback only (127.0.0.1) and asks no token, so
only this machine reads it (a facilitator's Prometheus, or one reached through an SSH
tunnel); a team that could read it would see through its blind monitoring.
"""
from __future__ import annotations

import errno

from reports import openmetrics as om
from orchestrator.errors import GamedayError, setting

#: where the endpoint listens: loopback only (the module's docstring says why)
HOST = "127.0.0.1"


class Watched:
    """One world as the collector reads it: its run (``runs.runner.WorldRun``), its labels
    and its families, worked out once."""

    def __init__(self, run):
        meta = run.writer.meta
        self.run = run
        self.labels = om.run_labels(meta, run.dir)
        self.info = om.info_labels(meta, run.dir)
        self.dt, self.start_s = run.plan.info.dt, run.plan.info.start_s
        self.families, _ = om.layout([f"{a}.{m}" for a, m in run.plan.columns()], run.plan.metric_info)
        #: column -> (agent, metric), for reading a tick's metrics
        self.where = {c: tuple(c.split(".", 1)) for f in self.families for c, _ in f.series}


class WorldsCollector:
    """A prometheus_client collector of the worlds watched (``Watched``): a gauge family
    per metric, the clock's families and ``gameday_run_info``, each world's at the last
    tick it finished (none before its first)."""

    def __init__(self):
        self.worlds: list[Watched] = []

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily

        now = [(w, w.run.latest) for w in list(self.worlds)]  # (one read a world: its tick and values together)
        now = [(w, latest) for w, latest in now if latest is not None]
        keys = [k for k in om.RUN_LABELS if any(k in w.labels for w, _ in now)]
        names = [*keys, *om.SERIES_LABELS]
        gauges: dict[str, GaugeMetricFamily] = {}
        for w, (tick, metrics) in now:
            run = [w.labels.get(k, "") for k in keys]
            for fam in w.families:
                g = gauges.get(fam.name)
                if g is None:
                    g = gauges[fam.name] = GaugeMetricFamily(fam.name, fam.help, labels=names)
                for column, own in fam.series:
                    agent, metric = w.where[column]
                    v = om.value((metrics.get(agent) or {}).get(metric))
                    if v is not None:
                        g.add_metric(run + [own.get(k, "") for k in om.SERIES_LABELS], v)
        yield from gauges.values()
        clock = {name: GaugeMetricFamily(name, om.CLOCK_HELP[name], labels=keys) for name in om.CLOCK_HELP}
        info_keys = list(dict.fromkeys(k for w, _ in now for k in w.info))
        info = InfoMetricFamily(om.RUN_INFO, om.RUN_INFO_HELP, labels=[])
        for w, (tick, _) in now:
            run = [w.labels.get(k, "") for k in keys]
            elapsed = om.value(tick * w.dt)  # (as metrics.csv's time_s holds it)
            clock[om.TICK].add_metric(run, float(tick))
            clock[om.CLOCK_S].add_metric(run, elapsed)
            clock[om.TIME_OF_DAY_S].add_metric(run, w.start_s + elapsed)
            info.add_metric([], {k: w.info.get(k, "") for k in info_keys})
        yield from clock.values()
        yield info


class MetricsEndpoint:
    """prometheus_client's HTTP server on HOST, ``port`` (0: a free one), serving the worlds
    it is told to watch; bound when made, so that a port in use is said before any world
    is built. ``close`` stops it."""

    def __init__(self, port: int):
        from prometheus_client import CollectorRegistry, start_http_server

        self.collector = WorldsCollector()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        try:
            self.server, self.thread = start_http_server(port, addr=HOST, registry=registry)
        except OSError as e:
            hint = (f"; pass another {setting('metrics_port')} (0 picks a free one)"
                    if e.errno == errno.EADDRINUSE else "")
            raise GamedayError(f"cannot serve the metrics on {HOST}:{port}: {e.strerror or e}{hint}") from None
        self.port = self.server.server_port
        self.url = f"http://{HOST}:{self.port}/metrics"

    def watch(self, run) -> None:
        """Serve ``run``'s world (a ``WorldRun``) from now on."""
        self.collector.worlds.append(Watched(run))

    def watch_session(self, session) -> None:
        """Serve every team's world of ``session`` (a ``live.session.Session``)."""
        for team in session.teams.values():
            self.watch(team.run)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

