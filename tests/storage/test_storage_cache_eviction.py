"""The entry cache's age limit (managedLedgerCacheEvictionTimeThresholdMillis) and the memory
handed back to the OS once a burst has aged out."""

from __future__ import annotations

import asyncio
import platform
from collections.abc import Callable
from typing import Any

import pytest
from waiting import wait_until_async

from storage.cache import EntryCache
from storage.cache_eviction import (
    CATCH_UP_S,
    RELEASE_DELAY_S,
    RELEASE_MIN_BYTES,
    CacheEviction,
    release_free_memory,
)


class _Handle:
    def __init__(self, loop: _ManualLoop, entry: tuple[float, Callable[[], None]]) -> None:
        self._loop, self._entry = loop, entry

    def cancel(self) -> None:
        if self._entry in self._loop.pending:
            self._loop.pending.remove(self._entry)


class _ManualLoop:
    """The two loop calls the eviction timer makes, driven by the test."""

    def __init__(self) -> None:
        self.now = 100.0
        self.pending: list[tuple[float, Callable[[], None]]] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Any:
        entry = (self.now + delay, callback)
        self.pending.append(entry)
        return _Handle(self, entry)

    def advance_by_ticks(self, seconds: float, step: float) -> None:
        for _ in range(round(seconds / step)):
            self.advance(step)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [cb for at, cb in self.pending if at <= self.now]
        self.pending = [(at, cb) for at, cb in self.pending if at > self.now]
        for callback in due:
            callback()


def test_read_chunks_age_out_and_unread_ones_stay_until_cleared() -> None:
    cache = EntryCache(1000)
    cache.clock = 1.0
    cache.put_many(1, 0, [b"aa", b"bb"])
    cache.put_many(1, 2, [b"cc"])
    cache.put_many(2, 0, [b"dddd"])
    cache.clock = 5.0
    assert cache.get_run(1, 2, 5) == (b"cc",)          # read at 5.0
    assert cache.last_touch == 5.0
    assert cache.evict_read_before(5.0, 1 << 20) == 0          # not before 5.0; the unread never
    assert cache.evict_read_before(5.5, 1 << 20) == 2          # (1, 2) leaves: its 2 bytes
    assert len(cache) == 3 and cache.size_bytes == 8 and not cache.empty
    assert cache.evict_read_before(100.0, 1 << 20) == 0        # unread chunks do not age out
    assert cache.evict_oldest(1 << 20) == 8 and cache.empty and cache.size_bytes == 0
    assert cache.get(1, 0) is None and cache.get(2, 0) is None


def test_each_walk_stops_at_its_budget() -> None:
    cache = EntryCache(1 << 20)
    for i in range(4):
        cache.put_many(1, i, [b"x" * 100])
    cache.clock = 2.0
    for i in range(4):
        assert cache.get(1, i) is not None
    assert cache.evict_read_before(3.0, 150) == 200   # stops once 150 bytes are freed
    assert cache.get(1, 0) is None and cache.get(1, 2) is not None
    assert cache.evict_oldest(1) == 100 and len(cache) == 1


def test_a_read_from_disk_keeps_the_cache_in_use() -> None:
    loop = _ManualLoop()
    cache = EntryCache(1 << 20)
    CacheEviction(loop, cache, threshold_s=1.0, interval_s=0.01)  # type: ignore[arg-type]
    cache.put_many(1, 0, [b"unread"])
    for _ in range(30):                               # the read path marks the cache in use
        loop.advance_by_ticks(0.1, 0.01)
        cache.last_touch = cache.clock
    assert len(cache) == 1                            # 3 s later, still there
    loop.advance_by_ticks(1.1, 0.01)
    assert cache.empty and not loop.pending


def test_the_timer_runs_only_while_the_cache_holds_entries() -> None:
    loop = _ManualLoop()
    cache = EntryCache(1 << 30)
    released: list[int] = []
    eviction = CacheEviction(loop, cache, threshold_s=1.0, interval_s=0.01,  # type: ignore[arg-type]
                             release=lambda: released.append(1) is None)
    assert not loop.pending                           # empty cache: no timer
    cache.put_many(1, 0, [b"x" * 1024] * 10)
    assert cache.watched and cache.clock == loop.now and len(loop.pending) == 1
    cache.put_many(1, 10, [b"y"])                     # already watched: no second timer
    assert len(loop.pending) == 1
    loop.advance_by_ticks(0.5, 0.01)
    assert cache.get(1, 10) == b"y" and len(loop.pending) == 1   # read at ~100.5
    loop.advance_by_ticks(0.5, 0.01)
    cache.put_many(2, 0, [b"z"])                      # the cache is in use at ~101.0
    loop.advance_by_ticks(0.7, 0.01)
    assert len(cache) == 11                           # (1, 10) was read and aged out...
    assert cache.size_bytes == 10 * 1024 + 1          # ...(1, 0), never read, stays
    loop.advance_by_ticks(0.5, 0.01)                  # nothing put or read since ~101.0
    assert cache.empty and not cache.watched and not loop.pending
    assert released == []                             # 10 KiB: under RELEASE_MIN_BYTES
    eviction.close()
    assert cache.on_first_put is None


