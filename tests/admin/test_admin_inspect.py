"""A topic's inspection and maintenance routes, and the namespace-wide operations, as Pulsar
answers them (official client against an in-process broker)."""

from __future__ import annotations

import time
from typing import Any

from tests.waiting import wait_until

from .conftest import Api

T = "/admin/v2/persistent/public/default"
NP = "/admin/v2/non-persistent/public/default"
NS = "/admin/v2/namespaces/public/default"
FULL = "persistent://public/default"


def _send(client: Any, topic: str, n: int, **kw: Any) -> list[Any]:
    producer = client.create_producer(f"{FULL}/{topic}", batching_enabled=False)
    ids = [producer.send(b"m%d" % i, **kw) for i in range(n)]
    producer.close()
    return ids


def _id(msg_id: Any, partition: int = -1) -> dict[str, int]:
    return {"ledgerId": msg_id.ledger_id(), "entryId": msg_id.entry_id(),
            "partitionIndex": partition, "batchIndex": -1, "batchSize": 0}


def test_message_id_by_timestamp_finds_the_first_message_at_or_after_it(
        client: Any, api: Api) -> None:
    before = int(time.time() * 1000) - 1
    first = _send(client, "byts", 1)
    reader = client.create_reader(f"{FULL}/byts", first[0])   # keeps the ledger readable
    cut = int(time.time() * 1000) + 2
    while int(time.time() * 1000) <= cut:    # the next publish time is past the cut
        time.sleep(0.002)
    later = _send(client, "byts", 2)
    assert api("GET", T + f"/byts/messageid/{before}").body == _id(first[0])
    assert api("GET", T + f"/byts/messageid/{cut}").body == _id(later[0])
    # every message older: Pulsar answers the position after the last one, not 404
    past = api("GET", T + f"/byts/messageid/{int(time.time() * 1000) + 60_000}")
    assert past.status == 200
    assert past.body == {**_id(later[-1]), "entryId": later[-1].entry_id() + 1}
    assert api("GET", T + "/byts/messageid/soon").status == 400
    assert api("GET", T + "/nothing-here/messageid/0").status == 404
    reader.close()


def test_message_id_by_timestamp_wants_a_partition(client: Any, api: Api) -> None:
    assert api("PUT", T + "/pts/partitions", 2).status == 204
    reply = api("GET", T + "/pts/messageid/0")
    assert reply.status == 405
    assert reply.reason is not None and reply.reason.startswith(
        "Get message ID by timestamp on a partitioned topic is not allowed")
    producer = client.create_producer(f"{FULL}/pts-partition-1")
    sent = producer.send(b"x")
    producer.close()
    assert api("GET", T + "/pts-partition-1/messageid/0").body == _id(sent, 1)
    np = api("GET", NP + "/np/messageid/0")
    assert (np.status, np.reason) == (
        405, "Get message ID by timestamp on a non-persistent topic is not allowed")


def test_message_id_by_timestamp_of_an_empty_topic_is_its_first_position(api: Api) -> None:
    assert api("PUT", T + "/tsempty").status == 204
    last = api("GET", T + "/tsempty/lastMessageId").body
    found = api("GET", T + "/tsempty/messageid/0")
    assert found.status == 200
    assert found.body == {**last, "entryId": 0}


def test_last_message_id(client: Any, api: Api) -> None:
    assert api("PUT", T + "/last").status == 204
    empty = api("GET", T + "/last/lastMessageId")
    assert empty.status == 200 and empty.body["entryId"] == -1
    ids = _send(client, "last", 3)
    assert api("GET", T + "/last/lastMessageId").body == _id(ids[-1])
    np = api("GET", NP + "/last/lastMessageId")
    assert (np.status, np.reason) == (405, "GetLastMessageId on a non-persistent topic is "
                                           "not allowed")
    assert api("GET", T + "/absent/lastMessageId").status == 404


