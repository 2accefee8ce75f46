"""Pulsar's v3 transactions admin REST and the pulsar_txn_* metrics, over real transactions.

Transactions are driven with raw frames (the official Python client has no transaction API);
the answers' keys and JSON types are Pulsar 4.0's (see broker/admin/transactions_routes.py).
"""

from __future__ import annotations

import base64
import pathlib
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol import commands as C
from protocol import pulsar_pb as pb
from tests.admin.conftest import http

RAW_CLIENTS = pathlib.Path(__file__).resolve().parents[1] / "broker"
if str(RAW_CLIENTS) not in sys.path:  # the raw wire client and its transaction commands
    sys.path.insert(0, str(RAW_CLIENTS))

from broker_rawclient import RawClient  # noqa: E402
from txn_raw import TxnClient, receive, subscribe  # noqa: E402

T = pb.BaseCommand
TX = "/admin/v3/transactions"
TTL_MS = 600_000
TOPIC_PATH = "public/default/txn-admin"
TOPIC = f"persistent://{TOPIC_PATH}"


class Conn:
    """A producer connection that is also the transaction client, and a consumer connection."""

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
def txn_broker(broker_factory: Any) -> Any:
    return broker_factory(config_overrides={"transactionCoordinatorEnabled": True})


@pytest.fixture
def conn(txn_broker: Any) -> Iterator[Conn]:
    c = Conn(txn_broker.service_url)
    yield c
    c.close()


def _get(broker: Any, path: str) -> Any:
    return http(broker.web_url, "GET", path)


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return type(value).__name__


def test_without_the_coordinator_every_route_answers_503(broker: Any) -> None:
    http(broker.web_url, "PUT", f"/admin/v2/persistent/{TOPIC_PATH}")
    for path in ("coordinators", "coordinatorStats", "coordinatorStats?coordinatorId=0",
                 "transactionMetadata/0/1", "slowTransactions/0",
                 f"transactionBufferStats/{TOPIC_PATH}", f"pendingAckStats/{TOPIC_PATH}/s",
                 f"transactionInBufferStats/{TOPIC_PATH}/0/1",
                 f"transactionInPendingAckStats/{TOPIC_PATH}/s/0/1",
                 f"pendingAckInternalStats/{TOPIC_PATH}/s",
                 f"positionStatsInPendingAck/{TOPIC_PATH}/s/1/1",
                 "coordinatorInternalStats/0"):
        reply = _get(broker, f"{TX}/{path}")
        assert (reply.status, reply.reason) == (
            503, "This Broker is not configured with transactionCoordinatorEnabled=true."), path
    scale = http(broker.web_url, "POST", f"{TX}/transactionCoordinator/replicas", 2)
    assert scale.status == 503
    # Pulsar asks the buffer for its snapshot without checking the coordinator: none
    internal = _get(broker, f"{TX}/transactionBufferInternalStats/{TOPIC_PATH}")
    assert (internal.status, internal.reason) == (
        404, "Transaction buffer Snapshot for the topic does not exist")


