"""Loading a playbook or runbook: render -> parse -> validate, each with its own errors.

A playbook file is Jinja2-templated YAML. It may start with a plain YAML header
document declaring its variables (``variables: {name: {default, description}}``),
followed by a line ``---`` and the templated body. Rendering runs in Jinja's sandbox
with ``StrictUndefined``, so an undefined variable is an error, never an empty string.
"""
from __future__ import annotations

import importlib.resources
import inspect
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import jinja2.sandbox
import yaml

from agents import AGENT_CLASSES
from agents.shards import SHARD_SEP
from .errors import InvalidPlaybook, InvalidRunbook, Issue, NotFound
from .schema import Field, L, M, check, names, non_negative, positive, ratio
from .timefmt import format_clock

RETRY = M(
    "a retry policy",
    backoff=Field("str", choices=("none", "constant", "exponential"), default="exponential"),
    base=non_negative(default=1.0, doc="seconds before the first retry"),
    multiplier=Field("number", min=1, default=2.0),
    cap=non_negative("duration", default=60.0, doc="largest delay"),
    jitter=Field("str", choices=("none", "full", "equal", "decorrelated"), default="full"),
    max_attempts=non_negative("int", default=0, doc="attempts including the first; 0 = unlimited"),
    budget=M("token-bucket retry budget", ratio=ratio(required=True), capacity=positive(default=100.0)),
    circuit_breaker=M("circuit breaker", threshold=ratio(default=0.5), window=positive("duration", default=10.0),
                      open_for=positive("duration", default=30.0), probe_fraction=ratio(default=0.1)),
)

EFFECT = M("an effect", target=Field("str", required=True), op=Field("str", required=True),
           args=Field("dict", default=dict))

DEVICE = M(
    "a pool of bridge devices",
    name=Field("str", required=True),
    description=Field("str", default=""),
    count=non_negative("int", required=True, doc="devices in the pool"),
    cpu_per_device=positive(required=True, doc="work units per second one device can process"),
    costs=M("CPU cost per item in work units", default=dict, setup=non_negative(default=20.0),
            request=non_negative(default=1.0), reject=non_negative(default=0.5)),
    conntrack=M("connection tracking", default=dict, capacity_per_device=positive(default=1e9),
                half_open_timeout=positive("duration", default=30.0)),
    queue=M("queueing", default=dict, buffer=non_negative("duration", default=5.0),
            base_latency=positive("duration", default=0.002),
            protection_target=non_negative("duration", default=0.05, doc="queue protection keeps")),
    protection=Field("bool", default=False),
)

