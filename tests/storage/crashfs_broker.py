"""The broker's storage use on the crash-simulating file layer (how the harness works:
crashfs.py; the store-level workloads and checks: crashfs_check.py).

What the broker stores, driven here through the real classes on a CrashFS-backed store:
- a topic's entries (appends across rollovers) and a subscription's acks (cursor "sub");
- the dedup state: producer sequence ids as properties of the ``pulsar.dedup`` cursor plus its
  mark-delete (what ``MessageDeduplication.snapshot`` writes), flushed;
- the PIP-195 bucket tracker (``BucketDelayedDeliveryTracker``) on cursor "sub" with the store's
  ``SnapshotStore``: sealed buckets become snapshots named by ``#pulsar.internal.delayed.bucket_*``
  properties; a tracker-level cancel's durable record is the subscription's acknowledgement
  of its target (as broker.subscriptions.cancel makes it).
Metadata (tenants, policies, schemas) is SQLite (``metadata.db``), not written through FileOps,
so it is outside this harness.

Marks (besides crashfs_check's "sent"/"ack"/"cursor"):
  ("props", topic, cursor, version, properties)  a property change through MarkingCursor
  ("flushed", topic, cursor, version)            flush() returned; it started at that version
  ("bsnap", id, digest)                          SnapshotStore.create returned id
  ("bsnap_delete_start"|"bsnap_deleted", id)
  ("cancel", topic, ledger, entry, deliver_at)   the cancel's acknowledgement was flushed
check_broker_state() opens the store as the broker does (``SegmentStore.open`` with the
broker's ``is_snapshot_key``: the open-time sweep of orphan snapshots) on a post-crash state,
then checks: each cursor's
properties are one of its versions at or after its last returned flush (never older); every
snapshot a recovered cursor names exists and has the bytes it was created with; no snapshot is
left that no cursor file (of either generation) names (a crash between a snapshot's creation and the cursor update leaves
one: the sweep removes it); a deleted snapshot is not back; every cancel whose acknowledgement
was flushed is acknowledged on the recovered cursor, and a tracker recovered from it does not
hold its target.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from crashfs import CrashFS
from crashfs_check import CHECK_CONFIG, Workload, digest
from pyroaring import BitMap

from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.cancel_journal import CANCELS_KEY
from broker.delayed.cancels import CancelResult
from broker.delayed.residual import is_snapshot_key, snapshot_ids
from protocol.generated import delayed_index_pb2
from storage import ManagedCursor, Position, SegmentStore, SnapshotStore

TOPIC = "persistent://public/default/crash-broker"
DEDUP = "pulsar.dedup"
T0 = 1_700_000_000_000
ROUNDS = 4
PER_ROUND = 6


class MarkingCursor:
    """The tracker's BucketCursor over a real ManagedCursor, marking property versions and
    flushes (and the mark-delete/acks a returned flush promises)."""

    def __init__(self, fs: CrashFS, topic: str, name: str, cursor: ManagedCursor) -> None:
        self.fs, self.topic, self.name, self.cursor = fs, topic, name, cursor
        self.version = 0
        self._mark_props()

    def _mark_props(self) -> None:
        self.fs.mark("props", self.topic, self.name, self.version, dict(self.cursor.properties))

    @property
    def mark_delete_position(self) -> Position:
        return self.cursor.mark_delete_position

    @property
    def read_position(self) -> Position:
        return self.cursor.read_position

    @property
    def properties(self) -> dict[str, str]:
        return self.cursor.properties

    def set_property(self, key: str, value: str) -> None:
        self.cursor.set_property(key, value)
        self.version += 1
        self._mark_props()

    def remove_property(self, key: str) -> None:
        if key in self.cursor.properties:
            self.cursor.remove_property(key)
            self.version += 1
            self._mark_props()

    def is_deleted(self, pos: Position) -> bool:
        return self.cursor.is_deleted(pos)

    def delete_entry_ids(self, ledger_id: int, entry_ids: Any) -> None:
        self.cursor.delete_entry_ids(ledger_id, entry_ids)

    async def flush(self) -> None:
        version = self.version
        md = self.cursor.mark_delete_position
        acks = tuple((lid, eid) for lid, bm in sorted(self.cursor.individually_deleted.copies().items())
                     for eid in bm)
        await self.cursor.flush()
        self.fs.mark("flushed", self.topic, self.name, version)
        self.fs.mark("cursor", self.topic, self.name, md.ledger_id, md.entry_id, acks)


class MarkingSnapshots:
    """The tracker's SnapshotStorage over the real SnapshotStore, marking what it returned."""

    def __init__(self, fs: CrashFS, store: SnapshotStore) -> None:
        self.fs, self.store = fs, store

    async def create(self, metadata: bytes, segments: list[bytes], summary: bytes = b"") -> int:
        sid = await self.store.create(metadata, segments, summary)
        self.fs.mark("bsnap", sid, len(segments), digest([bytes(metadata), *map(bytes, segments)]))
        return sid

    async def load_metadata(self, snapshot_id: int) -> bytes:
        return await self.store.load_metadata(snapshot_id)

    async def load_segment(self, snapshot_id: int, index: int) -> bytes:
        return await self.store.load_segment(snapshot_id, index)

    async def load_parts(self, parts: list[tuple[int, int]]) -> list[bytes | Exception]:
        return await self.store.load_parts(parts)

    async def summaries(self) -> dict[int, bytes]:
        return await self.store.summaries()

    async def add_summaries(self, items: list[tuple[int, bytes]]) -> None:
        await self.store.add_summaries(items)

    async def delete(self, snapshot_id: int) -> None:
        self.fs.mark("bsnap_delete_start", snapshot_id)
        await self.store.delete(snapshot_id)
        self.fs.mark("bsnap_deleted", snapshot_id)

    def size_bytes(self, snapshot_id: int) -> int:
        return self.store.size_bytes(snapshot_id)


