"""A playbook file's template: its variables header and rendering (the values: ``variables``).

A playbook file is Jinja2-templated YAML. It may start with a plain YAML header
document declaring its variables (``variables: {name: {default, description}}``),
followed by a line ``---`` and the templated body. Rendering runs in Jinja's sandbox
with ``StrictUndefined``, so an undefined variable is an error, never an empty string, and
in a child process (``sandbox_process``) within gameday's budget for a template, since the
sandbox bounds neither memory nor time (``{{ 'a' * 4000000000 }}``, ``{{ 9**(9**9) }}``).
"""
from __future__ import annotations

import json
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import jinja2
import jinja2.meta
import jinja2.sandbox
import yaml

from orchestrator import budgets
from orchestrator.errors import InvalidPlaybook, Issue, closest_first
from orchestrator.playbook.files import read_text
from orchestrator.playbook import sandbox_process
from orchestrator.playbook.yaml_text import load_yaml, yaml_issue


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


def sandboxed_environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    return jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                                        autoescape=False)


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
    pieces = sandboxed_environment().from_string(tpl.body).generate(**values)
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
    if isinstance(e, TypeError) and "no loader" in str(e):  # (Jinja's words for an include with no files to read)
        return Issue(_template_line(e, tpl), "{% include %}, {% import %} or {% extends %}",
                     "a playbook in one file: it cannot include, import or extend another template (write the "
                     "part here, or a {% macro %} in this file)")
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
