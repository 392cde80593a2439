"""A timing wheel of cohorts: counts of clients (or requests) per future slot and
per attempt number. Its cost depends on the horizon, never on the counts.

Each attempt class is a row of slots, so that a delay's distribution (a run of
consecutive slots) lands in one slice addition."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from agents.compiled import kernel, multinomial_into


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
    """Delays as the rows of one table, for ``TimingWheel.spread``: each padded to the
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

    def spread(self, draws, per_class: list[int], shift: int, table: DelayTable, first_row: int = 0) -> None:
        """Schedule ``per_class[k]`` entries of every class k as class k + shift, spread over
        the slots of row k - first_row of ``table`` by a multinomial draw on ``draws`` (an
        ``agents.draws.Draws``), class after class."""
        self.pending += _spread(draws.kernel, self.slots, self.pos, np.array(per_class, dtype=np.int64), shift,
                                first_row, *table)

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


@kernel
def _spread(draws, slots, pos, per_class, shift, first_row, probs, offsets, firsts, spans, counts):
    """``TimingWheel.spread`` on the wheel's ``slots`` at ``pos``; returns the entries
    scheduled. A class past the last merges into it; an offset past the wheel lands on
    its last slot; a padded row's padding holds what numpy's multinomial leaves there (all
    but the last padded slot empty, that one what rounding kept from the last real
    slot), which belongs to the last real slot."""
    classes, size = slots.shape
    width = probs.shape[1]
    total = 0
    for k in range(len(per_class)):
        n = per_class[k]
        if n == 0:
            continue
        r = k - first_row
        row = slots[min(k + shift, classes - 1)]
        total += n
        if width == 1:  # one slot: no draw
            row[(pos + min(offsets[r, 0], size - 1)) % size] += n
            continue
        multinomial_into(draws, n, probs[r], counts)
        span = spans[r]
        if span == 0 or firsts[r] + span > size - 1:  # slot by slot
            for i in range(width):
                row[(pos + min(offsets[r, i], size - 1)) % size] += counts[i]
        else:  # a run of slots, then padding
            a = (pos + firsts[r]) % size
            for i in range(span):
                row[(a + i) % size] += counts[i]
            if width > span:
                row[(a + span - 1) % size] += counts[width - 1]
    return total
