"""Seeing what is scheduled: the subscription's delayedMessages listing and histogram over REST
and horae-admin, and the due-time metrics, with the official client scheduling."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from rest import subscription_metric
from waiting import wait_until

from .conftest import Api, Cli

P = "/admin/v2/persistent/public/default"
T = "persistent://public/default"
HOUR_MS = 3_600_000


@pytest.fixture(params=["in-memory", "bucket"])
def broker(request: pytest.FixtureRequest, broker_factory: Callable[..., Any]) -> Any:
    return broker_factory(config_overrides={
        "delayedDeliveryTickTimeMillis": 10,
        "delayedDeliveryTrackerFactoryClassName": request.param,
        # small buckets and segments: the bucket tracker seals and loads while listing
        "delayedDeliveryMinIndexCountPerBucket": 5,
        "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": 5,
    })


def _schedule(client: Any, topic: str, count: int) -> list[tuple[int, Any, str]]:
    """``count`` messages due 1..count hours from now in reverse send order, each with a key;
    returns (deliver_at, message id, key), ascending by deliver time."""
    producer = client.create_producer(f"{T}/{topic}", batching_enabled=False)
    now = int(time.time() * 1000)
    out = []
    for i in range(count, 0, -1):
        at = now + i * HOUR_MS
        key = f"k{i}"
        out.append((at, producer.send(b"x" * i, deliver_at=at, partition_key=key), key))
    producer.close()
    return sorted(out, key=lambda t: t[0])


def test_delayed_messages_are_listed_by_due_time_page_by_page(api: Api, client: Any) -> None:
    client.subscribe(f"{T}/v1", "sub", consumer_type=pulsar.ConsumerType.Shared)
    scheduled = _schedule(client, "v1", 12)
    base = f"{P}/v1/subscription/sub/delayedMessages"
    wait_until(lambda: api("GET", base).body["pending"] == 12, timeout_s=10,
               message="all twelve tracked")
    listed: list[dict[str, Any]] = []
    after = ""
    for _ in range(20):
        reply = api("GET", f"{base}?limit=5" + (f"&after={after}" if after else ""))
        assert reply.status == 200, reply
        assert len(reply.body["messages"]) <= 5
        listed.extend(reply.body["messages"])
        if reply.body["next"] is None:
            break
        after = reply.body["next"]
    # everything is listed (a bucket tracker's sealed segments are loaded as listing needs
    # them, or counted as notLoaded)
    not_loaded = api("GET", base).body["notLoaded"]
    assert len(listed) + not_loaded == 12
    expected = [{"messageId": f"{mid.ledger_id()}:{mid.entry_id()}", "ledgerId": mid.ledger_id(),
                 "entryId": mid.entry_id(), "deliverAt": at, "key": key, "size": int(key[1:])}
                for at, mid, key in scheduled]
    assert listed == [e for e in expected if e in listed]     # in due order
    assert listed[0] == expected[0]


def test_histogram_counts_pending_messages_by_due_time(api: Api, client: Any) -> None:
    client.subscribe(f"{T}/v2", "sub", consumer_type=pulsar.ConsumerType.Shared)
    _schedule(client, "v2", 4)                # due in 1, 2, 3 and 4 hours
    base = f"{P}/v2/subscription/sub/delayedMessages"
    wait_until(lambda: api("GET", base).body["pending"] == 4, timeout_s=10,
               message="all four tracked")
    reply = api("GET", f"{base}/histogram?boundsMs={90 * 60_000},{150 * 60_000}")
    assert reply.status == 200, reply
    body = reply.body
    counts = [b["count"] for b in body["bins"]]
    assert [b["upTo"] for b in body["bins"]] == [body["now"] + 90 * 60_000,
                                                 body["now"] + 150 * 60_000, None]
    assert sum(counts) + body["notLoaded"] == 4
    assert counts[0] in (0, 1) and counts[1] in (0, 1)
    default = api("GET", f"{base}/histogram").body
    assert len(default["bins"]) == 10


def test_bad_parameters_and_unknown_names_are_refused(api: Api, client: Any) -> None:
    client.subscribe(f"{T}/v3", "sub", consumer_type=pulsar.ConsumerType.Shared)
    base = f"{P}/v3/subscription/sub/delayedMessages"
    for query in ("?limit=0", "?limit=x", "?after=1:2", "?after=a:b:c", "?after=-1:0:0"):
        assert api("GET", base + query).status == 412, query
    for query in ("?boundsMs=x", "?boundsMs=-5", "?boundsMs=" + ",".join(["1"] * 65)):
        assert api("GET", base + "/histogram" + query).status == 412, query
    assert api("GET", f"{P}/v3/subscription/nope/delayedMessages").status == 404
    assert api("GET", f"{P}/nope/subscription/sub/delayedMessages").status == 404
    assert api("GET", "/admin/v2/non-persistent/public/default/v3/subscription/sub/"
               "delayedMessages").status == 405
    capped = api("GET", base + "?limit=100000")
    assert capped.status == 200 and capped.body["messages"] == []


def test_due_time_metrics_and_the_due_counter(api: Api, client: Any, broker: Any) -> None:
    consumer = client.subscribe(f"{T}/v4", "sub", consumer_type=pulsar.ConsumerType.Shared)
    topic = f"{T}/v4"
    producer = client.create_producer(topic, batching_enabled=False)
    now = int(time.time() * 1000)
    producer.send(b"soon", deliver_at=now + 300)
    producer.send(b"later", deliver_at=now + HOUR_MS)
    wait_until(lambda: subscription_metric(broker.web_url, "horae_subscription_delayed_last_due_timestamp_seconds",
                               topic, "sub") == (now + HOUR_MS) / 1000, timeout_s=10,
               message="the last due time is the hour")
    msg = consumer.receive(10_000)
    consumer.acknowledge(msg)
    assert msg.data() == b"soon"
    due = wait_until(lambda: subscription_metric(broker.web_url, "horae_subscription_delayed_due_total",
                                     topic, "sub") == 1.0, timeout_s=10,
                     message="one message fell due")
    assert due
    assert subscription_metric(broker.web_url, "horae_subscription_delayed_next_due_timestamp_seconds",
                   topic, "sub") == (now + HOUR_MS) / 1000
    producer.close()


def test_horae_admin_lists_and_bins_scheduled_messages(cli: Cli, client: Any, api: Api) -> None:
    client.subscribe(f"{T}/v5", "sub", consumer_type=pulsar.ConsumerType.Shared)
    scheduled = _schedule(client, "v5", 3)
    wait_until(lambda: api("GET", f"{P}/v5/subscription/sub/delayedMessages").body["pending"]
               == 3, timeout_s=10, message="all three tracked")
    first = cli.ok("topics", "list-delayed-messages", "v5", "-s", "sub", "-n", "1")
    at, mid, key = scheduled[0]
    assert first["messages"] == [{"messageId": f"{mid.ledger_id()}:{mid.entry_id()}",
                                  "ledgerId": mid.ledger_id(), "entryId": mid.entry_id(),
                                  "deliverAt": at, "key": key, "size": 1}]
    rest = cli.ok("topics", "list-delayed-messages", "v5", "-s", "sub", "--after", first["next"])
    assert [m["deliverAt"] for m in rest["messages"]] == [t[0] for t in scheduled[1:]][
        :len(rest["messages"])]
    hist = cli.ok("topics", "delayed-histogram", "v5", "-s", "sub", "-b", "90m,1d")
    assert [b["count"] for b in hist["bins"]][2] == 0
    assert sum(b["count"] for b in hist["bins"]) + hist["notLoaded"] == 3
    bad = cli.run("topics", "delayed-histogram", "v5", "-s", "sub", "-b", "soon")
    assert bad.returncode == 2
