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

from agents import cohort_kernels, compiled
from agents.draws import Draws
from agents.wheel import TimingWheel, delay, delay_table

import orchestrator
from results_fixture import RUNS, digest, play

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
        draws = Draws(ours)  # kept while the kernel draws: its handle points into it
        wheel.pending += cohort_kernels.spread(draws.kernel, wheel.slots, wheel.pos, np.array(per_class, dtype=np.int64),
                                               shift, only or 0, *table)
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


@compiled.kernel
def _draw_each(draws, what, a, b, c, out):
    """Draw what[i] (0 binomial, 1 hypergeometric) on (a[i], b[i], c[i]) into out[i]."""
    for i in range(len(what)):
        if what[i] == 0:
            out[i] = compiled.binomial(draws, a[i], b[i] / 1000.0)
        else:
            out[i] = compiled.hypergeometric(draws, a[i], b[i], c[i])


@compiled.kernel
def _split_each(draws, counts, ks, out):
    """Split row i of ``counts`` by ks[i] into row i of ``out``."""
    for i in range(len(ks)):
        compiled.split_into(draws, counts[i], ks[i], out[i])


def test_kernels_draw_as_the_draws_methods(monkeypatch):
    """binomial, hypergeometric and split_into, compiled, are Draws' methods: the same
    counts and the same generator states, the cases answered without a draw included."""
    if not compiled.compiling():
        pytest.skip("numba is not installed: kernels run as Python")
    r = random.Random(5)
    for case in range(200):
        n = r.randint(1, 30)
        what = np.array([r.randrange(2) for _ in range(n)], dtype=np.int64)
        a = np.array([r.choice([0, 1, 9, 10, 11, 500, r.randrange(10**8), r.randrange(10**9, 10**11)]) for _ in range(n)],
                     dtype=np.int64)  # (beyond a billion, a hypergeometric is drawn as a binomial)
        b = np.array([r.choice([0, 1, 500, 1000, r.randrange(1001)]) if w == 0 else r.choice([0, 3, 10**6, r.randrange(10**8)])
                      for w in what], dtype=np.int64)
        c = np.array([r.randint(0, int(x + y)) if r.random() < 0.7 else r.choice([0, int(x + y)]) for x, y in zip(a, b)],
                     dtype=np.int64)
        seed = r.randrange(2**31)
        ours, theirs = Draws(np.random.default_rng(seed)), Draws(np.random.default_rng(seed))
        out = np.zeros(n, dtype=np.int64)
        _draw_each(ours.kernel, what, a, b, c, out)
        expected = [theirs.binomial(int(x), int(y) / 1000.0) if w == 0 else theirs.hypergeometric(int(x), int(y), int(z))
                    for w, x, y, z in zip(what, a, b, c)]
        assert out.tolist() == expected, case
        assert ours.rng.bit_generator.state == theirs.rng.bit_generator.state, case

        classes = r.randint(1, 8)
        counts = np.array([[r.choice([0, 1, 7, r.randrange(10**6)]) for _ in range(classes)] for _ in range(n)],
                          dtype=np.int64)
        ks = np.array([r.choice([0, int(row.sum()), r.randint(0, int(row.sum()))]) for row in counts], dtype=np.int64)
        out = np.zeros((n, classes), dtype=np.int64)
        _split_each(ours.kernel, counts, ks, out)
        assert out.tolist() == [theirs.split(row.tolist(), int(k)) for row, k in zip(counts, ks)], case
        assert ours.rng.bit_generator.state == theirs.rng.bit_generator.state, case


@pytest.mark.parametrize("name", ["retries", "decorrelated jitter", "leases",
                                  pytest.param("us-east-1-2021 protect-early, attribution", marks=pytest.mark.slow)])
def test_settling_a_result_compiled_is_settling_it_as_python(name, tmp_path, monkeypatch):
    """Every result a population settles in a run is settled by the compiled kernel as by
    the same kernel run as Python on a copy of everything it touches (its generator too)."""
    if not compiled.compiling():
        pytest.skip("numba is not installed: kernels run as Python")
    from agents import population

    settle = cohort_kernels.settle
    calls = []

    def both_ways(draws, given, *arrays):
        assert type(draws) is tuple  # compiled
        agent = next(a for a in live if a.draws.kernel is draws)
        twin_rng = np.random.Generator(np.random.PCG64())
        twin_rng.bit_generator.state = agent.rng.bit_generator.state
        copies = [given.copy()] + [a.copy() for a in arrays]
        settle.py_func(Draws(twin_rng), *copies)
        settle(draws, given, *arrays)
        assert given.tolist() == copies[0].tolist()
        for mine, theirs in zip(arrays[:3], copies[1:4]):  # the wheels
            assert (mine == theirs).all()
        assert agent.rng.bit_generator.state == twin_rng.bit_generator.state
        calls.append(int(given[cohort_kernels.SETTLE_RES + cohort_kernels.RES_FAILED]))

    live = []
    built = population.Population.__init__

    def remember(self, *args, **kwargs):
        built(self, *args, **kwargs)
        live.append(self)

    monkeypatch.setattr(population.Population, "__init__", remember)
    monkeypatch.setattr(population.kernels, "settle", both_ways)
    run = dict(RUNS[name], attribution=False)
    orchestrator.run(out=tmp_path / "run", **run)
    assert calls and max(calls) > 0  # results settled, some with failures


