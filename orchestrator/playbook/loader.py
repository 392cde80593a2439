"""Loading a playbook or runbook: render -> parse -> validate, each with its own errors.

A playbook file is Jinja2-templated YAML. It may start with a plain YAML header
document declaring its variables (``variables: {name: {default, description}}``),
followed by a line ``---`` and the templated body. Rendering runs in Jinja's sandbox
with ``StrictUndefined``, so an undefined variable is an error, never an empty string.
"""
from __future__ import annotations

import importlib.resources
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import jinja2.meta
import jinja2.sandbox
import yaml

from agents import AGENT_CLASSES
from agents.monitoring import WHEN_STALE
from agents.shards import SHARD_SEP
from orchestrator.errors import InvalidPlaybook, InvalidRunbook, Issue, NotFound, closest_first, nearest
from orchestrator.playbook.operations import operations
from orchestrator.playbook.format import CONDITIONS, EMPTY_RUNBOOK, PLAYBOOK, RUNBOOK
from orchestrator.playbook.format import MEASURES, milestone_keys
from orchestrator.playbook.schema import _MISSING, Field, check, is_duration, non_negative
from reports.timefmt import format_clock, parse_clock, parse_duration

MAX_TICK_S = 60.0  # coarser ticks would skip over timeouts and deployment steps
MAX_TICKS = 2_000_000  # a run longer than this is almost certainly a typo in --tick

#: kinds of agent that send telemetry to monitoring
TELEMETRY_KINDS = ("device", "service", "population")

KIND_OF_SECTION = {"devices": "device", "services": "service", "populations": "population"}


@dataclass
class Playbook:
    name: str
    source: str
    text: str  # the rendered YAML
    data: dict  # validated and normalised
    variables: dict = field(default_factory=dict)  # name -> value used


@dataclass
class Template:
    name: str
    source: str
    header: dict  # variables declared: name -> {default, description}
    body: str
    body_line: int = 1  # line of the file the body starts on, so errors name the file's lines


# -- finding ------------------------------------------------------------------------------

def builtin_dir() -> Path:
    return Path(str(importlib.resources.files("playbooks")))


def builtin_playbooks() -> list[str]:
    return sorted(p.name[: -len(".yaml.j2")] for p in builtin_dir().glob("*.yaml.j2"))


def builtin_runbooks(playbook: str) -> list[str]:
    return sorted(runbook_files(playbook, builtin_dir() / f"{playbook}.yaml.j2"))


def runbook_files(playbook: str, source: str | Path) -> dict[str, Path]:
    """The runbooks a playbook ships, by name: ``runbooks/PLAYBOOK/NAME.yaml`` beside its file
    (the layout of the built-ins), then ``runbooks/NAME.yaml`` beside it, then the built-in
    runbooks of a playbook of that name (a copied built-in keeps its runbooks)."""
    here = Path(source).parent / "runbooks"
    out: dict[str, Path] = {}
    for d in (here / playbook, here, builtin_dir() / "runbooks" / playbook):
        if d.is_dir():
            for p in sorted(d.glob("*.yaml")):
                out.setdefault(p.stem, p)
    return out


def find_playbook(ref: str) -> Path:
    p = Path(ref)
    if p.is_file():
        return p
    cand = builtin_dir() / f"{ref}.yaml.j2"
    if cand.is_file():
        return cand
    raise NotFound(f"no playbook {ref!r}: not a file, and the built-in playbooks are: {', '.join(builtin_playbooks())}")


def find_runbook(ref: str, playbook: str, source: str | Path | None = None) -> Path:
    p = Path(ref)
    if p.is_file():
        return p
    shipped = runbook_files(playbook, source or builtin_dir() / f"{playbook}.yaml.j2")
    if ref in shipped:
        return shipped[ref]
    known = closest_first(p.name, set(shipped) | {"none"})
    where = Path(source).parent / "runbooks" / playbook if source else builtin_dir() / "runbooks" / playbook
    raise NotFound(f"no runbook {ref!r}: not a file, and the runbooks of {playbook} are: {known} "
                   f"(a playbook's own runbooks go in {where}/)")


# -- YAML ---------------------------------------------------------------------------------

DUPLICATE_KEY = "found duplicate key"


