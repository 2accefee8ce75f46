"""Bucket tracker recovery by snapshot format: a store whose snapshots carry no CANCEL indexes
(the format property) serves once every metadata is read, the bucket due soonest first, with
cancelled and acknowledged messages held back; a store of an older version (CANCELs in segment
1, no property) has them applied before anything is handed out."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from delayed_testlib import T0, DueCounter, ManualClock, parts_one_by_one
from waiting import wait_until_async

from broker.delayed.bucket import BucketDelayedDeliveryTracker, parse_bucket_key
from broker.delayed.packed import POSITION_BITS
from broker.delayed.snapshot_format import (
    FORMAT_KEY,
    FORMAT_NO_SEGMENT_CANCELS,
    decode_metadata,
    decode_segment,
    encode_snapshot,
)
from storage import SegmentStore
from storage.config import StorageConfig
from storage.positions import Position

TOPIC = "persistent://public/default/delayed-restart-format"
PER_BUCKET = 20
N = 400                     # 20 buckets (the last ledger stays in the mutable bucket)
GAP_MS = 10_000             # buckets' due times 10 s apart, later positions due earlier


class GatedSegments:
    """The real snapshot store; segment reads of every snapshot but ``open_ids`` wait until
    ``release`` is set."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.open_ids: set[int] = set()
        self.release = asyncio.Event()
        self.segment_reads: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def load_segment(self, snapshot_id: int, index: int) -> bytes:
        self.segment_reads.append(snapshot_id)
        if snapshot_id not in self.open_ids:
            await self.release.wait()
        data: bytes = await self._inner.load_segment(snapshot_id, index)
        return data

    async def load_parts(self, parts: list[tuple[int, int]]) -> list[bytes | Exception]:
        return await parts_one_by_one(self, parts)     # a held segment holds its whole job


def make(cursor: Any, snapshots: Any, clock: ManualClock) -> BucketDelayedDeliveryTracker:
    return BucketDelayedDeliveryTracker(
        cursor=cursor, snapshots=snapshots, tick_time_ms=1, strict=True, on_due=DueCounter(),
        loop=asyncio.get_running_loop(), clock_ms=clock, min_index_count_per_bucket=PER_BUCKET,
        time_step_per_segment_ms=1000, max_indexes_per_segment=100, max_num_buckets=-1)


