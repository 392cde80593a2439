"""JSON Schema (draft 2020-12) of a rendered playbook and of a runbook, generated from
``format.py`` and the agents' operations, so that editors check a file as people type.

The schema states what a single field can be (types, ranges, choices, known keys,
operations and their arguments); what needs the whole world (a path naming a device
pool that exists, a metric the monitoring observes) only ``gameday playbooks validate``
checks.
"""
from __future__ import annotations

import yaml

from orchestrator import budgets
from orchestrator.playbook.format import CONDITIONS, PLAYBOOK, RUNBOOK
from orchestrator.playbook.operations import ARG_TYPES, TARGET_KINDS, has_default, operations
from orchestrator.playbook.schema import _MISSING, Field
from reports.timefmt import CLOCK_PATTERN, DURATION_PATTERN

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_NUMBER_TEXT = r"^\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*$"
_DURATION_TEXT = {"type": "string", "anyOf": [{"allOf": [{"pattern": DURATION_PATTERN}, {"pattern": r"\d"}]},
                                               {"pattern": _NUMBER_TEXT}]}
#: +DURATION after the first trigger: + then what a non-negative duration's text may be
_AFTER_TRIGGER = {"type": "string", "anyOf": [{"allOf": [{"pattern": r"^\s*\+" + DURATION_PATTERN.removeprefix("^")},
                                                         {"pattern": r"\d"}]},
                                              {"pattern": r"^\s*\+\s*" + _NUMBER_TEXT.removeprefix(r"^\s*[-+]?")}]}
_PARAM_REF = {"type": "string", "pattern": r"^\$", "description": "$NAME of one of the mitigation's params, or $requester"}


def _jsonable(value):
    return value() if callable(value) else value


def field_schema(f: Field) -> dict:
    t = f.type
    if t in ("number", "int"):
        out = {"type": "integer" if t == "int" else "number"}
        _range(out, f)
    elif t == "duration":
        number = {"type": "number"}
        _range(number, f)
        out = {"anyOf": [number, _DURATION_TEXT]}
    elif t == "clock":
        # YAML 1.1 reads an unquoted 07:30 as 450 (sexagesimal minutes), which validation accepts too
        out = {"anyOf": [{"type": "string", "pattern": CLOCK_PATTERN}, {"type": "integer", "minimum": 0}]}
    elif t == "bool":
        out = {"type": "boolean"}
    elif t == "str":
        out = {"type": "string", "minLength": 1, "maxLength": budgets.TEXT_CHARS, "pattern": r"\S"}
    elif t == "name":
        out = {"type": "string", "maxLength": budgets.NAME_CHARS, "pattern": f"^{budgets.NAME_PATTERN}$"}
    elif t == "list":
        out = {"type": "array"}
        if f.item:
            out["items"] = field_schema(f.item)
        if f.min is not None:
            out["minItems"] = int(f.min)
    elif t == "map":
        fields = f.fields or {}
        out = {"type": "object", "properties": {k: field_schema(v) for k, v in fields.items()},
               "additionalProperties": False}
        required = [k for k, v in fields.items() if v.required]
        if required:
            out["required"] = required
    elif t == "dict":
        out = {"type": "object"}
        if f.values:
            out["additionalProperties"] = field_schema(f.values)
    else:
        out = {}
    if f.choices is not None:
        out["enum"] = list(f.choices)
    if f.doc:
        out["description"] = f.doc + (f" ({f.unit})" if f.unit else "")
    if f.default is not _MISSING:
        out["default"] = _jsonable(f.default)
    if f.example is not _MISSING:
        out["examples"] = [f.example]
    return out


def _range(out: dict, f: Field) -> None:
    if f.min is not None:
        out["exclusiveMinimum" if f.exclusive_min else "minimum"] = f.min
    else:
        out["minimum"] = -budgets.LARGEST_NUMBER
    out["maximum"] = f.max if f.max is not None else budgets.LARGEST_NUMBER


