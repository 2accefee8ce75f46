"""A delayedDelivery policy change reaches the trackers of a loaded topic without a restart.

Path: REST POST/DELETE .../delayedDelivery -> service policy store -> ``TopicDelivery.invalidate_policy``
(resolves it once) -> ``Subscription.on_policy_changed(policy)`` -> ``DelayedDelivery.set_policy``
-> ``tracker.reset_tick_time(new tick)``, which moves the cutoff and re-aims the one timer at
once (the next message and the messages already tracked).
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.request
from typing import Any

import pytest
from waiting import wait_until

NS_POLICY = "/admin/v2/namespaces/public/default/delayedDelivery"


def _rest(handle: Any, method: str, path: str, body: object | None = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(handle.web_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as reply:
        return int(reply.status)


def _tracker_tick(handle: Any, topic: str, sub: str) -> tuple[int, int] | None:
    """(tracker tick, tracked count) of a subscription, None while it has no tracker."""

    async def read() -> tuple[int, int] | None:
        tracker = handle.service.topics[topic].subscriptions[sub].delayed_tracker
        return None if tracker is None else (int(tracker.tick_time_ms), len(tracker))

    return handle.call(read)  # type: ignore[no-any-return]


def _wait_tracked(handle: Any, topic: str, sub: str, n: int) -> tuple[int, int]:
    def tracked() -> tuple[int, int] | None:
        state = _tracker_tick(handle, topic, sub)
        return state if state is not None and state[1] >= n else None

    return wait_until(tracked, timeout_s=10, interval_s=0.01,
                      message=f"the tracker of {sub} holds {n} messages")


@pytest.mark.parametrize("tracker", ["in-memory", "bucket"])
def test_namespace_and_topic_tick_changes_reach_an_existing_tracker(
        broker_factory: Any, tracker: str) -> None:
    import pulsar
    from conftest import make_client

    handle = broker_factory(config_overrides={"delayedDeliveryTickTimeMillis": 1000,
                                              "delayedDeliveryTrackerFactoryClassName": tracker})
    topic = f"persistent://public/default/live-tick-{tracker}"
    topic_policy = f"/admin/v2/persistent/public/default/live-tick-{tracker}/delayedDelivery"
    client = make_client(handle.service_url)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        producer.send(b"later", deliver_after=datetime.timedelta(minutes=5))
        seen = [_wait_tracked(handle, topic, "sub", 1)[0]]
        assert _rest(handle, "POST", NS_POLICY, {"tickTime": 50}) == 204
        seen.append(_tracker_tick(handle, topic, "sub")[0])  # type: ignore[index]
        assert _rest(handle, "POST", topic_policy, {"tickTime": 20}) == 204
        seen.append(_tracker_tick(handle, topic, "sub")[0])  # type: ignore[index]
        assert _rest(handle, "DELETE", topic_policy) == 204
        seen.append(_tracker_tick(handle, topic, "sub")[0])  # type: ignore[index]
        assert _rest(handle, "DELETE", NS_POLICY) == 204
        seen.append(_tracker_tick(handle, topic, "sub")[0])  # type: ignore[index]
        consumer.close()
        producer.close()
    finally:
        client.close()
    assert seen == [1000, 50, 20, 50, 1000]


def test_a_smaller_tick_re_aims_the_timer_of_an_already_tracked_message(
        broker_factory: Any) -> None:
    """Non-strict, tick 2 s: a message due in 3 s is tracked and its timer aimed one tick
    early (+1 s). Lowering the tick to 10 ms re-aims it: it arrives at most 10 ms early."""
    import pulsar
    from conftest import make_client

    handle = broker_factory(config_overrides={"delayedDeliveryTickTimeMillis": 2000,
                                              "isDelayedDeliveryDeliverAtTimeStrict": False})
    topic = "persistent://public/default/live-tick-timer"
    client = make_client(handle.service_url)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic)
        deliver_at = int(time.time() * 1000) + 3000
        producer.send(b"x", deliver_at=deliver_at)
        _wait_tracked(handle, topic, "sub", 1)
        assert _rest(handle, "POST", NS_POLICY, {"tickTime": 10}) == 204
        msg = consumer.receive(timeout_millis=10_000)
        received_ms = time.time() * 1000
        consumer.acknowledge(msg)
        consumer.close()
        producer.close()
    finally:
        client.close()
    assert received_ms >= deliver_at - 10 - 2      # 2 ms: clock reading granularity
    assert received_ms <= deliver_at + 1000