SERVICE = M(
    "a service",
    name=Field("str", required=True),
    description=Field("str", default=""),
    capacity=positive(default=1e12, doc="requests per second"),
    depends_on=names(),
    recycling=M("servers that break and need recycling", breaks_when=Field("str", required=True),
                below=ratio(default=0.5), break_rate=non_negative(default=0.01), max_broken=ratio(default=0.8),
                needs=Field("str"), repair_rate=non_negative(default=0.001)),
    fail_fast=Field("bool", default=False, doc="a request it cannot serve gets an error at once, not a timeout"),
    fault=M("a fault (toxic): a share of the requests fail whatever the load", share=ratio(default=0.0),
            kind=Field("str", choices=("timeout", "error"), default="timeout")),
    then=Field("str", doc="a service every request answered well goes on to; the caller gets that one's answer"),
    queue=M("a work queue in front of the service: requests wait their turn, and those that waited longer "
            "than their caller's timeout are still worked on, for nobody (congestive collapse)",
            limit=positive("duration", default=3600.0, doc="seconds of work the queue holds; more is refused at once")),
    service_time=M("how long a request's work takes: deterministic, every tick does exactly its capacity; "
                   "exponential, each request's service time is exponential at rate capacity, so the requests "
                   "done in a busy tick of length dt are Poisson(capacity x dt); gamma, the work done in a busy "
                   "tick has mean capacity x dt and variance cv^2 x capacity x dt (cv: the service times' "
                   "coefficient of variation)", default=dict,
                   distribution=Field("str", choices=("deterministic", "exponential", "gamma"), default="deterministic"),
                   cv=positive(default=1.0, doc="coefficient of variation of the service times (gamma only)")),
    leases=M("leases with a time to live that the service holds in a store service (see agents/leases.py)",
             count=positive("int", required=True, doc="leases held (say, one per server managed)"),
             store=Field("str", required=True, doc="the service the leases are kept in; renewing needs it"),
             ttl=positive("duration", default=300.0, doc="a lease not renewed for this long expires (whole renewal periods)"),
             renew_every=positive("duration", default=60.0),
             retry_every=positive("duration", default=60.0, doc="how often an expired lease's re-establishment is tried"),
             timeout=positive("duration", default=30.0, doc="lease work that waited longer in the queue fails"),
             reestablish_cost=positive(default=1.0, doc="units of work re-establishing a lease costs (a renewal costs 1)")),
    health_checks=M("the service is a load balancer whose health checks take targets out of service and put "
                    "them back (see agents/health_checks.py)",
                    network=Field("str", required=True, doc="the service whose queue wait is the network propagation delay"),
                    targets=positive("int", default=100), interval=positive("duration", default=10.0),
                    fall=positive("int", default=3, doc="failed checks in a row that take a target out"),
                    rise=positive("int", default=3, doc="passed checks in a row that put it back"),
                    checker_turnover=non_negative(default=0.0, doc="share of the health-check fleet that is new each hour"),
                    target_turnover=non_negative(default=0.0, doc="share of the targets that are new each hour"),
                    dns_ttl=positive("duration", default=60.0, doc="how long callers keep sending to a removed target"),
                    failover=Field("bool", default=True, doc="failed checks take targets out of service")),
    dns=M("DNS automation for the service's endpoint: a planner, enactors and their clean-up (see agents/dns.py)",
          plan_every=positive("duration", default=60.0), enactors=positive("int", default=3),
          delay=positive("duration", default=5.0, doc="how long an enactor usually takes to apply a plan"),
          slow_chance=ratio(default=0.0, doc="chance that an application is badly delayed"),
          slow_delay=positive("duration", default=600.0), cleanup_after=positive("duration", default=30.0),
          keep=positive("int", default=3, doc="clean-up deletes plans this many generations older than its own"),
          guard=Field("bool", default=False, doc="skip stale plans and never delete the plan in place")),
)

POPULATION = M(
    "a client population",
    name=Field("str", required=True),
    description=Field("str", default=""),
    clients=positive("int", required=True),
    rate=non_negative(required=True, doc="fresh requests per client per second"),
    mode=Field("str", choices=("pooled", "per_request"), default="pooled"),
    work=Field("str", choices=("perishable", "durable"), default="perishable"),
    max_rate=non_negative(doc="durable work: most requests dispatched per second"),
    shards=positive("int", default=1, doc="simulate as this many shards, which can run on different hosts"),
    path=names("device pools crossed, in order"),
    target=Field("str"),
    depends_on=names(),
    connection=M("pooled connections", default=dict, lifetime=positive("duration", default=600.0),
                 timeout=positive("duration", default=3.0), reconnect=RETRY,
                 reconnect_on=L(Field("str", choices=("timeout", "reject")), default=lambda: ["timeout"])),
    request=M("requests", default=dict, timeout=positive("duration", default=5.0)),
    retry=RETRY,
    bugs=M("latent bugs", default=dict, reconnect_ignores_backoff=Field("bool", default=False),
           reconnect_delay=positive("duration")),
)

ALARM = M("an alarm", name=Field("str", required=True), metric=Field("str", required=True),
          above=Field("number"), below=Field("number"), no_data=Field("bool", default=False),
          **{"for": non_negative("duration", default=60.0)})