async def build(tmp_path: Path, config: StorageConfig, clock: ManualClock, *,
                recover_first: bool) -> tuple[dict[Position, int], list[Position]]:
    """A store of N delayed positions in sealed buckets, closed as a kill -9 leaves it."""
    store = await SegmentStore.open(tmp_path, config)
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub", initial_position="earliest")
    positions = [await ledger.append(b"m%d" % i) for i in range(N)]
    deliver_at = {pos: T0 + 300_000 - (i // PER_BUCKET) * GAP_MS + i % PER_BUCKET
                  for i, pos in enumerate(positions)}
    t1 = make(cursor, store.snapshots, clock)
    if recover_first:
        await t1.recover()                      # what a broker does on every subscription
    for pos in positions:
        assert t1.add(pos, deliver_at[pos]) is True
    cursor.read_position = ledger.next_position(positions[-1])
    await t1.wait_idle()
    assert len(t1.sealed.ranges) >= 10
    await t1.close()
    await store.close()
    return deliver_at, positions


async def reopen(tmp_path: Path, config: StorageConfig) -> tuple[Any, Any]:
    store = await SegmentStore.open(tmp_path, config)
    ledger = await store.open_ledger(TOPIC)
    cursor = await ledger.open_cursor("sub")
    cursor.read_position = ledger.next_position(cursor.mark_delete_position)
    return store, cursor


def sealed(positions: list[Position], cursor: Any) -> list[Position]:
    """The positions in a bucket named by the cursor properties (persisted snapshots)."""
    ranges = [r for k in cursor.properties if (r := parse_bucket_key(k)) is not None]
    return [p for p in positions if any(a <= p.ledger_id <= b for a, b in ranges)]


async def drain(t: BucketDelayedDeliveryTracker, clock: ManualClock, cursor: Any,
                deliver_at: dict[Position, int], until_ms: int) -> list[Position]:
    """Hand out everything due by ``until_ms`` (each exactly once, none early), acking it."""
    out: list[Position] = []
    clock.now_ms = until_ms
    for _ in range(2_000):
        await t.wait_idle()
        batch = t.get_scheduled(100)
        for ledger_id, entry_id in batch:
            pos = Position(ledger_id, entry_id)
            assert deliver_at[pos] <= clock.now_ms, "handed out early"
            assert pos not in out, "handed out twice"
            out.append(pos)
            cursor.delete([pos])
        if not batch and not t.has_message_available() and not t.sealed.loading:
            break
    return out


async def test_new_format_serves_after_metadata_earliest_bucket_first(tmp_path: Path) -> None:
    config = StorageConfig(fsync=False, max_entries_per_ledger=PER_BUCKET)
    clock = ManualClock(T0)
    deliver_at, positions = await build(tmp_path, config, clock, recover_first=True)
    # before the kill: one message of the earliest-due bucket cancelled, one acknowledged
    store, cursor = await reopen(tmp_path, config)
    assert cursor.properties.get(FORMAT_KEY) == FORMAT_NO_SEGMENT_CANCELS
    t1 = make(cursor, store.snapshots, clock)
    await t1.recover()
    await t1.wait_idle()                        # every membership read
    earliest = min((p for p in positions if t1.contains(p)), key=deliver_at.__getitem__)
    same_bucket = sorted((p for p in positions if p.ledger_id == earliest.ledger_id
                          and t1.contains(p)), key=deliver_at.__getitem__)
    cancelled, acked = same_bucket[0], same_bucket[1]
    assert t1.cancel_delayed(cancelled, deliver_at[cancelled]).name in ("APPLIED", "PENDING")
    cursor.delete([cancelled, acked])           # a cancel's durable record: its ack
    t1.cancel_settled(cancelled)
    await cursor.flush()
    await t1.wait_idle()
    await store.close()                         # kill -9: t1 is never closed

    store, cursor = await reopen(tmp_path, config)
    sealed_positions = sealed(positions, cursor)
    gated = GatedSegments(store.snapshots)
    earliest_bucket_key = next(k for k in cursor.properties
                               if (r := parse_bucket_key(k)) and r[0] <= earliest.ledger_id <= r[1])
    gated.open_ids = {int(cursor.properties[earliest_bucket_key])}
    t2 = make(cursor, gated, clock)
    # recovery returns while every other bucket's first segment read is held
    await asyncio.wait_for(t2.recover(), 60)
    assert not gated.release.is_set()
    assert t2.sealed.loading or t2.sealed.barrier() is not None
    first_bucket_due = [p for p in same_bucket if p not in (cancelled, acked)]
    clock.now_ms = deliver_at[same_bucket[-1]]
    got: list[Position] = []

    def take() -> bool:                         # the one open read lands
        got.extend(Position(*p) for p in t2.get_scheduled(100))
        return len(got) >= len(first_bucket_due)

    await wait_until_async(take, timeout_s=60)
    assert sorted(got) == sorted(first_bucket_due), "earliest bucket not served early"
    assert cancelled not in got and acked not in got
    assert gated.segment_reads[0] in gated.open_ids, "earliest-due bucket not read first"
    for pos in got:
        cursor.delete([pos])

    gated.release.set()
    rest = await drain(t2, clock, cursor, deliver_at, T0 + 400_000)
    handed = set(got) | set(rest)
    assert len(handed) == len(got) + len(rest)
    assert cancelled not in handed and acked not in handed
    assert sorted(handed) == sorted(p for p in sealed_positions if p not in (cancelled, acked))
    assert not t2.has_message_available()
    await t2.close()
    await store.close()


async def test_old_format_store_applies_segment_cancels_before_serving(tmp_path: Path) -> None:
    config = StorageConfig(fsync=False, max_entries_per_ledger=PER_BUCKET)
    clock = ManualClock(T0)
    deliver_at, positions = await build(tmp_path, config, clock, recover_first=False)
    store, cursor = await reopen(tmp_path, config)
    assert FORMAT_KEY not in cursor.properties      # as an older version leaves a store
    # an older version's cancel: a CANCEL index leading segment 1 of the newest bucket's
    # snapshot, targeting the first message due in the earliest-due bucket
    keys = sorted((parse_bucket_key(k), k) for k in cursor.properties if parse_bucket_key(k))
    newest_key = keys[-1][1]
    old_id = int(cursor.properties[newest_key])
    segments = []
    infos = decode_metadata(await store.snapshots.load_metadata(old_id))
    for number in range(1, len(infos) + 1):
        seg = decode_segment(await store.snapshots.load_segment(old_id, number))
        segments.append((seg.ts, seg.pos))
    sealed_positions = sealed(positions, cursor)
    target = min(sealed_positions, key=deliver_at.__getitem__)
    metadata, parts = encode_snapshot(
        segments, [(target.ledger_id << POSITION_BITS) | target.entry_id], packed=False)
    new_id = await store.snapshots.create(metadata, parts)
    cursor.set_property(newest_key, str(new_id))
    await cursor.flush()
    await store.snapshots.delete(old_id)
    await store.close()

    store, cursor = await reopen(tmp_path, config)
    gated = GatedSegments(store.snapshots)
    gated.release.set()
    t2 = make(cursor, gated, clock)
    await t2.recover()
    # the safe path: every first segment was read before recovery returned
    assert len(set(gated.segment_reads)) == len(t2.sealed.ranges)
    assert FORMAT_KEY not in cursor.properties      # a CANCEL is still live in a snapshot
    assert not t2.contains(target)
    handed = await drain(t2, clock, cursor, deliver_at, T0 + 400_000)
    assert target not in handed
    assert sorted(handed) == sorted(p for p in sealed_positions if p != target)
    await t2.close()
    await store.close()


async def test_old_format_store_without_cancels_gets_the_format_property(
        tmp_path: Path) -> None:
    config = StorageConfig(fsync=False, max_entries_per_ledger=PER_BUCKET)
    clock = ManualClock(T0)
    _deliver_at, _positions = await build(tmp_path, config, clock, recover_first=False)
    store, cursor = await reopen(tmp_path, config)
    assert FORMAT_KEY not in cursor.properties
    gated = GatedSegments(store.snapshots)
    gated.release.set()
    t2 = make(cursor, gated, clock)
    await t2.recover()
    assert len(set(gated.segment_reads)) == len(t2.sealed.ranges)   # the safe path
    assert cursor.properties.get(FORMAT_KEY) == FORMAT_NO_SEGMENT_CANCELS
    await t2.close()
    await store.close()
    store, cursor = await reopen(tmp_path, config)
    assert cursor.properties.get(FORMAT_KEY) == FORMAT_NO_SEGMENT_CANCELS   # durable
    await store.close()
