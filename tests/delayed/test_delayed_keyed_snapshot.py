"""The replace-by-key schedule snapshot: a load reads it plus the log after what it covers and
gets what a read of the whole backlog gets, whatever point a kill -9 cut the writing at."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker.delayed.keyed_snapshot import (
    RECORD_KIND,
    KeyedSnapshots,
    SnapshotFormatError,
    capture,
    decode,
    encode,
)
from broker.delayed.replace_by_key import KeyedSchedule, classify
from broker.topics.replace_by_key import TopicReplaceByKey
from protocol import pulsar_pb as pb
from protocol.metadata import encode_entry
from storage import SegmentStore
from storage.config import StorageConfig
from storage.metadata import MetadataStore
from storage.positions import Position

TOPIC = "persistent://public/default/keyed-snapshot"


def entry(payload: bytes = b"job", **fields: object) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1_760_000_000_000)
    for name, value in fields.items():
        setattr(md, name, value)
    return encode_entry(md, payload)


def workload(n: int) -> list[bytes]:
    """Keyed delayed messages over 97 keys, tombstones, and ordinary messages."""
    out = []
    for i in range(n):
        key = f"k{(i * 7919) % 97}"
        if i % 11 == 5:
            out.append(entry(b"", partition_key=key))                  # cancel
        elif i % 5 == 0:
            out.append(entry(b"plain"))                                 # not keyed
        else:
            out.append(entry(partition_key=key, deliver_at_time=10_000 + i))
    return out


class _Cursor:
    def __init__(self, mark_delete: Position) -> None:
        self.mark_delete_position = mark_delete

    def is_deleted(self, pos: Position) -> bool:
        return pos <= self.mark_delete_position

    def delete(self, positions: Any) -> None:
        pass


class _Sub:
    sub_type = None
    durable = False                     # nothing to acknowledge on: the state is compared

    def __init__(self, mark_delete: Position) -> None:
        self.cursor = _Cursor(mark_delete)
        self.delayed = _Delayed()


class _Delayed:
    replacements: KeyedSchedule | None = None


class _FailingRecords:
    """Records whose put fails: a kill between the snapshot and its record."""

    def __init__(self, inner: MetadataStore) -> None:
        self._inner = inner

    async def get(self, kind: str, key: str) -> dict[str, Any] | None:
        return await self._inner.get(kind, key)

    async def put(self, kind: str, key: str, value: Any) -> None:
        raise OSError("killed before the record was written")

    async def delete(self, kind: str, key: str) -> bool:
        return await self._inner.delete(kind, key)


def state(schedule: KeyedSchedule) -> tuple[dict[int, int], dict[int, list[int]]]:
    latest, superseded = schedule.export()
    return latest, {lid: list(bm) for lid, bm in superseded.items() if bm}


async def load(root: Path, config: StorageConfig, records_of: Any = None,
               acked: Position | None = None) -> tuple[KeyedSchedule, int, Any]:
    """A topic load's rebuild (with the snapshot store when ``records_of`` is given)."""
    store = await SegmentStore.open(root, config)
    md = await MetadataStore.open(root / "m.db")
    ledger = await store.open_ledger(TOPIC)
    snapshots = (KeyedSnapshots(store.snapshots, records_of(md), TOPIC,
                                loop=asyncio.get_running_loop())
                 if records_of is not None else None)
    subs = [_Sub(acked if acked is not None else Position(-1, -1))]
    rbk = TopicReplaceByKey(ledger, lambda: True, lambda: subs, snapshots)
    schedule = rbk.sync(subs)
    assert schedule is not None
    read = await rbk.rebuild(subs)
    schedule.prune_fully(subs[0].cursor.mark_delete_position)
    return schedule, read, (store, md, snapshots, ledger)


async def close(handles: Any) -> None:
    store, md, _, _ = handles
    await md.close()
    await store.close()


