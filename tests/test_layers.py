"""The order of imports, read from every module's syntax tree (imports inside functions
included): agents import nothing of orchestrator or reports; reports import nothing of
orchestrator; within orchestrator, no sub-package imports one above it."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: orchestrator's layers, lowest first: a module may import its own layer and those below
LAYERS = [
    {"errors", "budgets"},  # shared by everything: what a mistake is, and the bounds on every input
    {"playbook"},  # the format, loading, validation
    {"engine"},  # the world's plan, scoring, clock, journal
    {"hosting"},  # in process, or Ray actors over ZeroMQ
    {"runs"},  # the tick loop over a host, attribution, forks
    {"batch"},  # comparisons over many runs
    {"live"},  # live game days
    {"cli"},  # the command line
    {"api", "__init__", "docs"},  # the facade, and the reference pages generated from it and the CLI
]


def modules(package: str):
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        yield path, parts


def imported(path: Path, parts: tuple[str, ...]) -> set[str]:
    """Dotted names of what a module imports, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = list(parts[:-1]) if parts[-1] != "__init__" else list(parts[:-1])
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
                out |= set(names)
            else:
                out.add(node.module)
    return out


def layer_of(parts: tuple[str, ...]) -> int:
    name = parts[1] if len(parts) > 1 else parts[0]
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def test_agents_and_reports_import_nothing_above_them():
    bad = []
    for package, forbidden in (("agents", ("orchestrator", "reports")), ("reports", ("orchestrator",))):
        for path, parts in modules(package):
            bad += [(str(path.relative_to(ROOT)), m) for m in imported(path, parts) if m.split(".")[0] in forbidden]
    assert not bad, bad


def test_no_part_of_orchestrator_imports_a_layer_above_its_own():
    bad, seen = [], set()
    for path, parts in modules("orchestrator"):
        own = layer_of(parts)
        seen.add(parts[1])
        for m in imported(path, parts):
            names = m.split(".")
            if names[0] != "orchestrator" or len(names) < 2:
                continue
            if layer_of(tuple(names)) > own:
                bad.append((str(path.relative_to(ROOT)), m))
    assert not bad, bad
    every = set().union(*LAYERS)
    assert {p.removesuffix(".py") for p in seen} <= every  # every sub-package and top module has a layer


def test_every_folder_of_modules_is_a_package():
    """setuptools installs only folders with an __init__.py (a file a .gitignore could drop)."""
    for package in ("agents", "orchestrator", "reports"):
        for folder in {p.parent for p in (ROOT / package).rglob("*.py")}:
            assert (folder / "__init__.py").exists(), folder


def test_every_zeromq_call_is_in_the_fabric():
    """orchestrator/hosting/fabric.py holds every socket: the hosts', the tick barrier's and
    a live game day's; agents, reports and the rest of orchestrator import no zmq."""
    importers = [str(path.relative_to(ROOT)) for package in ("orchestrator", "agents", "reports")
                 for path, parts in modules(package) if any(m.split(".")[0] == "zmq" for m in imported(path, parts))]
    assert importers == ["orchestrator/hosting/fabric.py"]


@pytest.mark.slow
def test_no_module_below_the_command_line_names_a_flag():
    """Modules below ``cli/`` name what a caller gave by its field (``errors.setting``), which
    the command line says as its flag and the Python API as its keyword: a flag written in
    an error below would be wrong for the API, and one new option would touch every layer.
    (Docstrings may say how a command is used; a command line quoted whole in backticks is
    an instruction to type it.)"""
    flag = re.compile(r"(?<![\w`-])--[a-z][a-z-]+")
    found = []
    for package in ("orchestrator", "reports", "agents"):
        for path, parts in modules(package):
            if parts[:2] == ("orchestrator", "cli"):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = {id(n.body[0].value) for n in ast.walk(tree)
                    if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                    and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                    found += [f"{'/'.join(parts)}.py:{node.lineno}: {m}"
                              for m in flag.findall(re.sub(r"`[^`]*`", "", node.value))]
    assert not found, found


def test_only_the_hosts_reach_into_their_agents_and_messages():
    """One stepper: replays, forks, counterfactuals and shared beginnings drive a world through
    WorldRun's and the Host protocol's declared methods (agent, replace_agent, inbox, drop,
    snapshot, restore); nothing outside hosting/ reads or writes a host's agents or the
    messages on their way itself (attribution kept a copy of the tick loop that did)."""
    reach = re.compile(r"\bhost\.(agents|pending)\b")
    found = [f"{'/'.join(parts)}.py" for path, parts in modules("orchestrator")
             if parts[1] != "hosting" and reach.search(path.read_text(encoding="utf-8"))]
    assert not found, found


def test_the_playbook_is_loaded_by_stage_in_modules_of_under_400_lines():
    """playbook/loader.py held every stage in 1,107 lines; each stage is a module of its own."""
    sizes = {path.name: len(path.read_text(encoding="utf-8").splitlines())
             for path in (ROOT / "orchestrator" / "playbook").glob("*.py") if path.name != "format.py"}
    assert {"files.py", "template.py", "yaml_text.py", "checks.py", "effects.py", "runbooks.py", "loader.py"} <= set(sizes)
    assert all(n < 400 for n in sizes.values()), sizes
