"""A replace-by-key schedule as bytes: a load reads it plus only the log after it.

Theory of operation
-------------------
:func:`capture` copies a :class:`~broker.delayed.replace_by_key.KeyedSchedule` on the event
loop (``latest``, ``superseded`` and the last position recorded, ``recorded_up_to``: the
snapshot *covers* the log up to it); :func:`encode` turns the copy into bytes and
:func:`decode` back, pure CPU work for an executor thread; :func:`restore` puts a decoded
snapshot into an empty schedule.

Why a snapshot older than the log is always safe: entries are recorded in log order, so the
state after recording everything up to ``recorded_up_to`` and then the entries after it is the
state after recording the whole log, provided the tail is read from the position after
``recorded_up_to`` (recording an entry twice would supersede it). What the snapshot holds
that every subscription acknowledged since is forgotten by the next ``prune`` as it would have
been. So the order of writing is: the snapshot, durable, then its id and covered position where
the loader looks (a crash in between leaves the previous snapshot in force, or none: the full
read of the backlog).

Format (little-endian): ``b"HKS1"``, covered position (u64 packed, or -1 as i64), counts
(replaced, tombstones), the number of keys n and three u64 columns of n (key hash high half,
low half, packed position), the number of ledgers m and per ledger (u64 ledger id, u32 length,
a portable roaring bitmap).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from array import array
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Final, Protocol

from pyroaring import BitMap

from broker.delayed.ports import SnapshotStorage
from broker.delayed.replace_by_key import KeyedSchedule

log = logging.getLogger("horae.delayed.keyed_snapshot")

__all__ = ["KeyedCapture", "KeyedSnapshots", "SnapshotFormatError", "capture", "decode",
           "encode", "restore"]

MAGIC: Final = b"HKS1"
_HEAD: Final = struct.Struct("<4sqQQQ")
_LEDGER: Final = struct.Struct("<QI")
_COUNT: Final = struct.Struct("<Q")
_LOW64: Final = (1 << 64) - 1


class SnapshotFormatError(ValueError):
    """The bytes are not a keyed schedule snapshot (the loader then reads the whole backlog)."""


@dataclass(frozen=True, slots=True)
class KeyedCapture:
    """A schedule at one instant: what :func:`encode` writes and :func:`decode` reads."""

    recorded_up_to: int
    latest: dict[int, int]
    superseded: dict[int, BitMap]
    replaced_total: int
    tombstones_total: int


def capture(schedule: KeyedSchedule) -> KeyedCapture:
    """Copy the schedule's state (on the event loop: the copy is the consistent instant)."""
    latest, superseded = schedule.export()
    return KeyedCapture(schedule.recorded_up_to, latest, superseded, schedule.replaced_total,
                        schedule.tombstones_total)


def encode(state: KeyedCapture) -> bytes:
    hi = array("Q", (h >> 64 for h in state.latest))
    lo = array("Q", (h & _LOW64 for h in state.latest))
    packed = array("Q", state.latest.values())
    parts = [_HEAD.pack(MAGIC, state.recorded_up_to, state.replaced_total,
                        state.tombstones_total, len(packed)),
             hi.tobytes(), lo.tobytes(), packed.tobytes(), _COUNT.pack(len(state.superseded))]
    for ledger_id, bm in sorted(state.superseded.items()):
        raw = bm.serialize()
        parts.append(_LEDGER.pack(ledger_id, len(raw)))
        parts.append(raw)
    return b"".join(parts)


def decode(data: bytes) -> KeyedCapture:
    try:
        magic, up_to, replaced, tombstones, n = _HEAD.unpack_from(data, 0)
        if magic != MAGIC:
            raise SnapshotFormatError("not a keyed schedule snapshot")
        at = _HEAD.size
        cols = []
        for _ in range(3):
            col = array("Q")
            col.frombytes(data[at:at + 8 * n])
            if len(col) != n:
                raise SnapshotFormatError("keyed schedule snapshot cut short")
            cols.append(col)
            at += 8 * n
        (m,) = _COUNT.unpack_from(data, at)
        at += _COUNT.size
        superseded: dict[int, BitMap] = {}
        for _ in range(m):
            ledger_id, size = _LEDGER.unpack_from(data, at)
            at += _LEDGER.size
            if at + size > len(data):
                raise SnapshotFormatError("keyed schedule snapshot cut short")
            superseded[ledger_id] = BitMap.deserialize(data[at:at + size])
            at += size
    except (struct.error, ValueError) as exc:
        if isinstance(exc, SnapshotFormatError):
            raise
        raise SnapshotFormatError(f"unreadable keyed schedule snapshot: {exc}") from exc
    hi, lo, packed = cols
    latest = {(h << 64) | low: p for h, low, p in zip(hi, lo, packed, strict=True)}
    return KeyedCapture(up_to, latest, superseded, replaced, tombstones)


