"""Replace by key: a keyed delayed message replaces the pending one with the same key; a
tombstone cancels it (the ``delayedDeliveryReplaceByKey`` namespace/topic policy).

Theory of operation
-------------------
One :class:`KeyedSchedule` per topic while the policy is on. It never touches a tracker or a
cursor: the log is the record. A message *supersedes* the older pending message with its key,
and the schedule keeps two things:

- ``latest``: key -> the position of the newest scheduling message with that key (a 128-bit
  MurmurHash3 of the key, so the map holds no key strings; two keys colliding is a 2**-128
  event), packed as ``ledger_id << 32 | entry_id``;
- ``superseded``: per ledger, a roaring bitmap of the entry ids that must never be delivered:
  each replaced message, and each tombstone.

What counts (:func:`classify`), all sent by any Pulsar client unchanged:

- a *scheduling* message: a single (unbatched) message with a key (``partition_key``) and a
  ``deliver_at_time`` (``deliverAfter``/``deliverAt``; clients never batch those);
- a *tombstone*: a message with a key and an empty payload (``null_value``, or zero bytes,
  uncompressed size 0), batched or not. It cancels the pending message of its key and is not
  delivered itself. In a batch that holds other messages too, the tombstones cancel and the
  batch is delivered as it is (a broker cannot take one message out of a batch); a batch of
  tombstones only is not delivered. A compressed batch is not opened.

Ordinary messages (no deliver time, a payload) neither replace nor are replaced.
An entry whose metadata holds neither tag byte (partition_key, num_messages_in_batch) after
``producer_name`` is answered without a parse (a tag written in more bytes than it needs,
which no serializer does, is not looked for: live and rebuilt schedules use the same test).

Entries are recorded (:meth:`KeyedSchedule.record_run`) when they are durable, in log order,
in the loop callback that tells their producers, before any subscription hears of them and
before their receipts leave (the server holds its writes until that callback ends); so a
replacement answered to its producer is already in force. The
dispatchers of every Shared and Key_Shared subscription ask :meth:`KeyedSchedule.superseded`
for each entry they read or find due, and acknowledge a superseded one unseen. As positions
are superseded the topic is told (``on_superseded``, once per recorded run, in bulk: the
positions and the bitmap per ledger the schedule made of them) and
acknowledges them at once on those subscriptions and drops them from their trackers, so
neither the backlog nor a tracker keeps
replaced versions until their old deliver time (the dispatcher's check covers the rest:
a subscription whose acknowledgements were not yet persisted when the broker stopped).

Durability: nothing is written. After a restart the topic rebuilds the schedule by reading its
backlog, from the oldest position any subscription still needs, before a subscription
dispatches (:meth:`KeyedSchedule.record` over the same entries gives the same state).

Memory: ``latest`` holds one entry per key whose newest message is still in some
subscription's backlog (:meth:`prune` drops what every subscription acknowledged):
a dict slot plus a 128-bit and a 64-bit int, ~130 B per key (``bench/delayed_reschedule.py``
prints the figure); ``superseded`` ~2 B per replaced message until acknowledged everywhere.
Runs on the event loop; not thread-safe.
"""

from __future__ import annotations

import operator
import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import islice
from typing import Final, TypeAlias

import mmh3
from google.protobuf.message import DecodeError
from pyroaring import BitMap

from broker.delayed.known_times import UNKNOWN, WITHHELD
from broker.delayed.packed import bitmap_bytes
from protocol import pulsar_pb as pb
from protocol.errors import ProtocolError
from protocol.metadata import iter_batch, split_entry
from protocol.send_accel import keyed_run
from storage.positions import Position

__all__ = ["EntryKeys", "KeyedSchedule", "classify", "classify_run", "classify_run_py",
           "classify_timed",
           "ledger_bitmaps"]

_ENTRY_BITS: Final = 32
_ENTRY_MASK: Final = (1 << _ENTRY_BITS) - 1
_u32_unpack_from: Final = struct.Struct(">I").unpack_from
_metadata_from_string: Final = pb.MessageMetadata.FromString
_hash128: Final = mmh3.hash128
_NONE: Final = pb.NONE

