"""skipByMessageIds (PIP-423, final form) end to end: the design's ``{"<ledgerId>": "<entryId>"}``
body, the V1 path, 400 for missing or negative ids, ``horae-admin topics skip-messages -m L=E``,
ack counters, and a skip after a bucket-tracker restart re-delivering nothing held unacked."""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pulsar
from conftest import make_client
from waiting import wait_until

from .conftest import Api, http

P = "/admin/v2/persistent/public/default"
T = "persistent://public/default"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _produce(client: Any, topic: str, n: int) -> list[Any]:
    producer = client.create_producer(f"{T}/{topic}", batching_enabled=False)
    ids = [producer.send(b"m%d" % i) for i in range(n)]
    producer.close()
    return ids


def _backlog(api: Api, topic: str, sub: str = "sub") -> int:
    return int(api("GET", f"{P}/{topic}/stats").body["subscriptions"][sub]["msgBacklog"])


def _ack_counter(broker: Any, topic: str, sub: str = "sub") -> int:
    async def read() -> int:
        return int(broker.service.topics[f"{T}/{topic}"].subscriptions[sub].msg_ack_counter)

    return broker.call(read)  # type: ignore[no-any-return]


def _subscribe_later(api: Api, topic: str) -> None:
    """A Shared subscription at earliest with no consumer yet (nothing dispatched)."""
    assert api("PUT", f"{P}/{topic}/subscription/sub", {"ledgerId": -1, "entryId": -1}
               ).status == 204


def _drain(consumer: Any, quiet_ms: int = 1000) -> list[bytes]:
    got = []
    while True:
        try:
            msg = consumer.receive(quiet_ms)
        except pulsar.Timeout:
            return got
        got.append(msg.data())
        consumer.acknowledge(msg)


def test_the_designs_map_body_skips_exactly_those_and_moves_ack_counters(
        api: Api, client: Any, broker: Any) -> None:
    _subscribe_later(api, "k1")
    ids = _produce(client, "k1", 4)
    body = {str(ids[1].ledger_id()): str(ids[1].entry_id())}
    assert api("POST", f"{P}/k1/subscription/sub/skipByMessageIds", body).status == 204
    assert _backlog(api, "k1") == 3
    assert _ack_counter(broker, "k1") == 1
    listed = {"type": "messageId", "messageIds": [
        {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id()}]}
    assert api("POST", f"{P}/k1/subscription/sub/skipByMessageIds", listed).status == 204
    assert _ack_counter(broker, "k1") == 2
    consumer = client.subscribe(f"{T}/k1", "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert _drain(consumer) == [b"m0", b"m3"]


def test_skip_by_ids_through_the_v1_path(api: Api, client: Any) -> None:
    _subscribe_later(api, "k2")
    ids = _produce(client, "k2", 2)
    body = {str(ids[0].ledger_id()): str(ids[0].entry_id())}
    path = "/admin/persistent/public/{}/default/k2/subscription/sub/skipByMessageIds"
    other = api("POST", path.format("elsewhere"), body)
    assert (other.status, other.reason) == (404, "Namespace does not exist")
    assert api("POST", path.format("standalone"), body).status == 204
    assert _backlog(api, "k2") == 1


def test_missing_or_negative_ids_are_400_and_skip_nothing(api: Api, client: Any) -> None:
    _subscribe_later(api, "k3")
    _produce(client, "k3", 2)
    for body in ({"type": "messageId", "messageIds": [{"entryId": 0}]},
                 {"type": "messageId", "messageIds": [{"ledgerId": 0}]},
                 {"type": "messageId", "messageIds": [{"ledgerId": -1, "entryId": 0}]},
                 {"0": "-1"}, {"-5": "0"}):
        reply = api("POST", f"{P}/k3/subscription/sub/skipByMessageIds", body)
        assert reply.status == 400, body
        assert str(reply.reason).startswith("Invalid skipByMessageIds payload: "), reply
    assert _backlog(api, "k3") == 2               # 0:0 was never skipped by default


def test_horae_admin_skip_messages_with_m_ledger_equals_entry(
        api: Api, client: Any, broker: Any) -> None:
    _subscribe_later(api, "k4")
    ids = _produce(client, "k4", 5)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli.admin", "--admin-url", broker.web_url, *args],
            cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)

    def eq(mid: Any) -> str:
        return f"{mid.ledger_id()}={mid.entry_id()}"

    done = cli("topics", "skip-messages", "k4", "-s", "sub", "-m", eq(ids[0]), "-m", eq(ids[1]),
               "--messageId-triplet", f"{ids[2].ledger_id()}:{ids[2].entry_id()}:-1")
    assert (done.returncode, done.stderr) == (0, "")
    assert _backlog(api, "k4") == 2
    bad = cli("topics", "skip-messages", "k4", "-s", "sub", "-m", "1:2")
    assert bad.returncode == 2
    assert "use ledgerId=entryId" in bad.stderr
    negative = cli("topics", "skip-messages", "k4", "-s", "sub", "-m", f"{ids[3].ledger_id()}=-1")
    assert negative.returncode == 2
    consumer = client.subscribe(f"{T}/k4", "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert _drain(consumer) == [b"m3", b"m4"]


BUCKET = {
    "delayedDeliveryTrackerFactoryClassName": "bucket",
    "delayedDeliveryMinIndexCountPerBucket": 10,
    "delayedDeliveryMaxIndexesPerBucketSnapshotSegment": 10,
    "managedLedgerMaxEntriesPerLedger": 10,
    "delayedDeliveryTickTimeMillis": 10,
    "isDelayedDeliveryDeliverAtTimeStrict": True,
}


def _delayed(broker: Any, topic: str) -> int:
    async def read() -> int:
        return int(broker.service.topics[topic].subscriptions["sub"].msg_delayed)

    return broker.call(read)  # type: ignore[no-any-return]


def _bucket_properties(broker: Any, topic: str) -> int:
    """Sealed buckets named in the cursor (persisted snapshots)."""
    async def read() -> int:
        cursor = broker.service.topics[topic].ledger.cursors["sub"]
        return sum(k.startswith("#pulsar.internal.delayed.bucket") for k in cursor.properties)

    return broker.call(read)  # type: ignore[no-any-return]


def test_a_skip_after_restart_redelivers_nothing_held_unacked(
        broker_factory: Callable[..., Any]) -> None:
    topic, n, held = f"{T}/k5", 60, 30
    first = broker_factory(config_overrides=BUCKET)
    client = make_client(first.service_url)
    try:
        # A consumer is connected: the tracker indexes everything and seals buckets.
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        deliver_at = int(time.time() * 1000) + 3000
        ids = [producer.send(b"d%d" % i, deliver_at=deliver_at) for i in range(n)]
        wait_until(lambda: _delayed(first, topic) == n, timeout_s=10,
                   message="every message tracked before the restart")
        assert _bucket_properties(first, topic) > 0
    finally:
        client.close()
    first.stop()

    second = broker_factory(config_overrides=BUCKET, data_dir=first.data_dir)
    client = make_client(second.service_url)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                    receiver_queue_size=10)
        received = [consumer.receive(10_000).data() for _ in range(held)]   # never acked
        target = ids[n - 1]
        reply = http(second.web_url, "POST", f"{P}/k5/subscription/sub/skipByMessageIds",
                     {str(target.ledger_id()): str(target.entry_id())})
        assert reply.status == 204
        while True:
            try:
                received.append(consumer.receive(1500).data())
            except pulsar.Timeout:
                break
    finally:
        client.close()
    assert len(received) == len(set(received)), "a message held unacked was delivered again"
    assert set(received) == {b"d%d" % i for i in range(n - 1)}


