"""Re-sends are not stored twice: per producer name the broker remembers the highest sequence
id persisted (and the message ids of the last ones), answers a re-send with its original
receipt, tells a reconnecting producer where its sequence stands (PRODUCER_SUCCESS
last_sequence_id), and keeps all of it across a graceful restart and a kill -9."""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pulsar
import pytest
from broker_rawclient import RawClient, make_batch_entry, make_entry
from conftest import find_free_port, make_client

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

T = pb.BaseCommand
UNKNOWN = (1 << 64) - 1  # -1 as the uint64 the wire carries


def _producer_command(topic: str, producer_id: int, request_id: int, name: str,
                      epoch: int) -> bytes:
    """PRODUCER as the C++ client sends it on reconnect: the broker-assigned name, not
    user provided, a higher epoch."""
    cmd = pb.BaseCommand(type=T.PRODUCER)
    p = cmd.producer
    p.topic = topic
    p.producer_id = producer_id
    p.request_id = request_id
    p.producer_name = name
    p.user_provided_producer_name = False
    p.epoch = epoch
    return C.encode_command(cmd)


def _send(raw: RawClient, pid: int, seq: int, name: str, payload: bytes = b"x") -> pb.BaseCommand:
    return raw.request(C.encode_send(pid, seq, make_entry(payload, sequence_id=seq,
                                                          producer_name=name)))


def _ids(receipts: list[pb.BaseCommand]) -> list[tuple[int, int]]:
    return [(r.send_receipt.message_id.ledgerId, r.send_receipt.message_id.entryId)
            for r in receipts]


def _entries(handle: Any, topic: str) -> int:
    return int(handle.call(lambda: handle.service.topics[topic].ledger.number_of_entries))


def _first_producer(url: str, topic: str, n: int) -> tuple[str, list[tuple[int, int]]]:
    """A producer with a broker-assigned name publishes sequence ids 0..n-1."""
    with RawClient(url) as raw:
        raw.handshake()
        created = raw.create_producer(topic, 1)
        assert created.type == T.PRODUCER_SUCCESS
        assert created.producer_success.last_sequence_id == -1
        name = created.producer_success.producer_name
        receipts = [_send(raw, 1, seq, name) for seq in range(n)]
    assert all(r.type == T.SEND_RECEIPT for r in receipts)
    return name, _ids(receipts)


def test_resends_after_a_reconnect_get_their_original_receipts_and_are_stored_once(
        broker: Any) -> None:
    topic = "persistent://public/default/dedup-reconnect"
    name, ids = _first_producer(broker.service_url, topic, 5)
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        again = raw.request(_producer_command(topic, 1, 7, name, epoch=1))
        resent = [_send(raw, 1, seq, name) for seq in (2, 3, 4)]
        fresh = _send(raw, 1, 5, name)
    assert again.type == T.PRODUCER_SUCCESS
    assert again.producer_success.producer_name == name
    assert again.producer_success.last_sequence_id == 4
    assert [r.send_receipt.sequence_id for r in resent] == [2, 3, 4]
    assert _ids(resent) == ids[2:]
    assert fresh.type == T.SEND_RECEIPT
    assert _ids([fresh])[0] > ids[-1]
    assert _entries(broker, topic) == 6


def test_a_resend_in_the_gap_left_by_a_rejected_send_is_stored(broker_factory: Any) -> None:
    handle = broker_factory(config_overrides={"delayedDeliveryMaxDelayInMillis": 1000})
    topic = "persistent://public/default/dedup-gap"
    now = int(time.time() * 1000)
    with RawClient(handle.service_url) as raw:
        raw.handshake()
        name = raw.create_producer(topic, 1).producer_success.producer_name
        far = make_entry(b"far", sequence_id=0, producer_name=name, publish_time=now,
                         deliver_at_time=now + 60_000)
        rejected = raw.request(C.encode_send(1, 0, far))
        after = _send(raw, 1, 1, name, b"after")
        still_far = raw.request(C.encode_send(1, 0, far))   # rejected again, not "deduplicated"
        in_gap = _send(raw, 1, 0, name, b"now without delay")
        after_again = _send(raw, 1, 1, name, b"after")
    assert rejected.type == T.SEND_ERROR
    assert rejected.send_error.error == ServerError.NotAllowedError
    assert still_far.type == T.SEND_ERROR
    assert in_gap.type == T.SEND_RECEIPT
    assert _ids([in_gap])[0] > _ids([after])[0]
    assert _ids([after_again]) == _ids([after])
    assert _entries(handle, topic) == 2


