"""MetadataStore: SQLite in WAL mode, synchronous=FULL, generic kind/key/json API."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from storage import SegmentStore
from storage.metadata import MetadataStore


async def test_put_get_delete_list(tmp_path: Path) -> None:
    md = await MetadataStore.open(tmp_path / "m.db")
    assert await md.get("tenant", "public") is None
    await md.put("tenant", "public", {"allowedClusters": ["standalone"]})
    await md.put("namespace", "public/default", {"policies": {}})
    await md.put("namespace", "public/other", {"n": 1})
    await md.put("namespace", "publicx/a", {"n": 2})
    await md.put("topic", "persistent://public/default/t", {"partitions": 4})
    assert await md.get("tenant", "public") == {"allowedClusters": ["standalone"]}
    assert [k for k, _ in await md.list("namespace", "public/")] == ["public/default", "public/other"]
    assert len(await md.list("namespace")) == 3
    await md.put("namespace", "public/other", {"n": 3})
    assert await md.get("namespace", "public/other") == {"n": 3}
    assert await md.delete("namespace", "public/other") is True
    assert await md.delete("namespace", "public/other") is False
    await md.close()
    md = await MetadataStore.open(tmp_path / "m.db")
    assert await md.get("topic", "persistent://public/default/t") == {"partitions": 4}
    await md.close()


async def test_uses_wal_and_full_sync_and_never_blocks_the_loop(tmp_path: Path) -> None:
    md = await MetadataStore.open(tmp_path / "m.db")
    threads: set[int] = set()

    def probe() -> tuple[str, int]:
        threads.add(threading.get_ident())
        conn = md._c()
        return conn.execute("PRAGMA journal_mode").fetchone()[0], conn.execute(
            "PRAGMA synchronous").fetchone()[0]

    mode, sync = await md._run(probe)
    assert mode == "wal"
    assert sync == 2  # FULL
    await asyncio.gather(*(md.put("k", str(i), {"i": i}) for i in range(50)))
    await md._run(probe)
    assert threading.get_ident() not in threads
    assert len(threads) == 1  # one worker thread owns the connection
    await md.close()
    with sqlite3.connect(tmp_path / "m.db") as conn:
        assert conn.execute("SELECT count(*) FROM kv WHERE kind = 'k'").fetchone()[0] == 50


async def test_segment_store_exposes_metadata(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path)
    await store.metadata.put("subscription", "t/s", {"type": "Shared"})
    await store.close()
    store = await SegmentStore.open(tmp_path)
    assert await store.metadata.get("subscription", "t/s") == {"type": "Shared"}
    await store.close()
