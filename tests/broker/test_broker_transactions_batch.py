"""Batch-index acknowledgements in transactions, on the wire: transactions acknowledging
different messages of one batch entry do not conflict (the same message does, as Pulsar's
PendingAckHandleImpl decides); an entry whose consumer left before the end is delivered again
without the messages held; an abort hands them back, a commit applies them."""

from __future__ import annotations

from typing import Any

from broker_rawclient import RawClient
from rest import http_json
from txn_raw import TxnClient, subscribe

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand
TOPIC = "persistent://public/default/txn-batch-index"


def _message(raw: RawClient) -> tuple[tuple[int, int], list[int]]:
    """The next MESSAGE's id and the ack set it carries ([] for none)."""
    while True:
        cmd = raw.recv_command(10)
        if cmd.type == T.MESSAGE:
            mid = cmd.message.message_id
            return (mid.ledgerId, mid.entryId), list(cmd.message.ack_set)


def _ack(tc: TxnClient, consumer_id: int, entry: tuple[int, int], unacked: int,
         txn: tuple[int, int] | None) -> pb.CommandAckResponse:
    """ACK of messages of a 4-message batch entry: *unacked* has a bit per message left."""
    cmd = T(type=T.ACK)
    a = cmd.ack
    a.consumer_id = consumer_id
    a.ack_type = pb.CommandAck.Individual
    a.message_id.add(ledgerId=entry[0], entryId=entry[1], ack_set=[unacked])
    if txn is not None:
        a.txnid_most_bits, a.txnid_least_bits = txn
    tc.rid += 1
    a.request_id = tc.rid
    answer = tc.raw.request(C.encode_command(cmd))
    assert answer.type == T.ACK_RESPONSE, answer
    return answer.ackResponse


