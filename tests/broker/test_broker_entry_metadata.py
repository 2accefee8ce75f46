"""Broker entry metadata over the wire: stamped on stored entries by the configured
interceptors, sent to consumers that announce it when the broker exposes it (else stripped),
the index counting messages batch-aware and continuing across a restart and a kill -9, and
nothing changed when no interceptor is configured."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from typing import Any

import pytest
from broker_rawclient import RawClient, make_batch_entry, make_entry
from conftest import make_client

from broker.config import ConfigError
from broker.topics.entry_metadata import EntryStamper
from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.entry_metadata import (
    APPEND_BROKER_TIMESTAMP,
    APPEND_INDEX,
    parse_fields,
    parse_prefix,
    prefix,
)
from protocol.framing import encode_command
from protocol.metadata import parse_metadata
from storage.metadata import MetadataStore

T = pb.BaseCommand
TOPIC = "persistent://public/default/entry-metadata"
BOTH = f"{APPEND_BROKER_TIMESTAMP},{APPEND_INDEX}"
EXPOSED = {"brokerEntryMetadataInterceptors": BOTH,
           "exposingBrokerEntryMetadataToClientEnabled": True}


def _connect(client: RawClient, *, announce: bool, protocol_version: int = 20) -> None:
    cmd = pb.BaseCommand(type=T.CONNECT)
    cmd.connect.client_version = "Horae-rawclient"
    cmd.connect.protocol_version = protocol_version
    if announce:
        cmd.connect.feature_flags.supports_broker_entry_metadata = True
    client.send(encode_command(cmd))
    assert client.recv_command().type == T.CONNECTED


def _publish(service_url: str, entries: list[tuple[bytes, int]], topic: str = TOPIC,
             name: str = "em") -> None:
    """Publish *entries* ((entry, messages in it)) one by one, each acknowledged, under their
    metadata's sequence ids."""
    with RawClient(service_url) as client:
        client.handshake()
        assert client.create_producer(topic, 1, name=name).type == T.PRODUCER_SUCCESS
        for entry, messages in entries:
            seq = parse_metadata(entry).sequence_id
            num = messages if messages > 1 else None
            answer = client.request(C.encode_send(1, seq, entry, num_messages=num))
            assert answer.type == T.SEND_RECEIPT, answer


def _consume(service_url: str, count: int, *, announce: bool, topic: str = TOPIC,
             sub: str = "s", protocol_version: int = 20) -> list[Any]:
    """The first *count* MESSAGE frames of a new Earliest subscription."""
    with RawClient(service_url) as client:
        _connect(client, announce=announce, protocol_version=protocol_version)
        answer = client.request(C.encode_subscribe(topic, sub, pb.CommandSubscribe.Exclusive, 1,
                                                   next(client.request_ids),
                                                   initial_position=1))
        assert answer.type == T.SUCCESS, answer
        client.send(C.encode_flow(1, 1000))
        frames = []
        while len(frames) < count:
            frame = client.recv_frame()
            if frame.command.type == T.MESSAGE:
                frames.append(frame)
        return frames


def _entries() -> list[tuple[bytes, int]]:
    return [(make_entry(b"one", sequence_id=0, producer_name="em"), 1),
            (make_batch_entry([b"a", b"b", b"c"], sequence_id=1, producer_name="em"), 3),
            (make_entry(b"five", sequence_id=4, producer_name="em"), 1)]


@pytest.fixture
def exposed(broker_factory: Any) -> Any:
    return broker_factory(config_overrides=EXPOSED)


def test_consumer_announcing_it_gets_timestamp_and_batch_aware_index(exposed: Any) -> None:
    before = int(time.time() * 1000)
    entries = _entries()
    _publish(exposed.service_url, entries)
    after = int(time.time() * 1000)
    frames = _consume(exposed.service_url, 3, announce=True)
    metadata = [parse_fields(f.broker_entry_metadata) for f in frames]
    assert [m.index for m in metadata] == [0, 3, 4]  # the index of each entry's last message
    for m in metadata:
        assert m.broker_timestamp is not None and before <= m.broker_timestamp <= after
    # the entry itself is what the producer sent, its checksum intact
    assert [f.entry for f in frames] == [entry for entry, _ in entries]
    assert all(f.checksum_valid is True for f in frames)


