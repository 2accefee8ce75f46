"""Cancelled delayed messages (PIP-423, tracker level): verdicts, counters, cancels in flight.

Theory of operation
-------------------
A cancel names its target by position *and* deliver time (``deliverAt``, as PIP-423 asks). The
tracker gives a verdict from what it holds (:class:`CancelResult`): a tracked target is dropped
from the index, as an acknowledgement drops it; a deliver time at or before the cutoff is too
late; a target already handed out or acknowledged is not found; anything else is accepted
without being held (the target is not read yet).

The durable record of a cancel is **not** the tracker's: the subscription acknowledges every
accepted cancel individually on its cursor (:mod:`broker.subscriptions.cancel`), and an
acknowledged entry is never handed out -- the dispatcher skips it when it reads it (fresh or
due, ``cursor.is_deleted``), the bucket tracker's sealed segments skip it at hand-out, and a
restart reads the cursor's acknowledgements back (a roaring bitmap per ledger) before anything
goes out. So the tracker persists nothing per cancel and replays nothing per cancel after a
restart; what it keeps while running (:class:`CancelCounters`) is:

- the cancels *in flight*: accepted, their acknowledgement not on the cursor yet (the REST
  request is in ``skip_by_message_ids``). The tracker's ``add`` holds such a target back
  whatever its time (a read or a rewind meeting it meanwhile must not hand it out) and a second
  cancel of it is APPLIED again; the subscription settles it (:meth:`CancelCounters.settle`) once
  the acknowledgement is on the cursor. Bounded by the cancels being answered at once;
- the totals (applied, refused) and the ``pending`` gauge: accepted cancels whose target was
  not tracked, counted per deliver-time slot (``deliverAt >> SLOT_SHIFT``, ~65.5 s) until the
  slot is over by the grace (the tracker's ``CANCEL_GRACE_TICKS``). A count per slot, not per
  cancel: bounded by the span of the deliver times (~480,000 slots a year), in memory only.

Stores written by earlier versions kept every live cancel in a snapshot of its own (the
*cancel journal*); :mod:`broker.delayed.cancel_journal` turns a leftover one into
acknowledgements once, at recovery, with :func:`journal_targets`.

Not thread-safe (the event loop's).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from pyroaring import BitMap

from protocol.generated import delayed_index_pb2
from storage.positions import Position

# The generated module has no type stubs: its messages are typed as Any here.
_dpb: Any = delayed_index_pb2

#: The ``pending`` gauge counts cancels per slot of 2**SLOT_SHIFT ms of deliver time (~65.5 s).
SLOT_SHIFT: Final = 16


def slot_of(deliver_at_ms: int) -> int:
    return max(deliver_at_ms, 0) >> SLOT_SHIFT


class CancelResult(Enum):
    """What a tracker-level cancel did (the REST layer maps it to a status code)."""

    APPLIED = "applied"             # the target was tracked: its index is cleared
    PENDING = "pending"             # not tracked yet: the acknowledgement keeps it out
    REFUSED_PAST = "refused-past"   # deliverAt is at or before the cutoff: too late
    NOT_FOUND = "not-found"         # already handed out or acknowledged: nothing to cancel

    @property
    def accepted(self) -> bool:
        """Applied or pending: the message will not be delivered (204)."""
        return self in (CancelResult.APPLIED, CancelResult.PENDING)


@dataclass(frozen=True, slots=True)
class CancelStats:
    """Cancel counters of one subscription's tracker (metrics)."""

    applied_total: int         # cancels that cleared a tracked index
    refused_total: int         # cancels refused: deliverAt already past the cutoff
    pending: int               # accepted untracked cancels whose deliver time is not over


class CancelCounters:
    """What one tracker keeps of its cancels while running (module docstring): the cancels in
    flight, the totals and the ``pending`` gauge. Nothing here is persisted."""

    __slots__ = ("_pending_slots", "applied_total", "in_flight", "pending", "refused_total")

    def __init__(self) -> None:
        #: accepted cancels whose acknowledgement is not on the cursor yet
        self.in_flight: dict[Position, int] = {}
        self._pending_slots: dict[int, int] = {}
        self.pending = 0
        self.applied_total = 0
        self.refused_total = 0

    def refuse(self) -> CancelResult:
        self.refused_total += 1
        return CancelResult.REFUSED_PAST

    def accept(self, position: Position, deliver_at_ms: int, *, cleared: bool) -> CancelResult:
        """An accepted cancel (``cleared``: the tracker just dropped its target's index), in
        flight until :meth:`settle`."""
        self.in_flight[position] = deliver_at_ms
        if cleared:
            self.applied_total += 1
            return CancelResult.APPLIED
        slot = slot_of(deliver_at_ms)
        self._pending_slots[slot] = self._pending_slots.get(slot, 0) + 1
        self.pending += 1
        return CancelResult.PENDING

    def again(self, position: Position) -> bool:
        """Is a cancel of this position in flight already? (A second cancel is APPLIED.)"""
        return position in self.in_flight

    def settle(self, position: Position) -> None:
        """The cancel's acknowledgement is on the cursor (or it failed): no longer in flight."""
        self.in_flight.pop(position, None)

    def expire(self, over_before_ms: int) -> bool:
        """Drop from the gauge the slots wholly before ``over_before_ms``; True if any went."""
        last = (over_before_ms >> SLOT_SHIFT) - 1
        gone = [slot for slot in self._pending_slots if slot <= last]
        for slot in gone:
            self.pending -= self._pending_slots.pop(slot)
        return bool(gone)

    def stats(self) -> CancelStats:
        return CancelStats(self.applied_total, self.refused_total, self.pending)

    @property
    def memory_bytes(self) -> int:
        return sys.getsizeof(self.in_flight) + sys.getsizeof(self._pending_slots)


def journal_targets(data: bytes) -> dict[int, BitMap]:
    """The targets of an earlier version's cancel journal, entry ids per ledger. Its form: a
    ``pulsar.delay.SnapshotMetadata`` whose ``metadata_list`` has one entry per deliver-time
    slot, ``delayed_index_bit_map`` the targets' entry ids per ledger (serialized roaring)."""
    out: dict[int, BitMap] = {}
    for meta in _dpb.SnapshotMetadata.FromString(data).metadata_list:
        for ledger_id, raw in meta.delayed_index_bit_map.items():
            bm = BitMap.deserialize(raw)
            have = out.get(ledger_id)
            if have is None:
                out[ledger_id] = bm
            else:
                have |= bm
    return out