def _argument_schema(arg, params: bool) -> dict:
    kinds = [ARG_TYPES[t][0] for t in arg.types if t in ARG_TYPES]
    out: dict = {"type": kinds + (["null"] if arg.nullable else [])} if kinds else {}
    a = arg.about
    if a is not None:
        if a.choices is not None and "list" in arg.types:
            out["items"] = {"enum": list(a.choices)}
        elif a.choices is not None:
            out["enum"] = list(a.choices) + ([None] if arg.nullable else [])
        if a.min is not None:
            out["minimum"] = a.min
        if a.max is not None:
            out["maximum"] = a.max
        out["description"] = a.doc + (f" ({a.unit})" if a.unit else "")
    if has_default(arg):
        out["default"] = arg.default
    if arg.is_duration:  # seconds, or a duration such as 90s
        out = {"anyOf": [out, _DURATION_TEXT], **({"description": out["description"]} if "description" in out else {})}
    elif arg.is_clock:  # a clock time, as a playbook's other clock times are written
        out = {**field_schema(Field("clock")), **({"description": out["description"]} if "description" in out else {})}
    return {"anyOf": [out, _PARAM_REF]} if params else out


def _effect_schema(params: bool) -> dict:
    """An effect: the op names every operation any part accepts, and its arguments are
    those of an operation of that name (several kinds of part can share a name).
    ``params``: its arguments may be ``$NAME`` (a mitigation's or fault's, not a trigger's)."""
    by_name: dict[str, dict] = {}
    for kind in TARGET_KINDS:
        for name, op in operations(kind).items():
            entry = by_name.setdefault(name, {"args": {}, "required": None, "doc": []})
            entry["args"].update({k: _argument_schema(a, params) for k, a in op.args.items()})
            needed = {k for k, a in op.args.items() if a.required}
            entry["required"] = needed if entry["required"] is None else entry["required"] & needed
            entry["doc"].append(f"{kind}: {op.doc}")
    base = field_schema(PLAYBOOK.fields["mitigations"].item.fields["effects"].item)
    base["properties"]["op"]["enum"] = sorted(by_name)
    cases = []
    for name, entry in sorted(by_name.items()):
        args = {"type": "object", "properties": entry["args"], "additionalProperties": False}
        if entry["required"]:
            args["required"] = sorted(entry["required"])
        cases.append({"if": {"properties": {"op": {"const": name}}, "required": ["op"]},
                      "then": {"properties": {"args": args}, **({"required": ["args"]} if entry["required"] else {})}})
    base["allOf"] = cases
    return base


def playbook_schema() -> dict:
    out = field_schema(PLAYBOOK)
    for section, ref in (("triggers", "trigger_effect"), ("mitigations", "effect"), ("faults", "effect")):
        out["properties"][section]["items"]["properties"]["effects"]["items"] = {"$ref": f"#/$defs/{ref}"}
    return {"$schema": DIALECT, "$id": "https://gameday.invalid/schema/playbook.json",
            "title": "gameday playbook (rendered)", **out,
            "$defs": {"effect": _effect_schema(params=True), "trigger_effect": _effect_schema(params=False)}}


def _condition_schema() -> dict:
    holds = {"conditions": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/condition"}},
             "condition": {"$ref": "#/$defs/condition"},
             "when": {"anyOf": [field_schema(Field("clock")), _AFTER_TRIGGER]},
             "metric": {"type": "string", "minLength": 1}, "alarm": {"type": "string", "minLength": 1},
             "action": {"type": "string", "minLength": 1}}
    cases = []
    for key, cond in CONDITIONS.items():
        props = {key: {**holds[cond.holds], "description": cond.doc}}
        props.update({k: field_schema(v) for k, v in cond.keys.items()})
        case = {"type": "object", "properties": props, "required": [key], "additionalProperties": False,
                "examples": [yaml.safe_load(cond.example)]}
        if cond.one_of:
            case["oneOf"] = [{"required": [k]} for k in cond.one_of]
        cases.append(case)
    return {"oneOf": cases}


def runbook_schema() -> dict:
    out = field_schema(RUNBOOK)
    rule = out["properties"]["rules"]["items"]["properties"]
    rule["when"] = {"$ref": "#/$defs/condition", "description": rule["when"].get("description", "")}
    action = [{"type": "string", "minLength": 1},
              {"type": "object", "required": ["action"], "additionalProperties": False,
               "properties": {"action": {"type": "string", "minLength": 1}, "params": {"type": "object"}}}]
    rule["do"] = {"description": rule["do"].get("description", ""),
                  "anyOf": [*action, {"type": "array", "minItems": 1, "items": {"anyOf": action}}]}
    return {"$schema": DIALECT, "$id": "https://gameday.invalid/schema/runbook.json", "title": "gameday runbook",
            **out, "$defs": {"condition": _condition_schema()}}
