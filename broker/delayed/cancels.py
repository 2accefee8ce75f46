"""Cancelled delayed messages (PIP-423, tracker level): a compact, time-ordered set.

Theory of operation
-------------------
A cancel names its target by position *and* deliver time (``deliverAt``, as PIP-423 asks). The
set files each target under a time *slot* (``deliverAt >> SLOT_SHIFT``, ~65.5 s) and, within
it, in a 32-bit roaring bitmap per ledger. A lookup (``contains``) therefore needs the deliver
time, which every caller has: the dispatcher's ``add`` carries it, a hand-out knows the index
time. Cost: ~2 bytes per target inside a bitmap container plus the bitmap headers shared by the
targets of one (slot, ledger): measured in ``bench/delayed.py`` (target < 8 bytes a cancel).

Ordering and expiry, as the design says: slots are the CANCEL indexes' time order; a slot is
*expired* once its last deliver time plus a grace (2 ticks) has passed: by then every target
in it came due and was skipped, and the cancel has been used.

Serialized form (the tracker persists it; see :mod:`broker.delayed.cancel_journal`): a
``pulsar.delay.SnapshotMetadata`` whose ``metadata_list`` has one entry per slot
(``min/max_schedule_timestamp`` = the slot's first/last millisecond, ``delayed_index_bit_map`` =
the targets' entry ids per ledger): the same format as a bucket snapshot's metadata.

Positions must pack into 32+32 bits (:func:`broker.delayed.packed.fits`). Not thread-safe.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from pyroaring import BitMap

from broker.delayed.packed import bitmap_bytes
from protocol.generated import delayed_index_pb2

# The generated module has no type stubs: its messages are typed as Any here.
_dpb: Any = delayed_index_pb2

#: Deliver times are filed in slots of 2**SLOT_SHIFT ms (~65.5 s).
SLOT_SHIFT: Final = 16
_SLOT_MS: Final = 1 << SLOT_SHIFT


def slot_of(deliver_at_ms: int) -> int:
    return max(deliver_at_ms, 0) >> SLOT_SHIFT


class CancelSet:
    """Cancelled targets, keyed by (deliver-time slot, ledger) -> entry-id bitmap."""

    __slots__ = ("_slots", "count")

    def __init__(self) -> None:
        self._slots: dict[int, dict[int, BitMap]] = {}
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def add(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> bool:
        """Record a target; False if it was already recorded."""
        ledgers = self._slots.setdefault(slot_of(deliver_at_ms), {})
        bm = ledgers.get(ledger_id)
        if bm is None:
            ledgers[ledger_id] = BitMap((entry_id,))
        elif entry_id in bm:
            return False
        else:
            bm.add(entry_id)
        self.count += 1
        return True

    def contains(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> bool:
        ledgers = self._slots.get(slot_of(deliver_at_ms))
        if ledgers is None:
            return False
        bm = ledgers.get(ledger_id)
        return bm is not None and entry_id in bm

    def discard(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> bool:
        slot = slot_of(deliver_at_ms)
        ledgers = self._slots.get(slot)
        bm = ledgers.get(ledger_id) if ledgers is not None else None
        if ledgers is None or bm is None or entry_id not in bm:
            return False
        bm.remove(entry_id)
        if not bm:
            del ledgers[ledger_id]
            if not ledgers:
                del self._slots[slot]
        self.count -= 1
        return True

    def expire(self, used_before_ms: int,
               keep: Callable[[int, int], bool] | None = None) -> int:
        """Drop the targets of every slot whose last deliver time is before
        ``used_before_ms``, except those ``keep(ledger_id, entry_id)`` holds on to; how many
        targets went."""
        last_expired = (used_before_ms >> SLOT_SHIFT) - 1     # slots wholly before the bound
        gone = 0
        for slot in [s for s in self._slots if s <= last_expired]:
            ledgers = self._slots.pop(slot)
            survivors: dict[int, BitMap] = {}
            for ledger_id, bm in ledgers.items():
                kept = BitMap(e for e in bm if keep(ledger_id, e)) if keep is not None else None
                if kept:
                    survivors[ledger_id] = kept
                gone += len(bm) - (len(kept) if kept else 0)
            if survivors:
                self._slots[slot] = survivors
        self.count -= gone
        return gone

    def targets(self) -> Iterable[tuple[int, int, int]]:
        """Every ``(ledger_id, entry_id, slot_first_ms)``, slot by slot (for recovery)."""
        for slot in sorted(self._slots):
            for ledger_id, bm in self._slots[slot].items():
                for entry_id in bm:
                    yield ledger_id, entry_id, slot << SLOT_SHIFT

    def update(self, other: CancelSet) -> None:
        for slot, ledgers in other._slots.items():
            mine = self._slots.setdefault(slot, {})
            for ledger_id, bm in ledgers.items():
                have = mine.get(ledger_id)
                if have is None:
                    mine[ledger_id] = bm.copy()
                else:
                    have |= bm
        self.count = sum(len(bm) for ledgers in self._slots.values() for bm in ledgers.values())

    def clear(self) -> None:
        self._slots.clear()
        self.count = 0

    @property
    def memory_bytes(self) -> int:
        total = sys.getsizeof(self._slots)
        for ledgers in self._slots.values():
            total += sys.getsizeof(ledgers) + sum(bitmap_bytes(bm) for bm in ledgers.values())
        return total

    def encode(self) -> bytes:
        """The serialized form (module docstring)."""
        metadata = _dpb.SnapshotMetadata()
        for slot in sorted(self._slots):
            meta = metadata.metadata_list.add(min_schedule_timestamp=slot << SLOT_SHIFT,
                                              max_schedule_timestamp=(slot << SLOT_SHIFT)
                                              + _SLOT_MS - 1)
            for ledger_id, bm in self._slots[slot].items():
                bm.run_optimize()
                meta.delayed_index_bit_map[ledger_id] = bm.serialize()
        return bytes(metadata.SerializeToString())

    @classmethod
    def decode(cls, data: bytes) -> CancelSet:
        out = cls()
        metadata = _dpb.SnapshotMetadata.FromString(data)
        for meta in metadata.metadata_list:
            ledgers = out._slots.setdefault(slot_of(meta.min_schedule_timestamp), {})
            for ledger_id, raw in meta.delayed_index_bit_map.items():
                bm = BitMap.deserialize(raw)
                have = ledgers.get(ledger_id)
                if have is None:
                    ledgers[ledger_id] = bm
                else:
                    have |= bm
        out.count = sum(len(bm) for ledgers in out._slots.values() for bm in ledgers.values())
        return out


class CancelResult(Enum):
    """What a tracker-level cancel did (the REST layer maps it to a status code)."""

    APPLIED = "applied"             # the target was tracked: its index is cleared
    PENDING = "pending"             # not tracked yet: recorded, dropped when its index comes
    REFUSED_PAST = "refused-past"   # deliverAt is at or before the cutoff: too late
    NOT_FOUND = "not-found"         # already handed out or acknowledged: nothing to cancel

    @property
    def accepted(self) -> bool:
        """Applied or pending: the message will not be delivered (204)."""
        return self in (CancelResult.APPLIED, CancelResult.PENDING)


@dataclass(frozen=True, slots=True)
class CancelStats:
    """Cancel counters of one subscription's tracker (metrics)."""

    applied_total: int         # cancels that cleared a tracked index (at once or when met)
    refused_total: int         # cancels refused: deliverAt already past the cutoff
    pending: int               # cancels recorded whose target has not been met yet


