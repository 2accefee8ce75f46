"""Deduplication against a model of the client: every acknowledged send is stored exactly once
and its receipt carries the id of the entry that holds it.

Hypothesis drives an in-process broker over the wire (RawClient) the way pulsar-client 3.13
does: plain messages accumulate in a batch (one per key with key-based batching) sent with
its first id and its count; a delayed message is sent at once, outside the batch, with the
next id (inside the batch's range); receipts are read in order; a send is duplicated while
in flight; a connection drops and the producer, re-created under its name, re-sends its
whole pending queue (same ids, same batches); an acknowledged send is re-sent again; the
broker restarts, gracefully or from a stale dedup snapshot (as after kill -9: the ledger is
durable, the snapshot is the last one housekeeping wrote).
"""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile
from typing import Any

from broker_rawclient import RawClient, make_entry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.embed import BrokerHandle, start_broker
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.metadata import encode_batch_payload
from storage.positions import Position

T = pb.BaseCommand
TOPIC = "persistent://public/default/dedup-model"
CONFIG = {"defaultRetentionTimeInMinutes": -1}  # keep every ledger for the final read


@dataclasses.dataclass(frozen=True)
class Op:
    """One SEND of the client: a batch [first, first + count) or a single (delayed) message."""

    index: int
    sequence_id: int
    count: int
    batch: bool

    @property
    def payload(self) -> bytes:
        """The entry's payload: for a batch, a real batch payload of *count* messages (the
        broker refuses a count the payload cannot hold), the first one naming the op."""
        tag = b"op-%d" % self.index
        if not self.batch:
            return tag
        return encode_batch_payload(
            (pb.SingleMessageMetadata(payload_size=len(data), sequence_id=self.sequence_id + i),
             data) for i, data in enumerate([tag] + [b""] * (self.count - 1)))

    def command(self, producer_id: int, name: str) -> bytes:
        fields: dict[str, Any] = {}
        if self.batch:
            fields["num_messages_in_batch"] = self.count
        else:
            fields["deliver_at_time"] = 2**40  # delayed: never due during the test
        entry = make_entry(self.payload, sequence_id=self.sequence_id, producer_name=name,
                           **fields)
        return C.encode_send(producer_id, self.sequence_id, entry,
                             num_messages=self.count if self.batch else 1)


def _producer_command(producer_id: int, request_id: int, name: str | None,
                      epoch: int) -> bytes:
    cmd = pb.BaseCommand(type=T.PRODUCER)
    p = cmd.producer
    p.topic = TOPIC
    p.producer_id = producer_id
    p.request_id = request_id
    if name is not None:
        p.producer_name = name
        p.user_provided_producer_name = False
    p.epoch = epoch
    return C.encode_command(cmd)


