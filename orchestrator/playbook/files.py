"""Finding playbook and runbook files: a path, a built-in's name, a playbook's own runbooks."""
from __future__ import annotations

import importlib.resources
import os
from pathlib import Path


from orchestrator import budgets
from orchestrator.errors import Issue, NotFound, closest_first
from reports.files import not_regular


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


def read_text(path: Path, error_cls) -> str:
    """A playbook, runbook or vars file's text: a regular file of at most budgets.FILE_BYTES
    of UTF-8 (opened without blocking and checked before it is read: a FIFO would wait for
    a writer, /dev/zero never ends). One that cannot be read is the user's mistake, not a
    traceback."""
    def refuse(value, expected: str):
        return error_cls(str(path), "read", [Issue("file", value, expected)])

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise refuse(str(path), f"a readable file ({e.strerror})") from None
    kind = not_regular(os.fstat(fd).st_mode)
    if kind:
        os.close(fd)
        raise refuse(f"{path} ({kind})", "a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(budgets.FILE_BYTES + 1)
        except OSError as e:
            raise refuse(str(path), f"a readable file ({e.strerror})") from None
    if len(data) > budgets.FILE_BYTES:
        raise refuse(f"{path} (over {budgets.FILE_BYTES:,} bytes)",
                     f"a file of at most {budgets.FILE_BYTES:,} bytes (gameday's budget for a playbook, runbook or vars "
                     "file)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error_cls(str(path), "read", [Issue(f"byte {e.start}", e.object[e.start:e.end], "UTF-8 text")]) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # (universal newlines, as reading as text does)
