"""The project's exception tree. Anything a user can get wrong raises one of these,
and the CLI turns it into a message and exit code 2, never a traceback."""
from __future__ import annotations

import contextlib
import contextvars
import difflib
import re
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


_WORD_BREAK = re.compile(r"[-_.\s/]+")


def _words(name: str) -> list[str]:
    return [w for w in _WORD_BREAK.split(name.lower()) if w]


def _named_in(value: str, name: str) -> bool:
    """``value``'s words are words of ``name``, in a row (shed in shed_load, not in unshed)."""
    v, n = _words(value), _words(name)
    return bool(v) and any(n[i:i + len(v)] == v for i in range(len(n) - len(v) + 1))


def _guesses(value, known) -> list[str]:
    """The names ``value`` is probably a short or misspelt form of: the names it is a word or
    words of (a name cut short; a whole word matters more than letters in common: "shed" is
    not "unshed", its opposite) after one a letter or so off (similarity >= 0.85), else the
    one most like it (difflib's similarity >= 0.6)."""
    value, known = str(value), [str(k) for k in known]
    if value in known:  # (a known name is not a misspelling of another)
        return []
    typo = difflib.get_close_matches(value, known, n=1, cutoff=0.85)  # a letter off: devices for device
    named = [k for k in known if _named_in(value, k) and k not in typo]
    if typo or named:
        return typo + named
    return difflib.get_close_matches(value, known, n=1)


def nearest(value, known) -> str | None:
    """The known name most like ``value`` if one is near enough to be what was meant (a
    name cut short to whole words of it, or a misspelling), else None; with several such
    names, the first in ``known``'s order."""
    guesses = _guesses(value, known)
    return guesses[0] if guesses else None


def closest_first(value, known) -> str:
    """The known names for an error message, those most like ``value`` first, and a guess
    if ``value`` looks like a short or misspelt form of one or more of them ("X, Y, ...;
    did you mean X?"); "none" if there are none."""
    known = sorted(set(map(str, known)))
    if not known:
        return "none"
    guesses = _guesses(value, known) if len(known) > 1 else []  # (one name: the list is the guess)
    by_likeness = difflib.get_close_matches(str(value), known, n=len(known), cutoff=0.0)
    listed = ", ".join([*guesses, *(k for k in by_likeness if k not in guesses)])
    return listed if not guesses else f"{listed}; did you mean {' or '.join(guesses[:3])}?"


#: how errors name the settings a caller gave (field -> words): none, the Python API's keyword
#: names; a front end says how its users typed them (the CLI: its flags) with ``speaking``
_VOCABULARY: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("vocabulary", default={})


@contextlib.contextmanager
def speaking(vocabulary: dict[str, str]):
    """Inside the block, ``setting`` names a field as ``vocabulary`` says (field -> words),
    and one item of a field as it says under "FIELD ITEM" if it does (a phase map says its
    swept variables as its axes), over what was spoken before."""
    token = _VOCABULARY.set({**_VOCABULARY.get(), **vocabulary})
    try:
        yield
    finally:
        _VOCABULARY.reset(token)


def setting(field: str, item: str | None = None) -> str:
    """How an error names a setting the caller gave, or one ``item`` of it: by the API's
    keyword (``tick``, ``sets['clients']``), or as the front end speaking says (``--tick``,
    ``--set clients``). Modules below the CLI name settings only through this."""
    vocabulary = _VOCABULARY.get()
    if item is not None and f"{field} {item}" in vocabulary:
        return vocabulary[f"{field} {item}"]
    words = vocabulary.get(field)
    if words is None:
        return field if item is None else f"{field}[{item!r}]"
    return words if item is None else f"{words} {item}"


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