def test_internal_info_lists_ledgers_cursors_and_termination(client: Any, api: Api) -> None:
    consumer = client.subscribe(f"{FULL}/info", "s")
    ids = _send(client, "info", 3)
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    acked = {"ledgerId": ids[0].ledger_id(), "entryId": ids[0].entry_id()}
    info = wait_until(lambda: (doc := api("GET", T + "/info/internal-info").body)
                      ["cursors"]["s"]["markDelete"] == acked and doc)
    assert [led["ledgerId"] for led in info["ledgers"]] == [ids[0].ledger_id()]
    # as Pulsar's ManagedLedgerInfo: the open ledger has no entries/size yet, no
    # underReplicated key, a cursor without acknowledged ranges leaves them out
    assert set(info["ledgers"][0]) == {"ledgerId", "timestamp", "isOffloaded"}
    assert "individualDeletedMessages" not in info["cursors"]["s"]
    assert "terminatedPosition" not in info
    assert api("POST", T + "/info/terminate").status == 200
    info = api("GET", T + "/info/internal-info").body
    assert info["terminatedPosition"] == {"ledgerId": ids[-1].ledger_id(),
                                          "entryId": ids[-1].entry_id()}
    consumer.close()
    assert api("PUT", T + "/pinfo/partitions", 2).status == 204
    parts = api("GET", T + "/pinfo/internal-info").body["partitions"]
    assert sorted(parts) == [f"{FULL}/pinfo-partition-0", f"{FULL}/pinfo-partition-1"]


