"""The command handlers of a connection: one function per accepted command type.

Theory of operation: :data:`broker.net.states.TRANSITIONS` maps each accepted
(state, command type) pair to one of these functions; :class:`broker.net.connection.ServerConnection`
calls it with itself and the decoded frame. A handler answers from memory at once (PING, SEND,
FLOW, ACK, ...) or spawns a task for work that needs IO or a topic load (PRODUCER, SUBSCRIBE,
LOOKUP, ...); a :class:`protocol.errors.RequestError` raised synchronously is answered by the
connection's dispatcher, one raised in a task by :class:`broker.net.requests.RequestTasks`.
Handlers see the connection only through :class:`CommandHost`, the union of the views its
parts use (handshake, lookups, schemas, producers) plus its consumer side; the work itself
belongs to those parts.
"""

from __future__ import annotations

import logging
from typing import Final, Protocol

from broker.net import lookup, schemas
from broker.net.consumers import ConsumerSide
from broker.net.lookup import LookupConnection
from broker.net.producers import ProducerConnection, handle_close_producer, handle_producer
from broker.net.schemas import SchemaConnection
from broker.net.topic_watchers import TopicWatchers
from broker.net.txn_requests import on_transaction_command
from broker.topics.names import TopicName
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.command_check import SUBFIELD_BY_TYPE
from protocol.errors import RequestError, ServerError
from protocol.frames import Frame

__all__ = ["TRANSACTIONS_DISABLED", "TRANSACTION_REQUESTS", "CommandHost"]

log = logging.getLogger("horae.net.connection")


class CommandHost(LookupConnection, ProducerConnection, SchemaConnection, Protocol):
    """What the handlers use of their connection."""

    def close(self, reason: str = "") -> None: ...

    def consumer_side(self) -> ConsumerSide:
        """The connection's consumer side, created on first use."""
        ...

    @property
    def existing_consumer_side(self) -> ConsumerSide | None:
        """The consumer side if a consumer command created it, else None."""
        ...

    def topic_watchers(self) -> TopicWatchers:
        """The connection's topic-list watchers, created on first use."""
        ...


# ---------------------------------------------------------------------- handshake, keep-alive

def on_connect(conn: CommandHost, frame: Frame) -> None:
    conn.handshake.on_connect(frame)


def on_auth_response(conn: CommandHost, frame: Frame) -> None:
    conn.handshake.on_auth_response(frame)


def on_ping(conn: CommandHost, frame: Frame) -> None:
    conn.write(C.encode_pong())


def on_pong(conn: CommandHost, frame: Frame) -> None:
    pass  # the connection's last_received was refreshed when the frame arrived


# ---------------------------------------------------------------------- lookups, schemas

def on_partitioned_metadata(conn: CommandHost, frame: Frame) -> None:
    lookup.answer_partitioned_metadata(conn, frame.command.partitionMetadata)


def on_lookup(conn: CommandHost, frame: Frame) -> None:
    lookup.answer_lookup(conn, frame.command.lookupTopic)


def on_get_topics_of_namespace(conn: CommandHost, frame: Frame) -> None:
    lookup.answer_topics_of_namespace(conn, frame.command.getTopicsOfNamespace)


def on_get_schema(conn: CommandHost, frame: Frame) -> None:
    m = frame.command.getSchema
    conn.spawn(schemas.get_schema(conn, m), m.request_id)


def on_get_or_create_schema(conn: CommandHost, frame: Frame) -> None:
    m = frame.command.getOrCreateSchema
    conn.spawn(schemas.get_or_create_schema(conn, m), m.request_id)


# ---------------------------------------------------------------------- producers

def on_producer(conn: CommandHost, frame: Frame) -> None:
    handle_producer(conn, frame.command.producer)


def on_close_producer(conn: CommandHost, frame: Frame) -> None:
    handle_close_producer(conn, frame.command.close_producer)


# ---------------------------------------------------------------------- consumers

def on_subscribe(conn: CommandHost, frame: Frame) -> None:
    m = frame.command.subscribe
    if conn.service.closing:
        conn.write(C.encode_error(m.request_id, ServerError.ServiceNotReady,
                                  "Broker is shutting down"))
        return
    conn.handshake.require_consume(TopicName.parse(m.topic).full, m.subscription)
    conn.spawn(conn.consumer_side().handle_subscribe(m), m.request_id)


def on_flow(conn: CommandHost, frame: Frame) -> None:
    conn.consumer_side().handle_flow(frame.command.flow)


def on_ack(conn: CommandHost, frame: Frame) -> None:
    ack = frame.command.ack
    try:
        conn.consumer_side().handle_ack(ack)
    except RequestError as exc:
        if ack.HasField("request_id"):
            conn.write(C.encode_ack_response(ack.consumer_id, ack.request_id,
                                             error=exc.code, message=exc.message))


