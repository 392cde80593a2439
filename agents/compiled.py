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

A kernel draws through ``multinomial_into`` with the handle ``Draws.kernel`` gives: the
agent's ``Draws`` itself when kernels run as Python, the addresses of its bit
generator and of numpy's binomial set-up when they run compiled.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from agents import draws as _draws

_numba = None  # the numba module once imported; False where kernels run as Python


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
                _register_draws()
                _numba = numba
    return _numba is not False


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
    return call


def handle(draws) -> object:
    """What a kernel takes to draw on ``draws`` (an ``agents.draws.Draws``)."""
    if not (draws.fast and compiling()):
        return draws
    return (int(_draws._ffi.cast("uintptr_t", draws._bitgen)), int(_draws._ffi.cast("uintptr_t", draws._binomial)))


def multinomial_into(draws, n: int, probs: np.ndarray, out: np.ndarray) -> None:
    """``out[:len(probs)] = rng.multinomial(n, probs)`` on the agent's generator (``draws``:
    ``Draws.kernel``)."""
    draws.multinomial_into(n, probs, out)


def _register_draws() -> None:
    """``multinomial_into`` for compiled kernels: numpy's function called on the addresses."""
    import llvmlite.binding
    from numba.core import types
    from numba.extending import intrinsic, overload

    # Found by name when a kernel is linked, so that a kernel cached on disk holds no
    # address (they change from process to process).
    llvmlite.binding.add_symbol("random_multinomial",
                                int(_draws._ffi.cast("uintptr_t", _draws._lib.random_multinomial)))
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