class CancelBook:
    """The cancels of one tracker: ``waiting`` (target not met yet) and ``used`` (target
    cleared), the counters, and expiry. Both sets are persisted together (:meth:`encode`)."""

    __slots__ = ("applied_total", "refused_total", "used", "waiting")

    def __init__(self) -> None:
        self.waiting = CancelSet()
        self.used = CancelSet()
        self.applied_total = 0
        self.refused_total = 0

    def __len__(self) -> int:
        return len(self.waiting) + len(self.used)

    def refuse(self) -> CancelResult:
        self.refused_total += 1
        return CancelResult.REFUSED_PAST

    def record(self, ledger_id: int, entry_id: int, deliver_at_ms: int, *,
               cleared: bool) -> CancelResult:
        """Remember a cancel; ``cleared``: the tracker just cleared the target's index."""
        if cleared or self.used.contains(ledger_id, entry_id, deliver_at_ms):
            self.waiting.discard(ledger_id, entry_id, deliver_at_ms)
            self.used.add(ledger_id, entry_id, deliver_at_ms)
            self.applied_total += cleared
            return CancelResult.APPLIED
        self.waiting.add(ledger_id, entry_id, deliver_at_ms)
        return CancelResult.PENDING

    def blocks(self, ledger_id: int, entry_id: int, deliver_at_ms: int) -> bool:
        """Is this position cancelled? (The tracker asks before indexing it.) A waiting
        cancel meeting its target is used from now on."""
        if not (self.waiting or self.used):
            return False
        if self.used.contains(ledger_id, entry_id, deliver_at_ms):
            return True
        if self.waiting.discard(ledger_id, entry_id, deliver_at_ms):
            self.used.add(ledger_id, entry_id, deliver_at_ms)
            self.applied_total += 1
            return True
        return False

    def expire(self, used_before_ms: int, still_needed: Callable[[int, int], bool]) -> bool:
        """Drop the cancels whose targets' time (plus the caller's grace) has passed: used
        ones always, waiting ones unless ``still_needed`` (the target may still be read)."""
        gone = self.used.expire(used_before_ms)
        gone += self.waiting.expire(used_before_ms, still_needed)
        return gone > 0

    def stats(self) -> CancelStats:
        return CancelStats(self.applied_total, self.refused_total, len(self.waiting))

    @property
    def memory_bytes(self) -> int:
        return self.waiting.memory_bytes + self.used.memory_bytes

    def encode(self) -> bytes:
        """Both sets as one serialized :class:`CancelSet` (recovery sorts them again)."""
        union = CancelSet()
        union.update(self.waiting)
        union.update(self.used)
        return union.encode()

    def restore(self, recovered: CancelSet) -> None:
        """Cancels read back after a restart: all waiting until the tracker meets them."""
        self.waiting.update(recovered)