@pytest.mark.parametrize(("announce", "version"), [(False, 20), (True, 17)])
def test_consumer_not_announcing_it_gets_the_entry_alone(exposed: Any, announce: bool,
                                                        version: int) -> None:
    entries = _entries()
    _publish(exposed.service_url, entries)
    frames = _consume(exposed.service_url, 3, announce=announce, protocol_version=version)
    assert [f.broker_entry_metadata for f in frames] == [None] * 3
    assert [f.entry for f in frames] == [entry for entry, _ in entries]
    assert all(f.checksum_valid is True for f in frames)


def test_not_exposed_it_is_stripped_but_peek_shows_it(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={"brokerEntryMetadataInterceptors": BOTH})
    entries = _entries()
    _publish(broker.service_url, entries)
    frames = _consume(broker.service_url, 3, announce=True)
    assert [f.broker_entry_metadata for f in frames] == [None] * 3
    assert [f.entry for f in frames] == [entry for entry, _ in entries]
    with urllib.request.urlopen(
            f"{broker.web_url}/admin/v2/persistent/public/default/entry-metadata/subscription/s/"
            "position/2", timeout=10) as response:
        assert response.headers["X-Pulsar-Broker-Entry-METADATA-index"] == "3"
        assert response.headers["X-Pulsar-Broker-Entry-METADATA-timestamp"]
        assert response.headers["X-Pulsar-num-batch-message"] == "3"
        assert response.read() == bytes(entries[1][0][4 + int.from_bytes(entries[1][0][:4],
                                                                             "big"):])


def test_only_the_configured_interceptor_fields_are_stamped(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={
        "brokerEntryMetadataInterceptors": APPEND_INDEX,
        "exposingBrokerEntryMetadataToClientEnabled": True})
    _publish(broker.service_url, _entries())
    metadata = [parse_fields(f.broker_entry_metadata)
                for f in _consume(broker.service_url, 3, announce=True)]
    assert [(m.broker_timestamp, m.index) for m in metadata] == [(None, 0), (None, 3), (None, 4)]


def test_without_interceptors_nothing_is_stamped(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={"exposingBrokerEntryMetadataToClientEnabled": True})
    entries = _entries()
    _publish(broker.service_url, entries)
    frames = _consume(broker.service_url, 3, announce=True)
    assert [f.broker_entry_metadata for f in frames] == [None] * 3
    stored = broker.call(lambda: broker.service.topics[TOPIC].ledger.read_entries(
        broker.service.topics[TOPIC].ledger.first_position, 10))
    assert [e.data for e in stored] == [entry for entry, _ in entries]


def test_seek_by_time_compares_the_broker_timestamp(exposed: Any) -> None:
    # The producer's clock says 1970; the broker stamped it now: a seek to a minute ago finds it.
    _publish(exposed.service_url, [(make_entry(b"old-clock", sequence_id=0, producer_name="em",
                                               publish_time=1_000), 1)])
    with RawClient(exposed.service_url) as client:
        _connect(client, announce=True)
        answer = client.request(C.encode_subscribe(TOPIC, "seek", pb.CommandSubscribe.Exclusive,
                                                   1, next(client.request_ids)))
        assert answer.type == T.SUCCESS
        client.send(C.encode_seek(1, next(client.request_ids),
                                  publish_time=int(time.time() * 1000) - 60_000))
        seen = set()
        while T.SUCCESS not in seen:
            seen.add(client.recv_command().type)
    [frame] = _consume(exposed.service_url, 1, announce=True, sub="seek")
    assert frame.entry is not None and frame.entry.endswith(b"old-clock")


def test_unknown_interceptor_class_is_refused_at_start(broker_factory: Any) -> None:
    with pytest.raises(ConfigError, match="brokerEntryMetadataInterceptors"):
        broker_factory(config_overrides={"brokerEntryMetadataInterceptors": "com.example.Nope"})


