"""The bounds of the transaction side, driven past with raw frames: open transactions per
coordinator, the longest timeout, pending acknowledgements per transaction and per
subscription; and the per-topic tables dropped when a topic unloads and rebuilt at its next
load (an aborted message stays hidden)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from broker_rawclient import RawClient
from rest import http_json
from txn_raw import TxnClient, command, receive, subscribe
from waiting import wait_until

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand
TX = "/admin/v3/transactions"


class Conn:
    def __init__(self, url: str) -> None:
        self.raw = RawClient(url)
        self.raw.handshake()
        self.tc = TxnClient(self.raw)
        self.cons = RawClient(url)
        self.cons.handshake()
        self.acks = TxnClient(self.cons)

    def close(self) -> None:
        self.raw.close()
        self.cons.close()


@pytest.fixture
def bounded(broker_factory: Any) -> Any:
    return broker_factory(config_overrides={
        "transactionCoordinatorEnabled": True, "maxActiveTransactionsPerCoordinator": 2,
        "maxTransactionTimeoutMillis": 400, "maxPendingAcksPerTransaction": 2,
        "maxPendingAcksPerSubscription": 3})


@pytest.fixture
def conn(bounded: Any) -> Iterator[Conn]:
    c = Conn(bounded.service_url)
    yield c
    c.close()


def _new_txn(tc: TxnClient, ttl_ms: int) -> pb.CommandNewTxnResponse:
    tc.rid += 1
    answer = tc.raw.request(command(T.NEW_TXN, "newTxn", request_id=tc.rid,
                                    txn_ttl_seconds=ttl_ms, tc_id=0))
    assert answer.type == T.NEW_TXN_RESPONSE, answer
    return answer.newTxnResponse


def _messages(c: Conn, topic: str, n: int) -> list[tuple[int, int]]:
    assert c.raw.request(C.encode_producer(topic, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
    for i in range(n):
        c.tc.send(1, i, b"m%d" % i)
    subscribe(c.cons, topic, "s", 1, sub_type=pb.CommandSubscribe.Shared)
    return [receive(c.cons)[1] for _ in range(n)]


def test_open_transactions_past_the_bound_are_refused_as_pulsar_refuses_them(
        conn: Conn) -> None:
    first = conn.tc.new_txn(600_000)
    conn.tc.new_txn(600_000)
    refused = _new_txn(conn.tc, 600_000)
    assert refused.error == ServerError.UnknownError
    assert refused.message.startswith("New txn op reach max active txn! tcId : 0")
    assert "maxActiveTransactionsPerCoordinator=2" in refused.message
    assert not conn.tc.end(first, commit=False).HasField("error")
    assert not _new_txn(conn.tc, 600_000).HasField("error")   # room again


def test_a_longer_timeout_is_cut_to_the_bound_and_the_transaction_aborted_then(
        bounded: Any, conn: Conn) -> None:
    txn = conn.tc.new_txn(3_600_000)
    _, meta = http_json(bounded.web_url, "GET", f"{TX}/transactionMetadata/{txn[0]}/{txn[1]}")
    assert meta["timeoutAt"] == 400

    def status() -> str:
        _, body = http_json(bounded.web_url, "GET",
                            f"{TX}/transactionMetadata/{txn[0]}/{txn[1]}")
        return str(body["status"])

    wait_until(lambda: status() == "ABORTED", message="aborted at the cut timeout")
    answer = conn.tc.end(txn, commit=True)
    assert answer.error == ServerError.TransactionNotFound and "ABORTED" in answer.message


def test_pending_acks_past_the_bound_of_a_transaction_are_refused(conn: Conn) -> None:
    topic = "persistent://public/default/txn-bound-acks"
    ids = _messages(conn, topic, 3)
    txn = conn.tc.new_txn(600_000)
    conn.tc.add_subscription(txn, topic, "s")
    assert not conn.acks.ack(1, ids[:2], txn).HasField("error")
    refused = conn.acks.ack(1, ids[2:], txn)
    assert refused.error == ServerError.NotAllowedError
    assert "maxPendingAcksPerTransaction" in refused.message
    assert not conn.tc.end(txn, commit=True).HasField("error")   # still ends, with its 2 acks
    conn.cons.request(C.encode_close_consumer(1, 50))
    subscribe(conn.cons, topic, "s", 2)
    assert receive(conn.cons) == (b"m2", ids[2])   # only the refused one is left


def test_pending_acks_past_the_bound_of_a_subscription_are_refused(conn: Conn) -> None:
    topic = "persistent://public/default/txn-bound-sub"
    ids = _messages(conn, topic, 4)
    a, b = conn.tc.new_txn(600_000), conn.tc.new_txn(600_000)
    assert not conn.acks.ack(1, ids[:2], a).HasField("error")
    assert not conn.acks.ack(1, ids[2:3], b).HasField("error")
    refused = conn.acks.ack(1, ids[3:], b)
    assert refused.error == ServerError.NotAllowedError
    assert "maxPendingAcksPerSubscription" in refused.message
    assert not conn.tc.end(a, commit=False).HasField("error")
    assert sorted(receive(conn.cons)[1] for _ in range(2)) == ids[:2]   # handed back
    assert not conn.acks.ack(1, ids[3:], b).HasField("error")   # room again


def test_a_topic_unloaded_drops_its_tables_and_its_next_load_rebuilds_them(
        bounded: Any, conn: Conn) -> None:
    topic = "persistent://public/default/txn-bound-unload"
    assert conn.raw.request(C.encode_producer(topic, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
    subscribe(conn.cons, topic, "s", 1, sub_type=pb.CommandSubscribe.Shared)
    aborted = conn.tc.new_txn(600_000)
    conn.tc.add_partition(aborted, topic)
    conn.tc.send(1, 0, b"aborted", aborted)
    assert not conn.tc.end(aborted, commit=False).HasField("error")
    plain = conn.tc.send(1, 1, b"plain").message_id
    got = receive(conn.cons)
    assert got == (b"plain", (plain.ledgerId, plain.entryId))
    acked = conn.tc.new_txn(600_000)
    assert not conn.acks.ack(1, [got[1]], acked).HasField("error")
    assert not conn.tc.end(acked, commit=False).HasField("error")
    assert receive(conn.cons) == got   # the aborted ack handed the message back
    txns = bounded.service.transactions

    def tables() -> tuple[bool, bool]:
        return (topic in txns.buffer_stats(), (topic, "s") in txns.pending_ack_stats())

    assert bounded.call(tables) == (True, True)
    conn.raw.close()
    conn.cons.close()
    status, _ = http_json(bounded.web_url, "PUT",
                          "/admin/v2/persistent/public/default/txn-bound-unload/unload")
    assert status == 204
    assert bounded.call(tables) == (False, False)
    # Loaded again: the buffer is rebuilt from the ledger, the aborted message stays hidden.
    again = Conn(bounded.service_url)
    try:
        subscribe(again.cons, topic, "fresh", 1)
        assert receive(again.cons) == got
        assert bounded.call(tables)[0]
    finally:
        again.close()
