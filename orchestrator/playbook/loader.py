"""Loading a playbook: find -> variables -> render -> parse -> validate, each stage its own
module (files, template, yaml_text, checks with effects), each with its own errors; a
runbook is loaded by runbooks.py, the warnings are hints.py's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from orchestrator.errors import InvalidPlaybook, Issue
from reports.timefmt import format_clock
from orchestrator.playbook.files import runbook_files, find_playbook
from orchestrator.playbook.yaml_text import load_yaml, parse_yaml
from orchestrator.playbook.template import Template, read_template, render
from orchestrator.playbook.variables import Given, resolve_variables
from orchestrator.playbook.checks import validate_playbook




@dataclass
class Playbook:
    name: str
    source: str
    text: str  # the rendered YAML
    data: dict  # validated and normalised
    variables: dict = field(default_factory=dict)  # name -> value used


def load_playbook(ref: str, given: Given | dict | None = None) -> Playbook:
    """``ref`` (a file or a built-in's name) with the variables ``given`` (values, or a
    ``Given`` that says where each was said), rendered, parsed and validated."""
    path = find_playbook(ref)
    tpl = read_template(path)
    given = Given.of(given)
    values = resolve_variables(tpl, given, str(path))
    text = render(tpl, values)
    doc = parse_yaml(text, str(path), first_line=tpl.body_line)
    try:
        data = validate_playbook(doc, str(path))
    except InvalidPlaybook as e:
        raise _naming_variables(e, given, tpl, values, doc) from None
    return Playbook(name=data["name"], source=str(path), text=text, data=data, variables=values)


def _naming_variables(e: InvalidPlaybook, given: Given, tpl: Template, values: dict, doc: dict) -> InvalidPlaybook:
    """``e`` with each issue whose value is a variable's saying so. One set for this run: the
    type check of an override is only against its default's (an integer default takes 2.5,
    since it may be a factor), so a field that wants an integer is the first to object. A
    default, where the field follows that variable: rendered with another value of it, the
    field changes (else a bad default reads only as its rendered path, ``services[1].cache.zipf:
    got -1.0``)."""
    def other(v):
        return (not v) if isinstance(v, bool) else v + 7 if isinstance(v, (int, float)) else f"{v}_"

    def feeds(name: str, location: str) -> bool:
        try:
            moved = load_yaml(render(tpl, {**values, name: other(values[name])}))
            return _at(moved, location) != _at(doc, location)
        except (InvalidPlaybook, yaml.YAMLError, KeyError, IndexError, TypeError, ValueError):
            return False

    def same(v, i: Issue) -> bool:
        return type(v) is type(i.value) and v == i.value

    def said(i: Issue) -> Issue:
        if names := [k for k, v in given.values.items() if same(v, i)]:
            return Issue(i.location, i.value, i.expected + f" (variable {names[0]} was set to {i.value!r} for this run)")
        if names := [k for k, v in values.items() if k not in given.values and same(v, i) and feeds(k, i.location)]:
            return Issue(i.location, i.value,
                         i.expected + f" (the default of variable {names[0]}, in the file's variables header)")
        return i
    return InvalidPlaybook(e.source, e.stage, [said(i) for i in e.issues])


def _at(doc, location: str):
    """The value at an issue's location (``services[1].cache.zipf``) in a parsed document."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", location):
        doc = doc[int(part[1:-1])] if part.startswith("[") else doc[part]
    return doc


def describe(tpl: Template) -> dict:
    """What ``gameday playbooks show`` prints: description, variables, mitigations, faults."""
    values = resolve_variables(tpl, {}, tpl.source)
    data = validate_playbook(parse_yaml(render(tpl, values), tpl.source, first_line=tpl.body_line), tpl.source)
    return {"name": data["name"], "title": data["title"], "description": data["description"],
            "variables": tpl.header, "mitigations": data["mitigations"], "faults": data["faults"], "hints": data["hints"], "par": {k: format_clock(v) for k, v in data["par"].items()},
            "runbooks": sorted(set(runbook_files(data["name"], tpl.source)) | {"none"})}
