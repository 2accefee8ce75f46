"""PIP-423 cancelDelayedMessage end to end: the official client schedules, the REST API (v2, v1)
and ``horae-admin`` cancel, the cancelled message never arrives and leaves the backlog."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from .conftest import Api, http

P = "/admin/v2/persistent/public/default"
T = "persistent://public/default"
ROOT = pathlib.Path(__file__).resolve().parents[2]
DELAY_MS = 2500
#: How far ahead the messages cancelled through horae-admin subprocesses are due.
CLI_DELAY_MS = 12_000


@pytest.fixture
def broker(broker_factory: Callable[..., Any]) -> Any:
    # A short tick: deliveries within ~10 ms of their time, so the tests wait little.
    return broker_factory(config_overrides={"delayedDeliveryTickTimeMillis": 10})


def _schedule(client: Any, topic: str, n: int, delay_ms: int = DELAY_MS) -> tuple[list[Any], int]:
    """Send ``n`` messages due together in ``delay_ms``; (message ids, deliver_at)."""
    producer = client.create_producer(f"{T}/{topic}", batching_enabled=False)
    deliver_at = int(time.time() * 1000) + delay_ms
    ids = [producer.send(b"m%d" % i, deliver_at=deliver_at) for i in range(n)]
    producer.close()
    return ids, deliver_at


def _cancel_path(topic: str, mid: Any, deliver_at: int, subs: str = "",
                 base: str = P) -> str:
    path = (f"{base}/{topic}/cancelDelayedMessage?ledgerId={mid.ledger_id()}"
            f"&entryId={mid.entry_id()}&deliverAt={deliver_at}")
    return path + (f"&subscriptionNames={subs}" if subs else "")


def _drain(consumer: Any, quiet_ms: int = DELAY_MS + 1500) -> list[bytes]:
    """Everything that arrives until nothing has for ``quiet_ms`` (past the deliver time)."""
    got = []
    while True:
        try:
            msg = consumer.receive(quiet_ms)
        except pulsar.Timeout:
            return sorted(got)
        got.append(msg.data())
        consumer.acknowledge(msg)


def _sub_stats(api: Api, topic: str, sub: str) -> dict[str, Any]:
    reply = api("GET", f"{P}/{topic}/stats")
    assert reply.status == 200, reply
    stats: dict[str, Any] = reply.body["subscriptions"][sub]
    return stats


def _ack_counter(broker: Any, topic: str, sub: str) -> int:
    async def read() -> int:
        return int(broker.service.topics[f"{T}/{topic}"].subscriptions[sub].msg_ack_counter)

    return broker.call(read)  # type: ignore[no-any-return]


def test_cancelled_message_is_never_delivered_and_leaves_the_backlog(
        api: Api, client: Any, broker: Any) -> None:
    consumer = client.subscribe(f"{T}/c1", "sub", consumer_type=pulsar.ConsumerType.Shared)
    ids, deliver_at = _schedule(client, "c1", 3)
    reply = api("POST", _cancel_path("c1", ids[1], deliver_at))
    assert reply.status == 204, reply
    assert _sub_stats(api, "c1", "sub")["msgBacklog"] == 2
    assert _ack_counter(broker, "c1", "sub") == 1     # acknowledged like any ack
    assert _drain(consumer) == [b"m0", b"m2"]
    again = api("POST", _cancel_path("c1", ids[1], deliver_at))
    assert again.status == 412
    assert "already acknowledged" in str(again.reason)


def test_cancel_before_any_consumer_holds_after_a_shared_consumer_arrives(
        api: Api, client: Any) -> None:
    assert api("PUT", f"{P}/c2/subscription/sub", {"ledgerId": -1, "entryId": -1}).status == 204
    ids, deliver_at = _schedule(client, "c2", 2)
    assert api("POST", _cancel_path("c2", ids[0], deliver_at)).status == 204
    consumer = client.subscribe(f"{T}/c2", "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert _drain(consumer) == [b"m1"]


def test_cancel_without_deliver_at_reads_the_deliver_time_from_the_message(
        api: Api, client: Any) -> None:
    consumer = client.subscribe(f"{T}/c9", "sub", consumer_type=pulsar.ConsumerType.Shared)
    ids, _ = _schedule(client, "c9", 2)
    base = f"{P}/c9/cancelDelayedMessage"
    reply = api("POST", f"{base}?ledgerId={ids[0].ledger_id()}&entryId={ids[0].entry_id()}")
    assert reply.status == 204, reply
    assert _sub_stats(api, "c9", "sub")["msgBacklog"] == 1
    plain = client.create_producer(f"{T}/c9").send(b"now")
    not_delayed = api("POST", f"{base}?ledgerId={plain.ledger_id()}&entryId={plain.entry_id()}")
    assert not_delayed.status == 412
    assert "not a delayed message" in str(not_delayed.reason)
    missing = api("POST", f"{base}?ledgerId={ids[0].ledger_id()}&entryId=999")
    assert missing.status == 412
    assert "not found" in str(missing.reason)
    assert _drain(consumer) == [b"m1", b"now"]


def test_cancel_on_named_subscriptions_only(api: Api, client: Any) -> None:
    a = client.subscribe(f"{T}/c3", "a", consumer_type=pulsar.ConsumerType.Shared)
    b = client.subscribe(f"{T}/c3", "b", consumer_type=pulsar.ConsumerType.KeyShared)
    ids, deliver_at = _schedule(client, "c3", 2)
    assert api("POST", _cancel_path("c3", ids[0], deliver_at, subs="a")).status == 204
    assert _drain(a) == [b"m1"]
    assert _drain(b, quiet_ms=500) == [b"m0", b"m1"]


def test_cancel_on_a_partitioned_topic_acts_on_the_owning_partition(
        api: Api, client: Any) -> None:
    assert api("PUT", f"{P}/c4/partitions", 3).status == 204
    consumer = client.subscribe(f"{T}/c4", "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(f"{T}/c4", batching_enabled=False,
                                      message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    deliver_at = int(time.time() * 1000) + DELAY_MS
    ids = [producer.send(b"m%d" % i, deliver_at=deliver_at) for i in range(3)]
    producer.close()
    assert len({mid.partition() for mid in ids}) > 1
    assert api("POST", _cancel_path("c4", ids[2], deliver_at)).status == 204
    assert _drain(consumer) == [b"m0", b"m1"]


def test_cancel_through_the_v1_path(api: Api, client: Any) -> None:
    consumer = client.subscribe(f"{T}/c5", "sub", consumer_type=pulsar.ConsumerType.Shared)
    ids, deliver_at = _schedule(client, "c5", 2)
    other = api("POST", _cancel_path("c5", ids[0], deliver_at,
                                     base="/admin/persistent/public/elsewhere/default"))
    assert (other.status, other.reason) == (404, "Namespace does not exist")
    v1 = api("POST", _cancel_path("c5", ids[0], deliver_at,
                                  base="/admin/persistent/public/standalone/default"))
    assert v1.status == 204, v1
    assert _drain(consumer) == [b"m1"]


def test_cancel_status_codes(api: Api, client: Any) -> None:
    client.subscribe(f"{T}/c6", "shared", consumer_type=pulsar.ConsumerType.Shared)
    client.subscribe(f"{T}/c6", "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    ids, deliver_at = _schedule(client, "c6", 1, delay_ms=60_000)
    mid = ids[0]
    base = f"{P}/c6/cancelDelayedMessage"
    for query in ("", f"?entryId={mid.entry_id()}",
                  f"?ledgerId={mid.ledger_id()}&entryId={mid.entry_id()}&deliverAt=",
                  f"?ledgerId={mid.ledger_id()}&entryId={mid.entry_id()}&deliverAt=x",
                  f"?ledgerId=-1&entryId=0&deliverAt={deliver_at}",
                  f"?ledgerId=x&entryId=0&deliverAt={deliver_at}",
                  f"?ledgerId={mid.ledger_id()}&entryId={mid.entry_id()}&deliverAt=0"):
        bad = api("POST", base + query)
        assert (bad.status, bad.reason) == (412, "ledgerId, entryId must be non-negative, "
                                                 "and deliverAt must be positive."), query
    wrong_time = api("POST", _cancel_path("c6", mid, deliver_at + 1))
    assert wrong_time.status == 412
    assert f"which is due at {deliver_at}" in str(wrong_time.reason)
    missing = api("POST", f"{base}?ledgerId={mid.ledger_id()}&entryId=999&deliverAt={deliver_at}")
    assert missing.status == 412
    assert "not found" in str(missing.reason)
    plain = client.create_producer(f"{T}/c6").send(b"now")
    not_delayed = api("POST", _cancel_path("c6", plain, deliver_at))
    assert not_delayed.status == 412
    assert "not a delayed message" in str(not_delayed.reason)
    exclusive = api("POST", _cancel_path("c6", mid, deliver_at, subs="excl"))
    assert exclusive.status == 412
    assert "does not delay messages" in str(exclusive.reason)
    no_sub = api("POST", _cancel_path("c6", mid, deliver_at, subs="nope"))
    assert (no_sub.status, no_sub.reason) == (404, "Subscription not found")
    no_topic = api("POST", _cancel_path("nope", mid, deliver_at))
    assert (no_topic.status, no_topic.reason) == (404, "Topic not found")
    np = api("POST", "/admin/v2/non-persistent/public/default/c6/cancelDelayedMessage"
             f"?ledgerId=1&entryId=1&deliverAt={deliver_at}")
    assert np.status == 405
    # without names, the Shared subscription accepts (the Exclusive one is not a target)
    assert api("POST", _cancel_path("c6", mid, deliver_at)).status == 204


def test_cancel_of_a_message_already_due_is_refused(api: Api, client: Any) -> None:
    assert api("PUT", f"{P}/c7/subscription/sub", {"ledgerId": -1, "entryId": -1}).status == 204
    ids, deliver_at = _schedule(client, "c7", 1, delay_ms=-1000)
    refused = api("POST", _cancel_path("c7", ids[0], deliver_at))
    assert refused.status == 412
    assert "too late to cancel" in str(refused.reason)
    assert _sub_stats(api, "c7", "sub")["msgBacklog"] == 1


def test_horae_admin_cancel_delayed_message(broker: Any, client: Any) -> None:
    consumer = client.subscribe(f"{T}/c8", "sub", consumer_type=pulsar.ConsumerType.Shared)
    # Two cancels run as subprocesses before the messages are due: on a loaded machine each
    # start takes seconds, so these messages are due later than the in-process tests'.
    ids, deliver_at = _schedule(client, "c8", 3, delay_ms=CLI_DELAY_MS)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli.admin", "--admin-url", broker.web_url, *args],
            cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)

    done = cli("topics", "cancel-delayed-message", "c8", "-l", str(ids[0].ledger_id()),
               "-e", str(ids[0].entry_id()), "-t", str(deliver_at), "-s", "sub")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    done = cli("topics", "cancel-delayed-message", f"{T}/c8", "--ledgerId",
               str(ids[2].ledger_id()), "--entryId", str(ids[2].entry_id()))
    assert done.returncode == 0, done.stderr
    refused = cli("topics", "cancel-delayed-message", "c8", "-l", str(ids[1].ledger_id()),
                  "-e", str(ids[1].entry_id()), "-t", str(deliver_at + 5))
    assert refused.returncode == 1
    assert "(HTTP 412)" in refused.stderr
    due_in_ms = max(deliver_at - int(time.time() * 1000), 0)
    kept = consumer.receive(due_in_ms + DELAY_MS + 1500)
    consumer.acknowledge(kept)
    assert kept.data() == b"m1"
    assert _drain(consumer, quiet_ms=1500) == []   # the cancelled ones were due with it
    assert http(broker.web_url, "GET", f"{P}/c8/stats").body["subscriptions"]["sub"][
        "msgBacklog"] == 0



def _cancel_metrics(web_url: str, topic: str) -> dict[tuple[str, str], float]:
    """{(series, subscription): value} of the PIP-423 cancel families for one topic."""
    with urllib.request.urlopen(web_url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name.startswith("pulsar_subscription_delayed_cancels_")
                    and not sample.name.endswith("_created")
                    and sample.labels.get("topic") == topic):
                out[(sample.name, sample.labels["subscription"])] = float(sample.value)
    return out


def test_cancels_applied_refused_and_pending_per_subscription_in_metrics(
        api: Api, client: Any, broker: Any) -> None:
    tracked = client.subscribe(f"{T}/cm", "tracked", consumer_type=pulsar.ConsumerType.Shared)
    assert api("PUT", f"{P}/cm/subscription/idle", {"ledgerId": -1, "entryId": -1}).status == 204
    ids, deliver_at = _schedule(client, "cm", 2, delay_ms=60_000)
    wait_until(lambda: _sub_stats(api, "cm", "tracked")["msgDelayed"] == 2, timeout_s=10,
               message="both messages tracked")
    assert api("POST", _cancel_path("cm", ids[0], deliver_at)).status == 204
    past, past_at = _schedule(client, "cm", 1, delay_ms=-1000)
    assert api("POST", _cancel_path("cm", past[0], past_at, subs="idle")).status == 412
    assert _cancel_metrics(broker.web_url, f"{T}/cm") == {
        ("pulsar_subscription_delayed_cancels_applied_total", "tracked"): 1.0,
        ("pulsar_subscription_delayed_cancels_refused_total", "tracked"): 0.0,
        ("pulsar_subscription_delayed_cancels_pending", "tracked"): 0.0,
        ("pulsar_subscription_delayed_cancels_applied_total", "idle"): 0.0,
        ("pulsar_subscription_delayed_cancels_refused_total", "idle"): 1.0,
        ("pulsar_subscription_delayed_cancels_pending", "idle"): 1.0,
    }
    tracked.close()
