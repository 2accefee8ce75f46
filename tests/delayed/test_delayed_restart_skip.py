"""Restart of a bucket-tracker broker: the dispatcher jumps over sealed ranges the tracker
holds, yet an unacknowledged non-delayed message inside those ranges is delivered again, no
delayed message comes early and none is lost (official client, in-process broker)."""

from __future__ import annotations

import time
from typing import Any

from waiting import wait_until

CONFIG = {
    "delayedDeliveryTrackerFactoryClassName": "bucket",
    "delayedDeliveryMinIndexCountPerBucket": 40,
    "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": 20,
    "managedLedgerMaxEntriesPerLedger": 50,
    "delayedDeliveryTickTimeMillis": 10,
    "isDelayedDeliveryDeliverAtTimeStrict": True,
}
TOPIC = "persistent://public/default/restart-skip"
DELAYED = 240


def _msg_delayed(handle: Any) -> int:
    async def read() -> int:
        return int(handle.service.topics[TOPIC].subscriptions["sub"].msg_delayed)

    return handle.call(read)  # type: ignore[no-any-return]


def _wait_delayed(handle: Any, n: int) -> int:
    return wait_until(lambda: (got := _msg_delayed(handle)) >= n and got, timeout_s=10,
                      interval_s=0.02, message=f"msg_delayed reaches {n}")


def test_restart_skips_tracked_ranges_but_redelivers_unacked_and_keeps_delayed(
        broker_factory: Any) -> None:
    import pulsar
    from conftest import make_client

    first = broker_factory(config_overrides=CONFIG)
    far = int(time.time() * 1000) + 3_600_000
    client = make_client(first.service_url)
    try:
        consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(TOPIC)
        for i in range(DELAYED):
            if i == DELAYED // 2:
                producer.send(b"unacked")           # inside a range sealed into a bucket
            producer.send(b"d%d" % i, deliver_at=far + i)
        got = consumer.receive(timeout_millis=10_000)
        assert got.data() == b"unacked"             # received, never acknowledged
        assert _wait_delayed(first, DELAYED) == DELAYED
    finally:
        client.close()
    first.stop()

    second = broker_factory(config_overrides=CONFIG, data_dir=first.data_dir)
    client = make_client(second.service_url)
    received: list[bytes] = []
    try:
        consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(TOPIC)
        producer.send(b"after")

        def received_after() -> bool:
            try:
                msg = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                return False
            received.append(msg.data())
            consumer.acknowledge(msg)
            return b"after" in received

        wait_until(received_after, timeout_s=10, interval_s=0,
                   message="the message published after the restart arrives")
        delayed_after = _wait_delayed(second, DELAYED)
    finally:
        client.close()
    assert sorted(received) == [b"after", b"unacked"]
    assert delayed_after == DELAYED