def _tracker(cursor: Any, snapshots: Any) -> BucketDelayedDeliveryTracker:
    return BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=snapshots, tick_time_ms=1, strict=True, on_due=lambda: None,
        loop=asyncio.get_running_loop(), clock_ms=lambda: T0, min_index_count_per_bucket=2,
        time_step_per_segment_ms=1000, max_indexes_per_segment=4)


def _journal(target: Position) -> bytes:
    """An earlier version's cancel journal (broker.delayed.cancel_journal) naming ``target``."""
    metadata: Any = delayed_index_pb2.SnapshotMetadata()
    meta = metadata.metadata_list.add(min_schedule_timestamp=T0, max_schedule_timestamp=T0)
    meta.delayed_index_bit_map[target.ledger_id] = BitMap([target.entry_id]).serialize()
    return bytes(metadata.SerializeToString())


def deliver_at(seq: int) -> int:
    return T0 + 60_000 + 1000 * seq


async def broker_workload(w: Workload) -> None:
    """Appends across rollovers; the bucket tracker seals buckets into snapshots (and merges
    or retires them); a cancel per round, persisted; dedup properties and mark-delete
    flushed; acks on the subscription."""
    ml = await w.store.open_ledger(TOPIC)
    await w.open_cursor(ml, "sub")
    await w.open_cursor(ml, DEDUP)
    sub = MarkingCursor(w.fs, TOPIC, "sub", ml.cursors["sub"])
    dedup = MarkingCursor(w.fs, TOPIC, DEDUP, ml.cursors[DEDUP])
    tracker_snapshots = MarkingSnapshots(w.fs, w.store.snapshots)
    tracker = _tracker(sub, tracker_snapshots)
    for _ in range(ROUNDS):
        start = w.seqs.get(TOPIC, 0)
        positions = await w.append(ml, PER_ROUND)
        for i, pos in enumerate(positions):
            tracker.add(pos, deliver_at(start + i))
        await tracker.wait_idle()
        target = positions[1]
        result = tracker.cancel_delayed(target, deliver_at(start + 1))
        assert result in (CancelResult.APPLIED, CancelResult.PENDING), result
        ml.cursors["sub"].delete([target])      # the cancel's durable record: its ack
        await sub.flush()
        tracker.cancel_settled(target)
        w.fs.mark("cancel", TOPIC, target.ledger_id, target.entry_id, deliver_at(start + 1))
        dedup.set_property("producer-a", str(start + PER_ROUND - 1))
        dedup.cursor.mark_delete(positions[-1])
        await dedup.flush()
        await tracker.wait_idle()
    # An earlier version's cancel journal naming one more target: the next recovery applies
    # it as an acknowledgement, then drops the property and the snapshot.
    legacy = positions[2]
    sid = await tracker_snapshots.create(_journal(legacy), [])
    sub.set_property(CANCELS_KEY, str(sid))
    await sub.flush()
    w.fs.mark("cancel", TOPIC, legacy.ledger_id, legacy.entry_id, deliver_at(start + 2))
    await tracker.close()
    tracker = _tracker(sub, tracker_snapshots)
    await tracker.recover()
    await tracker.wait_idle()
    # Acks: the subscription consumed the first ones (the tracker's buckets shrink on load).
    ml.cursors["sub"].delete(w.acked[TOPIC][:3])
    await sub.flush()
    await tracker.close()


