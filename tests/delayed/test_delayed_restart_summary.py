"""Bucket tracker recovery from the snapshots' summaries: the bucket due soonest serves before
the other buckets' metadata is read; what is asked meanwhile about a bucket not read yet
(cancels, the cancel journal's restore, re-reads) waits for its membership; a summary that is
missing, damaged or names another range is ignored; nothing is handed out early or twice, and
nothing acknowledged or cancelled at all."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from delayed_testlib import T0, ManualClock, parts_one_by_one
from test_delayed_restart_format import build, drain, make, reopen, sealed

from broker.delayed.bucket import parse_bucket_key
from broker.delayed.snapshot_format import BucketSummary, decode_summary, encode_summary
from storage.config import StorageConfig
from storage.fileops import FileOps
from storage.positions import Position
from storage.snapshot_summaries import SUMMARY_LOG_NAME, SummaryLog, encode_record

PER_BUCKET = 20


class GatedMetadata:
    """The real snapshot store; metadata reads of the buckets' snapshots but ``open_ids`` wait
    until ``release`` is set (the cancel journal's snapshot is never held)."""

    def __init__(self, inner: Any, bucket_ids: set[int]) -> None:
        self._inner = inner
        self.bucket_ids = bucket_ids
        self.open_ids: set[int] = set()
        self.release = asyncio.Event()
        self.metadata_reads: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def load_metadata(self, snapshot_id: int) -> bytes:
        self.metadata_reads.append(snapshot_id)
        if snapshot_id in self.bucket_ids and snapshot_id not in self.open_ids:
            await self.release.wait()
        data: bytes = await self._inner.load_metadata(snapshot_id)
        return data

    async def load_parts(self, parts: list[tuple[int, int]]) -> list[bytes | Exception]:
        return await parts_one_by_one(self, parts)


def bucket_ids(cursor: Any) -> dict[tuple[int, int], int]:
    return {r: int(v) for k, v in cursor.properties.items()
            if (r := parse_bucket_key(k)) is not None}


def config() -> StorageConfig:
    return StorageConfig(fsync=False, max_entries_per_ledger=PER_BUCKET)


# --- the summaries file ------------------------------------------------------------------------

def test_summary_log_keeps_live_records_and_stops_at_a_damaged_one(tmp_path: Path) -> None:
    log = SummaryLog(tmp_path, FileOps())
    log.append([(1, b"one"), (2, b"two"), (3, b"three")])
    assert log.read({1, 2, 3}) == {1: b"one", 2: b"two", 3: b"three"}
    assert log.read({1, 3}) == {1: b"one", 3: b"three"}        # 2 deleted: not returned
    path = tmp_path / SUMMARY_LOG_NAME
    data = bytearray(path.read_bytes())
    second = len(encode_record(1, b"one"))
    data[second + 11] ^= 0xFF                                    # record 2's bytes damaged
    path.write_bytes(bytes(data))
    assert log.read({1, 2, 3}) == {1: b"one"}                   # nothing after it trusted
    log.append([(4, b"four")])                                   # readable: the tail went
    assert log.read({1, 2, 3, 4}) == {1: b"one", 4: b"four"}


def test_summary_log_torn_tail_is_dropped_and_later_appends_are_read(tmp_path: Path) -> None:
    log = SummaryLog(tmp_path, FileOps())
    log.append([(7, b"seven")])
    path = tmp_path / SUMMARY_LOG_NAME
    with path.open("ab") as f:
        f.write(encode_record(8, b"eight")[:-3])               # a crash mid-append
    assert log.read({7, 8}) == {7: b"seven"}
    log.append([(9, b"nine")])
    assert log.read({7, 8, 9}) == {7: b"seven", 9: b"nine"}


def test_summary_log_is_rewritten_when_most_records_are_dead(tmp_path: Path) -> None:
    log = SummaryLog(tmp_path, FileOps())
    log.append([(i, b"x" * 8) for i in range(3000)])
    before = (tmp_path / SUMMARY_LOG_NAME).stat().st_size
    assert log.read({5, 6}) == {5: b"x" * 8, 6: b"x" * 8}
    assert (tmp_path / SUMMARY_LOG_NAME).stat().st_size < before // 100
    assert log.read({5, 6}) == {5: b"x" * 8, 6: b"x" * 8}


def test_summary_decoding_refuses_what_it_does_not_know() -> None:
    s = BucketSummary(3, 4, T0, 20, 1)
    assert decode_summary(encode_summary(s)) == s
    assert decode_summary(encode_summary(s)[:-1]) is None
    assert decode_summary(b"\x09" + encode_summary(s)[1:]) is None          # another version
    assert decode_summary(encode_summary(BucketSummary(5, 4, T0, 20, 1))) is None


async def test_sealed_snapshots_are_summarized(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    deliver_at, positions = await build(tmp_path, config(), clock, recover_first=True)
    store, cursor = await reopen(tmp_path, config())
    summaries = await store.snapshots.summaries()
    for (start, end), snapshot_id in bucket_ids(cursor).items():
        s = decode_summary(summaries[snapshot_id])
        assert s is not None and (s.start_ledger, s.end_ledger) == (start, end)
        assert s.first_ts == min(at for p, at in deliver_at.items() if start <= p.ledger_id <= end)
        assert s.indexes == sum(1 for p in positions if start <= p.ledger_id <= end)
    await store.close()


# --- serving before every membership is read ---------------------------------------------------

async def test_earliest_bucket_serves_before_other_metadata_and_waits_hold_the_rest(
        tmp_path: Path) -> None:
    clock = ManualClock(T0)
    deliver_at, positions = await build(tmp_path, config(), clock, recover_first=True)
    store, cursor = await reopen(tmp_path, config())
    ids = bucket_ids(cursor)
    sealed_positions = sealed(positions, cursor)
    by_bucket: dict[int, list[Position]] = {}
    for p in sealed_positions:
        rng = next(r for r in ids if r[0] <= p.ledger_id <= r[1])
        by_bucket.setdefault(ids[rng], []).append(p)
    earliest_id = min(by_bucket, key=lambda i: min(deliver_at[p] for p in by_bucket[i]))
    # a cancel before the kill (acknowledged), in a bucket that will not be read at once
    later_ids = sorted(by_bucket, key=lambda i: min(deliver_at[p] for p in by_bucket[i]))
    journal_target = by_bucket[later_ids[1]][0]
    t0 = make(cursor, store.snapshots, clock)
    await t0.recover()
    await t0.wait_idle()
    assert t0.cancel_delayed(journal_target, deliver_at[journal_target]).name == "APPLIED"
    cursor.delete([journal_target])
    await cursor.flush()
    t0.cancel_settled(journal_target)
    await t0.wait_idle()
    await store.close()                         # kill -9: t0 is never closed

    store, cursor = await reopen(tmp_path, config())
    gated = GatedMetadata(store.snapshots, set(bucket_ids(cursor).values()))
    gated.open_ids = {earliest_id}
    t = make(cursor, gated, clock)
    await asyncio.wait_for(t.recover(), 60)
    assert not gated.release.is_set()
    assert t.should_pause_all_deliveries(), "re-reads must wait for the memberships"
    # meanwhile: a PIP-423 cancel, a skip-by-ids forget and a re-read in unread buckets
    cancelled = by_bucket[later_ids[2]][0]
    assert t.cancel_delayed(cancelled, deliver_at[cancelled]).accepted
    cursor.delete([cancelled])                  # what the subscription does next
    t.cancel_settled(cancelled)
    forgotten = by_bucket[later_ids[3]][0]
    t.cancel(forgotten)
    cursor.delete([forgotten])                  # the skip-by-ids path acknowledges it too
    reread = by_bucket[later_ids[4]][1]
    assert t.add(reread, deliver_at[reread]) is True
    # the earliest bucket serves: its messages due now come out while the rest is unread
    first = sorted(by_bucket[earliest_id], key=deliver_at.__getitem__)
    clock.now_ms = deliver_at[first[-1]]
    got: list[Position] = []
    for _ in range(200):
        got.extend(Position(*p) for p in t.get_scheduled(100))
        if len(got) >= len(first):
            break
        await asyncio.sleep(0.01)
    assert sorted(got) == sorted(first)
    for p in got:
        assert deliver_at[p] <= clock.now_ms
        cursor.delete([p])
    assert not any(p for p in got if p not in by_bucket[earliest_id])
    assert t.should_pause_all_deliveries()

    gated.release.set()
    rest = await drain(t, clock, cursor, deliver_at, T0 + 400_000)
    assert not t.should_pause_all_deliveries()
    handed = got + rest
    assert len(handed) == len(set(handed)), "handed out twice"
    never = {journal_target, cancelled, forgotten}
    assert not never & set(handed), "a cancelled or acknowledged message was handed out"
    assert sorted(handed) == sorted(p for p in sealed_positions if p not in never)
    await t.close()
    await store.close()


async def test_buckets_without_a_usable_summary_are_read_before_serving(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    deliver_at, positions = await build(tmp_path, config(), clock, recover_first=True)
    store, cursor = await reopen(tmp_path, config())
    ids = bucket_ids(cursor)
    ranges = sorted(ids)
    summaries = await store.snapshots.summaries()
    # one summary names another range, one is damaged, one is missing; the rest are good
    wrong, damaged, missing = ids[ranges[0]], ids[ranges[1]], ids[ranges[2]]
    log = tmp_path / "snapshots" / SUMMARY_LOG_NAME
    s = decode_summary(summaries[wrong])
    assert s is not None
    records = {k: v for k, v in summaries.items() if k != missing}
    records[wrong] = encode_summary(BucketSummary(s.start_ledger + 1, s.end_ledger + 1,
                                                  s.first_ts, s.indexes, s.segments))
    records[damaged] = b"\x01" + records[damaged][1:-1]
    log.write_bytes(b"".join(encode_record(k, v) for k, v in records.items()))
    await store.close()

    store, cursor = await reopen(tmp_path, config())
    sealed_positions = sealed(positions, cursor)
    gated = GatedMetadata(store.snapshots, set(bucket_ids(cursor).values()))
    gated.open_ids = {wrong, damaged, missing}
    t = make(cursor, gated, clock)
    await asyncio.wait_for(t.recover(), 60)     # never waits for a gated (summarized) bucket
    for rng in (ranges[0], ranges[1], ranges[2]):
        inside = [p for p in sealed_positions if rng[0] <= p.ledger_id <= rng[1]]
        assert inside and all(t.contains(p) for p in inside), "read before serving"
    assert t.sealed.reading == len(ids) - 3
    gated.release.set()
    await t.wait_idle()
    # the recovery gave the three their summary again: the next one reads none first
    got = await store.snapshots.summaries()
    for rng in (ranges[0], ranges[1], ranges[2]):
        s2 = decode_summary(got[ids[rng]])
        assert s2 is not None and (s2.start_ledger, s2.end_ledger) == rng
    handed = await drain(t, clock, cursor, deliver_at, T0 + 400_000)
    assert len(handed) == len(set(handed))
    assert sorted(handed) == sorted(sealed_positions)
    assert all(deliver_at[p] <= T0 + 400_000 for p in handed)
    await t.close()
    await store.close()


async def test_a_summary_whose_first_time_is_wrong_hands_nothing_out_early(
        tmp_path: Path) -> None:
    clock = ManualClock(T0)
    deliver_at, positions = await build(tmp_path, config(), clock, recover_first=True)
    store, cursor = await reopen(tmp_path, config())
    ids = bucket_ids(cursor)
    summaries = await store.snapshots.summaries()
    records = {}
    for snapshot_id, data in summaries.items():      # every summary says "due in an hour"
        s = decode_summary(data)
        assert s is not None
        records[snapshot_id] = encode_summary(BucketSummary(
            s.start_ledger, s.end_ledger, T0 + 3_600_000, s.indexes, s.segments))
    (tmp_path / "snapshots" / SUMMARY_LOG_NAME).write_bytes(
        b"".join(encode_record(k, v) for k, v in records.items()))
    await store.close()

    store, cursor = await reopen(tmp_path, config())
    sealed_positions = sealed(positions, cursor)
    t = make(cursor, store.snapshots, clock)
    await t.recover()
    assert t.sealed.reading == len(ids)
    handed: list[Position] = []
    for until in range(T0 + 100_000, T0 + 400_001, 50_000):
        for p in await drain(t, clock, cursor, deliver_at, until):
            assert deliver_at[p] <= until, "handed out early"
            handed.append(p)
    assert len(handed) == len(set(handed))
    assert sorted(handed) == sorted(sealed_positions)
    await t.close()
    await store.close()
