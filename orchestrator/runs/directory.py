"""A run's or a comparison's directory as one process writes it: claimed (a lock no other
process can take while this one lives), and, should a write fail, ended so that what was
written stays readable and says why.

A run directory is ``journal.RunWriter``'s, with its lock taken in the folder it starts
in (so it is in place with its directory, never after), its journal files naming
themselves in their errors (a failed write() names no file), and ``fail`` for a run that
cannot go on: meta.json marked failed and error.txt saying why, in the disk space the lock
file kept for them.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import threading
from pathlib import Path

from reports import rundir
from reports.files import write_atomic, write_json_atomic
from orchestrator.engine.journal import RunWriter
from orchestrator.engine.world import WorldPlan
from orchestrator.errors import DirectoryInUse, RunDirectoryError, WriteError, os_error_text, setting

#: disk space the lock file keeps while a directory is written, given back when a write fails:
#: room for meta.json, score.json and error.txt on a disk that filled up
RESERVE_BYTES = 64 * 1024


@contextlib.contextmanager
def interrupt_deferred():
    """Ctrl-C inside the block takes effect at its end (KeyboardInterrupt), as does a Ray
    task's cancel (raised the same way): for writing what must be whole, which an interrupt
    would leave half-written (a run directory put in place or closed, never left saying
    "running"; the tables a first Ctrl-C saved, at a second one)."""
    if threading.current_thread() is not threading.main_thread():  # (signals reach the main thread only)
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def refuse_if_held(directory: Path) -> None:
    """``DirectoryInUse`` if a live process holds ``directory`` (checked before anything is
    started: a directory being written is also not empty, which says less)."""
    refused = held_by_another(Path(directory))
    if refused is not None:
        raise refused


def held_by_another(directory: Path) -> DirectoryInUse | None:
    """The error to refuse ``directory`` with if a live process holds its lock, else None."""
    pid = rundir.lock_holder(directory)
    if pid is None:
        return None
    holder = f"process {pid}" if pid else "another process"
    return DirectoryInUse(f"{directory} is being written by {holder} (it holds {Path(directory) / rundir.LOCK}); "
                          f"wait for it to end, or choose another {setting('out')}")


class Claim:
    """An exclusive lock on a directory, held while this process writes it: ``fcntl.flock``
    on its LOCK file, which holds this process's pid for whoever is refused. The system
    releases the lock when the process ends, however it ends, so a lock file a killed
    process left is free and is taken over. The file also keeps ``RESERVE_BYTES`` of disk
    (``give_back_reserve``)."""

    def __init__(self, directory: Path, fd: int):
        self.directory, self.fd = Path(directory), fd
        self.pid_bytes = 0  # (the reserve follows them)
        self.made: Path | None = None  # the first folder ``claim_new`` made on the way to it (None: it was there)

    @classmethod
    def take(cls, directory: Path) -> Claim:
        """``DirectoryInUse`` if a live process holds it; an OSError if the lock file cannot be written."""
        path = Path(directory) / rundir.LOCK
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise held_by_another(directory) or DirectoryInUse(
                    f"{directory} is being written by another process; choose another {setting('out')}") from None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, path):
                break
            os.close(fd)  # (its holder removed it between our open and our lock: take the one there now)
        claim = cls(directory, fd)
        try:
            pid = f"{os.getpid()}\n".encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, pid, 0)
            claim.pid_bytes = len(pid)
            _reserve(fd, len(pid))
        except BaseException:
            claim.release()
            raise
        return claim

    def moved_to(self, directory: Path) -> None:
        """Its directory was renamed (a run directory put in place): the lock went with it."""
        self.directory = Path(directory)

    def give_back_reserve(self) -> None:
        try:
            os.ftruncate(self.fd, self.pid_bytes)
        except OSError:
            pass  # (then there is no more room than before; what follows says what could not be written)

    def release(self) -> None:
        """Remove the lock file, then let go (in that order: whoever opened it meanwhile sees it
        was removed and takes a new one). Idempotent."""
        if self.fd < 0:
            return
        path = self.directory / rundir.LOCK
        try:
            if _same_file(self.fd, path):  # (never another's: a folder it started in may be gone, and the name taken)
                os.unlink(path)
        except OSError:
            pass  # (the disk refuses: the lock is free once closed all the same)
        os.close(self.fd)
        self.fd = -1


def _same_file(fd: int, path: Path) -> bool:
    try:
        mine, there = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def _reserve(fd: int, offset: int) -> None:
    try:
        os.posix_fallocate(fd, offset, RESERVE_BYTES)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):  # (a file system without it: no reserve)
            raise


def claim_new(directory: Path) -> Claim:
    """A comparison's (or phase map's) directory, claimed before anything is played: made if
    missing; refused if a live process holds it, or if it holds anything but a lock file a
    killed process left (a run never writes over another's results). ``release_claim`` removes
    it again if nothing was written into it (bad input then leaves no directory)."""
    directory = Path(directory)
    missing = [p for p in (directory, *directory.parents) if not p.exists()]
    made = missing[-1] if missing else None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise RunDirectoryError(f"{directory} exists and is not a directory; choose another {setting('out')}") from None
    try:
        claim = Claim.take(directory)
    except BaseException:
        _remove_made(directory, made)
        raise
    claim.made = made
    others = [p.name for p in directory.iterdir() if p.name != rundir.LOCK]
    if others:
        claim.release()
        shown = ", ".join(sorted(others)[:3]) + (" ..." if len(others) > 3 else "")
        raise RunDirectoryError(f"directory {directory} exists and is not empty (it holds {shown}); choose another "
                                f"{setting('out')}")
    return claim


def release_claim(claim: Claim) -> None:
    """Let go of a directory ``claim_new`` claimed; removed (with the folders made on the way
    to it) if it made it and nothing was written."""
    claim.release()
    _remove_made(claim.directory, claim.made)


def _remove_made(directory: Path, made: Path | None) -> None:
    """Remove ``directory`` and its parents up to ``made`` while they are empty."""
    if made is None:
        return
    for folder in (directory, *directory.parents):
        try:
            folder.rmdir()
        except OSError:
            return  # (not empty: it holds what was written)
        if folder == made:
            return


class _NamedFile:
    """A journal file whose OSErrors name it (a failed write() or flush() names no file)."""

    def __init__(self, f, path: Path):
        self.f, self.path = f, path

    def _named(self, e: OSError) -> OSError:
        return OSError(e.errno, e.strerror or str(e), str(self.path))

    def write(self, text: str) -> int:
        try:
            return self.f.write(text)
        except OSError as e:
            raise self._named(e) from e

    def flush(self) -> None:
        try:
            self.f.flush()
        except OSError as e:
            raise self._named(e) from e

    def close(self) -> None:
        try:
            self.f.close()
        except OSError as e:
            raise self._named(e) from e


class RunDirectory(RunWriter):
    """``journal.RunWriter``, claimed: refused at once if another live process holds the
    directory, its lock taken in the folder it starts in (and so in place with it), its
    journal files naming themselves in their errors; ``fail`` ends a run that cannot go on.
    Creating it raises ``WriteError`` (nothing is left: the folder it started in is
    removed) rather than an OSError."""

    def __init__(self, out: Path, plan: WorldPlan, meta: dict, files: dict[str, str]):
        refuse_if_held(out)
        self.claim: Claim | None = None
        try:
            super().__init__(out, plan, meta, files)
        except RunDirectoryError as e:
            self._let_go()
            cause = e.__context__  # (RunWriter says an OSError's strerror alone)
            if not isinstance(cause, OSError):
                raise
            if cause.errno in (errno.ENOTEMPTY, errno.EEXIST):  # another process put its run there first
                raise held_by_another(Path(out)) or e from None
            space = "free some space, or " if cause.errno in (errno.ENOSPC, errno.EDQUOT) else ""
            raise WriteError(f"cannot create the run directory {out}: {os_error_text(cause)}; nothing was written "
                             f"({space}choose another {setting('out')})") from None
        except BaseException:
            self._let_go()
            raise
        self.claim.moved_to(self.dir)
        self.events = _NamedFile(self.events, self.dir / rundir.EVENTS)
        self.metrics = _NamedFile(self.metrics, self.dir / rundir.METRICS)

    def _write_first_files(self, where: Path, plan: WorldPlan, files: dict[str, str]) -> None:
        self.claim = Claim.take(where)  # (first, and so renamed into place with the directory)
        super()._write_first_files(where, plan, files)

    def _let_go(self) -> None:
        if self.claim is not None:
            if _same_file(self.claim.fd, self.dir / rundir.LOCK):  # (stopped just after it was put in place)
                self.claim.moved_to(self.dir)
            self.claim.release()

    def close(self, status: str, score: dict | None) -> None:
        """As ``RunWriter.close``, and the directory let go (its lock file removed)."""
        super().close(status, score)
        self._let_go()

    def fail(self, error_text: str, score: dict | None) -> dict[str, str]:
        """End a run that cannot go on, as far as the disk lets it: the journal files closed,
        the lock file's reserve given back, meta.json marked failed (with the ticks whose
        row was written whole), error.txt holding ``error_text``, score.json the score so
        far. Returns what could not be written: file name -> the system's error."""
        for f in (self.events, self.metrics):
            try:
                f.close()
            except OSError:
                pass  # (what it held unwritten is lost; the rows before it are whole)
        if self.claim is not None:
            self.claim.give_back_reserve()
        for stray in self.dir.glob("*.tmp"):  # (RunWriter's temporary copy of a file whose rename failed)
            try:
                stray.unlink()
            except OSError:
                pass
        try:
            self.meta["ticks_done"] = rundir.complete_ticks(self.dir)
        except OSError:
            pass  # (the count of the last tick written stands)
        self.meta["status"] = rundir.FAILED
        writes = [(rundir.META, lambda path: write_json_atomic(path, self.meta, sort_keys=False)),
                  (rundir.ERROR, lambda path: write_atomic(path, error_text))]
        if score is not None:
            writes.append((rundir.SCORE, lambda path: write_json_atomic(path, score)))
        unwritten = {}
        for name, write in writes:  # (the most needed first, should the disk have room for little)
            try:
                write(self.dir / name)
            except OSError as e:
                unwritten[name] = e.strerror or str(e)
        self._let_go()
        return unwritten
