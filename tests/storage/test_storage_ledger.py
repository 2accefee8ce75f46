"""ManagedLedger: appends, group commit, rollover, reads, listeners, trimming, reopen."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from storage_testlib import open_store, segment_paths

from storage import Position
from storage.errors import StorageError

TOPIC = "persistent://public/default/t"


async def test_append_resolves_on_loop_in_order_after_fsync(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    loop_thread = threading.get_ident()
    resolved_on: list[int] = []
    order: list[Position] = []
    futs = [ml.append(b"m%d" % i) for i in range(200)]
    for f in futs:
        f.add_done_callback(lambda f: (resolved_on.append(threading.get_ident()),
                                       order.append(f.result())))
    positions = await asyncio.gather(*futs)
    assert positions == sorted(positions)
    assert len(set(positions)) == 200
    assert all(p.ledger_id == positions[0].ledger_id for p in positions)
    assert [p.entry_id for p in positions] == list(range(200))
    assert order == positions
    assert set(resolved_on) == {loop_thread}
    assert ml.last_confirmed == positions[-1]
    stats = store.stats()
    assert stats.group_commits < 200  # many appends share a group commit
    assert stats.fsyncs == stats.group_commits
    await store.close()


async def test_group_commit_completes_with_one_loop_callback_per_batch(tmp_path: Path) -> None:
    store = await open_store(tmp_path, group_commit_max_delay_ms=20)
    ml_a = await store.open_ledger("a")
    ml_b = await store.open_ledger("b")
    calls = 0
    loop = asyncio.get_running_loop()
    original = loop.call_soon_threadsafe

    def counting(*args, **kw):  # type: ignore[no-untyped-def]
        nonlocal calls
        if getattr(args[0], "__name__", "") == "_hand_back":  # the sync stage's hand-back
            calls += 1
        return original(*args, **kw)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        futs = [ml.append(b"x") for _ in range(100) for ml in (ml_a, ml_b)]
        await asyncio.gather(*futs)
    finally:
        del loop.call_soon_threadsafe
    assert calls == store.stats().group_commits  # one loop wakeup per group commit
    assert calls < 20  # 200 appends over two ledgers shared a few fsync batches
    await store.close()


async def test_each_open_starts_a_new_ledger_with_increasing_ids(tmp_path: Path) -> None:
    seen: list[int] = []
    for _ in range(3):
        store = await open_store(tmp_path)
        ml = await store.open_ledger(TOPIC)
        assert await store.open_ledger(TOPIC) is ml  # idempotent while open
        pos = await ml.append(b"x")
        seen.append(pos.ledger_id)
        other = await store.open_ledger("other")
        seen.append((await other.append(b"y")).ledger_id)
        await store.close()
    assert seen == sorted(seen)
    assert len(set(seen)) == len(seen)
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    assert [info.sealed for info in ml.ledgers] == [True, True, True, False]
    assert store.ledger_names() == ["other", TOPIC]
    assert store.has_ledger("other") and store.has_ledger(TOPIC)   # recovered from disk
    assert not store.has_ledger("never-opened")
    await store.close()


async def test_rollover_by_entry_count(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=10)
    ml = await store.open_ledger(TOPIC)
    positions = await asyncio.gather(*(ml.append(b"e%d" % i) for i in range(35)))
    assert [len([p for p in positions if p.ledger_id == lid])
            for lid in sorted({p.ledger_id for p in positions})] == [10, 10, 10, 5]
    infos = ml.ledgers
    assert [i.entries for i in infos] == [10, 10, 10, 5]
    assert [i.sealed for i in infos] == [True, True, True, False]
    assert ml.number_of_entries == 35
    assert ml.total_size_bytes == sum(len(b"e%d" % i) for i in range(35))
    await store.close()


async def test_rollover_by_size_and_age(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_size_per_ledger_bytes=1000)
    ml = await store.open_ledger(TOPIC)
    positions = [await ml.append(b"x" * 400) for _ in range(6)]
    assert [p.entry_id for p in positions] == [0, 1, 2, 0, 1, 2]
    await store.close()
    store = await open_store(tmp_path, max_ledger_rollover_minutes=0.0)
    ml = await store.open_ledger(TOPIC)
    a = await ml.append(b"a")
    b = await ml.append(b"b")
    assert b.ledger_id > a.ledger_id  # every append finds the ledger "too old"
    await store.close()


async def test_read_entries_crosses_ledgers_and_respects_limits(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=7)
    ml = await store.open_ledger(TOPIC)
    payloads = [b"p%03d" % i for i in range(30)]
    positions = await asyncio.gather(*(ml.append(p) for p in payloads))
    got = await ml.read_entries(positions[0], 100)
    assert [e.data for e in got] == payloads
    assert [e.position for e in got] == positions
    got = await ml.read_entries(positions[5], 10)
    assert [e.position for e in got] == positions[5:15]
    got = await ml.read_entries(positions[0], 100, max_bytes=9)
    assert len(got) == 3  # stops once max_bytes is reached
    got = await ml.read_entries(positions[0], 100, max_bytes=1)
    assert len(got) == 1  # never zero when an entry exists
    assert await ml.read_entries(ml.next_position(positions[-1]), 10) == []
    entry = await ml.read_entry(positions[9])
    assert entry is not None
    assert entry.data == payloads[9]
    assert await ml.read_entry(Position(positions[-1].ledger_id, 99)) is None
    await store.close()


async def test_reads_come_from_cache_when_tailing_and_from_disk_otherwise(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    positions = await asyncio.gather(*(ml.append(b"c%d" % i) for i in range(50)))
    misses = store.cache.misses
    got = await ml.read_entries(positions[0], 50)
    assert len(got) == 50
    assert store.cache.misses == misses
    await store.close()
    store = await open_store(tmp_path, entry_cache_bytes=0)
    ml = await store.open_ledger(TOPIC)
    got = await ml.read_entries(positions[0], 50)
    assert [e.data for e in got] == [b"c%d" % i for i in range(50)]
    assert store.cache.hits == 0
    await store.close()


async def test_cache_is_bounded_in_bytes(tmp_path: Path) -> None:
    store = await open_store(tmp_path, entry_cache_bytes=10_000)
    ml = await store.open_ledger(TOPIC)
    await asyncio.gather(*(ml.append(b"z" * 1000) for _ in range(50)))
    assert store.cache.size_bytes <= 10_000
    assert len(store.cache) == 10
    await store.close()


async def test_next_position_and_entries_between_are_ledger_aware(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=3)
    ml = await store.open_ledger(TOPIC)
    ps = await asyncio.gather(*(ml.append(b"n") for _ in range(7)))
    assert ml.next_position(ps[0]) == ps[1]
    assert ml.next_position(ps[2]) == ps[3]  # end of a sealed ledger -> next ledger
    assert ml.next_position(ps[6]) == Position(ps[6].ledger_id, ps[6].entry_id + 1)
    assert ml.next_position(Position(ps[0].ledger_id, -1)) == ps[0]
    assert ml.entries_between(ps[0], ps[6]) == 6
    assert ml.entries_between(Position(ps[0].ledger_id, -1), ps[6]) == 7
    assert ml.entries_between(ps[4], ps[2]) == 0
    assert ml.first_position == ps[0]
    await store.close()


async def test_listener_runs_on_loop_after_durable_append(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    seen: list[Position] = []
    ml.add_listener(seen.append)
    last = None
    for i in range(5):
        last = await ml.append(b"l%d" % i)
        assert seen[-1] == last
        assert ml.last_confirmed == last
    await store.close()


async def test_trim_deletes_ledgers_every_cursor_passed_but_never_current(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=5)
    ml = await store.open_ledger(TOPIC)
    slow = await ml.open_cursor("slow", initial_position="earliest")
    fast = await ml.open_cursor("fast", initial_position="earliest")
    ps = await asyncio.gather(*(ml.append(b"t") for _ in range(23)))
    fast.mark_delete(ps[-1])
    slow.mark_delete(ps[11])  # inside the third ledger
    assert await ml.trim() == [ps[0].ledger_id, ps[5].ledger_id]
    assert len(segment_paths(tmp_path, TOPIC)) == 3
    assert ml.first_position == ps[10]
    slow.mark_delete(ps[-1])
    await ml.trim()
    assert [i.ledger_id for i in ml.ledgers] == [ps[-1].ledger_id]  # the open ledger stays
    got = await ml.read_entries(ps[0], 100)
    assert [e.position for e in got] == ps[20:]
    await store.close()
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    assert ml.first_position == ps[20]
    await store.close()


async def test_delete_ledger_removes_everything(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    await ml.open_cursor("s")
    await ml.append(b"x")
    await store.delete_ledger(TOPIC)
    assert store.ledger_names() == []
    assert not store.has_ledger(TOPIC)
    assert ml.closed
    ml2 = await store.open_ledger(TOPIC)
    assert ml2.last_confirmed is None
    assert dict(ml2.cursors) == {}
    await store.close()


async def test_append_after_close_fails_and_open_after_store_close_raises(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    await ml.close()
    fut = ml.append(b"late")
    with pytest.raises(StorageError):
        await fut
    await store.close()
    with pytest.raises(StorageError):
        await store.open_ledger(TOPIC)


async def test_concurrent_appenders_on_many_ledgers_keep_per_ledger_order(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=50)
    ledgers = [await store.open_ledger(f"t{i}") for i in range(4)]
    results: dict[str, list[Position]] = {ml.name: [] for ml in ledgers}

    async def producer(ml_index: int) -> None:
        ml = ledgers[ml_index]
        for i in range(100):
            results[ml.name].append(await ml.append(b"%d-%d" % (ml_index, i)))

    await asyncio.gather(*(producer(i % 4) for i in range(8)))
    for ml in ledgers:
        assert results[ml.name] == sorted(results[ml.name])
        got = await ml.read_entries(results[ml.name][0], 1000)
        assert len(got) == 200
    await store.close()


async def test_second_open_of_a_store_in_use_is_refused(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    with pytest.raises(StorageError):
        await open_store(tmp_path)
    await store.close()
    again = await open_store(tmp_path)
    await again.close()


async def test_oversized_entry_is_rejected_without_fencing(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    fut = ml.append(b"x" * (64 * 1024 * 1024 + 1))
    with pytest.raises(StorageError):
        await fut
    assert not ml.fenced
    assert (await ml.append(b"ok")).entry_id == 0
    await store.close()


async def test_ledger_ids_are_not_reused_after_everything_was_deleted(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    first = await ml.append(b"x")
    await store.delete_ledger(TOPIC)
    await store.close()
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    assert (await ml.append(b"y")).ledger_id > first.ledger_id
    await store.close()


async def test_damaged_id_counter_still_never_reuses_ids_on_disk(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    first = await ml.append(b"x")
    await store.close()
    (tmp_path / "LEDGER_ID").write_bytes(b"\x00garbage")
    store = await open_store(tmp_path)
    ml = await store.open_ledger(TOPIC)
    assert (await ml.append(b"y")).ledger_id > first.ledger_id
    await store.close()
