"""The transaction commands of a connection, with ``transactionCoordinatorEnabled``.

Theory of operation: :func:`broker.net.handlers.on_transaction_request` hands every
transaction command here when the broker has a
:class:`broker.transactions.service.TransactionService`. Each request runs as a task of the
connection (its log append must be durable before the answer) and is answered with its own
response type, carrying the transaction id and, on failure, the error code and text (Pulsar's
``Commands.new*Response``), never a bare ERROR: the clients match the response type.
An ACK carrying a transaction id comes from :meth:`broker.net.consumers.ConsumerSide.handle_ack`
to :func:`acknowledge_in_transaction`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from broker.net.handshake import Handshake
from broker.net.view import ConnectionView
from broker.subscriptions.subscription import Subscription, wire_position
from broker.topics.names import TopicName
from broker.transactions.batch_acks import normalised_ack_set
from broker.transactions.ids import TxnId, TxnStatus
from broker.transactions.pending_ack import PendingAck
from broker.transactions.service import TransactionService
from protocol import pulsar_pb as pb
from protocol.commands import encode_ack_response
from protocol.errors import NotAllowedError, RequestError, ServerError
from protocol.frames import Frame
from protocol.txn_commands import encode_tc_client_connect_response, encode_txn_response
from storage.positions import Position

__all__ = ["acknowledge_in_transaction", "on_transaction_command"]

log = logging.getLogger("horae.transactions")

_T = pb.BaseCommand
_I64 = 1 << 63


class TxnConnection(ConnectionView, Protocol):
    @property
    def handshake(self) -> Handshake: ...


def _check_owner(conn: TxnConnection, txns: TransactionService, txn: TxnId) -> None:
    owner = txns.coordinator.owner_of(txn)
    if owner is not None and not conn.handshake.may_use_transaction_of(owner):
        raise RequestError(f"Role {conn.handshake.role_name!r} is not the owner of transaction "
                           f"{txn}", ServerError.AuthorizationError)


def _topic(name: str) -> str:
    return TopicName.parse(name).full   # InvalidTopicName on a bad one


def on_transaction_command(conn: TxnConnection, frame: Frame, txns: TransactionService) -> None:
    cmd = frame.command
    t = cmd.type
    if t == _T.TC_CLIENT_CONNECT_REQUEST:
        m = cmd.tcClientConnectRequest
        try:
            txns.coordinator.check_coordinator(int(m.tc_id))
        except RequestError as exc:
            conn.write(encode_tc_client_connect_response(m.request_id, error=exc.code,
                                                         message=exc.message))
            return
        conn.write(encode_tc_client_connect_response(m.request_id))
        return
    coordinator = txns.coordinator
    if t == _T.NEW_TXN:
        new = cmd.newTxn
        rid = new.request_id
        tc_id = int(new.tc_id)

        async def new_txn() -> None:
            txn = await coordinator.new_txn(int(new.txn_ttl_seconds), tc_id,
                                            conn.handshake.role_name)
            conn.write(encode_txn_response(t, rid, txn.most, txn.least))

        conn.spawn(new_txn(), rid, lambda e: encode_txn_response(
            t, rid, tc_id, 0, error=e.code, message=e.message))
        return
    sub_field = {
        _T.ADD_PARTITION_TO_TXN: "addPartitionToTxn",
        _T.ADD_SUBSCRIPTION_TO_TXN: "addSubscriptionToTxn",
        _T.END_TXN: "endTxn",
        _T.END_TXN_ON_PARTITION: "endTxnOnPartition",
        _T.END_TXN_ON_SUBSCRIPTION: "endTxnOnSubscription",
    }[t]
    m = getattr(cmd, sub_field)
    rid = m.request_id
    txn = TxnId(int(m.txnid_most_bits), int(m.txnid_least_bits))

    async def run() -> None:
        _check_owner(conn, txns, txn)
        if t == _T.ADD_PARTITION_TO_TXN:
            # Kept as the client named them (Pulsar's coordinator does, and its admin view
            # shows them so); the full name is what the end of the transaction reaches.
            await txns.add_partitions(txn, list(m.partitions), _topic)
        elif t == _T.ADD_SUBSCRIPTION_TO_TXN:
            await coordinator.add_subscriptions(
                txn, [(s.topic, s.subscription) for s in m.subscription], _topic)
        elif t == _T.END_TXN:
            await coordinator.end(txn, _commit(m.txn_action))
        elif t == _T.END_TXN_ON_PARTITION:
            commit = _commit(m.txn_action)
            _check_ending(txns, txn, commit)
            await txns.end_on_partition(_topic(m.topic), txn, commit)
        else:
            commit = _commit(m.txn_action)
            _check_ending(txns, txn, commit)
            await txns.end_on_subscription(_topic(m.subscription.topic),
                                           m.subscription.subscription, txn, commit)
        conn.write(encode_txn_response(t, rid, txn.most, txn.least))

    conn.spawn(run(), rid, lambda e: encode_txn_response(
        t, rid, txn.most, txn.least, error=e.code, message=e.message))


def _batch_size(subscription: object, pos: Position, mid: pb.MessageIdData) -> int | None:
    """Messages in batch entry *pos*: as the ACK says, else as its delivery to a consumer
    of the subscription counted them (None: unknown)."""
    if mid.HasField("batch_size") and mid.batch_size > 0:
        return int(mid.batch_size)
    dispatcher = subscription.dispatcher if isinstance(subscription, Subscription) else None
    consumer = dispatcher.owner.get(pos) if dispatcher is not None else None
    pending = consumer.pending.get(pos) if consumer is not None else None
    return pending[0] if pending is not None else None


def _check_ending(txns: TransactionService, txn: TxnId, commit: bool) -> None:
    """END_TXN_ON_PARTITION / _ON_SUBSCRIPTION come from a coordinator finishing a
    transaction; this broker's coordinator is the only one, so such a command may only repeat
    what it decided (an end it is running or ran), never decide an outcome of its own."""
    status = txns.coordinator.status(txn)
    allowed = ((TxnStatus.COMMITTING, TxnStatus.COMMITTED) if commit
               else (TxnStatus.ABORTING, TxnStatus.ABORTED))
    if status not in allowed:
        raise NotAllowedError(
            f"Transaction {txn} is not being {'committed' if commit else 'aborted'} by the "
            f"transaction coordinator (its status: {status.value if status else 'unknown'})")


def _commit(action: int) -> bool:
    if action == pb.COMMIT:
        return True
    if action == pb.ABORT:
        return False
    raise NotAllowedError(f"Unsupported txnAction {action}")


def acknowledge_in_transaction(conn: TxnConnection, txns: TransactionService,
                               cmd: pb.CommandAck, subscription: object,
                               message_ids: Sequence[pb.MessageIdData]) -> None:
    """An ACK with a transaction id, for the consumer's *subscription*."""
    txn = TxnId(int(cmd.txnid_most_bits), int(cmd.txnid_least_bits))
    consumer_id = cmd.consumer_id
    rid = cmd.request_id if cmd.HasField("request_id") else None
    cumulative = cmd.ack_type == pb.CommandAck.Cumulative
    acks: list[PendingAck] = []
    for mid in message_ids:
        lid, eid = mid.ledgerId, mid.entryId
        if lid >= _I64 or eid >= _I64:
            lid, eid = wire_position(lid, eid)
        pos = Position(lid, eid)
        words = list(mid.ack_set) or None
        if words:   # some messages of a batch entry: the bits past its size set (no message)
            size = _batch_size(subscription, pos, mid)
            words = normalised_ack_set(words, size)
            # What a commit takes the messages from (all of them unacknowledged: the same as
            # no entry for a delivery; dropped when the entry is acknowledged).
            if (size and isinstance(subscription, Subscription) and not cumulative
                    and not subscription.cursor.is_deleted(pos)):
                subscription.batch_acks.setdefault(pos, (1 << size) - 1)
        acks.append((pos, words))
    if cumulative:
        acks = acks[-1:]

    def failed(exc: RequestError) -> bytes:
        return encode_ack_response(consumer_id, rid if rid is not None else 0,
                                   error=exc.code, message=exc.message)

    # Checked and logged now, in the loop iteration that read the frame (the record shares
    # an fsync with the SEND the client wrote just before it), answered from the record's
    # completion without a task (TransactionService.acknowledge).
    try:
        _check_owner(conn, txns, txn)
        if not isinstance(subscription, Subscription) or not subscription.durable:
            raise NotAllowedError("Transactional acknowledgement needs a durable subscription "
                                  "of a persistent topic")
        logged = txns.acknowledge(txn, subscription.topic.full, subscription.name, acks,
                                  cumulative, subscription)
    except Exception as exc:   # answered by a request task as any handler's failure
        refused = exc

        async def refuse() -> None:
            raise refused
        conn.spawn(refuse(), rid, failed if rid is not None else None)
        return
    if isinstance(logged, asyncio.Future):
        def answer(done: asyncio.Future[None]) -> None:
            if done.cancelled():
                return
            exc = done.exception()
            if exc is None:
                if rid is not None:
                    conn.write(encode_ack_response(consumer_id, rid))
                return
            if not isinstance(exc, RequestError):
                log.error("transactional ack in %s failed: %r", txn, exc)
                exc = RequestError(f"{type(exc).__name__}: {exc}")
            if rid is not None:
                conn.write(failed(exc))
        logged.add_done_callback(answer)
        return

    async def run() -> None:
        await logged
        if rid is not None:
            conn.write(encode_ack_response(consumer_id, rid))
    conn.spawn(run(), rid, failed if rid is not None else None)
