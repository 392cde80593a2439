"""A playbook file's template: its variables header, the values a run gives them, and rendering.

A playbook file is Jinja2-templated YAML. It may start with a plain YAML header
document declaring its variables (``variables: {name: {default, description}}``),
followed by a line ``---`` and the templated body. Rendering runs in Jinja's sandbox
with ``StrictUndefined``, so an undefined variable is an error, never an empty string, and
in a child process (``sandbox_process``) within gameday's budget for a template, since the
sandbox bounds neither memory nor time (``{{ 'a' * 4000000000 }}``, ``{{ 9**(9**9) }}``).
"""
from __future__ import annotations

import json
import math
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import jinja2.meta
import jinja2.sandbox
import yaml

from orchestrator import budgets
from orchestrator.errors import InvalidPlaybook, Issue, closest_first, nearest, setting
from orchestrator.playbook.schema import is_duration
from reports.timefmt import format_clock, parse_clock
from orchestrator.playbook.files import find_playbook, read_text
from orchestrator.playbook import sandbox_process
from orchestrator.playbook.yaml_text import load_yaml, parse_yaml, yaml_issue


@dataclass
class Template:
    name: str
    source: str
    header: dict  # variables declared: name -> {default, description}
    body: str
    body_line: int = 1  # line of the file the body starts on, so errors name the file's lines


def read_template(path: Path) -> Template:
    text = read_text(path, InvalidPlaybook)
    name = path.name.split(".")[0]
    header, body, body_line = {}, text, 1
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip() == "---":
            head = "".join(lines[:i])
            if head.strip() and "variables" in head:
                try:
                    doc = load_yaml(head) or {}
                except yaml.YAMLError as e:
                    raise InvalidPlaybook(str(path), "parse of the variables header", [yaml_issue(e)])
                header = doc.get("variables") or {}
                if not isinstance(header, dict):
                    raise InvalidPlaybook(str(path), "variables header", [Issue("variables", header, "a mapping of name -> {default, description}")])
                body, body_line = "".join(lines[i + 1:]), i + 2
            break
    return Template(name=name, source=str(path), header=header, body=body, body_line=body_line)


def _template_line(e: Exception, tpl: Template) -> str:
    """The file line a rendering error happened on (Jinja puts template frames in the traceback)."""
    tb, line = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"line {line + tpl.body_line - 1}" if line else "template"


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
        if not isinstance(decl, dict) or "default" not in decl:
            odd = sorted(map(str, set(decl) - {"default", "description"})) if isinstance(decl, dict) else []
            guess = nearest(odd[0], ("default", "description")) if odd else None
            issues.append(Issue(f"variables.{name}", decl, "a mapping with 'default' and 'description'"
                                + (f" (did you mean default for {odd[0]}?)" if guess == "default" else "")))
            continue
        values[name] = decl["default"]
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
        values[name] = value
    if issues:
        raise InvalidPlaybook(source, "variables", issues)
    return values


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _range_issues(name: str, decl: dict) -> list[Issue]:
    """A variable's ``range: [low, high]``: the values a team thinks plausible, which a
    comparison with ``--vary`` draws from; only for a numeric default."""
    rng, default = decl["range"], decl["default"]
    if not _is_number(default):
        return [Issue(f"variables.{name}.range", rng, f"no range: only a variable whose default is a number has one "
                                                      f"(its default is {default!r})")]
    if not (isinstance(rng, list) and len(rng) == 2 and all(map(_is_number, rng)) and rng[0] < rng[1]):
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
    """The variables the template's body reads (every declared one if it does not parse:
    rendering reports that)."""
    try:
        return jinja2.meta.find_undeclared_variables(_environment().parse(tpl.body))
    except jinja2.exceptions.TemplateSyntaxError:
        return set(tpl.header)


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


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    return jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                                        autoescape=False)


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


#: the texts rendered last, by template, values and budget: a comparison or a test suite loads
#: one playbook with the same values many times, and a fork is the dearest part of a load
_RENDERED: OrderedDict[tuple, str] = OrderedDict()
_RENDERED_KEPT, _RENDERED_KEPT_BYTES = 32, 2**20
_RENDERED_LOCK = threading.Lock()


def render(tpl: Template, values: dict) -> str:
    """The text ``tpl`` renders to with ``values``, rendered within gameday's budget for a
    template (``budgets``: TEMPLATE_SECONDS, TEMPLATE_MEMORY, RENDERED_BYTES) in a child
    process (``sandbox_process``); a mistake in the template, or a template over its budget,
    raises InvalidPlaybook naming the line. (A rendering is deterministic: one done before
    with the same template, values and budget is taken as it was.)"""
    key = (tpl.body, json.dumps(values, sort_keys=True, default=repr), budgets.TEMPLATE_SECONDS,
           budgets.TEMPLATE_MEMORY, budgets.RENDERED_BYTES)
    with _RENDERED_LOCK:
        if key in _RENDERED:
            _RENDERED.move_to_end(key)
            return _RENDERED[key]
    text = _render_bounded(tpl, values)
    if len(text) <= _RENDERED_KEPT_BYTES:
        with _RENDERED_LOCK:
            _RENDERED[key] = text
            while len(_RENDERED) > _RENDERED_KEPT:
                _RENDERED.popitem(last=False)
    return text


