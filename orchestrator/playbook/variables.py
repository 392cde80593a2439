"""A playbook's variables: the values a run gives them (``--set``, ``--vars``, a sweep),
checked against the header's declarations, and which of them the template reads."""
from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import jinja2.meta
import yaml

from orchestrator import budgets
from orchestrator.errors import InvalidPlaybook, Issue, closest_first, nearest, setting
from orchestrator.playbook.files import find_playbook, read_text
from orchestrator.playbook import sandbox_process
from orchestrator.playbook.schema import LARGEST_WANTED, is_duration
from orchestrator.playbook.template import Template, read_template, sandboxed_environment
from orchestrator.playbook.yaml_text import load_yaml, parse_yaml
from reports.timefmt import format_clock, parse_clock


def coerce_value(text: str):
    """A value typed as text (``--set NAME=VALUE``) as YAML reads it: numbers, booleans and
    lists come out typed."""
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text


def read_vars_file(path: str) -> dict:
    """A vars file: a YAML mapping of variable -> value."""
    text = read_text(Path(path), InvalidPlaybook)
    doc = parse_yaml(text, path, InvalidPlaybook, allow_empty=True, stage="vars file",
                     expected="a mapping of variable -> value")
    return doc or {}


@dataclass(frozen=True)
class Given:
    """The values a run gives a playbook's variables, and where each was said, so that an
    error names the place the user wrote it (a vars file, a ``sets`` entry, a swept value)."""

    values: dict = field(default_factory=dict)
    said: dict = field(default_factory=dict)  # name -> where (``setting``'s words); by default ``sets``

    @classmethod
    def of(cls, sets: "dict | Given | None" = None, vars_file: str | None = None) -> "Given":
        """A vars file's values, then ``sets``, which win."""
        if isinstance(sets, Given) and vars_file is None:
            return sets
        values = read_vars_file(vars_file) if vars_file else {}
        said = {name: f"{name} ({setting('vars_file')} {vars_file})" for name in values}
        more = sets if isinstance(sets, Given) else cls(dict(sets or {}))
        return cls({**values, **more.values}, {**said, **{n: more.where(n) for n in more.values}})

    def where(self, name: str) -> str:
        return self.said.get(name) or setting("sets", name)

    def plus(self, values: dict, field_name: str) -> "Given":
        """These and ``values``, said as items of the setting ``field_name`` (a sweep's)."""
        return Given({**self.values, **values}, {**self.said, **{n: setting(field_name, n) for n in values}})


def resolve_variables(tpl: Template, given: "Given | dict", source: str) -> dict:
    """Every variable's value for a run: its default, or the value ``given`` (checked)."""
    given = Given.of(given)
    issues = []
    values = {}
    for name, decl in tpl.header.items():
        if not (isinstance(name, str) and _VARIABLE_NAME.fullmatch(name) and len(name) <= budgets.NAME_CHARS):
            issues.append(Issue("variables", name, VARIABLE_NAME_WANTED))
            continue
        if not isinstance(decl, dict) or "default" not in decl:
            odd = sorted(map(str, set(decl) - {"default", "description"})) if isinstance(decl, dict) else []
            guess = nearest(odd[0], ("default", "description")) if odd else None
            issues.append(Issue(f"variables.{name}", decl, "a mapping with 'default' and 'description'"
                                + (f" (did you mean default for {odd[0]}?)" if guess == "default" else "")))
            continue
        values[name] = decl["default"]
        if _is_any_number(decl["default"]) and not is_number(decl["default"], budgets.LARGEST_NUMBER):
            issues.append(Issue(f"variables.{name}.default", decl["default"], f"a finite {LARGEST_WANTED[2:]}"))
        if "range" in decl:
            issues += _range_issues(name, decl)
    used = _used_variables(tpl) if given.values else set()
    for name, value in given.values.items():
        loc = given.where(name)
        if name not in tpl.header:
            issues.append(Issue(loc, value, f"one of the playbook's variables ({closest_first(name, tpl.header)})"))
            continue
        if name not in used:
            issues.append(Issue(loc, value, f"a variable the template uses: {name} is declared, but {{{{ {name} }}}} "
                                            "appears nowhere in the template, so setting it would change nothing"))
            continue
        default = values.get(name)
        value = _clock_as_typed(default, value)
        if default is not None and not same_type(default, value):
            issues.append(Issue(loc, value, type_wanted(default)))
            continue
        if _is_any_number(value) and not is_number(value, budgets.LARGEST_NUMBER):
            issues.append(Issue(loc, value, f"a finite {LARGEST_WANTED[2:]}"))
            continue
        values[name] = value
    if issues:
        raise InvalidPlaybook(source, "variables", issues)
    return values


#: a variable's name: what the template can read ({{ my-var }} would subtract)
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
VARIABLE_NAME_WANTED = (f"a variable name of letters, digits and '_', not starting with a digit, at most "
                        f"{budgets.NAME_CHARS} characters (the template reads the variable by this name)")


