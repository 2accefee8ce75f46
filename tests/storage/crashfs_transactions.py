"""Transactions on the crash-simulating file layer (how the harness works: crashfs.py).

The workload drives the real transaction classes (:class:`broker.transactions.service.
TransactionService`: its log, coordinator, a topic's transaction buffer and a subscription's
pending acks) on a CrashFS-backed store, and marks every promise a returned call made:

  ("txn_entry", most, least, ledger, entry)  a message produced in the transaction is durable
  ("txn_ack", most, least, ledger, entry)    an ACK in the transaction was answered (logged)
  ("txn_end_start", most, least, commit)     END_TXN was sent
  ("txn_ended", most, least, commit)         END_TXN was answered
  ("txn_group", (most, least, ledger, entry), ...)  acks in transactions that one log entry
                                             holds (group commit: written together)

check_transactions() opens a post-crash state as the broker does (log replay, the coordinator's
resume finishing what a crash caught between the phases, the topic's buffer rebuilt from the
ledger), lets every transaction still open time out (abort), and checks: a transaction whose
END commit was answered has every message visible and every ack applied; one whose abort was
asked (answered or not) has no message visible and no ack applied; any other has all or nothing
(its messages visible exactly when its acks are applied). A group of acks written as one log
entry is, after the replay, either wholly there (pending or applied) or wholly absent, and
wholly there when any of its acks was answered.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from crashfs_check import CHECK_CONFIG, Workload

from broker.transactions.buffer import TopicTransactionBuffer
from broker.transactions.ids import TxnId, TxnStatus
from broker.transactions.service import TransactionService
from protocol import pulsar_pb as pb
from protocol.metadata import encode_entry
from storage import ManagedCursor, ManagedLedger, Position, SegmentStore

TOPIC = "persistent://public/default/crash-txn"
SUB = "sub"
ROUNDS = 6
HOUR_MS = 3600 * 1000


class _Target:
    """A subscription as the pending-ack store sees it (no dispatcher: nobody is attached)."""

    def __init__(self, ledger: ManagedLedger, cursor: ManagedCursor) -> None:
        self.ledger = ledger
        self.cursor = cursor
        self.dispatcher = None
        self.batch_acks: dict[Position, int] = {}

    def check_end_of_topic(self) -> None:
        pass


class _Topic:
    def __init__(self, ledger: ManagedLedger) -> None:
        self.ledger = ledger

    def ack_target(self, subscription: str) -> _Target | None:
        cursor = self.ledger.cursors.get(subscription)
        return _Target(self.ledger, cursor) if cursor is not None else None


class _Loader:
    """The broker's topic loading, for one topic: open its ledger and attach its buffer."""

    def __init__(self, store: SegmentStore) -> None:
        self.store = store
        self.service: TransactionService | None = None
        self.topic: _Topic | None = None

    async def __call__(self, name: str) -> _Topic | None:
        if name != TOPIC:
            return None
        if self.topic is None:
            assert self.service is not None
            ml = await self.store.open_ledger(TOPIC)
            if SUB not in ml.cursors:
                await ml.open_cursor(SUB, initial_position="earliest")
            await self.service.attach(self.service.buffer_for(TOPIC), ml, lambda: None)
            self.topic = _Topic(ml)
        return self.topic


class _Durable:
    def __init__(self, future: asyncio.Future[list[Position]]) -> None:
        self.future = future
        self.positions: list[Position] = []

    def entries_durable(self, ledger_id: int, first_entry_id: int, count: int) -> None:
        self.positions += [Position(ledger_id, first_entry_id + i) for i in range(count)]
        if not self.future.done():
            self.future.set_result(self.positions)

    def entries_failed(self, count: int, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)


def _message(txn: TxnId | None, seq: int) -> bytes:
    md = pb.MessageMetadata(producer_name="crash", sequence_id=seq, publish_time=1)
    if txn is not None:
        md.txnid_most_bits, md.txnid_least_bits = txn
    return encode_entry(md, f"m{seq}".encode())


async def _publish(ml: ManagedLedger, buffer: TopicTransactionBuffer, datas: list[bytes]
                   ) -> list[Position]:
    fut: asyncio.Future[list[Position]] = asyncio.get_running_loop().create_future()
    ml.append_run(datas, buffer.sink_for(datas, _Durable(fut)))
    return await fut


