"""A herd falls due with some of its messages already acknowledged (an admin skip, a cancel's
acknowledgement, a cumulative ack over the first ones): those never go out, every other one
goes out once. The dispatcher asks the cursor once whether a run of due entries holds any
acknowledged one, and entry by entry only when it does."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from protocol import pulsar_pb as pb
from protocol.metadata import encode_entry
from storage.config import StorageConfig
from storage.positions import Position
from storage.store import SegmentStore
from tests.consumers.herd_testlib import held_by_two_consumers

HERD = 600
WAIT_S = 60.0   # bounds for a hung dispatcher, never reached when it works


@pytest.mark.parametrize("acked", ["none", "scattered", "cumulative", "last"])
async def test_a_due_herd_skips_exactly_what_was_acknowledged_while_it_waited(
        tmp_path: Path, acked: str) -> None:
    store = await SegmentStore.open(tmp_path, StorageConfig(fsync=False))
    try:
        ledger = await store.open_ledger("persistent://public/default/herd-acked")
        due_at = int(time.time() * 1000) + 2000
        positions = []
        for start in range(0, HERD, 200):
            positions += await asyncio.gather(*(ledger.append(encode_entry(pb.MessageMetadata(
                producer_name="p", sequence_id=i, publish_time=int(time.time() * 1000),
                deliver_at_time=due_at), f"m{i}".encode())) for i in range(start, start + 200)))
        positions = sorted(Position(*p) for p in positions)
        sub, conns = await held_by_two_consumers(ledger, HERD, WAIT_S)
        dispatcher = sub.dispatcher
        loop = asyncio.get_running_loop()
        assert int(time.time() * 1000) < due_at, "held too late to test: the machine is slow"
        # acknowledged while held, before they fall due
        gone: set[Position] = set()
        if acked == "scattered":
            gone = set(positions[7:HERD:13]) | {positions[300], positions[301]}
            sub.cursor.delete(sorted(gone))
        elif acked == "cumulative":
            gone = set(positions[:50])
            sub.cursor.mark_delete(positions[49])
        elif acked == "last":
            gone = {positions[-1]}
            sub.cursor.delete([positions[-1]])
        assert all(sub.cursor.is_deleted(p) for p in gone)
        expected = HERD - len(gone)
        deadline = loop.time() + WAIT_S
        while sum(len(conn.message_ids()) for conn in conns) < expected \
                and loop.time() < deadline:
            await asyncio.sleep(0.01)
        # the dispatcher has nothing left: no straggler may still come
        while (dispatcher._task is not None or len(dispatcher.delayed)) \
                and loop.time() < deadline:
            await asyncio.sleep(0.01)
        every = [Position(*i) for conn in conns for i in conn.message_ids()]
        assert len(every) == expected == len(set(every))     # each once
        assert not set(every) & gone                          # none acknowledged
        assert set(every) | gone == set(positions)            # every other one
        await sub.close()
    finally:
        await store.close()
