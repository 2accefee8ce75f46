"""Durable snapshots of a topic's transaction buffer, so a load reads only what came after.

Theory of operation
-------------------
A :class:`broker.transactions.buffer.TopicTransactionBuffer` learns the transactional entries
of its topic as they become durable; after a restart it rebuilds that knowledge by reading
entries. Without a snapshot that is every retained entry. With one it is only the *tail*: the
entries after the snapshot's ``upto`` position. A snapshot (:class:`BufferState`, one JSON
object in the metadata store under kind ``txn_buffer``, key the topic's full name) holds, as
of ``upto`` (the ledger's last confirmed position when it was taken: every entry up to it was
classified): the hidden entries (markers and aborted messages, one roaring bitmap per ledger),
the entries of transactions still open there, the transactions that ended there (their
outcome) and the counts. Pulsar keeps the same state (aborted transactions, max read position,
ongoing ones) in its ``__transaction_buffer_snapshot`` system topic.

When (:class:`BufferSnapshots`): at a topic's first load (a topic no logged transaction
touched gets an empty snapshot at its last position, so from then on every load scans what
came after, also an entry of a transaction that never added the topic), at unload when
anything changed, and after transactions end on it: at once after
``transactionBufferSnapshotMaxTransactionCount`` ends, else at most every
``transactionBufferSnapshotMinTimeInMillis``. A snapshot written before a crash is safe
whatever happened after it: the tail is classified again from the entries themselves, and an
open transaction of the snapshot takes the coordinator's word as in a full scan.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from pyroaring import BitMap

from broker.transactions.ids import TxnId
from storage.pacing import sleep_to_beat
from storage.positions import Position

__all__ = ["SNAPSHOT_KIND", "BufferSnapshots", "BufferState", "Snapshotted"]

log = logging.getLogger("horae.transactions")

SNAPSHOT_KIND: Final = "txn_buffer"
_VERSION: Final = 1


@dataclass
class BufferState:
    """What a buffer knew of its topic up to ``upto`` (None: nothing was appended yet)."""

    upto: Position | None
    hidden: dict[int, BitMap] = field(default_factory=dict)
    ongoing: dict[TxnId, list[Position]] = field(default_factory=dict)
    ended: list[tuple[TxnId, bool]] = field(default_factory=list)
    committed: int = 0
    aborted: int = 0
    taken_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "v": _VERSION,
            "upto": None if self.upto is None else [self.upto.ledger_id, self.upto.entry_id],
            "hidden": {str(lid): base64.b64encode(bm.serialize()).decode()
                       for lid, bm in self.hidden.items()},
            "ongoing": [[t.most, t.least, [[p.ledger_id, p.entry_id] for p in ps]]
                        for t, ps in self.ongoing.items()],
            "ended": [[t.most, t.least, int(c)] for t, c in self.ended],
            "committed": self.committed, "aborted": self.aborted, "at": self.taken_ms}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> BufferState:
        """Raises KeyError/TypeError/ValueError on a value this version did not write."""
        if value.get("v") != _VERSION:
            raise ValueError(f"snapshot version {value.get('v')!r}")
        upto = value["upto"]
        return cls(
            upto=None if upto is None else Position(int(upto[0]), int(upto[1])),
            hidden={int(lid): BitMap.deserialize(base64.b64decode(data))
                    for lid, data in value["hidden"].items()},
            ongoing={TxnId(int(m), int(lo)): [Position(int(a), int(b)) for a, b in ps]
                     for m, lo, ps in value["ongoing"]},
            ended=[(TxnId(int(m), int(lo)), bool(c)) for m, lo, c in value["ended"]],
            committed=int(value["committed"]), aborted=int(value["aborted"]),
            taken_ms=int(value.get("at", 0)))


class Snapshotted(Protocol):
    """What :class:`BufferSnapshots` uses of a buffer."""

    topic: str
    ends_since_snapshot: int
    snapshot_upto: Position | None
    last_snapshot_ms: int
    recovered: bool

    def snapshot_state(self) -> BufferState | None: ...

    async def recover(self, ledger: Any, start: BufferState | None = None) -> int: ...


class Ledger(Protocol):
    @property
    def last_confirmed(self) -> Position | None: ...


class Metadata(Protocol):
    async def get(self, kind: str, key: str) -> dict[str, Any] | None: ...

    async def put(self, kind: str, key: str, value: Any) -> None: ...

    async def delete(self, kind: str, key: str) -> bool: ...


class BufferSnapshots:
    """Loads and writes buffer snapshots (module docstring)."""

    def __init__(self, metadata: Metadata, max_transactions: int, min_interval_ms: int,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._md = metadata
        self._loop = loop
        self.max_transactions = max_transactions
        self.min_interval_ms = min_interval_ms
        self.written = 0
        self._saving: set[str] = set()
        self._recovering: dict[str, asyncio.Task[None]] = {}

    async def recover(self, buffer: Snapshotted, ledger: Ledger, registered: bool) -> None:
        """The first load of *buffer*'s topic: from its snapshot and the entries after it,
        else by a scan when a logged transaction produced to it (*registered*), else nothing
        to read; then a snapshot, so the next load reads only what comes after. One recovery
        per buffer, however many loads wait for it."""
        running = self._recovering.get(buffer.topic)
        if running is None:
            running = self._recovering[buffer.topic] = self._loop.create_task(
                self._recover(buffer, ledger, registered))
            running.add_done_callback(lambda _: self._recovering.pop(buffer.topic, None))
        await asyncio.shield(running)

    async def _recover(self, buffer: Snapshotted, ledger: Ledger, registered: bool) -> None:
        state = await self.load(buffer.topic)
        if state is None and not registered:
            buffer.recovered = True   # no logged transaction touched it: nothing to scan
        else:
            read = await buffer.recover(ledger, state)
            log.info("transaction buffer of %s recovered (%d entries scanned%s)", buffer.topic,
                     read, " after its snapshot" if state is not None else "")
        if state is None or buffer.snapshot_upto != ledger.last_confirmed:
            await self.save_now(buffer)

    async def save_now(self, buffer: Snapshotted) -> None:
        """:meth:`save`, unless one of this buffer is being written; a failure is logged."""
        if buffer.topic in self._saving:
            return
        self._saving.add(buffer.topic)
        try:
            await self.save(buffer)
        except Exception:
            log.exception("snapshot of the transaction buffer of %s failed", buffer.topic)
        finally:
            self._saving.discard(buffer.topic)

    async def run(self, buffers: Callable[[], list[Any]]) -> None:
        """Forever: snapshot the buffers that are :meth:`due`."""
        interval = max(self.min_interval_ms, 100) / 1000.0
        while True:
            await sleep_to_beat(interval)
            now = int(time.time() * 1000)
            for buffer in buffers():
                if self.due(buffer, now):
                    await self.save_now(buffer)

    async def load(self, topic: str) -> BufferState | None:
        value = await self._md.get(SNAPSHOT_KIND, topic)
        if value is None:
            return None
        try:
            return BufferState.from_json(value)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            log.warning("transaction buffer snapshot of %s unreadable (%s): full scan", topic,
                        exc)
            return None

    async def save(self, buffer: Snapshotted) -> None:
        """Write the buffer's state as of now (taken before the write starts)."""
        state = buffer.snapshot_state()
        if state is None:
            return
        buffer.ends_since_snapshot = 0
        buffer.snapshot_upto = state.upto
        buffer.last_snapshot_ms = state.taken_ms
        await self._md.put(SNAPSHOT_KIND, buffer.topic, state.to_json())
        self.written += 1

    def due(self, buffer: Snapshotted, now_ms: int) -> bool:
        """Transactions ended there since the last snapshot, and enough of them or enough
        time passed."""
        ends = buffer.ends_since_snapshot
        return ends > 0 and (ends >= self.max_transactions
                             or now_ms - buffer.last_snapshot_ms >= self.min_interval_ms)

    async def forget(self, topic: str) -> None:
        await self._md.delete(SNAPSHOT_KIND, topic)
