"""Key_Shared consumer selectors: which consumer owns a sticky-key hash slot.

Theory of operation
-------------------
Every entry has a sticky key (ordering key, else partition key, else empty), hashed by
:func:`protocol.metadata.sticky_key_hash` into ``range(65536)`` exactly as Pulsar does
(Murmur3_32 % 65536). A selector maps that slot to one consumer:

* :class:`ConsistentHashingSelector` (AUTO_SPLIT, Pulsar's default since 2.x): every consumer
  contributes ``points`` (100, Pulsar's ``keySharedConsistentHashingReplicaPoints``) positions on
  a 65536-slot ring, hashed from its name and an index; a slot belongs to the first point at or
  after it (wrapping). A consumer joining or leaving only moves the slots next to its points.
* :class:`HashRangeAutoSplitSelector` (AUTO_SPLIT with
  ``subscriptionKeySharedUseConsistentHashing=false``, Pulsar's
  ``HashRangeAutoSplitStickyKeyConsumerSelector``): the first consumer owns every slot; each
  later one takes the lower half of the largest range (the first largest, in slot order); a
  consumer leaving gives its range to the next higher one (the top range takes the one below
  it instead). Ranges are kept as their inclusive upper ends, the top one being 65536.
* :class:`StickyRangeSelector` (STICKY): consumers declare inclusive ranges; an overlap with an
  existing consumer is refused with ConsumerAssignError as in Pulsar. Slots nobody covers have no
  consumer (their entries wait, as in Pulsar).

Selectors are pure bookkeeping: the dispatcher handles ordering across ownership changes.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from protocol.errors import RequestError, ServerError
from protocol.metadata import KEY_SHARED_RANGE_SIZE, murmur3_32_hash

if TYPE_CHECKING:
    from broker.subscriptions.consumer import Consumer

__all__ = ["ConsistentHashingSelector", "ConsumerAssignError", "HashRangeAutoSplitSelector",
           "KeySharedSelector", "StickyRangeSelector", "new_selector"]

REPLICA_POINTS = 100


class ConsumerAssignError(RequestError):
    def __init__(self, message: str) -> None:
        super().__init__(message, ServerError.ConsumerAssignError)


class ConsistentHashingSelector:
    """AUTO_SPLIT: a hash ring with ``points`` virtual nodes per consumer."""

    def __init__(self, points: int = REPLICA_POINTS) -> None:
        self._points = points
        self._ring_keys: list[int] = []
        self._ring: dict[int, list[Consumer]] = {}

    def add(self, consumer: Consumer) -> None:
        for i in range(self._points):
            slot = murmur3_32_hash(f"{consumer.name}{i}".encode()) % KEY_SHARED_RANGE_SIZE
            owners = self._ring.get(slot)
            if owners is None:
                self._ring[slot] = [consumer]
                bisect.insort(self._ring_keys, slot)
            else:
                owners.append(consumer)

    def remove(self, consumer: Consumer) -> None:
        for slot in [s for s, owners in self._ring.items() if consumer in owners]:
            owners = self._ring[slot]
            owners.remove(consumer)
            if not owners:
                del self._ring[slot]
                self._ring_keys.pop(bisect.bisect_left(self._ring_keys, slot))

    def select(self, slot: int) -> Consumer | None:
        keys = self._ring_keys
        if not keys:
            return None
        i = bisect.bisect_left(keys, slot)
        if i == len(keys):
            i = 0
        return self._ring[keys[i]][0]

    def ranges_of(self, consumer: Consumer) -> list[tuple[int, int]]:
        """The slot ranges a consumer owns (for stats)."""
        out: list[tuple[int, int]] = []
        keys = self._ring_keys
        for i, slot in enumerate(keys):
            if self._ring[slot][0] is consumer:
                start = keys[i - 1] + 1 if i > 0 else 0
                out.append((start, slot))
                if i == len(keys) - 1 and slot < KEY_SHARED_RANGE_SIZE - 1:
                    out.append((slot + 1, KEY_SHARED_RANGE_SIZE - 1))
        return out


class HashRangeAutoSplitSelector:
    """AUTO_SPLIT by halving the largest hash range (Pulsar's hash-range auto-split)."""

    def __init__(self) -> None:
        self._ends: list[int] = []              # sorted inclusive upper ends of the ranges
        self._owner: dict[int, Consumer] = {}   # range end -> consumer

    def _largest(self) -> tuple[int, int]:
        """(end, width) of the first largest range."""
        best_end, best_width, low = KEY_SHARED_RANGE_SIZE, 0, 0
        for end in self._ends:
            if end - low > best_width:
                best_end, best_width = end, end - low
            low = end
        return best_end, best_width

    def check(self, consumer: Consumer) -> None:
        if self._ends and self._largest()[1] <= 1:
            raise ConsumerAssignError(
                f"No more range can assign to new consumer, assigned consumers {len(self._ends)}")

    def add(self, consumer: Consumer) -> None:
        self.check(consumer)
        if not self._ends:
            split = KEY_SHARED_RANGE_SIZE
        else:
            end, width = self._largest()
            split = end - (width >> 1)
        bisect.insort(self._ends, split)
        self._owner[split] = consumer

    def remove(self, consumer: Consumer) -> None:
        ends = [e for e in self._ends if self._owner[e] is consumer]
        for end in ends:
            i = bisect.bisect_left(self._ends, end)
            if end == KEY_SHARED_RANGE_SIZE and len(self._ends) > 1:
                below = self._ends.pop(i - 1)   # the range below joins the top range
                self._owner[end] = self._owner.pop(below)
            else:
                self._ends.pop(i)                # the next higher range takes this one
                del self._owner[end]

    def select(self, slot: int) -> Consumer | None:
        i = bisect.bisect_left(self._ends, slot)
        return self._owner[self._ends[i]] if i < len(self._ends) else None

    def ranges_of(self, consumer: Consumer) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        low = 0
        for end in self._ends:
            if self._owner[end] is consumer:
                out.append((low, end))
            low = end + 1
        return out


class StickyRangeSelector:
    """STICKY: each consumer declares its inclusive hash ranges; overlaps are refused."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ranges: list[tuple[int, int, Consumer]] = []

    def check(self, consumer: Consumer) -> None:
        if not consumer.hash_ranges:
            raise ConsumerAssignError("Ranges for KeyShared policy must not be empty.")
        for r in consumer.hash_ranges:
            if r.start < 0 or r.end >= KEY_SHARED_RANGE_SIZE or r.start > r.end:
                raise ConsumerAssignError(f"Invalid range [{r.start}, {r.end}]")
            for start, end, other in self._ranges:
                if r.start <= end and start <= r.end:
                    raise ConsumerAssignError(
                        f"Range conflict with consumer {other.name}: "
                        f"[{r.start}, {r.end}] overlaps [{start}, {end}]"
                    )

    def add(self, consumer: Consumer) -> None:
        self.check(consumer)
        for r in consumer.hash_ranges:
            i = bisect.bisect_left(self._starts, r.start)
            self._starts.insert(i, r.start)
            self._ranges.insert(i, (r.start, r.end, consumer))

    def remove(self, consumer: Consumer) -> None:
        keep = [t for t in self._ranges if t[2] is not consumer]
        self._ranges = keep
        self._starts = [t[0] for t in keep]

    def select(self, slot: int) -> Consumer | None:
        i = bisect.bisect_right(self._starts, slot) - 1
        if i < 0:
            return None
        _start, end, consumer = self._ranges[i]
        return consumer if slot <= end else None

    def ranges_of(self, consumer: Consumer) -> list[tuple[int, int]]:
        return [(s, e) for s, e, c in self._ranges if c is consumer]


KeySharedSelector = ConsistentHashingSelector | HashRangeAutoSplitSelector | StickyRangeSelector


def new_selector(sticky: bool, *, consistent_hashing: bool) -> KeySharedSelector:
    """The selector of a Key_Shared subscription: STICKY's declared ranges, else AUTO_SPLIT's
    consistent hashing or hash-range splitting (``subscriptionKeySharedUseConsistentHashing``)."""
    if sticky:
        return StickyRangeSelector()
    return ConsistentHashingSelector() if consistent_hashing else HashRangeAutoSplitSelector()
