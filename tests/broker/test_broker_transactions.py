"""Transactions on the wire (transactionCoordinatorEnabled): the coordinator's commands and
errors, produce and acknowledge in a transaction, ordering behind an open transaction, timeouts
and a restart. Raw frames, so every answer is checked as the broker writes it."""

from __future__ import annotations

import base64
import json
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from broker_rawclient import RawClient, make_entry
from rest import http_json
from txn_raw import TC_ASSIGN, TxnClient, command, receive, subscribe
from waiting import wait_until

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand
ON = {"transactionCoordinatorEnabled": True}


@pytest.fixture
def txn_broker(broker_factory: Any) -> Any:
    return broker_factory(config_overrides=ON)


class Conn:
    """Two raw connections: one for the coordinator and producers, one for consumers."""

    def __init__(self, url: str) -> None:
        self.raw = RawClient(url)
        self.raw.handshake()
        self.tc = TxnClient(self.raw)
        self.cons = RawClient(url)
        self.cons.handshake()
        self.acks = TxnClient(self.cons)   # ACKs go on their consumer's connection

    def close(self) -> None:
        self.raw.close()
        self.cons.close()


@pytest.fixture
def conn(txn_broker: Any) -> Iterator[Conn]:
    c = Conn(txn_broker.service_url)
    yield c
    c.close()


def _producer(c: Conn, topic: str, producer_id: int = 1) -> None:
    assert c.raw.request(C.encode_producer(topic, producer_id, 7, None, 0)).type == \
        T.PRODUCER_SUCCESS


def _wait_aborted(tc: TxnClient, txn: tuple[int, int]) -> None:
    """Until the coordinator has ended *txn* by aborting it (a COMMIT asked meanwhile finds it
    ABORTING, never commits it)."""
    def ended() -> pb.CommandEndTxnResponse | None:
        answer = tc.end(txn, commit=True)
        if answer.error == ServerError.InvalidTxnStatus:
            assert "in ABORTING status" in answer.message, answer.message
            return None
        return answer

    answer = wait_until(ended, message=f"transaction {txn} ended")
    assert answer.error == ServerError.TransactionNotFound and "ABORTED" in answer.message, answer


def test_coordinator_is_found_and_connects(conn: Conn, txn_broker: Any) -> None:
    meta = conn.raw.request(C.encode_partitioned_metadata(TC_ASSIGN, 5))
    assert meta.partitionMetadataResponse.partitions == 1
    # The Go client looks it up over HTTP when given an http(s) service URL.
    path = TC_ASSIGN.replace("persistent://", "persistent/")
    status, body = http_json(txn_broker.web_url, "GET", f"/admin/v2/{path}/partitions")
    assert (status, body["partitions"]) == (200, 1), body
    status, body = http_json(txn_broker.web_url, "GET", f"/lookup/v2/topic/{path}-partition-0")
    assert status == 200 and body["brokerUrl"].startswith("pulsar://"), body
    lookup = conn.raw.request(C.encode_lookup(TC_ASSIGN + "-partition-0", 6))
    assert lookup.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Connect
    assert not conn.tc.tc_connect().HasField("error")
    missing = conn.raw.request(command(T.TC_CLIENT_CONNECT_REQUEST, "tcClientConnectRequest",
                                       request_id=9, tc_id=3)).tcClientConnectResponse
    assert missing.error == ServerError.TransactionCoordinatorNotFound
    first, second = conn.tc.new_txn(), conn.tc.new_txn()
    assert first[0] == second[0] == 0 and second[1] == first[1] + 1


def test_end_of_an_ended_or_unknown_transaction_is_refused(conn: Conn) -> None:
    txn = conn.tc.new_txn()
    assert not conn.tc.end(txn, commit=True).HasField("error")
    # As Pulsar (whose coordinator forgets a transaction as it ends): not found.
    again = conn.tc.end(txn, commit=False)
    assert again.error == ServerError.TransactionNotFound and "COMMITTED" in again.message
    late = conn.tc.add_partition(txn, "persistent://public/default/late")
    assert late.error == ServerError.TransactionNotFound
    unknown = conn.tc.end((0, 999_999), commit=True)
    assert unknown.error == ServerError.TransactionNotFound
    assert (unknown.txnid_most_bits, unknown.txnid_least_bits) == (0, 999_999)