PLAYBOOK = M(
    "a playbook",
    name=Field("str", required=True),
    title=Field("str", required=True),
    description=Field("str", default=""),
    incident=Field("dict", default=dict),
    clock=M("the simulated clock", required=True, start=Field("clock", default=0.0),
            tick=positive("duration", default=1.0), duration=positive("duration", required=True)),
    devices=L(DEVICE, default=list),
    services=L(SERVICE, default=list),
    populations=L(POPULATION, required=True),
    monitoring=M("monitoring", default=dict, path=names(), timeout=positive("duration", default=5.0),
                 observe=names(), stale_after=positive("duration", default=180.0),
                 log_delay=positive("duration", default=600.0), publish_every=positive("duration", default=10.0),
                 telemetry_every=positive("duration", default=60.0), alarms=L(ALARM, default=list)),
    deployment=M("deployment tooling", default=dict, path=names(), step_time=positive("duration", default=60.0),
                 retry_delay=positive("duration", default=30.0), timeout=positive("duration", default=10.0)),
    status=M("status dashboard", default=dict, path=names(), timeout=positive("duration", default=10.0),
             calls=positive("int", default=1, doc="backend calls one post needs, all of which must succeed"),
             retry_delay=positive("duration", default=30.0),
             failover=M("standby failover", after=non_negative("duration", required=True), path=names(),
                        standby_path=names())),
    triggers=L(M("a trigger", name=Field("str", required=True), description=Field("str", default=""),
                 at=Field("clock", required=True), repeat_every=positive("duration"),
                 effects=L(EFFECT, required=True)), default=list),
    mitigations=L(M("a mitigation", name=Field("str", required=True), description=Field("str", default=""),
                    deploy=Field("bool", default=True), steps=non_negative("int", default=1),
                    lead_time=non_negative("duration", default=0.0),
                    risk=Field("str", choices=("none", "low", "medium", "high"), default="low"),
                    params=Field("dict", default=dict), effects=L(EFFECT, default=list)), default=list),
    faults=L(M("a fault a facilitator can inject during a live game day", name=Field("str", required=True),
               description=Field("str", default=""), params=Field("dict", default=dict),
               effects=L(EFFECT, required=True)), default=list),
    scoring=M("scoring", default=dict,
              loop=M("when the loop counts as broken", default=dict, devices=names(), populations=names(),
                     services=names("services whose work must be useful again (work_useful / work_done)"),
                     setup_success_min=ratio(default=0.95), amplification_max=positive(default=1.5),
                     useful_work_min=ratio(default=0.9),
                     hold=non_negative("duration", default=600.0)),
              healthy=M("when devices count as healthy", default=dict, devices=names("default: loop.devices"),
                        utilisation_max=positive(default=0.85),
                        success_min=ratio(default=0.99), hold=non_negative("duration", default=600.0)),
              backlog=M("durable backlogs", default=dict, populations=names(),
                        services=names("services whose work queue must be back to steady state"),
                        threshold=positive(default=60.0, doc="seconds of arrivals (of queue wait, for a service) counted as steady state"),
                        hold=non_negative("duration", default=600.0)),
              recovered=M("recovery milestones, per population (success of its attempts) and per service "
                          "(its success ratio)", default=dict, populations=names(), services=names(),
                          success_min=ratio(default=0.95), hold=non_negative("duration", default=300.0)),
              impact=Field("dict", default=dict, values=non_negative())),
    par=Field("dict", default=dict, values=Field("clock")),
)

EMPTY_RUNBOOK = "name: none\ndescription: Nobody acts.\nrules: []\n"

CONDITION_KEYS = ("all", "any", "not", "at", "no_data", "metric", "log", "alarm", "done", "not_done")

RUNBOOK = M(
    "a runbook",
    name=Field("str", required=True),
    description=Field("str", default=""),
    rules=L(M("a rule", name=Field("str"), when=Field("dict", required=True), do=Field("any", required=True),
              repeat=Field("bool", default=False), every=positive("duration", default=600.0),
              historical=Field("clock", doc="when the real team's action took effect (shown in reports)")),
            default=list),
)

#: operations each kind of target accepts (the ``op_*`` methods of the agent classes)
def _ops(cls) -> set[str]:
    return {n[3:] for n in dir(cls) if n.startswith("op_")}


