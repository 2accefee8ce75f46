"""Commands the broker does not serve are answered, and the connection with its producers stays.

Transactions (and topic-list watchers, turned off) get Pulsar's answers with those features off; a command
type the proto does not declare at all (a newer protocol's) gets ERROR NotAllowedError with
request id -1. Before, each of them closed the connection as a malformed frame, taking every
producer and consumer on it along.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from broker_rawclient import RawClient, make_entry

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand
TRANSACTIONS_OFF = "Transactions are not enabled."
NO_REQUEST_ID = (1 << 64) - 1


def _command(cmd_type: int, field: str, **values: Any) -> bytes:
    cmd = T(type=cmd_type)  # type: ignore[arg-type]
    getattr(cmd, field).SetInParent()
    for name, value in values.items():
        target = getattr(cmd, field)
        if isinstance(value, list):
            getattr(target, name).extend(value)
        elif isinstance(value, pb.Subscription):
            getattr(target, name).CopyFrom(value)
        else:
            setattr(target, name, value)
    return C.encode_command(cmd)


TRANSACTION_REQUESTS = [
    ("NEW_TXN", _command(T.NEW_TXN, "newTxn", request_id=101, txn_ttl_seconds=60)),
    ("ADD_PARTITION_TO_TXN", _command(T.ADD_PARTITION_TO_TXN, "addPartitionToTxn",
                                      request_id=102, txnid_most_bits=1, txnid_least_bits=2,
                                      partitions=["persistent://public/default/t"])),
    ("ADD_SUBSCRIPTION_TO_TXN", _command(
        T.ADD_SUBSCRIPTION_TO_TXN, "addSubscriptionToTxn", request_id=103,
        subscription=[pb.Subscription(topic="persistent://public/default/t", subscription="s")])),
    ("END_TXN", _command(T.END_TXN, "endTxn", request_id=104, txn_action=pb.COMMIT)),
    ("TC_CLIENT_CONNECT_REQUEST", _command(T.TC_CLIENT_CONNECT_REQUEST, "tcClientConnectRequest",
                                           request_id=105, tc_id=0)),
]


def _undeclared(type_number: int, field: int) -> bytes:
    """A frame whose BaseCommand has type *type_number* and a sub-message {1: 7} in *field*."""
    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)
    body = b"\x08" + varint(type_number) + varint(field << 3 | 2) + b"\x02\x08\x07"
    return struct.pack(">II", len(body) + 4, len(body)) + body


@pytest.fixture
def raw(broker: Any) -> Any:
    with RawClient(broker.service_url) as client:
        client.handshake()
        yield client


def _publish(raw: RawClient, sequence_id: int) -> None:
    receipt = raw.request(C.encode_send(1, sequence_id, make_entry(b"x", sequence_id=sequence_id)))
    assert receipt.type == T.SEND_RECEIPT and receipt.send_receipt.sequence_id == sequence_id


def test_transaction_commands_get_pulsars_answer_and_the_producer_keeps_publishing(raw: Any) -> None:
    assert raw.create_producer("persistent://public/default/unserved-txn").type == T.PRODUCER_SUCCESS
    _publish(raw, 0)
    for n, (name, frame) in enumerate(TRANSACTION_REQUESTS, start=1):
        answer = raw.request(frame)
        assert answer.type == T.ERROR, name
        assert (answer.error.request_id, answer.error.error, answer.error.message) == \
            (101 + n - 1, ServerError.NotAllowedError, TRANSACTIONS_OFF), name
        _publish(raw, n)
    on_partition = raw.request(_command(
        T.END_TXN_ON_PARTITION, "endTxnOnPartition", request_id=110, txnid_most_bits=3,
        txnid_least_bits=4, topic="persistent://public/default/unserved-txn",
        txn_action=pb.ABORT)).endTxnOnPartitionResponse
    assert (on_partition.request_id, on_partition.txnid_most_bits, on_partition.txnid_least_bits,
            on_partition.error, on_partition.message) == \
        (110, 3, 4, ServerError.NotAllowedError, TRANSACTIONS_OFF)
    on_subscription = raw.request(_command(
        T.END_TXN_ON_SUBSCRIPTION, "endTxnOnSubscription", request_id=111, txnid_most_bits=5,
        txnid_least_bits=6, txn_action=pb.COMMIT,
        subscription=pb.Subscription(topic="persistent://public/default/unserved-txn",
                                     subscription="s"))).endTxnOnSubscriptionResponse
    assert (on_subscription.request_id, on_subscription.txnid_most_bits,
            on_subscription.error) == (111, 5, ServerError.NotAllowedError)
    _publish(raw, 10)


def test_topic_list_watchers_are_refused_as_pulsar_does_with_them_off(
        broker_factory: Any) -> None:
    b = broker_factory(config_overrides={"enableBrokerSideSubscriptionPatternEvaluation": False})
    with RawClient(b.service_url) as raw:
        connected = raw.handshake()
        assert not connected.feature_flags.supports_topic_watchers
        _refused_watch_keeps_the_producer(raw)


def _refused_watch_keeps_the_producer(raw: RawClient) -> None:
    assert raw.create_producer("persistent://public/default/unserved-watch").type == T.PRODUCER_SUCCESS
    watch = raw.request(_command(T.WATCH_TOPIC_LIST, "watchTopicList", request_id=120,
                                 watcher_id=1, namespace="public/default",
                                 topics_pattern="persistent://public/default/.*"))
    assert watch.type == T.ERROR and watch.error.request_id == 120
    assert watch.error.error == ServerError.NotAllowedError
    assert watch.error.message == \
        "Unable to create topic list watcher: Evaluating subscription patterns is disabled."
    close = raw.request(_command(T.WATCH_TOPIC_LIST_CLOSE, "watchTopicListClose",
                                 request_id=121, watcher_id=1))
    assert close.type == T.SUCCESS and close.success.request_id == 121
    _publish(raw, 0)


@pytest.mark.parametrize("type_number", [41, 99, 1000, 2**31 - 1])
def test_undeclared_command_type_is_answered_and_the_producer_keeps_publishing(
        raw: Any, type_number: int) -> None:
    assert raw.create_producer("persistent://public/default/unserved-new").type == T.PRODUCER_SUCCESS
    _publish(raw, 0)
    answer = raw.request(_undeclared(type_number, min(type_number, 2**29 - 1)))
    assert answer.type == T.ERROR
    assert (answer.error.request_id, answer.error.error) == (NO_REQUEST_ID, ServerError.NotAllowedError)
    assert answer.error.message == f"Command type {type_number} is not supported by this broker"
    _publish(raw, 1)
    assert raw.request(C.encode_ping()).type == T.PONG


def test_undeclared_command_type_before_connected_closes(broker: Any) -> None:
    with RawClient(broker.service_url) as client:
        client.send(_undeclared(99, 99))
        assert client.is_closed_by_peer()
