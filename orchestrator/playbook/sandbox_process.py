"""The process a playbook template renders in: a forked child with a memory limit and an
alarm, which the parent kills if it does not answer in time.

Jinja's sandbox stops a template reaching into Python, but not from taking all the memory
(``'a' * 4000000000``) or all the time (nested ``range`` loops, ``9**(9**9)``). The child
limits its address space (``RLIMIT_AS``), so a huge allocation fails there with a
MemoryError; its alarm interrupts a template's Python loop where it is, so the error can
name the template's line; and a long operation in C, which an alarm cannot interrupt, is
ended by the parent with SIGKILL at the deadline. The child sends its answer, plain data,
back through a pipe (a length, then a pickle) and leaves with ``os._exit``.

The parent may be running Ray, ZeroMQ and threads: the child touches nothing but the work
it is given and the pipe, never collects the parent's objects (their finalizers could close
the parent's connections), and never runs atexit handlers or flushes inherited stdio.
"""
from __future__ import annotations

import contextlib
import gc
import os
import pickle
import select
import signal
import sys
import time
from typing import Callable

import jinja2.lexer

#: seconds the parent waits beyond the child's own alarm before killing it: time for the
#: child to stop its loop and send the template's line
GRACE_SECONDS = 2.0

_LENGTH = 8  # bytes of the length sent before the answer
_FAILED = 70  # the child's exit status when it could not send an answer


class OutOfTime(Exception):
    """Raised in the child when its alarm rings. An Exception (not a BaseException), so that
    Jinja rewrites the traceback to the template's lines, which name where it stopped."""


class NoAnswer(Exception):
    """The child gave no answer: ``reason`` is "time" (its alarm rang outside the work, or the
    parent killed it at the deadline), "memory" (out of memory outside the work) or "died";
    ``how`` says how it ended."""

    def __init__(self, reason: str, how: str):
        super().__init__(f"{reason}: {how}")
        self.reason, self.how = reason, how


def run_in_child(work: Callable[[], object], seconds: float, memory: int) -> object:
    """``work()``'s answer (plain data that pickles), computed in a forked child that may use
    ``memory`` bytes beyond what this process holds and whose alarm rings (``OutOfTime``)
    after ``seconds``; killed if it has not answered ``GRACE_SECONDS`` later. ``work``
    catches its own errors; if anything escapes it, or the child dies or is killed, this
    raises ``NoAnswer``. The child is always reaped, also when this is interrupted."""
    read_fd, write_fd = os.pipe()
    try:
        with _lexer_cache_held():
            pid = os.fork()
    except BaseException:  # (no process to be had: nothing to reap, the pipe to close)
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:
        _be_the_child(work, seconds, memory, read_fd, write_fd)  # (never returns)
    return _answer_of(pid, read_fd, write_fd, time.monotonic() + seconds + GRACE_SECONDS)


def _lexer_cache_held():
    """Jinja's lexer cache's lock, held across the fork: a thread of the parent using the
    cache as it forks would otherwise leave the child's copy of the lock taken for ever (that
    thread does not exist in the child), and the child's parse would wait on it."""
    lock = getattr(getattr(jinja2.lexer, "_lexer_cache", None), "_wlock", None)
    return lock if lock is not None else contextlib.nullcontext()


# -- the child ----------------------------------------------------------------------------

def _be_the_child(work, seconds: float, memory: int, read_fd: int, write_fd: int) -> None:
    status = _FAILED
    try:
        os.close(read_fd)
        _settle()
        _limit_memory(memory)
        try:
            with _alarm(seconds):
                answer = ("answer", work())
        except OutOfTime:
            answer = ("time", None)
        except MemoryError:
            answer = ("memory", None)
        _send(write_fd, pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
        status = 0
    finally:
        os._exit(status)  # no atexit handlers, no flush of the parent's buffered output


def _settle() -> None:
    """The child's signals and garbage collector, made its own."""
    gc.freeze()  # the parent's objects are never collected here, so none of their finalizers run
    for signum in signal.valid_signals():  # the parent's Python handlers (a server's SIGTERM) are not the child's
        if callable(signal.getsignal(signum)):
            signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to act on: it kills the child
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})  # (a thread that forks may block it)


def _limit_memory(extra: int) -> None:
    """The child's address space: what it holds now (a copy of the parent's) plus ``extra``."""
    import resource  # (POSIX only, as fork is)

    try:
        with open("/proc/self/statm", "rb") as f:
            held = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # (no /proc: macOS, which reports its peak resident size in bytes)
        held = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = held + extra if soft == resource.RLIM_INFINITY else min(held + extra, soft)
    with contextlib.suppress(ValueError, OSError):  # (macOS refuses RLIMIT_AS: the time limit still holds)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


@contextlib.contextmanager
def _alarm(seconds: float):
    """``OutOfTime`` raised where the child is after ``seconds``, and again every quarter of a
    second after that (Jinja's constant folding catches every Exception and carries on; a
    quarter leaves the work time to say where it stopped)."""
    def ring(signum, frame):
        raise OutOfTime(f"more than {seconds:g} s")

    signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_IGN)  # (a ring already caught runs no handler now)


def _send(fd: int, data: bytes) -> None:
    view = memoryview(len(data).to_bytes(_LENGTH, "big") + data)
    while view:
        view = view[os.write(fd, view):]


# -- the parent ---------------------------------------------------------------------------

def _answer_of(pid: int, read_fd: int, write_fd: int, deadline: float) -> object:
    """The child's answer, read as it comes (an answer larger than the pipe holds waits for
    the reader); the child reaped whatever happens, killed first unless it ended by itself."""
    data, ended = None, False
    try:
        os.close(write_fd)  # (the child's end: the pipe closes when the child does)
        data = _read_answer(read_fd, deadline)
        ended = data is not None or time.monotonic() < deadline  # answered, or closed the pipe: it is exiting
    finally:
        os.close(read_fd)
        status = _reap(pid, kill=not ended)
    if data is None:
        raise NoAnswer("died", _ending(status)) if ended else NoAnswer("time", "killed at the deadline")
    kind, value = pickle.loads(data)
    if kind != "answer":
        raise NoAnswer(kind, "its work was stopped")
    return value


def _read_answer(fd: int, deadline: float) -> bytes | None:
    """The answer's bytes, or None if the pipe closes before it is whole or the deadline
    passes (poll, not select: a process with Ray and ZeroMQ may hold descriptors past 1024)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    got, size = bytearray(), None
    while (left := deadline - time.monotonic()) > 0:
        if not poller.poll(left * 1000):
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None
        got += chunk
        if size is None and len(got) >= _LENGTH:
            size = _LENGTH + int.from_bytes(got[:_LENGTH], "big")
        if size is not None and len(got) >= size:  # (whole: another fork may hold the pipe open, so no waiting for its end)
            return bytes(got[_LENGTH:size])
    return None


def _reap(pid: int, kill: bool) -> int | None:
    """The child's wait status, after a SIGKILL if ``kill``; None if something else reaped it
    (a SIGCHLD handler of the parent's)."""
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    try:
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return None


def _ending(status: int | None) -> str:
    if status is None:
        return "it ended unseen"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return f"killed by signal {number} ({signal.strsignal(number) or 'unknown'})"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