async def transaction_workload(w: Workload) -> None:
    """Rounds of: plain messages, a transaction producing two messages and acknowledging one
    plain message, then commit (even rounds) or abort (odd); a last transaction is left open."""
    loader = _Loader(w.store)
    service = loader.service = TransactionService(w.store, asyncio.get_running_loop())
    await service.start(loader)
    topic = await loader(TOPIC)
    assert topic is not None
    ml = topic.ledger
    buffer = service.buffer_for(TOPIC)
    target = topic.ack_target(SUB)
    assert target is not None
    coordinator = service.coordinator
    seq = 0
    for round_ in range(ROUNDS + 1):
        plain = await _publish(ml, buffer, [_message(None, seq), _message(None, seq + 1)])
        seq += 2
        txn = await coordinator.new_txn(HOUR_MS)
        await service.add_partitions(txn, [TOPIC])
        await coordinator.add_subscriptions(txn, [(TOPIC, SUB)])
        for pos in await _publish(ml, buffer, [_message(txn, seq), _message(txn, seq + 1)]):
            w.fs.mark("txn_entry", txn.most, txn.least, pos.ledger_id, pos.entry_id)
        seq += 2
        await service.acknowledge(txn, TOPIC, SUB, [(plain[0], None)], False, target)
        w.fs.mark("txn_ack", txn.most, txn.least, plain[0].ledger_id, plain[0].entry_id)
        if round_ == ROUNDS:
            break       # left open
        commit = round_ % 2 == 0
        w.fs.mark("txn_end_start", txn.most, txn.least, commit)
        await coordinator.end(txn, commit)
        w.fs.mark("txn_ended", txn.most, txn.least, commit)
    stats = service.coordinator_stats()
    w.fs.mark("txn_log", stats.log_first_ledger_id, stats.log_ledgers)
    await _grouped_round(w, service, ml, buffer, target, seq)
    await service.close()


GROUP = 4


async def _grouped_round(w: Workload, service: TransactionService, ml: ManagedLedger,
                         buffer: TopicTransactionBuffer, target: _Target, seq: int) -> None:
    """Transactions acknowledging at once (their records grouped into one log entry while
    the first is being written), then committed at once (their status records grouped)."""
    coordinator = service.coordinator
    for _ in range(5):   # until a group formed (it needs a write still in flight)
        plain = await _publish(ml, buffer, [_message(None, seq + i) for i in range(GROUP)])
        seq += GROUP
        txns = [await coordinator.new_txn(HOUR_MS) for _ in range(GROUP)]
        for txn in txns:
            await service.add_partitions(txn, [TOPIC])
            await coordinator.add_subscriptions(txn, [(TOPIC, SUB)])
            for pos in await _publish(ml, buffer, [_message(txn, seq)]):
                w.fs.mark("txn_entry", txn.most, txn.least, pos.ledger_id, pos.entry_id)
            seq += 1
        first = service.acknowledge(txns[0], TOPIC, SUB, [(plain[0], None)], False, target)
        await asyncio.sleep(0)   # the first record is with the storage now: the rest gather
        await asyncio.sleep(0)
        rest = [service.acknowledge(txn, TOPIC, SUB, [(plain[i + 1], None)], False, target)
                for i, txn in enumerate(txns[1:])]
        answers = [asyncio.ensure_future(a) for a in (first, *rest)]
        for txn, pos, answer in zip(txns, plain, answers, strict=False):
            # marked the moment it is answered, not after the others
            answer.add_done_callback(
                lambda _, t=txn, p=pos: w.fs.mark("txn_ack", t.most, t.least, p.ledger_id,
                                                  p.entry_id))
        await asyncio.gather(*answers)
        await _mark_groups(w, service)
        for txn in txns:
            w.fs.mark("txn_end_start", txn.most, txn.least, True)
        ends = [asyncio.ensure_future(coordinator.end(txn, True)) for txn in txns]
        for txn, end in zip(txns, ends, strict=True):
            await end
            w.fs.mark("txn_ended", txn.most, txn.least, True)
        if any(op.kind == "mark" and op.mark[0] == "txn_group" for op in w.fs.trace.ops):
            return


async def _mark_groups(w: Workload, service: TransactionService) -> None:
    """Mark the acks that share a log entry, as the log holds them."""
    by_entry: dict[Position, list[tuple[int, int, int, int]]] = {}
    assert service._log is not None
    for pos, rec in await service._log.records():
        if rec.get("op") == "ack":
            for p in rec["pos"]:
                by_entry.setdefault(pos, []).append((rec["m"], rec["l"], p[0], p[1]))
    for members in by_entry.values():
        if len(members) > 1:
            w.fs.mark("txn_group", *members)


