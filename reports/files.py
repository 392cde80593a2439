"""Writing and reading the files of a run's or a comparison's directory so that nothing
is lost or half-written, and never through a symbolic link out of the directory.

``write_atomic`` replaces a file whole or not at all (a temporary file beside it, flushed
to disk, renamed over it): a crash, a full disk or Ctrl-C never leaves half a meta.json,
and an error names the file it was writing. ``inside`` is a path of a directory that
does not lead out of it. Both are shared by the writers in orchestrator (runs, comparisons)
and the reports.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from pathlib import Path

# -- the most a run directory's files are read to hold: here, beside their readers, as reports
# import nothing of orchestrator; orchestrator/budgets.py lists them with every other budget and
# says why each is what it is
JSON_BYTES = 64 * 2**20  # a JSON file of a run directory, or a comparison's cached row
METRICS_VALUE_BYTES = 24  # a value of metrics.csv with its comma: a row holds at most this times its columns
EVENTS_BYTES = 64 * 2**20  # events.jsonl, beyond EVENTS_TICK_BYTES for each tick of the run
EVENTS_TICK_BYTES = 16 * 2**10  # the events of one tick


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is if it is not a regular file ("a FIFO", "a character
    device" ...), else None: reading one could wait for ever (a FIFO) or never end (/dev/zero)."""
    if stat.S_ISREG(mode):
        return None
    return next((what for is_kind, what in _KINDS if is_kind(mode)), "not a regular file")


class OutsideDirectory(Exception):
    """A path of a run's (or a comparison's) directory that leads out of it: a symbolic link,
    or a folder of it that is one, pointing elsewhere."""


def inside(root: Path | str, name: Path | str) -> Path:
    """``root / name``, if it resolves inside ``root`` (``root`` itself may be a link: a
    "latest" link to a run is fine); else ``OutsideDirectory``, naming the link."""
    root = Path(root)
    path = root / name
    real_root = root.resolve()
    if _within(path.resolve(), real_root):
        return path
    parts = Path(name).parts
    links = (root.joinpath(*parts[:i]) for i in range(1, len(parts) + 1))
    culprit = next((p for p in links if p.is_symlink() and not _within(p.resolve(), real_root)), path)
    target = os.readlink(culprit) if culprit.is_symlink() else culprit.resolve()
    raise OutsideDirectory(f"{culprit} is a symbolic link to {target}, outside the directory {root}: gameday reads and "
                           "writes a run directory only inside it (remove the link, or put a real file or folder there)")


def _within(real: Path, real_root: Path) -> bool:
    return real == real_root or real_root in real.parents


def write_atomic(path: Path | str, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all. An OSError names
    ``path`` (a failed write() names no file), and leaves no temporary file behind."""
    with writing_atomic(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


@contextlib.contextmanager
def writing_atomic(path: Path | str):
    """``write_atomic`` for what is written a piece at a time (an export of hundreds of MB
    is never held whole): a binary file to write into, which becomes ``path`` whole when
    the block ends without an error, and nothing otherwise."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        with _open_new(tmp) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # (on disk before the rename makes it the file)
        os.replace(tmp, path)
    except OSError as e:
        _remove_quietly(tmp)
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e
    except BaseException:
        _remove_quietly(tmp)
        raise


def _open_new(path: Path):
    """A new file to write bytes into, made with the permissions the umask gives (as open()
    makes files; mkstemp's are 0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        return open(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def write_json_atomic(path: Path | str, obj, sort_keys: bool = True) -> None:
    """``obj`` as JSON (indented, as every JSON file of a run directory is) to ``path``, atomically."""
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=sort_keys, default=str) + "\n")


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass  # (never made, or the disk refuses even this: the error being raised says more)