class Client:
    """The client side of the model: its ids, its batch, its pending queue, its receipts."""

    def __init__(self, broker: BrokerHandle) -> None:
        self.broker = broker
        self.next_id = 0
        self.batches: tuple[list[int], list[int]] = ([], [])  # key-based: one per key
        self.ops: list[Op] = []
        self.pending: list[Op] = []  # sent, not acknowledged, in send order
        self.acked: dict[int, tuple[int, int]] = {}  # op index -> receipt's message id
        self.on_wire: list[tuple[Op, bool]] = []  # (op, is a re-send of an acked op)
        self.epoch = 0
        self.name: str | None = None
        self.raw: RawClient | None = None
        self.connect()

    def connect(self) -> None:
        raw = RawClient(self.broker.service_url)
        raw.handshake()
        created = raw.request(_producer_command(1, self.epoch + 1, self.name, self.epoch))
        assert created.type == T.PRODUCER_SUCCESS, created
        self.name = created.producer_success.producer_name
        self.epoch += 1
        self.raw = raw
        self.on_wire = []
        for op in self.pending:  # the client re-sends its whole pending queue, in order
            self.send(op)

    def disconnect(self) -> None:
        assert self.raw is not None
        self.raw.close()
        self.raw = None

    def send(self, op: Op, resend_of_acked: bool = False) -> None:
        assert self.raw is not None and self.name is not None
        self.raw.send(op.command(1, self.name))
        self.on_wire.append((op, resend_of_acked))

    def new_op(self, first: int, count: int, batch: bool) -> Op:
        op = Op(len(self.ops), first, count, batch)
        self.ops.append(op)
        self.pending.append(op)
        self.send(op)
        return op

    # -- actions -------------------------------------------------------------------------

    def plain(self, key: int = 0) -> None:
        self.batches[key].append(self.next_id)
        self.next_id += 1

    def delayed(self) -> None:
        self.new_op(self.next_id, 1, batch=False)
        self.next_id += 1

    def flush(self, reverse: bool = False) -> None:
        for batch in reversed(self.batches) if reverse else self.batches:
            if batch:
                self.new_op(batch[0], len(batch), batch=True)
                batch.clear()

    def receive(self) -> None:
        assert self.raw is not None
        for op, resend_of_acked in self.on_wire:
            answer = self.raw.recv_command()
            assert answer.type == T.SEND_RECEIPT, answer
            assert answer.send_receipt.sequence_id == op.sequence_id
            msg_id = (answer.send_receipt.message_id.ledgerId,
                      answer.send_receipt.message_id.entryId)
            if resend_of_acked or op.index in self.acked:
                assert msg_id == self.acked[op.index], f"{op} answered again with {msg_id}"
            else:
                self.acked[op.index] = msg_id
                self.pending.remove(op)
        self.on_wire = []

    def resend_acked(self, choice: int) -> None:
        acked = [op for op in self.ops if op.index in self.acked]
        if acked:
            self.send(acked[choice % len(acked)], resend_of_acked=True)

    def resend_pending(self, choice: int) -> None:
        """A duplicate of a send still waiting for its receipt, on the same connection."""
        if self.pending:
            self.send(self.pending[choice % len(self.pending)])

    def snapshot(self) -> None:
        """The topic's housekeeping writes the dedup snapshot now (a later stale restart
        recovers from it plus the replay of what follows)."""
        def write() -> None:
            topic = self.broker.service.topics[TOPIC]
            topic.dedup.snapshot(topic.loop.time())
        self.broker.call(write)

    def reconnect(self) -> None:
        self.disconnect()
        self.connect()

    def restart(self, stale_snapshot: bool) -> None:
        self.disconnect()
        broker = self.broker
        if stale_snapshot:  # the snapshot on disk is whatever housekeeping wrote last
            def keep_last_snapshot() -> None:
                topic = broker.service.topics[TOPIC]
                topic.dedup.close = lambda now: None
            broker.call(keep_last_snapshot)
        broker.stop()
        self.broker = start_broker(data_dir=broker.data_dir, config_overrides=CONFIG)
        self.connect()


async def _stored(handle: BrokerHandle) -> dict[bytes, list[tuple[int, int]]]:
    """Every entry of the topic: payload -> positions."""
    ledger = handle.service.topics[TOPIC].ledger
    end = ledger.last_confirmed
    out: dict[bytes, list[tuple[int, int]]] = {}
    infos = [info for info in ledger.ledgers if info.entries > 0]
    if end is None or not infos:
        return out
    pos = Position(infos[0].ledger_id, 0)
    for _ in range(10_000):
        entries = await ledger.read_entries(pos, 256, 16 * 1024 * 1024)
        if not entries:
            break
        for e in entries:
            size = int.from_bytes(e.data[:4], "big")
            out.setdefault(bytes(e.data[4 + size:]), []).append(
                (e.position.ledger_id, e.position.entry_id))
        last = entries[-1].position
        if last >= end:
            break
        pos = ledger.next_position(last)
    return out


ACTIONS = st.lists(
    st.one_of(
        st.just(("plain",)), st.just(("plain",)), st.tuples(st.just("plain"), st.integers(0, 1)),
        st.just(("delayed",)), st.just(("delayed",)),
        st.tuples(st.just("flush"), st.booleans()), st.just(("receive",)),
        st.just(("reconnect",)), st.just(("snapshot",)),
        st.tuples(st.just("resend_acked"), st.integers(0, 1000)),
        st.tuples(st.just("resend_pending"), st.integers(0, 1000)),
        st.tuples(st.just("restart"), st.booleans()),
    ),
    min_size=1, max_size=40,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=ACTIONS)
def test_every_acknowledged_send_is_stored_once_with_its_own_id(
        actions: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        client = Client(start_broker(data_dir=pathlib.Path(tmp), config_overrides=CONFIG))
        try:
            for name, *args in actions:
                getattr(client, name)(*args)
            client.flush()
            client.receive()
            assert not client.pending
            stored = client.broker.call(_stored, client.broker)
        finally:
            if client.raw is not None:
                client.disconnect()
            client.broker.stop()
    for op in client.ops:
        assert stored.get(op.payload, []) == [client.acked[op.index]], (
            f"{op}: receipt {client.acked[op.index]}, stored at {stored.get(op.payload)}")
    assert sum(len(p) for p in stored.values()) == len(client.ops)