def test_a_burst_that_ages_out_is_released_once() -> None:
    loop = _ManualLoop()
    cache = EntryCache(1 << 30)
    released: list[int] = []
    eviction = CacheEviction(loop, cache, threshold_s=1.0, interval_s=0.01,  # type: ignore[arg-type]
                             release=lambda: released.append(1) is None)
    chunk = [b"z" * 65536] * 16                       # 1 MiB per group commit
    bursts = RELEASE_MIN_BYTES // (1 << 20) + 1
    for i in range(bursts):
        cache.put_many(1, i * 16, chunk)
        loop.advance(0.01)
    assert released == [] and not cache.empty         # still young
    loop.advance_by_ticks(1.1, 0.01)
    assert cache.empty and released == []             # emptied: the release waits...
    loop.advance_by_ticks(RELEASE_DELAY_S - 0.5, 0.01)
    assert released == []
    loop.advance_by_ticks(1.0, 0.01)                  # ...RELEASE_DELAY_S unused, then runs
    assert not loop.pending and released == [1] and eviction.releases == 1
    cache.put_many(2, 0, [b"small"])                  # a small put later: armed again...
    while loop.pending:
        loop.advance(0.01)
    assert cache.empty and released == [1]            # ...but too little evicted to release


def test_a_put_before_the_release_puts_it_off() -> None:
    loop = _ManualLoop()
    cache = EntryCache(1 << 30)
    released: list[int] = []
    CacheEviction(loop, cache, threshold_s=1.0, interval_s=0.01,  # type: ignore[arg-type]
                  release=lambda: released.append(1) is None)
    cache.put_many(1, 0, [b"b" * (1 << 20)] * (RELEASE_MIN_BYTES // (1 << 20)))
    loop.advance_by_ticks(1.1, 0.01)
    assert cache.empty and len(loop.pending) == 1     # the release, waiting
    loop.advance_by_ticks(RELEASE_DELAY_S / 2, 0.01)
    cache.put_many(2, 0, [b"next burst"])             # in use again: no release now
    loop.advance_by_ticks(RELEASE_DELAY_S / 2 + 0.5, 0.01)
    assert released == []
    loop.advance_by_ticks(1.0 + RELEASE_DELAY_S, 0.01)   # emptied again, then unused
    assert cache.empty and released == [1] and not loop.pending


def test_a_tick_that_used_its_budget_is_followed_sooner() -> None:
    loop = _ManualLoop()
    cache = EntryCache(1 << 30)
    CacheEviction(loop, cache, threshold_s=1.0, interval_s=0.1,  # type: ignore[arg-type]
                  release=lambda: True)
    for i in range(6):
        cache.put_many(1, i, [b"m" * (1 << 20)])      # 6 MiB, one chunk per MiB
    loop.advance_by_ticks(1.1, 0.1)                   # unused for the threshold: emptying
    assert cache.size_bytes == 2 << 20                # 4 MiB (the budget) went in one tick
    (due, _), = loop.pending
    assert due - loop.now <= CATCH_UP_S + 1e-9        # the rest comes at once, not in 100 ms
    loop.advance(CATCH_UP_S)
    assert cache.empty


def test_close_cancels_the_pending_tick() -> None:
    loop = _ManualLoop()
    cache = EntryCache(1 << 20)
    eviction = CacheEviction(loop, cache, threshold_s=1.0, interval_s=0.01)  # type: ignore[arg-type]
    cache.put_many(1, 0, [b"x"])
    assert len(loop.pending) == 1
    eviction.close()
    assert not loop.pending and cache.on_first_put is None


def test_threshold_zero_keeps_entries_until_the_byte_budget_pushes_them_out() -> None:
    loop = _ManualLoop()
    cache = EntryCache(1 << 20)
    CacheEviction(loop, cache, threshold_s=0.0, interval_s=0.01)  # type: ignore[arg-type]
    cache.put_many(1, 0, [b"x"])
    assert not loop.pending and cache.get(1, 0) == b"x"


async def test_on_a_running_loop_an_idle_cache_empties(tmp_path: Any) -> None:
    cache = EntryCache(1 << 30)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    eviction = CacheEviction(loop, cache, threshold_s=0.05, interval_s=0.01,
                             release=lambda: done.set() is None, release_delay_s=0.05)
    cache.put_many(1, 0, [b"q" * (1 << 20)] * (RELEASE_MIN_BYTES // (1 << 20)))
    await asyncio.wait_for(done.wait(), 30)
    assert cache.empty and cache.size_bytes == 0 and eviction.releases == 1
    eviction.close()


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="malloc_trim is glibc's")
def test_release_free_memory_calls_malloc_trim_on_glibc() -> None:
    assert release_free_memory() is True


async def test_a_store_ages_out_what_its_readers_read(tmp_path: Any) -> None:
    from storage import Position, SegmentStore, StorageConfig

    store = await SegmentStore.open(tmp_path, StorageConfig(
        entry_cache_eviction_threshold_s=0.2, entry_cache_eviction_interval_s=0.01))
    try:
        ml = await store.open_ledger("public/default/persistent/aging")
        positions = await asyncio.gather(*(ml.append(b"%d" % i * 100) for i in range(10)))
        first = positions[0]
        entries = await ml.read_entries(Position(first.ledger_id, 0), 10)
        assert [e.data for e in entries] == [b"%d" % i * 100 for i in range(10)]
        await wait_until_async(lambda: store.cache.empty, timeout_s=30,
                               message="the read entries aged out of the cache")
        assert not store.cache.watched
        misses = store.cache.misses
        again = await ml.read_entries(Position(first.ledger_id, 0), 10)
        assert [e.data for e in again] == [e.data for e in entries]   # now from disk
        assert store.cache.misses > misses and store.cache.empty
    finally:
        await store.close()
