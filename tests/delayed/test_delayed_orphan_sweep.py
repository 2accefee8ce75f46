"""The broker's start-up sweep of orphan bucket snapshots: snapshots of a
deleted topic or subscription and snapshots a crash left between their creation and the cursor
update are deleted before any topic loads; snapshots a cursor names (either generation) stay;
nothing goes while a cursor file is unreadable."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from broker.delayed.cancel_journal import CANCELS_KEY
from storage import SegmentStore, StorageConfig
from storage.names import encode_name

TOPIC = "persistent://public/default/sweep"
DOOMED = "persistent://public/default/sweep-deleted"
BUCKET = "#pulsar.internal.delayed.bucket_3_4"
CFG = StorageConfig(mark_delete_rate_limit_per_sec=0)


async def _prepare(root: pathlib.Path) -> dict[str, int]:
    """Snapshots in every situation the sweep must tell apart; returns their ids by role."""
    store = await SegmentStore.open(root, CFG)
    ids: dict[str, int] = {}
    for role in ("live", "cancels", "previous", "crash", "unsubscribed", "topic_deleted"):
        ids[role] = await store.snapshots.create(role.encode(), [b"segment"])
    ml = await store.open_ledger(TOPIC)
    sub = await ml.open_cursor("sub")
    sub.set_property(BUCKET, str(ids["previous"]))
    await sub.flush()
    sub.set_property(BUCKET, str(ids["live"]))  # .cur.prev still names "previous"
    sub.set_property(CANCELS_KEY, str(ids["cancels"]))
    await sub.flush()
    # The dedup cursor's values are sequence ids, not snapshot ids: they keep nothing.
    dedup = await ml.open_cursor("pulsar.dedup")
    dedup.set_property("producer-0", str(ids["crash"]))
    await dedup.flush()
    gone = await ml.open_cursor("unsubscribed")
    gone.set_property(BUCKET, str(ids["unsubscribed"]))
    await gone.flush()
    await ml.delete_cursor("unsubscribed")  # crash before its residual snapshots went
    doomed = await store.open_ledger(DOOMED)
    dsub = await doomed.open_cursor("sub")
    dsub.set_property(BUCKET, str(ids["topic_deleted"]))
    await dsub.flush()
    await store.delete_ledger(DOOMED)
    await store.close()
    return ids


def _stored_ids(broker: Any) -> list[int]:
    return list(broker.call(lambda: broker.server.store.snapshots.ids()))


def test_start_up_removes_snapshots_no_subscription_names(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    ids = asyncio.run(_prepare(data / "store"))
    broker = broker_factory(data_dir=data)
    assert _stored_ids(broker) == sorted([ids["live"], ids["cancels"], ids["previous"]])
    files = sorted(p.name for p in (data / "store" / "snapshots").iterdir())
    assert files == [f"{i:020d}.snap" for i in _stored_ids(broker)]


def test_start_up_keeps_every_snapshot_while_a_cursor_file_is_unreadable(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    ids = asyncio.run(_prepare(data / "store"))
    cursors = data / "store" / "ledgers" / encode_name(TOPIC) / "cursors"
    damaged = cursors / (encode_name("pulsar.dedup") + ".cur")
    raw = bytearray(damaged.read_bytes())
    raw[12] ^= 1
    damaged.write_bytes(bytes(raw))
    broker = broker_factory(data_dir=data)
    assert _stored_ids(broker) == sorted(ids.values())