@pytest.mark.parametrize("stop", ["restart", "kill -9"])
def test_index_continues_across_restart_and_kill(run_broker_process: Any, tmp_path: Any,
                                                stop: str) -> None:
    data = tmp_path / "data"
    process_config = dict(EXPOSED)
    proc = run_broker_process(data, config_overrides=process_config)
    _consume(proc.service_url, 0, announce=True)  # the subscription keeps what follows
    _publish(proc.service_url, _entries())  # indexes 0, 3, 4
    if stop == "restart":
        proc.stop()
    else:
        proc.kill()
    proc = run_broker_process(data, config_overrides=process_config)
    _publish(proc.service_url, [(make_batch_entry([b"x", b"y"], sequence_id=5,
                                                  producer_name="em"), 2),
                                (make_entry(b"z", sequence_id=7, producer_name="em"), 1)])
    frames = _consume(proc.service_url, 5, announce=True)
    assert [parse_fields(f.broker_entry_metadata).index for f in frames] == [0, 3, 4, 6, 7]


def test_index_outlives_the_trim_of_every_entry(tmp_path: Any) -> None:
    """The stamper's record (written before a trim and at close) carries the count when no
    stored entry is left to read it from; an entry written without the prefix says nothing."""

    async def scenario() -> list[int | None]:
        md = await MetadataStore.open(tmp_path / "m.db")
        try:
            first = EntryStamper(frozenset({APPEND_INDEX}), md, TOPIC)
            await first.recover(None)
            stored = first.stamp([make_entry(b"a"), make_batch_entry([b"b", b"c"])], [1, 2])
            await first.record()
            after_trim = EntryStamper(frozenset({APPEND_INDEX}), md, TOPIC)
            await after_trim.recover(None)  # every entry trimmed
            from_entry = EntryStamper(frozenset({APPEND_INDEX}), md, TOPIC)
            await from_entry.recover(prefix(make_entry(b"d"), None, 9))  # an entry beyond it
            unprefixed = EntryStamper(frozenset({APPEND_INDEX}), md, TOPIC)
            await unprefixed.recover(make_entry(b"e"))
            return [parse_prefix(e).index for e in stored] + [  # type: ignore[union-attr]
                after_trim.index, from_entry.index, unprefixed.index]
        finally:
            await md.close()

    assert asyncio.run(scenario()) == [0, 2, 2, 9, 2]


