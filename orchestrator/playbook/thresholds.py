"""The checks on the score a CI gate holds a playbook to (``gameday check``): its own
``checks`` section, or a file beside it with that section alone (``--checks FILE``), read
and checked as the playbook is (each threshold's grammar is reports.gate's; a ``par`` must
be one the playbook gives)."""
from __future__ import annotations

from pathlib import Path

from orchestrator.errors import InvalidInput, Issue
from orchestrator.playbook.files import read_text
from orchestrator.playbook.format import CHECKS_FILE
from orchestrator.playbook.schema import check
from orchestrator.playbook.yaml_text import parse_yaml


class InvalidChecks(InvalidInput):
    """A checks file that cannot be used."""


def threshold_issues(checks: list[dict], where: str, data: dict) -> list[Issue]:
    """Each check's threshold read as reports.gate reads it, against the playbook ``data``:
    its grammar; a par the playbook gives; a backlog it scores."""
    from reports.gate import METRICS, BadThreshold, parse_threshold

    out = []
    for i, c in enumerate(checks):
        if c.get("metric") not in METRICS:  # (its field's error says so)
            continue
        loc = f"{where}[{i}].threshold"
        try:
            th = parse_threshold(c["threshold"], c["metric"])
        except BadThreshold as e:
            out.append(Issue(loc, c["threshold"], str(e)))
            continue
        if th.par and c["metric"] not in data["par"]:
            out.append(Issue(loc, c["threshold"], f"a par for {c['metric']} in the playbook's par (it has "
                                                  f"{', '.join(data['par']) or 'none'}), or a duration"))
        backlog = data["scoring"]["backlog"]
        if c["metric"] == "backlog_drained" and not backlog.get("populations") and not backlog.get("services"):
            out.append(Issue(f"{where}[{i}].metric", c["metric"], "a measure the playbook scores (its "
                                                                  "scoring.backlog names no backlog)"))
    return out


def load_checks(path: str | Path, data: dict) -> list[dict]:
    """The checks of the file ``path``, validated against the playbook ``data``."""
    text = read_text(Path(path), InvalidChecks)
    doc = parse_yaml(text, str(path), InvalidChecks)
    issues: list[Issue] = []
    checked = check(doc, CHECKS_FILE, "", issues)
    if not issues:
        issues += threshold_issues(checked["checks"], "checks", data)
    if issues:
        raise InvalidChecks(str(path), "validate", issues)
    return checked["checks"]


def check_name(c: dict) -> str:
    """What a check is called: its name, else its metric and threshold."""
    return c.get("name") or f"{c['metric']} {c['threshold']}"
