"""The entry cache: chunks of group-committed entries, LRU by chunk, bounded in bytes."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from storage import SegmentStore, StorageConfig
from storage.cache import AppendCaching, EntryCache


def test_entries_of_a_chunk_are_found_and_missing_ones_are_misses() -> None:
    cache = EntryCache(1000)
    assert cache.put_many(7, 10, [b"a", b"bb", b"ccc"]) == 6
    cache.put_many(7, 13, [b"d"])
    cache.put_many(9, 0, [b"x"])
    assert [cache.get(7, i) for i in range(9, 15)] == [None, b"a", b"bb", b"ccc", b"d", None]
    assert cache.get(9, 0) == b"x" and cache.get(8, 0) is None
    assert (cache.hits, cache.misses) == (5, 3)
    assert len(cache) == 5 and cache.size_bytes == 8


def test_a_chunks_entries_leave_the_garbage_collectors_walks() -> None:
    # the collector untracks a tuple of bytes at the first collection that meets it, so later
    # collections (the serve process runs a full one each second) do not visit every cached
    # entry again; a discard keeps it so
    cache = EntryCache(1_000_000)
    cache.put_many(3, 0, [b"x" * 100 for _ in range(50)])
    cache.put_many(3, 50, [b"y" * 100])
    cache.discard(3, 7)
    gc.collect()
    chunks = list(cache._chunks.values())
    assert len(chunks) == 2
    assert not any(gc.is_tracked(chunk.datas) for chunk in chunks)
    assert cache.get(3, 7) is None and cache.get(3, 8) == b"x" * 100
    assert len(cache) == 50


def test_eviction_drops_the_least_recently_used_chunks_first() -> None:
    cache = EntryCache(10)
    cache.put_many(1, 0, [b"aaaa"])
    cache.put_many(1, 1, [b"bbbb"])
    assert cache.get(1, 0) == b"aaaa"  # chunk 0 is now the young one
    cache.put_many(2, 0, [b"cccc"])  # over budget: chunk (1, 1) goes
    assert cache.get(1, 1) is None
    assert cache.get(1, 0) == b"aaaa" and cache.get(2, 0) == b"cccc"
    assert cache.size_bytes == 8


def test_a_batch_over_the_budget_keeps_its_newest_entries() -> None:
    cache = EntryCache(10)
    cache.put_many(1, 0, [b"123"] * 5 + [b"x" * 11])
    assert cache.size_bytes <= 10 and len(cache) == 3
    assert cache.get(1, 4) == b"123" and cache.get(1, 5) is None and cache.get(1, 1) is None


def test_discard_and_drop_ledger_release_their_bytes() -> None:
    cache = EntryCache(100)
    cache.put_many(1, 0, [b"aa", b"bb"])
    cache.put_many(2, 0, [b"cc"])
    cache.discard(1, 1)
    assert cache.get(1, 1) is None and cache.get(1, 0) == b"aa" and cache.size_bytes == 4
    cache.drop_ledger(1)
    assert cache.get(1, 0) is None and cache.size_bytes == 2 and len(cache) == 1


def test_a_run_comes_from_one_chunk_and_stops_at_its_end_or_a_discarded_entry() -> None:
    cache = EntryCache(max_bytes=10_000)
    cache.put_many(7, 0, [b"a", b"b", b"c"])
    cache.put_many(7, 3, [b"d", b"e"])
    assert cache.get_run(7, 1, 10) == (b"b", b"c")      # the chunk's end
    assert cache.get_run(7, 0, 2) == (b"a", b"b")       # the limit
    assert cache.get_run(7, 3, 10) == (b"d", b"e")
    cache.discard(7, 4)
    assert cache.get_run(7, 3, 10) == (b"d",)            # the discarded entry
    assert cache.get_run(7, 4, 10) == ()
    assert cache.get_run(7, 9, 10) == () and cache.get_run(8, 0, 10) == ()
    assert cache.get_run(7, 0, 0) == ()
    assert (cache.hits, cache.misses) == (7, 4)


def test_append_caching_is_on_until_told_and_stays_on_while_anyone_wants_it() -> None:
    caching = AppendCaching()
    assert caching.on   # a ledger used on its own caches as before
    caching.want("persistent://t/n/a", False)
    assert not caching.on
    caching.want("persistent://t/n/a", True)
    caching.want("persistent://t/n/shadow", True)
    caching.want("persistent://t/n/a", False)
    assert caching.on   # the shadow still reads the entries
    caching.want("persistent://t/n/shadow", False)
    assert not caching.on


async def test_appends_enter_the_cache_only_while_caching_is_on(tmp_path: Path) -> None:
    store = await SegmentStore.open(tmp_path, StorageConfig())
    try:
        ml = await store.open_ledger("public/default/persistent/uncached")
        ml.caching.want("persistent://public/default/uncached", False)
        quiet = await asyncio.gather(*(ml.append(b"q%d" % i) for i in range(5)))
        assert store.cache.empty and store.cache.size_bytes == 0
        ml.caching.want("persistent://public/default/uncached", True)
        cached = await asyncio.gather(*(ml.append(b"c%d" % i) for i in range(5)))
        assert store.cache.size_bytes == sum(len(b"c%d" % i) for i in range(5))
        got = await ml.read_entries(quiet[0], 10)   # the uncached ones come from disk
        assert [e.data for e in got] == [b"q%d" % i for i in range(5)] + [
            b"c%d" % i for i in range(5)]
        assert [e.position for e in got] == list(quiet) + list(cached)
        assert ml.total_size_bytes == sum(len(e.data) for e in got)   # counted either way
        shadow = await store.open_shadow_ledger("public/default/persistent/shade", ml)
        assert shadow.caching is ml.caching
    finally:
        await store.close()
