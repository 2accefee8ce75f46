"""Group commit of transaction-log records: many records, one log entry, one fsync.

Theory of operation: every record of the transaction log (a coordinator state change, a
pending acknowledgement) is answered only once it is durable. Written one entry each, N
concurrent transactional acknowledgements are N entries of the log's ledger. With batching on
(Pulsar's ``transactionLogBatchedWriteEnabled`` for the coordinator's records,
``transactionPendingAckBatchedWriteEnabled`` for pending acknowledgements) a
:class:`RecordBatcher` gathers the records that arrive while a write of its own is in flight and
writes them, when that write is durable, as ONE entry (``{"op": "batch", "recs": [...]}``;
a group of one is written as the record itself) whose durability answers all of them:

- nothing waits that would not have waited anyway: a record that finds no write of its batcher
  in flight, or one queued in the same loop iteration (the storage has not taken it yet, so
  they share its fsync), is queued to the ledger at once, never held for a timer; a record
  arriving while a write is with the storage joins the group written when that write is
  durable;
- a group is written as soon as it holds ``MaxRecords`` records or ``MaxSize`` bytes, and when
  its first record has waited ``MaxDelayInMillis`` for the write in flight (then the two writes
  are in flight together; the storage's own group commit may still put them under one fsync);
- an entry is durable whole or not at all (the segment store checks each entry's CRC), so a
  group is either all durable before any of its records is answered, or none is answered and
  none is replayed (``tests/storage/test_storage_crashfs_transactions.py`` crashes between);
- a failed write fails every record of its group with the storage's error;
- records of one batcher reach the ledger in the order they were appended.

:meth:`unpack` turns a stored entry back into its records for the replay.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage.positions import Position

__all__ = ["BatchSettings", "RecordBatcher", "unpack"]

BATCH_OP = "batch"
_PREFIX = b'{"op":"batch","recs":['
_SUFFIX = b"]}"


@dataclass(frozen=True)
class BatchSettings:
    """One batcher's limits (Pulsar's ``...BatchedWrite...`` settings; on by default, as the
    broker's configuration)."""

    enabled: bool = True
    max_records: int = 512
    max_size: int = 4 * 1024 * 1024
    max_delay_ms: float = 1.0


Write = Callable[[bytes], "asyncio.Future[Position]"]
"""Queue one entry (the ledger's ``append``): its future resolves once it is durable."""


class RecordBatcher:
    """Gathers encoded records into entries written by *write* (module docstring)."""

    def __init__(self, write: Write, settings: BatchSettings,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._write = write
        self._settings = settings
        self._loop = loop
        self._records: list[bytes] = []
        self._futures: list[asyncio.Future[Position]] = []
        self._bytes = 0
        self._in_flight: set[asyncio.Future[Position]] = set()
        #: a write was queued in this loop iteration: the storage has not taken it yet, so
        #: more entries now share its fsync anyway (written at once, not gathered)
        self._window = False
        self._timer: asyncio.TimerHandle | None = None
        #: entries written and the records they held (figures)
        self.entries_written = 0
        self.records_written = 0

    @property
    def settings(self) -> BatchSettings:
        return self._settings

    def submit(self, data: bytes) -> asyncio.Future[Position]:
        """Queue *data* (one encoded record); the future resolves with its entry's position
        once that entry is durable. Called on the loop; never waits itself."""
        if not self._settings.enabled or self._window or not self._in_flight:
            return self._issue(data, 1)
        fut: asyncio.Future[Position] = self._loop.create_future()
        self._records.append(data)
        self._futures.append(fut)
        self._bytes += len(data)
        settings = self._settings
        if len(self._records) >= settings.max_records or self._bytes >= settings.max_size:
            self._flush()
        elif self._timer is None and settings.max_delay_ms > 0:
            self._timer = self._loop.call_later(settings.max_delay_ms / 1000.0, self._flush)
        return fut

    def _issue(self, data: bytes, records: int) -> asyncio.Future[Position]:
        fut = self._write(data)
        if not self._window:
            self._window = True
            self._loop.call_soon(self._close_window)
        self._in_flight.add(fut)
        fut.add_done_callback(self._written)
        self.entries_written += 1
        self.records_written += records
        return fut

    def _close_window(self) -> None:
        self._window = False

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._records:
            return
        records, futures = self._records, self._futures
        self._records, self._futures, self._bytes = [], [], 0
        data = records[0] if len(records) == 1 else _PREFIX + b",".join(records) + _SUFFIX
        written = self._issue(data, len(records))
        written.add_done_callback(lambda w: _settle(w, futures))

    def _written(self, fut: asyncio.Future[Position]) -> None:
        self._in_flight.discard(fut)
        if self._records and not self._in_flight:
            self._flush()   # what gathered during the writes goes in one entry now

    async def drain(self) -> None:
        """Write what is gathered at once and wait for every write in flight (no timer left
        behind); their errors are their records' own."""
        self._flush()
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)


def _settle(written: asyncio.Future[Position], futures: list[asyncio.Future[Position]]) -> None:
    exc = asyncio.CancelledError() if written.cancelled() else written.exception()
    for fut in futures:
        if fut.done():
            continue
        if exc is None:
            fut.set_result(written.result())
        else:
            fut.set_exception(exc)


def unpack(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The records one stored entry holds (a group or a single record)."""
    if record.get("op") != BATCH_OP:
        return [record]
    recs = record.get("recs")
    if not isinstance(recs, list):
        return []
    return [r for r in recs if isinstance(r, dict)]


def encode(record: Any) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()