def test_batch_indexes_in_transactions(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={"transactionCoordinatorEnabled": True})
    url = broker.service_url
    prod, first, second = RawClient(url), RawClient(url), RawClient(url)
    try:
        for raw in (prod, first, second):
            raw.handshake()
        tc, acks1, acks2 = TxnClient(prod), TxnClient(first), TxnClient(second)
        assert prod.request(C.encode_producer(TOPIC, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
        subscribe(first, TOPIC, "s", 1, sub_type=pb.CommandSubscribe.Shared)
        tc.send(1, 0, b"", batch=[b"m0", b"m1", b"m2", b"m3"])
        entry, ack_set = _message(first)
        assert ack_set == []

        a, b, c = tc.new_txn(), tc.new_txn(), tc.new_txn()
        assert not _ack(acks1, 1, entry, 0b1110, a).HasField("error")    # message 0 in a
        assert not _ack(acks1, 1, entry, 0b1101, b).HasField("error")    # message 1 in b
        conflict = _ack(acks1, 1, entry, 0b1001, c)                      # 1 and 2 in c
        assert conflict.error == ServerError.TransactionConflict
        assert "in pending ack status of transaction" in conflict.message

        # The consumer leaves before the ends: the entry comes again without 0 and 1.
        assert first.request(C.encode_close_consumer(1, 50)).type == T.SUCCESS
        subscribe(second, TOPIC, "s", 2, sub_type=pb.CommandSubscribe.Shared)
        assert _message(second) == (entry, [0b1100])
        assert not tc.end(a, commit=False).HasField("error")             # 0 handed back
        assert _message(second) == (entry, [0b1101])
        assert not tc.end(b, commit=True).HasField("error")              # 1 applied
        # The other three acknowledged (outside a transaction): nothing is left.
        assert not _ack(acks2, 2, entry, 0b0010, None).HasField("error")
        status, stats = http_json(
            broker.web_url, "GET", "/admin/v2/persistent/public/default/txn-batch-index/stats")
        assert status == 200 and stats["subscriptions"]["s"]["msgBacklog"] == 0
    finally:
        for raw in (prod, first, second):
            raw.close()


def test_an_aborted_cumulative_ack_after_a_restart_gives_each_message_back_once(
        broker_factory: Any, tmp_path: Any) -> None:
    """The abort hands back only what the dispatcher passed; the rest it reads again, so a
    message is not delivered both from the replay set and by the read (a duplicate)."""
    data = tmp_path / "cumulative"
    on = {"transactionCoordinatorEnabled": True}
    topic = "persistent://public/default/txn-cumulative-restart"
    b = broker_factory(data_dir=data, config_overrides=on)
    prod, cons = RawClient(b.service_url), RawClient(b.service_url)
    prod.handshake()
    cons.handshake()
    tc, acks = TxnClient(prod), TxnClient(cons)
    assert prod.request(C.encode_producer(topic, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
    for i in range(3):
        tc.send(1, i, b"m%d" % i)
    subscribe(cons, topic, "s", 1, sub_type=pb.CommandSubscribe.Exclusive)
    ids = [_message(cons)[0] for _ in range(3)]
    txn = tc.new_txn()
    assert not acks.ack(1, [ids[2]], txn, cumulative=True).HasField("error")
    prod.close()
    cons.close()
    b.stop()
    b2 = broker_factory(data_dir=data, config_overrides=on)
    prod, cons = RawClient(b2.service_url), RawClient(b2.service_url)
    try:
        prod.handshake()
        cons.handshake()
        tc = TxnClient(prod)
        # Subscribed without permits: nothing is read before the abort.
        subscribe(cons, topic, "s", 1, sub_type=pb.CommandSubscribe.Exclusive, permits=0)
        assert not tc.end(txn, commit=False).HasField("error")
        assert prod.request(C.encode_producer(topic, 1, 7, None, 0)).type == \
            T.PRODUCER_SUCCESS
        tc.send(1, 10, b"last")
        cons.send(C.encode_flow(1, 100))
        got = [_message(cons)[0] for _ in range(4)]
        assert got[:3] == ids and got[3] not in ids   # each once, in order, then the last
    finally:
        prod.close()
        cons.close()


def test_a_batch_acknowledged_by_index_across_a_restart_is_not_delivered_again(
        broker_factory: Any, tmp_path: Any) -> None:
    """The batch's size is not kept across the restart, so the commit cannot tell the entry
    is fully acknowledged: its next read does, and acknowledges it unseen."""
    data = tmp_path / "batch-restart"
    on = {"transactionCoordinatorEnabled": True}
    topic = "persistent://public/default/txn-batch-restart"
    b = broker_factory(data_dir=data, config_overrides=on)
    prod, cons = RawClient(b.service_url), RawClient(b.service_url)
    prod.handshake()
    cons.handshake()
    tc, acks = TxnClient(prod), TxnClient(cons)
    assert prod.request(C.encode_producer(topic, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
    subscribe(cons, topic, "s", 1, sub_type=pb.CommandSubscribe.Shared)
    tc.send(1, 0, b"", batch=[b"m0", b"m1", b"m2", b"m3"])
    entry, _ = _message(cons)
    txn = tc.new_txn()
    assert not _ack(acks, 1, entry, 0b1100, txn).HasField("error")
    assert not _ack(acks, 1, entry, 0b0011, txn).HasField("error")
    prod.close()
    cons.close()
    b.stop()
    b2 = broker_factory(data_dir=data, config_overrides=on)
    prod, cons = RawClient(b2.service_url), RawClient(b2.service_url)
    try:
        prod.handshake()
        cons.handshake()
        tc = TxnClient(prod)
        assert not tc.end(txn, commit=True).HasField("error")
        assert prod.request(C.encode_producer(topic, 1, 7, None, 0)).type == \
            T.PRODUCER_SUCCESS
        last = tc.send(1, 10, b"last").message_id
        subscribe(cons, topic, "s", 1, sub_type=pb.CommandSubscribe.Shared)
        assert _message(cons)[0] == (last.ledgerId, last.entryId)
        acks = TxnClient(cons)
        assert not _ack(acks, 1, (last.ledgerId, last.entryId), 0, None).HasField("error")
        status, stats = http_json(
            b2.web_url, "GET", "/admin/v2/persistent/public/default/txn-batch-restart/stats")
        assert status == 200 and stats["subscriptions"]["s"]["msgBacklog"] == 0
    finally:
        prod.close()
        cons.close()
