"""Topic compaction: the latest value of every key, read by ``read_compacted`` consumers and readers.

Theory of operation
-------------------
One :class:`TopicCompaction` per loaded topic (``Topic.compaction``). A run (admin
``PUT .../compaction``, or automatically when the bytes written since the last horizon pass the
``compactionThreshold`` policy) reads the ledger from its first entry to the last confirmed
one at the start of the run (the *horizon*), metadata only, and keeps, for every message key
(``partition_key``), the position of its latest message; a key whose latest message has a null
value (``null_value``, a tombstone) is dropped, and messages without a key are not part of
the compacted view (Pulsar's rules). The result -- the horizon and the kept positions -- is
written to the metadata store (kind ``"compaction"``, key the topic) before it is used, so a
restart keeps it.

The compacted view is a filter over the topic's own ledger, not a copy: a read_compacted
subscription skips (and acknowledges) every entry at or before the horizon that is not kept
(:meth:`compacted_out`, asked by the dispatcher); entries after the horizon are all delivered.
The ``__compaction`` cursor (Pulsar's name) holds the ledger from its first kept entry on, so
trimming never deletes what the view still serves; it is not a subscription.

A batch is kept whole when any of its messages is the latest value of its key (a compressed
batch is always kept, its keys are not read). Status for ``GET .../compaction``: NOT_RUN,
RUNNING, SUCCESS, ERROR (with ``lastError``), as Pulsar's LongRunningProcessStatus.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from broker.subscriptions.dispatchers.cursors import before
from protocol import pulsar_pb as pb
from protocol.errors import ProtocolError
from protocol.metadata import iter_batch, parse_metadata, split_entry
from storage.ledger import ManagedLedger
from storage.metadata import MetadataStore
from storage.positions import Position
from storage.to_the_end import finish

__all__ = ["COMPACTION_CURSOR", "KIND", "TopicCompaction"]

log = logging.getLogger("horae.compaction")

KIND = "compaction"
COMPACTION_CURSOR = "__compaction"
_READ_BATCH = 256
_READ_BYTES = 8 * 1024 * 1024


class CompactedTopic(Protocol):
    """What compaction asks of its topic (:class:`broker.topics.topic.Topic`)."""

    full: str

    @property
    def serving(self) -> bool:
        """Neither fenced nor closed."""
        ...


    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...


class TopicCompaction:
    """Compaction state and runs of one topic (see the module docstring)."""

    def __init__(self, topic: CompactedTopic, metadata: MetadataStore) -> None:
        self.topic = topic
        self._md = metadata
        self.status = "NOT_RUN"
        self.last_error = ""
        self.horizon: Position | None = None
        self.kept: frozenset[Position] = frozenset()
        self._task: asyncio.Task[None] | None = None

    async def load(self) -> None:
        """The last compaction's result (topic load)."""
        rec = await self._md.get(KIND, self.topic.full)
        if rec and rec.get("horizon"):
            self.horizon = Position(*rec["horizon"])
            self.kept = frozenset(Position(lid, eid) for lid, eid in rec.get("kept", []))

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def compacted_out(self, pos: Position) -> bool:
        """A read_compacted reader skips *pos* (superseded, a tombstone, or keyless)."""
        horizon = self.horizon
        return horizon is not None and pos <= horizon and pos not in self.kept

    def status_doc(self) -> dict[str, str]:
        return {"status": self.status, "lastError": self.last_error}

    def trigger(self) -> bool:
        """Start a run; False when one is already running."""
        if self.running:
            return False
        self.status = "RUNNING"
        self.last_error = ""
        self._task = self.topic.loop.create_task(self._run())
        return True

    def maybe_trigger(self, threshold: int) -> None:
        """Housekeeping: compact when the bytes since the horizon exceed *threshold* (> 0)."""
        if threshold <= 0 or self.running:
            return
        ledger = self.topic.ledger
        last = ledger.last_confirmed
        if last is None or (self.horizon is not None and last <= self.horizon):
            return
        entries = ledger.number_of_entries
        if not entries:
            return
        first = ledger.first_position
        since = entries if self.horizon is None or first is None or self.horizon < first \
            else ledger.entries_between(self.horizon, last)
        if ledger.total_size_bytes * since / entries > threshold:
            self.trigger()

    async def close(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        try:
            horizon, kept = await self._compact()
            if horizon is not None:
                # To its end even if the topic's close cancels the run meanwhile: the record's
                # put in the metadata thread goes on regardless, and a record of kept entries
                # that no cursor holds lets a trim delete the values it names.
                await finish(self._record(horizon, kept))
            self.status = "SUCCESS"
        except asyncio.CancelledError:
            self.status, self.last_error = "ERROR", "cancelled: the topic was closed"
            raise
        except Exception as exc:
            log.exception("compaction of %s failed", self.topic.full)
            self.status, self.last_error = "ERROR", f"{type(exc).__name__}: {exc}"

    async def _compact(self) -> tuple[Position | None, set[Position]]:
        ledger = self.topic.ledger
        end = ledger.last_confirmed
        pos = ledger.first_position
        if end is None or pos is None:
            return None, set()
        latest: dict[str, tuple[Position, bool]] = {}  # key -> (position, is tombstone)
        always: set[Position] = set()
        while pos <= end and self.topic.serving:
            entries = await ledger.read_entries(pos, _READ_BATCH, _READ_BYTES)
            if not entries:
                break
            for entry in entries:
                if entry.position > end:
                    break
                self._scan(entry.position, entry.data, latest, always)
            pos = ledger.next_position(entries[-1].position)
        kept = {p for p, tombstone in latest.values() if not tombstone} | always
        return end, kept

    @staticmethod
    def _scan(pos: Position, data: bytes, latest: dict[str, tuple[Position, bool]],
              always: set[Position]) -> None:
        try:
            md = parse_metadata(data)
        except ProtocolError:
            return
        if not md.HasField("num_messages_in_batch"):
            if md.HasField("partition_key"):
                _, payload = split_entry(data)
                latest[md.partition_key] = (pos, md.null_value or len(payload) == 0)
            return
        if md.compression != pb.NONE:
            always.add(pos)
            return
        _, payload = split_entry(data)
        try:
            for single, value in iter_batch(payload, md.num_messages_in_batch):
                if single.HasField("partition_key"):
                    latest[single.partition_key] = (pos, single.null_value or not value)
        except ProtocolError:
            always.add(pos)

    async def _record(self, horizon: Position, kept: set[Position]) -> None:
        frozen = frozenset(kept)
        # Positions are tuples (JSON lists); the store sorts the set in its thread.
        await self._md.put(KIND, self.topic.full, {"horizon": horizon, "kept": frozen})
        self.horizon, self.kept = horizon, frozen
        await self._hold(kept, horizon)

    async def _hold(self, kept: set[Position], horizon: Position) -> None:
        """Keep the ledger from the first kept entry on (``__compaction`` cursor)."""
        ledger = self.topic.ledger
        cursor = ledger.cursors.get(COMPACTION_CURSOR)
        if cursor is None:
            cursor = await ledger.open_cursor(COMPACTION_CURSOR, initial_position="earliest")
        first_kept = min(kept) if kept else None
        target = horizon if first_kept is None else _before(ledger, first_kept)
        if target is not None and target > cursor.mark_delete_position:
            cursor.mark_delete(target)


def _before(ledger: ManagedLedger, pos: Position) -> Position | None:
    """The position before *pos*, or None when nothing of the ledger lies before it."""
    first = ledger.first_position
    if first is None or pos <= first or pos.entry_id <= 0:
        return None
    return before(pos)
