"""On time by default, and after a kill -9: official client, no configuration override.

- The default configuration never delivers early: ``deliver_after`` and ``deliver_at``, on a
  Shared and a Key_Shared subscription, with both trackers (the default tick is 1 s; a timer
  armed a tick before the deliver time would hand them out up to a second early).
- After a kill -9 with delayed messages pending, a fresh consumer gets the messages that fell
  due while the broker was down at once -- before messages due a few seconds after the restart
  -- and those later ones not before their time; nothing twice, nothing pending handed out.
"""

from __future__ import annotations

import datetime
import pathlib
import time
from typing import Any

import pulsar
import pytest
from conftest import make_client
from rest import http_json
from waiting import wait_until

T = "persistent://public/default"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _receive(consumer: Any, count: int, timeout_s: float) -> list[tuple[bytes, int]]:
    """``count`` messages (acknowledged) with their receive time; fails on a timeout."""
    got: list[tuple[bytes, int]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        left_ms = int((deadline - time.monotonic()) * 1000)
        assert left_ms > 0, f"only {len(got)} of {count} messages arrived: {got}"
        try:
            msg = consumer.receive(left_ms)
        except pulsar.Timeout:
            continue
        got.append((msg.data(), _now_ms()))
        consumer.acknowledge(msg)
    return got


@pytest.mark.parametrize("tracker", ["in-memory", "bucket"])
@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.KeyShared])
def test_default_configuration_is_never_early(broker_factory: Any, tracker: str,
                                              kind: Any) -> None:
    overrides = {} if tracker == "in-memory" else {
        "delayedDeliveryTrackerFactoryClassName": tracker}
    handle = broker_factory(config_overrides=overrides)
    client = make_client(handle.service_url)
    try:
        topic = f"{T}/on-time-{tracker}-{kind}"
        consumer = client.subscribe(topic, "s", consumer_type=kind)
        producer = client.create_producer(topic, batching_enabled=False)
        due: dict[bytes, int] = {}
        for i, delay_ms in enumerate((300, 700, 1100, 1500)):
            sent = _now_ms()
            producer.send(b"after-%d" % i, deliver_after=datetime.timedelta(
                milliseconds=delay_ms), partition_key=f"k{i}")
            due[b"after-%d" % i] = sent + delay_ms
            at = _now_ms() + delay_ms + 50
            producer.send(b"at-%d" % i, deliver_at=at, partition_key=f"k{i}")
            due[b"at-%d" % i] = at
        for data, received in _receive(consumer, len(due), 30):
            assert received >= due[data], f"{data!r} early by {due[data] - received} ms"
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)
    finally:
        client.close()


@pytest.mark.parametrize("tracker", ["in-memory", "bucket"])
def test_due_at_restart_is_delivered_at_once_and_later_ones_on_time(
        run_broker_process: Any, tmp_path: pathlib.Path, tracker: str) -> None:
    config = {"delayedDeliveryTrackerFactoryClassName": tracker}
    data = tmp_path / "data"
    topic = f"{T}/restart-on-time-{tracker}"
    first = run_broker_process(data, config_overrides=config)
    client = make_client(first.service_url)
    try:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        now = _now_ms()
        far = [now + 3_600_000 + i for i in range(50)]   # pending through the whole test
        for i, at in enumerate(far):
            producer.send(b"far-%d" % i, deliver_at=at)
        due_at = _now_ms() + 300
        for i in range(5):
            producer.send(b"due-%d" % i, deliver_at=due_at)
        stats_path = "/admin/v2/persistent/public/default/" + topic.rsplit("/", 1)[1] + "/stats"
        wait_until(lambda: http_json(first.web_url, "GET", stats_path)[1]["subscriptions"]["s"]
                   ["msgDelayed"] == 55, message="all 55 held by the tracker")
        del consumer
    finally:
        client.close()
    first.kill()
    wait_until(lambda: _now_ms() > due_at, message="the first messages fell due while down")

    second = run_broker_process(data, config_overrides=config)
    # Due this long after the restart: the already-due ones must come before, these after.
    later_at = _now_ms() + 4000
    client = make_client(second.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(5):
            producer.send(b"later-%d" % i, deliver_at=later_at)
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
        got = _receive(consumer, 10, 60)
        names = [name for name, _ in got]
        assert sorted(names) == sorted([b"due-%d" % i for i in range(5)] +
                                       [b"later-%d" % i for i in range(5)]), names
        for name, received in got:
            if name.startswith(b"due-"):
                assert received < later_at, f"{name!r} due at restart came only at " \
                    f"{received - later_at} ms past the later messages' time"
            else:
                assert received >= later_at, f"{name!r} early by {later_at - received} ms"
        with pytest.raises(pulsar.Timeout):
            consumer.receive(500)   # no duplicate, no far message
        status, stats = http_json(second.web_url, "GET", stats_path)
        assert status == 200 and stats["subscriptions"]["s"]["msgDelayed"] == 50, stats
    finally:
        client.close()
    assert second.stop() == 0