def test_cached_kernels_are_forgotten_when_the_draws_compiled_into_them_change(tmp_path, monkeypatch):
    """numba checks a cached kernel against its own file only; the draws it compiles in come
    from compiled.py and draws.py, so a change there must not leave stale kernels loaded."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    for name in ("compiled.py", "draws.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    kernel_files = [cache / "cohort_kernels.settle-183.py311.nbi", cache / "cohort_kernels.settle-183.py311.1.nbc"]

    def cached() -> list[bool]:
        return [f.exists() for f in kernel_files]

    def cache_kernels() -> None:
        for f in kernel_files:
            f.write_bytes(b"compiled")

    (cache / "compiled.cpython-311.pyc").write_bytes(b"bytecode")
    cache_kernels()
    compiled.forget_stale_kernels(tmp_path)  # no record of what they were compiled from: forgotten
    assert cached() == [False, False] and (cache / "compiled.cpython-311.pyc").exists()  # (only kernels go)
    cache_kernels()
    compiled.forget_stale_kernels(tmp_path)  # nothing changed: kept
    assert cached() == [True, True]
    (tmp_path / "draws.py").write_text("# draws.py, changed\n")
    compiled.forget_stale_kernels(tmp_path)
    assert cached() == [False, False]
    cache_kernels()
    compiled.forget_stale_kernels(tmp_path)
    assert cached() == [True, True]


def test_a_delay_store_keeps_every_pack_as_given_while_it_grows():
    """Packs added one after another (the arrays reallocated on the way) read back as the
    tables they were made of, and the arrays a kernel gets hold exactly the packs made."""
    from agents.wheel import DelayStore

    r = random.Random(3)
    store, made = DelayStore(), []
    for i in range(60):
        delays = [delay(*some_delay(r)) for _ in range(r.randint(1, 7))]
        table, singles, bug = delay_table(delays), [delay_table([d]) for d in delays], r.randint(1, 9)
        assert store.pack(("key", i), lambda: (table, singles, bug)) == i
        assert store.pack(("key", i), lambda: pytest.fail("built twice")) == i
        made.append((table, singles, bug))
    probs, offsets, start, width, first, span, packs, counts = store.arrays
    assert len(packs) == len(made)
    for (table, singles, bug), (full0, single0, bug_slot, classes) in zip(made, packs.tolist()):
        assert (bug_slot, classes) == (bug, len(singles))
        rows = [(table.probs[k], table.offsets[k], table.firsts[k], table.spans[k]) for k in range(classes)]
        rows += [(t.probs[0], t.offsets[0], t.firsts[0], t.spans[0]) for t in singles]
        for row, (p, o, f, sp) in zip(range(full0, single0 + classes), rows):
            s, w = start[row], width[row]
            assert probs[s:s + w].tolist() == p.tolist() and offsets[s:s + w].tolist() == o.tolist()
            assert (first[row], span[row]) == (f, sp) and len(counts) >= w


@pytest.mark.parametrize("name", ["retries", pytest.param("us-east-1-2021 historical", marks=pytest.mark.slow)])
def test_results_with_only_successes_settle_alike_without_the_kernel(name, tmp_path, monkeypatch):
    """A population counts a result of successes only without calling settle: the same run
    as when settle takes every result."""
    from agents import population

    quick = digest(play(name, tmp_path / "quick").dir)
    monkeypatch.setattr(population.Population, "_only_successes", lambda self, *counts: False)
    assert digest(play(name, tmp_path / "kernel").dir) == quick


@pytest.mark.slow
def test_a_run_says_once_why_kernels_are_not_compiled(tmp_path):
    """Another machine's 12-hour run took three times as long with nothing saying why
    (issue 40: no cffi there). Without cffi, or with GAMEDAY_NO_JIT, `gameday run` says so
    on stderr, once; here, with both, it says nothing."""
    block_cffi = ("import sys, importlib.abc\n"
                  "class NoCffi(importlib.abc.MetaPathFinder):\n"
                  "    def find_spec(self, name, path, target=None):\n"
                  "        if name == 'cffi' or name.startswith('cffi.'):\n"
                  "            raise ImportError('no cffi here')\n"
                  "sys.meta_path.insert(0, NoCffi())\n"
                  "from orchestrator.cli import main\n"
                  "main()\n")
    args = ["run", "--duration", "1m", "--runbook", "none", "--hosting", "inprocess", "--no-report",
            "--no-attribution", "--no-progress"]
    env = {k: v for k, v in os.environ.items() if k != "GAMEDAY_NO_JIT"}
    said = {}
    for name, cmd, extra in (("no cffi", [sys.executable, "-c", block_cffi], {}),
                             ("no jit", [sys.executable, "-m", "orchestrator.cli"], {"GAMEDAY_NO_JIT": "1"}),
                             ("compiled", [sys.executable, "-m", "orchestrator.cli"], {})):
        proc = subprocess.run([*cmd, *args, "--out", str(tmp_path / name.replace(" ", "_"))], capture_output=True,
                              text=True, timeout=300, env={**env, **extra}, cwd=HERE.parent)
        assert proc.returncode == 0, proc.stderr[-2000:]
        said[name] = [line for line in proc.stderr.splitlines() if "compiled kernels" in line]
    assert said["no cffi"] == ["note: compiled kernels are not in use (cffi is not installed (pip install cffi)): "
                               "runs are several times slower"]
    assert said["no jit"] == ["note: compiled kernels are not in use (GAMEDAY_NO_JIT is set): runs are several times "
                              "slower"]
    assert said["compiled"] == []
