"""``gameday playbooks new``: the way a user starts a playbook of their own system.

It writes NAME.yaml.j2 and its runbooks in the layout the built-ins use
(``runbooks/NAME/*.yaml`` beside the playbook, found by name), copied from the starter
(a small retry storm with ``none`` and ``historical``) or from a built-in playbook, and
checks that what it wrote validates.
"""
from __future__ import annotations

import re
from pathlib import Path

from orchestrator.errors import GamedayError, InvalidInput, Issue, setting
from orchestrator.playbook.files import builtin_dir, builtin_playbooks, read_text, runbook_files
from orchestrator.playbook.loader import load_playbook
from orchestrator.playbook.runbooks import load_runbook

STARTER = "starter"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_NAME_LINE = re.compile(r"^name:\s*\S.*$", re.MULTILINE)


def starter_path() -> Path:
    return builtin_dir() / "templates" / f"{STARTER}.yaml.j2"


def origins() -> list[str]:
    """What a new playbook can start from: the starter or a built-in playbook."""
    return [STARTER, *builtin_playbooks()]


def new_playbook(name: str, origin: str = STARTER, directory: str | Path = ".") -> list[Path]:
    """Writes the playbook and its runbooks; returns the files written. Nothing is written
    if a file would be overwritten or the name is unusable."""
    if not NAME_PATTERN.match(name):
        raise InvalidInput("playbooks new", "arguments", [Issue("NAME", name, "letters, digits, '-', '_' or '.', "
                                                                              "starting with a letter or digit")])
    if origin not in origins():
        raise InvalidInput("playbooks new", "arguments", [Issue(setting("origin"), origin, "one of " + ", ".join(origins()))])
    source = starter_path() if origin == STARTER else builtin_dir() / f"{origin}.yaml.j2"
    text = read_text(source, InvalidInput)
    if not _NAME_LINE.search(text):  # a built-in whose name line this cannot find is a bug here, not the user's
        raise GamedayError(f"{source}: no top-level 'name:' line to rename")
    text = _NAME_LINE.sub(f"name: {name}", text, count=1)
    runbooks = runbook_files(origin, source)
    directory = Path(directory)
    target = directory / f"{name}.yaml.j2"
    written = {target: text}
    for rb, path in sorted(runbooks.items()):
        written[directory / "runbooks" / name / f"{rb}.yaml"] = read_text(path, InvalidInput)
    existing = [str(p) for p in written if p.exists()]
    if existing:
        raise InvalidInput("playbooks new", "arguments",
                           [Issue("NAME", name, f"a name whose files do not exist yet (already there: {', '.join(existing)})")])
    for path, content in written.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    pb = load_playbook(str(target))
    for rb in runbooks:
        load_runbook(rb, pb)
    return list(written)
