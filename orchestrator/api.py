"""The Python API, for notebooks and scripts: ``orchestrator.run``, ``compare``, ``fork``,
``check`` and ``serve``, each doing what the command of its name does (``gameday run``,
``compare``, ``fork``, ``check``, ``serve``) and returning data rather than printing it.

The examples run as doctests (``tests/test_api_doctests.py``). They play the built-in
us-east-1-2015 scenario (its trigger fires at 02:19) for one to three simulated hours,
each in a few seconds.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from reports.rundir import RunData
from orchestrator.hosting.host import HostingOptions
from orchestrator.playbook.variables import Given
from orchestrator.runs.runner import RunSpec, execute
from reports.timefmt import parse_duration


def run(playbook: str = "us-east-1-2021", runbook: str | None = None, seed: int = 1, sets: dict | None = None,
        vars_file: str | None = None, out: str | Path | None = None, duration=None, tick=None,
        progress: bool = False, hosting: str = "inprocess", placement: str = "kind", address: str | None = None,
        snapshot_every: int | None = None, shards: int | None = None, attribution: bool = False) -> RunData:
    """Run a world in process (``runbook`` None: the playbook's ``historical`` runbook if
    it has one, else ``none``) and return its run data: ``metrics`` and ``events`` as
    pandas DataFrames, ``score`` as a dict, ``dir`` the run directory (a new temporary
    directory when ``out`` is not given). ``attribution``: also play the counterfactuals
    that say which action broke the loop (``attribution.json``; ``gameday run`` does by
    default).

    With nobody acting (``runbook="none"``), the storage servers' retry storm outlives its
    cause:

    >>> import orchestrator
    >>> r = orchestrator.run("us-east-1-2015", runbook="none", duration="1h")
    >>> r.score["trigger"]["clock"], r.score["loop_broken"]["reached"]
    ('02:19', False)
    >>> round(r.score["impact"]["weighted_total"], 1)
    23.8
    >>> r.metrics.loc[r.metrics["clock"].isin(["02:15", "02:45"]), ["clock", "dynamodb.success_ratio"]]
          clock  dynamodb.success_ratio
    900   02:15                1.000000
    2700  02:45                0.418759
    >>> r.events[["clock", "agent", "event"]].head(3)
          clock            agent         event
    0     02:19         triggers       trigger
    1  02:19:01  storage-servers       applied
    2     02:22       monitoring  alarm_raised
    """
    spec = RunSpec(playbook=playbook, runbook=runbook, seed=seed, sets=Given.of(sets, vars_file),
                   duration=parse_duration(duration) if duration is not None else None,
                   tick=parse_duration(tick) if tick is not None else None, shards=shards)
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="gameday-run-"))
    return execute(spec, out, progress=progress, hosting=HostingOptions(hosting, placement, address, snapshot_every),
                   attribution=attribution)


def compare(playbook: str = "us-east-1-2021", runbooks=("none", "historical"), seeds=10, sweep: dict | None = None,
            sets: dict | None = None, duration=None, tick=None, address: str | None = None, parallel: bool = True,
            progress: bool = False, max_workers: int | None = None, cache: str | None = None, time_limit=None,
            fixed: bool = False, primary: str | None = None, delta=None, alpha: float = 0.05, first_seeds: int = 3):
    """Every (runbook, seed, sweep point) as a whole world in a Ray task (``parallel``;
    on the cluster at ``address``, else a local Ray) or one by one here; returns the
    results as a pandas DataFrame, one row per run (see ``orchestrator.batch.comparison.COLUMNS``).
    ``seeds``: N (seeds 1..N) or a list; ``sweep``: {variable: [values]}, every
    combination is a sweep point. ``cache``: a directory where each run's row is kept
    and from which runs played before are taken (``orchestrator.batch.run_cache``).
    ``reports.compare_stats.summary(df)`` and ``pairs(df)`` give the statistics.
    ``time_limit`` (e.g. "5m" of wall-clock time): then no run starts, and the table
    holds seeds 1 to k, up to the first seed not every run of which was done
    (``df.attrs["partial"]`` says how many).
    Ctrl-C once every run of a seed is done raises ``ComparisonInterrupted`` (a
    KeyboardInterrupt, from ``orchestrator.batch.comparison``) whose ``table`` holds
    seeds 1 to k, as a time limit's.
    Unless ``fixed``, the comparison is a race, as ``gameday compare``'s: ``seeds`` is the
    most a runbook plays, runbooks shown worse on the ``primary`` outcome leave it, and
    ``df.attrs["race"]`` holds the decision (``reports.decide``); ``delta`` is the
    indifference amount (a number, or a duration such as "5m" for a time), ``alpha`` the
    error rate, ``first_seeds`` the seeds every runbook plays first.

    A race of two runbooks over two hours, one by one in this process (``parallel=False``):
    after the two first seeds, ``pause-early`` is named the best on impact.

    >>> import orchestrator
    >>> df = orchestrator.compare("us-east-1-2015", runbooks=["none", "pause-early"], seeds=3, first_seeds=2,
    ...                           duration="2h", parallel=False)
    >>> df[["runbook", "seed", "outcome", "impact"]]
           runbook  seed   outcome  impact
    0         none     1     stuck  58.838
    1         none     2     stuck  58.162
    2  pause-early     1  relapsed  30.065
    3  pause-early     2  relapsed  29.708
    >>> race = df.attrs["race"]["points"][0]
    >>> race["best"], [(s["runbook"], s["state"], round(s["mean"], 1)) for s in race["status"]]
    ('pause-early', [('none', 'out', 58.5), ('pause-early', 'best', 29.9)])
    """
    from orchestrator.batch.comparison import Decision
    from orchestrator.batch.comparison import compare as run_comparison

    return run_comparison(playbook, list(runbooks), seeds, sweep or {}, sets,
                          parse_duration(duration) if duration is not None else None,
                          parse_duration(tick) if tick is not None else None, address, parallel, progress,
                          max_workers=max_workers, cache=Path(cache) if cache is not None else None,
                          time_limit=parse_duration(time_limit) if time_limit is not None else None,
                          decision=Decision(primary, delta, alpha, first_seeds, sequential=not fixed))


def fork(run_dir: str | Path, at: str, runbook: str, out: str | Path | None = None) -> dict:
    """Play the run in ``run_dir`` (scripted or a live team's) again exactly up to ``at``
    (a clock time of the run), hand it to ``runbook`` (a built-in name or a file) and play
    on to the scenario's end, as ``gameday fork`` does (without its report). Returns what
    changed, as ``fork.json`` in the fork's directory holds it: ``differences``, one
    sentence (``text``) and the two values per measure; ``fork``: the fork's run directory
    (``out``, else a new temporary directory), which ``reports.rundir.load_run`` reads.

    A run in which nobody acted, taken over at 02:25 by the runbook that pauses the
    storage servers' requests early:

    >>> import orchestrator
    >>> r = orchestrator.run("us-east-1-2015", runbook="none", duration="3h")
    >>> f = orchestrator.fork(r.dir, at="02:25", runbook="pause-early")
    >>> for d in f["differences"]:
    ...     print(d["text"])
    loop broken at 03:54:11, where the original never got there
    backlog drained at 03:12:08, where the original never got there
    first customer update in neither
    impact 30.1 weighted minutes against 93.9
    """
    from orchestrator.runs.fork import fork as fork_run

    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="gameday-fork-"))
    return fork_run(Path(run_dir), at, runbook, out)


def check(playbook: str = "us-east-1-2021", runbooks=None, checks: str | None = None, seeds: int = 20,
          first_seeds: int = 3, alpha: float = 0.05, sets: dict | None = None, duration=None, tick=None,
          address: str | None = None, parallel: bool = True, progress: bool = False, max_workers: int | None = None,
          time_limit=None):
    """A CI gate, as ``gameday check``: the playbook's checks (or those of the file
    ``checks``) judged for each of ``runbooks`` (None: the one a run plays by default) over
    at most ``seeds`` seeds, each runbook stopping once every check is proven at
    ``1 - alpha``. Returns a ``orchestrator.batch.gate.GateResult``: ``checked`` (runbook,
    check, metric, threshold and ``verdict``: passed, proven, figure, confidence),
    ``seeds`` (played by each runbook) and ``failures(strict)``.

    Nobody acting, the storage servers' storm is not over within 10 minutes of the
    trigger, and two seeds prove it:

    >>> import orchestrator, pathlib, tempfile
    >>> checks = pathlib.Path(tempfile.mkdtemp()) / "checks.yaml"
    >>> _ = checks.write_text("checks: [{metric: loop_broken, threshold: max <= 10m}]")
    >>> gate = orchestrator.check("us-east-1-2015", ["none"], str(checks), seeds=5, first_seeds=2,
    ...                           duration="1h", parallel=False)
    >>> gate.seeds, [(c.check, c.verdict.passed, c.verdict.proven) for c in gate.checked]
    ({'none': 2}, [('loop_broken max <= 10m', False, True)])
    >>> gate.checked[0].verdict.figure
    '0 of 2 seeds <= 10.0 min (none got there)'
    """
    from orchestrator.batch.gate import check_gate

    return check_gate(playbook, list(runbooks) if runbooks else None, checks, seeds, first_seeds, alpha, Given.of(sets),
                      parse_duration(duration) if duration is not None else None,
                      parse_duration(tick) if tick is not None else None, address, parallel, progress, max_workers,
                      parse_duration(time_limit) if time_limit is not None else None)


def serve(teams=("red",), playbook: str = "us-east-1-2021", seed: int = 1, sets: dict | None = None,
          vars_file: str | None = None, duration=None, tick=None, speed: float | None = 60.0, out: str | Path | None = None,
          hosting: str = "inprocess", placement: str = "single", address: str | None = None, start: bool = False,
          serving=None, announce=None, reports: bool = False):
    """Host a live game day, as ``gameday serve`` does, and answer until it ends (this call
    blocks; Ctrl-C ends the game day): one world per team of ``teams``, the same scenario
    and seed for all, played at ``speed`` simulated seconds per wall second (None: as fast
    as possible). ``serving``: where (``orchestrator.live.gameday.Serving``: the consoles'
    address, the pages'; default: 127.0.0.1, ports 7700 and 7701). ``announce(game)``:
    called once the server and pages are up (``game.server.token_of("team", name)``,
    ``game.web.link(name, token)``). ``start``: start the clock at once, else the facilitator
    does (``gameday facilitate start``). ``reports``: write the after-action reports as it
    ends (each team's page links its own). Returns the session, ended (``session.dir``: its
    directory, a new temporary one when ``out`` is not given).

    Two teams, started at once and played as fast as possible for half an hour, served
    on a free port and without pages; nobody acts, so both are ranked alike:

    >>> import orchestrator
    >>> from orchestrator.live.gameday import Serving
    >>> session = orchestrator.serve(["red", "blue"], "us-east-1-2015", duration="30m", speed=None, start=True,
    ...                              serving=Serving(web=False, bind="tcp://127.0.0.1:0", linger_s=0))
    >>> session.state, session.clock_text()
    ('ended', '02:30')
    >>> [(t["rank"], t["team"], t["loop"], round(t["impact"], 1)) for t in session.scoreboard()["teams"]]
    [(1, 'red', 'not yet', 6.3), (2, 'blue', 'not yet', 6.3)]
    >>> sorted(p.name for p in (session.dir / "teams").iterdir())
    ['blue', 'red']
    """
    from orchestrator.live.gameday import GameDay, Serving
    from orchestrator.live.session import Session

    serving = serving or Serving()
    tls = serving.check()
    ports = serving.open()  # (a port in use is said before a session directory is written)
    try:
        out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="gameday-session-"))
        session = Session(out, list(teams), playbook, seed, Given.of(sets, vars_file),
                          parse_duration(duration) if duration is not None else None,
                          parse_duration(tick) if tick is not None else None, speed,
                          HostingOptions(hosting, placement, address))
    except BaseException:
        ports.close()
        raise
    GameDay(session, serving, tls, ports=ports, reports=reports).play(start=start, announce=announce or (lambda game: None))
    return session