def _render_bounded(tpl: Template, values: dict) -> str:
    if not hasattr(os, "fork"):  # (no fork, as on Windows: rendered here, bounded only in the text it makes)
        kind, result = _rendering(tpl, values)
    else:
        try:
            kind, result = sandbox_process.run_in_child(lambda: _rendering(tpl, values), budgets.TEMPLATE_SECONDS,
                                                        budgets.TEMPLATE_MEMORY)
        except sandbox_process.NoAnswer as e:  # (killed at the deadline, or stopped outside the template)
            kind, result = "error", [_plain(_budget_issue(e.reason, "template", e.how))]
    if kind == "error":
        raise InvalidPlaybook(tpl.source, "render", [Issue(*issue) for issue in result])
    return result


class _TooMuchText(Exception):
    """The rendered text passed ``budgets.RENDERED_BYTES``."""


def _rendering(tpl: Template, values: dict) -> tuple[str, object]:
    """("ok", the rendered text) or ("error", [its issue as a tuple]): plain data, which the
    child process sends back."""
    try:
        return "ok", _rendered(tpl, values)
    except Exception as e:
        return "error", [_plain(_render_issue(e, tpl, values))]


def _rendered(tpl: Template, values: dict) -> str:
    """The template's text. A budget passed between two of its pieces (the text's, or the
    alarm's ringing here) is thrown in where the template is, so that the error names its line."""
    pieces = _environment().from_string(tpl.body).generate(**values)
    try:
        return _joined(pieces, budgets.RENDERED_BYTES)
    except (sandbox_process.OutOfTime, _TooMuchText) as e:
        if pieces.gi_frame is None:  # (raised in the template, or after it: its traceback says which)
            raise
        pieces.throw(type(e)(*e.args))
        raise


def _joined(pieces, limit: int) -> str:
    """The pieces of text, counted as they are made, so that an output of gigabytes is refused
    before it is built."""
    size, parts = 0, []
    for piece in pieces:
        size += len(piece) if piece.isascii() else len(piece.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise _TooMuchText()
        parts.append(piece)
    return "".join(parts)


def _render_issue(e: Exception, tpl: Template, values: dict) -> Issue:
    """The issue a rendering error is: the template over its budget, or its own mistake."""
    if over := _budget_passed(e):
        return _budget_issue(over, _template_line(e, tpl))
    if isinstance(e, jinja2.exceptions.SecurityError):
        return Issue(_template_line(e, tpl), str(e), "no access to unsafe attributes")
    if isinstance(e, jinja2.exceptions.UndefinedError):
        name = re.match(r"'(\w+)' is undefined", str(e))  # (an attribute missing reads otherwise)
        known = closest_first(name.group(1), values) if name else ", ".join(sorted(values)) or "none"
        return Issue(_template_line(e, tpl), str(e), f"only defined variables ({known})")
    if isinstance(e, jinja2.exceptions.TemplateSyntaxError):
        return Issue(f"line {e.lineno + tpl.body_line - 1}", e.message, "valid Jinja2 syntax")
    if isinstance(e, jinja2.exceptions.TemplateError):
        return Issue(_template_line(e, tpl), str(e), "a template that renders")
    # the template's own arithmetic and calls ({{ n // 0 }}) are the user's mistake too
    return Issue(_template_line(e, tpl), f"{type(e).__name__}: {e}", "a template that renders")


def _budget_passed(e: BaseException | None) -> str | None:
    """Which budget ``e`` says the template passed ("time", "memory", "text"), looking through
    what Jinja raised in its place (its lexer turns any error into a syntax error)."""
    seen = set()
    while e is not None and id(e) not in seen:
        for kind, budget in (("time", sandbox_process.OutOfTime), ("memory", MemoryError), ("text", _TooMuchText)):
            if isinstance(e, budget):
                return kind
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _budget_issue(kind: str, where: str, how: str = "") -> Issue:
    """A template over its budget: which budget, its value, and what usually causes it."""
    seconds = budgets.TEMPLATE_SECONDS
    memory, text = budgets.size_text(budgets.TEMPLATE_MEMORY), budgets.size_text(budgets.RENDERED_BYTES)
    if kind == "text":
        return Issue(where, f"the template rendered more than {text} of text",
                     f"a template that renders at most {text} (gameday's budget for a rendered playbook: loops "
                     "over range(...) and large repetitions are the usual cause)")
    got = {"time": f"the template took more than {seconds:g} s to render",
           "memory": f"the template needed more than {memory} of memory to render"}.get(
        kind, f"the rendering stopped without an answer ({how})")
    return Issue(where, got, f"a template that renders within {seconds:g} s and {memory} (gameday's budget for a "
                             "template: loops over range(...) and large powers or repetitions are the usual cause)")


def _plain(issue: Issue) -> tuple:
    """An issue as plain data that pickles (its value as text unless it is a plain scalar)."""
    value = issue.value if isinstance(issue.value, (str, int, float, bool, type(None))) else str(issue.value)
    return issue.location, value, issue.expected