def op_arguments(cls, op: str) -> dict[str, tuple[str, bool]]:
    """The arguments operation ``op`` of agent class ``cls`` takes (its ``op_`` method's
    parameters after the tick): name -> (its annotation, whether it is required)."""
    params = list(inspect.signature(getattr(cls, f"op_{op}")).parameters.values())[2:]  # self, tick
    return {p.name: (str(p.annotation), p.default is p.empty) for p in params
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


#: annotation -> (whether a value fits it, what was expected); other annotations are not checked here
_ARG_TYPES = {
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
}


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
    d = builtin_dir() / "runbooks" / playbook
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def find_playbook(ref: str) -> Path:
    p = Path(ref)
    if p.is_file():
        return p
    cand = builtin_dir() / f"{ref}.yaml.j2"
    if cand.is_file():
        return cand
    raise NotFound(f"no playbook {ref!r}: not a file, and the built-in playbooks are: {', '.join(builtin_playbooks())}")


def find_runbook(ref: str, playbook: str) -> Path:
    p = Path(ref)
    if p.is_file():
        return p
    cand = builtin_dir() / "runbooks" / playbook / f"{ref}.yaml"
    if cand.is_file():
        return cand
    known = ", ".join(sorted(set(builtin_runbooks(playbook)) | {"none"}))
    raise NotFound(f"no runbook {ref!r}: not a file, and the built-in runbooks of {playbook} are: {known}")


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
                    doc = yaml.safe_load(head) or {}
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
    if ctx and mark:
        expected += f" ({ctx} at line {mark.line + first_line}, column {mark.column + 1})"
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
            issues.append(Issue(f"variables.{name}", decl, "a mapping with 'default' and 'description'"))
            continue
        values[name] = decl["default"]
    for name, value in overrides.items():
        loc = (where or {}).get(name) or f"--set {name}"
        if name not in tpl.header:
            known = ", ".join(sorted(tpl.header)) or "none"
            issues.append(Issue(loc, value, f"one of the playbook's variables ({known})"))
            continue
        default = values.get(name)
        if default is not None and not _same_type(default, value):
            issues.append(Issue(loc, value, f"a value of the same type as the default {default!r}"))
            continue
        values[name] = value
    if issues:
        raise InvalidPlaybook(source, "variables", issues)
    return values


def _same_type(default, value) -> bool:
    num = (int, float)
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, num):
        return isinstance(value, num)
    return isinstance(value, type(default))


def render(tpl: Template, values: dict) -> str:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                                                        autoescape=False)
    try:
        return env.from_string(tpl.body).render(**values)
    except jinja2.exceptions.SecurityError as e:
        raise InvalidPlaybook(tpl.source, "render", [Issue(_template_line(e, tpl), str(e), "no access to unsafe attributes")])
    except jinja2.exceptions.UndefinedError as e:
        known = ", ".join(sorted(values)) or "none"
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
        doc = yaml.safe_load(text)
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
    if issues:
        raise InvalidPlaybook(source, "validate", issues)
    return data


def agent_names(data: dict) -> dict[str, str]:
    """Every agent a playbook builds: name -> kind."""
    out = {}
    for section, kind in KIND_OF_SECTION.items():
        for item in data.get(section) or []:
            out[item["name"]] = kind
    out.update({"monitoring": "monitoring", "deployment": "deployment", "status": "status", "triggers": "automation"})
    return out


