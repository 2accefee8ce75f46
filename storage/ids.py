"""Store-wide id allocator for ledgers and bucket snapshots (Pulsar stores both as ledgers).

Theory of operation: ``<root>/LEDGER_ID`` holds a high-water mark H (decimal text, written
with FileOps.atomic_write). Every id ever handed to a durable object is < H. allocate() is
cheap and in memory (the event loop calls it on rollover); ensure_durable(id) is called by
whoever is about to make the id durable (the writer thread before creating a segment, the
snapshot store before writing a snapshot) and raises H by a block when needed. On open the
next id is max(H, every id found on disk + 1), so ids are never reused across restarts even
if the counter file were lost.
"""

from __future__ import annotations

import threading
from pathlib import Path

from storage.fileops import FileOps

ID_BLOCK = 1024


class IdAllocator:
    def __init__(self, ops: FileOps, path: Path, next_id: int, high_water: int) -> None:
        self._ops = ops
        self._path = path
        self._next = next_id
        self._high_water = high_water
        self._lock = threading.Lock()  # guards _next and _high_water (held for microseconds)
        self._write_lock = threading.Lock()  # one counter file write at a time

    @classmethod
    def load(cls, ops: FileOps, path: Path, max_seen: int) -> IdAllocator:
        """Blocking: read the counter and persist a fresh block above everything seen."""
        high_water = 0
        if path.exists():
            try:
                high_water = int(ops.read_file(path).decode("ascii").strip() or "0")
            except (ValueError, UnicodeDecodeError):
                high_water = 0  # a torn counter cannot be trusted; max_seen still bounds reuse
        allocator = cls(ops, path, max(high_water, max_seen + 1), high_water)
        allocator.ensure_durable(allocator._next + ID_BLOCK // 2)
        return allocator

    def allocate(self) -> int:
        with self._lock:
            value = self._next
            self._next += 1
            return value

    def ensure_durable(self, value: int) -> None:
        """Blocking (threads only): make sure the persisted high-water mark is above value.
        The file is written outside the allocation lock, so allocate() on the loop never
        waits for an fsync."""
        with self._write_lock:
            with self._lock:
                if value < self._high_water:
                    return
                high_water = max(value + 1, self._next) + ID_BLOCK
            self._ops.atomic_write(self._path, str(high_water).encode("ascii"))
            with self._lock:
                self._high_water = high_water

    @property
    def next_id(self) -> int:
        return self._next

    @property
    def high_water_hint(self) -> int:
        """The persisted high-water mark (unlocked read: a hint for when to raise it early)."""
        return self._high_water
