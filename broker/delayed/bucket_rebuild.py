"""Immutable buckets built from other records: merge decisions and recovery from snapshots.

Theory of operation
-------------------
:class:`broker.delayed.bucket_snapshots.BucketSnapshots` runs the snapshot lifecycle (I/O,
tasks, retries, metrics). What that lifecycle *decides* about bucket records is here, as pure
functions with no I/O and no state, so the rules can be read (and tested) in one place:

* :func:`cheapest_pair`: which two adjacent buckets to merge when there are too many: the
  pair holding the fewest remaining indexes, both with a persisted snapshot, neither already
  merging nor still being read after a restart;
* :func:`merged_bucket`: the bucket replacing a merged pair (ledger range from the first's
  start to the second's end; indexed and pending ledgers of both; its segments' minimum times);
* :func:`live_ranges`: which ``#pulsar.internal.delayed.bucket`` cursor properties describe
  live buckets after a restart: sorted by start ledger (widest first), a range enclosed by or
  overlapping an earlier one is the leftover of an interrupted merge and goes;
* :func:`recovered_bucket`: a bucket rebuilt from its snapshot's metadata, minus what the
  cursor's mark-delete position acknowledged cumulatively.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping

from broker.delayed.bucket_records import ImmutableBucket, parse_bucket_key
from broker.delayed.snapshot_format import SegmentInfo
from storage.positions import Position

__all__ = ["cheapest_pair", "live_ranges", "merged_bucket", "recovered_bucket"]

#: (start ledger, end ledger, snapshot id, cursor property key)
BucketRange = tuple[int, int, int, str]


def cheapest_pair(pairs: Iterable[tuple[ImmutableBucket, ImmutableBucket]]
                  ) -> tuple[ImmutableBucket, ImmutableBucket] | None:
    best: tuple[ImmutableBucket, ImmutableBucket] | None = None
    best_n = 0
    for a, b in pairs:
        if (a.merging or b.merging or a.reading or b.reading or a.snapshot_id is None
                or b.snapshot_id is None):
            continue
        n = a.remaining + b.remaining
        if best is None or n < best_n:
            best, best_n = (a, b), n
    return best


def merged_bucket(a: ImmutableBucket, b: ImmutableBucket, segment_min_ts: array[int],
                  snapshot_id: int, snapshot_size: int) -> ImmutableBucket:
    merged = ImmutableBucket(a.start_ledger, b.end_ledger, recovered=a.recovered or b.recovered)
    merged.indexed = {**a.indexed, **b.indexed}
    merged.pending = {**a.pending, **b.pending}
    merged.remaining = a.remaining + b.remaining
    merged.segment_min_ts = segment_min_ts
    merged.snapshot_id = snapshot_id
    merged.snapshot_size = snapshot_size
    return merged


def live_ranges(properties: Mapping[str, str]) -> tuple[list[BucketRange], list[BucketRange]]:
    """(kept, stale) bucket ranges of the cursor *properties* (module docstring)."""
    found: list[BucketRange] = []
    for key, value in properties.items():
        rng = parse_bucket_key(key)
        if rng is not None and value.isdecimal():
            found.append((rng[0], rng[1], int(value), key))
    found.sort(key=lambda t: (t[0], -t[1]))
    kept: list[BucketRange] = []
    stale: list[BucketRange] = []
    for item in found:
        if kept and item[0] <= kept[-1][1]:
            stale.append(item)
            continue
        kept.append(item)
    return kept, stale


def recovered_bucket(start: int, end: int, snapshot_id: int, snapshot_size: int,
                     infos: list[SegmentInfo], mark_delete: Position) -> ImmutableBucket:
    bucket = ImmutableBucket(start, end, recovered=True)
    bucket.snapshot_id = snapshot_id
    bucket.snapshot_size = snapshot_size
    bucket.segment_min_ts = array("q", (info.min_ts for info in infos))
    for info in infos:
        for ledger_id, bm in info.bitmaps.items():
            if ledger_id < mark_delete.ledger_id:
                continue                    # acknowledged cumulatively
            if ledger_id == mark_delete.ledger_id and mark_delete.entry_id >= 0:
                bm.remove_range(0, mark_delete.entry_id + 1)
            have = bucket.indexed.get(ledger_id)
            if have is None:
                bucket.indexed[ledger_id] = bm
            else:
                have |= bm
    bucket.pending = dict(bucket.indexed)      # shared until changed (ImmutableBucket.take)
    bucket.remaining = sum(len(bm) for bm in bucket.pending.values())
    return bucket
