"""Compiled kernels of the cohort model, one source for both ways of running them.

A kernel is a plain Python function over numpy arrays and numbers, written in the
subset numba compiles (``nopython`` mode). Where numba is installed it runs compiled,
cached on disk beside its module so that a process loads it rather than compiles it;
where numba is not installed, or ``GAMEDAY_NO_JIT=1`` is set, the very same function
runs as Python. Both give the same results to the last bit: the kernels do integer
arithmetic, and draw with numpy's own C functions (those ``agents.draws`` calls) on the
agent's own bit generator, in the same order (``tests/test_compiled.py`` runs each
kernel both ways, and against the Python code it replaced).

numba is imported at a kernel's first call, not before: a process that runs no world
(the CLI's checks, a report) does not pay its start-up (about 0.3 s to import, 0.4 s
to load the first kernel from the cache, once per process).

A kernel draws through the functions below (``binomial``, ``hypergeometric``,
``split_into``, ``multinomial_into``) with the handle ``Draws.kernel`` gives: the agent's
``Draws`` itself when kernels run as Python, the addresses of its bit generator and of
numpy's binomial set-up when they run compiled. Each is the ``Draws`` method of that name,
its argument checks and the cases it answers without drawing included. A kernel may call
another kernel.

numba caches a kernel on disk under its own file's time stamp: a kernel that calls
kernels of another file is not recompiled when that file changes, so kernels that call
each other live in one file (``agents/cohort_kernels.py``). The draws compiled into them
come from this file and ``agents/draws.py``: when either changes, the kernels cached
beside their source are removed before any is loaded (``forget_stale_kernels``).
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import numpy as np

from agents import draws as _draws

_numba = None  # the numba module once imported; False where kernels run as Python
_kernels: list = []  # (wrapper, function) of every kernel defined, callable from other kernels once compiling


def compiling() -> bool:
    """Whether kernels run compiled (numba importable, numpy's C functions reachable, and
    ``GAMEDAY_NO_JIT`` not set); imports numba the first time it is asked."""
    global _numba
    if _numba is None:
        _numba = False
        if not os.environ.get("GAMEDAY_NO_JIT") and _draws._lib is not None:
            try:
                import numba
            except ImportError:
                pass
            else:
                _numba = numba
                forget_stale_kernels(Path(__file__).parent)
                _register_draws()
                for call, fn in _kernels:
                    _callable_from_kernels(call, fn)
    return _numba is not False


def why_not_compiled() -> str | None:
    """Why kernels run as Python (None where they run compiled): a run is then several
    times slower, and nothing else would say so."""
    if os.environ.get("GAMEDAY_NO_JIT"):
        return "GAMEDAY_NO_JIT is set"
    if _draws._lib is None:
        return _draws.unavailable
    if not compiling():
        return "numba is not installed (pip install numba)"
    return None


def forget_stale_kernels(here: Path) -> None:
    """Remove the kernels cached in ``here/__pycache__`` if ``compiled.py`` or ``draws.py``
    in ``here`` changed since they were cached (numba only checks each kernel's own file).
    With NUMBA_CACHE_DIR set, numba caches elsewhere, which is left alone."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    digest = hashlib.sha256(b"".join((here / name).read_bytes() for name in ("compiled.py", "draws.py"))).hexdigest()
    cache = here / "__pycache__"
    stamp = cache / "kernels-draws.sha256"
    try:
        if stamp.read_text() == digest:
            return
    except OSError:
        pass
    try:
        for cached in cache.glob("*.nb[ic]"):
            cached.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        stamp.write_text(digest)
    except OSError:
        pass  # a cache this process may not write is not its to keep


def kernel(fn):
    """``fn`` (whose first argument is a ``Draws.kernel`` handle), compiled at its first
    call with a compiled kernels' handle; ``.py_func`` is ``fn``."""
    impl = None

    @functools.wraps(fn)
    def call(draws, *args):
        nonlocal impl
        if type(draws) is not tuple:  # kernels run as Python
            return fn(draws, *args)
        if impl is None:
            impl = _numba.njit(cache=True, nogil=True)(fn)
        return impl(draws, *args)

    call.py_func = fn
    _kernels.append((call, fn))
    if _numba:  # defined after compiling began
        _callable_from_kernels(call, fn)
    return call


def _callable_from_kernels(call, fn) -> None:
    """A kernel calling ``call`` compiles ``fn`` into itself (as numba's ``register_jitable``)."""
    from numba.extending import overload

    overload(call, strict=False)(lambda *args: fn)


def handle(draws) -> object:
    """What a kernel takes to draw on ``draws`` (an ``agents.draws.Draws``)."""
    if not (draws.fast and compiling()):
        return draws
    return (int(_draws._ffi.cast("uintptr_t", draws._bitgen)), int(_draws._ffi.cast("uintptr_t", draws._binomial)))


def multinomial_into(draws, n: int, probs: np.ndarray, out: np.ndarray) -> None:
    """``out[:len(probs)] = rng.multinomial(n, probs)`` on the agent's generator (``draws``:
    ``Draws.kernel``)."""
    draws.multinomial_into(n, probs, out)


def binomial(draws, n: int, p: float) -> int:
    """``Draws.binomial``: ``rng.binomial(n, p)`` on the agent's generator."""
    return draws.binomial(n, p)


def hypergeometric(draws, good: int, bad: int, sample: int) -> int:
    """``Draws.hypergeometric``: ``rng.hypergeometric(good, bad, sample)``."""
    return draws.hypergeometric(good, bad, sample)


def split_into(draws, counts: np.ndarray, k: int, out: np.ndarray) -> None:
    """``out[:len(counts)] = Draws.split(counts, k)``: how many of ``k`` drawn without
    replacement come from each class of ``counts`` (int64, contiguous). Compiled, up to a
    billion in all (``Draws.split`` goes beyond with a generator method, which compiled
    code cannot call: a caller with more runs its kernel as Python)."""
    out[:len(counts)] = draws.split(counts.tolist(), k)


def _register_draws() -> None:
    """The draws (``binomial``, ``hypergeometric``, ``split_into``, ``multinomial_into``) for
    compiled kernels: numpy's functions called on the addresses."""
    import llvmlite.binding
    from numba.core import types
    from numba.extending import intrinsic, overload

    # Found by name when a kernel is linked, so that a kernel cached on disk holds no
    # address (they change from process to process).
    for name in ("random_multinomial", "random_binomial", "random_hypergeometric",
                 "random_multivariate_hypergeometric_marginals"):
        llvmlite.binding.add_symbol(name, int(_draws._ffi.cast("uintptr_t", getattr(_draws._lib, name))))
    c_binomial = types.ExternalFunction(
        "random_binomial", types.int64(types.voidptr, types.float64, types.int64, types.voidptr))
    c_hypergeometric = types.ExternalFunction(
        "random_hypergeometric", types.int64(types.voidptr, types.int64, types.int64, types.int64))
    c_marginals = types.ExternalFunction(
        "random_multivariate_hypergeometric_marginals",
        types.void(types.voidptr, types.int64, types.uintp, types.voidptr, types.int64, types.uintp, types.voidptr))
    c_multinomial = types.ExternalFunction(
        "random_multinomial", types.void(types.voidptr, types.int64, types.voidptr, types.voidptr, types.int64,
                                         types.voidptr))

    @intrinsic
    def pointer(typingctx, address):
        """The address (an integer) as a ``void *``."""
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(types.voidptr))
        return types.voidptr(types.intp), codegen

    @overload(multinomial_into)
    def compiled_multinomial_into(draws, n, probs, out):
        def impl(draws, n, probs, out):
            d = len(probs)
            if not (probs.flags.c_contiguous and out.flags.c_contiguous and len(out) >= d):
                raise ValueError("multinomial_into: expected contiguous probabilities and room for the counts")
            out[:d] = 0
            c_multinomial(pointer(draws[0]), n, pointer(out.ctypes.data), pointer(probs.ctypes.data), d,
                          pointer(draws[1]))
        return impl

    limit = _draws._EXACT_LIMIT
    without_drawing = _numba.njit(_draws.hypergeometric_without_drawing)

    @overload(binomial)
    def compiled_binomial(draws, n, p):
        def impl(draws, n, p):
            if n < 0 or not 0.0 <= p <= 1.0:
                raise ValueError("binomial: expected a count >= 0 and a probability from 0 to 1")
            if n == 0 or p == 0.0:  # numpy answers 0 without drawing
                return 0
            return c_binomial(pointer(draws[0]), p, n, pointer(draws[1]))
        return impl

    @overload(hypergeometric)
    def compiled_hypergeometric(draws, good, bad, sample):
        def impl(draws, good, bad, sample):
            if good < 0 or bad < 0 or sample < 0 or sample > good + bad:
                raise ValueError("hypergeometric: expected counts >= 0, and a sample of at most their sum")
            known = without_drawing(good, bad, sample)
            if known >= 0:
                return known
            if good > limit or bad > limit:  # (as Draws.hypergeometric: with replacement beyond a billion)
                taken = c_binomial(pointer(draws[0]), good / (good + bad), sample, pointer(draws[1]))
                return min(max(taken, sample - bad), good)
            return c_hypergeometric(pointer(draws[0]), good, bad, sample)
        return impl

    @overload(split_into)
    def compiled_split_into(draws, counts, k, out):
        def impl(draws, counts, k, out):
            d = len(counts)
            if not (counts.flags.c_contiguous and out.flags.c_contiguous and len(out) >= d):
                raise ValueError("split_into: expected contiguous counts and room for the draw")
            total = 0
            for c in counts:
                if c < 0:
                    raise ValueError("split_into: expected counts >= 0")
                total += c
            k = min(max(0, k), total)
            if k == total:
                out[:d] = counts
                return
            out[:d] = 0
            if k == 0:
                return
            if total > limit:
                raise ValueError("split_into: more than a billion in all (run the kernel as Python)")
            c_marginals(pointer(draws[0]), total, d, pointer(counts.ctypes.data), k, 1, pointer(out.ctypes.data))
        return impl
