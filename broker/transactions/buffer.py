"""The transaction buffer of one topic: what produced in a transaction may be read, and when.

Theory of operation
-------------------
A message produced in a transaction is appended to the topic's ledger at once, like any other,
with the transaction id in its metadata (Pulsar's clients put it there). This buffer keeps it
from readers until the transaction ends, as Pulsar's TopicTransactionBuffer does:

- **max read position**: entries up to the one before the first entry of the oldest open
  transaction of the topic may be dispatched, later ones (of any transaction or none) wait, so
  the order of the log is the order of delivery. :meth:`max_read_position` caps a
  dispatcher's reads.
- **end**: a commit or abort writes a marker entry (Pulsar's ``TXN_COMMIT`` / ``TXN_ABORT``
  marker types, the transaction id in its metadata) and the transaction stops holding the
  read position back. Markers, and every entry of an aborted transaction, are *hidden*:
  a dispatcher acknowledges them unseen (:meth:`hides`).
- Positions are learnt as entries become durable: :meth:`sink_for` wraps a publish run's sink,
  and storage reports durability to it before the ledger's last confirmed position moves, so
  no dispatcher can read an entry before this buffer has classified it.
- **recovery** (:meth:`recover`, at topic load): the entries after the buffer's last snapshot
  (:mod:`broker.transactions.buffer_snapshot`; without one, every retained entry of a topic a
  logged transaction touched) are scanned; markers say how a transaction ended here, an entry
  whose transaction has no marker takes the coordinator's word (open ones hold the read
  position again; unknown or aborted ones are hidden: an aborted message is never shown).
"""

from __future__ import annotations

import asyncio
import re
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final

from pyroaring import BitMap

from broker.transactions.buffer_snapshot import BufferState
from broker.transactions.ids import TxnId, TxnStatus
from broker.transactions.stats import TopicBufferStats
from protocol import pulsar_pb as pb
from protocol.entry_metadata import entry_start
from protocol.errors import ProtocolError
from protocol.metadata import encode_entry, parse_metadata, split_entry
from storage.ledger import ManagedLedger
from storage.positions import Position
from storage.segment_file import DurableSink

__all__ = ["TXN_ABORT", "TXN_COMMIT", "TopicTransactionBuffer", "entry_txn"]

#: PulsarMarkers.proto MarkerType values.
TXN_COMMITTING: Final = 20
TXN_COMMIT: Final = 21
TXN_ABORT: Final = 22
MARKER_PRODUCER: Final = "pulsar.txn.marker"
#: Ended transactions a buffer remembers (markers already written: ending again is a no-op).
MAX_ENDED: Final = 10_000
_SCAN_BATCH: Final = 200
# The varint tags of MessageMetadata's marker_type (20) and txnid (22, 23) fields: an entry
# whose metadata holds none of these bytes is no transaction's, without a protobuf parse.
_TAGS: Final = (b"\xa0\x01", b"\xb0\x01", b"\xb8\x01")
_txnid_tag: Final = re.compile(rb"[\xb0\xb8]\x01").search
_u32_from: Final = struct.Struct(">I").unpack_from


def _may_name_a_transaction(entry: bytes) -> bool:
    """False when the entry's metadata surely holds no txnid field (the publish path's check:
    one bounded search, no copy); True sends the entry to :func:`entry_txn`."""
    try:
        start = entry_start(entry) if entry[0] == 0x0E else 0
        end = start + 4 + _u32_from(entry, start)[0]
    except (IndexError, struct.error, ProtocolError):
        return False    # no metadata to name one (the publish check refused it already)
    return _txnid_tag(entry, start + 4, end) is not None

StatusOf = Callable[[TxnId], "TxnStatus | None"]


def entry_txn(entry: bytes) -> tuple[TxnId, int] | None:
    """(transaction id, marker type or 0) of a stored entry, None for a plain entry."""
    try:
        md_bytes, _ = split_entry(entry)
    except ProtocolError:
        return None
    if not any(tag in md_bytes for tag in _TAGS):
        return None
    try:
        md = parse_metadata(entry)
    except ProtocolError:
        return None
    if not (md.HasField("txnid_most_bits") or md.HasField("txnid_least_bits")):
        return None
    marker = md.marker_type if md.HasField("marker_type") else 0
    return TxnId(md.txnid_most_bits, md.txnid_least_bits), marker


