"""A CI gate (``gameday check``): the runs a playbook's checks need, played seed by seed
through the comparison's machinery (``comparison.compare`` with a refinement), each
runbook stopping as soon as every one of its checks is proven either way, and each check
judged (``reports.gate``) with how sure its verdict is.

Every runbook plays ``first`` seeds; then, seed by seed, those with a check not yet proven
play one more, up to ``seeds``. Each look after a seed (from the first stage's on) spends
``alpha / looks`` (Bonferroni over the looks it may make), so a proven verdict is wrong
with probability at most ``alpha`` however early its runbook stopped."""
from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.batch.comparison import ComparisonInterrupted, Point, compare
from orchestrator.errors import InvalidInput, Issue, setting
from orchestrator.playbook.loader import load_playbook
from orchestrator.playbook.thresholds import check_name, load_checks
from orchestrator.playbook.variables import Given
from orchestrator.runs.runner import default_runbook
from reports.decide import DEFAULT_ALPHA, DEFAULT_FIRST
from reports.gate import Verdict, judge, par_seconds, parse_threshold


@dataclass(frozen=True)
class Checked:
    """One check of one runbook, judged."""

    runbook: str  # its name (its ``name:``)
    check: str  # what the check is called (``check_name``)
    metric: str
    threshold: str
    verdict: Verdict

    def failed(self, strict: bool = False) -> bool:
        """Whether it fails the gate (``strict``: a verdict not proven fails too)."""
        return not self.verdict.passed or (strict and not self.verdict.proven)


@dataclass
class GateResult:
    """Every check of every runbook, judged on the seeds each runbook played."""

    playbook: str
    checked: list[Checked]
    seeds: dict[str, int]  # runbook -> seeds played
    most_seeds: int
    alpha: float
    looks: int
    partial: str | None = None  # why it stopped before every check was proven or every seed played
    runs: object = field(default=None, repr=False)  # the results table (pandas), one row a run

    def failures(self, strict: bool = False) -> list[Checked]:
        return [c for c in self.checked if c.failed(strict)]


class _Sequential:
    """The refinement ``compare`` plays round by round: the first stage, then one more seed
    for each runbook that has a check not yet proven."""

    def __init__(self, runbooks: list[str], seeds: list[int], first: int, judge_all):
        self.runbooks, self.seeds, self.first, self.judge_all = runbooks, seeds, min(first, len(seeds)), judge_all

    def __call__(self, points: list[Point], rows: list) -> list[int]:
        index = {(p.runbook, p.seed): i for i, p in enumerate(points)}
        todo = []
        for rb in self.runbooks:
            played = [rows[index[(rb, s)]] for s in self.seeds if rows[index[(rb, s)]] is not None]
            if len(played) < self.first:
                todo += [index[(rb, s)] for s in self.seeds[len(played):self.first]]
                continue
            if len(played) < len(self.seeds) and not all(v.proven for v in self.judge_all(played)):
                todo.append(index[(rb, self.seeds[len(played)])])
        return todo


def check_gate(playbook: str, runbooks: list[str] | None = None, checks_file: str | None = None, seeds: int = 20,
               first: int = DEFAULT_FIRST, alpha: float = DEFAULT_ALPHA, sets: Given | dict | None = None,
               duration: float | None = None, tick: float | None = None, address: str | None = None,
               parallel: bool = True, progress: bool = False, max_workers: int | None = None,
               time_limit: float | None = None) -> GateResult:
    """Judge the checks (the playbook's ``checks``, or ``checks_file``'s) of each runbook
    (None: the one a run plays by default) over at most ``seeds`` seeds, sequentially.
    Bad input raises ``InvalidInput`` before any run; Ctrl-C raises KeyboardInterrupt."""
    sets = Given.of(sets)
    pb = load_playbook(playbook, sets)
    checks = load_checks(checks_file, pb.data) if checks_file else pb.data["checks"]
    if not checks:
        raise InvalidInput("gameday check", "options", [Issue(
            setting("checks_file"), "none", f"checks: the playbook {pb.name} declares none (its checks section), so "
                                            "give a file of them")])
    runbooks = list(runbooks or [default_runbook(pb)])
    looks = max(1, seeds - min(first, seeds) + 1)
    start_s, par = float(pb.data["clock"]["start"]), pb.data["par"]
    parsed = [(c, parse_threshold(c["threshold"], c["metric"])) for c in checks]

    def judge_all(rows: list[dict]) -> list[Verdict]:
        return [judge(rows, c["metric"], th, alpha, par_seconds(par, c["metric"]), start_s, looks) for c, th in parsed]

    order = list(range(1, seeds + 1))
    sequential = _Sequential(runbooks, order, first, judge_all)
    try:
        df = compare(playbook, runbooks, order, sets=sets, duration=duration, tick=tick, address=address,
                     parallel=parallel, progress=progress, max_workers=max_workers, time_limit=time_limit,
                     refine=sequential)
    except ComparisonInterrupted:
        raise KeyboardInterrupt from None
    checked, played = [], {}
    for rb in runbooks:
        name = df.attrs["names"][rb]
        rows = df[df["runbook"] == name].sort_values("seed").to_dict("records")
        played[name] = len(rows)
        for (c, _), v in zip(parsed, judge_all(rows)):
            checked.append(Checked(name, check_name(c), c["metric"], c["threshold"], v))
    return GateResult(df.attrs["playbook"], checked, played, seeds, alpha, looks, df.attrs.get("partial"), df)

