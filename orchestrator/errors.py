"""The project's exception tree. Anything a user can get wrong raises one of these,
and the CLI turns it into a message and exit code 2, never a traceback."""
from __future__ import annotations

import contextlib
import contextvars
import difflib
import itertools
import math
import re
import reprlib
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
        return f"{printable(self.location, 200, lines=False)}: got {shown(self.value)}; expected {printable(self.expected, 2000)}"


#: every control character (C0 with ESC, DEL, C1) -> its escape, as Python writes it
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]} | {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_ESCAPES_BUT_LINES = {c: e for c, e in _ESCAPES.items() if c not in (0x09, 0x0A)}


def printable(text, most: int | None = None, lines: bool = True) -> str:
    """``text`` (from a file someone else wrote, a client, a playbook) safe to print on a
    terminal: every control character (C0, DEL, C1, and so ESC: a sequence could move the
    cursor, retitle the window or rewrite what was shown) written as its escape; newlines
    and tabs too unless ``lines`` (so that a name cannot pass for a line of its own); at
    most ``most`` characters. Escaping twice changes nothing more."""
    text = str(text)
    if most is not None and len(text) > most:
        text = text[:most - 3] + "..."
    return text.translate(_ESCAPES_BUT_LINES if lines else _ESCAPES)


class _Bounded(reprlib.Repr):
    """A value's repr that reads only a bounded part of it: a "billion laughs" list nests
    nine aliases nine deep, a value may be a 50 MB string or a 5,000-digit integer."""

    def __init__(self):
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict, self.maxset = 2, 4, 4, 4, 4
        self.maxstring, self.maxother, self.maxlong = 80, 80, 40

    def repr_dict(self, x, level):  # (in the order written: reprlib sorts the keys)
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        items = [f"{self.repr1(k, level - 1)}: {self.repr1(v, level - 1)}" for k, v in itertools.islice(x.items(), self.maxdict)]
        return "{" + ", ".join(items) + (", ..." if len(x) > self.maxdict else "") + "}"

    def repr_int(self, x, level):
        if x.bit_length() > 128:  # (repr of an integer of over 4,300 digits raises, and is no use)
            return f"<an integer of about {int(x.bit_length() * math.log10(2)) + 1} digits>"
        return super().repr_int(x, level)


_BOUNDED = _Bounded()
SHOWN_CHARS = 80


def shown(value) -> str:
    """``value`` as an error message shows it: its repr (control characters escaped), read
    only as far as it is shown, at most SHOWN_CHARS characters; "nothing" for None (a field
    left out, or YAML's null)."""
    if value is None:
        return "nothing"
    text = _BOUNDED.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


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
        lines = [f"{printable(source, 300)}: {n} error{'s' if n != 1 else ''} ({stage})"]
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


class DirectoryInUse(RunDirectoryError):
    """Another live process is writing the run's or comparison's directory asked for (it
    holds the directory's lock): refused at once, never mixed."""


class WriteError(RunDirectoryError):
    """A file of a run's or comparison's directory could not be written (a full disk, a
    lost mount, a permission changed): not the user's input, so exit code 1; the message
    names the file and the system's error, and says what was left readable."""

    exit_code = 1


def os_error_text(e: OSError) -> str:
    """An OSError as a person reads it: the file, then the system's words ("runs/x/meta.json:
    No space left on device"); Python's own text when it has no number."""
    what = e.strerror or str(e)
    return f"{e.filename}: {what}" if e.filename else what