@pytest.mark.parametrize("exposing", [True, False])
def test_official_client_reads_batches_seeks_and_peeks_with_entry_metadata_on(
        broker_factory: Any, exposing: bool) -> None:
    """The official client (pulsar-client 3.13, C++ 4.2.0) does not announce the feature: what it
    receives is exactly what it sent, batched or not, however the broker is configured."""
    import pulsar

    broker = broker_factory(config_overrides={
        "brokerEntryMetadataInterceptors": BOTH,
        "exposingBrokerEntryMetadataToClientEnabled": exposing})
    topic = "persistent://public/default/entry-metadata-client"
    client = make_client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        batched = client.create_producer(topic, batching_enabled=True,
                                         batching_max_publish_delay_ms=50)
        for i in range(10):
            batched.send_async(f"b{i}".encode(), None)
        batched.flush()
        single = client.create_producer(topic, batching_enabled=False)
        ids = [single.send(f"s{i}".encode()) for i in range(3)]
        got = []
        for _ in range(13):
            msg = consumer.receive(timeout_millis=10_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert sorted(got) == sorted([f"b{i}".encode() for i in range(10)]
                                     + [f"s{i}".encode() for i in range(3)])
        reader = client.create_reader(topic, ids[1])
        assert reader.read_next(timeout_millis=10_000).data() == b"s2"
        reader.close()
        consumer.seek(int(time.time() * 1000) - 60_000)  # broker time: everything is newer
        again = {consumer.receive(timeout_millis=10_000).data() for _ in range(13)}
        assert again == set(got)
    finally:
        client.close()
    stored = broker.call(lambda: broker.service.topics[topic].ledger.read_entries(
        broker.service.topics[topic].ledger.first_position, 100))
    indexes = [parse_prefix(e.data).index for e in stored]  # type: ignore[union-attr]
    assert indexes[-3:] == [10, 11, 12] and indexes == sorted(indexes)


def _message_id_by_index(web_url: str, query: str,
                         topic: str = "persistent/public/default/entry-metadata") -> tuple[int, Any]:
    import json
    import urllib.error
    url = f"{web_url}/admin/v2/{topic}/getMessageIdByIndex{query}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_message_id_by_index_names_the_entry_holding_each_index(broker_factory: Any,
                                                               tmp_path: Any) -> None:
    data = tmp_path / "index-data"
    broker = broker_factory(data_dir=data, config_overrides=EXPOSED)
    _publish(broker.service_url, _entries())   # indexes 0 | 1 2 3 | 4
    ids = []
    for index in range(5):
        status, body = _message_id_by_index(broker.web_url, f"?index={index}")
        assert status == 200, body
        assert body["partitionIndex"] == -1
        ids.append((body["ledgerId"], body["entryId"]))
    ledger = ids[0][0]
    assert ids == [(ledger, 0), (ledger, 1), (ledger, 1), (ledger, 1), (ledger, 2)]
    for query in ("?index=5", "?index=-1"):
        status, body = _message_id_by_index(broker.web_url, query)
        assert (status, body["reason"]) == (404, "Invalid index")
    assert _message_id_by_index(broker.web_url, "?index=x")[0] == 400
    assert _message_id_by_index(broker.web_url, "")[0] == 400
    assert _message_id_by_index(
        broker.web_url, "?index=0", "non-persistent/public/default/entry-metadata")[0] == 406
    urllib.request.urlopen(urllib.request.Request(
        f"{broker.web_url}/admin/v2/persistent/public/default/parted/partitions",
        data=b"2", method="PUT", headers={"Content-Type": "application/json"}), timeout=10)
    assert _message_id_by_index(
        broker.web_url, "?index=0", "persistent/public/default/parted")[0] == 405

    # after a restart the first ledger is sealed; truncating it removes indexes 0..4, and the
    # next entries continue the count in the new ledger
    broker.stop()
    broker = broker_factory(data_dir=data, config_overrides=EXPOSED)
    _publish(broker.service_url, [(make_entry(b"six", sequence_id=5, producer_name="em"), 1)])
    request = urllib.request.Request(
        f"{broker.web_url}/admin/v2/persistent/public/default/entry-metadata/truncate",
        method="DELETE")
    assert urllib.request.urlopen(request, timeout=10).status == 204
    status, body = _message_id_by_index(broker.web_url, "?index=2")
    assert (status, body["ledgerId"], body["entryId"]) == (200, -1, -1)   # MessageId.Earliest
    status, body = _message_id_by_index(broker.web_url, "?index=5")
    assert status == 200 and body["ledgerId"] > ledger and body["entryId"] == 0


def test_message_id_by_index_needs_the_index_interceptor(broker_factory: Any) -> None:
    broker = broker_factory(config_overrides={
        "brokerEntryMetadataInterceptors": APPEND_BROKER_TIMESTAMP})
    _publish(broker.service_url, _entries())
    status, body = _message_id_by_index(broker.web_url, "?index=0")
    assert status == 412 and "AppendIndexMetadataInterceptor" in body["reason"]


def test_horae_admin_get_message_id_by_index(exposed: Any, capsys: Any) -> None:
    import json

    from cli.admin.main import main
    _publish(exposed.service_url, _entries())
    argv = ["--admin-url", exposed.web_url, "topics", "get-message-id-by-index", TOPIC]
    assert main([*argv, "-i", "2"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert (body["entryId"], body["partitionIndex"]) == (1, -1)
    assert main([*argv, "--index", "9"]) != 0
    assert "Invalid index (HTTP 404)" in capsys.readouterr().err