def _cross_check(data: dict, issues: list[Issue]) -> None:
    kinds: dict[str, str] = {}
    for section, kind in KIND_OF_SECTION.items():
        for i, item in enumerate(data[section]):
            if item["name"] in kinds or item["name"] in ("monitoring", "deployment", "status", "triggers", "operator"):
                issues.append(Issue(f"{section}[{i}].name", item["name"], "a name used by no other part of the world"))
            if SHARD_SEP in item["name"]:
                issues.append(Issue(f"{section}[{i}].name", item["name"], f"a name without {SHARD_SEP!r} (it names shards)"))
            kinds[item["name"]] = kind
    devices = {d["name"] for d in data["devices"]}
    services = {s["name"] for s in data["services"]}
    health_sources = services | {p["name"] for p in data["populations"]}
    all_kinds = agent_names(data)

    def check_path(path, loc):
        for j, hop in enumerate(path):
            if hop not in devices:
                issues.append(Issue(f"{loc}[{j}]", hop, f"a device pool ({', '.join(sorted(devices)) or 'none defined'})"))

    for i, p in enumerate(data["populations"]):
        loc = f"populations[{i}]"
        check_path(p["path"], f"{loc}.path")
        if p.get("target") and p["target"] not in services:
            issues.append(Issue(f"{loc}.target", p["target"], f"a service ({', '.join(sorted(services)) or 'none defined'})"))
        for j, d in enumerate(p["depends_on"]):
            if d not in health_sources or d == p["name"]:
                issues.append(Issue(f"{loc}.depends_on[{j}]", d, "another population or a service"))
        if p["work"] == "durable" and p.get("max_rate") is None:
            issues.append(Issue(f"{loc}.max_rate", None, "a dispatch rate (requests/s) for durable work"))
    for i, s in enumerate(data["services"]):
        for j, d in enumerate(s["depends_on"]):
            if d not in health_sources or d == s["name"]:
                issues.append(Issue(f"services[{i}].depends_on[{j}]", d, "a population or another service"))
        rec = s.get("recycling")
        if rec:
            for key in ("breaks_when", "needs"):
                if rec.get(key) and rec[key] not in health_sources:
                    issues.append(Issue(f"services[{i}].recycling.{key}", rec[key], "a population or a service"))
        for loc, other in ((f"services[{i}].then", s.get("then")),
                           (f"services[{i}].leases.store", (s.get("leases") or {}).get("store")),
                           (f"services[{i}].health_checks.network", (s.get("health_checks") or {}).get("network"))):
            if other is not None and (other not in services or other == s["name"]):
                issues.append(Issue(loc, other, "another service"))
        hc = s.get("health_checks")
        if hc and hc["network"] in services and not next(x for x in data["services"] if x["name"] == hc["network"]).get("queue"):
            issues.append(Issue(f"services[{i}].health_checks.network", hc["network"],
                                "a service with a queue (its queue wait is the propagation delay)"))
        lease = s.get("leases")
        if lease and (lease["ttl"] < lease["renew_every"] or abs(lease["ttl"] / lease["renew_every"]
                                                                 - round(lease["ttl"] / lease["renew_every"])) > 1e-9):
            issues.append(Issue(f"services[{i}].leases.ttl", lease["ttl"],
                                f"a whole number of renewal periods ({lease['renew_every']:g} s), at least one"))
    chain = {s["name"]: s.get("then") for s in data["services"]}
    for i, s in enumerate(data["services"]):
        seen, at = {s["name"]}, chain.get(s["name"])
        while at in chain and at not in seen:
            seen.add(at)
            at = chain[at]
        if at == s["name"]:
            issues.append(Issue(f"services[{i}].then", s["then"], "a chain of services that does not lead back to this one"))
    for section in ("monitoring", "deployment", "status"):
        check_path(data[section]["path"], f"{section}.path")
    if data["status"].get("failover"):
        check_path(data["status"]["failover"]["path"], "status.failover.path")
        check_path(data["status"]["failover"]["standby_path"], "status.failover.standby_path")
    known_metrics = observable_metrics(data)
    for j, m in enumerate(data["monitoring"]["observe"]):
        if m not in known_metrics:
            issues.append(Issue(f"monitoring.observe[{j}]", m, "agent.metric naming a part of this world and one of its metrics"))
    for j, a in enumerate(data["monitoring"]["alarms"]):
        if a["metric"] not in data["monitoring"]["observe"]:
            issues.append(Issue(f"monitoring.alarms[{j}].metric", a["metric"], "a metric listed in monitoring.observe"))
        if sum(k in a and a[k] not in (None, False) for k in ("above", "below", "no_data")) != 1:
            issues.append(Issue(f"monitoring.alarms[{j}]", a["name"], "exactly one of above, below, no_data"))
    tick = data["clock"]["tick"]
    if tick > MAX_TICK_S:
        issues.append(Issue("clock.tick", tick, f"a tick of at most {MAX_TICK_S:g} seconds"))
    elif data["clock"]["duration"] / tick > MAX_TICKS:
        issues.append(Issue("clock.duration", data["clock"]["duration"], f"at most {MAX_TICKS:,} ticks per run"))
    for i, t in enumerate(data["triggers"]):
        for j, e in enumerate(t["effects"]):
            _check_effect(e, f"triggers[{i}].effects[{j}]", all_kinds, issues)
    for section in ("mitigations", "faults"):
        seen = set()
        for i, m in enumerate(data[section]):
            if m["name"] in seen:
                issues.append(Issue(f"{section}[{i}].name", m["name"], f"a name used by no other of the {section}"))
            seen.add(m["name"])
            for j, e in enumerate(m["effects"]):
                _check_effect(e, f"{section}[{i}].effects[{j}]", all_kinds, issues, m["params"])
    sc = data["scoring"]
    for key, pool, what in (("loop.devices", devices, "a device pool"), ("healthy.devices", devices, "a device pool"),
                            ("loop.populations", {p["name"] for p in data["populations"]}, "a population"),
                            ("loop.services", services, "a service"),
                            ("backlog.services", {s["name"] for s in data["services"] if s.get("queue")}, "a service with a queue"),
                            ("backlog.populations", {p["name"] for p in data["populations"] if p["work"] == "durable"}, "a durable population"),
                            ("recovered.populations", {p["name"] for p in data["populations"]}, "a population"),
                            ("recovered.services", services, "a service")):
        a, b = key.split(".")
        for j, n in enumerate(sc[a][b]):
            if n not in pool:
                issues.append(Issue(f"scoring.{key}[{j}]", n, what))
    for n in sc["impact"]:
        if n not in {p["name"] for p in data["populations"]}:
            issues.append(Issue(f"scoring.impact.{n}", n, "a population"))


