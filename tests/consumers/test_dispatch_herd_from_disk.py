"""A herd of due messages whose entries left the entry cache while they waited is read back
from disk and goes out once each, in position order per consumer, every message to exactly one
consumer."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from protocol import pulsar_pb as pb
from protocol.metadata import encode_entry
from storage.config import StorageConfig
from storage.store import SegmentStore
from tests.consumers.herd_testlib import held_by_two_consumers

HERD = 3000
WAIT_S = 60.0   # bounds for a hung dispatcher, never reached when it works


async def test_a_herd_read_back_from_disk_is_delivered_once_in_order(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, StorageConfig(fsync=False))
    try:
        ledger = await store.open_ledger("persistent://public/default/herd")
        # due far enough ahead that every entry is read and held before it falls due
        due_at = int(time.time() * 1000) + 3000
        for start in range(0, HERD, 500):
            await asyncio.gather(*(ledger.append(encode_entry(pb.MessageMetadata(
                producer_name="p", sequence_id=i, publish_time=int(time.time() * 1000),
                deliver_at_time=due_at), f"m{i}".encode())) for i in range(start, start + 500)))
        sub, conns = await held_by_two_consumers(ledger, HERD, WAIT_S)
        loop = asyncio.get_running_loop()
        assert not any(conn.message_ids() for conn in conns)
        store.cache.evict_oldest(store.cache.size_bytes + 1)   # aged out while waiting
        hits = store.cache.hits
        deadline = loop.time() + WAIT_S
        while sum(len(conn.message_ids()) for conn in conns) < HERD and loop.time() < deadline:
            await asyncio.sleep(0.01)
        got = [conn.message_ids() for conn in conns]
        assert int(time.time() * 1000) >= due_at
        for ids in got:
            assert ids == sorted(ids)                 # in position order per consumer
        every = [i for ids in got for i in ids]
        assert len(every) == HERD == len(set(every))  # each once, to one consumer
        assert store.cache.hits == hits               # every one read back from disk
        await sub.close()
    finally:
        await store.close()
