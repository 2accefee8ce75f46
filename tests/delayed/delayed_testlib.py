"""Fakes for the delayed-delivery tests: a manual clock/loop, a cursor, a snapshot store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from broker.delayed.bucket import BucketDelayedDeliveryTracker
from broker.delayed.bucket_segments import RetryDelays
from storage.errors import SnapshotNotFoundError
from storage.positions import Position

T0 = 1_700_000_000_000     # an epoch-ms "now" for tests



class FakeHandle:
    def __init__(self, loop: FakeLoop, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False
        self._loop = loop

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """A manual clock that is both the tracker's ``clock_ms`` and its timer loop."""

    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms
        self.handles: list[FakeHandle] = []
        self.call_at_count = 0

    def clock_ms(self) -> int:
        return self.now_ms

    def time(self) -> float:
        return self.now_ms / 1000.0

    def call_at(self, when: float, callback: Callable[[], object], /) -> Any:
        self.call_at_count += 1
        handle = FakeHandle(self, when, callback)
        self.handles.append(handle)
        return handle

    @property
    def pending(self) -> list[FakeHandle]:
        return [h for h in self.handles if not h.cancelled]

    def advance_to(self, now_ms: int) -> int:
        """Move the clock, firing due timers in time order. Returns how many fired."""
        fired = 0
        while True:
            due = [h for h in self.pending if h.when <= now_ms / 1000.0 + 1e-9]
            if not due:
                break
            handle = min(due, key=lambda h: h.when)
            handle.cancelled = True
            self.now_ms = max(self.now_ms, round(handle.when * 1000))
            handle.callback()
            fired += 1
        self.now_ms = now_ms
        return fired

    def advance(self, ms: int) -> int:
        return self.advance_to(self.now_ms + ms)


class ManualClock:
    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class FakeCursor:
    """The part of storage's ManagedCursor the bucket tracker uses."""

    def __init__(self) -> None:
        self._properties: dict[str, str] = {}
        self.mark_delete_position = Position(-1, -1)
        self.read_position = Position(-1, -1)
        self.revision = 0
        self.deleted: set[tuple[int, int]] = set()
        self.flushes = 0

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def set_property(self, key: str, value: str) -> None:
        self._properties[key] = value

    def remove_property(self, key: str) -> None:
        self._properties.pop(key, None)

    def is_deleted(self, pos: Position) -> bool:
        return pos <= self.mark_delete_position or (pos.ledger_id, pos.entry_id) in self.deleted

    def delete_entry_ids(self, ledger_id: int, entry_ids: Any) -> None:
        self.deleted.update((ledger_id, e) for e in entry_ids)

    async def flush(self) -> None:
        self.flushes += 1


async def parts_one_by_one(store: Any, parts: list[tuple[int, int]]) -> list[bytes | Exception]:
    """``load_parts`` through a store's own ``load_metadata``/``load_segment``, one part after
    another (fakes and wrappers that gate, fail or count single reads)."""
    out: list[bytes | Exception] = []
    for snapshot_id, index in parts:
        try:
            if index == 0:
                out.append(await store.load_metadata(snapshot_id))
            else:
                out.append(await store.load_segment(snapshot_id, index))
        except Exception as exc:
            out.append(exc)
    return out


class FakeSnapshotStore:
    """SnapshotStore in a dict; ``fail_create``/``fail_load`` inject errors."""

    def __init__(self) -> None:
        self.snapshots: dict[int, list[bytes]] = {}
        self._next = 1000
        self.fail_create = False
        self.fail_load = False
        self.loads: list[tuple[int, int]] = []
        self.summary_log: dict[int, bytes] = {}
        self.fail_summaries = False

    async def create(self, metadata: bytes, segments: list[bytes], summary: bytes = b"") -> int:
        await asyncio.sleep(0)
        if self.fail_create:
            raise OSError("injected create failure")
        self._next += 1
        self.snapshots[self._next] = [metadata, *segments]
        if summary:
            self.summary_log[self._next] = summary
        return self._next

    async def summaries(self) -> dict[int, bytes]:
        await asyncio.sleep(0)
        if self.fail_summaries:
            raise OSError("injected summaries failure")
        return {k: v for k, v in self.summary_log.items() if k in self.snapshots}

    async def add_summaries(self, items: list[tuple[int, bytes]]) -> None:
        await asyncio.sleep(0)
        self.summary_log.update(items)

    async def _part(self, snapshot_id: int, index: int) -> bytes:
        await asyncio.sleep(0)
        if self.fail_load:
            raise OSError("injected load failure")
        try:
            parts = self.snapshots[snapshot_id]
        except KeyError:
            raise SnapshotNotFoundError(str(snapshot_id)) from None
        if not 0 <= index < len(parts):
            raise SnapshotNotFoundError(f"{snapshot_id}/{index}")
        self.loads.append((snapshot_id, index))
        return parts[index]

    async def load_metadata(self, snapshot_id: int) -> bytes:
        return await self._part(snapshot_id, 0)

    async def load_segment(self, snapshot_id: int, index: int) -> bytes:
        if index < 1:
            raise SnapshotNotFoundError(str(index))
        return await self._part(snapshot_id, index)

    async def load_parts(self, parts: list[tuple[int, int]]) -> list[bytes | Exception]:
        return await parts_one_by_one(self, parts)

    def ids(self) -> list[int]:
        return sorted(self.snapshots)

    async def delete(self, snapshot_id: int) -> None:
        await asyncio.sleep(0)
        self.snapshots.pop(snapshot_id, None)

    def size_bytes(self, snapshot_id: int) -> int:
        try:
            return sum(len(p) for p in self.snapshots[snapshot_id])
        except KeyError:
            raise SnapshotNotFoundError(str(snapshot_id)) from None


class DueCounter:
    """An ``on_due`` callback that counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


def bucket_tracker(cursor: FakeCursor | None = None, store: FakeSnapshotStore | None = None,
                   clock: ManualClock | None = None, *, min_index: int = 10,
                   step_ms: int = 1000, per_segment: int = 4, max_buckets: int = -1,
                   on_due: DueCounter | None = None,
                   retry: RetryDelays | None = None) -> BucketDelayedDeliveryTracker:
    """A strict 1 ms bucket tracker on the running loop, small buckets and segments by
    default (a bucket sealed at 10 entries, segments of 1 s and 4 indexes)."""
    return BucketDelayedDeliveryTracker(
        cursor=cursor or FakeCursor(), snapshots=store or FakeSnapshotStore(), tick_time_ms=1,
        strict=True, on_due=on_due or DueCounter(), loop=asyncio.get_running_loop(),
        clock_ms=clock or ManualClock(), min_index_count_per_bucket=min_index,
        time_step_per_segment_ms=step_ms, max_indexes_per_segment=per_segment,
        max_num_buckets=max_buckets, retry=retry or RetryDelays(load_s=0.01))
