"""PIP-315 max-delay rejection as clients see it: the SEND_ERROR on the wire per client kind
(raw client built on ``protocol/``, announcing each official client's ``client_version``) and
what the official Python client 3.13 (C++ 4.2.0) does with it.

Why the C++-based clients get ``ChecksumError`` (read in pulsar-client-cpp v4.2.0):
``ClientConnection::handleSendError`` fails a single message only for ChecksumError
(``ProducerImpl::removeCorruptMessage``: the head of the pending queue, matched by sequence id);
any other code closes the whole connection, and the producer re-sends the rejected message
after every reconnect, with no end (every consumer on that connection is disturbed too). The
Java client fails the send on NotAllowedError (``recoverNotAllowedError``); see
:mod:`broker.delayed.rejection`.
"""

from __future__ import annotations

import datetime
import importlib.util
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from protocol import commands as C
from protocol import pulsar_pb as pb
from protocol.errors import ServerError

MAX_DELAY_MS = 1000
SEND_TIMEOUT_MS = 1500
TEXT = f"Exceeds max allowed delivery delay of {MAX_DELAY_MS} milliseconds"


def _rawclient_module() -> Any:
    # Core's raw wire client lives in tests/broker (not a package): load it by path.
    path = Path(__file__).resolve().parents[1] / "broker" / "broker_rawclient.py"
    spec = importlib.util.spec_from_file_location("broker_rawclient_for_delayed", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _topic_state(handle: Any, topic: str) -> tuple[int, int]:
    """(delayed_rejected_counter, entries stored) of a loaded topic."""

    async def read() -> tuple[int, int]:
        t = handle.service.topics[topic]
        return int(t.meters.delayed_rejected_counter), int(t.ledger.number_of_entries)

    return handle.call(read)  # type: ignore[no-any-return]


def _rejected_metric(handle: Any, topic: str) -> float | None:
    with urllib.request.urlopen(handle.web_url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "pulsar_broker_topic_messages_delayed_rejected_total" \
                    and s.labels.get("topic") == topic:
                return float(s.value)
    return None


@pytest.fixture
def limited(broker_factory: Any) -> Any:
    return broker_factory(config_overrides={"delayedDeliveryMaxDelayInMillis": MAX_DELAY_MS})


CLIENT_CODES = [
    ("Pulsar-CPP-v4.2.0", ServerError.ChecksumError),      # C++, Python and Node clients
    ("Pulsar-CPP-v4.2.0-my-app", ServerError.ChecksumError),  # with a description
    ("Pulsar-Java-v4.0.8", ServerError.NotAllowedError),
    ("Pulsar-Go-v0.19.0", ServerError.NotAllowedError),
    ("Horae-rawclient", ServerError.NotAllowedError),      # anything else: Pulsar's answer
]


@pytest.mark.parametrize(("client_version", "code"), CLIENT_CODES)
def test_max_delay_rejection_code_follows_the_client_and_keeps_pulsars_text(
        limited: Any, client_version: str, code: ServerError) -> None:
    raw = _rawclient_module()
    topic = f"persistent://public/default/max-delay-wire-{CLIENT_CODES.index((client_version, code))}"
    with raw.RawClient(limited.service_url) as rc:
        rc.send(C.encode_connect(client_version, 20))
        assert rc.recv_command().type == pb.BaseCommand.CONNECTED
        assert rc.create_producer(topic, 1).type == pb.BaseCommand.PRODUCER_SUCCESS
        now = int(time.time() * 1000)
        far = raw.make_entry(b"far", sequence_id=0, publish_time=now,
                             deliver_at_time=now + MAX_DELAY_MS + 1)
        rc.send(C.encode_send(1, 0, far))
        answer = rc.recv_command()
        # The boundary (exactly the max) is accepted, and the connection stayed open (but
        # see below for the Go client).
        ok = raw.make_entry(b"ok", sequence_id=1, publish_time=now,
                            deliver_at_time=now + MAX_DELAY_MS)
        rc.send(C.encode_send(1, 1, ok))
        receipt = rc.recv_command()
    assert answer.type == pb.BaseCommand.SEND_ERROR
    assert answer.send_error.producer_id == 1
    assert answer.send_error.sequence_id == 0
    assert answer.send_error.error == code
    assert answer.send_error.message == TEXT
    if client_version.startswith("Pulsar-Go-"):
        # The Go client stops listening to the producer on that answer: its later sends are
        # refused too, so nothing it reports as failed is stored.
        assert receipt.type == pb.BaseCommand.SEND_ERROR
        assert receipt.send_error.sequence_id == 1
        assert receipt.send_error.error == ServerError.NotAllowedError
        assert "re-create the producer" in receipt.send_error.message
        assert _topic_state(limited, topic) == (1, 0)
    else:
        assert receipt.type == pb.BaseCommand.SEND_RECEIPT
        assert receipt.send_receipt.sequence_id == 1
        assert _topic_state(limited, topic) == (1, 1)   # one rejection, only "ok" stored
    assert _rejected_metric(limited, topic) == 1.0


def _connections(handle: Any) -> set[str]:
    """The peers (address:port) of the broker's open client connections: a reconnect shows
    as a new port."""
    async def read() -> set[str]:
        return {c.remote_address for c in handle.server.connections}

    return handle.call(read)  # type: ignore[no-any-return]


def test_official_client_fails_only_the_rejected_send_and_disturbs_nobody(
        limited: Any) -> None:
    """The application gets an exception for that send at once; the producer goes on; a
    second producer and a consumer on the same client see no reconnect, no redelivery and
    no duplicate."""
    import pulsar
    from conftest import make_client

    topic = "persistent://public/default/max-delay-official"
    client = make_client(limited.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        rejected_producer = client.create_producer(topic, batching_enabled=False,
                                                   send_timeout_millis=SEND_TIMEOUT_MS)
        other = client.create_producer(topic, send_timeout_millis=SEND_TIMEOUT_MS)
        connections = _connections(limited)
        sent = [other.send(b"other-%d" % i) for i in range(3)]
        before = time.monotonic()
        with pytest.raises(pulsar.ChecksumError) as refused:
            rejected_producer.send(b"far", deliver_after=datetime.timedelta(seconds=30))
        refused_after_s = time.monotonic() - before
        failures: list[Any] = []
        done = threading.Event()

        def callback(result: Any, _msg_id: Any) -> None:
            failures.append(result)
            done.set()

        rejected_producer.send_async(b"far-async", callback,
                                     deliver_after=datetime.timedelta(seconds=30))
        assert done.wait(10)
        sent.append(rejected_producer.send(b"after"))          # the producer goes on
        sent.extend(other.send(b"other-%d" % i) for i in range(3, 6))
        got = []
        for _ in range(len(sent)):
            msg = consumer.receive(10_000)
            got.append((msg.data(), msg.redelivery_count()))
            consumer.acknowledge(msg)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(500)     # nothing more: no redelivery, no duplicate
        rejected, stored = _topic_state(limited, topic)
        connections_after = _connections(limited)
    finally:
        client.close()
    assert "ChecksumError" in str(refused.value)
    assert refused_after_s < SEND_TIMEOUT_MS / 1000      # failed at once, not on a timeout
    assert failures == [pulsar.Result.ChecksumError]
    assert sorted(d for d, _ in got) == sorted(
        [b"other-%d" % i for i in range(6)] + [b"after"])
    assert all(count == 0 for _, count in got)
    assert (rejected, stored) == (2, 7)                   # each rejection once: no re-sends
    assert connections_after == connections               # nobody reconnected


def test_pipelined_sends_behind_a_rejected_one_are_stored_once_and_acknowledged(
        limited: Any) -> None:
    import pulsar
    from conftest import make_client

    topic = "persistent://public/default/max-delay-pipelined"
    client = make_client(limited.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    results: dict[bytes, Any] = {}
    done = threading.Event()
    payloads = [b"n0", b"far", b"n1", b"n2"]

    def callback_for(payload: bytes) -> Any:
        def callback(result: Any, _msg_id: Any) -> None:
            results[payload] = result
            if len(results) == len(payloads):
                done.set()
        return callback

    try:
        producer = client.create_producer(topic, batching_enabled=False,
                                          send_timeout_millis=SEND_TIMEOUT_MS)
        for payload in payloads:
            delay = {"deliver_after": datetime.timedelta(seconds=30)} if payload == b"far" else {}
            producer.send_async(payload, callback_for(payload), **delay)
        producer.flush()
        assert done.wait(10)
        rejected, stored = _topic_state(limited, topic)
    finally:
        client.close()
    assert results == {b"n0": pulsar.Result.Ok, b"far": pulsar.Result.ChecksumError,
                       b"n1": pulsar.Result.Ok, b"n2": pulsar.Result.Ok}
    assert (rejected, stored) == (1, 3)
