"""A loaded segment's runs handed out: the same positions, counts and pending bitmaps whether a
run is taken entry by entry or, one ledger's and long enough, as bitmaps
(``SealedBuckets._take_segment``)."""

from __future__ import annotations

import random
from array import array

import pytest
from pyroaring import BitMap

from broker.delayed.bucket_records import ImmutableBucket, SealedBuckets
from broker.delayed.packed import POSITION_BITS
from broker.delayed.snapshot_format import DecodedSegment
from storage.positions import Position

T0 = 1_000_000


def _bucket(ledgers: list[int], entries: int, rng: random.Random,
            recovered: bool) -> ImmutableBucket:
    bucket = ImmutableBucket(ledgers[0], ledgers[-1], recovered=recovered)
    for ledger_id in ledgers:
        ids = BitMap(rng.sample(range(entries * 3), entries))
        bucket.indexed[ledger_id] = ids
        bucket.pending[ledger_id] = ids           # shared until the first change
        bucket.remaining += len(ids)
    return bucket


@pytest.mark.parametrize("seed", range(12))
def test_runs_hand_out_what_entry_by_entry_would(seed: int) -> None:
    rng = random.Random(seed)
    ledgers = [5] if seed % 3 else [5, 6, 7]       # a default bucket holds one ledger
    recovered = seed % 2 == 0
    bucket = _bucket(ledgers, 300, rng, recovered)
    members = [(ledger_id, e) for ledger_id in ledgers for e in bucket.indexed[ledger_id]]
    rng.shuffle(members)                           # time order is not position order
    members += rng.sample(members, 20)             # stale duplicates further on
    packed = array("Q", [(ledger_id << POSITION_BITS) | e for ledger_id, e in members])
    ts = array("q", [T0 + k for k in range(len(packed))])
    # before the hand-out: some cancelled (not pending), some acknowledged (checked if recovered)
    cancelled = set(rng.sample(members, 40))
    acked = set(rng.sample(members, 60))
    sealed = SealedBuckets()
    sealed.insert(bucket)
    for ledger_id, e in cancelled:
        sealed.take(ledger_id, e)
    shared_before = {k: BitMap(v) for k, v in bucket.indexed.items()}
    sealed.push_loaded(bucket, DecodedSegment(ts, packed, []))
    pending = {(ledger_id, e) for ledger_id, e in members} - cancelled
    remaining = bucket.remaining
    out: list[Position] = []
    consumed = 0
    while consumed < len(packed):
        end = min(len(packed), consumed + rng.choice([1, 3, 7, 8, 9, 25, 40, 100]))
        start = len(out)
        moved, exhausted = sealed.take_run(end, out, lambda p: tuple(p) in acked)
        assert moved == end - consumed
        run = {(p >> POSITION_BITS, p & 0xFFFFFFFF) for p in packed[consumed:end]}
        taken = run & pending
        pending -= taken
        remaining -= len(taken)
        want = taken - acked if recovered else taken
        assert sorted(out[start:]) == sorted(Position(*p) for p in want)
        assert all(type(p) is Position for p in out[start:])
        assert bucket.remaining == remaining and sealed.sealed_remaining == remaining
        consumed = end
        assert (exhausted is not None) == (consumed == len(packed))
    for ledger_id in ledgers:
        assert bucket.pending[ledger_id] == BitMap(e for lid, e in pending if lid == ledger_id)
    assert bucket.indexed == shared_before          # the shared membership never changed
    assert len(out) == len(set(out))
