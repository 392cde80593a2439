"""Every command of the tutorial (docs/tutorial.md) runs, in order, in a fresh folder, and
prints what the tutorial shows.

The tutorial's Markdown is read for:

- a fenced block right after ``<!-- file: PATH -->``: the file is written with the block's text
  (``<!-- append: PATH -->``: the text is added to its end), as the reader saves it;
- a ```` ```console ```` block: each line ``$ COMMAND`` is run (by bash, ``gameday`` being this
  checkout's command), and the lines after it, up to the next ``$``, are what it must print
  (standard output and error together, as in a terminal). A line ``...`` stands for any lines
  (none included); ``...`` within a line for any text. Every other line must be printed as
  shown, in order, and nothing else. A command must exit 0, or with the status a
  ``<!-- exit: N -->`` before its block says.

So a command the tutorial shows that no longer works, or whose output changed, fails here.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"

MARKER = re.compile(r"^<!--\s*(file|append|exit):\s*(\S+)\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Command:
    line: int
    text: str
    expected: list[str] = field(default_factory=list)
    exit_code: int = 0


@dataclass
class Step:
    kind: str  # "file", "append" or "command"
    line: int
    path: str = ""
    text: str = ""
    command: Command | None = None


def steps(markdown: str) -> list[Step]:
    """The tutorial's files and commands, in the order a reader meets them."""
    lines = markdown.splitlines()
    out: list[Step] = []
    pending: dict[str, str] = {}
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if m:
            pending[m.group(1)] = m.group(2)
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            if lines[i].strip():
                assert not pending, f"docs/tutorial.md:{i + 1}: a marker {pending} must come right before a block"
            i += 1
            continue
        lang, start = f.group(1), i + 1
        end = next(j for j in range(start, len(lines)) if lines[j].rstrip() == "```")
        body = lines[start:end]
        if "file" in pending or "append" in pending:
            kind = "file" if "file" in pending else "append"
            out.append(Step(kind, start, path=pending[kind], text="\n".join(body) + "\n"))
        elif lang == "console":
            code = int(pending.get("exit", 0))
            current: Command | None = None
            for n, text in enumerate(body, start + 1):
                if text.startswith("$ "):
                    current = Command(n, text[2:], exit_code=code)
                    out.append(Step("command", n, command=current))
                else:
                    assert current is not None, f"docs/tutorial.md:{n}: output before any command"
                    current.expected.append(text.rstrip())
        else:
            assert not pending, f"docs/tutorial.md:{start}: {pending} before a block that is neither a file nor console"
        pending = {}
        i = end + 1
    return out


def pattern(expected: list[str]) -> re.Pattern:
    """The output a command must print: each line as shown, ``...`` for any lines or any text."""
    parts = []
    for line in expected:
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split("...")) + r"[ \t]*\n")
    return re.compile("".join(parts), re.DOTALL)


def matches(expected: list[str], printed: str) -> bool:
    text = "\n".join(line.rstrip() for line in printed.splitlines()) + ("\n" if printed else "")
    return pattern(expected).fullmatch(text) is not None


def test_the_matching_is_strict():
    """What the checks allow: ``...`` lines and inline gaps, and nothing else."""
    assert matches(["a", "...", "d"], "a\nb\nc\nd\n")
    assert matches(["a", "...", "b"], "a\nb\n")
    assert matches(["x ... z"], "x y z\n")
    assert not matches(["a", "b"], "a\nb\nc\n")  # a line printed but not shown
    assert not matches(["a", "c"], "a\nb\nc\n")
    assert not matches(["impact 7.9"], "impact 8.0\n")
    assert not matches(["a"], "")


def test_the_tutorial_shows_files_and_commands():
    found = steps(TUTORIAL.read_text(encoding="utf-8"))
    commands = [s.command.text for s in found if s.kind == "command"]
    assert {"feed.yaml.j2", "runbooks/feed/shed-load.yaml"} <= {s.path for s in found if s.path}
    assert any(c.startswith("gameday playbooks validate") for c in commands)
    assert any(c.startswith("gameday run") for c in commands)
    assert any(c.startswith("gameday compare") for c in commands)
    assert all(s.command.expected for s in found if s.kind == "command"), "every command shows its output"


@pytest.mark.slow
def test_every_command_of_the_tutorial_prints_what_it_shows(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "gameday"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m orchestrator.cli \"$@\"\n")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GAMEDAY_")}  # (as a reader's shell has it)
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])), TERM="dumb")

    failures = []
    for step in steps(TUTORIAL.read_text(encoding="utf-8")):
        if step.kind in ("file", "append"):
            path = work / step.path
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a" if step.kind == "append" else "w", encoding="utf-8") as f:
                f.write(step.text)
            continue
        cmd = step.command
        done = subprocess.run(["bash", "-c", cmd.text], cwd=work, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        if done.returncode != cmd.exit_code or not matches(cmd.expected, done.stdout):
            failures.append(f"docs/tutorial.md:{cmd.line}: $ {cmd.text}\n"
                            f"exit status {done.returncode} (the tutorial expects {cmd.exit_code}); it printed:\n"
                            f"{done.stdout}\nthe tutorial shows:\n" + "\n".join(cmd.expected))
            break  # (the commands after it build on it)
    assert not failures, "\n\n".join(failures)
