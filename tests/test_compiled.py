"""The compiled kernels (``agents.compiled``) give, to the last bit, the results of the
Python they are written in and of the numpy code they replaced: the same wheel contents
and the same generator states; and a run with kernels switched off (``GAMEDAY_NO_JIT``)
writes the very run directory a compiled one does."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agents import compiled
from agents.draws import Draws
from agents.wheel import TimingWheel, delay, delay_table

from results_fixture import digest, play

HERE = Path(__file__).resolve().parent


def some_delay(r: random.Random) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and probabilities as retry policies make them: one slot, a run of slots,
    or scattered slots, some beyond the wheel's reach."""
    shape = r.choice(["one", "run", "run", "scattered"])
    first = r.choice([1, 2, 5, r.randint(1, 80)])
    if shape == "one":
        offsets = [first]
    elif shape == "run":
        offsets = list(range(first, first + r.randint(2, 70)))
    else:
        offsets = sorted(set(first + r.randrange(90) for _ in range(r.randint(2, 12))))
    w = np.array([r.choice([1.0, r.random(), 1e-9]) for _ in offsets])
    return np.array(offsets), w / w.sum()


def reference(rng: np.random.Generator, slots: np.ndarray, pos: int, per_class: list[int], shift: int,
              table, first_row: int) -> int:
    """What spreading means, with numpy's own calls: class k's entries drawn over row
    k - first_row, each landing ``offset`` slots ahead (at most the wheel's last) in class
    k + shift (at most the last class)."""
    classes, size = slots.shape
    for k, n in enumerate(per_class):
        if n:
            r = k - first_row
            counts = rng.multinomial(n, table.probs[r]) if table.probs.shape[1] > 1 else np.array([n])
            np.add.at(slots[min(k + shift, classes - 1)], (pos + np.minimum(table.offsets[r], size - 1)) % size, counts)
    return sum(per_class)


@pytest.mark.parametrize("ways", ["compiled", "python"])
def test_spreading_over_the_wheel_is_numpys(ways, monkeypatch):
    if ways == "compiled" and not compiled.compiling():
        pytest.skip("numba is not installed: kernels run as Python")
    if ways == "python":
        monkeypatch.setattr(Draws, "kernel", property(lambda draws: draws))  # the kernel runs as Python
    r = random.Random(17)
    for case in range(400):
        seed = r.randrange(2**31)
        classes = r.randint(1, 6)
        delays = [delay(*some_delay(r)) for _ in range(classes)]
        only = r.randrange(classes) if r.random() < 0.4 else None
        table = delay_table([delays[only]] if only is not None else delays)
        for row in range(len(table.probs)):  # what rounding may leave in a padded row's last slot, made likely
            padded = table.probs[row] == 0.0
            if padded[-1] and r.random() < 0.5:
                table.probs[row, -1] = table.probs[row].max()
                table.probs[row] /= table.probs[row].sum()
        per_class = [0] * classes
        for k in ([only] if only is not None else range(classes)):
            per_class[k] = r.choice([0, 1, 7, 1000, r.randrange(10**7)])
        shift = r.choice([0, 1])
        wheel = TimingWheel(r.randint(1, 100), classes + r.choice([0, 1]))
        for _ in range(r.randrange(wheel.size)):
            wheel.pop_due()
        expected_slots = wheel.slots.copy()
        theirs, ours = np.random.default_rng(seed), np.random.default_rng(seed)
        expected = reference(theirs, expected_slots, wheel.pos, per_class, shift, table, only or 0)
        pending = wheel.pending
        wheel.spread(Draws(ours), per_class, shift, table, only or 0)
        assert (wheel.slots == expected_slots).all(), case
        assert wheel.pending - pending == expected, case
        assert ours.bit_generator.state == theirs.bit_generator.state, case


@pytest.mark.slow
def test_a_run_with_kernels_as_python_is_the_compiled_run(tmp_path):
    if not compiled.compiling():
        pytest.skip("numba is not installed: kernels run as Python anyway")
    name = "retries"
    script = (f"import json, sys; from pathlib import Path; from results_fixture import play, digest; "
              f"from agents import compiled; assert not compiled.compiling(); "
              f"print(json.dumps(digest(play({name!r}, Path(sys.argv[1])).dir)))")
    env = {**os.environ, "GAMEDAY_NO_JIT": "1", "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "python")], env=env, capture_output=True,
                          text=True, check=True)
    as_python = json.loads(done.stdout.strip().splitlines()[-1])
    assert as_python == digest(play(name, tmp_path / "compiled").dir)