def test_a_resend_older_than_what_is_remembered_gets_pulsars_duplicate_receipt(
        broker: Any) -> None:
    topic = "persistent://public/default/dedup-old"
    name, _ = _first_producer(broker.service_url, topic, 3)

    def forget_ids() -> None:
        broker.service.topics[topic].dedup.states[name].drop_window()

    broker.call(forget_ids)
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        assert raw.request(_producer_command(topic, 1, 7, name, epoch=1)).type == \
            T.PRODUCER_SUCCESS
        old = _send(raw, 1, 1, name)
    assert old.type == T.SEND_RECEIPT
    assert old.send_receipt.sequence_id == 1
    assert _ids([old]) == [(UNKNOWN, UNKNOWN)]
    assert _entries(broker, topic) == 3


def test_producer_names_are_not_reused_after_a_restart(broker_factory: Any,
                                                       tmp_path: pathlib.Path) -> None:
    data = tmp_path / "names"
    topic = "persistent://public/default/dedup-names"
    first = broker_factory(data_dir=data)
    name, _ = _first_producer(first.service_url, topic, 1)
    first.stop()
    second = broker_factory(data_dir=data)
    with RawClient(second.service_url) as raw:
        raw.handshake()
        created = raw.create_producer(topic, 1)
    assert created.producer_success.producer_name != name
    assert created.producer_success.last_sequence_id == -1


