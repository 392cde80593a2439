"""A timing wheel of cohorts: counts of clients (or requests) per future slot and
per attempt number. Its cost depends on the horizon, never on the counts.

Each attempt class is a row of slots, so that a delay's distribution (a run of
consecutive slots) lands in one slice addition."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Delay(NamedTuple):
    """A delay's distribution over the slots ahead, as a draw spreads a cohort over it."""
    offsets: np.ndarray  # slots ahead (>= 1), one per probability
    probs: np.ndarray  # float64, adding up to 1
    first: int  # offsets[0]
    span: int  # the first ``span`` offsets are first, first + 1, ...; any after it repeat the last of them; 0: neither


def delay(offsets: np.ndarray, probs: np.ndarray) -> Delay:
    """A ``Delay`` of these slots and probabilities."""
    offsets = np.asarray(offsets, dtype=np.int64)
    steps = np.diff(offsets)
    run = int(np.argmax(steps != 1)) if (steps != 1).any() else len(steps)  # steps of 1 from the first slot
    span = run + 1 if (steps[run:] == 0).all() else 0  # after the run, only its last slot again (padding)
    return Delay(offsets, np.ascontiguousarray(probs, dtype=np.float64), int(offsets[0]), span)


class DelayTable(NamedTuple):
    """Delays as the rows of one table, for ``cohort_kernels.spread``: each padded to the
    widest with its last slot at probability 0 (a multinomial draw over a padded row is
    not the one over the row, so a table is built for the classes drawn together)."""
    probs: np.ndarray  # [row, i]
    offsets: np.ndarray  # [row, i]
    firsts: np.ndarray  # [row]
    spans: np.ndarray  # [row]
    counts: np.ndarray  # room for one row's draw


def delay_table(delays: list[Delay]) -> DelayTable:
    width = max(len(d.offsets) for d in delays)
    padded = [delay(np.append(d.offsets, [d.offsets[-1]] * (width - len(d.offsets))),
                    np.append(d.probs, [0.0] * (width - len(d.offsets)))) for d in delays]
    return DelayTable(np.array([d.probs for d in padded]), np.array([d.offsets for d in padded], dtype=np.int64),
                      np.array([d.first for d in padded], dtype=np.int64),
                      np.array([d.span for d in padded], dtype=np.int64), np.zeros(width, dtype=np.int64))


class TimingWheel:
    def __init__(self, horizon_slots: int, attempt_classes: int):
        self.size = max(2, int(horizon_slots) + 2)
        self.classes = attempt_classes
        self.slots = np.zeros((attempt_classes, self.size), dtype=np.int64)  # [class, slot]
        self.pos = 0
        self.pending = 0

    def schedule(self, offsets: np.ndarray, counts: np.ndarray, attempt: int, total: int | None = None) -> None:
        """Add ``counts[i]`` entries at ``offsets[i]`` slots ahead for attempt class ``attempt``."""
        attempt = min(attempt, self.classes - 1)
        idx = (self.pos + np.minimum(offsets, self.size - 1)) % self.size
        np.add.at(self.slots[attempt], idx, counts)
        self.pending += int(counts.sum()) if total is None else total

    def schedule_one(self, offset: int, count: int, attempt: int) -> None:
        if count <= 0:
            return
        self.slots[min(attempt, self.classes - 1), (self.pos + min(offset, self.size - 1)) % self.size] += count
        self.pending += count

    def schedule_classes(self, offset: int, per_class, shift: int) -> None:
        """Add every class k of ``per_class`` as class k + shift, all ``offset`` slots ahead."""
        col = self.slots[:, (self.pos + min(offset, self.size - 1)) % self.size]
        last = self.classes - 1
        total = 0
        for k, n in enumerate(per_class):  # few classes; shifted past the last one they merge into it
            if n:
                col[min(k + shift, last)] += n
                total += n
        self.pending += total

    def pop_due(self) -> list[int]:
        """Entries due now, per attempt class; the wheel advances by one slot."""
        pos = self.pos
        self.pos = (pos + 1) % self.size
        if not self.pending:
            return [0] * self.classes
        row = self.slots[:, pos].tolist()
        due = sum(row)
        if due:
            self.slots[:, pos] = 0
            self.pending -= due
        return row

    def grow(self, horizon_slots: int, attempt_classes: int) -> None:
        """Reach at least ``horizon_slots`` ahead and count at least ``attempt_classes`` (a
        policy changed during a run); what is scheduled keeps its slot and class."""
        size, classes = max(self.size, int(horizon_slots) + 2), max(self.classes, attempt_classes)
        if (size, classes) == (self.size, self.classes):
            return
        slots = np.zeros((classes, size), dtype=np.int64)
        slots[:self.classes, :self.size] = self.slots[:, (self.pos + np.arange(self.size)) % self.size]
        self.slots, self.size, self.classes, self.pos = slots, size, classes, 0

    def clear(self) -> None:
        """Nothing scheduled any more."""
        self.slots[:] = 0
        self.pending = 0

    def take_from(self, other: "TimingWheel") -> None:
        """Everything ``other`` (of the same size and classes) has scheduled, due at the same ticks."""
        shift = (other.pos - self.pos) % self.size
        self.slots += np.roll(other.slots, -shift, axis=1)
        self.pending += other.pending
        other.clear()

    def thin(self, rng: np.random.Generator, keep: float) -> int:
        """Keep each entry with chance ``keep``: one binomial draw per slot and class, slot by
        slot in the order they are stored; returns how many went."""
        by_slot = np.ascontiguousarray(self.slots.T)
        kept = rng.binomial(by_slot, keep)
        gone = int(by_slot.sum() - kept.sum())
        self.slots = np.ascontiguousarray(kept.T)
        self.pending -= gone
        return gone


