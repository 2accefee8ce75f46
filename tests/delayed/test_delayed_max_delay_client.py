"""PIP-315 max-delay rejection as clients see it: the exact SEND_ERROR on the wire (raw client
built on ``protocol/``) and what the official Python client 3.13 (C++ 4.2.0) does with it.

Why the official client never fails the send (read in pulsar-client-cpp v4.2.0):
``ClientConnection::handleSendError`` fails a single message only for ChecksumError; any other
code (NotAllowedError included) closes the whole connection. The producer reconnects (backoff
100 ms), and ``ProducerImpl::handleCreateProducer`` on PRODUCER_SUCCESS re-sends the pending
queue, resets the backoff and calls ``startSendTimeoutTimer()``, which re-arms the send-timeout
timer to a full ``send_timeout_millis`` from now. The timer only fires after a whole send
timeout without a successful reconnect, so with a broker that answers PRODUCER (as upstream
Pulsar does) the cycle reject -> close -> reconnect -> re-send repeats about ten times a second
and the message completes only when the producer or client is closed (AlreadyClosed).
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
from waiting import wait_until

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
        return int(t.delayed_rejected_counter), int(t.ledger.number_of_entries)

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


def test_max_delay_rejection_is_send_error_not_allowed_with_pulsars_text(limited: Any) -> None:
    raw = _rawclient_module()
    topic = "persistent://public/default/max-delay-wire"
    with raw.RawClient(limited.service_url) as rc:
        rc.handshake()
        assert rc.create_producer(topic, 1).type == pb.BaseCommand.PRODUCER_SUCCESS
        now = int(time.time() * 1000)
        far = raw.make_entry(b"far", sequence_id=0, publish_time=now,
                             deliver_at_time=now + MAX_DELAY_MS + 1)
        rc.send(C.encode_send(1, 0, far))
        answer = rc.recv_command()
        # The boundary (exactly the max) is accepted, and the connection stayed open.
        ok = raw.make_entry(b"ok", sequence_id=1, publish_time=now,
                            deliver_at_time=now + MAX_DELAY_MS)
        rc.send(C.encode_send(1, 1, ok))
        receipt = rc.recv_command()
    assert answer.type == pb.BaseCommand.SEND_ERROR
    assert answer.send_error.producer_id == 1
    assert answer.send_error.sequence_id == 0
    assert answer.send_error.error == ServerError.NotAllowedError
    assert answer.send_error.message == TEXT
    assert receipt.type == pb.BaseCommand.SEND_RECEIPT
    assert receipt.send_receipt.sequence_id == 1
    assert _topic_state(limited, topic) == (1, 1)   # one rejection, only "ok" stored
    assert _rejected_metric(limited, topic) == 1.0


def test_official_client_keeps_retrying_a_rejected_send_until_the_producer_closes(
        limited: Any) -> None:
    """Pins the 3.13 client's behaviour (see the module docstring): no failure within twice
    the send timeout, rejections keep coming, nothing is stored; closing the producer fails
    the send with AlreadyClosed."""
    import pulsar
    from conftest import make_client

    topic = "persistent://public/default/max-delay-official"
    client = make_client(limited.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    results: list[Any] = []
    done = threading.Event()

    def callback(result: Any, _msg_id: Any) -> None:
        results.append(result)
        done.set()

    try:
        producer = client.create_producer(topic, send_timeout_millis=SEND_TIMEOUT_MS)
        producer.send_async(b"far", callback, deliver_after=datetime.timedelta(seconds=30))
        completed = done.wait(2 * SEND_TIMEOUT_MS / 1000)
        rejected, stored = _topic_state(limited, topic)
        metric = _rejected_metric(limited, topic)
        producer.close()
        closed_in_time = done.wait(10)
    finally:
        client.close()
    assert not completed
    assert rejected >= 2          # re-sent after each reconnect (about every 100 ms)
    assert stored == 0
    assert metric is not None and metric >= 2
    assert closed_in_time
    assert results == [pulsar.Result.AlreadyClosed]


def test_messages_pipelined_behind_a_rejected_send_are_not_stored_again_on_every_resend(
        limited: Any) -> None:
    import pulsar
    from conftest import make_client

    topic = "persistent://public/default/max-delay-pipelined"
    client = make_client(limited.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, send_timeout_millis=SEND_TIMEOUT_MS)
        producer.send_async(b"far", lambda *_: None, deliver_after=datetime.timedelta(seconds=30))
        producer.send_async(b"normal", lambda *_: None)
        # the client resends through reconnect cycles; the broker's counters show them
        rejected, stored = wait_until(
            lambda: (state := _topic_state(limited, topic))[0] >= 5 and state,
            timeout_s=10, interval_s=0.05, message="the broker rejects 5 resends",
        )
        producer.close()
    finally:
        client.close()
    assert rejected >= 5
    assert stored <= 1
