"""An agent's random draws: numpy's own algorithms on the agent's generator, called
without numpy's per-call overhead.

The cohort model draws on a few counts at a time (attempt classes, outcomes), where a
call of a ``numpy.random.Generator`` method costs ten times the draw itself in argument
checking and array building. numpy exports the C functions its Generator methods run
(``numpy/random/distributions.h``, the interface its documentation shows driven from
cffi); ``Draws`` calls those on the agent's bit generator, so every draw is exactly the
one the Generator method would make and the stream stays the agent's own. Where cffi or
those functions are not available, ``Draws`` makes the same draws through the Generator
methods. ``tests/test_numpy_equivalence.py`` checks both against numpy's own calls, results and
generator states.

What is left to the Python side is numpy's argument checking: a probability outside
[0, 1] or a negative count raises ``ValueError`` here as it does there.
"""
from __future__ import annotations

import functools

import numpy as np

# numpy's multivariate hypergeometric ("marginals") needs the total below 10**9
_EXACT_LIMIT = 10**9 - 1
_POISSON_LAM_MAX = 9.223372006484771e18  # numpy's bound on poisson's lam

_C_DECLARATIONS = """
typedef struct bitgen {
  void *state;
  uint64_t (*next_uint64)(void *st);
  uint32_t (*next_uint32)(void *st);
  double (*next_double)(void *st);
  uint64_t (*next_raw)(void *st);
} bitgen_t;
typedef struct s_binomial_t binomial_t;
int64_t random_binomial(bitgen_t *bitgen_state, double p, int64_t n, binomial_t *binomial);
int64_t random_poisson(bitgen_t *bitgen_state, double lam);
int64_t random_hypergeometric(bitgen_t *bitgen_state, int64_t good, int64_t bad, int64_t sample);
void random_multinomial(bitgen_t *bitgen_state, int64_t n, int64_t *mnix, double *pix, intptr_t d,
                        binomial_t *binomial);
void random_multivariate_hypergeometric_marginals(bitgen_t *bitgen_state, int64_t total, size_t num_colors,
                                                  int64_t *colors, int64_t nsample, size_t num_variates,
                                                  int64_t *variates);
"""
# numpy's binomial_t caches a binomial's set-up for the next draw with the same (n, p); it
# is 136 bytes today. Its contents change no draw; room to spare in case it grows.
_BINOMIAL_T_BYTES = 1024
_MAX_CLASSES = 64  # counts per split handed to C at once (attempt classes are far fewer)


def generator_library() -> str:
    """The file of numpy's compiled ``Generator``, which exports the functions above."""
    import numpy.random._generator as generator

    return generator.__file__


def _load():
    """(ffi, numpy's distributions library, None), or (None, None, why not) where they
    cannot be had."""
    try:
        from cffi import FFI
    except ImportError:
        return None, None, "cffi is not installed (pip install cffi)"
    name = ""
    try:
        ffi = FFI()
        ffi.cdef(_C_DECLARATIONS)
        lib = ffi.dlopen(generator_library())
        for name in ("random_binomial", "random_poisson", "random_hypergeometric", "random_multinomial",
                     "random_multivariate_hypergeometric_marginals"):
            getattr(lib, name)
        return ffi, lib, None
    except Exception as e:  # a numpy built without these exports: the Generator methods do it
        what = f"does not export {name}" if name else f"could not be opened ({type(e).__name__}: {e})"
        return None, None, f"numpy {np.__version__}'s random library {what}"


_ffi, _lib, unavailable = _load()  # unavailable: why the C functions cannot be called, or None


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p {p!r}: expected a probability from 0 to 1")


def _check_counts(good: int, bad: int, sample: int) -> None:
    if good < 0 or bad < 0 or sample < 0 or sample > good + bad:
        raise ValueError(f"hypergeometric({good}, {bad}, {sample}): expected counts >= 0, and a sample of at most "
                         f"their sum")


