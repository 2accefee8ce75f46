"""What one producer name has stored on one topic: the sequence ids, their message ids, the
next in-order id.

Theory of operation
-------------------
A SEND carries a range of sequence ids, ``[sequence_id, key]``, where the key is the highest
id it carries (:func:`send_key`: ``highest_sequence_id`` if set -- the Java client's batches
--, else ``sequence_id + num_messages - 1`` -- the C++ client's). That pair is the send's
*identity*: a re-send (the client re-sends its whole pending queue after a reconnect, same
ids, same batches) carries the same pair, and two different sends of one producer never do
(chunks aside: every chunk of a message carries its id; only the last one is recorded).

In order, each send starts right after the previous one (``sequence_id == next_seq``): new,
and the hot path (:meth:`broker.topics.producer.Producer.on_sends`) takes it with that one
comparison. Anything else goes through :meth:`broker.topics.dedup.MessageDeduplication.resend`,
which decides with what a :class:`SequenceState` keeps:

* ``stored``, an :class:`IdRanges`: the union of the ranges of every durable send (a superset:
  bounded, see below). A send whose range is not wholly inside was never stored: it is new.
  This is what keeps out-of-order ids exact: the C++ client sends a delayed message at once,
  outside the batch it is accumulating, with an id from that batch's range; the batch
  follows with its first id and a count that leaves the delayed one out, so its computed
  range ends at or below ids already stored, yet some of its ids never were.
* ``window``: the identities and message ids of the last :data:`RECEIPT_WINDOW` durable
  sends, sorted by key: a re-send found there is answered with its own id. Every durable
  send with key ``>= floor`` is in it, so a send above ``floor`` that is not there was never
  stored (a delayed message refused by the publish guard and accepted later, after its batch).
* Neither: it was stored and its id is forgotten (Pulsar's answer, -1:-1).

Invariants: ``persisted`` is the highest key recorded; ``next_seq - 1`` (``pushed``) the
highest key appended, durable or in flight; ``window`` is sorted by (key, sequence id);
``stored`` covers the range of every recorded send.

Bounds: the window holds :data:`RECEIPT_WINDOW` sends; ``stored`` holds at most
:data:`MAX_ID_RANGES` ranges -- past it the lowest hole is filled (treated as stored: the
oldest ids, whose sends are the least likely still to come). When a send's range overlaps
ids already stored, :meth:`IdRanges.cover` also covers as many uncovered ids just above it
(the ids the C++ client's batch really holds), so that pattern leaves no hole behind.
``stored`` is what the ``pulsar.dedup`` cursor persists per name (:meth:`IdRanges.encode`).
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from itertools import repeat
from typing import Protocol, cast

from storage.positions import Position

__all__ = ["MAX_ID_RANGES", "NO_FLOOR", "RECEIPT_WINDOW", "IdRanges", "SequenceState",
           "send_key"]

#: Message ids remembered per producer name, to answer re-sends with their original ids.
RECEIPT_WINDOW = 256
#: Disjoint ranges of stored sequence ids kept per producer name (in memory and persisted).
MAX_ID_RANGES = 32
#: Below every sequence id (sequence ids are uint64 on the wire; -1 means "none").
NO_FLOOR = -(1 << 64)


class InFlight(Protocol):
    """An incarnation of a producer that may still have sends in flight."""

    @property
    def closed(self) -> bool: ...

    @property
    def pending(self) -> int: ...

    def pending_append(self, sequence_id: int, key: int) -> asyncio.Future[Position] | None: ...

    def drain_finished(self) -> None: ...


def send_key(sequence_id: int, highest_sequence_id: int, messages: int = 1) -> int:
    """The deduplication key of a send: the highest sequence id it carries (the Java client
    sets highest_sequence_id on batches; the C++ client numbers a batch's messages from
    sequence_id on). :meth:`broker.topics.producer.Producer.on_sends` computes the same inline."""
    key = highest_sequence_id if highest_sequence_id > sequence_id else sequence_id
    return max(key, sequence_id + messages - 1)


class IdRanges:
    """A bounded set of sequence ids as sorted, disjoint, non-adjacent inclusive ranges
    (``bounds`` is flat: ``[lo0, hi0, lo1, hi1, ...]``). ``changes`` counts modifications
    (the snapshot writes a name again only when it changed)."""

    __slots__ = ("bounds", "changes")

    def __init__(self, bounds: list[int] | None = None) -> None:
        self.bounds: list[int] = bounds if bounds is not None else []
        self.changes = 0

    def __bool__(self) -> bool:
        return bool(self.bounds)

    def __len__(self) -> int:
        """Number of ranges."""
        return len(self.bounds) // 2

    @property
    def highest(self) -> int | None:
        return self.bounds[-1] if self.bounds else None

    def add(self, lo: int, hi: int) -> None:
        """Cover ``[lo, hi]``."""
        b = self.bounds
        self.changes += 1
        if b and b[-2] <= lo <= b[-1] + 1:  # in order: extends the last range
            if hi > b[-1]:
                b[-1] = hi
            return
        if not b or lo > b[-1] + 1:
            b += (lo, hi)
        else:
            merged: list[int] = []
            placed = False
            for i in range(0, len(b), 2):
                start, end = b[i], b[i + 1]
                if end + 1 < lo:
                    merged += (start, end)
                elif hi + 1 < start:
                    if not placed:
                        merged += (lo, hi)
                        placed = True
                    merged += (start, end)
                else:
                    lo, hi = min(lo, start), max(hi, end)
            if not placed:
                merged += (lo, hi)
            self.bounds = b = merged
        while len(b) > 2 * MAX_ID_RANGES:  # fill the lowest hole
            b[1] = b[3]
            del b[2:4]

    def contains(self, lo: int, hi: int) -> bool:
        """Every id of ``[lo, hi]`` is covered."""
        b = self.bounds
        i = bisect.bisect_right(b, lo)
        if i % 2 == 0:  # lo is not inside a range (or equals its end: checked next)
            return i > 0 and b[i - 1] == lo and hi <= lo
        return hi <= b[i]

    def covered(self, lo: int, hi: int) -> int:
        """How many ids of ``[lo, hi]`` are covered."""
        b = self.bounds
        n = 0
        for i in range(0, len(b), 2):
            start, end = max(b[i], lo), min(b[i + 1], hi)
            if start <= end:
                n += end - start + 1
        return n

    def cover(self, lo: int, hi: int) -> None:
        """Cover the first ``hi - lo + 1`` uncovered ids from *lo* on: ``[lo, hi]``, plus as
        many uncovered ids above it as it overlapped covered ones (module docstring)."""
        extra = self.covered(lo, hi)
        self.add(lo, hi)
        while extra > 0:
            b = self.bounds
            i = bisect.bisect_left(b, hi)
            if i % 2 == 0:  # hi is a range's start
                i += 1
            gap_lo = b[i] + 1
            gap_hi = gap_lo + extra - 1
            if i + 1 < len(b):
                gap_hi = min(gap_hi, b[i + 1] - 1)
            self.add(gap_lo, gap_hi)
            extra -= gap_hi - gap_lo + 1
            hi = gap_hi

    def encode(self) -> str:
        """``lo:hi,lo:hi`` (an open start, ``:hi``, for a range from :data:`NO_FLOOR`)."""
        b = self.bounds
        return ",".join(("" if b[i] == NO_FLOOR else str(b[i])) + ":" + str(b[i + 1])
                        for i in range(0, len(b), 2))

    @classmethod
    def decode(cls, text: str) -> IdRanges:
        """The inverse of :meth:`encode`; a bare integer N (every id up to N) is read too.
        Raises ValueError for anything else."""
        if ":" not in text:
            return cls([NO_FLOOR, int(text)])
        bounds: list[int] = []
        for part in text.split(","):
            start, _, end = part.partition(":")
            lo = NO_FLOOR if start == "" else int(start)
            hi = int(end)
            if hi < lo or (bounds and lo <= bounds[-1] + 1):
                raise ValueError(f"sequence ranges out of order: {text!r}")
            bounds += (lo, hi)
        if len(bounds) > 2 * MAX_ID_RANGES:
            raise ValueError(f"more than {MAX_ID_RANGES} sequence ranges")
        return cls(bounds)


class SequenceState:
    """What one producer name has appended and stored on one topic (module docstring)."""

    __slots__ = ("floor", "idle_since", "name", "next_seq", "persisted", "producers",
                 "snapshotted", "stored", "window")

    def __init__(self, name: str, stored: IdRanges | None = None, *, floor: int = NO_FLOOR,
                 snapshotted: int | None = None) -> None:
        self.name = name
        self.stored = IdRanges() if stored is None else stored
        top = self.stored.highest
        self.persisted = -1 if top is None else top  # highest key durable
        self.next_seq = self.persisted + 1           # where an in-order send starts
        self.floor = floor               # every durable send with key >= floor is in the window
        # (key, sequence id, ledger, entry) of the last durable sends, ascending
        self.window: deque[tuple[int, int, int, int]] = deque()
        self.producers: list[InFlight] = []  # incarnations that may have sends in flight
        self.snapshotted = snapshotted   # stored.changes when last written to the cursor
        self.idle_since = 0.0

    @property
    def pushed(self) -> int:
        """The highest key appended (durable or in flight)."""
        return self.next_seq - 1

    @pushed.setter
    def pushed(self, key: int) -> None:
        self.next_seq = key + 1

    def record(self, sequence_id: int, key: int, ledger_id: int, entry_id: int, *,
               in_ranges: bool = False) -> None:
        """A send ``[sequence_id, key]`` is durable at (ledger_id, entry_id). *in_ranges*:
        ``stored`` holds it already (an entry the recovered snapshot covers): only its id is
        recorded."""
        window = self.window
        if key > self.persisted:
            self.persisted = key
        if not window or key > window[-1][0]:
            window.append((key, sequence_id, ledger_id, entry_id))
        else:  # out of order: keep the window sorted
            i = bisect.bisect_left(window, key, key=_key)
            while i < len(window) and window[i][0] == key and window[i][1] < sequence_id:
                i += 1
            if i < len(window) and window[i][0] == key and window[i][1] == sequence_id:
                return  # recorded already
            window.insert(i, (key, sequence_id, ledger_id, entry_id))
        if not in_ranges:
            self.stored.cover(sequence_id, key)
        if len(window) > RECEIPT_WINDOW:
            self._evicted(window.popleft()[0])

    def record_run(self, seqs: list[int], keys: list[int | None], ledger_id: int,
                   first_entry_id: int) -> None:
        """:meth:`record` for consecutive entries ``first_entry_id..`` of one ledger whose
        sends are ``[seqs[i], keys[i]]`` (key None: a chunk but the last, not recorded). The
        hot path puts only in-order sends in a run, so when they follow the window their
        ranges tile ``[seqs[0], keys[-1]]`` and are recorded at once."""
        window = self.window
        if not keys or None in keys or (window and cast("int", keys[0]) <= window[-1][0]):
            for offset, key in enumerate(keys):
                if key is not None:
                    self.record(seqs[offset], key, ledger_id, first_entry_id + offset)
            return
        ascending = cast("list[int]", keys)  # checked just above: no None in it
        last = ascending[-1]
        if last > self.persisted:
            self.persisted = last
        window.extend(zip(ascending, seqs, repeat(ledger_id),
                          range(first_entry_id, first_entry_id + len(keys))))
        self.stored.add(seqs[0], last)
        excess = len(window) - RECEIPT_WINDOW
        if excess > 0:
            for _ in range(excess - 1):
                window.popleft()
            self._evicted(window.popleft()[0])  # the highest evicted key

    def record_one(self, sequence_id: int, key: int, ledger_id: int, entry_id: int) -> None:
        """:meth:`record_run` of a run of one send (a lone send's receipt), without the run's
        lists."""
        window = self.window
        if window and key <= window[-1][0]:
            self.record(sequence_id, key, ledger_id, entry_id)
            return
        if key > self.persisted:
            self.persisted = key
        window.append((key, sequence_id, ledger_id, entry_id))
        self.stored.add(sequence_id, key)
        if len(window) > RECEIPT_WINDOW:
            self._evicted(window.popleft()[0])

    def _evicted(self, key: int) -> None:
        if key >= self.floor:
            self.floor = key + 1

    def stored_at(self, sequence_id: int, key: int) -> tuple[int, int] | None:
        """Where the send ``[sequence_id, key]`` was stored, if it is in the window."""
        window = self.window
        i = bisect.bisect_left(window, key, key=_key)
        while i < len(window) and window[i][0] == key:
            if window[i][1] == sequence_id:
                return window[i][2], window[i][3]
            i += 1
        return None

    def never_stored(self, sequence_id: int, key: int) -> bool:
        """The send ``[sequence_id, key]``, neither in the window nor in flight, was never
        stored (module docstring)."""
        return key >= self.floor or not self.stored.contains(sequence_id, key)

    def in_flight(self, sequence_id: int, key: int) -> asyncio.Future[Position] | None:
        """The pending append of ``[sequence_id, key]`` on any incarnation of this producer."""
        for producer in self.producers:
            fut = producer.pending_append(sequence_id, key)
            if fut is not None:
                return fut
        return None

    def attached(self) -> bool:
        """An incarnation of this name is connected or still has sends to answer."""
        return any(not p.closed or p.pending for p in self.producers)

    def drop_window(self) -> None:
        if self.window:
            self.floor = max(self.floor, self.window[-1][0] + 1)
            self.window.clear()


def _key(item: tuple[int, int, int, int]) -> int:
    return item[0]
