"""A shadow managed ledger: the source's entries through cursors of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from storage_testlib import open_store

from storage.errors import LedgerClosedError

SOURCE = "persistent://public/default/src"
SHADOW = "persistent://public/default/shadow"


async def test_shadow_reads_the_source_and_keeps_its_own_cursors(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=3)
    source = await store.open_ledger(SOURCE)
    positions = list(await asyncio.gather(*(source.append(b"e%d" % i) for i in range(5))))
    shadow = await store.open_shadow_ledger(SHADOW, source)
    assert store.has_ledger(SHADOW)
    assert shadow.last_confirmed == source.last_confirmed == positions[-1]
    cursor = await shadow.open_cursor("s", initial_position="earliest")
    got = await shadow.read_entries(cursor.read_position, 10)
    assert [e.position for e in got] == positions
    assert [e.data for e in got] == [b"e%d" % i for i in range(5)]
    assert list(source.cursors) == [] and list(shadow.cursors) == ["s"]
    heard: list[object] = []
    shadow.add_listener(heard.append)
    more = await source.append(b"e5")
    assert heard == [more] and shadow.last_confirmed == more
    with pytest.raises(LedgerClosedError):
        shadow.append(b"x")
    assert await shadow.trim() == []
    cursor.mark_delete(positions[2])
    await shadow.close()
    assert not source.closed
    await source.append(b"e6")
    assert heard == [more]   # no longer told once closed
    await store.close()

    store = await open_store(tmp_path, max_entries_per_ledger=3)
    assert store.has_ledger(SHADOW)
    source = await store.open_ledger(SOURCE)
    shadow = await store.open_shadow_ledger(SHADOW, source)
    assert shadow.cursors["s"].mark_delete_position == positions[2]
    got = await shadow.read_entries(shadow.cursors["s"].read_position, 10)
    assert [e.data for e in got] == [b"e3", b"e4", b"e5", b"e6"]
    await store.close()


async def test_a_shadow_cursor_behind_trimmed_source_ledgers_reads_what_is_left(
        tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=2)
    source = await store.open_ledger(SOURCE)
    await asyncio.gather(*(source.append(b"e%d" % i) for i in range(5)))
    shadow = await store.open_shadow_ledger(SHADOW, source)
    cursor = await shadow.open_cursor("s", initial_position="earliest")
    deleted = await source.trim()   # no source cursor: every sealed ledger goes
    assert deleted
    got = await shadow.read_entries(cursor.read_position, 10)
    assert [e.data for e in got] == [b"e4"]
    await store.close()
