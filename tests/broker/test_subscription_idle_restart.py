"""A durable subscription's idle time is kept across a restart, as Pulsar's cursor keeps its
lastActive: an idle subscription still expires on schedule after the broker restarts, and the
time its last consumer left reads the same after it."""

from __future__ import annotations

import time
from typing import Any

from conftest import make_client
from rest import http_json

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