def _is_any_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_number(value, largest: float = math.inf) -> bool:
    """A finite number (at most ``largest`` in size)."""
    return _is_any_number(value) and math.isfinite(value) and abs(value) <= largest


def _range_issues(name: str, decl: dict) -> list[Issue]:
    """A variable's ``range: [low, high]``: the values a team thinks plausible, which a
    comparison with ``--vary`` draws from; only for a numeric default."""
    rng, default = decl["range"], decl["default"]
    if not is_number(default):
        return [Issue(f"variables.{name}.range", rng, f"no range: only a variable whose default is a number has one "
                                                      f"(its default is {default!r})")]
    if not (isinstance(rng, list) and len(rng) == 2 and all(map(is_number, rng)) and rng[0] < rng[1]):
        return [Issue(f"variables.{name}.range", rng, "[low, high]: two numbers, low < high")]
    return []


def variable_ranges(tpl: Template) -> dict[str, tuple[float, float]]:
    """The variables that declare a plausible ``range`` (checked by ``resolve_variables``):
    name -> (low, high); an integer default's range is drawn as integers."""
    return {name: (float(decl["range"][0]), float(decl["range"][1])) for name, decl in tpl.header.items()
            if isinstance(decl, dict) and "range" in decl}


def _is_clock(value) -> bool:
    """Whether ``value`` is a clock time as text (``"09:30"``)."""
    try:
        return isinstance(value, str) and parse_clock(value) >= 0
    except ValueError:
        return False


def _clock_as_typed(default, value):
    """A clock time variable's value (its default a clock time) that YAML 1.1 read as a number
    (``--set flush_at=10:30`` is 630; one read so is at least 60, 1:00), as the clock time typed;
    any other value as it is."""
    if _is_clock(default) and isinstance(value, int) and not isinstance(value, bool) and value >= 60:
        return format_clock(parse_clock(value))
    return value


def _used_variables(tpl: Template) -> set[str]:
    """The variables the template's body reads (every declared one if it does not parse, or
    not within the template's budget: rendering reports that). Parsed in a child process
    as it is rendered: a hostile template takes its time and memory there."""
    used = _used_in(tpl.body)
    return set(tpl.header) if used is None else set(used)


@functools.lru_cache(maxsize=32)
def _used_in(body: str) -> frozenset[str] | None:
    def parse():
        try:
            return frozenset(jinja2.meta.find_undeclared_variables(sandboxed_environment().parse(body)))
        except Exception:  # noqa: BLE001 - (rendering says what is wrong, naming the line)
            return None
    if not hasattr(os, "fork"):
        return parse()
    try:
        return sandbox_process.run_in_child(parse, budgets.TEMPLATE_SECONDS, budgets.TEMPLATE_MEMORY)
    except sandbox_process.NoAnswer:
        return None


#: the keys a variable's declaration in the header may hold
VARIABLE_KEYS = ("default", "description", "range")


def unused_variables(ref: str) -> list[str]:
    """Warnings for the variables a playbook declares and its template never reads: setting
    one changes nothing (``--set`` refuses it; validate says so before anyone tries); for
    keys of a declaration that mean nothing (a misspelt ``range`` would be ignored; an error
    would refuse a playbook that validated before); and for a range that leaves out its
    variable's default."""
    tpl = read_template(find_playbook(ref))
    used = _used_variables(tpl)
    out = [f"variables.{name} is declared but the template never reads it: setting it changes nothing"
           for name in tpl.header if name not in used]
    for name, decl in tpl.header.items():
        for key in (k for k in decl if k not in VARIABLE_KEYS) if isinstance(decl, dict) else ():
            guess = nearest(str(key), VARIABLE_KEYS)
            out.append(f"variables.{name}.{key} means nothing and is ignored: a variable takes "
                       f"{', '.join(VARIABLE_KEYS)}" + (f" (did you mean {guess}?)" if guess else ""))
    for name, (low, high) in variable_ranges(tpl).items():
        default = tpl.header[name]["default"]
        if not low <= default <= high:  # (a warning: an error would refuse a playbook that validated before)
            out.append(f"variables.{name}.range [{low:g}, {high:g}] leaves out its default, {default:g}: a comparison "
                       "that draws it never plays the world as the playbook writes it")
    return out


def type_wanted(default) -> str:
    """What a value given for something whose default is ``default`` should be."""
    if isinstance(default, bool):
        return f"true or false (the default is {str(default).lower()})"
    if _is_clock(default):
        return f"a clock time, HH:MM or HH:MM:SS, as the default {default!r} is"
    return f"a value of the same type as the default {default!r}"


def same_type(default, value) -> bool:
    num = (int, float)
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, num):
        return isinstance(value, num)
    if isinstance(default, str) and isinstance(value, num) and is_duration(default):
        return True  # a number of seconds is a duration too (the format says so)
    return isinstance(value, type(default))