async def check_broker_state(root: Path, marks: list[tuple[Any, ...]]) -> tuple[list[str], int]:
    """The broker-storage promises the state at root breaks, and how many orphan snapshots
    the start-up sweep removed there."""
    versions: dict[tuple[str, str], dict[int, dict[str, str]]] = {}
    flushed: dict[tuple[str, str], int] = {}
    created: dict[int, tuple[int, str]] = {}
    deleted: set[int] = set()
    cancels: list[tuple[int, int, int]] = []
    for m in marks:
        if m[0] == "props":
            versions.setdefault((m[1], m[2]), {})[m[3]] = m[4]
        elif m[0] == "flushed":
            flushed[(m[1], m[2])] = max(flushed.get((m[1], m[2]), -1), m[3])
        elif m[0] == "bsnap":
            created[m[1]] = (m[2], m[3])
        elif m[0] == "bsnap_deleted":
            deleted.add(m[1])
        elif m[0] == "cancel":
            cancels.append((m[2], m[3], m[4]))
    problems: list[str] = []
    store = await SegmentStore.open(root, CHECK_CONFIG, is_snapshot_key=is_snapshot_key)
    try:
        sweep = store.orphan_sweep
        assert sweep is not None
        if sweep.unreadable:
            problems.append(f"unreadable cursor files {sweep.unreadable}")
        removed = len(sweep.removed)
        referenced = sweep.referenced  # by either generation of some cursor file
        if TOPIC not in store.ledger_names():
            return ([*problems, f"{TOPIC}: topic lost"] if flushed else problems), removed
        ml = await store.open_ledger(TOPIC)
        named: set[int] = set()
        for key, by_version in sorted(versions.items()):
            cursor = ml.cursors.get(key[1])
            floor = flushed.get(key, -1)
            if cursor is None:
                if floor >= 0:
                    problems.append(f"cursor {key[1]} lost")
                continue
            props = cursor.properties
            named |= snapshot_ids(props)
            allowed = [v for v, p in by_version.items() if v >= floor and p == props]
            if not allowed:
                problems.append(f"cursor {key[1]}: properties {props} are none of its versions "
                                f">= {floor} (the last returned flush)")
        stored = set(store.snapshots.ids())
        for sid in sorted(named - stored):
            problems.append(f"snapshot {sid} named by a cursor is missing")
        for sid in sorted(named & stored):
            problems += await _check_content(store, sid, created.get(sid))
        for sid in sorted(stored - referenced):
            problems.append(f"snapshot {sid} no cursor names was not collected")
        for sid in sorted(deleted & stored):
            problems.append(f"deleted snapshot {sid} is back")
        if "sub" in ml.cursors:
            problems += await _check_cancels(ml.cursors["sub"], store.snapshots, cancels)
    finally:
        await store.close()
    return problems, removed


async def _check_content(store: SegmentStore, sid: int, want: tuple[int, str] | None
                         ) -> list[str]:
    if want is None:
        return []  # created before recording began
    segments, expected = want
    try:
        parts = [await store.snapshots.load_metadata(sid)]
        for i in range(1, segments + 1):
            parts.append(await store.snapshots.load_segment(sid, i))
    except Exception as exc:  # any failure to load it is the finding
        return [f"snapshot {sid}: unreadable ({exc!r})"]
    return [] if digest(parts) == expected else [f"snapshot {sid}: other bytes"]


async def _check_cancels(cursor: ManagedCursor, snapshots: SnapshotStore,
                         cancels: list[tuple[int, int, int]]) -> list[str]:
    tracker_cursor = _ReadOnlyCursor(cursor)
    tracker = _tracker(tracker_cursor, snapshots)
    try:
        await tracker.recover()
        await tracker.wait_idle()
    except Exception as exc:  # a tracker that cannot recover is the finding
        return [f"tracker recovery failed: {exc!r}"]
    problems = []
    for ledger_id, entry_id, _at in cancels:
        target = Position(ledger_id, entry_id)
        # acknowledged: never handed out (a sealed bucket may still count it until its time)
        if not tracker_cursor.is_deleted(target):
            problems.append(f"cancel of {ledger_id}:{entry_id} lost: not acknowledged")
    await tracker.close()
    return problems


class _ReadOnlyCursor:
    """The recovered cursor for the checking tracker: property changes stay in memory."""

    def __init__(self, cursor: ManagedCursor) -> None:
        self.cursor = cursor
        self._props: dict[str, str] = dict(cursor.properties)
        self._acked: set[Position] = set()      # a leftover journal's, applied in memory

    @property
    def mark_delete_position(self) -> Position:
        return self.cursor.mark_delete_position

    @property
    def read_position(self) -> Position:
        return self.cursor.read_position

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._props)

    def set_property(self, key: str, value: str) -> None:
        self._props[key] = value

    def remove_property(self, key: str) -> None:
        self._props.pop(key, None)

    def is_deleted(self, pos: Position) -> bool:
        return self.cursor.is_deleted(pos) or pos in self._acked

    def delete_entry_ids(self, ledger_id: int, entry_ids: Any) -> None:
        self._acked.update(Position(ledger_id, e) for e in entry_ids)

    async def flush(self) -> None:
        return None
