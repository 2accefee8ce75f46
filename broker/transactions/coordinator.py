"""The transaction coordinator: ids, statuses, timeouts and the two phases of END_TXN.

Theory of operation
-------------------
One coordinator (id 0) serves every transaction. Its state is a table ``TxnId -> TxnMeta``
rebuilt at start-up from the :class:`broker.transactions.log.TransactionLog`, and every change
is logged (and durable) before it is answered:

1. NEW_TXN logs ``new`` (the sequence is the id's least significant bits, the timeout the
   client's ``txn_ttl_seconds``, which Pulsar's clients fill in milliseconds) and arms a timer
   that aborts the transaction when the timeout passes.
2. ADD_PARTITION_TO_TXN / ADD_SUBSCRIPTION_TO_TXN log the new participants of an OPEN one.
   Each is kept under the name the client gave (``my-topic``), as Pulsar's coordinator keeps
   it and shows it in the transaction's metadata, beside the full name the caller resolved it
   to (``persistent://public/default/my-topic``), which is what phase two reaches.
3. END_TXN logs COMMITTING (ABORTING), ends the transaction on every partition (a commit or
   abort marker in the topic's ledger, :mod:`broker.transactions.buffer`) and subscription
   (its pending acks applied or dropped, :mod:`broker.transactions.pending_ack`) through the
   :class:`Participants` the service hands in, then logs COMMITTED (ABORTED) and answers.
   Ending is idempotent on every participant, so a restart that finds a COMMITTING or
   ABORTING transaction simply runs phase two again (:meth:`resume`), and so does a timer
   after a phase two that failed (:data:`PHASE_TWO_RETRY_S`).

A command on an ended transaction answers TransactionNotFound, as Pulsar's (whose coordinator
forgets a transaction as it ends); the last :data:`MAX_ENDED` ended ones are remembered for the
admin view and the error's text. A command that does not fit the status of an unfinished one
(ABORT of a COMMITTING one, ADD_PARTITION to an ABORTING one) answers InvalidTxnStatus.

After an end the log keeps only the ledgers from the first record of the oldest unfinished
transaction on; before a trim deletes anything, a ``checkpoint`` record keeps what the deleted
records told a restart: the last sequence handed out (so no id is handed out twice) and the
topics transactions produced to (so their buffers are rebuilt at load).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from broker.transactions.ids import (
    TransactionCoordinatorNotFoundError,
    TxnId,
    TxnStatus,
    invalid_status,
    not_found,
)
from broker.transactions.limits import DEFAULT_LIMITS, TransactionLimits
from broker.transactions.log import TransactionLog
from broker.transactions.stats import CoordinatorStats, TransactionStats
from protocol.errors import NotAllowedError, RequestError, UnknownServerError

__all__ = ["MAX_ENDED", "Participants", "TransactionCoordinator", "TxnMeta"]

log = logging.getLogger("horae.transactions")

#: Ended transactions remembered for InvalidTxnStatus answers and the admin view.
MAX_ENDED: Final = 10_000
#: A client that asks for no timeout gets Pulsar's client default (3 hours, in ms); none is
#: longer than ``maxTransactionTimeoutMillis`` (:class:`TransactionLimits`).
DEFAULT_TIMEOUT_MS: Final = 3 * 3600 * 1000
#: A second phase that failed (a topic being reloaded, a fenced ledger) is run again after this.
PHASE_TWO_RETRY_S: Final = 5.0


class Participants(Protocol):
    """What the coordinator asks of the topics in phase two (the service implements it)."""

    async def end_on_partition(self, topic: str, txn: TxnId, commit: bool) -> None: ...

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnId,
                                  commit: bool) -> None: ...

    def partitions_holding(self, txn: TxnId) -> list[str]:
        """Topics holding entries of *txn* though it never registered them (ended too)."""
        ...

    def registered_topics(self) -> list[str]:
        """Every topic a transaction produced to (kept by the log's checkpoints)."""
        ...


@dataclass(slots=True)
class TxnMeta:
    txn_id: TxnId
    status: TxnStatus
    opened_at_ms: int
    timeout_ms: int
    #: topic as the client named it -> its full name (ordered)
    partitions: dict[str, str] = field(default_factory=dict)
    #: (topic as the client named it, subscription) -> the topic's full name (ordered)
    subscriptions: dict[tuple[str, str], str] = field(default_factory=dict)
    #: (full topic name, subscription) of every subscription above
    reached_subscriptions: set[tuple[str, str]] = field(default_factory=set)
    ended_at_ms: int = 0
    first_log_ledger: int = 0   # the log ledger holding its first record
    owner: str = ""             # the role that opened it
    pending_acks: int = 0       # individual acknowledgements it holds pending (all subscriptions)

    def stats(self) -> TransactionStats:
        return TransactionStats(str(self.txn_id), self.status.value, self.opened_at_ms,
                                self.opened_at_ms + self.timeout_ms, self.ended_at_ms,
                                tuple(self.partitions), tuple(self.subscriptions), self.owner,
                                tuple(self.partitions.values()),
                                tuple(self.subscriptions.values()))

    def add_partition(self, given: str, full: str) -> None:
        self.partitions[given] = full

    def add_subscription(self, given: str, subscription: str, full: str) -> None:
        self.subscriptions[(given, subscription)] = full
        self.reached_subscriptions.add((full, subscription))

    def ends_on(self) -> tuple[list[str], list[tuple[str, str]]]:
        """The full names phase two reaches: topics, then (topic, subscription) pairs."""
        return (list(dict.fromkeys(self.partitions.values())),
                list(dict.fromkeys((full, sub) for (_, sub), full
                                   in self.subscriptions.items())))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _key(txn: TxnId) -> dict[str, int]:
    return {"m": txn.most, "l": txn.least}


def _same(name: str) -> str:
    return name


def _given_names(rec: dict[str, Any], full: list[str]) -> list[str]:
    """The names as given of a ``parts``/``subs`` record (records before names were kept as
    given have none: the full names are all there is)."""
    given = rec.get("given")
    if isinstance(given, list) and len(given) == len(full):
        return [str(g) for g in given]
    return full


class TransactionCoordinator:
    """Coordinator ``tc_id`` (see the module docstring)."""

    def __init__(self, tc_id: int, txn_log: TransactionLog, participants: Participants,
                 loop: asyncio.AbstractEventLoop,
                 limits: TransactionLimits = DEFAULT_LIMITS) -> None:
        self.tc_id = tc_id
        self.limits = limits
        self._log = txn_log
        self._participants = participants
        self._loop = loop
        self._txns: dict[TxnId, TxnMeta] = {}
        self._ended: OrderedDict[TxnId, TxnMeta] = OrderedDict()
        self._timers: dict[TxnId, asyncio.TimerHandle] = {}
        self._ending: dict[TxnId, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sequence = 0
        self._closed = False
        self.created_total = 0
        self.committed_total = 0
        self.aborted_total = 0
        self.timed_out_total = 0
        self.recovery_time_ms = 0
        self.commit_latency_ms_sum = 0.0
        self.commit_latency_count = 0

    # ------------------------------------------------------------------ recovery

    def replay(self, records: Iterable[tuple[Any, dict[str, Any]]]) -> None:
        """Rebuild the table from the log's records (start-up, before anything is served)."""
        started = time.monotonic()
        for pos, rec in records:
            op = rec.get("op")
            if op == "checkpoint":
                self._sequence = max(self._sequence, int(rec.get("seq", 0)))
                continue
            try:
                txn = TxnId(int(rec["m"]), int(rec["l"]))
            except (KeyError, TypeError, ValueError):
                continue
            if op == "new":
                self._txns[txn] = TxnMeta(txn, TxnStatus.OPEN, int(rec.get("at", 0)),
                                          int(rec.get("t", DEFAULT_TIMEOUT_MS)),
                                          first_log_ledger=int(pos.ledger_id),
                                          owner=str(rec.get("o", "")))
                if txn.most == self.tc_id:
                    self._sequence = max(self._sequence, txn.least)
                continue
            meta = self._txns.get(txn)
            if meta is None:
                continue
            if op == "parts":
                topics = [str(t) for t in rec.get("topics", ())]
                for given, topic in zip(_given_names(rec, topics), topics, strict=True):
                    meta.add_partition(given, topic)
            elif op == "subs":
                pairs = [(str(p[0]), str(p[1])) for p in rec.get("subs", ())]
                names = _given_names(rec, [t for t, _ in pairs])
                for given, (topic, sub) in zip(names, pairs, strict=True):
                    meta.add_subscription(given, sub, topic)
            elif op == "status":
                meta.status = TxnStatus(rec["s"])
                if meta.status.ended:
                    meta.ended_at_ms = int(rec.get("at", 0))
                    del self._txns[txn]
                    self._remember_ended(meta)
        self.recovery_time_ms = int((time.monotonic() - started) * 1000)

    def resume(self) -> None:
        """After :meth:`replay`: arm the timers of open transactions (one whose timeout passed
        while the broker was down is aborted now) and finish the ones caught between phases."""
        now = _now_ms()
        for meta in list(self._txns.values()):
            if meta.status is TxnStatus.OPEN:
                self._arm(meta, max(0, meta.opened_at_ms + meta.timeout_ms - now))
            else:
                self._spawn(self._finish_logged(meta, meta.status is TxnStatus.COMMITTING))

    # ------------------------------------------------------------------ commands

    def check_coordinator(self, tc_id: int) -> None:
        if tc_id != self.tc_id:
            raise TransactionCoordinatorNotFoundError(
                f"Transaction coordinator with id {tc_id} not found!")

    async def new_txn(self, timeout_ms: int, tc_id: int = 0, owner: str = "") -> TxnId:
        self.check_coordinator(tc_id)
        limits = self.limits
        if len(self._txns) >= limits.max_active:
            # Pulsar's text (and code: its ReachMaxActiveTxnException maps to UnknownError)
            raise UnknownServerError(
                f"New txn op reach max active txn! tcId : {self.tc_id} "
                f"(maxActiveTransactionsPerCoordinator={limits.max_active})")
        if timeout_ms <= 0:
            timeout_ms = DEFAULT_TIMEOUT_MS
        timeout_ms = min(timeout_ms, limits.max_timeout_ms)
        self._sequence += 1
        txn = TxnId(self.tc_id, self._sequence)
        opened = _now_ms()
        pos = await self._log.append({"op": "new", **_key(txn), "t": timeout_ms, "at": opened,
                                      "o": owner})
        meta = TxnMeta(txn, TxnStatus.OPEN, opened, timeout_ms,
                       first_log_ledger=int(pos.ledger_id), owner=owner)
        self._txns[txn] = meta
        self.created_total += 1
        self._arm(meta, timeout_ms)
        return txn

    def open_meta(self, txn: TxnId) -> TxnMeta:
        """The metadata of *txn* if it is OPEN; raises TransactionNotFound / InvalidTxnStatus."""
        meta = self._txns.get(txn)
        if meta is None:
            ended = self._ended.get(txn)
            raise not_found(txn, ended.status if ended is not None else None)
        if meta.status is not TxnStatus.OPEN:
            raise invalid_status(txn, TxnStatus.OPEN, meta.status)
        return meta

    def meta_of(self, txn: TxnId) -> TxnMeta | None:
        """The metadata of *txn* while it has not ended."""
        return self._txns.get(txn)

    def owner_of(self, txn: TxnId) -> str | None:
        """The role that opened *txn* while it has not ended (None: unknown or ended)."""
        meta = self._txns.get(txn)
        return meta.owner if meta is not None else None

    def status(self, txn: TxnId) -> TxnStatus | None:
        meta = self._txns.get(txn) or self._ended.get(txn)
        return meta.status if meta is not None else None

    async def add_partitions(self, txn: TxnId, topics: list[str],
                             full: Callable[[str], str] = _same) -> None:
        """Add *topics* (names as the client gave them; *full* resolves one to the topic's
        full name, raising on a bad one) to an OPEN transaction."""
        meta = self.open_meta(txn)
        new = [(t, full(t)) for t in dict.fromkeys(topics) if t not in meta.partitions]
        self._check_participants(meta, len(new))
        if new:
            record: dict[str, Any] = {"op": "parts", **_key(txn),
                                      "topics": [f for _, f in new]}
            if any(g != f for g, f in new):
                record["given"] = [g for g, _ in new]
            await self._log.append(record)
            for given, topic in new:
                meta.add_partition(given, topic)

    async def add_subscriptions(self, txn: TxnId, subs: list[tuple[str, str]],
                                full: Callable[[str], str] = _same) -> None:
        """Add *subs* ((topic as the client named it, subscription)) to an OPEN transaction."""
        meta = self.open_meta(txn)
        new = [(s, full(s[0])) for s in dict.fromkeys(subs) if s not in meta.subscriptions]
        self._check_participants(meta, len(new))
        if new:
            record: dict[str, Any] = {"op": "subs", **_key(txn),
                                      "subs": [[f, s[1]] for s, f in new]}
            if any(s[0] != f for s, f in new):
                record["given"] = [s[0] for s, _ in new]
            await self._log.append(record)
            for (given, sub), topic in new:
                meta.add_subscription(given, sub, topic)

    def _check_participants(self, meta: TxnMeta, adding: int) -> None:
        limit = self.limits.max_participants
        if adding and len(meta.partitions) + len(meta.subscriptions) + adding > limit:
            raise NotAllowedError(
                f"Transaction {meta.txn_id} has {len(meta.partitions)} partitions and "
                f"{len(meta.subscriptions)} subscriptions; {adding} more would pass the "
                f"{limit} one transaction may have")

    async def end(self, txn: TxnId, commit: bool, *, timed_out: bool = False) -> None:
        """END_TXN: both phases; returns once the transaction is COMMITTED (ABORTED)."""
        meta = self._txns.get(txn)
        if meta is None:
            ended = self._ended.get(txn)
            raise not_found(txn, ended.status if ended is not None else None)
        wanted = TxnStatus.COMMITTING if commit else TxnStatus.ABORTING
        if meta.status is TxnStatus.OPEN:
            started = time.monotonic()
            timer = self._timers.pop(txn, None)
            if timer is not None:
                timer.cancel()
            meta.status = wanted     # before the await: a second END sees it at once
            try:
                await self._log.append({"op": "status", **_key(txn), "s": wanted.value})
            except BaseException:
                meta.status = TxnStatus.OPEN
                self._arm(meta, max(0, meta.opened_at_ms + meta.timeout_ms - _now_ms()))
                raise
            if timed_out:
                self.timed_out_total += 1
            await self._finish(meta, commit)
            if commit:
                self.commit_latency_ms_sum += (time.monotonic() - started) * 1000
                self.commit_latency_count += 1
            return
        if meta.status is not wanted:
            raise invalid_status(txn, wanted, meta.status)
        await self._finish(meta, commit)    # the same END again, or a retry: join it

    # ------------------------------------------------------------------ phase two

    async def _finish(self, meta: TxnMeta, commit: bool) -> None:
        fut = self._ending.get(meta.txn_id)
        if fut is None:
            fut = self._loop.create_future()
            self._ending[meta.txn_id] = fut
            self._spawn(self._finish_logged(meta, commit))
        try:
            await asyncio.shield(fut)
        except RequestError:
            raise
        except Exception as exc:   # the decision is logged: only the second phase is left
            raise UnknownServerError(
                f"Transaction {meta.txn_id} is {meta.status.value}; ending it on its topics "
                f"failed ({exc}) and is retried") from exc

    async def _finish_logged(self, meta: TxnMeta, commit: bool) -> None:
        txn = meta.txn_id
        fut = self._ending.get(txn)
        if fut is None:
            fut = self._ending[txn] = self._loop.create_future()
        try:
            participants = self._participants
            partitions, subscriptions = meta.ends_on()
            topics = dict.fromkeys([*partitions, *participants.partitions_holding(txn)])
            for topic in topics:
                await participants.end_on_partition(topic, txn, commit)
            for topic, sub in subscriptions:
                await participants.end_on_subscription(topic, sub, txn, commit)
            final = TxnStatus.COMMITTED if commit else TxnStatus.ABORTED
            ended_at = _now_ms()
            await self._log.append({"op": "status", **_key(txn), "s": final.value,
                                    "at": ended_at})
        except BaseException as exc:
            # Phase two stays to be done: the next END (a client retry) or the next start
            # runs it again; every participant's end is idempotent.
            del self._ending[txn]
            if not fut.done():
                if isinstance(exc, Exception):
                    fut.set_exception(exc)
                    fut.exception()
                else:
                    fut.cancel()
            if not isinstance(exc, Exception):
                raise
            log.warning("transaction %s: ending on its participants failed (retried in %.0f s):"
                        " %s", txn, PHASE_TWO_RETRY_S, exc)
            if not self._closed:
                self._loop.call_later(PHASE_TWO_RETRY_S, self._retry_phase_two, txn, commit)
            return
        meta.status = final
        meta.ended_at_ms = ended_at
        self._txns.pop(txn, None)
        self._remember_ended(meta)
        if commit:
            self.committed_total += 1
        else:
            self.aborted_total += 1
        del self._ending[txn]
        if not fut.done():
            fut.set_result(None)
        await self._trim_log()

    async def _trim_log(self) -> None:
        """Drop the log ledgers no unfinished transaction has a record in."""
        txn_log = self._log
        if txn_log.ledger_count <= 1:
            return
        keep = min((m.first_log_ledger for m in self._txns.values()),
                   default=txn_log.current_ledger_id)
        first = txn_log.first_ledger_id
        if first is None or first >= keep:
            return
        try:
            await txn_log.append({"op": "checkpoint", "seq": self._sequence,
                                  "topics": self._participants.registered_topics()})
            await txn_log.trim(keep)
        except Exception as exc:
            log.warning("transaction log: trimming failed: %s", exc)

    def _retry_phase_two(self, txn: TxnId, commit: bool) -> None:
        meta = self._txns.get(txn)
        if self._closed or meta is None or txn in self._ending:
            return   # ended meanwhile, or a client's END is running it
        self._spawn(self._finish_logged(meta, commit))

    def _remember_ended(self, meta: TxnMeta) -> None:
        self._ended[meta.txn_id] = meta
        while len(self._ended) > MAX_ENDED:
            self._ended.popitem(last=False)

    # ------------------------------------------------------------------ timeouts

    def _arm(self, meta: TxnMeta, delay_ms: int) -> None:
        if self._closed:
            return
        txn = meta.txn_id
        self._timers[txn] = self._loop.call_later(delay_ms / 1000, self._timed_out, txn)

    def _timed_out(self, txn: TxnId) -> None:
        self._timers.pop(txn, None)
        meta = self._txns.get(txn)
        if meta is not None and meta.status is TxnStatus.OPEN:
            self._spawn(self._abort_timed_out(txn))

    async def _abort_timed_out(self, txn: TxnId) -> None:
        try:
            await self.end(txn, False, timed_out=True)
        except Exception as exc:
            log.warning("transaction %s: abort on timeout failed: %s", txn, exc)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settled(self) -> None:
        """Wait for the work in flight now (phase two of ending transactions, timeouts)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # ------------------------------------------------------------------ views

    def transaction(self, txn: TxnId) -> TransactionStats | None:
        meta = self._txns.get(txn) or self._ended.get(txn)
        return meta.stats() if meta is not None else None

    def ongoing(self) -> list[TransactionStats]:
        return [m.stats() for m in self._txns.values()]

    def stats(self) -> CoordinatorStats:
        first = self._log.first_ledger_id
        return CoordinatorStats(
            coordinator_id=self.tc_id, state="Ready", least_sig_bits=self._sequence,
            ongoing=len(self._txns), created_total=self.created_total,
            committed_total=self.committed_total, aborted_total=self.aborted_total,
            timed_out_total=self.timed_out_total,
            log_records_appended=self._log.records_appended,
            log_size_bytes=self._log.size_bytes, log_ledgers=self._log.ledger_count,
            log_first_ledger_id=-1 if first is None else first,
            recovery_time_ms=self.recovery_time_ms,
            commit_latency_ms_sum=self.commit_latency_ms_sum,
            commit_latency_count=self.commit_latency_count)

    async def close(self) -> None:
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):  # cancelled: the log has the state
                await task
