"""Unsubscribing a subscription whose bucket tracker sealed snapshots (and recorded a cancel)
removes those snapshots from the store (Pulsar's cleanResidualSnapshots; official client)."""

from __future__ import annotations

import time
from typing import Any

from waiting import wait_until

CONFIG = {
    "delayedDeliveryTrackerFactoryClassName": "bucket",
    "delayedDeliveryMinIndexCountPerBucket": 20,
    "managedLedgerMaxEntriesPerLedger": 25,
}
TOPIC = "persistent://public/default/unsubscribe-cleanup"


def _snapshot_ids(handle: Any) -> list[int]:
    async def read() -> list[int]:
        return list(handle.service.store.snapshots.ids())

    return handle.call(read)  # type: ignore[no-any-return]


def test_unsubscribe_deletes_the_subscriptions_bucket_snapshots(broker_factory: Any) -> None:
    import pulsar
    from conftest import make_client

    broker = broker_factory(config_overrides=CONFIG)
    client = make_client(broker.service_url)
    try:
        consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(TOPIC)
        far = int(time.time() * 1000) + 3_600_000
        for i in range(80):
            producer.send(b"d%d" % i, deliver_at=far + i)
        created = wait_until(lambda: _snapshot_ids(broker), timeout_s=10,
                             message="bucket snapshots are written")
        assert created
        consumer.unsubscribe()
        wait_until(lambda: not _snapshot_ids(broker), timeout_s=10,
                   message="the unsubscribed subscription's snapshots are deleted")
    finally:
        client.close()