def test_produced_in_a_transaction_is_delivered_at_commit_in_log_order(conn: Conn) -> None:
    topic = "persistent://public/default/txn-commit-order"
    _producer(conn, topic)
    subscribe(conn.cons, topic, "s", 1)
    txn = conn.tc.new_txn()
    assert not conn.tc.add_partition(txn, topic).HasField("error")
    conn.tc.send(1, 0, b"in-txn-1", txn)
    conn.tc.send(1, 1, b"plain-after", None)   # behind the open transaction: held back
    conn.tc.send(1, 2, b"in-txn-2", txn)
    assert not conn.tc.end(txn, commit=True).HasField("error")
    got = [receive(conn.cons)[0] for _ in range(3)]
    assert got == [b"in-txn-1", b"plain-after", b"in-txn-2"]


def test_aborted_messages_are_never_delivered(conn: Conn) -> None:
    topic = "persistent://public/default/txn-abort"
    _producer(conn, topic)
    subscribe(conn.cons, topic, "s", 1)
    conn.tc.send(1, 0, b"before", None)
    txn = conn.tc.new_txn()
    conn.tc.add_partition(txn, topic)
    conn.tc.send(1, 1, b"aborted-1", txn)
    conn.tc.send(1, 2, b"aborted-2", txn)
    assert not conn.tc.end(txn, commit=False).HasField("error")
    conn.tc.send(1, 3, b"after", None)
    assert [receive(conn.cons)[0] for _ in range(2)] == [b"before", b"after"]


def test_ack_in_a_transaction_is_undone_by_abort_and_kept_by_commit(conn: Conn) -> None:
    topic = "persistent://public/default/txn-ack"
    _producer(conn, topic)
    conn.tc.send(1, 0, b"m0", None)
    conn.tc.send(1, 1, b"m1", None)
    subscribe(conn.cons, topic, "s", 1)
    (p0, id0), (p1, id1) = receive(conn.cons), receive(conn.cons)
    assert (p0, p1) == (b"m0", b"m1")
    aborted = conn.tc.new_txn()
    conn.tc.add_subscription(aborted, topic, "s")
    assert not conn.acks.ack(1, [id0], aborted).HasField("error")
    other = conn.tc.new_txn()
    conflict = conn.acks.ack(1, [id0], other)
    assert conflict.error == ServerError.TransactionConflict
    assert not conn.tc.end(aborted, commit=False).HasField("error")
    assert receive(conn.cons) == (b"m0", id0)         # redelivered after the abort
    committed = conn.tc.new_txn()
    conn.tc.add_subscription(committed, topic, "s")
    assert not conn.acks.ack(1, [id0, id1], committed).HasField("error")
    assert not conn.tc.end(committed, commit=True).HasField("error")
    already = conn.acks.ack(1, [id0], other)
    assert already.error == ServerError.TransactionConflict
    # Nothing is left: a new consumer of the subscription gets the next message only.
    conn.cons.request(C.encode_close_consumer(1, 50))
    conn.tc.send(1, 2, b"m2", None)
    subscribe(conn.cons, topic, "s", 2)
    assert receive(conn.cons)[0] == b"m2"


def test_an_open_transaction_is_aborted_when_its_timeout_passes(conn: Conn) -> None:
    topic = "persistent://public/default/txn-timeout"
    _producer(conn, topic)
    subscribe(conn.cons, topic, "s", 1)
    txn = conn.tc.new_txn(ttl_ms=300)
    conn.tc.add_partition(txn, topic)
    conn.tc.send(1, 0, b"timed-out", txn)
    conn.tc.send(1, 1, b"plain", None)
    # The plain message is held back until the transaction ends: its arrival is the abort.
    assert receive(conn.cons)[0] == b"plain"
    _wait_aborted(conn.tc, txn)