#: ``latest`` entries examined per :meth:`KeyedSchedule.prune` call (bounded work per tick).
PRUNE_STEP: Final = 50_000
_NO_FLOOR: Final = 1 << 64      # above every packed position


EntryKeys: TypeAlias = tuple[tuple[tuple[int, bool], ...], bool]
"""What one entry does under the policy: ``(keys, withheld)``, ``keys`` as (key hash, is
tombstone) pairs, ``withheld`` whether the entry itself is never delivered (a tombstone, or a
batch of tombstones only). A plain tuple: one is made per keyed entry published, and a
tuple is built ten times faster than a named tuple (twenty than a frozen dataclass)."""


def key_hash(key: str | bytes) -> int:
    """The 128-bit identity of a message key."""
    value: int = _hash128(key, 0, signed=False)
    return value


def classify(entry: bytes) -> EntryKeys | None:
    """What a stored entry schedules or cancels (module docstring); None: nothing. The entry
    passed the publish checks (or is read back from the log): its metadata is parsed without
    the required-field check, and one that does not parse counts as nothing."""
    return classify_run((entry,))[0][0]


def classify_timed(entry: bytes) -> tuple[EntryKeys | None, int]:
    """:func:`classify`, and the deliver time of a scheduling message (0 for every other
    entry, and for a scheduling message due at 0 or before): :func:`classify_run` of one."""
    keys, times, _ = classify_run((entry,))
    return keys[0], max(times[0], UNKNOWN)


def classify_run_py(entries: Iterable[bytes]) -> tuple[list[EntryKeys | None], list[int], int]:
    """:func:`classify` of each entry, with what the publish side learns for the dispatchers
    (:class:`~broker.delayed.known_times.KnownDeliverTimes`) from the same parse: per entry
    :data:`~broker.delayed.known_times.WITHHELD` for one the schedule withholds (a tombstone, a
    batch of tombstones only), the deliver time of a scheduling message, and
    :data:`~broker.delayed.known_times.UNKNOWN` for the rest (a scheduling message due at 0 or
    before too); and how many entries are nothing. One loop for a publish run, the usual
    single message's test written out in it (no call, no tuple per entry)."""
    keys: list[EntryKeys | None] = []
    times: list[int] = []
    add_keys, add_time = keys.append, times.append
    parse, hash128, none, unpack = _metadata_from_string, _hash128, _NONE, _u32_unpack_from
    for entry in entries:
        size = len(entry)
        # Without a partition_key tag (6, 0x32) or a num_messages_in_batch tag (11, 0x58)
        # among the bytes after producer_name (which every serializer writes first) the entry
        # cannot be keyed: most entries on a topic with the policy on are answered without a
        # parse.
        if size > 6 and entry[4] == 0x0A and entry[5] < 0x80:
            start, end = 6 + entry[5], 4 + unpack(entry, 0)[0]
            if entry.find(b"\x32", start, end) < 0 and entry.find(b"\x58", start, end) < 0:
                add_keys(None)
                add_time(UNKNOWN)
                continue
        elif size < 4:
            add_keys(None)
            add_time(UNKNOWN)
            continue
        else:
            end = 4 + unpack(entry, 0)[0]
        try:
            md = parse(entry[4:end])
        except DecodeError:
            add_keys(None)
            add_time(UNKNOWN)
            continue
        if md.HasField("num_messages_in_batch"):
            try:
                found = _classify_batch(md, entry)
            except (ProtocolError, UnicodeError):
                found = None
            add_keys(found)
            add_time(WITHHELD if found is not None and found[1] else UNKNOWN)
            continue
        key = md.partition_key      # a value read is cheaper than HasField: that only for ""
        if key or md.HasField("partition_key"):
            if md.null_value or (size == end if md.compression == none else
                                 md.HasField("uncompressed_size")
                                 and md.uncompressed_size == 0):
                add_keys((((hash128(key, 0, signed=False), True),), True))
                add_time(WITHHELD)
                continue
            at = md.deliver_at_time
            if at or md.HasField("deliver_at_time"):
                add_keys((((hash128(key, 0, signed=False), False),), False))
                add_time(at if at > 0 else UNKNOWN)
                continue
        add_keys(None)
        add_time(UNKNOWN)
    nothing = keys.count(None)
    return keys, times, nothing


