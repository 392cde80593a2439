"""Rate limits of the live server: token buckets, and the gate that refuses, before reading
them, the requests of a source that keeps failing to show a valid token.

A source is whatever the server can tell apart before it reads a request: a ZeroMQ
connection (its ROUTER identity), a web client's address. On loopback every web client
has the same address, and a ZeroMQ client may open a new connection for every request,
so the gate also limits failures from all sources together. Only failures count: a
flood of valid tokens (a reconnection storm after a restart) never closes the gate, and
the connections that have shown a valid token are not asked at all (``server.py``).
"""
from __future__ import annotations

import time
from collections import OrderedDict


class TokenBucket:
    """``rate`` a second, sustained, and ``burst`` at once."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst = rate, burst
        self.level = float(burst)
        self.at = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.burst, self.level + (now - self.at) * self.rate)
        self.at = now

    def take(self) -> bool:
        """Whether one more is allowed now (and it is counted)."""
        self._refill()
        if self.level >= 1:
            self.level -= 1
            return True
        return False

    def has(self) -> bool:
        """Whether one more would be allowed now (nothing is counted)."""
        self._refill()
        return self.level >= 1

    def spend(self) -> None:
        """Count one that happened whether allowed or not (never below empty)."""
        self._refill()
        self.level = max(0.0, self.level - 1)

    def idle_until_full(self) -> float:
        """Seconds of quiet after which this bucket is full again, as good as a new one."""
        return self.burst / self.rate


class FailureGate:
    """Refuses, unread, the requests of a source that has failed (a wrong token, a malformed
    request) more than ``rate`` times a second (``burst`` at once), and of every source not
    yet trusted once all of them together have failed more than ``all_rate`` a second
    (``all_burst`` at once). At most ``kept`` sources are remembered; a source silent long
    enough to be full again is forgotten, so nothing is kept per connection that left."""

    def __init__(self, rate: float, burst: int, all_rate: float, all_burst: int, kept: int):
        self.rate, self.burst, self.kept = rate, burst, kept
        self.all = TokenBucket(all_rate, all_burst)
        self.sources: OrderedDict[object, TokenBucket] = OrderedDict()  # the least recently failed first

    def open_to(self, source) -> bool:
        """Whether a request of ``source`` may be read."""
        bucket = self.sources.get(source)
        return self.all.has() and (bucket is None or bucket.has())

    def failed(self, source) -> None:
        self.all.spend()
        bucket = self.sources.pop(source, None) or TokenBucket(self.rate, self.burst)
        bucket.spend()
        self.sources[source] = bucket
        while len(self.sources) > self.kept:
            self.sources.popitem(last=False)

    def forget_quiet(self) -> None:
        """Forget the sources whose buckets are full again (the longest quiet come first)."""
        now = time.monotonic()
        while self.sources:
            bucket = next(iter(self.sources.values()))
            if now - bucket.at < bucket.idle_until_full():
                return
            self.sources.popitem(last=False)

    def limits(self) -> str:
        """The limits, as a refusal names them."""
        return (f"{self.rate:g} requests a second without a valid token from one source (bursts of {self.burst}), "
                f"{self.all.rate:g} from all sources together (bursts of {self.all.burst})")
