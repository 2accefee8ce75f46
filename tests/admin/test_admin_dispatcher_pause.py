"""``dispatcherPauseOnAckStatePersistent`` at namespace and topic level: Pulsar's routes and
answers, the ``horae-admin`` commands, and the pause itself: with the policy on, a
subscription whose cursor holds more acknowledged ranges than
``managedLedgerMaxUnackedRangesToPersist`` gets no new entries until acknowledgements close
the gaps."""

from __future__ import annotations

import json
from typing import Any

import pulsar
import pytest
from rest import subscription_metric
from waiting import wait_until

from cli.admin.main import main
from tests.conftest import make_client

from .conftest import http

NS = "/admin/v2/namespaces/public/default/dispatcherPauseOnAckStatePersistent"
T = "/admin/v2/persistent/public/default"
LIMIT = 5


def _backlog(web_url: str, stats: str) -> Any:
    return http(web_url, "GET", stats).body["subscriptions"]["s"]["msgBacklog"]


def _paused_metric(web_url: str, topic: str) -> float | None:
    """``pulsar_subscription_paused_on_ack_state`` of subscription ``s`` of *topic*."""
    return subscription_metric(web_url, "pulsar_subscription_paused_on_ack_state", topic, "s")


def _receive_all(consumer: Any, ack: Any, acked: Any = None) -> dict[int, Any]:
    """Receive until nothing comes for 2 s, acknowledging the numbers *ack* picks; *acked*
    (given the count so far) waits until the broker has them (the client groups its acks)."""
    got: dict[int, Any] = {}
    count = 0
    for _ in range(200):
        try:
            msg = consumer.receive(timeout_millis=2_000)
        except pulsar.Timeout:
            return got
        n = int(msg.data())
        assert n not in got, f"{n} delivered twice"
        got[n] = msg
        if ack(n):
            consumer.acknowledge(msg)
            count += 1
            if acked is not None:
                acked(count)
    raise AssertionError("more messages than were published")


@pytest.mark.parametrize("level", ["namespace", "topic"])
def test_dispatch_pauses_past_the_persistable_ranges_and_resumes(
        broker_factory: Any, level: str) -> None:
    broker = broker_factory(config_overrides={"managedLedgerMaxUnackedRangesToPersist": LIMIT})
    topic = f"persistent://public/default/pause-{level}"
    path = NS if level == "namespace" else f"{T}/pause-{level}/dispatcherPauseOnAckStatePersistent"
    client = make_client(broker.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                    receiver_queue_size=4)
        assert http(broker.web_url, "POST", path).status == 204
        assert http(broker.web_url, "GET", path).body is True
        stats = f"{T}/pause-{level}/stats"
        for i in range(100):
            producer.send(str(i).encode())
        # acknowledging every other message leaves one range per acknowledgement
        first = _receive_all(consumer, lambda n: n % 2 == 1, lambda count: wait_until(
            lambda: _backlog(broker.web_url, stats) == 100 - count,
            message="the acknowledgement reached the broker"))
        assert len(first) < 40, f"dispatch did not pause: {len(first)} received"
        assert _backlog(broker.web_url, stats) > 60
        assert _paused_metric(broker.web_url, topic) == 1
        # acknowledging the held ones closes the gaps: dispatch resumes up to the end
        for n, msg in first.items():
            if n % 2 == 0:
                consumer.acknowledge(msg)
        rest = _receive_all(consumer, lambda n: True)
        assert sorted([*first, *rest]) == list(range(100))
        assert _paused_metric(broker.web_url, topic) == 0
    finally:
        client.close()


def _cli(capsys: pytest.CaptureFixture[str], broker: Any, *argv: str) -> Any:
    code = main(["--admin-url", broker.web_url, *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = captured.out.strip()
    return json.loads(out) if out else None


def test_routes_and_commands_answer_as_pulsar(broker_factory: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    broker = broker_factory(config_overrides={"dispatcherPauseOnAckStatePersistentEnabled": True})
    web = broker.web_url
    tp = f"{T}/routes/dispatcherPauseOnAckStatePersistent"
    assert http(web, "PUT", f"{T}/routes").status == 204
    assert http(web, "GET", NS).body is False            # unset: Pulsar's primitive false
    assert http(web, "GET", tp).body is False            # unset at topic level too
    assert http(web, "GET", tp + "?applied=true").body is True   # the broker's setting
    assert http(web, "POST", NS).status == 204
    assert http(web, "GET", NS).body is True
    assert http(web, "POST", tp).status == 204
    assert http(web, "GET", tp).body is True
    assert http(web, "DELETE", tp).status == 204
    assert http(web, "DELETE", NS).status == 204
    assert http(web, "GET", NS).body is False
    assert http(web, "GET", tp).body is False
    missing = http(web, "GET", f"{T}/nope/dispatcherPauseOnAckStatePersistent")
    assert (missing.status, missing.reason) == (
        404, "Topic persistent://public/default/nope not found")
    assert http(web, "PUT", f"{T}/parts/partitions", 2).status == 204
    part = http(web, "POST", f"{T}/parts-partition-0/dispatcherPauseOnAckStatePersistent")
    assert (part.status, part.reason) == (
        412, "Not allowed to set/get topic policy for a partition")

    ns, topic = "public/default", "persistent://public/default/routes"
    stem = "dispatcher-pause-on-ack-state-persistent"
    _cli(capsys, broker, "namespaces", f"set-{stem}", ns)
    assert _cli(capsys, broker, "namespaces", f"get-{stem}", ns) is True
    _cli(capsys, broker, "namespaces", f"remove-{stem}", ns)
    assert _cli(capsys, broker, "namespaces", f"get-{stem}", ns) is False
    for group in ("topics", "topic-policies"):
        _cli(capsys, broker, group, f"set-{stem}", topic)
        assert _cli(capsys, broker, group, f"get-{stem}", topic) is True
        _cli(capsys, broker, group, f"remove-{stem}", topic)
        assert _cli(capsys, broker, group, f"get-{stem}", topic, "--applied") is True


def test_the_broker_setting_is_dynamic(broker_factory: Any) -> None:
    broker = broker_factory()
    web = broker.web_url
    key = "dispatcherPauseOnAckStatePersistentEnabled"
    tp = f"{T}/dyn/dispatcherPauseOnAckStatePersistent?applied=true"
    assert http(web, "PUT", f"{T}/dyn").status == 204
    assert key in http(web, "GET", "/admin/v2/brokers/configuration").body
    assert http(web, "GET", tp).body is False
    assert http(web, "POST", f"/admin/v2/brokers/configuration/{key}/true").status == 200
    assert http(web, "GET", tp).body is True