def _classify_one(entry: bytes) -> tuple[EntryKeys | None, int]:
    """:func:`classify_run_py` of one entry: its keys and its time."""
    keys, times, _ = classify_run_py((entry,))
    return keys[0], times[0]


classify_run: Callable[[Iterable[bytes]], tuple[list[EntryKeys | None], list[int], int]]
if keyed_run is None:   # built without a compiler: the reference
    classify_run = classify_run_py
else:
    # The C twin walks a single message's flat metadata (the usual reschedule or tombstone:
    # no properties, no batch) and hands any other entry to the reference; the same results.
    classify_run = partial(keyed_run, _classify_one, _hash128, WITHHELD, UNKNOWN)


def _classify_batch(md: pb.MessageMetadata, entry: bytes) -> EntryKeys | None:
    if md.compression != _NONE:
        return None
    keys: list[tuple[int, bool]] = []
    count = md.num_messages_in_batch
    for single, data in iter_batch(split_entry(entry)[1], count):
        if single.HasField("partition_key") and (single.null_value or not data):
            keys.append((key_hash(single.partition_key), True))
    if not keys:
        return None
    return tuple(keys), len(keys) == count


def _pack(ledger_id: int, entry_id: int) -> int:
    return (ledger_id << _ENTRY_BITS) | entry_id


def ledger_bitmaps(packed: Sequence[int]) -> list[tuple[int, BitMap]]:
    """Packed positions (at least one) as one bitmap of entry ids per ledger."""
    lowest = min(packed)
    ledger_id = lowest >> _ENTRY_BITS
    if ledger_id == max(packed) >> _ENTRY_BITS:       # the usual run: one ledger
        base = ledger_id << _ENTRY_BITS
        return [(ledger_id, BitMap([position - base for position in packed]))]
    by_ledger: dict[int, list[int]] = {}
    for position in packed:
        ledger_id = position >> _ENTRY_BITS
        ids = by_ledger.get(ledger_id)
        if ids is None:
            by_ledger[ledger_id] = [position & _ENTRY_MASK]
        else:
            ids.append(position & _ENTRY_MASK)
    return [(ledger_id, BitMap(ids)) for ledger_id, ids in by_ledger.items()]