def hypergeometric_without_drawing(good: int, bad: int, sample: int) -> int:
    """What numpy's hypergeometric answers without a draw (its simple algorithm stops at
    once), or -1 where it draws. Compiled kernels use it too (``agents.compiled``)."""
    if sample < 10 or sample > good + bad - 10:
        if good == 0 or sample == 0:
            return 0
        if bad == 0:
            return sample
        if sample == good + bad:
            return good
    return -1


def _check_spread(ns: list[int], probs: list[float]) -> None:
    for n in ns:
        if n < 0:
            raise ValueError(f"n {n!r}: expected a count >= 0")
    for p in probs:
        _check_p(p)
    if sum(probs[:-1]) > 1.0 + 1e-12:
        raise ValueError(f"probs {probs!r}: expected probabilities that add up to 1")


class Draws:
    """The draws of one agent, on its generator ``rng`` (which it keeps using for anything
    else: both advance the same stream). Not part of an agent's state: a snapshot holds the
    generator's state, and a restored agent's ``Draws`` draws on from it."""

    fast = _lib is not None

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        if self.fast:
            self._bitgen = _ffi.cast("bitgen_t *", rng.bit_generator.ctypes.bit_generator.value)
            self._binomial_mem = _ffi.new("char[]", _BINOMIAL_T_BYTES)  # zeroed: nothing cached yet
            self._binomial = _ffi.cast("binomial_t *", self._binomial_mem)
            self._colors = _ffi.new("int64_t[]", _MAX_CLASSES)
            self._variates = _ffi.new("int64_t[]", _MAX_CLASSES)
            self._probs = _ffi.new("double[]", _MAX_CLASSES)

    @functools.cached_property
    def kernel(self):
        """The handle compiled kernels draw with (``agents.compiled``): addresses inside this
        object, valid while it lives."""
        from agents.compiled import handle

        return handle(self)

    # -- univariate ---------------------------------------------------------------------------
    def binomial(self, n: int, p: float) -> int:
        """``rng.binomial(n, p)``."""
        if not n or not p:  # numpy answers 0 without drawing
            if n < 0:
                raise ValueError(f"n {n!r}: expected a count >= 0")
            _check_p(p)
            return 0
        if n < 0 or not 0.0 <= p <= 1.0:
            _check_p(p)
            raise ValueError(f"n {n!r}: expected a count >= 0")
        if self.fast:
            return _lib.random_binomial(self._bitgen, p, n, self._binomial)
        return int(self.rng.binomial(n, p))

    def poisson(self, lam: float) -> int:
        """``rng.poisson(lam)``."""
        if not lam:  # numpy answers 0 without drawing
            return 0
        if not 0.0 <= lam < _POISSON_LAM_MAX:
            raise ValueError(f"lam {lam!r}: expected a rate >= 0")
        if self.fast:
            return _lib.random_poisson(self._bitgen, lam)
        return int(self.rng.poisson(lam))

    def hypergeometric(self, good: int, bad: int, sample: int) -> int:
        """``rng.hypergeometric(good, bad, sample)``."""
        _check_counts(good, bad, sample)
        known = hypergeometric_without_drawing(good, bad, sample)
        if known >= 0:
            return known
        if good > _EXACT_LIMIT or bad > _EXACT_LIMIT:  # (as draw_without_replacement beyond a billion: with replacement)
            return min(max(self.binomial(sample, good / (good + bad)), sample - bad), good)
        if self.fast:
            return _lib.random_hypergeometric(self._bitgen, good, bad, sample)
        return int(self.rng.hypergeometric(good, bad, sample))

    # -- on a few classes ---------------------------------------------------------------------------
    def split(self, counts: list[int], k: int, total: int | None = None) -> list[int]:
        """How many of ``k`` items drawn without replacement come from each class of ``counts``
        (``total``: their sum, if known): ``rng.multivariate_hypergeometric(counts, k)`` up to
        a billion items in all, as ``draw_without_replacement`` below."""
        if total is None:
            total = sum(counts)
        k = min(max(0, k), total)
        if k == total:
            return list(counts)
        if k == 0:
            return [0] * len(counts)
        d = len(counts)
        if total > _EXACT_LIMIT:
            return _beyond_exact(self.rng, np.array(counts, dtype=np.int64), k, total).tolist()
        if min(counts) < 0:
            raise ValueError(f"counts {counts!r}: expected counts >= 0")
        if self.fast and d <= _MAX_CLASSES:
            colors, variates = self._colors, self._variates
            colors[0:d] = counts
            variates[0:d] = _ZEROS[:d]
            _lib.random_multivariate_hypergeometric_marginals(self._bitgen, total, d, colors, k, 1, variates)
            return _ffi.unpack(variates, d)
        return self.rng.multivariate_hypergeometric(counts, k).tolist()

    def multinomial(self, n: int, probs: list[float]) -> list[int]:
        """``rng.multinomial(n, probs)`` for a few outcomes (probabilities that add up to 1)."""
        return self.multinomials([n], probs)[0]

    def multinomials(self, ns: list[int], probs: list[float]) -> list[list[int]]:
        """``[rng.multinomial(n, probs) for n in ns]``, the same outcomes for every count
        (probabilities checked once)."""
        d = len(probs)
        _check_spread(ns, probs)
        if not (self.fast and d <= _MAX_CLASSES):
            return [self.rng.multinomial(n, probs).tolist() if n else [0] * d for n in ns]
        pix, out, zeros = self._probs, self._colors, _ZEROS[:d]
        pix[0:d] = probs
        drawn = []
        for n in ns:
            if not n:
                drawn.append(list(zeros))
                continue
            out[0:d] = zeros
            _lib.random_multinomial(self._bitgen, n, out, pix, d, self._binomial)
            drawn.append(_ffi.unpack(out, d))
        return drawn

    # -- over many slots ------------------------------------------------------------------------------
    def multinomial_into(self, n: int, probs: np.ndarray, out: np.ndarray) -> None:
        """``out[:len(probs)] = rng.multinomial(n, probs)`` for a vector that may be long (a
        delay's distribution over wheel slots: float64, contiguous) and int64 ``out``, as
        compiled kernels draw it (``agents.compiled``)."""
        if n < 0:
            raise ValueError(f"n {n!r}: expected a count >= 0")
        d = len(probs)
        if not self.fast:
            out[:d] = self.rng.multinomial(n, probs)
            return
        out[:d] = 0
        counts, pix = _ffi.from_buffer("int64_t[]", out), _ffi.from_buffer("double[]", probs)
        _lib.random_multinomial(self._bitgen, n, counts, pix, d, self._binomial)


_ZEROS = [0] * _MAX_CLASSES


def draw_without_replacement(rng: np.random.Generator, counts: np.ndarray, k: int) -> np.ndarray:
    """How many of ``k`` items drawn at random without replacement come from each class.

    Exact (multivariate hypergeometric) up to a billion items; above that, a multinomial
    draw (with replacement: the difference is far below one part in a million at such
    sizes), clipped to each class and topped up from the classes with room left."""
    total = int(counts.sum())
    k = min(max(0, k), total)
    if k == total:
        return counts.copy()
    if k == 0:
        return np.zeros_like(counts)
    if total <= _EXACT_LIMIT:
        return rng.multivariate_hypergeometric(counts, k)
    return _beyond_exact(rng, counts, k, total)


def _beyond_exact(rng: np.random.Generator, counts: np.ndarray, k: int, total: int) -> np.ndarray:
    taken = np.minimum(rng.multinomial(k, counts / total), counts)
    short = k - int(taken.sum())
    for i in np.argsort(-(counts - taken), kind="stable"):
        if short <= 0:
            break
        add = min(short, int(counts[i] - taken[i]))
        taken[i] += add
        short -= add
    return taken
