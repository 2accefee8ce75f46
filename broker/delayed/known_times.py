"""Deliver times learnt at publish: what a dispatcher needs to hold a delayed message unread.

Theory of operation
-------------------
Every SEND's metadata is read when it is published: the publish check's scan
(:func:`protocol.metadata_scan.scan_publish_metadata`) finds its ``deliver_at_time``, and
under replace-by-key :func:`~broker.delayed.replace_by_key.classify_run` parses a keyed one
again. So a delayed message's deliver time is known then. A dispatcher that reads the new entry
back only to learn that time and hold it in its tracker (the cache read, the entry objects, a
second metadata parse) can instead ask :class:`KnownDeliverTimes` for the times of the entries
after its read position and hold them without reading them
(:mod:`broker.subscriptions.dispatchers.known_holds`).

:class:`CheckedTimes` carries the times from the publish check to the append: the topic notes
``(entry, deliver time or None)`` for each entry it checks and takes them by the very entry
object in its next append (a bytes object is immutable, so the time is a fact of that object;
an entry checked and not appended is dropped at the next append, and an entry rewritten after
its check, a fixed delay or broker entry metadata stamped, is simply not found: read as before).
The times travel as the scan found them (varint bytes) and are read at the append only where
they are needed: under replace-by-key a keyed entry's time comes from its classification. A
layout the scan declines (checked by upb instead) carries no time: it is read as before.

One :class:`KnownDeliverTimes` per topic. It is told, in log order, the runs of entries that
become durable with at least one known time (:meth:`KnownDeliverTimes.note`): per entry the
deliver time of a delayed message, :data:`WITHHELD` for a tombstone under replace-by-key (never
delivered: the schedule supersedes it at once) and :data:`UNKNOWN` for anything else (an
ordinary message, or one whose time was not carried: the dispatcher reads it). Runs without a
known time are not told: a gap before a run is filled with :data:`UNKNOWN`. It keeps one
ledger's window of consecutive entry ids, ``first`` on, as one ``int64`` array; a new ledger
starts a new window.

Bounded: at most :data:`WINDOW` entries (8 B each, 64 KiB), allocated only on a topic whose
runs hold delayed entries; past that the older half is dropped (a dispatcher that far behind
reads its entries). :class:`CheckedTimes` keeps at most :data:`MAX_CHECKED` entries between two
appends (past that it notes no more). A time is a fact of an entry and never changes, so nothing
here needs invalidating: a position outside the window is just :data:`UNKNOWN`.
Runs on the event loop; not thread-safe.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from operator import is_
from typing import Final

from protocol.metadata_scan import int64_value

__all__ = ["MAX_CHECKED", "UNKNOWN", "WINDOW", "WITHHELD", "CheckedTimes", "KnownDeliverTimes",
           "deliver_time", "deliver_times"]

#: Entries a window holds at most (the older half is dropped past it): a dispatcher keeps up
#: within a few read batches of the last durable entry.
WINDOW: Final = 8_192
#: An entry whose deliver time was not learnt (not a scheduling message): read it.
UNKNOWN: Final = 0
#: A tombstone: withheld by the schedule (superseded as it is recorded).
WITHHELD: Final = -1
#: Gaps longer than this between runs start a new window instead of being filled.
_MAX_GAP: Final = 1_024
#: Checked entries :class:`CheckedTimes` keeps between two appends at most (it starts again
#: past that: those entries are read back as before).
MAX_CHECKED: Final = 4_096


class CheckedTimes:
    """The deliver times the publish check found, by entry object, until the next append."""

    __slots__ = ("entries", "varints")

    def __init__(self) -> None:
        #: The entries noted, in check order, and their ``deliver_at_time`` as the scan found
        #: it (varint bytes: read only where the time is needed). Holding an entry keeps the
        #: object it is compared with by identity alive. The publish check appends to them
        #: inline, as :meth:`note` does.
        self.entries: list[bytes] = []
        self.varints: list[bytes | None] = []

    def __bool__(self) -> bool:
        return bool(self.entries)

    def note(self, entry: bytes, deliver_at_varint: bytes | None) -> None:
        """``entry`` passed the publish check with this ``deliver_at_time`` (None: none; past
        :data:`MAX_CHECKED` entries: not noted)."""
        if len(self.entries) < MAX_CHECKED:
            self.entries.append(entry)
            self.varints.append(deliver_at_varint)

    def forget(self) -> None:
        """Drop what was noted (an append that needs none of it)."""
        self.entries, self.varints = [], []

    def take(self, entries: Sequence[bytes]) -> list[bytes | None] | None:
        """The ``deliver_at_time`` varints of ``entries`` (an append), None for those without
        one or not noted; None when none has one. Everything noted is forgotten."""
        noted, varints = self.entries, self.varints
        if not noted:
            return None
        self.entries, self.varints = [], []
        if len(noted) == len(entries) and all(map(is_, noted, entries)):
            # the usual run: every entry checked and noted, in order
            return None if varints.count(None) == len(varints) else varints
        by_id = {id(entry): i for i, entry in enumerate(noted)}
        out: list[bytes | None] | None = None
        for k, entry in enumerate(entries):
            i = by_id.get(id(entry))
            if i is not None and noted[i] is entry and varints[i] is not None:
                if out is None:
                    out = [None] * len(entries)
                out[k] = varints[i]
        return out


def deliver_time(varint: bytes | None) -> int:
    """What :class:`KnownDeliverTimes` notes for a checked ``deliver_at_time`` (None: none):
    the time, or :data:`UNKNOWN` for none and for a time of 0 or below (due at once: read)."""
    if varint is None:
        return UNKNOWN
    at = int64_value(varint)
    return at if at > 0 else UNKNOWN


def deliver_times(varints: Iterable[bytes | None]) -> list[int]:
    """:func:`deliver_time` of each of a run's checked times, in one loop (the usual 6-byte
    time decoded in it as :func:`~protocol.metadata_scan.varint6_value` does: always above
    0)."""
    out: list[int] = []
    add = out.append
    from_bytes = int.from_bytes
    for varint in varints:
        if varint is None:
            add(UNKNOWN)
        elif len(varint) == 6:      # varint6_value written out: no call per entry
            x = from_bytes(varint, "little")
            x = (x & 0x7F007F007F) | (x >> 1 & 0x3F803F803F80)
            add((x & 0x3FFF) | (x >> 2 & 0xFFFC000) | (x >> 4 & 0x3FFF0000000))
        else:
            at = int64_value(varint)
            add(at if at > 0 else UNKNOWN)
    return out


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