def test_a_producer_reconnecting_after_a_restart_is_not_duplicated(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "restart"
    port = find_free_port()
    topic = "persistent://public/default/dedup-restart"
    first = broker_factory(data_dir=data, broker_port=port)
    name, ids = _first_producer(first.service_url, topic, 5)
    first.stop()
    second = broker_factory(data_dir=data, broker_port=port)
    with RawClient(second.service_url) as raw:
        raw.handshake()
        again = raw.request(_producer_command(topic, 1, 7, name, epoch=1))
        resent = [_send(raw, 1, seq, name) for seq in (3, 4)]
        fresh = _send(raw, 1, 5, name)
    assert again.producer_success.last_sequence_id == 4
    assert _ids(resent) == ids[3:]   # recovered from the ledger's tail
    assert fresh.type == T.SEND_RECEIPT and _ids([fresh])[0] > ids[-1]
    assert _entries(second, topic) == 6


def test_sequence_state_survives_kill_9(run_broker_process: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "crash"
    topic = "persistent://public/default/dedup-crash"
    proc = run_broker_process(data)
    name, ids = _first_producer(proc.service_url, topic, 5)
    proc.kill()  # the snapshot may be older than the last sends: the replay covers them
    proc2 = run_broker_process(data)
    with RawClient(proc2.service_url) as raw:
        raw.handshake()
        again = raw.request(_producer_command(topic, 1, 7, name, epoch=1))
        resent = [_send(raw, 1, seq, name) for seq in range(5)]
        fresh = _send(raw, 1, 5, name)
    assert again.producer_success.last_sequence_id == 4
    assert _ids(resent) == ids
    assert fresh.type == T.SEND_RECEIPT and _ids([fresh])[0] > ids[-1]
    c = make_client(proc2.service_url)
    try:
        reader = c.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while True:
            try:
                got.append(reader.read_next(1000).data())
            except pulsar.Timeout:
                break
    finally:
        c.close()
    assert len(got) == 6


@pytest.mark.timeout(60)
def test_official_client_continues_its_sequence_across_a_restart_without_duplicates(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "official"
    port = find_free_port()
    topic = "persistent://public/default/dedup-official"
    first = broker_factory(data_dir=data, broker_port=port)
    c = make_client(first.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = c.create_producer(topic)
        ids = [producer.send(b"%d" % i) for i in range(10)]
        first.stop()
        second = broker_factory(data_dir=data, broker_port=port)
        ids += [producer.send(b"%d" % i) for i in range(10, 20)]  # reconnected by itself
        named = c.create_producer(topic, producer_name="named")
        named.send(b"n0")
        named.close()
        renamed = c.create_producer(topic, producer_name="named")
        last_of_named = renamed.last_sequence_id()
        renamed.close()
        last_of_first = producer.last_sequence_id()
        producer.close()
    finally:
        c.close()
    assert len({(m.ledger_id(), m.entry_id()) for m in ids}) == 20
    assert last_of_first == 19
    assert last_of_named == 0   # PRODUCER_SUCCESS told the new incarnation where "named" was
    assert _entries(second, topic) == 21


def test_chunked_messages_are_stored_whole_once(broker_factory: Any) -> None:
    handle = broker_factory(config_overrides={"maxMessageSize": 10 * 1024})
    topic = "persistent://public/default/dedup-chunks"
    payload = bytes(range(256)) * 100   # 25,600 bytes: three chunks
    c = make_client(handle.service_url)
    try:
        consumer = c.subscribe(topic, "s")
        producer = c.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        producer.send(payload)
        producer.send(b"small")
        got = [consumer.receive(5000).data() for _ in range(2)]
    finally:
        c.close()
    assert got == [payload, b"small"]
    assert _entries(handle, topic) >= 4


def test_official_client_completes_a_send_answered_with_the_duplicate_receipt(
        broker: Any, client: Any) -> None:
    topic = "persistent://public/default/dedup-unknown-official"
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(b"%d" % i)

    def pretend_seen_up_to_ten() -> None:   # as if ids 3..10 were persisted and forgotten
        state = next(iter(broker.service.topics[topic].dedup.states.values()))
        state.drop_window()
        state.pushed = state.persisted = 10
        state.stored.add(3, 10)
        state.floor = 11

    broker.call(pretend_seen_up_to_ten)
    duplicate = producer.send(b"3")       # sequence id 3: Pulsar's -1:-1 answer
    fresh = [producer.send(b"%d" % i) for i in range(4, 12)]   # 4..10 too, 11 is new
    assert (duplicate.ledger_id(), duplicate.entry_id()) == (-1, -1)
    assert fresh[-1].ledger_id() >= 0 and fresh[-1].entry_id() == 3
    assert _entries(broker, topic) == 4
    producer.close()


def test_a_batch_is_keyed_by_its_last_sequence_id_also_after_a_restart(
        broker_factory: Any, tmp_path: pathlib.Path) -> None:
    data = tmp_path / "batch"
    port = find_free_port()
    topic = "persistent://public/default/dedup-batch"

    def batch(name: str, first: int) -> bytes:
        entry = make_batch_entry([b"one", b"two", b"three"], sequence_id=first,
                                 producer_name=name)
        return C.encode_send(1, first, entry, num_messages=3)

    first_broker = broker_factory(data_dir=data, broker_port=port)
    with RawClient(first_broker.service_url) as raw:
        raw.handshake()
        name = raw.create_producer(topic, 1).producer_success.producer_name
        stored = raw.request(batch(name, 0))
        reconnected = raw.request(_producer_command(topic, 2, 8, name, epoch=1))
    first_broker.stop()
    second = broker_factory(data_dir=data, broker_port=port)
    with RawClient(second.service_url) as raw:
        raw.handshake()
        after_restart = raw.request(_producer_command(topic, 1, 9, name, epoch=2))
        resent = raw.request(batch(name, 0))
        fresh = _send(raw, 1, 3, name)
    assert reconnected.producer_success.last_sequence_id == 2
    assert after_restart.producer_success.last_sequence_id == 2
    assert _ids([resent]) == _ids([stored])
    assert fresh.type == T.SEND_RECEIPT
    assert _entries(second, topic) == 2
