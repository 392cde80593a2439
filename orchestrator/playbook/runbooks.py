"""Loading a runbook against its playbook: its fields, then each rule's conditions and actions."""
from __future__ import annotations

import re


from orchestrator.errors import InvalidRunbook, Issue, NotFound
from orchestrator.playbook.format import EMPTY_RUNBOOK, RUNBOOK
from orchestrator.playbook.schema import check
from orchestrator.playbook.files import find_runbook, read_text
from orchestrator.playbook.yaml_text import parse_yaml
from orchestrator.playbook.rules import check_rules
from orchestrator.playbook.loader import Playbook


def load_runbook(ref: str, playbook: Playbook) -> tuple[str, dict]:
    """Returns (yaml text, validated runbook). ``none`` is the built-in empty runbook."""
    try:
        path = find_runbook(ref, playbook.name, playbook.source)
    except NotFound:
        if ref != "none":
            raise
        # every playbook has the empty runbook, whether or not it ships a none.yaml
        return EMPTY_RUNBOOK, {"name": "none", "description": "Nobody acts.", "rules": []}
    text = read_text(path, InvalidRunbook)
    doc = parse_yaml(text, str(path), InvalidRunbook)
    issues: list[Issue] = []
    rb = check(doc, RUNBOOK, "", issues)
    if isinstance(rb, dict) and isinstance(rb.get("rules"), list):
        check_rules(rb["rules"], playbook.data, playbook.name, issues)  # with the field errors, so one pass reports everything
    if issues:  # rule by rule, as the file reads (the field errors came first)
        rule = lambda i: int(m.group(1)) if (m := re.match(r"rules\[(\d+)\]", i.location)) else -1  # noqa: E731
        raise InvalidRunbook(str(path), "validate", sorted(issues, key=rule))
    return text, rb


