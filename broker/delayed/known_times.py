"""Deliver times learnt at publish: what a dispatcher needs to hold a keyed message unread.

Theory of operation
-------------------
Under replace-by-key (:mod:`broker.delayed.replace_by_key`) every scheduling message -- a
single keyed message with a ``deliver_at_time`` -- has its metadata parsed once when it is
published (:func:`~broker.delayed.replace_by_key.classify_timed`), so its deliver time is known
then. A dispatcher that reads the new entry back only to learn that time and hold it in its
tracker (the cache read, the entry objects, a second metadata parse) can instead ask
:class:`KnownDeliverTimes` for the times of the entries after its read position and hold them
without reading them (:mod:`broker.subscriptions.dispatchers.known_holds`).

One :class:`KnownDeliverTimes` per keyed schedule. It is told, in log order, the runs of
entries that become durable with at least one keyed entry (:meth:`KnownDeliverTimes.note`):
per entry the deliver time of a scheduling message, :data:`WITHHELD` for a tombstone (never
delivered: the schedule supersedes it at once) and :data:`UNKNOWN` for anything else (an
ordinary or batched message: the dispatcher reads it). Runs without a keyed entry are not
told: a gap before a run is filled with :data:`UNKNOWN`. It keeps one ledger's window of
consecutive entry ids, ``first`` on, as one ``int64`` array; a new ledger starts a new window.

Bounded: at most :data:`WINDOW` entries (8 B each, 64 KiB), allocated only on a topic whose
runs hold keyed entries; past that the older half is dropped (a dispatcher that far behind
reads its entries). A time is a fact of an entry and
never changes, so nothing here needs invalidating: a position outside the window is just
:data:`UNKNOWN`. Runs on the event loop; not thread-safe.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Final

__all__ = ["UNKNOWN", "WINDOW", "WITHHELD", "KnownDeliverTimes"]

#: Entries a window holds at most (the older half is dropped past it): a dispatcher keeps up
#: within a few read batches of the last durable entry.
WINDOW: Final = 8_192
#: An entry whose deliver time was not learnt (not a scheduling message): read it.
UNKNOWN: Final = 0
#: A tombstone: withheld by the schedule (superseded as it is recorded).
WITHHELD: Final = -1
#: Gaps longer than this between runs start a new window instead of being filled.
_MAX_GAP: Final = 1_024


class KnownDeliverTimes:
    """The deliver times of one ledger's latest entries, as learnt at publish."""

    __slots__ = ("_first", "_ledger", "_times")

    def __init__(self) -> None:
        self._ledger = -1
        self._first = 0
        self._times: array[int] = array("q")

    def __len__(self) -> int:
        return len(self._times)

    def note(self, ledger_id: int, first_entry_id: int, times: Sequence[int]) -> None:
        """Consecutive durable entries from ``first_entry_id`` on (log order): their deliver
        times, :data:`WITHHELD` or :data:`UNKNOWN`."""
        window = self._times
        end = self._first + len(window)
        if ledger_id != self._ledger or not end <= first_entry_id <= end + _MAX_GAP:
            if ledger_id < self._ledger or (ledger_id == self._ledger and first_entry_id < end):
                return          # not after what is held (log order is the contract): ignored
            self._ledger, self._first = ledger_id, first_entry_id
            window = self._times = array("q")
            end = first_entry_id
        if first_entry_id > end:
            window.extend(array("q", bytes(8 * (first_entry_id - end))))
        window.extend(times)
        if len(window) > WINDOW:
            drop = len(window) - WINDOW // 2
            del window[:drop]
            self._first += drop

    def run_from(self, ledger_id: int, entry_id: int, limit: int) -> tuple[array[int], int]:
        """The known times of up to ``limit`` entries from ``(ledger_id, entry_id)`` on, and
        how many of them there are (0: none known from there)."""
        if ledger_id != self._ledger:
            return self._times, 0
        offset = entry_id - self._first
        window = self._times
        if not 0 <= offset < len(window):
            return window, 0
        return window[offset:offset + limit], min(limit, len(window) - offset)

    @property
    def memory_bytes(self) -> int:
        return 64 + self._times.itemsize * self._times.buffer_info()[1]