def test_encode_decode_round_trip_and_garbage_is_refused() -> None:
    schedule = KeyedSchedule()
    for i, data in enumerate(workload(500)):
        keys = classify(data)
        if keys is not None:
            schedule.record(3 + i // 100, i % 100, keys)
    snap = decode(encode(capture(schedule)))
    assert snap.recorded_up_to == schedule.recorded_up_to
    assert (snap.latest, {k: list(v) for k, v in snap.superseded.items()}) == state(schedule)
    with pytest.raises(SnapshotFormatError):
        decode(b"HKS1\x00")
    with pytest.raises(SnapshotFormatError):
        decode(b"nope" + bytes(40))


async def test_snapshot_plus_tail_equals_full_read_at_every_cut(tmp_path: Path) -> None:
    config = StorageConfig(fsync=False, max_entries_per_ledger=50)
    store = await SegmentStore.open(tmp_path, config)
    ledger = await store.open_ledger(TOPIC)
    entries = workload(600)
    for data in entries[:400]:
        await ledger.append(data)
    await store.close()

    # a load with snapshots writes one (housekeeping), then more entries come
    schedule, read_full_first, handles = await load(tmp_path, config, lambda md: md)
    assert read_full_first == 400                      # no snapshot yet: the whole backlog
    _, md, snapshots, ledger = handles
    await snapshots.save(schedule)
    first = await md.get(RECORD_KIND, TOPIC)
    assert first is not None and first["covered"] == schedule.recorded_up_to
    for data in entries[400:]:
        pos = await ledger.append(data)
        keys = classify(data)
        if keys is not None:
            schedule.record(pos.ledger_id, pos.entry_id, keys)
    await close(handles)                               # kill -9 after the first snapshot

    full, read_all, h = await load(tmp_path, config)   # the whole backlog, no snapshot
    await close(h)
    assert read_all == 600
    fast, read_tail, h = await load(tmp_path, config, lambda md: md)
    await close(h)
    assert read_tail == 200, "the load did not read only the tail"
    assert state(fast) == state(full)

    # kill between the two steps: the second snapshot written, its record not
    again, _, h = await load(tmp_path, config, _FailingRecords)
    await h[2].save(again)
    await close(h)
    fast2, read2, h = await load(tmp_path, config, lambda md: md)
    await close(h)
    assert read2 == 200                                # still the first snapshot + tail
    assert state(fast2) == state(full)

    # both steps done: the new snapshot is read, nothing after it
    again, _, h = await load(tmp_path, config, lambda md: md)
    await h[2].save(again)
    await close(h)
    fast3, read3, h = await load(tmp_path, config, lambda md: md)
    await close(h)
    assert read3 == 0
    assert state(fast3) == state(full)

    # acknowledged up to a point: snapshot + tail still equal to the full read
    bound = Position(fast3.recorded_up_to >> 32, 10)
    full_b, _, h = await load(tmp_path, config, acked=bound)
    await close(h)
    fast_b, _, h = await load(tmp_path, config, lambda md: md, acked=bound)
    await close(h)
    assert state(fast_b) == state(full_b)


async def test_unreadable_snapshot_falls_back_to_the_whole_backlog(tmp_path: Path) -> None:
    config = StorageConfig(fsync=False, max_entries_per_ledger=50)
    store = await SegmentStore.open(tmp_path, config)
    ledger = await store.open_ledger(TOPIC)
    for data in workload(120):
        await ledger.append(data)
    bad = await store.snapshots.create(b"garbage", [])
    await store.close()
    md = await MetadataStore.open(tmp_path / "m.db")
    await md.put(RECORD_KIND, TOPIC, {"snapshot_id": bad, "covered": 5})
    await md.close()
    full, _, h = await load(tmp_path, config)
    await close(h)
    fast, read, h = await load(tmp_path, config, lambda md: md)
    await close(h)
    assert read == 120
    assert state(fast) == state(full)
