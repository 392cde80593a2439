"""``gameday check``: a CI gate on a playbook's checks (``batch.gate``), with a JUnit report."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from orchestrator.errors import GamedayError, WriteError, os_error_text, printable, setting
from reports.decide import DEFAULT_ALPHA, DEFAULT_FIRST
from reports.files import write_atomic

from .options import (many_runs_options, playbook_argument, progress_option, say_if_not_compiled, time_limit_option,
                      variables)
from .root import main

#: the exit codes of a gate, as CI reads them (bad input exits 2, as every command's)
PASSED, FAILED = 0, 1


@main.command("check")
@playbook_argument
@click.option("--runbook", "-r", "runbooks", multiple=True,
              help="A runbook the checks hold (repeatable): a built-in name or a YAML file [default: the playbook's "
                   "'historical' runbook if it has one, else 'none'].")
@click.option("--checks", "checks_file", type=click.Path(dir_okay=False), metavar="FILE",
              help="A YAML file of checks (a `checks:` section, as a playbook's) [default: the playbook's checks].")
@click.option("--seeds", type=click.IntRange(min=1), default=20, show_default=True,
              help="The most seeds (1..N) a runbook plays; it stops earlier once every check is proven.")
@click.option("--first-seeds", "first_seeds", type=click.IntRange(min=1), default=DEFAULT_FIRST, show_default=True,
              help="Seeds every runbook plays before any check may stop it.")
@click.option("--alpha", type=click.FloatRange(0, 0.5, min_open=True), default=DEFAULT_ALPHA, show_default=True,
              help="The error rate: a verdict said proven is wrong with probability at most alpha.")
@click.option("--strict", is_flag=True, help="A check whose verdict is not proven by the last seed fails too.")
@click.option("--junit", "junit", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the checks as JUnit XML (one test case per check and runbook), for CI.")
@many_runs_options
@time_limit_option
@progress_option
def check_command(playbook, runbooks, checks_file, seeds, first_seeds, alpha, strict, junit, sets, vars_file, duration,
                  tick, address, workers, serial, time_limit, progress):
    """Gate on PLAYBOOK's checks: thresholds on the score over seeds, as k6 writes them.

    Each check bounds one measure of the runs over the seeds: `p(90) <= 30m` on
    loop_broken holds when at least 90% of the seeds break the loop within 30 minutes of
    the trigger (the playbook reference lists every measure and aggregate). Every runbook
    plays --first-seeds seeds, then one more seed at a time while a check is not yet
    proven at 1 - alpha, up to --seeds. Prints each check with its figure and confidence,
    writes --junit, and exits 0 when every check passes, 1 when one fails (with
    --strict, or is not proven), 2 on bad input (nothing is played then).
    """
    from orchestrator.batch.gate import check_gate

    if junit is not None and not Path(junit).resolve().parent.is_dir():
        raise GamedayError(f"{setting('junit')} {printable(junit, 300)}: its folder does not exist; make it first, or "
                           "name a file in a folder that exists")
    say_if_not_compiled()
    began = time.monotonic()
    result = check_gate(playbook, list(runbooks) or None, checks_file, seeds, first_seeds, alpha,
                        variables(sets, vars_file), duration, tick, address, parallel=not serial, progress=progress,
                        max_workers=workers, time_limit=time_limit)
    for line in gate_lines(result, strict):
        click.echo(line)
    if junit is not None:
        from reports.junit import junit_xml

        try:
            write_atomic(Path(junit), junit_xml(result.playbook, result.checked, strict, result.seeds,
                                                time.monotonic() - began))
        except OSError as e:
            raise WriteError(f"writing {junit} failed: {os_error_text(e)}") from None
        click.echo(f"junit: {junit}")
    sys.exit(FAILED if result.failures(strict) else PASSED)


def gate_lines(result, strict: bool) -> list[str]:
    """What the gate prints: per runbook, each check's verdict, figure and confidence; then
    the outcome."""
    lines = []
    for runbook, n in result.seeds.items():
        lines.append(f"runbook {runbook}: {n} of at most {result.most_seeds} seeds")
        for c in (c for c in result.checked if c.runbook == runbook):
            v = c.verdict
            mark = "FAIL" if c.failed(strict) else "pass"
            said = f"{c.metric} {c.threshold}"
            lines.append(f"  {mark}  {c.check}" + (f": {said}" if c.check != said else ""))
            lines.append(f"        {v.figure}; {v.confidence}")
    if result.partial:
        lines.append(f"{result.partial}: judged on the seeds played")
    failed = result.failures(strict)
    lines.append(f"{len(result.checked) - len(failed)} of {len(result.checked)} checks passed"
                 + (f"; failed: {', '.join(f'{c.check} ({c.runbook})' for c in failed)}" if failed else "")
                 + f" (a verdict said proven is wrong with probability at most {result.alpha:g}, over {result.looks} "
                   f"look{'s' if result.looks != 1 else ''})")
    return lines