def marker_entry(txn: TxnId, commit: bool, sequence_id: int) -> bytes:
    md = pb.MessageMetadata(producer_name=MARKER_PRODUCER, sequence_id=sequence_id,
                            publish_time=int(time.time() * 1000),
                            marker_type=TXN_COMMIT if commit else TXN_ABORT,
                            txnid_most_bits=txn.most, txnid_least_bits=txn.least)
    return encode_entry(md, b"")


class _ClassifyingSink:
    """Wraps a publish run's sink: records the run's transactional entries as they become
    durable, then reports to the run's own sink."""

    __slots__ = ("_buffer", "_offset", "_sink", "_txns")

    def __init__(self, buffer: TopicTransactionBuffer, sink: DurableSink,
                 txns: list[TxnId | None]) -> None:
        self._buffer = buffer
        self._sink = sink
        self._txns = txns
        self._offset = 0

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        txns = self._txns
        start = self._offset
        for i in range(count):
            txn = txns[start + i]
            if txn is not None:
                self._buffer.record(Position(ledger_id, first_entry_id + i), txn)
        self._offset = start + count
        self._sink.entries_durable(ledger_id, first_entry_id, count)

    def entries_failed(self, count: int, error: BaseException) -> None:
        self._offset += count
        self._sink.entries_failed(count, error)


