"""A comparison's cache of runs: each run's row of the results table, kept under a key
made of everything that decides the run, so that comparing again (a runbook changed or
added, more seeds) plays only the runs it has not played before.

A run is decided by the rendered playbook (variables and sweep values are in it), the
runbook's text, the seed, the duration and the tick, and by the code that plays it:
gameday's own files, numpy (whose algorithms make the draws), Python and the machine's
architecture. All of them are in the key, so a changed model or a changed playbook
never reads an old row: it plays the run again. An entry is written whole (a temporary
file renamed) or not at all, and one that cannot be read is played again.
"""
from __future__ import annotations

import functools
import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np

from orchestrator.errors import shown
from reports import rundir
from reports.files import write_atomic

#: the packages whose files decide a run's result (the built-in playbooks are among them)
CODE_PACKAGES = ("agents", "orchestrator", "reports", "playbooks")
_CODE_SUFFIXES = (".py", ".j2", ".yaml", ".yml", ".json")


@functools.cache
def code_digest() -> str:
    """A digest of the code that plays a run: gameday's files, numpy's version, Python's
    and the machine's architecture."""
    return digest_of(Path(__file__).resolve().parents[2])


def digest_of(root: Path) -> str:
    """``code_digest`` of the packages under ``root``."""
    h = hashlib.sha256()
    for package in CODE_PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.suffix in _CODE_SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(f"numpy {np.__version__}; python {sys.version}; {platform.machine()}".encode())
    return h.hexdigest()


def run_key(playbook_text: str, runbook_text: str, seed: int, duration: float | None, tick: float | None) -> str:
    """The key of one run: what decides it, and the code that plays it."""
    decided = {"playbook": playbook_text, "runbook": runbook_text, "seed": seed, "duration": duration, "tick": tick,
               "code": code_digest()}
    return hashlib.sha256(json.dumps(decided, sort_keys=True).encode()).hexdigest()


class RunCache:
    """Rows of runs in a directory, one file per key. A row is a convenience: one that does
    not hold what gameday writes is played again, and counted (``set_aside``)."""

    def __init__(self, directory: Path, columns: dict[str, type | tuple]):
        self.dir = Path(directory)
        self.columns = columns  # what a row must hold to be used: column -> its type, or the values it may have
        self.set_aside: list[str] = []  # each row found and not used: its file and why

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        """The row kept under ``key``, or None (none kept, or one not as gameday writes it:
        ``set_aside`` says which and why)."""
        path = self._path(key)
        try:  # (as a run directory's JSON file: a FIFO, a device or one over its size is never read)
            row = rundir.read_json(path.parent, path.name, "a cached row")
        except rundir.BadRunDirectory as e:
            self.set_aside.append(str(e))
            return None
        problem = None if row is None else _unlike(row, self.columns)
        if problem:
            self.set_aside.append(f"{path}: {problem}")
        return None if problem else row

    def put(self, key: str, row: dict) -> None:
        path = self._path(key)
        if path.is_symlink() or (path.exists() and not path.is_file()):
            return  # (something else is there, set aside when it was read: left as it is, never written through)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(row))  # (NaN as Python's json writes and reads it: a time never reached)


def _unlike(row, columns: dict[str, type | tuple]) -> str | None:
    """What of ``row`` is not what ``columns`` says (``rundir.unlike`` of each type, or one of
    the values a column may have), or None."""
    if not isinstance(row, dict):
        return rundir.unlike(row, dict)
    for column, kind in columns.items():
        if column not in row:
            return f"no {column}"
        if isinstance(kind, tuple):
            problem = None if row[column] in kind else f"{column} is {shown(row[column])}; expected one of {', '.join(kind)}"
        else:
            problem = rundir.unlike(row[column], kind, column)
        if problem:
            return problem
    return None
