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
    drawable: object  # the probabilities as the draws take them (agents.draws.Draws.prepare)


def delay(offsets: np.ndarray, probs: np.ndarray, prepare=lambda probs: probs) -> Delay:
    """A ``Delay`` of these slots and probabilities; ``prepare`` makes them ``drawable``."""
    offsets = np.asarray(offsets, dtype=np.int64)
    steps = np.diff(offsets)
    run = int(np.argmax(steps != 1)) if (steps != 1).any() else len(steps)  # steps of 1 from the first slot
    span = run + 1 if (steps[run:] == 0).all() else 0  # after the run, only its last slot again (padding)
    probs = np.ascontiguousarray(probs, dtype=np.float64)
    return Delay(offsets, probs, int(offsets[0]), span, prepare(probs))


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

    def schedule_delay(self, d: Delay, counts: np.ndarray, attempt: int, total: int) -> None:
        """Add ``counts`` (``total`` in all) spread over the slots of ``d`` for class ``attempt``."""
        span, size = d.span, self.size
        if not span or d.first + span > size - 1:
            self.schedule(d.offsets, counts, attempt, total)
            return
        row = self.slots[min(attempt, self.classes - 1)]
        a = (self.pos + d.first) % size
        b = a + span
        if b <= size:
            row[a:b] += counts[:span]
        else:
            row[a:] += counts[:size - a]
            row[:b - size] += counts[size - a:span]
        if len(counts) > span:
            # Padding (zero probabilities) after the run: numpy's multinomial leaves all but the
            # last padded slot empty, and puts there what rounding kept from the run's last slot.
            extra = int(counts[-1])
            if extra:
                row[(b - 1) % size] += extra
        self.pending += total

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
