"""The durable transaction log: one managed ledger of the segment store, JSON records.

Theory of operation: every state change of a transaction that must survive a kill -9 is one
record appended here, and the command that caused it is answered only once the append is
durable (the ledger's group commit fsyncs it, as for any published entry). At start-up the
whole log is read back in order (:meth:`TransactionLog.records`) and replayed by the
coordinator and the pending-ack stores. Records (``op`` names the kind):

- ``new``: txn ``m``/``l`` opened at ``at`` (epoch ms) with a timeout of ``t`` ms;
- ``parts`` / ``subs``: partitions (topics) and subscriptions ([topic, name]) added to it;
- ``status``: its new status ``s`` (COMMITTING, ABORTING, COMMITTED, ABORTED);
- ``ack``: a pending acknowledgement on ``topic``/``sub``: ``cum`` (cumulative or not) and
  ``pos`` ([ledger, entry, ack set words or null], ...);
- ``unsub``: the subscription ``topic``/``sub`` was deleted: the ``ack`` records on it before
  this one are void (a subscription made again with its name starts without them);
- ``checkpoint``: written before a trim: the last sequence ``seq`` and ``topics``, every topic
  a transaction produced to;
- ``batch``: a group of the records above written as one entry (``recs``), see
  :mod:`broker.transactions.log_batch` (group commit of concurrent records).

A record that does not parse (it cannot: the ledger's CRC guards every entry) is skipped with a
warning rather than stopping the broker.

The log is trimmed by whole ledgers (:meth:`TransactionLog.trim`): the coordinator keeps every
ledger from the one holding the first record of its oldest unfinished transaction; what an
ended transaction wrote is needed by nobody after its end (topic markers and flushed cursors
carry the outcome).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

from broker.transactions.log_batch import BatchSettings, RecordBatcher, encode, unpack
from storage.ledger import ManagedLedger
from storage.positions import Position
from storage.store import SegmentStore

__all__ = ["LOG_LEDGER", "TransactionLog"]

log = logging.getLogger("horae.transactions")

#: The log's ledger name: no topic name (those start with a domain), so no listing shows it.
LOG_LEDGER = "__transactions/coordinator-log-0"
_READ_BATCH = 200


class TransactionLog:
    """Append-and-replay over one ledger."""

    def __init__(self, ledger: ManagedLedger, loop: asyncio.AbstractEventLoop | None = None,
                 log_batching: BatchSettings | None = None,
                 pending_ack_batching: BatchSettings | None = None) -> None:
        self._ledger = ledger
        self.records_appended = 0
        self.bytes_appended = 0
        loop = loop or asyncio.get_running_loop()
        #: the coordinator's records and the pending acknowledgements, each grouped (or not)
        #: by its own settings, as Pulsar's two buffered writers
        self.log_batcher = RecordBatcher(ledger.append, log_batching or BatchSettings(), loop)
        self.ack_batcher = RecordBatcher(ledger.append, pending_ack_batching or BatchSettings(),
                                         loop)

    @classmethod
    async def open(cls, store: SegmentStore, log_batching: BatchSettings | None = None,
                   pending_ack_batching: BatchSettings | None = None) -> TransactionLog:
        return cls(await store.open_ledger(LOG_LEDGER), asyncio.get_running_loop(),
                   log_batching, pending_ack_batching)

    async def append(self, record: Mapping[str, Any]) -> Position:
        """Append *record*; returns its position once it is durable (raises the storage error
        otherwise). Concurrent records may share one entry (:mod:`~broker.transactions.log_batch`)."""
        return await self.submit(record)

    def submit(self, record: Mapping[str, Any]) -> asyncio.Future[Position]:
        """Queue *record* now (on the loop, without waiting): the future resolves with its
        position once it is durable (or fails with the storage error)."""
        data = encode(record)
        # a subscription's delete follows its acknowledgements in the same writer, so the log
        # holds them in the order they were submitted
        batcher = self.ack_batcher if record.get("op") in ("ack", "unsub") else self.log_batcher
        self.records_appended += 1
        self.bytes_appended += len(data)
        return batcher.submit(data)

    @property
    def current_ledger_id(self) -> int:
        return self._ledger.current_ledger_id

    @property
    def first_ledger_id(self) -> int | None:
        first = self._ledger.first_position
        return first.ledger_id if first is not None else None

    @property
    def ledger_count(self) -> int:
        return self._ledger.ledger_count

    async def trim(self, keep_from_ledger_id: int | None) -> None:
        """Delete the sealed ledgers below *keep_from_ledger_id* (None: every sealed one)."""
        up_to = None if keep_from_ledger_id is None else keep_from_ledger_id - 1
        if up_to is None or up_to >= 0:
            await self._ledger.trim(up_to)

    async def records(self) -> list[tuple[Position, dict[str, Any]]]:
        """Every record in the log with its position, oldest first."""
        ledger = self._ledger
        out: list[tuple[Position, dict[str, Any]]] = []
        pos = ledger.first_position
        last = ledger.last_confirmed
        if pos is None or last is None:
            return out
        while pos <= last:
            entries = await ledger.read_entries(pos, _READ_BATCH)
            if not entries:
                break
            for entry in entries:
                try:
                    record = json.loads(entry.data)
                except ValueError:
                    log.warning("transaction log: record at %s does not parse; skipped",
                                entry.position)
                    continue
                if isinstance(record, dict):
                    out.extend((entry.position, rec) for rec in unpack(record))
            pos = ledger.next_position(entries[-1].position)
        return out

    def internal_stats(self) -> dict[str, Any]:
        """Pulsar's ManagedLedgerInternalStats of the log's ledger (the pending acknowledgements'
        store as well as the coordinator's)."""
        ledger = self._ledger
        infos = list(ledger.ledgers)
        current = infos[-1] if infos else None
        last = ledger.last_confirmed
        return {
            "entriesAddedCounter": self.log_batcher.entries_written + self.ack_batcher.entries_written,
            "numberOfEntries": int(ledger.number_of_entries),
            "totalSize": int(ledger.total_size_bytes),
            "currentLedgerEntries": int(current.entries) if current else 0,
            "currentLedgerSize": int(current.size_bytes) if current else 0,
            "waitingCursorsCount": 0, "pendingAddEntriesCount": 0,
            "lastConfirmedEntry": "-1:-1" if last is None else f"{last.ledger_id}:{last.entry_id}",
            "state": "LedgerOpened",
            "ledgers": [{"ledgerId": li.ledger_id, "entries": li.entries, "size": li.size_bytes,
                         "offloaded": False, "underReplicated": False} for li in infos],
            "cursors": {}}

    @property
    def size_bytes(self) -> int:
        return self._ledger.total_size_bytes

    async def close(self) -> None:
        await self.log_batcher.drain()
        await self.ack_batcher.drain()
        await self._ledger.close()