class _MarkerSink:
    """The sink of one marker append: hidden the moment it is durable."""

    __slots__ = ("_buffer", "future")

    def __init__(self, buffer: TopicTransactionBuffer, future: asyncio.Future[Position]) -> None:
        self._buffer = buffer
        self.future = future

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        pos = Position(ledger_id, first_entry_id)
        self._buffer.hide((pos,))
        if not self.future.done():
            self.future.set_result(pos)

    def entries_failed(self, count: int, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


class TopicTransactionBuffer:
    """One topic's buffer (see the module docstring), attached to the topic's ledger while it
    is loaded. When the topic unloads the service drops it unless a transaction is still
    ongoing on it (:attr:`on_detached`); a later load rebuilds it from the ledger."""

    def __init__(self, topic: str, status_of: StatusOf) -> None:
        self.topic = topic
        self._status_of = status_of
        self._ledger: ManagedLedger | None = None
        self._on_readable: Callable[[], None] | None = None
        self._ongoing: dict[TxnId, Position] = {}       # first entry; in position order
        self._entries: dict[TxnId, list[Position]] = {}  # entries of ongoing transactions
        self._ended: OrderedDict[TxnId, bool] = OrderedDict()  # -> committed
        #: Markers and aborted entries (entry ids per ledger id): acknowledged unseen by
        #: dispatchers. Ledgers the topic no longer has are dropped (:meth:`_prune`).
        self._hidden: dict[int, BitMap] = {}
        self.hidden_entries = 0
        self.recovered = False
        self._marker_sequence = 0
        self.committed_txns = 0
        self.aborted_txns = 0
        #: told when the topic unloads (the service releases the buffer)
        self.on_detached: Callable[[TopicTransactionBuffer], None] | None = None
        #: snapshots (broker/transactions/buffer_snapshot.py): ends since the last one, its
        #: position and time
        self.ends_since_snapshot = 0
        self.snapshot_upto: Position | None = None
        self.last_snapshot_ms = 0

    # ------------------------------------------------------------------ the topic's side

    def attach(self, ledger: ManagedLedger, on_readable: Callable[[], None]) -> None:
        """The topic loaded over *ledger*; *on_readable* wakes its subscriptions."""
        self._ledger = ledger
        self._on_readable = on_readable

    def detach(self, ledger: ManagedLedger) -> None:
        if self._ledger is ledger:
            self._ledger = None
            self._on_readable = None
            if self.on_detached is not None:
                self.on_detached(self)

    @property
    def attached(self) -> bool:
        return self._ledger is not None

    @property
    def touched(self) -> bool:
        """Whether a transaction ever left anything here (a rebuild must scan the ledger)."""
        return bool(self._ongoing or self._hidden or self._ended or self.committed_txns
                    or self.aborted_txns)

    def sink_for(self, entries: Sequence[bytes], sink: DurableSink) -> DurableSink:
        """The sink to append a publish run with (the run's own when no entry is a
        transaction's)."""
        txns: list[TxnId | None] | None = None
        for i, entry in enumerate(entries):
            if not _may_name_a_transaction(entry):
                continue
            found = entry_txn(entry)
            if found is not None:
                if txns is None:
                    txns = [None] * len(entries)
                txns[i] = found[0]
        return sink if txns is None else _ClassifyingSink(self, sink, txns)

    def record(self, pos: Position, txn: TxnId) -> None:
        """A transactional entry at *pos* is durable (called before it is readable)."""
        ended = self._ended.get(txn)
        if ended is not None or self._status_of(txn) is not TxnStatus.OPEN:
            # Produced after its transaction ended here (or in no open transaction): never
            # part of a commit, so never shown.
            self.hide((pos,))
            return
        if txn not in self._ongoing:
            self._ongoing[txn] = pos
            self._entries[txn] = []
        self._entries[txn].append(pos)

    def max_read_position(self, last: Position | None) -> Position | None:
        """The last position a dispatcher may read, given the ledger's last confirmed one."""
        if not self._ongoing or last is None:
            return last
        first = next(iter(self._ongoing.values()))
        cap = Position(first.ledger_id, first.entry_id - 1)
        return cap if cap < last else last

    def hides(self, pos: Position) -> bool:
        entries = self._hidden.get(pos.ledger_id)
        return entries is not None and pos.entry_id in entries

    def hide(self, positions: Sequence[Position]) -> None:
        hidden = self._hidden
        for pos in positions:
            entries = hidden.get(pos.ledger_id)
            if entries is None:
                entries = hidden[pos.ledger_id] = BitMap()
            if pos.entry_id not in entries:
                entries.add(pos.entry_id)
                self.hidden_entries += 1

    def holds(self, txn: TxnId) -> bool:
        """Whether *txn* has entries here and has not ended here."""
        return txn in self._ongoing

    @property
    def holds_any(self) -> bool:
        """Whether an ongoing transaction has entries here."""
        return bool(self._ongoing)

    @property
    def active(self) -> bool:
        """Anything for a dispatcher to check (an open transaction or a hidden entry)."""
        return bool(self._ongoing) or bool(self._hidden)

    def _prune(self) -> None:
        """Forget hidden entries of ledgers the topic no longer has (trimmed)."""
        ledger = self._ledger
        first = ledger.first_position if ledger is not None else None
        if first is None:
            return
        for ledger_id in [lid for lid in self._hidden if lid < first.ledger_id]:
            self.hidden_entries -= len(self._hidden.pop(ledger_id))

    # ------------------------------------------------------------------ the coordinator's side

    async def end(self, txn: TxnId, commit: bool) -> None:
        """Commit or abort *txn* on this topic: its marker is durable when this returns.
        Idempotent: a transaction that already ended here is left as it ended."""
        if txn in self._ended:
            return
        ledger = self._ledger
        if ledger is None:
            raise RuntimeError(f"transaction buffer of {self.topic} has no ledger attached")
        self._marker_sequence += 1
        sink = _MarkerSink(self, asyncio.get_running_loop().create_future())
        ledger.append_run([marker_entry(txn, commit, self._marker_sequence)], sink)
        await sink.future
        if txn in self._ended:
            return
        self._close(txn, commit)
        if self._on_readable is not None:
            self._on_readable()

    def _close(self, txn: TxnId, commit: bool) -> None:
        self._ongoing.pop(txn, None)
        entries = self._entries.pop(txn, [])
        if not commit:
            self.hide(entries)
        self._prune()
        self._ended[txn] = commit
        while len(self._ended) > MAX_ENDED:
            self._ended.popitem(last=False)
        if commit:
            self.committed_txns += 1
        else:
            self.aborted_txns += 1
        self.ends_since_snapshot += 1

    def open_transaction_of(self, pos: Position) -> TxnId | None:
        """The transaction, still open here, that *pos* was produced in (None: none)."""
        if not self._ongoing or pos < next(iter(self._ongoing.values())):
            return None
        for txn, entries in self._entries.items():
            if pos in entries:
                return txn
        return None

    # ------------------------------------------------------------------ recovery

    def snapshot_state(self) -> BufferState | None:
        """What this buffer knows as of its ledger's last confirmed position (None while not
        attached or not recovered)."""
        ledger = self._ledger
        if ledger is None or not self.recovered:
            return None
        self._prune()
        return BufferState(
            upto=ledger.last_confirmed, hidden={lid: BitMap(bm) for lid, bm in self._hidden.items()},
            ongoing={t: list(ps) for t, ps in self._entries.items()},
            ended=list(self._ended.items()), committed=self.committed_txns,
            aborted=self.aborted_txns, taken_ms=int(time.time() * 1000))

    def _restore(self, state: BufferState, ledger: ManagedLedger) -> Position | None:
        """Start from *state*; returns the first position to scan (None: nothing)."""
        self._hidden = {lid: BitMap(bm) for lid, bm in state.hidden.items()}
        self.hidden_entries = sum(len(bm) for bm in self._hidden.values())
        self._ended = OrderedDict(state.ended)
        self.committed_txns, self.aborted_txns = state.committed, state.aborted
        self.snapshot_upto, self.last_snapshot_ms = state.upto, state.taken_ms
        first = ledger.first_position
        if state.upto is None or first is None:
            return first
        after = ledger.next_position(state.upto)
        return after if after > first else first

    async def recover(self, ledger: ManagedLedger, start: BufferState | None = None) -> int:
        """Rebuild from the retained entries, or from *start* (a snapshot) and the entries
        after it (see the module docstring); returns entries read."""
        seen: dict[TxnId, list[Position]] = {}
        markers: dict[TxnId, bool] = {}
        read = 0
        pos = ledger.first_position
        if start is not None:
            pos = self._restore(start, ledger)
            seen = {t: list(ps) for t, ps in start.ongoing.items()}
        last = ledger.last_confirmed
        while pos is not None and last is not None and pos <= last:
            batch = await ledger.read_entries(pos, _SCAN_BATCH)
            if not batch:
                break
            for entry in batch:
                read += 1
                found = entry_txn(entry.data)
                if found is None:
                    continue
                txn, marker = found
                if marker in (TXN_COMMIT, TXN_ABORT):
                    markers[txn] = marker == TXN_COMMIT
                    self.hide((entry.position,))
                elif marker or txn in self._ended:
                    # another marker kind, or produced after its transaction ended here (the
                    # snapshot says so): never a message
                    self.hide((entry.position,))
                else:
                    seen.setdefault(txn, []).append(entry.position)
            pos = ledger.next_position(batch[-1].position)
        for txn, committed in markers.items():
            self._ended[txn] = committed
            if not committed:
                self.hide(seen.pop(txn, []))
            else:
                seen.pop(txn, None)
        for txn, positions in seen.items():
            status = self._status_of(txn)
            if status in (TxnStatus.OPEN, TxnStatus.COMMITTING, TxnStatus.ABORTING):
                self._ongoing[txn] = positions[0]
                self._entries[txn] = positions
            elif status is not TxnStatus.COMMITTED:
                self.hide(positions)
        self._ongoing = dict(sorted(self._ongoing.items(), key=lambda kv: kv[1]))
        self._prune()
        self.recovered = True
        return read

    # ------------------------------------------------------------------ stats

    def transaction_stats(self, txn: TxnId) -> tuple[Position | None, bool]:
        """(first entry of *txn* here while it is open, whether it was aborted here): Pulsar's
        TransactionInBufferStats."""
        return self._ongoing.get(txn), self._ended.get(txn) is False

    def stats(self) -> TopicBufferStats:
        last = self._ledger.last_confirmed if self._ledger is not None else None
        readable = self.max_read_position(last)
        return TopicBufferStats(
            topic=self.topic, state="Ready" if self.recovered else "Initializing",
            max_read_position=str(readable) if readable is not None else "-1:-1",
            ongoing_txns=len(self._ongoing), committed_txns=self.committed_txns,
            aborted_txns=self.aborted_txns, hidden_entries=self.hidden_entries,
            held_back=bool(self._ongoing), last_snapshot_ms=self.last_snapshot_ms,
            snapshot_upto=str(self.snapshot_upto) if self.last_snapshot_ms else "")