def _check_effect(e: dict, loc: str, kinds: dict, issues: list[Issue], params: dict | None = None) -> None:
    kind = kinds.get(e["target"])
    if kind is None:
        issues.append(Issue(f"{loc}.target", e["target"], f"a part of the world ({', '.join(sorted(kinds))})"))
        return
    cls = AGENT_CLASSES[kind]
    if e["op"] not in _ops(cls):
        issues.append(Issue(f"{loc}.op", e["op"], f"an operation of a {kind} ({', '.join(sorted(_ops(cls)))})"))
        return
    takes = op_arguments(cls, e["op"])
    args = e.get("args") or {}
    for k in takes:
        if takes[k][1] and k not in args:
            issues.append(Issue(f"{loc}.args", args, f"argument {k} (which {e['op']} requires)"))
    for k, v in args.items():
        if k not in takes:
            known = ", ".join(takes) if takes else "none"
            issues.append(Issue(f"{loc}.args.{k}", k, f"an argument of {e['op']} ({known})"))
            continue
        if isinstance(v, str) and v.startswith("$"):
            if v == "$requester":
                continue
            if v[1:] not in (params or {}):
                issues.append(Issue(f"{loc}.args.{k}", v, "$requester or $name of one of the mitigation's params"))
                continue
            v, at = params[v[1:]], f"{loc}.args.{k} ({v}'s default)"
        else:
            at = f"{loc}.args.{k}"
        fits = [_ARG_TYPES[t] for t in takes[k][0].replace(" ", "").split("|") if t in _ARG_TYPES]
        if fits and v is not None and not any(ok(v) for ok, _ in fits):
            issues.append(Issue(at, v, " or ".join(what for _, what in fits) + f" (argument {k} of {e['op']})"))


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
    data = validate_playbook(doc, str(path))
    return Playbook(name=data["name"], source=str(path), text=text, data=data, variables=values)


def load_runbook(ref: str, playbook: Playbook) -> tuple[str, dict]:
    """Returns (yaml text, validated runbook). ``none`` is the built-in empty runbook."""
    try:
        path = find_runbook(ref, playbook.name)
    except NotFound:
        if ref != "none":
            raise
        # every playbook has the empty runbook, whether or not it ships a none.yaml
        return EMPTY_RUNBOOK, {"name": "none", "description": "Nobody acts.", "rules": []}
    text = read_text(path, InvalidRunbook)
    doc = parse_yaml(text, str(path), InvalidRunbook)
    issues: list[Issue] = []
    rb = check(doc, RUNBOOK, "", issues)
    if not issues:
        catalogue = {m["name"]: m for m in playbook.data["mitigations"]}
        observed = set(playbook.data["monitoring"]["observe"])
        alarms = {a["name"] for a in playbook.data["monitoring"]["alarms"]}
        for i, rule in enumerate(rb["rules"]):
            loc = f"rules[{i}]"
            do = rule["do"]
            if isinstance(do, str):
                do = {"action": do, "params": {}}
            if not isinstance(do, dict) or "action" not in do:
                issues.append(Issue(f"{loc}.do", rule["do"], "an action name or {action: NAME, params: {...}}"))
                continue
            extra = set(do) - {"action", "params"}
            if extra:
                issues.append(Issue(f"{loc}.do.{sorted(extra)[0]}", do[sorted(extra)[0]], "only action and params"))
            if do["action"] not in catalogue:
                issues.append(Issue(f"{loc}.do.action", do["action"], f"a mitigation of {playbook.name} ({', '.join(sorted(catalogue))})"))
            elif not isinstance(do.get("params") or {}, dict):
                issues.append(Issue(f"{loc}.do.params", do["params"], "a mapping"))
            else:
                unknown = set(do.get("params") or {}) - set(catalogue[do["action"]]["params"])
                for k in sorted(unknown):
                    issues.append(Issue(f"{loc}.do.params.{k}", do["params"][k],
                                        f"a parameter of {do['action']} ({', '.join(sorted(catalogue[do['action']]['params'])) or 'none'})"))
            rule["do"] = {"action": do["action"], "params": dict(do.get("params") or {})}
            rule["when"] = _check_condition(rule["when"], f"{loc}.when", observed, alarms, set(catalogue), issues)
    if issues:
        raise InvalidRunbook(str(path), "validate", issues)
    return text, rb