def _check_groups(service: TransactionService, topic: _Topic,
                  groups: list[tuple[Any, ...]], answered: dict[TxnId, list[Position]],
                  abort_asked: set[TxnId]) -> list[str]:
    """Before any timeout: an answered ack is there (pending or applied) unless its abort was
    asked; a group written as one entry is there whole or not at all."""
    problems: list[str] = []
    store = service.pending_store(TOPIC, SUB)
    cursor = topic.ledger.cursors[SUB]

    def there(pos: Position) -> bool:
        return store.holds(pos) or cursor.is_deleted(pos)

    for txn, positions in answered.items():
        lost = [p for p in positions if not there(p)]
        if lost and txn not in abort_asked:
            problems.append(f"txn {txn}: acks {lost} were answered but are gone")
    for group in groups:
        found = [(TxnId(m, lo), Position(lid, eid)) for m, lo, lid, eid in group
                 if there(Position(lid, eid))]
        if found and len(found) != len(group):
            problems.append(f"ack group {group}: only {found} replayed")
    return problems


async def check_transactions(root: Path, marks: list[tuple[Any, ...]]) -> list[str]:
    entries: dict[TxnId, list[Position]] = {}
    acks: dict[TxnId, list[Position]] = {}
    end_asked: dict[TxnId, bool] = {}
    ended: dict[TxnId, bool] = {}
    for m in marks:
        if m[0] == "txn_entry":
            entries.setdefault(TxnId(m[1], m[2]), []).append(Position(m[3], m[4]))
        elif m[0] == "txn_ack":
            acks.setdefault(TxnId(m[1], m[2]), []).append(Position(m[3], m[4]))
        elif m[0] == "txn_end_start":
            end_asked[TxnId(m[1], m[2])] = m[3]
        elif m[0] == "txn_ended":
            ended[TxnId(m[1], m[2])] = m[3]
    groups = [m[1:] for m in marks if m[0] == "txn_group"]
    problems: list[str] = []
    store = await SegmentStore.open(root, CHECK_CONFIG)
    loader = _Loader(store)
    service = loader.service = TransactionService(store, asyncio.get_running_loop())
    try:
        await service.start(loader)
        await service.coordinator.settled()
        topic = await loader(TOPIC)
        assert topic is not None
        problems += _check_groups(service, topic, groups, acks,
                                  {t for t, commit in end_asked.items() if not commit})
        # Every transaction still open now times out.
        for txn in set(entries) | set(acks):
            if service.coordinator.status(txn) is TxnStatus.OPEN:
                await service.coordinator.end(txn, False, timed_out=True)
        await service.coordinator.settled()
        buffer = service.buffer_for(TOPIC)
        cursor = topic.ledger.cursors[SUB]
        last = topic.ledger.last_confirmed
        readable = buffer.max_read_position(last)
        for txn in sorted(set(entries) | set(acks) | set(end_asked)):
            shown = [p for p in entries.get(txn, ())
                     if readable is not None and p <= readable and not buffer.hides(p)]
            applied = [p for p in acks.get(txn, ()) if cursor.is_deleted(p)]
            status = service.coordinator.status(txn)
            if ended.get(txn) is True:
                if len(shown) != len(entries.get(txn, ())) or len(applied) != len(acks.get(txn, ())):
                    problems.append(f"txn {txn}: commit answered but shown {shown} of "
                                    f"{entries.get(txn)}, acks applied {applied} of {acks.get(txn)}"
                                    f" (status {status})")
            elif end_asked.get(txn) is False:
                if shown or applied:
                    problems.append(f"txn {txn}: aborted but shows {shown}, applied {applied}")
            else:
                all_in = len(shown) == len(entries.get(txn, ())) and \
                    len(applied) == len(acks.get(txn, ()))
                none = not shown and not applied
                if not (all_in or none):
                    problems.append(f"txn {txn}: half applied: shown {shown} of "
                                    f"{entries.get(txn)}, acks {applied} of {acks.get(txn)}")
                if txn not in end_asked and (shown or applied):
                    problems.append(f"txn {txn}: never ended but shows {shown}, applied {applied}")
    finally:
        await service.close()
        await store.close()
    return problems
