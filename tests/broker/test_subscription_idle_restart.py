"""A durable subscription's idle time is kept across a restart, as Pulsar's cursor keeps its
lastActive: an idle subscription still expires on schedule after the broker restarts, and the
time its last consumer left reads the same after it; after a kill -9 with a consumer attached,
its last acknowledgement is its last activity."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pulsar
from conftest import make_client
from rest import http_json, unsaved_ack_age
from waiting import wait_until

from broker.subscriptions.subscription import LAST_ACTIVE_PROPERTY

TOPIC = "persistent://public/default/idle-restart"
PATH = "/admin/v2/persistent/public/default/idle-restart"
CONFIG = {"subscriptionExpirationTimeMinutes": 1}


def _last_active(broker: Any) -> int:
    status, stats = http_json(broker.web_url, "GET", PATH + "/internalStats")   # loads the topic
    assert status == 200, stats
    assert LAST_ACTIVE_PROPERTY not in stats["cursors"]["idle"]["properties"]  # not Pulsar's
    topic = broker.service.topics[TOPIC]
    return int(broker.call(lambda: topic.ledger.cursors["idle"].properties[LAST_ACTIVE_PROPERTY]))


def test_an_idle_subscription_expires_on_schedule_after_a_restart(
        broker_factory: Any, tmp_path: Any) -> None:
    data = tmp_path / "idle"
    first = broker_factory(data_dir=data, config_overrides=CONFIG)
    client = make_client(first.service_url)
    try:
        before = int(time.time() * 1000)
        client.subscribe(TOPIC, "idle").close()
    finally:
        client.close()
    left = _last_active(first)
    assert before <= left <= int(time.time() * 1000)
    first.stop()

    second = broker_factory(data_dir=data, config_overrides=CONFIG)
    assert _last_active(second) == left          # not reset by the restart
    expiry = second.service.subscription_expiry
    offset = [0.0]
    expiry.clock = lambda: time.time() + offset[0]
    # half the expiration time after the consumer left: kept
    offset[0] = left / 1000.0 + 30.0 - time.time()
    assert second.call(expiry.check, second.service.topics) == 0
    # past it, counted from before the restart rather than from the first look after it
    offset[0] = left / 1000.0 + 61.0 - time.time()
    assert second.call(expiry.check, second.service.topics) == 1
    status, subs = http_json(second.web_url, "GET", PATH + "/subscriptions")
    assert (status, subs) == (200, [])


def _later_than(ms: int) -> bool:
    return int(time.time() * 1000) > ms


def test_the_last_ack_before_a_kill_9_is_the_last_activity(
        run_broker_process: Any, broker_factory: Any, tmp_path: Any) -> None:
    """Pulsar's cursor updates lastActive on every ack and persists it with the mark-delete:
    after a kill -9 with a consumer attached, expiration counts from the last ack, neither
    from an earlier departure nor from the restart."""
    data = tmp_path / "killed"
    first = run_broker_process(data, config_overrides=CONFIG)
    client = make_client(first.service_url)
    try:
        client.subscribe(TOPIC, "idle", consumer_type=pulsar.ConsumerType.Shared).close()
        departed = int(time.time() * 1000)
        consumer = client.subscribe(TOPIC, "idle", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(TOPIC)
        for i in range(3):
            producer.send(f"m{i}".encode())
        wait_until(lambda: _later_than(departed + 5), timeout_s=5)
        before_ack = int(time.time() * 1000)
        for _ in range(3):
            consumer.acknowledge(consumer.receive(5000))

        def acked_and_saved() -> bool:
            status, stats = http_json(first.web_url, "GET", PATH + "/stats")
            return (status == 200 and stats["subscriptions"]["idle"]["msgBacklog"] == 0
                    and unsaved_ack_age(first.web_url) == 0.0)

        wait_until(acked_and_saved, timeout_s=20, message="acks applied and saved")
        after_ack = int(time.time() * 1000)
        first.kill()                       # the consumer is still attached
    finally:
        # after the kill the client may fail to close its consumer and producer
        # (NotConnected), which says nothing about what the broker kept
        with contextlib.suppress(pulsar.exceptions.NotConnected):
            client.close()

    second = broker_factory(data_dir=data, config_overrides=CONFIG)
    last = _last_active(second)
    assert before_ack <= last <= after_ack, (departed, before_ack, last, after_ack)
    expiry = second.service.subscription_expiry
    offset = [0.0]
    expiry.clock = lambda: time.time() + offset[0]
    offset[0] = last / 1000.0 + 30.0 - time.time()
    assert second.call(expiry.check, second.service.topics) == 0
    # the first check past the expiration time deletes it: counted from the ack, not restarted
    offset[0] = last / 1000.0 + 61.0 - time.time()
    assert second.call(expiry.check, second.service.topics) == 1
    status, subs = http_json(second.web_url, "GET", PATH + "/subscriptions")
    assert (status, subs) == (200, [])


def test_a_reset_of_an_idle_subscription_is_activity(broker_factory: Any, tmp_path: Any) -> None:
    broker = broker_factory(data_dir=tmp_path / "reset", config_overrides=CONFIG)
    client = make_client(broker.service_url)
    try:
        client.subscribe(TOPIC, "idle").close()
    finally:
        client.close()
    left = _last_active(broker)
    wait_until(lambda: _later_than(left + 5), timeout_s=5)
    before_reset = int(time.time() * 1000)
    status, body = http_json(broker.web_url, "POST",
                             PATH + f"/subscription/idle/resetcursor/{before_reset}")
    assert status == 204, body
    reset_at = _last_active(broker)
    assert before_reset <= reset_at <= int(time.time() * 1000)
    expiry = broker.service.subscription_expiry
    offset = [0.0]
    expiry.clock = lambda: time.time() + offset[0]
    offset[0] = reset_at / 1000.0 + 59.0 - time.time()   # 59 s after the reset: kept
    assert broker.call(expiry.check, broker.service.topics) == 0
    offset[0] = reset_at / 1000.0 + 61.0 - time.time()
    assert broker.call(expiry.check, broker.service.topics) == 1
