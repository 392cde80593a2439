"""Random splits of cohort counts, exact where numpy allows and close where it does not."""
from __future__ import annotations

import numpy as np

# numpy's multivariate hypergeometric ("marginals") needs the total below 10**9
_EXACT_LIMIT = 10**9 - 1


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
    taken = np.minimum(rng.multinomial(k, counts / total), counts)
    short = k - int(taken.sum())
    for i in np.argsort(-(counts - taken), kind="stable"):
        if short <= 0:
            break
        add = min(short, int(counts[i] - taken[i]))
        taken[i] += add
        short -= add
    return taken
