"""Idle topics' segment descriptors are closed by an LRU and reopened on the next append
(item 6)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage_testlib import segment_paths

from storage import Position, SegmentStore, StorageConfig
from storage.segments import index_path

TOPICS = [f"persistent://public/default/fd-{i}" for i in range(6)]


async def test_idle_segment_fds_are_closed_and_reopened(tmp_path: Path) -> None:
    config = StorageConfig(max_open_segment_files=2, mark_delete_rate_limit_per_sec=0)
    store = await SegmentStore.open(tmp_path, config)
    ledgers = [await store.open_ledger(t) for t in TOPICS]
    written: dict[str, list[Position]] = {t: [] for t in TOPICS}
    for round_ in range(3):  # round-robin: every topic's segment is evicted in between
        for topic, ml in zip(TOPICS, ledgers, strict=True):
            written[topic] += await asyncio.gather(
                *(ml.append(b"%s/%d/%d" % (topic.encode(), round_, i)) for i in range(4)))
            await store.writer.barrier()  # the eviction runs after the batch was handed back
            assert store.writer.fds.open_count <= 2
    assert store.writer.fds.evictions > 0
    assert store.writer.fds.reopens > 0
    for topic, ml in zip(TOPICS, ledgers, strict=True):
        got = await ml.read_entries(written[topic][0], 100)
        assert [e.data for e in got] == [
            b"%s/%d/%d" % (topic.encode(), r, i) for r in range(3) for i in range(4)]
    await store.close()
    for topic in TOPICS:  # sealed normally: zero tail cut, index written
        (segment,) = segment_paths(tmp_path, topic)
        assert index_path(segment).exists()
        size = segment.stat().st_size
        assert size == 32 + sum(16 + len(b"%s/%d/%d" % (topic.encode(), r, i))
                                for r in range(3) for i in range(4))
    store = await SegmentStore.open(tmp_path, config)
    for topic in TOPICS:
        ml = await store.open_ledger(topic)
        got = await ml.read_entries(written[topic][0], 100)
        assert len(got) == 12
    assert store.recovery_report.events == ()
    await store.close()