class _OneKeyOnce(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error:
    PyYAML keeps the last one, so a field written twice would silently lose the first
    (merged keys, ``<<``, may still be overridden: that is what they are for)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    earlier = first.setdefault(key, key_node)
                except TypeError:  # (an unhashable key: PyYAML's own error follows)
                    continue
                if earlier is not key_node:
                    raise yaml.constructor.ConstructorError("while constructing a mapping", earlier.start_mark,
                                                            f"{DUPLICATE_KEY} {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str):
    """``text`` as YAML, every key of a mapping given once."""
    return yaml.load(text, Loader=_OneKeyOnce)


# -- render -------------------------------------------------------------------------------

def read_text(path: Path, error_cls) -> str:
    """A playbook or runbook file's text; one that cannot be read is the user's mistake, not a traceback."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise error_cls(str(path), "read", [Issue(f"byte {e.start}", e.object[e.start:e.end], "UTF-8 text")]) from None
    except OSError as e:
        raise error_cls(str(path), "read", [Issue("file", str(path), f"a readable file ({e.strerror})")]) from None


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
                    raise InvalidPlaybook(str(path), "parse of the variables header", [_yaml_issue(e)])
                header = doc.get("variables") or {}
                if not isinstance(header, dict):
                    raise InvalidPlaybook(str(path), "variables header", [Issue("variables", header, "a mapping of name -> {default, description}")])
                body, body_line = "".join(lines[i + 1:]), i + 2
            break
    return Template(name=name, source=str(path), header=header, body=body, body_line=body_line)


def _yaml_loc(e: yaml.YAMLError, first_line: int = 1) -> str:
    mark = getattr(e, "problem_mark", None)
    return f"line {mark.line + first_line}, column {mark.column + 1}" if mark else "yaml"


def _yaml_issue(e: yaml.YAMLError, first_line: int = 1) -> Issue:
    # PyYAML notices a problem where it stops; its context (an unclosed "[" ...) is often the real mistake
    expected = "valid YAML"
    ctx, mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if str(getattr(e, "problem", "")).startswith(DUPLICATE_KEY) and mark:
        expected = f"each key once in a mapping (it is first at line {mark.line + first_line}, column {mark.column + 1})"
    elif ctx and mark:
        expected += f" ({ctx} at line {mark.line + first_line}, column {mark.column + 1})"
    if getattr(e, "problem", "") == "mapping values are not allowed here":
        expected += " (a ': ' inside an unquoted value starts a mapping: quote the value)"
    return Issue(_yaml_loc(e, first_line), getattr(e, "problem", "") or str(e).splitlines()[0], expected)


def _template_line(e: Exception, tpl: Template) -> str:
    """The file line a rendering error happened on (Jinja puts template frames in the traceback)."""
    tb, line = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"line {line + tpl.body_line - 1}" if line else "template"


def coerce_value(text: str):
    """A --set value as YAML reads it: numbers, booleans and lists come out typed."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def resolve_variables(tpl: Template, overrides: dict, source: str, where: dict | None = None) -> dict:
    """``where``: name -> the location to report for that override (default ``--set NAME``)."""
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
    used = _used_variables(tpl) if overrides else set()
    for name, value in overrides.items():
        loc = (where or {}).get(name) or f"--set {name}"
        if name not in tpl.header:
            issues.append(Issue(loc, value, f"one of the playbook's variables ({closest_first(name, tpl.header)})"))
            continue
        if name not in used:
            issues.append(Issue(loc, value, f"a variable the template uses: {name} is declared, but {{{{ {name} }}}} "
                                            "appears nowhere in the template, so setting it would change nothing"))
            continue
        default = values.get(name)
        value = _clock_as_typed(default, value)
        if default is not None and not _same_type(default, value):
            issues.append(Issue(loc, value, _type_wanted(default)))
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
    one changes nothing (``--set`` refuses it; validate says so before anyone tries); and
    for keys of a declaration that mean nothing (a misspelt ``range`` would be ignored;
    an error would refuse a playbook that validated before)."""
    tpl = read_template(find_playbook(ref))
    used = _used_variables(tpl)
    out = [f"variables.{name} is declared but the template never reads it: setting it changes nothing"
           for name in tpl.header if name not in used]
    for name, decl in tpl.header.items():
        for key in (k for k in decl if k not in VARIABLE_KEYS) if isinstance(decl, dict) else ():
            guess = nearest(str(key), VARIABLE_KEYS)
            out.append(f"variables.{name}.{key} means nothing and is ignored: a variable takes "
                       f"{', '.join(VARIABLE_KEYS)}" + (f" (did you mean {guess}?)" if guess else ""))
    return out


def retried_without_limit_by_default(pb: Playbook) -> list[str]:
    """Warnings for the populations of perishable work whose retry.max_attempts is left at
    its default, 0 (retried until they succeed): a team that did not choose it gets requests
    outstanding that nothing bounds while they fail, and an impact counted by attempts."""
    written = (load_yaml(pb.text) or {}).get("populations") or []
    out = []
    for i, (p, raw) in enumerate(zip(pb.data["populations"], written)):
        if p["work"] == "perishable" and "max_attempts" not in ((raw or {}).get("retry") or {}):
            out.append(f"populations[{i}].retry.max_attempts is left at its default, 0: {p['name']} retries a failed "
                       "request until it succeeds, so its requests outstanding grow for as long as it fails, and its "
                       "impact counts its failed attempts, not its requests (write the attempts your clients make, "
                       "e.g. 3, or 0 to say they retry without limit)")
    return out


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    return jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                                        autoescape=False)


def _type_wanted(default) -> str:
    """What a value given for something whose default is ``default`` should be."""
    if isinstance(default, bool):
        return f"true or false (the default is {str(default).lower()})"
    if _is_clock(default):
        return f"a clock time, HH:MM or HH:MM:SS, as the default {default!r} is"
    return f"a value of the same type as the default {default!r}"


def _same_type(default, value) -> bool:
    num = (int, float)
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, num):
        return isinstance(value, num)
    if isinstance(default, str) and isinstance(value, num) and is_duration(default):
        return True  # a number of seconds is a duration too (the format says so)
    return isinstance(value, type(default))


def render(tpl: Template, values: dict) -> str:
    try:
        return _environment().from_string(tpl.body).render(**values)
    except jinja2.exceptions.SecurityError as e:
        raise InvalidPlaybook(tpl.source, "render", [Issue(_template_line(e, tpl), str(e), "no access to unsafe attributes")])
    except jinja2.exceptions.UndefinedError as e:
        name = re.match(r"'(\w+)' is undefined", str(e))  # (an attribute missing reads otherwise)
        known = closest_first(name.group(1), values) if name else ", ".join(sorted(values)) or "none"
        raise InvalidPlaybook(tpl.source, "render", [Issue(_template_line(e, tpl), str(e), f"only defined variables ({known})")])
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise InvalidPlaybook(tpl.source, "render", [Issue(f"line {e.lineno + tpl.body_line - 1}", e.message, "valid Jinja2 syntax")])
    except jinja2.exceptions.TemplateError as e:
        raise InvalidPlaybook(tpl.source, "render", [Issue(_template_line(e, tpl), str(e), "a template that renders")])
    except Exception as e:  # the template's own arithmetic and calls ({{ n // 0 }}) are the user's mistake too
        raise InvalidPlaybook(tpl.source, "render", [Issue(_template_line(e, tpl), f"{type(e).__name__}: {e}", "a template that renders")])


def parse_yaml(text: str, source: str, error_cls=InvalidPlaybook, first_line: int = 1, allow_empty: bool = False,
               stage: str = "parse", expected: str = "a YAML mapping"):
    """``first_line``: the file line ``text`` starts on (a playbook's body follows its header)."""
    try:
        doc = load_yaml(text)
    except yaml.YAMLError as e:
        raise error_cls(source, stage, [_yaml_issue(e, first_line)])
    if doc is None and allow_empty:
        return None
    if not isinstance(doc, dict):
        raise error_cls(source, stage, [Issue("document", doc, expected)])
    return doc


# -- validate -------------------------------------------------------------------------------

def validate_playbook(doc: dict, source: str) -> dict:
    issues: list[Issue] = []
    data = check(doc, PLAYBOOK, "", issues)
    if not issues:
        _cross_check(data, issues)
    elif isinstance(data, dict):
        # cross-references are checked beside the field errors, so one pass reports everything;
        # a part the field checks found malformed can stop them early, and its error is already there
        found = {i.location for i in issues}
        cross: list[Issue] = []
        try:
            _cross_check(data, cross)
        except (KeyError, TypeError, AttributeError, ValueError):
            pass
        # (nor one about an item a field error inside it explains: "exactly one of above, below"
        # once its above was found not to be a number)
        issues.extend(i for i in cross if i.location not in found
                      and not any(f.startswith((f"{i.location}.", f"{i.location}[")) for f in found))
    if issues:
        raise InvalidPlaybook(source, "validate", issues)
    _fill_derived_defaults(data)
    return data


def _fill_derived_defaults(data: dict) -> None:
    """The defaults that follow from another field of the same part (format.py's docs say
    which), filled in once here so that no agent restates them."""
    for p in data["populations"]:
        p["bugs"].setdefault("reconnect_delay", p["connection"]["timeout"])


def agent_names(data: dict) -> dict[str, str]:
    """Every agent a playbook builds: name -> kind."""
    out = {}
    for section, kind in KIND_OF_SECTION.items():
        for item in data.get(section) or []:
            out[item["name"]] = kind
    out.update({"monitoring": "monitoring", "deployment": "deployment", "status": "status", "triggers": "automation"})
    return out


@dataclass
class _Names:
    """The names a playbook's parts refer to one another by."""
    devices: set
    services: set
    populations: set
    health_sources: set  # what a depends_on or a recycling condition may read: populations and services
    kinds: dict  # agent name -> kind, as effects address them
    parts: dict  # what an effect may name besides agents: devices, services, triggers, faults
    issues: list

    def check_path(self, path: list, loc: str) -> None:
        for j, hop in enumerate(path):
            if hop not in self.devices:
                self.issues.append(Issue(f"{loc}[{j}]", hop,
                                         f"a device pool ({closest_first(hop, self.devices)})"))


def primary_issue(data: dict, primary: str, location: str) -> Issue | None:
    """A primary outcome the playbook's scoring does not measure: a backlog nobody declared,
    a loop without a measure."""
    sc = data["scoring"]
    if primary == "backlog_drained" and "backlog_drained" not in milestone_keys(data):
        return Issue(location, primary, "an outcome the playbook scores: it declares no scoring.backlog populations "
                                        "or services, so no run's backlog is ever drained")
    if primary == "loop_broken" and not (sc["loop"]["devices"] or sc["loop"]["populations"] or sc["loop"]["services"]):
        return Issue(location, primary, "an outcome the playbook scores: its scoring.loop names no devices, "
                                        "populations or services to measure the loop by")
    return None


def _cross_check(data: dict, issues: list[Issue]) -> None:
    """The checks across fields. A name two parts share is an error of its own; what refers
    to it is ambiguous, so an error about a reference is kept only where it stands whichever
    of the parts the name meant (else one duplicate name brings a dozen follow-on errors)."""
    found: list[Issue] = []
    _check_unique_names(data, issues)
    _check_references(data, found)
    for keep in _meanings_of_duplicates(data):
        stands = []
        _check_references(keep, stands)
        seen = {(i.location, repr(i.value)) for i in stands}
        found = [i for i in found if (i.location, repr(i.value)) in seen]
    issues.extend(found)
    unscored = primary_issue(data, data["scoring"]["primary"], "scoring.primary")
    if unscored:
        issues.append(unscored)


def _meanings_of_duplicates(data: dict) -> list[dict]:
    """Copies of ``data`` where each name several parts share names one of them only (the
    j-th occurrence in copy j; the others renamed to names nothing refers to)."""
    where: dict[str, list[tuple[str, int]]] = {}
    for section in KIND_OF_SECTION:
        for i, item in enumerate(data[section]):
            where.setdefault(item["name"], []).append((section, i))
    shared = {name: places for name, places in where.items() if len(places) > 1}
    copies = []
    for j in range(max((len(p) for p in shared.values()), default=0)):
        copy = {**data, **{section: list(data[section]) for section in KIND_OF_SECTION}}
        for name, places in shared.items():
            for k, (section, i) in enumerate(places):
                if k != min(j, len(places) - 1):
                    copy[section][i] = {**copy[section][i], "name": f"{name}\x00{k}"}
        copies.append(copy)
    return copies


def _check_references(data: dict, issues: list[Issue]) -> None:
    """The checks across fields but the names' own: one checker per section, each told the world's names."""
    devices, services = {d["name"] for d in data["devices"]}, {s["name"] for s in data["services"]}
    populations = {p["name"] for p in data["populations"]}
    names = _Names(devices, services, populations, services | populations, agent_names(data),
                   {"device": devices, "service": services, "trigger": {t["name"] for t in data["triggers"]} | {"*"},
                    "fault": {f["name"] for f in data["faults"]}}, issues)
    for checker in CROSS_CHECKS:
        checker(data, names)


def _check_unique_names(data: dict, issues: list[Issue]) -> None:
    kinds: dict[str, str] = {}
    for section, kind in KIND_OF_SECTION.items():
        for i, item in enumerate(data[section]):
            if item["name"] in kinds or item["name"] in ("monitoring", "deployment", "status", "triggers", "operator"):
                issues.append(Issue(f"{section}[{i}].name", item["name"], "a name used by no other part of the world"))
            if SHARD_SEP in item["name"]:
                issues.append(Issue(f"{section}[{i}].name", item["name"], f"a name without {SHARD_SEP!r} (it names shards)"))
            kinds[item["name"]] = kind


def _check_populations(data: dict, n: _Names) -> None:
    issues, services = n.issues, n.services
    for i, p in enumerate(data["populations"]):
        loc = f"populations[{i}]"
        n.check_path(p["path"], f"{loc}.path")
        if p.get("target") and p["target"] not in services:
            issues.append(Issue(f"{loc}.target", p["target"], f"a service ({closest_first(p['target'], services)})"))
        for j, d in enumerate(p["depends_on"]):
            if d not in n.health_sources or d == p["name"]:
                issues.append(Issue(f"{loc}.depends_on[{j}]", d, f"another population or a service "
                                                                 f"({closest_first(d, set(n.health_sources) - {p['name']})})"))
        if p["work"] == "durable" and p.get("max_rate") is None:
            issues.append(Issue(f"{loc}.max_rate", None,
                                f"a dispatch rate (requests/s), since the work of {p['name']} is durable"))
        if p["health"] == "clients_without_backlog" and p["work"] != "durable":
            issues.append(Issue(f"{loc}.health", p["health"], "attempts (only durable work has a backlog)"))


def _check_services(data: dict, n: _Names) -> None:
    issues, services = n.issues, n.services
    for i, s in enumerate(data["services"]):
        for j, d in enumerate(s["depends_on"]):
            if d not in n.health_sources or d == s["name"]:
                issues.append(Issue(f"services[{i}].depends_on[{j}]", d, "a population or another service"))
        rec = s.get("recycling")
        if rec:
            for key in ("breaks_when", "needs"):
                if rec.get(key) and rec[key] not in n.health_sources:
                    issues.append(Issue(f"services[{i}].recycling.{key}", rec[key], "a population or a service"))
        for loc, other in ((f"services[{i}].then", s.get("then")),
                           (f"services[{i}].leases.store", (s.get("leases") or {}).get("store")),
                           (f"services[{i}].health_checks.network", (s.get("health_checks") or {}).get("network")),
                           (f"services[{i}].cache.store", (s.get("cache") or {}).get("store"))):
            if other is not None and (other not in services or other == s["name"]):
                names = ", ".join(sorted(x for x in services if x != s["name"])) or "there is none"
                issues.append(Issue(loc, other, f"another service ({names})"))
        if s.get("cache") and s.get("then"):
            issues.append(Issue(f"services[{i}].then", s["then"], "no then on a cache (its misses go to cache.store)"))
        if s.get("cache") and s["cache"].get("size") is not None and s["cache"]["size"] > s["cache"]["keys"]:
            issues.append(Issue(f"services[{i}].cache.size", s["cache"]["size"],
                                f"at most cache.keys ({s['cache']['keys']}): a cache cannot hold more keys than there are"))
        hc = s.get("health_checks")
        if hc and hc["network"] in services and not next(x for x in data["services"] if x["name"] == hc["network"]).get("queue"):
            issues.append(Issue(f"services[{i}].health_checks.network", hc["network"],
                                "a service with a queue (its queue wait is the propagation delay)"))
        lease = s.get("leases")
        if lease and (lease["ttl"] < lease["renew_every"] or abs(lease["ttl"] / lease["renew_every"]
                                                                 - round(lease["ttl"] / lease["renew_every"])) > 1e-9):
            issues.append(Issue(f"services[{i}].leases.ttl", lease["ttl"],
                                f"a whole number of renewal periods ({lease['renew_every']:g} s), at least one"))


def _check_service_chains(data: dict, n: _Names) -> None:
    """A request goes on to ``then`` or a cache's store: a chain must not lead back."""
    chain = {s["name"]: s.get("then") or (s.get("cache") or {}).get("store") for s in data["services"]}
    said: set[str] = set()  # the services of the cycles said (each once, at its first service)
    for i, s in enumerate(data["services"]):
        seen, at = [s["name"]], chain.get(s["name"])
        while at in chain and at not in seen:
            seen.append(at)
            at = chain[at]
        if at == s["name"] and s["name"] not in said:
            said.update(seen)
            loc = f"services[{i}].then" if s.get("then") else f"services[{i}].cache.store"
            n.issues.append(Issue(loc, chain[s["name"]], "a chain of services that does not lead back to this one "
                                                         f"({' -> '.join(seen + [s['name']])})"))


def _check_paths(data: dict, n: _Names) -> None:
    """monitoring, deployment and status reach their targets over device pools."""
    for section in ("monitoring", "deployment", "status"):
        n.check_path(data[section]["path"], f"{section}.path")
    if data["deployment"].get("target") and data["deployment"]["target"] not in n.services:
        n.issues.append(Issue("deployment.target", data["deployment"]["target"],
                              f"a service ({closest_first(data['deployment']['target'], n.services)})"))
    if data["status"].get("failover"):
        n.check_path(data["status"]["failover"]["path"], "status.failover.path")
        n.check_path(data["status"]["failover"]["standby_path"], "status.failover.standby_path")


def _check_monitoring(data: dict, n: _Names) -> None:
    known_metrics = observable_metrics(data)
    for j, m in enumerate(data["monitoring"]["observe"]):
        if m not in known_metrics:
            part = m.split(".", 1)[0] if isinstance(m, str) else None
            # the part's own metrics if the part is right, else the parts: a list of every metric would be hundreds
            of_part = [k for k in known_metrics if k.split(".", 1)[0] == part]
            near = closest_first(m, of_part) if of_part else \
                f"parts: {closest_first(part, {k.split('.', 1)[0] for k in known_metrics})}"
            n.issues.append(Issue(f"monitoring.observe[{j}]", m, f"agent.metric naming a part of this world and one of "
                                                                 f"its metrics ({near})"))
    mon = data["monitoring"]
    if mon["stale_after"] <= mon["telemetry_every"] + mon["timeout"]:
        # (each value would go stale for a moment before the next report arrives: alarms flap)
        n.issues.append(Issue("monitoring.stale_after", mon["stale_after"],
                              f"a duration longer than monitoring.telemetry_every plus monitoring.timeout "
                              f"({mon['telemetry_every'] + mon['timeout']:g} s): each value would go stale before "
                              f"its next report could arrive"))
    for j, a in enumerate(data["monitoring"]["alarms"]):
        if a["metric"] not in data["monitoring"]["observe"]:
            n.issues.append(Issue(f"monitoring.alarms[{j}].metric", a["metric"], f"a metric listed in monitoring.observe "
                                                                                 f"({closest_first(a['metric'], mon['observe'])})"))
        if sum(k in a and a[k] not in (None, False) for k in ("above", "below", "no_data")) != 1:
            n.issues.append(Issue(f"monitoring.alarms[{j}]", a["name"], "exactly one of above, below, no_data"))
        elif a.get("no_data") and a.get("when_stale", WHEN_STALE[0]) != WHEN_STALE[0]:
            n.issues.append(Issue(f"monitoring.alarms[{j}].when_stale", a["when_stale"],
                                  "clear or nothing: a no_data alarm fires on stale data, when_stale is for above and below"))


def _check_clock(data: dict, n: _Names) -> None:
    tick = data["clock"]["tick"]
    if tick > MAX_TICK_S:
        n.issues.append(Issue("clock.tick", tick, f"a tick of at most {MAX_TICK_S:g} seconds"))
    elif data["clock"]["duration"] / tick > MAX_TICKS:
        n.issues.append(Issue("clock.duration", data["clock"]["duration"], f"at most {MAX_TICKS:,} ticks per run"))
    else:
        n.issues.extend(tick_issues(data, tick, "clock.tick"))


def tick_issues(data: dict, tick: float, where: str) -> list[Issue]:
    """A tick no longer than the clients' shortest timeout: a client hears of its requests
    and connections tick by tick, so a longer tick would let it wait far past its timeout.
    And no longer than a cache's ttl, which a key would otherwise outlive by whole ticks."""
    switched = {e["target"] for section in ("triggers", "mitigations", "faults") for a in data.get(section) or []
                for e in a["effects"] if e["op"] == "set_mode"}
    # a connection's timeout counts for pooled clients, or clients an effect may switch to pooled
    timeouts = [(f"populations[{i}].{part}.timeout of {p['name']}", p[part]["timeout"])
                for i, p in enumerate(data["populations"]) for part in ("request", "connection")
                if part == "request" or p["mode"] == "pooled" or p["name"] in switched]
    out = []
    if timeouts:
        field_, shortest = min(timeouts, key=lambda t: t[1])
        if tick > shortest:
            out.append(Issue(where, tick, f"a tick no longer than the shortest timeout ({field_}: {shortest:g} s), since "
                                          "clients hear of their requests tick by tick; use a shorter tick or a longer "
                                          "timeout"))
    for i, svc in enumerate(data.get("services") or []):
        ttl = (svc.get("cache") or {}).get("ttl")
        if ttl is not None and tick > ttl:
            out.append(Issue(where, tick, f"a tick no longer than services[{i}].cache.ttl of {svc['name']} ({ttl:g} s), "
                                          "since a cache ages its keys tick by tick; use a shorter tick or a longer ttl"))
    return out


def _before_start(at: float, start: float, loc: str) -> list[Issue]:
    """A clock time given before the run's first tick, which no run can reach (a time of day
    is read on the run's own day, so a time after midnight is written 24:00 or later)."""
    if at >= start:
        return []
    return [Issue(loc, format_clock(at), f"a time at or after clock.start ({format_clock(start)}; "
                                         f"a time the next day is 24:00 or later)")]


def _check_triggers(data: dict, n: _Names) -> None:
    for i, t in enumerate(data["triggers"]):
        n.issues += _before_start(t["at"], data["clock"]["start"], f"triggers[{i}].at")
        for j, e in enumerate(t["effects"]):
            _check_effect(e, f"triggers[{i}].effects[{j}]", n)


def never_reached(data: dict, runbook: dict | None, end_s: float) -> list[str]:
    """What a run ending at clock time ``end_s`` can never reach: triggers, and runbook
    conditions on the clock, timed at or after its end. Not an error (a short run of a
    long scenario is a fair check), but said before the run, since such a run reports
    "trigger not reached" and a loop that never formed. And what it can never do: the
    effects with nothing to act on (``idle_effects``)."""
    end = format_clock(end_s)
    out = [f"triggers[{i}].at {format_clock(t['at'])} is at or after the end of the run ({end}): it never fires"
           for i, t in enumerate(data["triggers"]) if t["at"] >= end_s]

    def walk(cond, loc: str) -> None:
        if not isinstance(cond, dict):
            return
        if isinstance(cond.get("at"), (int, float)) and cond["at"] >= end_s:
            out.append(f"{loc}.at {format_clock(cond['at'])} is at or after the end of the run ({end}): it never holds")
        for key in ("all", "any"):
            for j, c in enumerate(cond.get(key) or []):
                walk(c, f"{loc}.{key}[{j}]")
        if "not" in cond:
            walk(cond["not"], f"{loc}.not")

    for i, rule in enumerate((runbook or {}).get("rules") or []):
        walk(rule.get("when"), f"rules[{i}].when")
    return out + idle_effects(data) + queues_never_late(data) + front_doors_recovered(data)


def front_doors_recovered(data: dict) -> list[str]:
    """The services scoring.recovered names that pass their work on (``then``): a service's
    success ratio counts its own part only, so such a one reads recovered, or never
    impaired, while what it calls fails every request (an outsider's login API did, through
    a 107-minute outage). Not an error, but said before the run."""
    then = {s["name"]: s["then"] for s in data.get("services") or [] if s.get("then")}
    names = ((data.get("scoring") or {}).get("recovered") or {}).get("services") or []
    return [f"scoring.recovered.services[{j}] {name}: it passes its work on to {then[name]} (then), and its success "
            f"ratio counts its own part only, so it can read recovered while its callers' requests fail; "
            f"scoring.recovered.populations measures what its callers get" for j, name in enumerate(names) if name in then]


def queues_never_late(data: dict) -> list[str]:
    """The queues scoring.backlog names that can never wait longer than its threshold: a
    queue holds ``limit`` seconds of work at the capacity of the moment, so its wait stays
    within the limit and a tick; such a queue never holds the milestone back. Not an error
    (a variant may shrink the limit), but said before the run."""
    backlog = (data.get("scoring") or {}).get("backlog") or {}
    if "threshold" not in backlog:
        return []
    queues = {s["name"]: s["queue"] for s in data.get("services") or [] if s.get("queue")}
    tick, out = float(data["clock"]["tick"]), []
    for j, name in enumerate(backlog.get("services") or []):
        if name in queues and queues[name]["limit"] + tick <= backlog["threshold"]:
            out.append(f"scoring.backlog.services[{j}] {name}: its queue holds {queues[name]['limit']:g} s of work "
                       f"(queue.limit), so its wait never goes over backlog.threshold ({backlog['threshold']:g} s): "
                       f"it never holds the backlog milestone back")
    return out


def idle_effects(data: dict) -> list[str]:
    """The effects whose operation has nothing to act on in this world (``flush_cache`` on a
    service without a cache): not an error, since a template's variant may leave out a part
    that its mitigations act on, but said before the run, since applying them does nothing."""
    out = []
    specs = {part["name"]: part for section in KIND_OF_SECTION for part in data.get(section) or []}
    kinds = agent_names(data)
    for section in ("triggers", "mitigations", "faults"):
        for i, m in enumerate(data.get(section) or []):
            for j, e in enumerate(m.get("effects") or []):  # (partial data: the runbook's own check)
                op = operations(kinds[e["target"]]).get(e["op"]) if e["target"] in specs else None
                if op is not None and op.needs and specs[e["target"]].get(op.needs) is None:
                    out.append(f"{section}[{i}].effects[{j}]: {e['op']} does nothing to {e['target']}, which has no "
                               f"{op.needs}")
    return out


def _check_actions(data: dict, n: _Names) -> None:
    """Mitigations and faults: unique names, and effects their targets and operations accept."""
    for section in ("mitigations", "faults"):
        seen = set()
        for i, m in enumerate(data[section]):
            if m["name"] in seen:
                n.issues.append(Issue(f"{section}[{i}].name", m["name"], f"a name used by no other of the {section}"))
            seen.add(m["name"])
            for j, e in enumerate(m["effects"]):
                _check_effect(e, f"{section}[{i}].effects[{j}]", n, m["params"])


def _check_scoring(data: dict, n: _Names) -> None:
    sc = data["scoring"]
    for key, pool, what in (("loop.devices", n.devices, "a device pool"), ("healthy.devices", n.devices, "a device pool"),
                            ("loop.populations", n.populations, "a population"),
                            ("loop.services", n.services, "a service"),
                            ("backlog.services", {s["name"] for s in data["services"] if s.get("queue")}, "a service with a queue"),
                            ("backlog.populations", _durable_at_some_time(data),
                             "a durable population (or one a set_work effect makes durable)"),
                            ("recovered.populations", n.populations, "a population"),
                            ("recovered.services", n.services, "a service")):
        a, b = key.split(".")
        for j, name in enumerate(sc[a][b]):
            if name not in pool:
                n.issues.append(Issue(f"scoring.{key}[{j}]", name, f"{what} ({closest_first(name, pool)})"))


def _durable_at_some_time(data: dict) -> set[str]:
    """The populations whose work is durable at the start, or which a trigger's, a
    mitigation's or a fault's set_work makes durable."""
    made = {e["target"] for section in ("triggers", "mitigations", "faults") for m in data[section]
            for e in m["effects"] if e["op"] == "set_work" and (e.get("args") or {}).get("work") == "durable"}
    return {p["name"] for p in data["populations"] if p["work"] == "durable" or p["name"] in made}


def _check_par(data: dict, n: _Names) -> None:
    par_keys = [*MEASURES, *milestone_keys(data)]
    actions = [m["name"] for m in data["mitigations"]]
    for key, at in data["par"].items():
        if key not in par_keys and key not in actions:
            n.issues.append(Issue(f"par.{key}", key, f"a measure of this playbook's runs ({', '.join(par_keys)}) or one "
                                                     f"of its mitigations ({closest_first(key, actions)})"))
        elif isinstance(at, (int, float)):
            n.issues += _before_start(at, data["clock"]["start"], f"par.{key}")
    for name in data["scoring"]["impact"]:
        if name not in n.populations:
            n.issues.append(Issue(f"scoring.impact.{name}", name, f"a population ({closest_first(name, n.populations)})"))


def _check_work_switches(data: dict, n: _Names) -> None:
    """A set_work effect must leave its population a world it can run: durable work needs a
    dispatch rate, and a health read from the backlog needs durable work."""
    pops = {p["name"]: p for p in data["populations"]}
    for section in ("triggers", "mitigations", "faults"):
        for i, m in enumerate(data[section]):
            for j, e in enumerate(m["effects"]):
                p, args = pops.get(e["target"]), e.get("args") or {}
                if p is None or e["op"] != "set_work":
                    continue
                loc = f"{section}[{i}].effects[{j}].args"
                if args.get("work") == "durable" and args.get("max_rate") is None and p.get("max_rate") is None:
                    n.issues.append(Issue(loc, args, f"max_rate (population {p['name']} has none, and durable work "
                                                   "needs a dispatch rate)"))
                if args.get("work") == "perishable" and p["health"] == "clients_without_backlog":
                    n.issues.append(Issue(f"{loc}.work", "perishable", f"durable (population {p['name']}'s health is "
                                                                     "its clients without a backlog)"))


#: the cross-checks in the order their issues are reported, a section each
CROSS_CHECKS = (_check_populations, _check_services, _check_service_chains, _check_paths, _check_monitoring,
                _check_clock, _check_triggers, _check_actions, _check_work_switches, _check_scoring, _check_par)


def _check_effect(e: dict, loc: str, n: _Names, params: dict | None = None) -> None:
    """One effect: its target, operation and arguments. ``params``: the mitigation's or
    fault's params (None: a trigger's effect, which has none to refer to)."""
    kinds, parts, issues = n.kinds, n.parts, n.issues
    kind = kinds.get(e["target"])
    if kind is None:
        issues.append(Issue(f"{loc}.target", e["target"], f"a part of the world ({closest_first(e['target'], kinds)})"))
        return
    ops = operations(kind)
    if e["op"] not in ops:
        issues.append(Issue(f"{loc}.op", e["op"], f"an operation of a {kind} ({closest_first(e['op'], ops)})"))
        return
    takes = ops[e["op"]].args
    args = e.get("args") or {}
    for k, arg in takes.items():
        if arg.required and k not in args:
            issues.append(Issue(f"{loc}.args", args, f"argument {k} (which {e['op']} requires)"))
    for k, v in args.items():
        if k not in takes:
            issues.append(Issue(f"{loc}.args.{k}", k, f"an argument of {e['op']} ({closest_first(k, takes)})"))
            continue
        if isinstance(v, str) and v.startswith("$"):
            if params is None:
                issues.append(Issue(f"{loc}.args.{k}", v, "a value (a trigger has no params or requester to refer to)"))
                continue
            if v == "$requester":
                continue
            if v[1:] not in params:
                refs = [f"${p}" for p in params] + ["$requester"]
                issues.append(Issue(f"{loc}.args.{k}", v, f"$requester or $name of one of the mitigation's params "
                                                          f"({closest_first(v, refs)})"))
                continue
            name, at = v[1:], f"{loc}.args.{k} ({v}'s default)"
            v = params[name]
            params[name] = takes[k].normalised(v)  # a duration param's default in seconds, as its argument takes it
        else:
            at = f"{loc}.args.{k}"
            args[k] = takes[k].normalised(v)
        wanted = takes[k].problem(v) or _unknown_name(takes[k], v, parts)
        if wanted:
            issues.append(Issue(at, v, f"{wanted} (argument {k} of {e['op']})"))


def _unknown_name(arg, value, parts: dict) -> str | None:
    """What was expected, if an argument that names parts of the world names one that does not exist."""
    kind = arg.about.names if arg.about else ""
    if not kind or value is None:
        return None
    known = parts[kind]
    for name in value if isinstance(value, list) else [value]:
        if name not in known:
            what = f"a list naming {kind}s" if isinstance(value, list) else f"the name of a {kind}"
            return f"{what} of the playbook ({closest_first(name, known - {'*'})})"
    return None


def param_uses(mitigation: dict, kinds: dict) -> dict[str, list]:
    """Where each of a mitigation's (or fault's) params goes: name -> (operation, ``Argument``) it fills."""
    out: dict[str, list] = {}
    for e in mitigation["effects"]:
        kind = kinds.get(e["target"])
        takes = operations(kind).get(e["op"]) if kind else None
        for k, v in (e.get("args") or {}).items():
            if takes and k in takes.args and isinstance(v, str) and v.startswith("$") and v[1:] in mitigation["params"]:
                out.setdefault(v[1:], []).append((e["op"], takes.args[k]))
    return out


def normalised_params(mitigation: dict, given: dict, kinds: dict) -> dict:
    """``given`` params as the arguments they fill take them (durations in seconds)."""
    uses = param_uses(mitigation, kinds)
    return {k: (uses[k][0][1].normalised(v) if uses.get(k) else v) for k, v in given.items()}


def param_problems(mitigation: dict, given: dict, kinds: dict) -> list[tuple[str, object, str]]:
    """(param, value, what was expected) for each value given for a mitigation's or fault's
    params (a runbook's ``do.params``, a team's or facilitator's command) that it does not
    declare, or that does not fit the argument it fills (or, filling none, its default's type)."""
    declared, uses, out = mitigation["params"], param_uses(mitigation, kinds), []
    for k, v in given.items():
        if k not in declared:
            out.append((k, v, f"a parameter of {mitigation['name']} ({closest_first(k, declared)})"))
            continue
        for op, arg in uses.get(k, []):
            wanted = arg.problem(v)
            if wanted:
                out.append((k, v, f"{wanted} (it is argument {arg.name} of {op})"))
                break
        else:
            if k not in uses and not _same_type(declared[k], v):
                out.append((k, v, _type_wanted(declared[k])))
    return out


def observable_metrics(data: dict) -> set[str]:
    out = set()
    for name, kind in agent_names(data).items():
        if kind not in TELEMETRY_KINDS:
            continue
        for m in AGENT_CLASSES[kind].METRICS:
            out.add(f"{name}.{m}")
    return out


# -- the whole pipeline --------------------------------------------------------------------

def load_playbook(ref: str, overrides: dict | None = None) -> Playbook:
    path = find_playbook(ref)
    tpl = read_template(path)
    values = resolve_variables(tpl, dict(overrides or {}), str(path))
    text = render(tpl, values)
    doc = parse_yaml(text, str(path), first_line=tpl.body_line)
    try:
        data = validate_playbook(doc, str(path))
    except InvalidPlaybook as e:
        raise _naming_variables(e, overrides or {}, tpl, values, doc) from None
    return Playbook(name=data["name"], source=str(path), text=text, data=data, variables=values)


def _naming_variables(e: InvalidPlaybook, overrides: dict, tpl: Template, values: dict, doc: dict) -> InvalidPlaybook:
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
        if names := [k for k, v in overrides.items() if same(v, i)]:
            return Issue(i.location, i.value, i.expected + f" (variable {names[0]} was set to {i.value!r} for this run)")
        if names := [k for k, v in values.items() if k not in overrides and same(v, i) and feeds(k, i.location)]:
            return Issue(i.location, i.value,
                         i.expected + f" (the default of variable {names[0]}, in the file's variables header)")
        return i
    return InvalidPlaybook(e.source, e.stage, [said(i) for i in e.issues])


def _at(doc, location: str):
    """The value at an issue's location (``services[1].cache.zipf``) in a parsed document."""
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", location):
        doc = doc[int(part[1:-1])] if part.startswith("[") else doc[part]
    return doc


def load_runbook(ref: str, playbook: Playbook) -> tuple[str, dict]:
    """Returns (yaml text, validated runbook). ``none`` is the built-in empty runbook."""
    try:
        path = find_runbook(ref, playbook.name, playbook.source)
    except NotFound:
        if ref != "none":
            raise
        # every playbook has the empty runbook, whether or not it ships a none.yaml
        return EMPTY_RUNBOOK, {"name": "none", "description": "Nobody acts.", "rules": []}
    text = read_text(path, InvalidRunbook)
    doc = parse_yaml(text, str(path), InvalidRunbook)
    issues: list[Issue] = []
    rb = check(doc, RUNBOOK, "", issues)
    if isinstance(rb, dict) and isinstance(rb.get("rules"), list):
        _check_rules(rb["rules"], playbook, issues)  # with the field errors, so one pass reports everything
    if issues:  # rule by rule, as the file reads (the field errors came first)
        rule = lambda i: int(m.group(1)) if (m := re.match(r"rules\[(\d+)\]", i.location)) else -1  # noqa: E731
        raise InvalidRunbook(str(path), "validate", sorted(issues, key=rule))
    return text, rb


def _check_rules(rules: list, playbook: Playbook, issues: list[Issue]) -> None:
    """A runbook's references to the playbook: actions, their params, metrics, alarms, times."""
    catalogue = {m["name"]: m for m in playbook.data["mitigations"]}
    kinds = agent_names(playbook.data)
    triggers = playbook.data["triggers"]
    refs = {"metric": set(playbook.data["monitoring"]["observe"]), "alarm": {a["name"] for a in playbook.data["monitoring"]["alarms"]},
            "action": set(catalogue), "first_trigger": min((t["at"] for t in triggers), default=None),
            "start": playbook.data["clock"]["start"]}
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict):
            continue  # field validation reported it
        loc = f"rules[{i}]"
        if isinstance(rule.get("when"), dict):
            rule["when"] = _check_condition(rule["when"], f"{loc}.when", refs, issues)
        if "do" not in rule:
            continue
        do = rule["do"]
        if isinstance(do, str):
            do = {"action": do, "params": {}}
        if not isinstance(do, dict) or "action" not in do:
            issues.append(Issue(f"{loc}.do", rule["do"], "an action name or {action: NAME, params: {...}}"))
            continue
        extra = set(do) - {"action", "params"}
        if extra:
            key = sorted(extra)[0]
            guess = nearest(key, ("action", "params"))
            issues.append(Issue(f"{loc}.do.{key}", do[key],
                                "only action and params" + (f" (did you mean {guess}?)" if guess else "")))
        if do["action"] not in catalogue:
            issues.append(Issue(f"{loc}.do.action", do["action"], f"a mitigation of {playbook.name} ({closest_first(do['action'], catalogue)})"))
        elif not isinstance(do.get("params") or {}, dict):
            issues.append(Issue(f"{loc}.do.params", do["params"], "a mapping"))
        else:
            for k, v, wanted in param_problems(catalogue[do["action"]], do.get("params") or {}, kinds):
                issues.append(Issue(f"{loc}.do.params.{k}", v, wanted))
        params = dict(do.get("params") or {}) if isinstance(do.get("params") or {}, dict) else {}
        if do["action"] in catalogue:
            params = normalised_params(catalogue[do["action"]], params, kinds)
        rule["do"] = {"action": do["action"], "params": params}


def _check_condition(c, loc: str, refs: dict, issues: list[Issue]):
    """One runbook condition against ``format.CONDITIONS``, its defaults filled in. ``refs``:
    what the playbook offers to refer to (metric, alarm, action) and its first trigger's time."""
    if not isinstance(c, dict):
        issues.append(Issue(loc, c, "a condition mapping"))
        return c
    keys = [k for k in CONDITIONS if k in c]
    if len(keys) != 1:
        issues.append(Issue(loc, c, f"exactly one of {', '.join(CONDITIONS)}"))
        return c
    k = keys[0]
    cond = CONDITIONS[k]
    for extra in sorted(set(c) - {k} - set(cond.keys), key=str):
        allowed = ", ".join([k, *cond.keys])
        issues.append(Issue(f"{loc}.{extra}", c[extra], f"one of the keys of a '{k}' condition ({allowed})"))
    if cond.one_of and sum(x in c for x in cond.one_of) != 1:
        issues.append(Issue(loc, c, f"exactly one of {', '.join(cond.one_of)}"))
    out = {k: c[k]}
    for key, spec in cond.keys.items():
        if key in c:
            out[key] = check(c[key], spec, f"{loc}.{key}", issues)
        elif spec.default is not _MISSING:
            out[key] = spec.default
    value, here = c[k], f"{loc}.{k}"
    if cond.holds == "conditions":
        if not isinstance(value, list) or not value:
            issues.append(Issue(here, value, "a non-empty list of conditions"))
        else:
            out[k] = [_check_condition(x, f"{here}[{j}]", refs, issues) for j, x in enumerate(value)]
    elif cond.holds == "condition":
        out[k] = _check_condition(value, here, refs, issues)
    elif cond.holds == "when":
        out[k] = _check_when(value, here, refs["first_trigger"], issues)
        if isinstance(out[k], (int, float)):  # (+DURATION counts from a trigger, at or after the start)
            issues += _before_start(out[k], refs["start"], here)
    else:
        known = refs[cond.holds]
        if value not in known:
            what = {"metric": "a metric the playbook's monitoring observes", "alarm": "an alarm of the playbook",
                    "action": "a mitigation of the playbook"}[cond.holds]
            issues.append(Issue(here, value, f"{what} ({closest_first(value, known)})"))
    return out


def _check_when(value, loc: str, first_trigger: float | None, issues: list[Issue]):
    """A clock time (\"07:30\") or +DURATION after the playbook's first trigger, as a clock time."""
    if isinstance(value, str) and value.strip().startswith("+"):
        after = check(value.strip()[1:], non_negative("duration"), loc, [])
        if after is None:
            issues.append(Issue(loc, value, "+ and a duration after the first trigger, such as +15m or +90s"))
            return None
        if first_trigger is None:
            issues.append(Issue(loc, value, "a clock time (the playbook has no trigger to count from)"))
            return None
        return first_trigger + after
    return check(value, Field("clock"), loc, issues)


def describe(tpl: Template) -> dict:
    """What ``gameday playbooks show`` prints: description, variables, mitigations, faults."""
    values = resolve_variables(tpl, {}, tpl.source)
    data = validate_playbook(parse_yaml(render(tpl, values), tpl.source, first_line=tpl.body_line), tpl.source)
    return {"name": data["name"], "title": data["title"], "description": data["description"],
            "variables": tpl.header, "mitigations": data["mitigations"], "faults": data["faults"], "par": {k: format_clock(v) for k, v in data["par"].items()},
            "runbooks": sorted(set(runbook_files(data["name"], tpl.source)) | {"none"})}