def _check_condition(c, loc: str, observed: set, alarms: set, actions: set, issues: list[Issue]):
    if not isinstance(c, dict):
        issues.append(Issue(loc, c, "a condition mapping"))
        return c
    keys = [k for k in CONDITION_KEYS if k in c]
    if len(keys) != 1:
        issues.append(Issue(loc, c, f"exactly one of {', '.join(CONDITION_KEYS)}"))
        return c
    k = keys[0]
    allowed = {"all": {"all"}, "any": {"any"}, "not": {"not"}, "at": {"at", "for"}, "no_data": {"no_data", "for"},
               "metric": {"metric", "above", "below", "for", "max_age"}, "log": {"log", "above", "below"},
               "alarm": {"alarm", "for"}, "done": {"done", "after", "effective"}, "not_done": {"not_done"}}[k]
    for extra in sorted(set(c) - allowed):
        issues.append(Issue(f"{loc}.{extra}", c[extra], f"one of the keys of a '{k}' condition ({', '.join(sorted(allowed))})"))
    out = dict(c)
    sub_issues: list[Issue] = []
    for dk in ("for", "after", "max_age"):
        if dk in c:
            out[dk] = check(c[dk], non_negative("duration"), f"{loc}.{dk}", sub_issues)
    if k in ("all", "any"):
        if not isinstance(c[k], list) or not c[k]:
            issues.append(Issue(f"{loc}.{k}", c[k], "a non-empty list of conditions"))
        else:
            out[k] = [_check_condition(x, f"{loc}.{k}[{j}]", observed, alarms, actions, issues) for j, x in enumerate(c[k])]
    elif k == "not":
        out[k] = _check_condition(c[k], f"{loc}.not", observed, alarms, actions, issues)
    elif k == "at":
        out[k] = check(c[k], Field("clock"), f"{loc}.at", sub_issues)
    elif k in ("no_data", "metric", "log"):
        if c[k] not in observed:
            issues.append(Issue(f"{loc}.{k}", c[k], "a metric the playbook's monitoring observes"))
        if k != "no_data" and (("above" in c) == ("below" in c)):
            issues.append(Issue(loc, c, "exactly one of above, below"))
        for bk in ("above", "below"):
            if bk in c:
                out[bk] = check(c[bk], Field("number"), f"{loc}.{bk}", sub_issues)
    elif k == "alarm":
        if c[k] not in alarms:
            issues.append(Issue(f"{loc}.alarm", c[k], f"an alarm of the playbook ({', '.join(sorted(alarms)) or 'none'})"))
    elif k in ("done", "not_done"):
        if c[k] not in actions:
            issues.append(Issue(f"{loc}.{k}", c[k], "a mitigation of the playbook"))
    issues.extend(sub_issues)
    return out


def describe(tpl: Template) -> dict:
    """What ``gameday playbooks show`` prints: description, variables, mitigations, faults."""
    values = resolve_variables(tpl, {}, tpl.source)
    data = validate_playbook(parse_yaml(render(tpl, values), tpl.source, first_line=tpl.body_line), tpl.source)
    return {"name": data["name"], "title": data["title"], "description": data["description"],
            "variables": tpl.header, "mitigations": data["mitigations"], "faults": data["faults"], "par": {k: format_clock(v) for k, v in data["par"].items()},
            "runbooks": builtin_runbooks(data["name"])}
