"""Durable tracker-level cancels: the bucket tracker's CANCEL indexes in their own snapshot.

Theory of operation
-------------------
PIP-423 records a cancel whose target is not in memory as a CANCEL index in the last mutable
bucket, persisted when that bucket is sealed. The mutable bucket is not persisted before it is
sealed, so a cancel was lost on restart when its target was still in the mutable bucket, when
no later bucket was sealed, or when the bucket carrying the CANCEL finished before its target's
bucket. Horae therefore keeps every live cancel (a :class:`~broker.delayed.cancels.CancelBook`,
time-ordered by deliver-time slot) in one snapshot of its own, rewritten whenever it changes:

- the snapshot (metadata only: :meth:`CancelBook.encode`) is created, then its id is put in the
  cursor property ``#pulsar.internal.delayed.bucket_cancels`` (the bucket prefix, so a
  subscription with only cancels still recovers its tracker on load) and the cursor is flushed;
  only then is the previous snapshot deleted. A crash at any point leaves the old or the new
  set; a leftover snapshot is removed with the subscription's residual snapshots;
- writes are coalesced: one in flight at a time, the next one covers every change made
  meanwhile. :meth:`sync` returns once a write that started after the caller's change is
  durable (the REST cancel answers only then: nothing acknowledged before durable);
- a failed write is retried with the same capped backoff as bucket snapshots; an empty book
  removes the property and the snapshot;
- recovery (:meth:`recover`) reads the set back before anything is handed out; the tracker
  applies it first.

Runs on the event loop; encoding is CPU only (roaring serialization, ~ms per million cancels),
all IO is awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from broker.delayed.bucket_records import BUCKET_KEY_PREFIX
from broker.delayed.bucket_segments import RetryDelays
from broker.delayed.cancels import CancelBook, CancelSet
from broker.delayed.ports import BucketCursor, SnapshotStorage
from storage.errors import SnapshotNotFoundError

log = logging.getLogger("horae.delayed.cancel_journal")

#: Cursor property naming the cancel snapshot (parse_bucket_key ignores it).
CANCELS_KEY: Final = f"{BUCKET_KEY_PREFIX}_cancels"


class CancelJournal:
    """Keeps a :class:`CancelBook` durable in one snapshot (module docstring)."""

    def __init__(self, *, book: CancelBook, cursor: BucketCursor, store: SnapshotStorage,
                 loop: asyncio.AbstractEventLoop, retry: RetryDelays) -> None:
        self._book = book
        self._cursor = cursor
        self._store = store
        self._loop = loop
        self._retry = retry
        self._snapshot_id: int | None = None
        self._changes = 0               # bumped by every change of the book
        self._durable = 0               # changes covered by the durable snapshot
        self._writer: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = asyncio.Event()
        self.write_failures = 0

    def changed(self) -> None:
        """The book changed: make it durable (in the background)."""
        self._changes += 1
        if self._writer is None and not self._closing.is_set():
            self._idle.clear()
            self._writer = self._loop.create_task(self._write_loop())

    async def sync(self) -> None:
        """Return once every change made so far is durable (or the journal is closed)."""
        wanted = self._changes
        while self._durable < wanted and not self._closing.is_set():
            if self._writer is None:
                self.changed()
            await self._idle.wait()

    async def _write_loop(self) -> None:
        delay = self._retry.create_first_s
        try:
            while self._durable < self._changes and not self._closing.is_set():
                covered = self._changes
                try:
                    await self._write_once()
                except Exception:
                    self.write_failures += 1
                    log.exception("persisting delayed-message cancels failed; retrying in "
                                  "%.0f s", delay)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._closing.wait(), delay)
                    delay = min(delay * 2, self._retry.create_max_s)
                    continue
                delay = self._retry.create_first_s
                self._durable = covered
        finally:
            self._writer = None
            self._idle.set()

    async def _write_once(self) -> None:
        old = self._snapshot_id
        if len(self._book) == 0:
            if old is None:
                return
            self._cursor.remove_property(CANCELS_KEY)
            await self._cursor.flush()
            self._snapshot_id = None
        else:
            snapshot_id = await self._store.create(self._book.encode(), [])
            self._cursor.set_property(CANCELS_KEY, str(snapshot_id))
            await self._cursor.flush()
            self._snapshot_id = snapshot_id
        if old is not None:
            try:
                await self._store.delete(old)
            except Exception:
                log.exception("deleting the old cancel snapshot %d failed", old)

    async def recover(self) -> CancelSet:
        """The cancels persisted by the previous run (empty if none or unreadable)."""
        value = self._cursor.properties.get(CANCELS_KEY)
        if value is None or not value.isdigit():
            return CancelSet()
        snapshot_id = int(value)
        try:
            recovered = CancelSet.decode(await self._store.load_metadata(snapshot_id))
        except SnapshotNotFoundError:
            log.warning("delayed-message cancel snapshot %d is gone", snapshot_id)
            self._cursor.remove_property(CANCELS_KEY)
            return CancelSet()
        self._snapshot_id = snapshot_id
        return recovered

    async def delete(self) -> None:
        """Remove the property and the snapshot (the subscription is going away)."""
        self._closing.set()
        await self._idle.wait()
        if CANCELS_KEY in self._cursor.properties:
            self._cursor.remove_property(CANCELS_KEY)
        if self._snapshot_id is not None:
            await self._store.delete(self._snapshot_id)
            self._snapshot_id = None

    async def close(self) -> None:
        """Finish the write in flight (a failing store gives up at once) and stop."""
        if self._writer is not None and self.write_failures == 0:
            await self._idle.wait()
        self._closing.set()
        await self._idle.wait()

    @property
    def snapshot_id(self) -> int | None:
        return self._snapshot_id