def restore(schedule: KeyedSchedule, state: KeyedCapture) -> None:
    """Put a decoded snapshot into an empty schedule; then record the log after
    ``state.recorded_up_to`` and prune as after a full read."""
    schedule.restore(state.latest, state.superseded, state.recorded_up_to)
    schedule.replaced_total = state.replaced_total
    schedule.tombstones_total = state.tombstones_total


#: Metadata kind of the record naming a topic's schedule snapshot and the position it covers.
RECORD_KIND: Final = "keyed-schedule"

#: Least seconds between two snapshots of one topic's schedule.
SNAPSHOT_INTERVAL_S: Final = 60.0


class Records(Protocol):
    async def get(self, kind: str, key: str) -> dict[str, Any] | None: ...

    async def put(self, kind: str, key: str, value: Mapping[str, Any]) -> None: ...

    async def delete(self, kind: str, key: str) -> bool: ...


class KeyedSnapshots:
    """Writes a topic's schedule snapshot now and then, and reads it back at load.

    Writing: the snapshot is created (durable) in the snapshot store, then the record
    ``(RECORD_KIND, topic) = {"snapshot_id", "covered"}`` is put, then the previous snapshot is
    deleted. Killed after the create: the record still names the previous snapshot (the new one
    is left over, one file); killed after the put: the previous one is left over. Either way the
    load reads a snapshot that is durable, plus the log after what it covers."""

    def __init__(self, snapshots: SnapshotStorage, records: Records, topic: str, *,
                 loop: asyncio.AbstractEventLoop, executor: Executor | None = None,
                 interval_s: float = SNAPSHOT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._snapshots = snapshots
        self._records = records
        self._topic = topic
        self._loop = loop
        self._executor = executor
        self._interval_s = interval_s
        self._clock = clock
        self._current: int | None = None        # snapshot id the record names
        self._saved_up_to = -1
        self._last_save = clock()
        self._task: asyncio.Task[None] | None = None

    async def load(self, schedule: KeyedSchedule) -> int | None:
        """Restore the recorded snapshot into ``schedule`` (empty); the packed position it
        covers, or None (no snapshot, or unreadable: read the whole backlog)."""
        try:
            record = await self._records.get(RECORD_KIND, self._topic)
            if record is None:
                return None
            snapshot_id = int(record["snapshot_id"])
            data = await self._snapshots.load_metadata(snapshot_id)
            state = await self._loop.run_in_executor(self._executor, decode, data)
        except Exception:
            log.exception("%s: keyed schedule snapshot unreadable; reading the backlog",
                          self._topic)
            return None
        if state.recorded_up_to != int(record.get("covered", state.recorded_up_to)):
            log.error("%s: keyed schedule snapshot %d does not cover what its record says; "
                      "reading the backlog", self._topic, snapshot_id)
            return None
        restore(schedule, state)
        self._current = snapshot_id
        self._saved_up_to = state.recorded_up_to
        return state.recorded_up_to

    def maybe_save(self, schedule: KeyedSchedule) -> None:
        """Housekeeping: start a snapshot if the interval passed and something was recorded
        since the last one (one at a time)."""
        if (self._task is not None and not self._task.done()) or \
                schedule.recorded_up_to == self._saved_up_to or \
                self._clock() - self._last_save < self._interval_s:
            return
        self._last_save = self._clock()
        self._task = self._loop.create_task(self.save(schedule))

    async def save(self, schedule: KeyedSchedule) -> None:
        state = capture(schedule)               # the instant, on the loop
        try:
            data = await self._loop.run_in_executor(self._executor, encode, state)
            snapshot_id = await self._snapshots.create(data, [])
            await self._records.put(RECORD_KIND, self._topic,
                                    {"snapshot_id": snapshot_id, "covered": state.recorded_up_to})
        except Exception:
            log.exception("%s: writing the keyed schedule snapshot failed", self._topic)
            return
        previous, self._current = self._current, snapshot_id
        self._saved_up_to = state.recorded_up_to
        if previous is not None:
            with contextlib.suppress(Exception):
                await self._snapshots.delete(previous)

    async def close(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
