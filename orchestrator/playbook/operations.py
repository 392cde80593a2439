"""The operations a trigger, mitigation or fault can apply, read from the agents themselves.

An operation is an ``op_<name>`` method of an agent class. Its signature gives each
argument's type, default and whether it is required; its ``agents.base.operation``
declaration gives what it does, an example and each argument's meaning and range.
Validation, the reference and the JSON Schema all read this one description.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

from agents import AGENT_CLASSES
from agents.base import CLOCK, Arg
from orchestrator import budgets
from orchestrator.playbook.schema import LARGEST_WANTED, sexagesimal_wanted, text_wanted, yaml_hint
from orchestrator.playbook.yaml_text import Sexagesimal

from reports.timefmt import parse_clock, parse_duration

#: the kinds of part a playbook's effects can target (a section's items, or a singleton)
TARGET_KINDS = ("device", "service", "population", "controller", "monitoring", "deployment", "status", "automation")

#: annotation -> (JSON type, whether a value fits it, what was expected)
ARG_TYPES = {
    "float": ("number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "int": ("integer", lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "bool": ("boolean", lambda v: isinstance(v, bool), "true or false"),
    "str": ("string", lambda v: isinstance(v, str), "a string"),
    "list": ("array", lambda v: isinstance(v, list), "a list"),
    "dict": ("object", lambda v: isinstance(v, dict), "a mapping"),
}
_NO_DEFAULT = object()


@dataclass(frozen=True)
class Argument:
    name: str
    types: tuple[str, ...]  # annotations, e.g. ("float",) or ("float", "None")
    required: bool
    default: Any
    about: Arg | None

    @property
    def nullable(self) -> bool:
        return "None" in self.types

    @property
    def is_duration(self) -> bool:
        """An argument in seconds, which takes a duration too (``90s``, ``15m``)."""
        return self.about is not None and self.about.unit == "s"

    @property
    def is_clock(self) -> bool:
        """An argument that is a clock time (``"14:00"``), taken as seconds after midnight."""
        return self.about is not None and self.about.unit == CLOCK

    def normalised(self, value):
        """The value as the operation takes it: a duration in seconds, a clock time in seconds
        after midnight (YAML reads an unquoted 14:00 as the number 840: taken as it was meant)."""
        parse = parse_duration if self.is_duration else parse_clock if self.is_clock else None
        if parse is not None and (isinstance(value, str) or (self.is_clock and isinstance(value, int)
                                                             and not isinstance(value, bool))):
            try:
                return parse(value)
            except ValueError:
                return value
        return value

    def problem(self, value) -> str | None:
        """What was expected, if ``value`` does not fit this argument; None if it does (with
        a hint where YAML may have read the value otherwise than it was meant)."""
        wanted = self._problem(value)
        return wanted + yaml_hint(value) if wanted else None

    def _problem(self, value) -> str | None:
        if self.is_duration and isinstance(value, str):
            value = self.normalised(value)
            if isinstance(value, str):
                return "a duration such as 30s, 15m, 2h or a number of seconds"
        if self.is_clock and value is not None:
            value = self.normalised(value)
            if isinstance(value, str):
                return "a clock time such as \"14:00\" (24:00 or later: the next day)"
        if value is None:  # null: only where the operation takes none (a throttle without a rate)
            return None if self.nullable else "a value"
        fits = [ARG_TYPES[t] for t in self.types if t in ARG_TYPES]
        if fits and not any(ok(value) for _, ok, _ in fits):
            return " or ".join(what for _, _, what in fits)
        if isinstance(value, (int, float)) and not (math.isfinite(value) and abs(value) <= budgets.LARGEST_NUMBER):
            return LARGEST_WANTED
        if isinstance(value, Sexagesimal) and not (self.is_duration or self.is_clock):
            return sexagesimal_wanted(value, "a number")
        if isinstance(value, str):
            wanted = text_wanted(value)
            if wanted:
                return wanted
        return None if self.about is None else self.about.problem(value)  # the choices and range, as agents check them


@dataclass(frozen=True)
class OperationInfo:
    kind: str
    name: str
    doc: str
    example: dict
    args: dict[str, Argument]
    needs: str | None = None  # the field of its target's spec it acts on (``agents.base.operation``)


def _info(kind: str, cls, name: str) -> OperationInfo:
    fn = getattr(cls, f"op_{name}")
    declared = getattr(fn, "operation", None)
    params = list(inspect.signature(fn).parameters.values())[2:]  # self, tick
    args = {}
    for p in params:
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        types = tuple(t.strip() for t in str(p.annotation).split("|"))
        args[p.name] = Argument(p.name, types, p.default is p.empty,
                                _NO_DEFAULT if p.default is p.empty else p.default,
                                declared.args.get(p.name) if declared else None)
    return OperationInfo(kind, name, declared.doc if declared else " ".join((fn.__doc__ or "").split()),
                         declared.example if declared else {}, args, declared.needs if declared else None)


def operations(kind: str) -> dict[str, OperationInfo]:
    """Every operation a part of this kind accepts, by name."""
    cls = AGENT_CLASSES[kind]
    return {n[3:]: _info(kind, cls, n[3:]) for n in sorted(dir(cls)) if n.startswith("op_")}


def has_default(arg: Argument) -> bool:
    """Whether the argument has a default a user could write (``"__keep__"``: left out, the part keeps what it has)."""
    d = arg.default
    return d is not _NO_DEFAULT and not (isinstance(d, str) and d.startswith("__") and d.endswith("__"))
