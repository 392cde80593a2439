"""A timing wheel of cohorts: counts of clients (or requests) per future slot and
per attempt number. Its cost depends on the horizon, never on the counts."""
from __future__ import annotations

import numpy as np


class TimingWheel:
    def __init__(self, horizon_slots: int, attempt_classes: int):
        self.size = max(2, int(horizon_slots) + 2)
        self.classes = attempt_classes
        self.slots = np.zeros((self.size, attempt_classes), dtype=np.int64)
        self.pos = 0
        self.pending = 0

    def schedule(self, offsets: np.ndarray, counts: np.ndarray, attempt: int, total: int | None = None) -> None:
        """Add ``counts[i]`` entries at ``offsets[i]`` slots ahead for attempt class ``attempt``."""
        attempt = min(attempt, self.classes - 1)
        idx = (self.pos + np.minimum(offsets, self.size - 1)) % self.size
        np.add.at(self.slots[:, attempt], idx, counts)
        self.pending += int(counts.sum()) if total is None else total

    def schedule_one(self, offset: int, count: int, attempt: int) -> None:
        if count <= 0:
            return
        attempt = min(attempt, self.classes - 1)
        self.slots[(self.pos + min(offset, self.size - 1)) % self.size, attempt] += count
        self.pending += count

    def schedule_rows(self, offsets: np.ndarray, counts: np.ndarray, attempts: np.ndarray) -> None:
        """Add ``counts[r, i]`` entries at ``offsets[r, i]`` slots ahead for class ``attempts[r]``."""
        idx = (self.pos + np.minimum(offsets, self.size - 1)) % self.size
        cls = np.minimum(attempts, self.classes - 1)[:, None]
        np.add.at(self.slots, (idx, np.broadcast_to(cls, idx.shape)), counts)
        self.pending += int(counts.sum())

    def schedule_classes(self, offset: int, per_class: np.ndarray, shift: int) -> None:
        """Add every class k of ``per_class`` as class k + shift, all ``offset`` slots ahead."""
        total = int(per_class.sum())
        if not total:
            return
        row = self.slots[(self.pos + min(offset, self.size - 1)) % self.size]
        n = len(per_class)
        last = self.classes - 1
        for k in range(n):  # few classes; shifted past the last one they merge into it
            if per_class[k]:
                row[min(k + shift, last)] += per_class[k]
        self.pending += total

    def pop_due(self) -> np.ndarray:
        """Entries due now, per attempt class; the wheel advances by one slot."""
        row = self.slots[self.pos].copy()
        self.slots[self.pos] = 0
        self.pos = (self.pos + 1) % self.size
        self.pending -= int(row.sum())
        return row

    def grow(self, horizon_slots: int, attempt_classes: int) -> None:
        """Reach at least ``horizon_slots`` ahead and count at least ``attempt_classes`` (a
        policy changed during a run); what is scheduled keeps its slot and class."""
        size, classes = max(self.size, int(horizon_slots) + 2), max(self.classes, attempt_classes)
        if (size, classes) == (self.size, self.classes):
            return
        slots = np.zeros((size, classes), dtype=np.int64)
        slots[:self.size, :self.classes] = self.slots[(self.pos + np.arange(self.size)) % self.size]
        self.slots, self.size, self.classes, self.pos = slots, size, classes, 0

    def clear(self) -> None:
        """Nothing scheduled any more."""
        self.slots[:] = 0
        self.pending = 0

    def take_from(self, other: "TimingWheel") -> None:
        """Everything ``other`` (of the same size and classes) has scheduled, due at the same ticks."""
        shift = (other.pos - self.pos) % self.size
        self.slots += np.roll(other.slots, -shift, axis=0)
        self.pending += other.pending
        other.clear()