def test_backlog_size_and_analyze_backlog(client: Any, api: Api) -> None:
    consumer = client.subscribe(f"{FULL}/bl", "s")
    ids = _send(client, "bl", 4)
    whole = api("PUT", T + "/bl/backlogSize", {"ledgerId": ids[0].ledger_id(), "entryId": 0})
    half = api("PUT", T + "/bl/backlogSize", {"ledgerId": ids[0].ledger_id(), "entryId": 2})
    assert whole.status == 200 and whole.body > 0
    assert 0 < half.body < whole.body
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    result = wait_until(lambda: (doc := api("POST", T + "/bl/subscription/s/analyzeBacklog")
                                 .body)["entries"] == 3 and doc)
    assert (result["entries"], result["messages"], result["aborted"]) == (3, 3, False)
    assert result["firstMessageId"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert result["lastMessageId"] == f"{ids[3].ledger_id()}:{ids[3].entry_id()}"
    # from a given id, acknowledged (mark-deleted) entries count too, as Pulsar's copy of
    # the cursor moved there reads them
    whole = api("POST", T + "/bl/subscription/s/analyzeBacklog",
                {"ledgerId": ids[0].ledger_id(), "entryId": ids[0].entry_id()}).body
    assert (whole["entries"], whole["firstMessageId"]) == (
        4, f"{ids[0].ledger_id()}:{ids[0].entry_id()}")
    assert api("POST", T + "/bl/subscription/nope/analyzeBacklog").status == 404
    # Pulsar serves analyzeBacklog on POST only
    assert api("GET", T + "/bl/subscription/s/analyzeBacklog").status == 405
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    empty = wait_until(lambda: (doc := api("POST", T + "/bl/subscription/s/analyzeBacklog")
                                .body)["entries"] == 0 and doc)
    assert "firstMessageId" not in empty and "lastMessageId" not in empty
    consumer.close()


def test_truncate_clears_every_backlog_and_trim_keeps_unconsumed(client: Any, api: Api) -> None:
    consumer = client.subscribe(f"{FULL}/tr", "s")
    first = _send(client, "tr", 2)
    assert api("PUT", T + "/tr/unload").status == 204       # seal the first ledger
    _send(client, "tr", 1)
    trimmed = api("POST", T + "/tr/trim")                     # nothing consumed: all kept
    assert (trimmed.status, trimmed.body) == (200, None)     # Pulsar: 200, no body
    ledgers = [x["ledgerId"] for x in api("GET", T + "/tr/internal-info").body["ledgers"]]
    assert first[0].ledger_id() in ledgers
    assert api("DELETE", T + "/tr/truncate").status == 204
    stats = api("GET", T + "/tr/stats").body
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0
    ledgers = [x["ledgerId"] for x in api("GET", T + "/tr/internal-info").body["ledgers"]]
    assert first[0].ledger_id() not in ledgers
    consumer.close()
    np = api("DELETE", NP + "/tr/truncate")
    assert (np.status, np.reason) == (412, "Unsupported truncate")


def test_create_missed_partitions(api: Api) -> None:
    assert api("PUT", T + "/cmp/partitions", 3).status == 204
    assert api("POST", T + "/cmp/createMissedPartitions").status == 204
    listed = api("GET", T).body
    assert {f"{FULL}/cmp-partition-{i}" for i in range(3)} <= set(listed)
    # Pulsar 4.0 reads the metadata of a partitioned topic that exists: 404 for another one
    assert api("PUT", T + "/plain").status == 204
    plain = api("POST", T + "/plain/createMissedPartitions")
    assert (plain.status, plain.reason) == (404, f"Topic {FULL}/plain does not exist")
    missing = api("POST", T + "/nowhere/createMissedPartitions")
    assert (missing.status, missing.reason) == (404, f"Topic {FULL}/nowhere does not exist")


def test_namespace_clear_backlog_unsubscribe_and_unload(client: Any, api: Api) -> None:
    c1 = client.subscribe(f"{FULL}/na", "a")
    c2 = client.subscribe(f"{FULL}/nb", "b")
    _send(client, "na", 2)
    _send(client, "nb", 2)
    assert api("POST", NS + "/clearBacklog/a").status == 204
    assert api("GET", T + "/na/stats").body["subscriptions"]["a"]["msgBacklog"] == 0
    assert api("GET", T + "/nb/stats").body["subscriptions"]["b"]["msgBacklog"] == 2
    assert api("POST", NS + "/clearBacklog").status == 204
    assert api("GET", T + "/nb/stats").body["subscriptions"]["b"]["msgBacklog"] == 0
    busy = api("POST", NS + "/unsubscribe/b")
    assert (busy.status, busy.reason) == (412, "Subscription has active connected consumers")
    c2.close()
    assert api("POST", NS + "/unsubscribe/b").status == 204
    assert api("GET", T + "/nb/subscriptions").body == []
    producer = client.create_producer(f"{FULL}/na", batching_enabled=False)
    before = producer.send(b"x")
    assert api("PUT", NS + "/unload").status == 204
    assert producer.send(b"y").ledger_id() > before.ledger_id()   # reconnected, new ledger
    producer.close()
    c1.close()
    assert api("PUT", NS + "/0x00000000_0xffffffff/unload").status == 204
    assert api("PUT", NS + "/0x00000000_0xFFFFFFFF/unload").status == 204
    # Pulsar's refusals of a range that is not one of the namespace's bundles
    other = api("PUT", NS + "/0x00000000_0x7fffffff/unload")
    assert (other.status, other.reason) == (
        412, "Invalid upper boundary for bundle public/default/0x00000000_0x7fffffff. "
             "Expected upper boundary of public/default/0x00000000_0xffffffff")
    other = api("POST", NS + "/0x40000000_0xffffffff/clearBacklog")
    assert (other.status, other.reason) == (
        412, "Cannot find bundle public/default/0x40000000_0xffffffff in the bundles list")
    assert api("PUT", "/admin/v2/namespaces/public/nope/unload").status == 404


def test_peek_headers_survive_any_property(client: Any, broker: Any) -> None:
    """A property name that is no header token, or a value with a line break, must not break
    the answer: every property is in the X-Pulsar-PROPERTY JSON header."""
    import json
    import urllib.request

    props = {"details=man": "good at playing basketball", "KeY3": "line\r\nX-Injected: 1",
             "ok": "plain"}
    consumer = client.subscribe(f"{FULL}/hdr", "s")
    _send(client, "hdr", 1, properties=props)
    with urllib.request.urlopen(broker.web_url + T + "/hdr/subscription/s/position/1",
                                timeout=10) as resp:
        headers = dict(resp.headers.items())
        assert resp.read() == b"m0"
    assert json.loads(headers["X-Pulsar-PROPERTY"]) == props  # the exact name PulsarAdmin reads
    assert headers["X-Pulsar-PROPERTY-ok"] == "plain"
    assert headers["X-Pulsar-PROPERTY-KeY3"] == "line%0D%0AX-Injected: 1"
    assert "X-Injected" not in headers and not any("details" in k for k in headers)
    consumer.close()


def test_non_persistent_analyze_backlog_looks_up_the_subscription_first(
        client: Any, api: Api) -> None:
    """As Pulsar: 404 for a subscription the topic does not have, before refusing (405)."""
    consumer = client.subscribe("non-persistent://public/default/npab", "s")
    missing = api("POST", NP + "/npab/subscription/nope/analyzeBacklog")
    assert (missing.status, missing.reason) == (404, "Subscription not found")
    there = api("POST", NP + "/npab/subscription/s/analyzeBacklog")
    assert (there.status, there.reason) == (
        405, "Analyze backlog on a non-persistent topic is not allowed")
    consumer.close()
