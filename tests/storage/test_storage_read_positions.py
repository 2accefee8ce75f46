"""EntryReader.read_positions (``ManagedLedger.read_positions``): scattered positions read
with one read-thread job answer exactly what reading them one by one answers, in the order
given, with the positions that do not exist reported missing."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from storage_testlib import flip_bit, open_store, segment_paths

from storage import Position
from storage.segments import RECORD_HEADER_SIZE

TOPIC = "persistent://public/default/scattered"


async def test_scattered_reads_match_reading_one_by_one_cached_or_not(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=50)
    ml = await store.open_ledger(TOPIC)
    written = list(await asyncio.gather(*(ml.append(b"m%d" % i * (i % 7 + 1))
                                          for i in range(400))))
    rng = random.Random(7)
    await store.close()
    # reopened: every segment sealed, nothing cached, indexes checked on first read
    store = await open_store(tmp_path, max_entries_per_ledger=50)
    ml = await store.open_ledger(TOPIC)
    last = written[-1]
    absent = [Position(last.ledger_id, last.entry_id + 5), Position(10**9, 0),
              Position(written[0].ledger_id, -1)]
    for _ in range(5):
        wanted = sorted(set(rng.sample(written, 60)) | set(absent))
        entries, missing = await ml.read_positions(wanted)
        one_by_one = [await ml.read_entry(p) for p in wanted]
        assert entries == [e for e in one_by_one if e is not None]
        assert sorted(missing) == sorted(p for p, e in zip(wanted, one_by_one, strict=True)
                                         if e is None)
    # cached ones come from the cache, the rest from disk, in one answer, in order
    fresh = list(await asyncio.gather(*(ml.append(b"new%d" % i) for i in range(10))))
    wanted = sorted(rng.sample(written, 20) + fresh[::3])
    entries, missing = await ml.read_positions(wanted)
    assert [e.position for e in entries] == wanted and missing == []
    await store.close()


async def test_a_byte_limit_leaves_the_rest_neither_read_nor_missing(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=10)
    ml = await store.open_ledger(TOPIC)
    written = list(await asyncio.gather(*(ml.append(bytes(1000)) for _ in range(40))))
    await store.close()
    store = await open_store(tmp_path, max_entries_per_ledger=10)
    ml = await store.open_ledger(TOPIC)
    wanted = written[::3]
    entries, missing = await ml._reader.read_positions(wanted, 2500)   # the limit itself
    assert missing == []
    assert 1 <= len(entries) < len(wanted)      # 2,500 bytes: three entries of 1,000
    assert len(entries) <= 3
    assert [e.position for e in entries] == wanted[:len(entries)]
    assert [e.data for e in entries] == [bytes(1000)] * len(entries)
    await store.close()


async def test_an_entry_failing_its_checks_is_missing_and_never_served(tmp_path: Path) -> None:
    store = await open_store(tmp_path, max_entries_per_ledger=10)
    ml = await store.open_ledger(TOPIC)
    written = list(await asyncio.gather(*(ml.append(b"x" * 100) for _ in range(30))))
    await store.close()
    first_segment = segment_paths(tmp_path, TOPIC)[0]
    # the third record of the first segment: header + 100 bytes each, after the file's head
    size = first_segment.stat().st_size
    head = size - 10 * (RECORD_HEADER_SIZE + 100)
    flip_bit(first_segment, head + 2 * (RECORD_HEADER_SIZE + 100) + RECORD_HEADER_SIZE + 50, 3)
    store = await open_store(tmp_path, max_entries_per_ledger=10)
    ml = await store.open_ledger(TOPIC)
    wanted = [written[1], written[2], written[15]]
    entries, missing = await ml.read_positions(wanted)
    assert [e.position for e in entries] == [written[1], written[15]]
    assert missing == [written[2]]
    assert await ml.read_entry(written[2]) is None
    await store.close()


async def test_one_uncached_ledger_s_scattered_positions_are_all_misses_read_from_disk(
        tmp_path: Path) -> None:
    # a delayed index's due positions long after their publish: one ledger, nothing cached
    store = await open_store(tmp_path, max_entries_per_ledger=1000)
    ml = await store.open_ledger(TOPIC)
    written = list(await asyncio.gather(*(ml.append(b"d%d" % i * (i % 5 + 1))
                                          for i in range(300))))
    await store.close()
    store = await open_store(tmp_path, max_entries_per_ledger=1000)
    ml = await store.open_ledger(TOPIC)
    rng = random.Random(11)
    for _ in range(3):
        wanted = sorted(rng.sample(written, 40))
        misses = store.cache.misses
        entries, missing = await ml.read_positions(wanted)
        assert missing == [] and [e.position for e in entries] == wanted
        assert store.cache.misses - misses == len(wanted)   # one miss each, as one by one
        assert entries == [await ml.read_entry(p) for p in wanted]
    # one of them beyond the ledger's confirmed entries: missing, the others read
    last = written[-1]
    beyond = Position(last.ledger_id, last.entry_id + 3)
    wanted = [*sorted(rng.sample(written, 10)), beyond]
    entries, missing = await ml.read_positions(wanted)
    assert missing == [beyond] and [e.position for e in entries] == wanted[:-1]
    # some of the ledger cached: those from the cache, the rest from disk, in order
    fresh = list(await asyncio.gather(*(ml.append(b"new%d" % i) for i in range(5))))
    wanted = sorted(rng.sample(written, 10) + fresh[1::2])
    entries, missing = await ml.read_positions(wanted)
    assert missing == [] and [e.position for e in entries] == wanted
    await store.close()
