"""Admin topic operations as Pulsar answers them: unload, terminate, peek, examine, expire,
grow a partitioned topic (official client against an in-process broker)."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

from .conftest import Api, http

T = "/admin/v2/persistent/public/default"
FULL = "persistent://public/default"


def _send(client: Any, topic: str, n: int, **kw: Any) -> list[Any]:
    producer = client.create_producer(f"{FULL}/{topic}", batching_enabled=False)
    ids = [producer.send(b"m%d" % i, **kw) for i in range(n)]
    producer.close()
    return ids


def test_unload_reopens_the_topic_on_a_new_ledger(client: Any, api: Api) -> None:
    producer = client.create_producer(f"{FULL}/u", batching_enabled=False)
    first = producer.send(b"a")
    assert api("PUT", T + "/u/unload").status == 204
    second = producer.send(b"b")          # the client reconnected by itself
    assert second.ledger_id() > first.ledger_id()
    producer.close()
    assert api("PUT", T + "/missing/unload").status == 404


def test_terminate_answers_the_last_id_and_refuses_producers(client: Any, api: Api) -> None:
    consumer = client.subscribe(f"{FULL}/term", "s")
    ids = _send(client, "term", 3)
    reply = api("POST", T + "/term/terminate")
    assert reply.status == 200
    assert reply.body == {"ledgerId": ids[-1].ledger_id(), "entryId": ids[-1].entry_id(),
                          "partitionIndex": -1, "batchIndex": -1, "batchSize": 0}
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(f"{FULL}/term")
    for _ in range(3):      # what was sent before the termination is still delivered
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    consumer.close()
    # durable: still terminated after the topic is unloaded and loaded again
    assert api("PUT", T + "/term/unload").status == 204
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(f"{FULL}/term")
    again = api("POST", T + "/term/terminate")
    assert again.body == reply.body


def test_a_producer_open_at_termination_fails_its_next_send(client: Any, api: Api) -> None:
    producer = client.create_producer(f"{FULL}/live", batching_enabled=False,
                                      send_timeout_millis=10_000)
    producer.send(b"before")
    assert api("POST", T + "/live/terminate").status == 200
    with pytest.raises(pulsar.TopicTerminated):
        producer.send(b"after")
    assert api("GET", T + "/live/stats").body["msgInCounter"] == 1
    with pytest.raises(pulsar.AlreadyClosed):   # the client closed it on TopicTerminated
        producer.close()


def test_terminate_a_partitioned_topic(api: Api) -> None:
    assert api("PUT", T + "/tp/partitions", 2).status == 204
    refused = api("POST", T + "/tp/terminate")
    assert refused.status == 405
    assert refused.reason == "Termination of a partitioned topic is not allowed"
    each = api("POST", T + "/tp/terminate/partitions")
    assert each.status == 200
    assert sorted(each.body) == ["0", "1"]
    assert each.body["1"]["partitionIndex"] == 1


def test_terminated_topic_can_be_deleted_and_created_again(client: Any, api: Api) -> None:
    _send(client, "again", 1)
    assert api("POST", T + "/again/terminate").status == 200
    assert api("DELETE", T + "/again").status == 204
    assert len(_send(client, "again", 1)) == 1


def test_peek_returns_the_nth_unacked_message_with_headers(client: Any, broker: Any,
                                                            api: Api) -> None:
    client.subscribe(f"{FULL}/peek", "s").close()
    ids = _send(client, "peek", 3, properties={"k": "v"}, partition_key="key")
    reply = http(broker.web_url, "GET", T + "/peek/subscription/s/position/2")
    assert reply.status == 200
    assert reply.body == "m1"
    raw = _raw_get(broker.web_url, T + "/peek/subscription/s/position/2")
    assert raw["X-Pulsar-Message-ID"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert raw["X-Pulsar-PROPERTY-k"] == "v"
    assert raw["X-Pulsar-PROPERTY"] == '{"k": "v"}'
    assert raw["X-Pulsar-partition-key"] == "key"
    assert raw["X-Pulsar-sequence-id"] == "1"
    assert api("GET", T + "/peek/subscription/s/position/4").status == 404
    assert api("GET", T + "/peek/subscription/s/position/0").status == 412
    # as Pulsar: a subscription the topic does not have is created at the earliest message
    assert api("GET", T + "/peek/subscription/new/position/1").body == "m0"
    assert "new" in api("GET", T + "/peek/subscriptions").body


def test_peek_and_examine_refuse_a_partitioned_topic(api: Api) -> None:
    assert api("PUT", T + "/pp/partitions", 2).status == 204
    peek = api("GET", T + "/pp/subscription/s/position/1")
    assert peek.status == 405
    assert peek.reason == "Peek messages on a partitioned topic is not allowed"
    assert api("GET", T + "/pp/examinemessage").status == 405


def test_examine_from_either_end(client: Any, api: Api) -> None:
    _send(client, "ex", 3)
    assert api("GET", T + "/ex/examinemessage?initialPosition=earliest&messagePosition=1"
               ).body == "m0"
    assert api("GET", T + "/ex/examinemessage?initialPosition=latest&messagePosition=1"
               ).body == "m2"
    assert api("GET", T + "/ex/examinemessage?initialPosition=latest&messagePosition=4"
               ).status == 404


def test_get_message_by_id(client: Any, broker: Any, api: Api) -> None:
    ids = _send(client, "byid", 2, properties={"k": "v"})
    last = ids[-1]
    path = T + f"/byid/ledger/{last.ledger_id()}/entry/{last.entry_id()}"
    reply = api("GET", path)
    assert reply.status == 200
    assert reply.body == "m1"
    raw = _raw_get(broker.web_url, path)
    assert raw["X-Pulsar-Message-ID"] == f"{last.ledger_id()}:{last.entry_id()}"
    assert raw["X-Pulsar-PROPERTY-k"] == "v"
    missing = api("GET", T + f"/byid/ledger/{last.ledger_id()}/entry/{last.entry_id() + 1}")
    assert (missing.status, missing.reason) == (404, "Message not found")
    assert api("GET", T + f"/byid/ledger/{last.ledger_id() + 99}/entry/0").status == 404
    assert api("GET", T + "/byid/ledger/x/entry/0").status == 400
    assert api("GET", T + "/nope/ledger/1/entry/0").status == 404


def test_expire_messages_acknowledges_what_is_older(client: Any, api: Api) -> None:
    client.subscribe(f"{FULL}/exp", "a").close()
    client.subscribe(f"{FULL}/exp", "b").close()
    ids = _send(client, "exp", 4)
    # nothing is older than an hour: nothing expires
    assert api("POST", T + "/exp/subscription/a/expireMessages/3600").status == 204
    assert api("GET", T + "/exp/stats").body["subscriptions"]["a"]["msgBacklog"] == 4
    # 0 seconds expires nothing, as in Pulsar; a negative time expires everything
    assert api("POST", T + "/exp/subscription/a/expireMessages/0").status == 204
    assert api("POST", T + "/exp/all_subscription/expireMessages/0").status == 204
    assert api("GET", T + "/exp/stats").body["subscriptions"]["a"]["msgBacklog"] == 4
    assert api("POST", T + "/exp/subscription/a/expireMessages/-1").status == 204
    stats = api("GET", T + "/exp/stats").body["subscriptions"]
    assert stats["a"]["msgBacklog"] == 0
    assert stats["a"]["totalMsgExpired"] == 4
    assert stats["a"]["lastExpireTimestamp"] > 0
    assert stats["b"]["msgBacklog"] == 4          # other subscriptions keep theirs
    body = {"ledgerId": ids[1].ledger_id(), "entryId": ids[1].entry_id()}
    assert api("POST", T + "/exp/subscription/b/expireMessages", body).status == 204
    assert api("GET", T + "/exp/stats").body["subscriptions"]["b"]["msgBacklog"] == 2
    assert api("POST", T + "/exp/all_subscription/expireMessages/-1").status == 204
    assert api("GET", T + "/exp/stats").body["subscriptions"]["b"]["msgBacklog"] == 0


def test_grow_a_partitioned_topic_but_never_shrink_it(api: Api) -> None:
    assert api("PUT", T + "/grow/partitions", 2).status == 204
    assert api("POST", T + "/grow/partitions", 4).status == 204
    assert api("GET", T + "/grow/partitions").body == {"partitions": 4, "deleted": False}
    shrink = api("POST", T + "/grow/partitions", 3)
    assert shrink.status == 422
    assert shrink.reason == "Desired partitions 3 can't be less than the current partitions 4."
    assert api("POST", T + "/none/partitions", 3).status == 404
    assert api("POST", T + "/grow/partitions", 0).status == 406


def _raw_get(base: str, path: str) -> dict[str, str]:
    import urllib.request
    with urllib.request.urlopen(base + path, timeout=10) as resp:
        return dict(resp.headers)


def test_stats_report_real_backlog_bytes_and_epoch(client: Any, api: Api) -> None:
    client.subscribe(f"{FULL}/st", "s").close()
    _send(client, "st", 4)
    stats = api("GET", T + "/st/stats").body
    sub = stats["subscriptions"]["s"]
    assert sub["msgBacklog"] == 4
    assert sub["backlogSize"] > 0
    assert sub["backlogSize"] == stats["backlogSize"]
    assert stats["waitingPublishers"] == 0
    for epoch in (0, 1):     # every exclusive grant is a new topic epoch
        producer = client.create_producer(f"{FULL}/st",
                                          access_mode=pulsar.ProducerAccessMode.Exclusive)
        assert api("GET", T + "/st/stats").body["topicEpoch"] == epoch
        producer.close()
    assert api("POST", T + "/st/subscription/s/expireMessages/-1").status == 204
    assert api("GET", T + "/st/stats").body["subscriptions"]["s"]["backlogSize"] == 0