def on_redeliver(conn: CommandHost, frame: Frame) -> None:
    conn.consumer_side().handle_redeliver(frame.command.redeliverUnacknowledgedMessages)


def on_seek(conn: CommandHost, frame: Frame) -> None:
    m = frame.command.seek
    conn.spawn(conn.consumer_side().handle_seek(m), m.request_id)


def on_unsubscribe(conn: CommandHost, frame: Frame) -> None:
    m = frame.command.unsubscribe
    conn.spawn(conn.consumer_side().handle_unsubscribe(m), m.request_id)


def on_close_consumer(conn: CommandHost, frame: Frame) -> None:
    m = frame.command.close_consumer
    side = conn.existing_consumer_side
    if side is None:
        # No consumer was ever created here; Pulsar answers SUCCESS for unknown ids too.
        conn.write(C.encode_success(m.request_id))
        return
    side.handle_close_consumer(m)


def on_get_last_message_id(conn: CommandHost, frame: Frame) -> None:
    m = frame.command.getLastMessageId
    conn.spawn(conn.consumer_side().handle_get_last_message_id(m), m.request_id)


def on_consumer_stats(conn: CommandHost, frame: Frame) -> None:
    m = frame.command.consumerStats
    conn.spawn(conn.consumer_side().handle_consumer_stats(m), m.request_id)


# ---------------------------------------------------------------------- features not served
#
# Transactions: a client sends these only when its user turns the feature on (a transactional
# client). Each is answered as Pulsar's ServerCnx answers it with the feature off, and the
# connection stays open with its producers and consumers:
#
# - NEW_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN, TC_CLIENT_CONNECT_REQUEST:
#   ERROR NotAllowedError "Transactions are not enabled." (transactionCoordinatorEnabled false:
#   checkTransactionEnableAndSendError), which fails the client's request at once;
# - END_TXN_ON_PARTITION, END_TXN_ON_SUBSCRIPTION (a transaction coordinator asking the broker
#   that owns a topic to commit or abort there): their own response with the same error; no
#   transaction can have touched a topic here.
#
# Topic-list watchers (WATCH_TOPIC_LIST, WATCH_TOPIC_LIST_CLOSE) are served by the connection's
# :class:`broker.net.topic_watchers.TopicWatchers`.

#: Pulsar's text for the transactions turned off.
TRANSACTIONS_DISABLED: Final = "Transactions are not enabled."


def on_transaction_request(conn: CommandHost, frame: Frame) -> None:
    """NEW_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN, TC_CLIENT_CONNECT_REQUEST."""
    txns = conn.service.transactions
    if txns is not None:
        on_transaction_command(conn, frame, txns)
        return
    cmd = frame.command
    request = getattr(cmd, SUBFIELD_BY_TYPE[cmd.type])
    conn.write(C.encode_error(request.request_id, ServerError.NotAllowedError,
                              TRANSACTIONS_DISABLED))


def on_end_txn_on_partition(conn: CommandHost, frame: Frame) -> None:
    txns = conn.service.transactions
    if txns is not None:
        on_transaction_command(conn, frame, txns)
        return
    m = frame.command.endTxnOnPartition
    conn.write(C.encode_end_txn_on_partition_response(
        m.request_id, m.txnid_least_bits, m.txnid_most_bits,
        error=ServerError.NotAllowedError, message=TRANSACTIONS_DISABLED))


def on_end_txn_on_subscription(conn: CommandHost, frame: Frame) -> None:
    txns = conn.service.transactions
    if txns is not None:
        on_transaction_command(conn, frame, txns)
        return
    m = frame.command.endTxnOnSubscription
    conn.write(C.encode_end_txn_on_subscription_response(
        m.request_id, m.txnid_least_bits, m.txnid_most_bits,
        error=ServerError.NotAllowedError, message=TRANSACTIONS_DISABLED))


def on_watch_topic_list(conn: CommandHost, frame: Frame) -> None:
    conn.topic_watchers().watch(frame.command.watchTopicList)


def on_watch_topic_list_close(conn: CommandHost, frame: Frame) -> None:
    m = frame.command.watchTopicListClose
    conn.topic_watchers().unwatch(int(m.watcher_id))
    conn.write(C.encode_success(m.request_id))  # Pulsar's answer, known watcher or not


#: The transaction commands a client sends (each has a ``request_id``).
TRANSACTION_REQUESTS: Final = (
    pb.BaseCommand.NEW_TXN,
    pb.BaseCommand.ADD_PARTITION_TO_TXN,
    pb.BaseCommand.ADD_SUBSCRIPTION_TO_TXN,
    pb.BaseCommand.END_TXN,
    pb.BaseCommand.TC_CLIENT_CONNECT_REQUEST,
)
