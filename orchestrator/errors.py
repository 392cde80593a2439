"""The project's exception tree. Anything a user can get wrong raises one of these,
and the CLI turns it into a message and exit code 2, never a traceback."""
from __future__ import annotations

import difflib
from dataclasses import dataclass


class GamedayError(Exception):
    """Base of every error the CLI reports as a user mistake."""

    exit_code = 2


@dataclass
class Issue:
    location: str
    value: object
    expected: str

    def __str__(self) -> str:
        shown = "nothing" if self.value is None else repr(self.value)  # a field left out, or YAML's null
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return f"{self.location}: got {shown}; expected {self.expected}"


def nearest(value, known) -> str | None:
    """The known name most like ``value`` if one is near enough to be what was meant (a
    misspelling: difflib's similarity of at least 0.6), else None."""
    close = difflib.get_close_matches(str(value), [str(k) for k in known], n=1)
    return close[0] if close and close[0] != str(value) else None


def closest_first(value, known) -> str:
    """The known names for an error message, those most like ``value`` first, and a guess
    if ``value`` looks like a misspelling of one of several ("X, Y, ...; did you mean X?");
    "none" if there are none."""
    known = sorted(set(map(str, known)))
    if not known:
        return "none"
    listed = ", ".join(difflib.get_close_matches(str(value), known, n=len(known), cutoff=0.0))
    near = nearest(value, known) if len(known) > 1 else None  # (one name: the list is the guess)
    return listed if near is None else f"{listed}; did you mean {near}?"


class InvalidInput(GamedayError):
    """A playbook, runbook, variable or option that cannot be used; lists every issue found."""

    def __init__(self, source: str, stage: str, issues: list[Issue]):
        self.source, self.stage, self.issues = source, stage, issues
        n = len(issues)
        lines = [f"{source}: {n} error{'s' if n != 1 else ''} ({stage})"]
        lines += [f"  {i}" for i in issues]
        super().__init__("\n".join(lines))


class InvalidPlaybook(InvalidInput):
    pass


class InvalidRunbook(InvalidInput):
    pass


class NotFound(GamedayError):
    pass


class RunDirectoryError(GamedayError):
    pass


class HostingError(GamedayError):
    """The multi-process machinery failed (a host lost beyond replacement, no answer in
    time): not the user's mistake, so exit code 1, but a message rather than a traceback."""

    exit_code = 1


class InternalError(GamedayError):
    """A bug in gameday surfaced during a run (never the user's input, which is checked
    before): a message naming the run directory left readable, exit code 1, the traceback
    kept in the directory's error.txt rather than on the terminal."""

    exit_code = 1
