"""The fast paths of the cohort model make numpy's draws and sums, to the last bit:
``agents.draws.Draws`` (numpy's C functions called directly, or the Generator methods
where they cannot be) against the Generator methods themselves, results and generator
states; ``agents.arith.np_sum`` against numpy's sum; the timing wheel's thinning against
a binomial draw over the (slot, class) table it used to be."""
from __future__ import annotations

import random

import numpy as np
import pytest

from agents.arith import np_sum
from agents.draws import Draws
from agents.wheel import TimingWheel

MODES = [True, False] if Draws.fast else [False]  # numpy's C functions, and the Generator methods


@pytest.fixture(params=MODES, ids=lambda fast: "C" if fast else "Generator")
def pair(request, monkeypatch):
    """pair(seed): two generators on the same stream, the second drawn on by ``Draws``."""
    monkeypatch.setattr(Draws, "fast", request.param)

    def make(seed: int):
        ours = np.random.default_rng(seed)
        return np.random.default_rng(seed), ours, Draws(ours)

    return make


def same_state(a: np.random.Generator, b: np.random.Generator) -> bool:
    return a.bit_generator.state == b.bit_generator.state


def counts(r: random.Random, d: int) -> list[int]:
    """Counts of the sizes a cohort has: empty classes, a few, thousands, tens of millions."""
    return [r.choice([0, 0, 1, 2, 5, 9, 10, 11, 15, 50, 300, 5000, 10**6, r.randrange(10**8)]) for _ in range(d)]


def test_split_is_numpys_multivariate_hypergeometric(pair):
    r = random.Random(1)
    for _ in range(3000):
        seed = r.randrange(2**31)
        theirs, ours, draws = pair(seed)
        c = counts(r, r.randint(1, 12))
        total = sum(c)
        k = r.choice([0, 1, 9, 10, 11, total // 2, total - 10, total - 1, total, r.randint(0, total)])
        k = min(max(0, k), total)
        expected = theirs.multivariate_hypergeometric(c, k).tolist() if 0 < k < total else (c if k else [0] * len(c))
        assert draws.split(c, k) == expected, (c, k)
        assert same_state(theirs, ours), (c, k)


def test_univariate_draws_are_numpys(pair):
    r = random.Random(2)
    for _ in range(3000):
        seed = r.randrange(2**31)
        theirs, ours, draws = pair(seed)
        n = r.choice([0, 1, 3, 10, 31, 1000, r.randrange(10**7)])
        p = r.choice([0.0, 1.0, 1e-9, 0.5, 0.999, r.random()])
        assert draws.binomial(n, p) == theirs.binomial(n, p)
        lam = r.choice([0.0, 0.3, 9.99, 10.0, 1e4, r.random() * 100])
        assert draws.poisson(lam) == theirs.poisson(lam)
        good, bad = r.choice([0, 1, 7, 30, 5000]), r.choice([0, 1, 9, 40, 10**6])
        sample = r.randint(0, good + bad)
        assert draws.hypergeometric(good, bad, sample) == theirs.hypergeometric(good, bad, sample)
        assert same_state(theirs, ours)


def test_multinomials_are_numpys(pair):
    r = random.Random(3)
    for _ in range(2000):
        seed = r.randrange(2**31)
        theirs, ours, draws = pair(seed)
        n = r.choice([0, 1, 20, 10**4, r.randrange(10**6)])
        w = np.array([r.choice([0.0, 0.1, 1.0, 1e-9, r.random()]) for _ in range(r.randint(1, 4))])
        w[-1] += 1e-3
        small = (w / w.sum()).tolist()
        assert draws.multinomial(n, small) == theirs.multinomial(n, small).tolist()
        ns = [r.choice([0, 1, 7, 10**5]) for _ in range(r.randint(0, 4))]  # several counts, the same outcomes
        assert draws.multinomials(ns, small) == [theirs.multinomial(m, small).tolist() for m in ns]
        long = np.append(np.full(r.randint(1, 300), 1.0), [0.0] * r.randint(0, 3))  # a delay's slots, padded
        long /= long.sum()
        out = np.full(len(long) + 2, -1, dtype=np.int64)
        draws.multinomial_into(n, long, out)
        assert out[:len(long)].tolist() == theirs.multinomial(n, long).tolist() and out[len(long):].tolist() == [-1, -1]
        assert same_state(theirs, ours)


def test_a_hypergeometric_beyond_a_billion_is_drawn_with_replacement_within_its_bounds(pair):
    _, _, draws = pair(1)
    good, bad, sample = 3 * 10**9, 10**9, 2 * 10**9
    taken = [draws.hypergeometric(good, bad, sample) for _ in range(200)]
    assert all(sample - bad <= t <= good for t in taken)
    assert abs(np.mean(taken) / (sample * good / (good + bad)) - 1) < 1e-4
    assert draws.hypergeometric(15 * 10**9, 5, 15 * 10**9 - 10**6) >= 15 * 10**9 - 10**6 - 5  # (at least all but the bad)


def test_draws_check_their_arguments_as_numpy_does(pair):
    _, _, draws = pair(1)
    for bad in (lambda: draws.binomial(5, 1.5), lambda: draws.binomial(-1, 0.5), lambda: draws.binomial(3, float("nan")),
                lambda: draws.poisson(-1.0), lambda: draws.hypergeometric(3, 2, 6), lambda: draws.split([3, -1], 1),
                lambda: draws.multinomial(-1, [0.5, 0.5]), lambda: draws.multinomial(4, [0.9, 0.9, 0.0]),
                lambda: draws.multinomials([2, -1], [0.5, 0.5]), lambda: draws.multinomials([], [0.9, 0.9, 0.0]),
                lambda: draws.multinomial_into(-1, np.array([0.5, 0.5]), np.zeros(2, dtype=np.int64))):
        with pytest.raises(ValueError):
            bad()


def test_np_sum_adds_as_numpy_does():
    r = random.Random(4)
    for _ in range(5000):
        n = r.choice([r.randint(0, 20), r.randint(20, 300)])
        values = [r.choice([r.random() * 10.0 ** r.randint(-6, 9), float(r.randrange(10**6)), 0.1, 1e-17]) for _ in range(n)]
        assert np_sum(values) == float(np.array(values, dtype=float).sum())


def test_thinning_draws_slot_by_slot_as_the_table_it_was():
    wheel = TimingWheel(40, 5)
    r = random.Random(5)
    for _ in range(200):
        wheel.schedule_one(r.randint(1, 40), r.randint(1, 10**5), r.randint(0, 4))
    for _ in range(13):
        wheel.pop_due()
    table = np.ascontiguousarray(wheel.slots.T)  # [slot, class], as the wheel used to hold it
    a, b = np.random.default_rng(9), np.random.default_rng(9)
    expected = a.binomial(table, 0.3)
    gone = wheel.thin(b, 0.3)
    assert (wheel.slots.T == expected).all() and gone == int(table.sum() - expected.sum())
    assert wheel.pending == int(wheel.slots.sum()) and same_state(a, b)
