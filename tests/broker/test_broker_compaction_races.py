"""A compaction cancelled by its topic's close (a slowed metadata store gated by an event; no
sleeps): once its record of the kept positions is written, the ``__compaction`` cursor holds
them, or a trim may delete the latest values the record says a compacted reader gets."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from broker.topics.compaction import COMPACTION_CURSOR, KIND, TopicCompaction
from protocol import pulsar_pb as pb
from protocol.metadata import encode_entry
from storage import SegmentStore, StorageConfig
from storage.ledger import ManagedLedger
from storage.metadata import MetadataStore

TOPIC = "persistent://public/default/compacted"
WAIT = 10.0


class GatedMetadata(MetadataStore):
    """Metadata work blocks in the metadata thread while `gate` is clear; `entered` is set
    when one is blocked."""

    gate = threading.Event()
    entered = threading.Event()

    async def _run(self, fn: Any, *args: Any) -> Any:
        def gated(*a: Any) -> Any:
            if not self.gate.is_set():
                self.entered.set()
                assert self.gate.wait(WAIT), "test gate never opened"
            return fn(*a)

        return await super()._run(gated, *args)


class FakeTopic:
    def __init__(self, ledger: ManagedLedger) -> None:
        self.full = TOPIC
        self.serving = True
        self.ledger = ledger
        self.loop = asyncio.get_running_loop()


def keyed(key: str, value: bytes) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    md.partition_key = key
    return encode_entry(md, value)


async def test_a_cancelled_compaction_still_holds_what_its_record_keeps(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path / "store",
                                    StorageConfig(mark_delete_rate_limit_per_sec=0))
    md = await GatedMetadata.open(tmp_path / "metadata.db")
    try:
        ml = await store.open_ledger(TOPIC)
        await ml.append(keyed("a", b"old"))
        latest = await ml.append(keyed("b", b"kept"))
        compaction = TopicCompaction(FakeTopic(ml), md)
        GatedMetadata.gate.clear()
        assert compaction.trigger()
        entered = await asyncio.get_running_loop().run_in_executor(
            None, GatedMetadata.entered.wait, WAIT)
        assert entered   # the record's put is in the metadata thread
        closing = asyncio.create_task(compaction.close())   # the topic's close cancels it
        await asyncio.sleep(0)
        GatedMetadata.gate.set()
        await closing
        assert await md.get(KIND, TOPIC) is not None      # the record was written ...
        cursor = ml.cursors.get(COMPACTION_CURSOR)
        assert cursor is not None                         # ... so the kept entry is held
        assert cursor.mark_delete_position < latest
    finally:
        GatedMetadata.gate.set()
        await store.close()
        await md.close()


@pytest.fixture(autouse=True)
def _gate_open() -> None:
    GatedMetadata.gate.set()
    GatedMetadata.entered.clear()
