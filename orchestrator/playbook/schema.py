"""Declarative validation that collects every problem with its location.

A schema is a tree of ``Field`` objects. ``check`` walks a parsed document, reports
each problem as an ``Issue`` (location like ``devices[1].cpu_per_device``, the
offending value, what was expected) and returns a normalised copy: defaults filled in,
durations and clock times converted to seconds.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from orchestrator import budgets
from orchestrator.errors import Issue, closest_first, nearest, printable
from orchestrator.playbook.yaml_text import Sexagesimal
from reports.timefmt import parse_clock, parse_duration

_MISSING = object()


@dataclass
class Field:
    type: str  # str, name, int, number, bool, duration, clock, list, map, dict, any
    required: bool = False
    default: Any = _MISSING
    min: float | None = None  # of a list: its fewest items
    max: float | None = None
    exclusive_min: bool = False
    choices: tuple | None = None
    item: "Field | None" = None  # for list
    fields: dict[str, "Field"] | None = None  # for map
    values: "Field | None" = None  # for dict: every value checked against this
    doc: str = ""
    unit: str = ""  # of a number: requests/s, seconds, work units ... (durations are always seconds)
    example: Any = _MISSING  # one value a playbook could give; the reference shows it
    check: Callable[[Any], str | None] | None = None  # extra rule: returns what was expected, or None


def bound_text(x: float) -> str:
    """A bound as a message says it: 0.5, 100, 1e+12; a large whole number exactly (500,000,000)."""
    return f"{int(x):,}" if float(x).is_integer() and 1e6 <= abs(x) < 1e12 else f"{x:g}"


def _expected_range(f: Field) -> str:
    parts = []
    if f.min is not None:
        parts.append(f"{'>' if f.exclusive_min else '>='} {bound_text(f.min)}")
    if f.max is not None:
        parts.append(f"<= {bound_text(f.max)}")
    return " and ".join(parts)


def _loc(base: str, key) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else str(key)


def is_duration(text) -> bool:
    """Whether ``text`` reads as a duration."""
    try:
        parse_duration(text)
    except ValueError:
        return False
    return True


def check(value: Any, spec: Field, loc: str, issues: list[Issue]) -> Any:
    t = spec.type
    if t == "any":
        _free_form(value, loc, issues)
        return value
    if t in ("number", "int", "duration"):
        if t == "duration":
            try:
                num = parse_duration(value)
            except ValueError:
                negative = isinstance(value, str) and value.strip().startswith("-") and is_duration(value.strip()[1:])
                issues.append(Issue(loc, value, ("a duration of at least 0, such as" if negative else "a duration such as")
                                    + " 30s, 15m, 2h or a number of seconds"))
                return None
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (t == "int" and not float(value).is_integer()):
                issues.append(Issue(loc, value, ("an integer" if t == "int" else "a number") + yaml_hint(value)))
                return None
            if isinstance(value, Sexagesimal):
                issues.append(Issue(loc, value, sexagesimal_wanted(value, "an integer" if t == "int" else "a number")))
                return None
            num = int(value) if t == "int" else float(value)
        if not math.isfinite(num):  # YAML's .nan and .inf pass every range check below, then break the model
            issues.append(Issue(loc, value, "a finite " + {"int": "integer", "number": "number", "duration": "duration"}[t]))
            return None
        if abs(num) > budgets.LARGEST_NUMBER:  # (the model counts in 64-bit integers and floats)
            issues.append(Issue(loc, value, LARGEST_WANTED))
            return None
        too_low = spec.min is not None and (num <= spec.min if spec.exclusive_min else num < spec.min)
        too_high = spec.max is not None and num > spec.max
        if too_low or too_high:
            kind = {"int": "an integer", "number": "a number", "duration": "a duration"}[t]
            issues.append(Issue(loc, value, f"{kind} {_expected_range(spec)}"))
            return None
        value = num
    elif t == "clock":
        try:
            value = parse_clock(value)
        except ValueError:
            issues.append(Issue(loc, value, "a clock time HH:MM or HH:MM:SS such as \"07:30\" (quoted in YAML)"))
            return None
    elif t == "bool":
        if not isinstance(value, bool):
            issues.append(Issue(loc, value, "true or false"))
            return None
    elif t == "str":
        if not isinstance(value, str) or not value.strip():
            wanted = "one of " + ", ".join(map(str, spec.choices)) if spec.choices else "a non-empty string"
            issues.append(Issue(loc, value, wanted + yaml_hint(value)))
            return None
        wanted = text_wanted(value)
        if wanted:
            issues.append(Issue(loc, value, wanted))
            return None
    elif t == "name":
        if not is_name(value):
            issues.append(Issue(loc, value, NAME_WANTED + yaml_hint(value)))
            return None
    elif t == "list":
        if not isinstance(value, list):
            issues.append(Issue(loc, value, "a list"))
            return None
        if spec.min is not None and len(value) < spec.min:
            issues.append(Issue(loc, value, f"a list of at least {spec.min:g} item{'s' if spec.min != 1 else ''}"))
            return None
        value = [check(v, spec.item, _loc(loc, i), issues) for i, v in enumerate(value)] if spec.item else value
    elif t == "map":
        if not isinstance(value, dict):
            issues.append(Issue(loc, value, "a mapping with keys " + ", ".join(spec.fields or {})))
            return None
        out = {}
        for key in value:
            if key not in (spec.fields or {}):
                known = closest_first(key, spec.fields or {})
                issues.append(Issue(_loc(loc, key), value[key], f"one of the known fields ({known})"))
        for key, sub in (spec.fields or {}).items():
            if key in value and value[key] is not None:
                out[key] = check(value[key], sub, _loc(loc, key), issues)
            elif sub.required:
                issues.append(Issue(_loc(loc, key), None, f"a value (required; {sub.doc or sub.type})"))
            elif sub.default is not _MISSING:
                default = sub.default() if callable(sub.default) else sub.default
                # an omitted section gets its fields' defaults too (``deployment: {}`` has a path),
                # so code reading the normalised data never meets a missing key
                out[key] = check(default, sub, _loc(loc, key), issues) if sub.type == "map" else default
        value = out
    elif t == "dict":
        if not isinstance(value, dict):
            issues.append(Issue(loc, value, "a mapping"))
            return None
        if spec.values:
            value = {k: check(v, spec.values, _loc(loc, k), issues) for k, v in value.items()}
        else:
            _free_form(value, loc, issues)
    if spec.choices is not None and value not in spec.choices:
        guess = nearest(value, spec.choices) if isinstance(value, str) else None
        issues.append(Issue(loc, value, "one of " + ", ".join(map(str, spec.choices)) + yaml_hint(value)
                            + (f"; did you mean {guess}?" if guess else "")))
        return None
    if spec.check is not None and value is not None:
        wanted = spec.check(value)
        if wanted:
            issues.append(Issue(loc, value, wanted))
    return value


#: what a number beyond the budget should have been
LARGEST_WANTED = f"a number of at most {budgets.LARGEST_NUMBER:g} in size (gameday's budget for any number)"
_NAME = re.compile(budgets.NAME_PATTERN)
#: what a name must be, as errors say it
NAME_WANTED = (f"a name of letters, digits, '-' and '_', starting with a letter or digit, at most {budgets.NAME_CHARS} "
               "characters (names become metric columns NAME.metric and file names: no dots, slashes or spaces)")


def is_name(value) -> bool:
    return isinstance(value, str) and len(value) <= budgets.NAME_CHARS and _NAME.fullmatch(value) is not None


def text_wanted(value: str) -> str | None:
    """What a text should have been, if it is too long or holds control characters (an
    escape sequence in a title would reach the terminals it is printed on); else None."""
    if len(value) > budgets.TEXT_CHARS:
        return f"a text of at most {budgets.TEXT_CHARS:,} characters (gameday's budget for a text)"
    if printable(value) != value:  # (it escapes exactly the control characters but newlines and tabs)
        return "a text without control characters (newlines and tabs are fine)"
    return None


def _free_form(value, loc: str, issues: list[Issue]) -> None:
    """A free-form value is written to the run directory as JSON, which has no NaN or infinity."""
    for where, v in _non_finite(value, loc):
        issues.append(Issue(where, v, "a finite number (a run directory's files are JSON, which has no NaN or "
                                      "infinity)"))


def _non_finite(value, loc: str):
    """(location, value) of each NaN or infinity inside ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        yield loc, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _non_finite(v, _loc(loc, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _non_finite(v, f"{loc}[{i}]")


def sexagesimal_wanted(value: Sexagesimal, kind: str) -> str:
    """What a number written as 1:30 should have been (only a clock time or a duration is written so)."""
    return (f"{kind} (YAML 1.1 reads the unquoted {value.text} as {int(value)}, counting in base 60 as for a clock "
            f"time: write {int(value)} if that is meant)")


def yaml_hint(value) -> str:
    """Why YAML may have read the value as something else than was written (YAML 1.1 rules),
    or how to write what was meant (a percentage)."""
    if isinstance(value, bool):
        return " (YAML reads an unquoted yes/no/on/off/true/false as a boolean: quote it)"
    if isinstance(value, str) and value.strip().endswith("%"):
        return " (a share is a number from 0 to 1: 0.2 for 20%)"
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return ""
        return (f" (YAML 1.1 reads {value} as text: its numbers with an exponent need a dot and a sign, as 1.0e+5;"
                " or write 100000)")
    return ""


def M(doc: str = "", required: bool = False, default=_MISSING, example=_MISSING, **fields: Field) -> Field:
    """A mapping field with known keys."""
    return Field("map", required=required, default=default, fields=fields, doc=doc, example=example)


def L(item: Field, doc: str = "", required: bool = False, default=_MISSING, **kw) -> Field:
    return Field("list", item=item, required=required, default=default, doc=doc, **kw)


def names(doc: str = "", default=_MISSING, **kw) -> Field:
    return L(Field("str"), doc=doc, default=default if default is not _MISSING else list, **kw)


def ratio(doc: str = "", default=_MISSING, required=False, **kw) -> Field:
    return Field("number", min=0, max=1, default=default, doc=doc, required=required, **kw)


def positive(kind: str = "number", doc: str = "", default=_MISSING, required=False, **kw) -> Field:
    return Field(kind, min=0, exclusive_min=True, default=default, doc=doc, required=required, **kw)


def non_negative(kind: str = "number", doc: str = "", default=_MISSING, required=False, **kw) -> Field:
    return Field(kind, min=0, default=default, doc=doc, required=required, **kw)