def test_restart_keeps_committed_once_aborted_never_and_open_resolved(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "restart"
    topic = "persistent://public/default/txn-restart"
    b = broker_factory(data_dir=data, config_overrides=ON)
    c = Conn(b.service_url)
    _producer(c, topic)
    c.cons.request(C.encode_subscribe(topic, "s", 1, 1, 1, initial_position=1))
    committed, aborted, open_txn = c.tc.new_txn(), c.tc.new_txn(), c.tc.new_txn(ttl_ms=1500)
    for txn in (committed, aborted, open_txn):
        c.tc.add_partition(txn, topic)
    c.tc.send(1, 0, b"committed", committed)
    c.tc.send(1, 1, b"aborted", aborted)
    c.tc.send(1, 2, b"open", open_txn)
    c.tc.end(committed, commit=True)
    c.tc.end(aborted, commit=False)
    c.close()
    b.stop()
    b2 = broker_factory(data_dir=data, config_overrides=ON)
    c2 = Conn(b2.service_url)
    try:
        _producer(c2, topic)
        c2.tc.send(1, 10, b"after-restart", None)
        subscribe(c2.cons, topic, "s", 1)
        # The open transaction holds everything after its entry until its timeout aborts it.
        got = [receive(c2.cons)[0] for _ in range(2)]
        assert got == [b"committed", b"after-restart"]
        _wait_aborted(c2.tc, open_txn)
    finally:
        c2.close()


def test_a_delayed_message_in_a_transaction_is_scheduled_at_commit_and_not_cancellable_before(
        conn: Conn, txn_broker: Any) -> None:
    topic = "persistent://public/default/txn-delayed"
    base = "/admin/v2/persistent/public/default/txn-delayed"
    _producer(conn, topic)
    subscribe(conn.cons, topic, "s", 1)          # Shared: delays messages
    txn = conn.tc.new_txn()
    conn.tc.add_partition(txn, topic)
    deliver_at = int(time.time() * 1000) + 1500
    frame = C.encode_send(1, 0, make_entry(b"later", sequence_id=0, deliver_at_time=deliver_at,
                                           txnid_most_bits=txn[0], txnid_least_bits=txn[1]))
    receipt = conn.raw.request(frame).send_receipt
    mid = (receipt.message_id.ledgerId, receipt.message_id.entryId)
    status, body = http_json(txn_broker.web_url, "POST", f"{base}/cancelDelayedMessage?"
                             f"ledgerId={mid[0]}&entryId={mid[1]}&deliverAt={deliver_at}")
    assert status == 412 and "still open" in body["reason"], (status, body)
    status, body = http_json(txn_broker.web_url, "POST", f"{base}/subscription/s/skipByMessageIds",
                             json.dumps({str(mid[0]): str(mid[1])}).encode())
    assert status == 412 and "still open" in body["reason"], (status, body)
    assert not conn.tc.end(txn, commit=True).HasField("error")
    payload, got = receive(conn.cons)
    assert (payload, got) == (b"later", mid)
    assert time.time() * 1000 >= deliver_at     # held by the delayed tracker after the commit


def test_cumulative_ack_in_a_transaction(conn: Conn) -> None:
    topic = "persistent://public/default/txn-cumulative"
    _producer(conn, topic)
    for i in range(3):
        conn.tc.send(1, i, f"m{i}".encode(), None)
    subscribe(conn.cons, topic, "s", 1, sub_type=0)   # Exclusive
    ids = [receive(conn.cons)[1] for _ in range(3)]
    first = conn.tc.new_txn()
    assert not conn.acks.ack(1, [ids[2]], first, cumulative=True).HasField("error")
    other = conn.tc.new_txn()
    assert conn.acks.ack(1, [ids[0]], other).error == ServerError.TransactionConflict
    assert conn.acks.ack(1, [ids[1]], other, cumulative=True).error == \
        ServerError.TransactionConflict
    conn.tc.end(first, commit=False)
    assert [receive(conn.cons)[0] for _ in range(3)] == [b"m0", b"m1", b"m2"]
    second = conn.tc.new_txn()
    assert not conn.acks.ack(1, [ids[2]], second, cumulative=True).HasField("error")
    assert not conn.tc.end(second, commit=True).HasField("error")
    conn.cons.request(C.encode_close_consumer(1, 60))
    conn.tc.send(1, 3, b"m3", None)
    subscribe(conn.cons, topic, "s", 2, sub_type=0)
    assert receive(conn.cons)[0] == b"m3"


def test_kill_9_keeps_committed_drops_aborted_and_times_out_the_open(
        run_broker_process: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "kill9"
    topic = "persistent://public/default/txn-kill9"
    b = run_broker_process(data, config_overrides=ON)
    c = Conn(b.service_url)
    _producer(c, topic)
    c.cons.request(C.encode_subscribe(topic, "s", 1, 1, 1, initial_position=1))
    c.tc.send(1, 0, b"plain-0", None)
    subscribe(c.cons, topic, "acked", 2)
    plain_id = receive(c.cons)[1]
    committed, aborted = c.tc.new_txn(), c.tc.new_txn()
    open_txn = c.tc.new_txn(ttl_ms=2000)
    for txn in (committed, aborted, open_txn):
        c.tc.add_partition(txn, topic)
    c.tc.add_subscription(committed, topic, "acked")
    c.tc.send(1, 1, b"committed", committed)
    c.tc.send(1, 2, b"aborted", aborted)
    assert not c.acks.ack(2, [plain_id], committed).HasField("error")
    c.tc.end(committed, commit=True)
    c.tc.end(aborted, commit=False)
    c.tc.send(1, 3, b"open", open_txn)
    b.kill()
    c.close()
    b2 = run_broker_process(data, config_overrides=ON)
    c2 = Conn(b2.service_url)
    try:
        _producer(c2, topic)
        c2.tc.send(1, 10, b"after", None)
        subscribe(c2.cons, topic, "s", 1)
        assert [receive(c2.cons)[0] for _ in range(3)] == [b"plain-0", b"committed", b"after"]
        subscribe(c2.cons, topic, "acked", 2)   # the committed ack survived: plain-0 is gone
        assert [receive(c2.cons)[0] for _ in range(2)] == [b"committed", b"after"]
        _wait_aborted(c2.tc, open_txn)
    finally:
        c2.close()


def test_end_on_partition_from_a_client_may_only_repeat_the_coordinators_decision(
        conn: Conn) -> None:
    topic = "persistent://public/default/txn-end-on-partition"
    _producer(conn, topic)
    subscribe(conn.cons, topic, "s", 1)
    txn = conn.tc.new_txn()
    conn.tc.add_partition(txn, topic)
    conn.tc.send(1, 0, b"held", txn)

    def end_on_partition(commit: bool, rid: int) -> pb.CommandEndTxnOnPartitionResponse:
        answer = conn.raw.request(command(
            T.END_TXN_ON_PARTITION, "endTxnOnPartition", request_id=rid,
            txnid_most_bits=txn[0], txnid_least_bits=txn[1], topic=topic,
            txn_action=pb.COMMIT if commit else pb.ABORT))
        assert answer.type == T.END_TXN_ON_PARTITION_RESPONSE, answer
        return answer.endTxnOnPartitionResponse

    refused = end_on_partition(True, 70)
    assert refused.error == ServerError.NotAllowedError and "OPEN" in refused.message
    assert not conn.tc.end(txn, commit=True).HasField("error")
    assert not end_on_partition(True, 71).HasField("error")     # a repeat: nothing changes
    assert end_on_partition(False, 72).error == ServerError.NotAllowedError
    conn.tc.send(1, 1, b"after", None)
    assert [receive(conn.cons)[0] for _ in range(2)] == [b"held", b"after"]


def test_a_pending_ack_survives_a_restart_holds_the_message_and_is_undone_by_abort(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "pending"
    topic = "persistent://public/default/txn-pending-restart"
    b = broker_factory(data_dir=data, config_overrides=ON)
    c = Conn(b.service_url)
    _producer(c, topic)
    c.tc.send(1, 0, b"m0", None)
    subscribe(c.cons, topic, "s", 1)
    _, mid = receive(c.cons)
    txn = c.tc.new_txn()
    c.tc.add_subscription(txn, topic, "s")
    assert not c.acks.ack(1, [mid], txn).HasField("error")
    c.close()
    b.stop()
    b2 = broker_factory(data_dir=data, config_overrides=ON)
    c2 = Conn(b2.service_url)
    try:
        _producer(c2, topic)
        c2.tc.send(1, 1, b"m1", None)
        subscribe(c2.cons, topic, "s", 1)
        assert receive(c2.cons)[0] == b"m1"      # m0 is held: its ack is pending
        assert c2.acks.ack(1, [mid], c2.tc.new_txn()).error == ServerError.TransactionConflict
        assert not c2.tc.end(txn, commit=False).HasField("error")
        assert receive(c2.cons) == (b"m0", mid)  # the abort gives it back
    finally:
        c2.close()


def test_a_transaction_named_only_in_the_send_command_as_the_go_client_does(conn: Conn) -> None:
    topic = "persistent://public/default/txn-go-style"
    _producer(conn, topic)
    subscribe(conn.cons, topic, "s", 1)
    aborted, committed = conn.tc.new_txn(), conn.tc.new_txn()
    conn.tc.add_partition(aborted, topic)
    conn.tc.add_partition(committed, topic)
    conn.tc.send(1, 0, b"", aborted, in_metadata=False, batch=[b"a0", b"a1"])
    conn.tc.send(1, 2, b"c0", committed, in_metadata=False)
    conn.tc.end(aborted, commit=False)
    conn.tc.send(1, 3, b"plain", None)
    conn.tc.end(committed, commit=True)
    assert [receive(conn.cons)[0] for _ in range(2)] == [b"c0", b"plain"]


def test_only_the_owner_or_a_super_user_may_use_a_transaction(broker_factory: Any) -> None:
    secret = b"t" * 32
    b = broker_factory(config_overrides={
        **ON, "authenticationEnabled": True, "authorizationEnabled": True,
        "authenticationProviders":
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(secret).decode(),
        "superUserRoles": "admin"})

    def connected(role: str) -> TxnClient:
        raw = RawClient(b.service_url)
        cmd = T(type=T.CONNECT)
        cmd.connect.client_version = "raw"
        cmd.connect.protocol_version = 20
        cmd.connect.auth_method_name = "token"
        cmd.connect.auth_data = jwt.encode({"sub": role}, secret, algorithm="HS256").encode()
        assert raw.request(C.encode_command(cmd)).type == T.CONNECTED
        return TxnClient(raw)

    alice, bob, admin = connected("alice"), connected("bob"), connected("admin")
    try:
        first, second = alice.new_txn(), alice.new_txn()
        refused = bob.end(first, commit=True)
        assert refused.error == ServerError.AuthorizationError and "owner" in refused.message
        assert bob.add_partition(first, "persistent://public/default/x").error == \
            ServerError.AuthorizationError
        assert not alice.end(first, commit=True).HasField("error")
        assert not admin.end(second, commit=False).HasField("error")   # a super-user may
    finally:
        for c in (alice, bob, admin):
            c.raw.close()


def test_an_ack_with_a_zero_transaction_id_is_a_plain_ack(conn: Conn) -> None:
    topic = "persistent://public/default/txn-zero-ack"
    _producer(conn, topic)
    conn.tc.send(1, 0, b"m0", None)
    subscribe(conn.cons, topic, "s", 1)
    _, mid = receive(conn.cons)
    assert not conn.acks.ack(1, [mid], (0, 0)).HasField("error")
    conn.cons.request(C.encode_close_consumer(1, 80))
    conn.tc.send(1, 1, b"m1", None)
    subscribe(conn.cons, topic, "s", 2)
    assert receive(conn.cons)[0] == b"m1"     # m0 was acknowledged at once


def test_the_last_message_id_is_the_last_one_an_open_transaction_does_not_hold(
        conn: Conn) -> None:
    topic = "persistent://public/default/txn-last-id"
    _producer(conn, topic)
    plain = conn.tc.send(1, 0, b"m0", None).message_id
    answer = conn.cons.request(C.encode_subscribe(topic, "s", 1, 1, 1, initial_position=1))
    assert answer.type == T.SUCCESS
    txn = conn.tc.new_txn()
    conn.tc.add_partition(txn, topic)
    conn.tc.send(1, 1, b"t0", txn)
    conn.tc.send(1, 2, b"m1", None)

    def last_id() -> tuple[int, int]:
        r = conn.cons.request(C.encode_get_last_message_id(1, 90)).getLastMessageIdResponse
        return r.last_message_id.ledgerId, r.last_message_id.entryId

    assert last_id() == (plain.ledgerId, plain.entryId)
    conn.tc.end(txn, commit=True)
    assert last_id() > (plain.ledgerId, plain.entryId + 2)   # m1 and the commit marker


def _delete_subscription(web_url: str, topic: str, sub: str) -> None:
    path = topic.replace("persistent://", "persistent/")
    status, body = http_json(web_url, "DELETE", f"/admin/v2/{path}/subscription/{sub}")
    assert status == 204, (status, body)


Ids = tuple[tuple[int, int], tuple[int, int]]


def _m0_acked_in_a_transaction(c: Conn, topic: str, ttl_ms: int = 60_000
                               ) -> tuple[tuple[int, int], Ids]:
    """m0 and m1 published and received on subscription s (consumer 1), m0 acknowledged in a
    new transaction: (the transaction, (m0's id, m1's id))."""
    _producer(c, topic)
    c.tc.send(1, 0, b"m0", None)
    c.tc.send(1, 1, b"m1", None)
    subscribe(c.cons, topic, "s", 1)
    (_, id0), (_, id1) = receive(c.cons), receive(c.cons)
    txn = c.tc.new_txn(ttl_ms=ttl_ms)
    c.tc.add_subscription(txn, topic, "s")
    assert not c.acks.ack(1, [id0], txn).HasField("error")
    return txn, (id0, id1)


def _new_s_gets_both_and_the_commit_acks_neither(c: Conn, topic: str, txn: tuple[int, int],
                                                 ids: Ids) -> None:
    """Subscription s, made again, gets m0 and m1; after the commit of *txn* a new consumer
    gets both again (the commit acknowledged nothing on it)."""
    (id0, id1) = ids
    subscribe(c.cons, topic, "s", 2)                  # again, from the earliest
    assert [receive(c.cons) for _ in range(2)] == [(b"m0", id0), (b"m1", id1)]
    assert not c.tc.end(txn, commit=True).HasField("error")
    c.cons.request(C.encode_close_consumer(2, 51))
    subscribe(c.cons, topic, "s", 3)
    assert [receive(c.cons) for _ in range(2)] == [(b"m0", id0), (b"m1", id1)]


def test_a_deleted_subscriptions_pending_acks_never_touch_one_made_again_with_its_name(
        conn: Conn, txn_broker: Any) -> None:
    """As Pulsar's subscription delete closes and deletes its pending-ack store: a new
    subscription of the same name is not held back by, nor acknowledged at the commit of, a
    transaction that acknowledged on the one deleted."""
    topic = "persistent://public/default/txn-sub-again"
    txn, ids = _m0_acked_in_a_transaction(conn, topic)
    conn.cons.request(C.encode_close_consumer(1, 50))
    _delete_subscription(txn_broker.web_url, topic, "s")
    _new_s_gets_both_and_the_commit_acks_neither(conn, topic, txn, ids)


def test_a_deleted_subscriptions_pending_acks_stay_void_after_restarts(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    """The acknowledgement is logged, the broker restarts (the log brings it back as pending),
    the subscription is deleted, the broker restarts again: the subscription made again with
    its name gets both messages, and the commit acknowledges neither on it."""
    data = tmp_path / "unsub"
    topic = "persistent://public/default/txn-sub-again-restart"
    b = broker_factory(data_dir=data, config_overrides=ON)
    c = Conn(b.service_url)
    txn, ids = _m0_acked_in_a_transaction(c, topic, ttl_ms=600_000)
    c.close()
    b.stop()
    b = broker_factory(data_dir=data, config_overrides=ON)
    _delete_subscription(b.web_url, topic, "s")
    b.stop()
    b = broker_factory(data_dir=data, config_overrides=ON)
    c = Conn(b.service_url)
    try:
        _new_s_gets_both_and_the_commit_acks_neither(c, topic, txn, ids)
    finally:
        c.close()
