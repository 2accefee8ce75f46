"""What the bucket tracker needs from its owners: a cursor and a snapshot store.

Theory of operation
-------------------
The bucket tracker is created by a subscription and given narrow views instead of the objects
themselves (storage's ``ManagedCursor`` and ``SnapshotStore`` satisfy these protocols; tests
pass fakes):

- :class:`BucketCursor`: the subscription's durable cursor. The tracker reads the mark-delete
  position, the read position and per-position ack state, and keeps its bucket keys in the
  cursor properties (persisted by ``flush``). It never moves the cursor; the one ack it makes
  is a leftover cancel journal's, applied once at recovery (``delete_entry_ids``,
  :mod:`broker.delayed.cancel_journal`).
- :class:`SnapshotStorage`: create / load / delete bucket snapshots (part 0 = metadata, parts
  1..N = segments); every call is IO and awaited off the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pyroaring import BitMap

from storage.positions import Position


class BucketCursor(Protocol):
    """The part of a durable cursor the bucket tracker uses."""

    @property
    def mark_delete_position(self) -> Position: ...

    @property
    def read_position(self) -> Position: ...

    @property
    def properties(self) -> dict[str, str]: ...

    def set_property(self, key: str, value: str) -> None: ...

    def remove_property(self, key: str) -> None: ...

    def is_deleted(self, pos: Position) -> bool: ...

    def delete_entry_ids(self, ledger_id: int, entry_ids: BitMap) -> None: ...

    async def flush(self) -> None: ...


class SnapshotStorage(Protocol):
    """The part of storage's ``SnapshotStore`` the bucket tracker uses."""

    async def create(self, metadata: bytes, segments: list[bytes], summary: bytes = b"") -> int:
        """A new snapshot, durable on return; ``summary`` is kept beside it (advisory)."""
        ...

    async def summaries(self) -> dict[int, bytes]:
        """The summary of every live snapshot that has one, in one read."""
        ...

    async def add_summaries(self, items: Sequence[tuple[int, bytes]]) -> None:
        """Summaries of snapshots written without one."""
        ...

    async def load_metadata(self, snapshot_id: int) -> bytes: ...

    async def load_segment(self, snapshot_id: int, index: int) -> bytes: ...

    async def load_parts(self, parts: Sequence[tuple[int, int]]) -> list[bytes | Exception]:
        """Parts ``(snapshot id, index)`` (0 = metadata) in one IO job; each result the
        bytes or the error its own load would raise."""
        ...

    async def delete(self, snapshot_id: int) -> None: ...

    def size_bytes(self, snapshot_id: int) -> int: ...
