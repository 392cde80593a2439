"""The generated pages of the documentation site (``docs/reference/``), each rendered from the
one source it describes, so that none can go stale:

- ``cli.md``, from the ``gameday`` command's click definitions (``cli_markdown``);
- ``api.md``, from the docstrings of ``orchestrator.api`` (``api_markdown``), whose examples
  are doctests;
- ``playbook.md``, the playbook reference (``gameday playbooks reference``).

``python -m orchestrator.docs`` writes them into ``docs/reference/`` of this checkout;
``tests/test_docs.py`` fails while a committed page differs from what they are now.
"""
from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import click

import orchestrator

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR = ROOT / "docs" / "reference"
REGENERATE = "python -m orchestrator.docs"

#: the public functions of orchestrator.api, in the order the page gives them (the package's own list)
API_FUNCTIONS = tuple(orchestrator.__all__)


# -- Markdown helpers --------------------------------------------------------------------------
_CODE_SPAN = re.compile(r"(``.+?``|`[^`]+`)")


def _escape(text: str) -> str:
    """``text`` as Markdown shows it literally: outside code spans, ``&`` and ``<`` as entities
    (a ``<time>`` in a default would be read as an HTML tag) and ``*`` escaped."""
    parts = _CODE_SPAN.split(text)
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace("*", r"\*")
    return "".join(parts)


def _single_backticks(text: str) -> str:
    """reST's ``double backticks`` as Markdown's single ones."""
    return re.sub(r"``(.+?)``", r"`\1`", text)


# -- the command line --------------------------------------------------------------------------
def _subcommands(command: click.Command, ctx: click.Context):
    """``(name, command)`` of each command right below ``command`` (a group), hidden ones
    left out, in the order ``--help`` lists them."""
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield name, sub


def _contexts(command: click.Command, ctx: click.Context):
    """``(command, ctx)`` for ``command`` and every command below it (``_subcommands``)."""
    yield command, ctx
    for name, sub in _subcommands(command, ctx):
        yield from _contexts(sub, click.Context(sub, info_name=name, parent=ctx, **sub.context_settings))


def _envvar(param: click.Parameter, ctx: click.Context) -> str | None:
    """The environment variable an option can come from (click's ``auto_envvar_prefix``)."""
    if not isinstance(param, click.Option) or param.is_eager:  # (--version, --help: read from the command line only)
        return None
    if param.envvar:
        return param.envvar if isinstance(param.envvar, str) else param.envvar[0]
    if param.allow_from_autoenv and ctx.auto_envvar_prefix and param.name:
        return f"{ctx.auto_envvar_prefix}_{param.name.upper()}"
    return None


def _command_section(command: click.Command, ctx: click.Context) -> list[str]:
    path = ctx.command_path
    level = "#" * min(2 + path.count(" ") - 1, 4) if " " in path else "##"
    out = [f"{level} {path}", "", "```text", " ".join([path, *command.collect_usage_pieces(ctx)]), "```", ""]
    if command.help:
        for para in inspect.cleandoc(command.help).split("\n\n"):
            out += [_escape(" ".join(line.strip() for line in para.splitlines())), ""]
    if isinstance(command, click.Group):
        out += ["Commands:", ""]
        for name, sub in _subcommands(command, ctx):
            anchor = re.sub(r"[^\w\- ]", "", f"{path} {name}".lower()).replace(" ", "-")
            out.append(f"- [`{name}`](#{anchor}): {_escape(sub.get_short_help_str(limit=200))}")
        out.append("")
    help_option = command.get_help_option(ctx)
    options = [p for p in command.get_params(ctx) if p is not help_option]
    records = [(p, p.get_help_record(ctx)) for p in options]
    records = [(p, r) for p, r in records if r is not None]
    if records:
        out += ["Options:", ""]
        for param, (opts, help_text) in records:
            line = f"- `{opts}`"
            if help_text:
                line += f": {_escape(help_text)}"
            env = _envvar(param, ctx)
            if env:
                line += f" (environment: `{env}`)"
            out.append(line)
        out.append("")
    return out


def cli_markdown() -> str:
    """The command-line reference: every command's usage, help and options, as ``--help``
    says them."""
    from orchestrator.cli import main

    root = click.Context(main, info_name="gameday", **main.context_settings)
    out = ["# Command-line reference", "",
           f"Generated from the `gameday` command's own definitions by `{REGENERATE}`; do not edit by hand.",
           "Each command prints the same with `-h` or `--help`.", "",
           "An option can also come from the environment variable named beside it: `GAMEDAY_`, the command "
           "and the option, in capitals (`GAMEDAY_RUN_SEED=7 gameday run` is `gameday run --seed 7`); "
           "the command line wins.", ""]
    for command, ctx in _contexts(main, root):
        out += _command_section(command, ctx)
    return "\n".join(out).rstrip("\n") + "\n"


# -- the Python API ----------------------------------------------------------------------------
def _docstring_markdown(doc: str) -> list[str]:
    """A docstring as Markdown: its prose paragraphs as they are (reST's double backticks made
    single), each run of doctest lines (``>>>`` and what they print) a ``pycon`` block."""
    out: list[str] = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        if para.lstrip().startswith(">>>"):
            out += ["```pycon", para, "```", ""]
        else:
            out += [_single_backticks(" ".join(line.strip() for line in para.splitlines())), ""]
    return out


def _signature(name: str, fn) -> str:
    sig = inspect.signature(fn, eval_str=True)
    params = [str(p) for p in sig.parameters.values()]
    ret = "" if sig.return_annotation is inspect.Signature.empty else f" -> {inspect.formatannotation(sig.return_annotation)}"
    return f"orchestrator.{name}(\n" + "".join(f"    {p},\n" for p in params) + f"){ret}"


def api_markdown() -> str:
    """The Python API's reference, from ``orchestrator.api``'s docstrings."""
    from orchestrator import api

    out = ["# Python API", "",
           f"Generated from the docstrings of `orchestrator/api.py` by `{REGENERATE}`; do not edit by hand.", ""]
    out += _docstring_markdown(api.__doc__)
    for name in API_FUNCTIONS:
        fn = getattr(api, name)
        out += [f"## `orchestrator.{name}`", "", "```python", _signature(name, fn), "```", ""]
        out += _docstring_markdown(fn.__doc__)
    return "\n".join(out).rstrip("\n") + "\n"


# -- the pages ---------------------------------------------------------------------------------
def pages() -> dict[str, str]:
    """Each generated page's file name in ``docs/reference/`` and its text as it is now."""
    from orchestrator.playbook.reference import reference_markdown

    return {"cli.md": cli_markdown(), "api.md": api_markdown(), "playbook.md": reference_markdown()}


def stale(where: Path | None = None) -> list[str]:
    """The generated pages whose file in ``where`` (default ``docs/reference/``) differs from
    what they are now."""
    where = REFERENCE_DIR if where is None else where
    return [name for name, text in pages().items() if _differs(where / name, text)]


def _differs(path: Path, text: str) -> bool:
    return not path.is_file() or path.read_text(encoding="utf-8") != text


def main() -> int:
    """Write every generated page into ``docs/reference/``, saying which changed."""
    REFERENCE_DIR.mkdir(parents=True, exist_ok=True)
    for name, text in pages().items():
        path = REFERENCE_DIR / name
        changed = _differs(path, text)
        if changed:
            path.write_text(text, encoding="utf-8")
        print(f"docs/reference/{name}: {'written' if changed else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