class KeyedSchedule:
    """The newest scheduling message per key and the superseded positions of one topic."""

    __slots__ = ("_floor", "_latest", "_ordered", "_prune_at", "_prune_from", "_prune_min",
                 "_pruned_up_to", "_superseded", "on_superseded",
                 "recorded_up_to", "replaced_total", "superseded_count", "tombstones_total")

    def __init__(self, on_superseded: Callable[[list[int], list[tuple[int, BitMap]]], None]
                 | None = None) -> None:
        #: Told the positions each record call superseded, packed (``ledger_id << 32 |
        #: entry_id``), in log order, and the same as one bitmap of entry ids per ledger
        #: (:func:`ledger_bitmaps`: the caller must not change them): one call per run (the
        #: topic acknowledges them on its subscriptions at once, in bulk).
        self.on_superseded = on_superseded
        self._latest: dict[int, int] = {}
        #: ``latest``'s insertion order is its positions' order (each record goes in at the
        #: end, after popping the key's older position, in log order): a prune takes its head.
        self._ordered = True
        self._superseded: dict[int, BitMap] = {}
        #: A sweep of ``latest`` under way: a copy of its items, the next index, the least
        #: position kept so far.
        self._prune_from: list[tuple[int, int]] | None = None
        self._prune_at = 0
        self._prune_min = _NO_FLOOR
        self._pruned_up_to = -1     # the bound the last sweep of ``latest`` started with
        #: No position in ``latest`` is below it (a sweep's least kept position, lowered by
        #: what is recorded since): a bound below it has nothing to prune, and no sweep runs.
        self._floor = -1
        self.superseded_count = 0
        self.replaced_total = 0        # scheduled messages replaced by a newer one or cancelled
        self.tombstones_total = 0
        #: The last position recorded (packed; -1: none): a snapshot covers the log up to it.
        self.recorded_up_to = -1

    def __len__(self) -> int:
        """Keys with a pending scheduling message."""
        return len(self._latest)

    def record(self, ledger_id: int, entry_id: int, keys: EntryKeys) -> None:
        """A durable entry (log order) that :func:`classify` found keyed."""
        self.record_run(ledger_id, entry_id, (keys,))

    def record_run(self, ledger_id: int, first_entry_id: int,
                   run: Sequence[EntryKeys | None]) -> None:
        """Consecutive durable entries of one ledger from ``first_entry_id`` on, in log order
        (None: an entry :func:`classify` found nothing in). ``on_superseded`` is told once."""
        latest = self._latest
        superseded: list[int] = []
        add = superseded.append
        withheld_count = tombstones = 0
        here = -1
        base = _pack(ledger_id, first_entry_id)
        if first_entry_id + len(run) > _ENTRY_MASK + 1:
            # entry ids only grow: the rest of the run is beyond the packing
            run = run[:max(0, _ENTRY_MASK + 1 - first_entry_id)]
        if base <= self.recorded_up_to:     # not after what was recorded: order not known
            self._ordered = False
        if base < self._floor:      # below what a sweep found (not in log order): kept true
            self._floor = base
        if base < self._prune_min:  # recorded while a sweep runs: it ends at most here
            self._prune_min = base
        for i, keys in enumerate(run):
            if keys is None:
                continue
            here = base + i
            pairs, withheld = keys
            for h, tombstone in pairs:
                older = latest.pop(h, None)
                if older is not None:
                    add(older)
                if tombstone:
                    tombstones += 1
                else:
                    latest[h] = here
            if withheld:
                add(here)
                withheld_count += 1
        if here > self.recorded_up_to:
            self.recorded_up_to = here
        self.replaced_total += len(superseded) - withheld_count   # the older versions
        self.tombstones_total += tombstones
        if superseded:
            self._supersede(superseded)

    def _supersede(self, packed: list[int]) -> None:
        bitmaps = self._superseded
        groups = ledger_bitmaps(packed)
        if len(groups) == 1:
            # the usual run: one ledger, each position new here -- one bitmap union
            ledger_id, ids = groups[0]
            bm = bitmaps.get(ledger_id)
            if bm is None:
                bm = bitmaps[ledger_id] = BitMap()
            if len(ids) == len(packed) and not bm.intersect(ids):
                bm |= ids
                self.superseded_count += len(packed)
                if self.on_superseded is not None:
                    self.on_superseded(packed, groups)
                return
        fresh: list[int] = []
        current, bm = -1, None
        for position in packed:
            ledger_id, entry_id = position >> _ENTRY_BITS, position & _ENTRY_MASK
            if ledger_id != current:
                current, bm = ledger_id, bitmaps.get(ledger_id)
                if bm is None:
                    bm = bitmaps[ledger_id] = BitMap()
            assert bm is not None
            if entry_id not in bm:
                bm.add(entry_id)
                fresh.append(position)
        self.superseded_count += len(fresh)
        if fresh and self.on_superseded is not None:
            self.on_superseded(fresh, ledger_bitmaps(fresh))

    def export(self) -> tuple[dict[int, int], dict[int, BitMap]]:
        """Copies of ``latest`` and ``superseded`` (a snapshot of this instant; see
        :mod:`broker.delayed.keyed_snapshot`)."""
        return dict(self._latest), {lid: bm.copy() for lid, bm in self._superseded.items()}

    def restore(self, latest: dict[int, int], superseded: dict[int, BitMap],
                recorded_up_to: int) -> None:
        """Take a snapshot's state (an empty schedule only; nobody is told of its positions:
        they were acknowledged when first superseded, or are again by the dispatchers)."""
        self._latest = latest
        values = array("Q", latest.values())
        self._ordered = all(map(operator.le, values, islice(values, 1, None)))
        self._floor = -1
        self._prune_from = None
        self._superseded = superseded
        self.superseded_count = sum(len(bm) for bm in superseded.values())
        self.recorded_up_to = recorded_up_to

    def superseded(self, position: Position) -> bool:
        """Must this entry never be delivered (replaced, cancelled, or a tombstone)?"""
        bm = self._superseded.get(position.ledger_id)
        return bm is not None and position.entry_id in bm

    def superseded_ids(self, ledger_id: int) -> BitMap | None:
        """The superseded entry ids of one ledger (None: none), live: what :meth:`superseded`
        looks in, for a caller that asks about many entries of the ledger at once."""
        return self._superseded.get(ledger_id)

    def prune(self, acknowledged_up_to: Position) -> None:
        """Forget what every subscription has acknowledged: positions <= the bound (the
        oldest mark-delete position of the topic's subscriptions). Bounded work per call,
        :data:`PRUNE_STEP` entries of ``latest``. Recorded in log order (always, live and in a
        rebuild), ``latest``'s insertion order is its positions' order: the prune takes its
        head while it is <= the bound, so its work is what it forgets, not the number of keys.
        Otherwise (a record before what was recorded, a restored map out of order) ``latest``
        is swept a step at a time (a copy of its items, each step filtered in one
        comprehension), and a bound below every position a sweep kept (and every one
        recorded since) starts no sweep."""
        bound_ledger, bound_entry = acknowledged_up_to.ledger_id, acknowledged_up_to.entry_id
        for ledger_id in [lid for lid in self._superseded if lid <= bound_ledger]:
            bm = self._superseded[ledger_id]
            before = len(bm)
            if ledger_id < bound_ledger:
                del self._superseded[ledger_id]
                self.superseded_count -= before
                continue
            if bound_entry >= 0:
                bm.remove_range(0, bound_entry + 1)
                self.superseded_count -= before - len(bm)
                if not bm:
                    del self._superseded[ledger_id]
        bound = _pack(bound_ledger, bound_entry) if bound_entry >= 0 else \
            _pack(bound_ledger, 0) - 1
        items = self._prune_from
        if items is None and self._ordered:
            # the head of ``latest`` holds its lowest positions: take those <= the bound
            latest = self._latest
            gone: list[int] = []
            for h, packed in latest.items():
                if packed > bound or len(gone) >= PRUNE_STEP:
                    break
                gone.append(h)
            for h in gone:
                del latest[h]
            return
        if items is None:
            if bound <= self._pruned_up_to or bound < self._floor:
                return          # nothing acknowledged since the last sweep, or none of it keyed
            # (key, position) pairs (16 B each, transient): the int objects are the dict's own
            items = self._prune_from = list(self._latest.items())
            self._prune_at, self._prune_min = 0, _NO_FLOOR
            self._pruned_up_to = bound
        else:
            bound = self._pruned_up_to
        latest = self._latest
        at = self._prune_at
        step = items[at:at + PRUNE_STEP]
        gone = [h for h, packed in step if packed <= bound]
        for h in gone:
            if latest.get(h, bound + 1) <= bound:   # not re-recorded since the copy
                del latest[h]
        if len(gone) < len(step):
            self._prune_min = min(self._prune_min,
                                  min([packed for _, packed in step if packed > bound]))
        self._prune_at = at + PRUNE_STEP
        if self._prune_at >= len(items):
            self._prune_from = None
            self._floor = self._prune_min

    def prune_fully(self, acknowledged_up_to: Position) -> None:
        """:meth:`prune` to the end of its sweep (a load, before anything is dispatched)."""
        self.prune(acknowledged_up_to)
        while self._prune_from is not None:
            self.prune(acknowledged_up_to)

    @property
    def memory_bytes(self) -> int:
        """Approximate bytes held: the dict, its int objects, the bitmaps."""
        latest = self._latest
        per_item = 0
        if latest:
            h, packed = next(iter(latest.items()))
            per_item = sys.getsizeof(h) + sys.getsizeof(packed)
        total = sys.getsizeof(latest) + per_item * len(latest)
        total += sys.getsizeof(self._superseded)
        return total + sum(bitmap_bytes(bm) for bm in self._superseded.values())