def test_an_exclusive_subscription_refuses_skip_and_cancel_after_unload_and_restart(
        broker_factory: Callable[..., Any]) -> None:
    # The type is known while a consumer is attached; it must not be forgotten when the
    # topic is unloaded or the broker restarts (no consumer attached since).
    first = broker_factory()
    client = make_client(first.service_url)
    consumer = client.subscribe(f"{T}/k6", "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(f"{T}/k6", batching_enabled=False)
    deliver_at = int(time.time() * 1000) + 600_000
    mid = producer.send(b"later", deliver_at=deliver_at)
    consumer.close()
    client.close()
    skip = (f"{P}/k6/subscription/excl/skipByMessageIds",
            {str(mid.ledger_id()): str(mid.entry_id())})
    cancel = (f"{P}/k6/cancelDelayedMessage?ledgerId={mid.ledger_id()}"
              f"&entryId={mid.entry_id()}&deliverAt={deliver_at}&subscriptionNames=excl")

    def answers(web_url: str) -> tuple[tuple[int, str | None], tuple[int, str | None]]:
        skipped = http(web_url, "POST", *skip)
        cancelled = http(web_url, "POST", cancel)
        return (skipped.status, skipped.reason), (cancelled.status, cancelled.reason)

    before = answers(first.web_url)
    assert before[0] == (405, "Skip messages by message ids is not allowed for subscription "
                              "type Exclusive: it acknowledges cumulatively")
    assert before[1][0] == 412 and "does not delay messages" in str(before[1][1])
    assert http(first.web_url, "PUT", f"{P}/k6/unload").status == 204
    assert answers(first.web_url) == before
    first.stop()

    second = broker_factory(data_dir=first.data_dir)
    assert answers(second.web_url) == before
    stats = http(second.web_url, "GET", f"{P}/k6/stats").body["subscriptions"]["excl"]
    assert (stats["type"], stats["msgBacklog"]) == ("Exclusive", 1)   # nothing was skipped


def test_an_exclusive_subscription_type_survives_kill9_right_after_subscribe(
        run_broker_process: Callable[..., Any], tmp_path: pathlib.Path) -> None:
    # The type is saved before the subscribe is answered: a kill -9 at once (long before the
    # rate-limited cursor save) must not turn the subscription into one skip-messages accepts.
    first = run_broker_process(tmp_path / "data")
    client = make_client(first.service_url)
    producer = client.create_producer(f"{T}/k9", batching_enabled=False)
    mid = producer.send(b"m")
    client.subscribe(f"{T}/k9", "excl", consumer_type=pulsar.ConsumerType.Exclusive,
                     initial_position=pulsar.InitialPosition.Earliest)
    first.kill()
    with contextlib.suppress(pulsar.NotConnected):  # closing against the killed broker
        client.close()
    second = run_broker_process(tmp_path / "data")
    skipped = http(second.web_url, "POST", f"{P}/k9/subscription/excl/skipByMessageIds",
                   {str(mid.ledger_id()): str(mid.entry_id())})
    assert (skipped.status, skipped.reason) == (
        405, "Skip messages by message ids is not allowed for subscription type Exclusive: "
             "it acknowledges cumulatively")
    stats = http(second.web_url, "GET", f"{P}/k9/stats").body["subscriptions"]["excl"]
    assert (stats["type"], stats["msgBacklog"]) == ("Exclusive", 1)