class DelayStore:
    """Packs of delay tables in flat arrays, as kernels read them (``cohort_kernels.schedule``).
    A pack is one policy's delays at one lag for ``classes`` attempt classes: the table of
    them all (padded to one width), each class's delay on its own (a multinomial draw over
    a padded row is not the one over the row), and the latent bug's one slot. A cache of
    what the policies determine: emptied when they change. The arrays grow by doubling, so
    that adding a pack costs the same however many there are."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.index: dict = {}
        self.n_values = self.n_rows = self.n_packs = 0  # in use, of the arrays' room
        self.probs = np.zeros(64)
        self.offsets = np.zeros(64, dtype=np.int64)
        self.rows = np.zeros((4, 16), dtype=np.int64)  # [start, width, first slot, span] x row
        self.packs = np.zeros((4, 4), dtype=np.int64)  # [pack]: first row of the table, first single row, bug slot, classes
        self.counts = np.zeros(1, dtype=np.int64)  # room for a draw over the widest row
        self._share()

    def _share(self) -> None:
        #: what a kernel takes, in this order (after ``pack``'s index, which comes last)
        self.arrays = (self.probs, self.offsets, self.rows[0], self.rows[1], self.rows[2], self.rows[3],
                       self.packs[:self.n_packs], self.counts)  # only the packs made: a kernel checks an index

    def pack(self, key, build) -> int:
        """The index of the pack under ``key``, built by ``build()`` (a table of every class's
        delay, a one-row table per class, the bug's slot) the first time."""
        hit = self.index.get(key)
        if hit is None:
            hit = self.index[key] = self._add(*build())
        return hit

    def _add(self, table: DelayTable, singles: list[DelayTable], bug_slot: int) -> int:
        rows = [(table.probs[i], table.offsets[i], table.firsts[i], table.spans[i]) for i in range(len(table.probs))]
        rows += [(t.probs[0], t.offsets[0], t.firsts[0], t.spans[0]) for t in singles]
        widths = [len(p) for p, _, _, _ in rows]
        self._room(self.n_values + sum(widths), self.n_rows + len(rows), self.n_packs + 1)
        first_row = self.n_rows
        for p, o, first, span in rows:
            v, w = self.n_values, len(p)
            self.probs[v:v + w], self.offsets[v:v + w] = p, o
            self.rows[:, self.n_rows] = v, w, first, span
            self.n_values += w
            self.n_rows += 1
        self.packs[self.n_packs] = first_row, first_row + len(table.probs), bug_slot, len(table.probs)
        self.n_packs += 1
        if max(widths) > len(self.counts):
            self.counts = np.zeros(max(widths), dtype=np.int64)
        self._share()
        return self.n_packs - 1

    def _room(self, values: int, rows: int, packs: int) -> None:
        def grown(a: np.ndarray, axis: int, need: int) -> np.ndarray:
            if a.shape[axis] >= need:
                return a
            shape = list(a.shape)
            shape[axis] = max(need, 2 * a.shape[axis])
            out = np.zeros(shape, dtype=a.dtype)
            out[tuple(slice(0, n) for n in a.shape)] = a
            return out

        self.probs, self.offsets = grown(self.probs, 0, values), grown(self.offsets, 0, values)
        self.rows, self.packs = grown(self.rows, 1, rows), grown(self.packs, 0, packs)
