"""Reschedule churn in a tracker: index slots and bytes per pending message, CPU per drop.

Usage:  .venv/bin/python bench/delayed_churn.py [--live 100000] [--drops 1000000]
                                                [--tracker in-memory|bucket] [--seed 1]

In this process, no broker: ``--live`` positions delayed uniformly 1 min .. 1 h, then
``--drops`` reschedules, each cancelling a random pending position (its index slot goes stale)
and adding its new version (a new position, a new time 1 min .. 1 h out), as replace-by-key
does for every keyed message that replaces a pending one. The pending count stays at
``--live``. Printed: the time-index slots and the stale ones, the tracker's own memory estimate
per pending message (``memory_bytes``, the exported index size: arrays at their allocated
capacity plus the roaring bitmaps), before and after the churn, the CPU per reschedule
(cancel + add, ``time.process_time``), the mean and the longest single cancel (wall time: a
cancel that compacts the index pays for it at once); then the CPU of one compaction at its trigger point (as many
stale slots as live ones), i.e. the pause it makes and its cost per drop amortised.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.in_memory import InMemoryDelayedDeliveryTracker
from broker.delayed.indexed import IndexedPositions
from broker.delayed.tracker import DelayedDeliveryTracker
from storage.positions import Position

HOUR_MS = 3_600_000
T0 = 1_700_000_000_000


class _Loop:
    """A frozen clock with a timer that never fires (the churn happens within one instant)."""

    def time(self) -> float:
        return T0 / 1000

    def call_at(self, when: float, callback: object, /) -> object:
        return _Handle()


class _Handle:
    def cancel(self) -> None:
        return None


class _Cursor:
    def is_deleted(self, position: Position) -> bool:
        return False


def _tracker(kind: str) -> DelayedDeliveryTracker:
    loop: object = _Loop()
    if kind == "in-memory":
        return InMemoryDelayedDeliveryTracker(tick_time_ms=1, strict=True, on_due=lambda: None,
                                              loop=loop, clock_ms=lambda: T0)  # type: ignore[arg-type]
    # the mutable bucket only (no sealing within the run): no snapshot IO is exercised
    return BucketDelayedDeliveryTracker(
        cursor=_Cursor(), snapshots=None, tick_time_ms=1, strict=True,  # type: ignore[arg-type]
        on_due=lambda: None, loop=asyncio.new_event_loop(), clock_ms=lambda: T0,
        min_index_count_per_bucket=1 << 40)


def _slots(tracker: DelayedDeliveryTracker) -> tuple[int, int]:
    indexes = tracker.scheduled_sources().indexes
    slots = sum(p.indexed for p in indexes)
    return slots, slots - sum(p.count for p in indexes)


def run(kind: str, live: int, drops: int, seed: int) -> None:
    rng = random.Random(seed)
    gc.collect()
    tracker = _tracker(kind)
    ledger, entry = 1, 0
    keys: list[Position] = []
    for _ in range(live):
        keys.append(Position(ledger, entry))
        tracker.add(keys[-1], T0 + rng.randrange(60_000, HOUR_MS))
        entry += 1
    base_bytes = tracker.memory_bytes
    times = [T0 + rng.randrange(60_000, HOUR_MS) for _ in range(drops)]
    victims = [rng.randrange(live) for _ in range(drops)]
    worst = 0.0
    in_cancel = 0.0
    peak_slots = 0
    cpu0 = time.process_time()
    for i in range(drops):
        k = victims[i]
        t = time.perf_counter()
        tracker.cancel(keys[k])
        took = time.perf_counter() - t
        in_cancel += took
        if took > worst:
            worst = took
        if entry >= 50_000:                    # storage's default ledger rollover
            ledger, entry = ledger + 1, 0
        keys[k] = Position(ledger, entry)
        entry += 1
        tracker.add(keys[k], times[i])
        if i % 1024 == 0:
            peak_slots = max(peak_slots, _slots(tracker)[0])
    cpu = time.process_time() - cpu0
    slots, stale = _slots(tracker)
    pending = len(tracker)
    print(f"{kind}: {pending:,} pending after {drops:,} reschedules: index slots {slots:,} "
          f"({stale:,} stale; peak seen {peak_slots:,})")
    print(f"  memory_bytes {tracker.memory_bytes / pending:.1f} B/pending "
          f"(before the churn {base_bytes / live:.1f})")
    print(f"  CPU per reschedule (cancel + add) {cpu / drops * 1e6:.2f} us; "
          f"mean cancel {in_cancel / drops * 1e6:.2f} us, the longest {worst * 1e3:.1f} ms")


def compaction_cost(live: int, seed: int) -> None:
    """CPU of one compaction of an index of ``live`` members and as many stale entries (the
    trigger point), min of 3: the pause it makes, and per drop amortised."""
    rng = random.Random(seed)
    best = float("inf")
    for _ in range(3):
        positions = IndexedPositions()
        for e in range(2 * live):
            positions.add(T0 + rng.randrange(60_000, HOUR_MS), 1 + e // 50_000, e % 50_000)
        for e in rng.sample(range(2 * live), live):
            members = positions.members[1 + e // 50_000]
            members.remove(e % 50_000)         # drop without triggering: time compact() alone
            positions.count -= 1
        t = time.process_time()
        positions.compact()
        best = min(best, time.process_time() - t)
        assert positions.indexed == positions.count == live
    print(f"  one compaction of {2 * live:,} slots ({live:,} live): {best * 1e3:.1f} ms CPU, "
          f"{best / (2 * live) * 1e6:.2f} us per slot, {best / live * 1e6:.2f} us per drop amortised")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--live", type=int, default=100_000)
    ap.add_argument("--drops", type=int, default=1_000_000)
    ap.add_argument("--tracker", choices=("in-memory", "bucket"), default="in-memory")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    run(args.tracker, args.live, args.drops, args.seed)
    if hasattr(IndexedPositions, "compact"):
        compaction_cost(args.live, args.seed)


if __name__ == "__main__":
    main()
