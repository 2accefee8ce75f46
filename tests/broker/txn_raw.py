"""Transaction commands for the raw wire client (tests only)."""

from __future__ import annotations

from typing import Any

from broker_rawclient import RawClient, make_batch_entry, make_entry

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.framing import encode_payload_command

T = pb.BaseCommand
TC_ASSIGN = "persistent://pulsar/system/transaction_coordinator_assign"


def command(cmd_type: int, field: str, **values: Any) -> bytes:
    cmd = T(type=cmd_type)  # type: ignore[arg-type]
    target = getattr(cmd, field)
    target.SetInParent()
    for name, value in values.items():
        if isinstance(value, list):
            for item in value:
                if isinstance(item, pb.Subscription):
                    getattr(target, name).add().CopyFrom(item)
                else:
                    getattr(target, name).append(item)
        elif isinstance(value, pb.Subscription):
            getattr(target, name).CopyFrom(value)
        else:
            setattr(target, name, value)
    return C.encode_command(cmd)


class TxnClient:
    """One raw connection used as a transactional client (coordinator 0)."""

    def __init__(self, raw: RawClient) -> None:
        self.raw = raw
        self.rid = 1000

    def _next(self) -> int:
        self.rid += 1
        return self.rid

    def tc_connect(self) -> pb.CommandTcClientConnectResponse:
        answer = self.raw.request(command(T.TC_CLIENT_CONNECT_REQUEST, "tcClientConnectRequest",
                                          request_id=self._next(), tc_id=0))
        assert answer.type == T.TC_CLIENT_CONNECT_RESPONSE, answer
        return answer.tcClientConnectResponse

    def new_txn(self, ttl_ms: int = 60_000) -> tuple[int, int]:
        answer = self.raw.request(command(T.NEW_TXN, "newTxn", request_id=self._next(),
                                          txn_ttl_seconds=ttl_ms, tc_id=0))
        r = answer.newTxnResponse
        assert answer.type == T.NEW_TXN_RESPONSE and not r.HasField("error"), answer
        return r.txnid_most_bits, r.txnid_least_bits

    def add_partition(self, txn: tuple[int, int], topic: str) -> pb.CommandAddPartitionToTxnResponse:
        answer = self.raw.request(command(
            T.ADD_PARTITION_TO_TXN, "addPartitionToTxn", request_id=self._next(),
            txnid_most_bits=txn[0], txnid_least_bits=txn[1], partitions=[topic]))
        assert answer.type == T.ADD_PARTITION_TO_TXN_RESPONSE, answer
        return answer.addPartitionToTxnResponse

    def add_subscription(self, txn: tuple[int, int], topic: str,
                         sub: str) -> pb.CommandAddSubscriptionToTxnResponse:
        answer = self.raw.request(command(
            T.ADD_SUBSCRIPTION_TO_TXN, "addSubscriptionToTxn", request_id=self._next(),
            txnid_most_bits=txn[0], txnid_least_bits=txn[1],
            subscription=[pb.Subscription(topic=topic, subscription=sub)]))
        assert answer.type == T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE, answer
        return answer.addSubscriptionToTxnResponse

    def end(self, txn: tuple[int, int], commit: bool) -> pb.CommandEndTxnResponse:
        answer = self.raw.request(command(
            T.END_TXN, "endTxn", request_id=self._next(), txnid_most_bits=txn[0],
            txnid_least_bits=txn[1], txn_action=pb.COMMIT if commit else pb.ABORT),
        )
        assert answer.type == T.END_TXN_RESPONSE, answer
        return answer.endTxnResponse

    def send(self, producer_id: int, sequence_id: int, payload: bytes,
             txn: tuple[int, int] | None = None, *, in_metadata: bool = True,
             batch: list[bytes] | None = None) -> pb.CommandSendReceipt:
        """SEND *payload* (or a batch entry of *batch*); in transaction *txn*, named in the
        command and, with *in_metadata* (the Java client's way; the Go client's is not), in
        the entry's metadata too."""
        fields: dict[str, Any] = {}
        if txn is not None and in_metadata:
            fields = {"txnid_most_bits": txn[0], "txnid_least_bits": txn[1]}
        if batch is not None:
            entry = make_batch_entry(batch, sequence_id=sequence_id, **fields)
        else:
            entry = make_entry(payload, sequence_id=sequence_id, **fields)
        cmd = T(type=T.SEND)
        cmd.send.producer_id = producer_id
        cmd.send.sequence_id = sequence_id
        if batch is not None:
            cmd.send.num_messages = len(batch)
        if txn is not None:
            cmd.send.txnid_most_bits, cmd.send.txnid_least_bits = txn
        answer = self.raw.request(encode_payload_command(cmd, entry))
        assert answer.type == T.SEND_RECEIPT, answer
        return answer.send_receipt

    def ack(self, consumer_id: int, ids: list[tuple[int, int]], txn: tuple[int, int], *,
            cumulative: bool = False) -> pb.CommandAckResponse:
        cmd = T(type=T.ACK)
        a = cmd.ack
        a.consumer_id = consumer_id
        a.ack_type = pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual
        for lid, eid in ids:
            a.message_id.add(ledgerId=lid, entryId=eid)
        a.txnid_most_bits, a.txnid_least_bits = txn
        a.request_id = self._next()
        answer = self.raw.request(C.encode_command(cmd))
        assert answer.type == T.ACK_RESPONSE, answer
        return answer.ackResponse


def subscribe(raw: RawClient, topic: str, sub: str, consumer_id: int, *, sub_type: int = 1,
              permits: int = 100) -> None:
    answer = raw.request(C.encode_subscribe(topic, sub, sub_type, consumer_id, 1,
                                            initial_position=1))
    assert answer.type == T.SUCCESS, answer
    raw.send(C.encode_flow(consumer_id, permits))


def receive(raw: RawClient, timeout: float = 10.0) -> tuple[bytes, tuple[int, int]]:
    """The next MESSAGE's payload and message id."""
    while True:
        frame = raw.recv_frame(timeout)
        if frame.command.type == T.PING:
            raw.send(C.encode_pong())
            continue
        if frame.command.type == T.MESSAGE:
            assert frame.entry is not None
            from protocol.metadata import split_entry
            _, payload = split_entry(frame.entry)
            mid = frame.command.message.message_id
            return bytes(payload), (mid.ledgerId, mid.entryId)