def test_an_open_transaction_then_its_commit_and_an_abort(txn_broker: Any, conn: Conn) -> None:
    assert conn.raw.request(C.encode_producer(TOPIC, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
    subscribe(conn.cons, TOPIC, "s", 1, sub_type=pb.CommandSubscribe.Shared)
    plain = conn.tc.send(1, 0, b"plain").message_id
    _, plain_id = receive(conn.cons)
    assert plain_id == (plain.ledgerId, plain.entryId)

    untouched = _get(txn_broker, f"{TX}/transactionBufferStats/{TOPIC_PATH}")
    assert untouched.status == 200, untouched.body
    assert untouched.body["maxReadPosition"] == f"{plain.ledgerId}:{plain.entryId}"
    assert _get(txn_broker, f"{TX}/pendingAckStats/{TOPIC_PATH}/s").body == {
        "state": "None", "ongoingTxnSize": 0, "recoverStartTime": 0, "recoverEndTime": 0}

    txn = conn.tc.new_txn(TTL_MS)
    assert not conn.tc.add_partition(txn, TOPIC).HasField("error")
    assert not conn.tc.add_subscription(txn, TOPIC, "s").HasField("error")
    sent = conn.tc.send(1, 1, b"in-txn", txn).message_id
    assert not conn.acks.ack(1, [plain_id], txn).HasField("error")

    coordinators = _get(txn_broker, f"{TX}/coordinators")
    assert coordinators.status == 200
    assert [c["id"] for c in coordinators.body] == [0]
    assert coordinators.body[0]["brokerServiceUrl"].startswith("pulsar://")
    stats = _get(txn_broker, f"{TX}/coordinatorStats")
    assert stats.status == 200 and list(stats.body) == ["0"]
    assert _shape(stats.body["0"]) == {
        "state": "str", "leastSigBits": "int", "lowWaterMark": "int", "ongoingTxnSize": "int",
        "recoverStartTime": "int", "recoverEndTime": "int"}
    assert stats.body["0"]["ongoingTxnSize"] == 1
    assert stats.body["0"]["lowWaterMark"] == txn[1] - 1
    assert _get(txn_broker, f"{TX}/coordinatorStats?coordinatorId=0").body == stats.body["0"]

    meta = _get(txn_broker, f"{TX}/transactionMetadata/{txn[0]}/{txn[1]}")
    assert meta.status == 200, meta.body
    assert meta.body["txnId"] == f"({txn[0]},{txn[1]})" and meta.body["status"] == "OPEN"
    assert meta.body["timeoutAt"] == TTL_MS and isinstance(meta.body["openTimestamp"], int)
    start = f"{sent.ledgerId}:{sent.entryId}"
    assert meta.body["producedPartitions"] == {TOPIC: {"startPosition": start, "aborted": False}}
    assert meta.body["ackedPartitions"] == {TOPIC: {"s": {}}}
    slow = _get(txn_broker, f"{TX}/slowTransactions/{TTL_MS - 1}")
    assert slow.status == 200 and slow.body == {meta.body["txnId"]: meta.body}
    assert _get(txn_broker, f"{TX}/slowTransactions/{TTL_MS}").body == {}

    buffer = _get(txn_broker, f"{TX}/transactionBufferStats/{TOPIC_PATH}?lowWaterMarks=true")
    assert _shape(buffer.body) == {
        "state": "str", "maxReadPosition": "str", "lastSnapshotTimestamps": "int",
        "lowWaterMarks": {"0": "int"}, "ongoingTxnSize": "int", "recoverStartTime": "int",
        "recoverEndTime": "int", "totalAbortedTransactions": "int"}
    assert buffer.body["state"] == "Ready" and buffer.body["ongoingTxnSize"] == 1
    assert buffer.body["maxReadPosition"] == f"{plain.ledgerId}:{plain.entryId}"  # held back
    pending = _get(txn_broker, f"{TX}/pendingAckStats/{TOPIC_PATH}/s")
    assert pending.body == {"state": "Ready", "ongoingTxnSize": 1, "recoverStartTime": 0,
                            "recoverEndTime": 0}
    in_buffer = _get(txn_broker, f"{TX}/transactionInBufferStats/{TOPIC_PATH}/{txn[0]}/{txn[1]}")
    assert in_buffer.body == {"startPosition": start, "aborted": False}
    in_pending = _get(txn_broker,
                      f"{TX}/transactionInPendingAckStats/{TOPIC_PATH}/s/{txn[0]}/{txn[1]}")
    assert (in_pending.status, in_pending.body) == (200, {})

    assert not conn.tc.end(txn, commit=True).HasField("error")
    ended = _get(txn_broker, f"{TX}/transactionMetadata/{txn[0]}/{txn[1]}")
    assert ended.status == 200 and ended.body["status"] == "COMMITTED"
    assert _get(txn_broker, f"{TX}/slowTransactions/0").body == {}

    aborted = conn.tc.new_txn(TTL_MS)
    assert not conn.tc.add_partition(aborted, TOPIC).HasField("error")
    conn.tc.send(1, 2, b"aborted", aborted)
    assert not conn.tc.end(aborted, commit=False).HasField("error")
    after = _get(txn_broker, f"{TX}/transactionBufferStats/{TOPIC_PATH}").body
    assert (after["ongoingTxnSize"], after["totalAbortedTransactions"]) == (0, 1)
    gone = _get(txn_broker, f"{TX}/transactionInBufferStats/{TOPIC_PATH}/{aborted[0]}/{aborted[1]}")
    assert gone.body == {"aborted": True}

    with urllib.request.urlopen(txn_broker.web_url + "/metrics", timeout=10) as resp:
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(resp.read().decode())
                   for s in family.samples}
    coordinator = (("cluster", "standalone"), ("coordinator_id", "0"))
    for name, value in (("pulsar_txn_created_total", 2), ("pulsar_txn_committed_total", 1),
                        ("pulsar_txn_aborted_total", 1), ("pulsar_txn_active_count", 0),
                        ("pulsar_txn_timeout_total", 0)):
        assert samples[(name, coordinator)] == value, name
    assert samples[("pulsar_txn_append_log_total", coordinator)] > 0
    on_topic = (("cluster", "standalone"), ("namespace", "public/default"), ("topic", TOPIC))
    assert samples[("pulsar_txn_tb_committed_total", on_topic)] == 1
    assert samples[("pulsar_txn_tb_aborted_total", on_topic)] == 1
    assert samples[("pulsar_txn_tb_active_total", on_topic)] == 0
    on_sub = (("namespace", "public/default"), ("status", "succeed"), ("subscription", "s"),
              ("topic", TOPIC))
    assert samples[("pulsar_txn_tp_committed_count_total", on_sub)] == 1
    assert samples[("pulsar_txn_tp_aborted_count_total", on_sub)] == 0


def test_errors_have_pulsars_status_and_reason(txn_broker: Any, conn: Conn) -> None:
    conn.tc.tc_connect()
    http(txn_broker.web_url, "PUT", f"/admin/v2/persistent/{TOPIC_PATH}")
    cases = [
        ("coordinatorStats?coordinatorId=5", 404,
         "Transaction coordinator not found! coordinator id : 5"),
        ("slowTransactions/0?coordinatorId=5", 404,
         "Transaction coordinator not found! coordinator id : 5"),
        ("transactionMetadata/7/1", 404, "Transaction coordinator with id 7 not found!"),
        ("transactionMetadata/0/99999", 404, "The transaction with this txdID `(0,99999)`not found "),
        ("transactionBufferStats/public/default/missing", 404,
         "Topic not found persistent://public/default/missing"),
        ("pendingAckStats/public/default/missing/s", 404,
         "Topic not found persistent://public/default/missing"),
        (f"pendingAckStats/{TOPIC_PATH}/nosuch", 404, "Subscription not found"),
        ("transactionMetadata/x/1", 400, "Invalid mostSigBits: x"),
        ("slowTransactions/soon", 400, "Invalid timeout: soon"),
        ("coordinatorStats?coordinatorId=first", 400, "Invalid coordinatorId: first"),
        ("transactionMetadata/0/99999999999999999999", 400,
         "Invalid leastSigBits: 99999999999999999999"),
    ]
    for path, status, reason in cases:
        reply = _get(txn_broker, f"{TX}/{path}")
        assert (reply.status, reply.reason) == (status, reason), path


def test_clients_find_the_coordinator_over_http(txn_broker: Any, broker: Any) -> None:
    assign = "persistent/pulsar/system/transaction_coordinator_assign"
    meta = _get(txn_broker, f"/admin/v2/{assign}/partitions?checkAllowAutoCreation=true")
    assert (meta.status, meta.body) == (200, {"partitions": 1, "deleted": False})
    lookup = _get(txn_broker, f"/lookup/v2/topic/{assign}-partition-0")
    assert lookup.status == 200 and lookup.body["brokerUrl"] == txn_broker.service_url
    # Without the coordinator the assign topic is like any other in a missing namespace.
    assert _get(broker, f"/admin/v2/{assign}/partitions").status == 404
    assert _get(broker, f"/lookup/v2/topic/{assign}-partition-0").status == 404


def test_any_authenticated_role_may_read_them_as_in_pulsar(broker_factory: Any) -> None:
    secret = b"t" * 32
    secured = broker_factory(config_overrides={
        "authenticationEnabled": True,
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(secret).decode(),
        "authorizationEnabled": True, "superUserRoles": "admin",
        "transactionCoordinatorEnabled": True})

    def get(path: str, token: str | None) -> int:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        req = urllib.request.Request(secured.web_url + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    someone = jwt.encode({"sub": "someone"}, secret, algorithm="HS256")
    assert get(f"{TX}/coordinatorStats", someone) == 200
    assert get(f"{TX}/slowTransactions/0", someone) == 200
    assert get(f"{TX}/coordinatorStats", None) == 401
    # Other v3 paths keep the super-user rule.
    assert get("/admin/v3/other", someone) == 403


def test_the_metadata_keeps_the_names_the_client_gave(txn_broker: Any, conn: Conn) -> None:
    """As the Go client does: partitions and subscriptions registered by short name are shown
    under that name (Pulsar's coordinator keeps them as given), and the transaction still
    reaches the topic by its full name (the message is delivered at commit, the ack applied)."""
    short = "txn-short-name"
    full = f"persistent://public/default/{short}"
    assert conn.raw.request(C.encode_producer(full, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
    subscribe(conn.cons, full, "s", 1, sub_type=pb.CommandSubscribe.Shared)
    plain = conn.tc.send(1, 0, b"plain").message_id
    _, plain_id = receive(conn.cons)
    assert plain_id == (plain.ledgerId, plain.entryId)

    txn = conn.tc.new_txn(TTL_MS)
    assert not conn.tc.add_partition(txn, short).HasField("error")
    assert not conn.tc.add_subscription(txn, short, "s").HasField("error")
    sent = conn.tc.send(1, 1, b"in-txn", txn).message_id
    assert not conn.acks.ack(1, [plain_id], txn).HasField("error")
    meta = _get(txn_broker, f"{TX}/transactionMetadata/{txn[0]}/{txn[1]}").body
    start = f"{sent.ledgerId}:{sent.entryId}"
    assert meta["producedPartitions"] == {short: {"startPosition": start, "aborted": False}}
    assert meta["ackedPartitions"] == {short: {"s": {}}}

    assert not conn.tc.end(txn, commit=True).HasField("error")
    payload, got = receive(conn.cons)
    assert (payload, got) == (b"in-txn", (sent.ledgerId, sent.entryId))
    stats = _get(txn_broker, f"/admin/v2/persistent/public/default/{short}/stats").body
    assert stats["subscriptions"]["s"]["msgBacklog"] == 1   # the plain one acked at commit
    ended = _get(txn_broker, f"{TX}/transactionMetadata/{txn[0]}/{txn[1]}").body
    assert ended["status"] == "COMMITTED" and list(ended["producedPartitions"]) == [short]

def test_internal_stats_position_stats_and_scaling(txn_broker: Any, conn: Conn) -> None:
    assert conn.raw.request(C.encode_producer(TOPIC, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
    subscribe(conn.cons, TOPIC, "s", 1, sub_type=pb.CommandSubscribe.Shared)
    ids = []
    for i in range(3):
        conn.tc.send(1, i, b"plain")
        ids.append(receive(conn.cons)[1])

    def position(pos: tuple[int, int], query: str = "") -> Any:
        reply = _get(txn_broker, f"{TX}/positionStatsInPendingAck/{TOPIC_PATH}/s/"
                                 f"{pos[0]}/{pos[1]}{query}")
        assert reply.status == 200, reply.body
        return reply.body["state"]

    assert position(ids[0]) == "PendingAckNotReady"   # no transaction acknowledged here yet
    not_ready = _get(txn_broker, f"{TX}/pendingAckInternalStats/{TOPIC_PATH}/s")
    assert (not_ready.status, not_ready.reason) == (503, "Pending ack have not init success!")
    missing = _get(txn_broker, f"{TX}/pendingAckInternalStats/{TOPIC_PATH}/nosuch")
    assert (missing.status, missing.reason) == (404, "Subscription not found")

    snapshot = _get(txn_broker, f"{TX}/transactionBufferInternalStats/{TOPIC_PATH}")
    assert snapshot.status == 200, snapshot.body   # taken at the topic's first load
    assert snapshot.body["snapshotType"] == "Single"
    single = snapshot.body["singleSnapshotInternalStats"]
    assert single["managedLedgerName"].endswith(TOPIC)
    assert set(single["managedLedgerInternalStats"]) >= {"numberOfEntries", "lastConfirmedEntry"}
    stats = _get(txn_broker, f"{TX}/transactionBufferStats/{TOPIC_PATH}").body
    assert stats["lastSnapshotTimestamps"] > 0

    txn = conn.tc.new_txn(TTL_MS)
    assert not conn.tc.add_subscription(txn, TOPIC, "s").HasField("error")
    assert not conn.acks.ack(1, [ids[0]], txn).HasField("error")
    assert position(ids[0]) == "PendingAck"
    assert position(ids[1]) == "NotInPendingAck"
    assert position(ids[0], "?batchIndex=0") == "InvalidPosition"   # a whole entry
    log = _get(txn_broker, f"{TX}/pendingAckInternalStats/{TOPIC_PATH}/s")
    assert log.status == 200, log.body
    assert log.body["pendingAckLogStats"]["managedLedgerName"] == "__transactions/coordinator-log-0"
    ml = log.body["pendingAckLogStats"]["managedLedgerInternalStats"]
    assert ml["numberOfEntries"] > 0 and ml["ledgers"] and ml["lastConfirmedEntry"] != "-1:-1"
    assert not conn.tc.end(txn, commit=True).HasField("error")
    assert position(ids[0]) == "MarkDelete"
    coordinator = _get(txn_broker, f"{TX}/coordinatorInternalStats/0")
    assert coordinator.status == 200, coordinator.body
    assert coordinator.body["transactionLogStats"]["managedLedgerName"] == \
        "__transactions/coordinator-log-0"
    other = _get(txn_broker, f"{TX}/coordinatorInternalStats/3")
    assert (other.status, other.reason) == (
        404, "Transaction coordinator not found! coordinator id : 3")

    url = txn_broker.web_url
    for body, status, reason in (
            (1, 406, "Number of transaction coordinators should be more than the current "
                     "number of transaction coordinator"),
            (2, 405, "This broker runs one transaction coordinator: it cannot be scaled to more"),
            ("two", 400, "Invalid replicas: the body must be a number")):
        reply = http(url, "POST", f"{TX}/transactionCoordinator/replicas", body)
        assert (reply.status, reply.reason) == (status, reason), body


def test_an_operator_aborts_an_open_transaction(txn_broker: Any, conn: Conn) -> None:
    """Pulsar's ``POST abortTransaction/{most}/{least}``: the transaction ends as aborted, so
    what it produced is never delivered and its client can no longer commit it."""
    assert conn.raw.request(C.encode_producer(TOPIC, 1, 7, None, 0)).type == T.PRODUCER_SUCCESS
    subscribe(conn.cons, TOPIC, "s", 1, sub_type=pb.CommandSubscribe.Shared)
    txn = conn.tc.new_txn(TTL_MS)
    most, least = txn
    assert not conn.tc.add_partition(txn, TOPIC).HasField("error")
    conn.tc.send(1, 0, b"in-txn", txn)
    path = f"{TX}/abortTransaction/{most}/{least}"
    assert http(txn_broker.web_url, "POST", path).status == 204
    assert _get(txn_broker, f"{TX}/transactionMetadata/{most}/{least}").body["status"] == "ABORTED"
    assert conn.tc.end(txn, commit=True).HasField("error")
    again = http(txn_broker.web_url, "POST", f"{TX}/abortTransaction/{most}/{least + 100}")
    assert again.status == 404
    other = http(txn_broker.web_url, "POST", f"{TX}/abortTransaction/5/{least}")
    assert (other.status, other.reason) == (404, "Transaction coordinator not found! coordinator id : 5")
    conn.tc.send(1, 1, b"plain")
    assert receive(conn.cons)[0] == b"plain"      # the aborted message is never delivered
