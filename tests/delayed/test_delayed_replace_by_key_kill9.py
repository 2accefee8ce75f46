"""Replace by key survives kill -9: after a restart no replaced or cancelled message is
delivered, even one whose old deliver time passed while the broker was down, and the newest
message of each key is delivered on time, on a Shared, a Key_Shared and a subscription that had
read nothing yet. Official client, broker subprocesses, both tracker kinds."""

from __future__ import annotations

import pathlib
import time
from typing import Any

import pulsar
import pytest
from conftest import make_client
from rest import http_json
from waiting import wait_until

T = "persistent://public/default"
TOPIC = f"{T}/rbk-kill"
SUBS = {"s": pulsar.ConsumerType.Shared, "k": pulsar.ConsumerType.KeyShared,
        "lag": pulsar.ConsumerType.Shared}


def _receive_all(consumer: Any, expect: set[bytes], deadline_ms: int) -> list[tuple[bytes, int]]:
    """Receive (and acknowledge) until every expected payload came, then 1.5 s more for
    strays, or until the deadline."""
    got: list[tuple[bytes, int]] = []
    while (left := deadline_ms - int(time.time() * 1000)) > 0:
        done = expect <= {data for data, _ in got}
        try:
            msg = consumer.receive(1500 if done else max(1, left))
        except pulsar.Timeout:
            if done:
                break
            continue
        got.append((msg.data(), int(time.time() * 1000)))
        consumer.acknowledge(msg)
    return got


@pytest.mark.parametrize("tracker", ["in-memory", "bucket"])
def test_replacements_and_cancels_survive_kill_9(run_broker_process: Any, tmp_path: pathlib.Path,
                                                 tracker: str) -> None:
    config = {"delayedDeliveryTrackerFactoryClassName": tracker,
              "delayedDeliveryTickTimeMillis": 10, "isDelayedDeliveryDeliverAtTimeStrict": True}
    data = tmp_path / "data"
    first = run_broker_process(data, config_overrides=config)
    status, body = http_json(first.web_url, "POST",
                             "/admin/v2/namespaces/public/default/delayedDeliveryReplaceByKey",
                             b"true")
    assert status == 204, body
    client = make_client(first.service_url)
    try:
        consumers = [client.subscribe(TOPIC, name, consumer_type=kind)
                     for name, kind in SUBS.items() if name != "lag"]
        status, body = http_json(first.web_url, "PUT", "/admin/v2/persistent/public/default/"
                                 "rbk-kill/subscription/lag", b'{"ledgerId": -1, "entryId": -1}')
        assert status == 204, body
        producer = client.create_producer(TOPIC, batching_enabled=False)
        tombstones = client.create_producer(TOPIC, batching_enabled=True)
        now = int(time.time() * 1000)
        old_at, new_at = now + 2500, now + 6000
        producer.send(b"k1-old", partition_key="k1", deliver_at=old_at)
        producer.send(b"k2-job", partition_key="k2", deliver_at=old_at)
        producer.send(b"k3-job", partition_key="k3", deliver_at=old_at)
        producer.send(b"k1-new", partition_key="k1", deliver_at=new_at)
        tombstones.send(b"", partition_key="k2")
        # the connected subscriptions dropped the replaced messages from their trackers and
        # acknowledged them (in memory; the kill comes before any bounded-rate cursor write)
        def settled() -> bool:
            subs = http_json(first.web_url, "GET", "/admin/v2/persistent/public/default/"
                             "rbk-kill/stats")[1]["subscriptions"]
            return all(subs[n]["msgBacklog"] == 2 for n in SUBS) and \
                all(subs[n]["msgDelayed"] == 2 for n in ("s", "k"))

        wait_until(settled, timeout_s=10,
                   message="the two newest messages tracked, the rest acknowledged")
        del consumers
    finally:
        client.close()
    first.kill()
    # The old deliver time passes while the broker is down.
    wait_until(lambda: time.time() * 1000 > old_at + 200, timeout_s=10,
               message="old deliver time passed")

    second = run_broker_process(data, config_overrides=config)
    client = make_client(second.service_url)
    try:
        consumers = [client.subscribe(TOPIC, name, consumer_type=kind)
                     for name, kind in SUBS.items()]
        for consumer in consumers:
            got = _receive_all(consumer, {b"k1-new", b"k3-job"}, new_at + 20_000)
            assert sorted(data for data, _ in got) == [b"k1-new", b"k3-job"], got
            assert dict(got)[b"k1-new"] >= new_at
    finally:
        client.close()
    assert second.stop() == 0
