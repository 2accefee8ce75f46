"""The admin REST API against a running broker: paths, status codes and Pulsar's reasons."""

from __future__ import annotations

import time
from typing import Any

import pulsar
import pytest

from .conftest import Api

P = "/admin/v2/persistent/public/default"
T = "persistent://public/default"


def _produce(client: Any, topic: str, n: int) -> list[Any]:
    producer = client.create_producer(f"{T}/{topic}", batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def _backlog(api: Api, topic: str, sub: str) -> int:
    reply = api("GET", f"{P}/{topic}/stats")
    assert reply.status == 200, reply
    return int(reply.body["subscriptions"][sub]["msgBacklog"])


# --- tenants -------------------------------------------------------------------------------
def test_tenants_create_get_list_delete(api: Api) -> None:
    assert "public" in api("GET", "/admin/v2/tenants").body
    created = api("PUT", "/admin/v2/tenants/acme", {"adminRoles": [], "allowedClusters": []})
    assert created.status == 204
    assert "acme" in api("GET", "/admin/v2/tenants").body
    info = api("GET", "/admin/v2/tenants/acme")
    assert info.status == 200
    assert "allowedClusters" in info.body
    assert api("DELETE", "/admin/v2/tenants/acme").status == 204
    assert "acme" not in api("GET", "/admin/v2/tenants").body


def test_tenant_errors_carry_pulsars_reasons(api: Api) -> None:
    missing = api("GET", "/admin/v2/tenants/nope")
    assert (missing.status, missing.reason) == (404, "Tenant does not exist")
    again = api("PUT", "/admin/v2/tenants/public")
    assert (again.status, again.reason) == (409, "Tenant already exists")
    busy = api("DELETE", "/admin/v2/tenants/public")
    assert (busy.status, busy.reason) == (409, "The tenant still has active namespaces")
    gone = api("DELETE", "/admin/v2/tenants/nope")
    assert (gone.status, gone.reason) == (404, "Tenant does not exist")
    bad = api("PUT", "/admin/v2/tenants/x", raw=b"[1,2")
    assert bad.status == 400
    elsewhere = api("PUT", "/admin/v2/tenants/x", {"allowedClusters": ["nowhere"]})
    assert (elsewhere.status, elsewhere.reason) == (412, "Clusters do not exist")
    moved = api("POST", "/admin/v2/tenants/public", {"allowedClusters": ["standalone", "b"]})
    assert (moved.status, moved.reason) == (412, "Clusters do not exist")
    assert "x" not in api("GET", "/admin/v2/tenants").body


def test_wrongly_typed_tenant_info_is_400_and_stores_nothing(api: Api) -> None:
    """A bare string for adminRoles would make each of its letters an admin role; Pulsar's JSON
    binding refuses it with 400, before any existence check."""
    for body in ({"adminRoles": "ops"}, {"allowedClusters": "standalone"},
                 {"adminRoles": [1]}):
        created = api("PUT", "/admin/v2/tenants/typed", body)
        assert created.status == 400, (body, created)
        assert "must be an array of strings" in created.reason
        updated = api("POST", "/admin/v2/tenants/public", body)
        assert updated.status == 400, (body, updated)
        again = api("PUT", "/admin/v2/tenants/public", body)
        assert again.status == 400  # the body is read before the tenant is looked up
    assert "typed" not in api("GET", "/admin/v2/tenants").body
    assert api("GET", "/admin/v2/tenants/public").body["adminRoles"] != "ops"


# --- namespaces ----------------------------------------------------------------------------
def test_namespaces_create_list_delete(api: Api) -> None:
    assert api("PUT", "/admin/v2/namespaces/public/ns1").status == 204
    assert "public/ns1" in api("GET", "/admin/v2/namespaces/public").body
    assert api("DELETE", "/admin/v2/namespaces/public/ns1").status == 204
    assert "public/ns1" not in api("GET", "/admin/v2/namespaces/public").body


def test_namespace_errors_carry_pulsars_reasons(api: Api) -> None:
    again = api("PUT", "/admin/v2/namespaces/public/default")
    assert (again.status, again.reason) == (409, "Namespace already exists")
    no_tenant = api("PUT", "/admin/v2/namespaces/nope/ns")
    assert (no_tenant.status, no_tenant.reason) == (404, "Tenant does not exist")
    listed = api("GET", "/admin/v2/namespaces/nope")
    assert (listed.status, listed.reason) == (404, "Tenant does not exist")
    missing = api("DELETE", "/admin/v2/namespaces/public/nope")
    assert (missing.status, missing.reason) == (404, "Namespace does not exist")
    assert api("PUT", f"{P}/keep").status == 204
    busy = api("DELETE", "/admin/v2/namespaces/public/default")
    assert (busy.status, busy.reason) == (409, "Cannot delete non empty namespace")


# --- topics --------------------------------------------------------------------------------
def test_topic_create_list_delete(api: Api) -> None:
    assert api("PUT", f"{P}/t1").status == 204
    assert f"{T}/t1" in api("GET", P).body
    again = api("PUT", f"{P}/t1")
    assert (again.status, again.reason) == (409, "This topic already exists")
    assert api("GET", f"{P}/t1/partitions").body == {"partitions": 0, "deleted": False}
    assert api("DELETE", f"{P}/t1").status == 204
    assert f"{T}/t1" not in api("GET", P).body
    gone = api("DELETE", f"{P}/t1")
    assert (gone.status, gone.reason) == (404, "Topic not found")


def test_topic_in_a_missing_namespace_is_404(api: Api) -> None:
    reply = api("PUT", "/admin/v2/persistent/public/nope/t")
    assert (reply.status, reply.reason) == (404, "Namespace does not exist")
    listed = api("GET", "/admin/v2/persistent/public/nope")
    assert (listed.status, listed.reason) == (404, "Namespace does not exist")


def test_partitioned_topic_lifecycle(api: Api) -> None:
    assert api("PUT", f"{P}/pt/partitions", 3).status == 204
    assert api("GET", f"{P}/pt/partitions").body == {"partitions": 3, "deleted": False}
    assert api("GET", f"{P}/partitioned").body == [f"{T}/pt"]
    listed = api("GET", P).body
    assert [f"{T}/pt-partition-{i}" for i in range(3)] == [n for n in listed if "pt-" in n]
    again = api("PUT", f"{P}/pt/partitions", 2)
    assert (again.status, again.reason) == (409, "Partitioned topic already exists")
    clash = api("PUT", f"{P}/pt")
    assert (clash.status, clash.reason) == (409, "This topic already exists")
    assert api("DELETE", f"{P}/pt/partitions").status == 204
    assert api("GET", f"{P}/partitioned").body == []
    gone = api("DELETE", f"{P}/pt/partitions")
    assert (gone.status, gone.reason) == (404, "Partitioned topic does not exist")


def test_partitioned_create_validates_its_body(api: Api) -> None:
    zero = api("PUT", f"{P}/z/partitions", 0)
    assert (zero.status, zero.reason) == (406, "Number of partitions should be more than 0")
    bad = api("PUT", f"{P}/z/partitions", {"n": 2})
    assert bad.status == 400
    assert "partitions" in bad.reason
    assert api("PUT", f"{P}/plain").status == 204
    clash = api("PUT", f"{P}/plain/partitions", 2)
    assert (clash.status, clash.reason) == (409, "This topic already exists")


def test_partitions_beyond_the_limit_are_refused_as_pulsar_refuses_them(
        api: Api, client: Any) -> None:
    """``maxNumPartitionsPerPartitionedTopic`` (Horae's default 10,000; dynamic; 0 = none)
    bounds a create, a grow and a lookup's auto-creation from a namespace's override."""
    over = api("PUT", f"{P}/huge/partitions", 10_001)
    assert (over.status, over.reason) == over_reason(10_000)
    assert api("PUT", f"{P}/grown/partitions", 3).status == 204
    grow = api("POST", f"{P}/grown/partitions", 10_001)
    assert (grow.status, grow.reason) == over_reason(10_000)
    key = "/admin/v2/brokers/configuration/maxNumPartitionsPerPartitionedTopic"
    assert api("POST", f"{key}/4").status == 200
    assert (api("POST", f"{P}/grown/partitions", 5).status,
            api("PUT", f"{P}/small/partitions", 5).status) == (406, 406)
    assert api("PUT", f"{P}/small/partitions", 4).status == 204
    # a namespace's override asking for more: the client's lookup is refused (NotAllowed)
    ns = "/admin/v2/namespaces/public/default/autoTopicCreation"
    assert api("POST", ns, {"allowAutoTopicCreation": True, "topicType": "partitioned",
                            "defaultNumPartitions": 8}).status == 204
    with pytest.raises(Exception, match="NotAllowed"):
        client.get_topic_partitions(f"{T}/auto-over-the-limit")
    assert api("GET", f"{P}/auto-over-the-limit/partitions").body["partitions"] == 0
    assert api("POST", f"{key}/0").status == 200  # no limit
    assert api("PUT", f"{P}/unbounded/partitions", 20_000).status == 204
    assert api("DELETE", ns).status == 204


def over_reason(limit: int) -> tuple[int, str]:
    return 406, f"Number of partitions should be less than or equal to {limit}"


def test_stats_and_internal_stats(api: Api, client: Any) -> None:
    _produce(client, "st", 4)
    stats = api("GET", f"{P}/st/stats")
    assert stats.status == 200
    assert stats.body["msgInCounter"] == 4
    internal = api("GET", f"{P}/st/internalStats")
    assert internal.status == 200
    assert internal.body["numberOfEntries"] == 4
    missing = api("GET", f"{P}/nope/stats")
    assert (missing.status, missing.reason) == (404, "Topic not found")
    no_namespace = api("GET", "/admin/v2/persistent/public/nope/st/stats")
    assert (no_namespace.status, no_namespace.reason) == (404, "Topic not found")
    missing_internal = api("GET", f"{P}/nope/internalStats")
    assert (missing_internal.status, missing_internal.reason) == (404, "Topic not found")


def test_internal_stats_cursor_properties_are_longs_as_pulsars(api: Api, client: Any) -> None:
    # Pulsar's CursorStats.properties is a Map<String, Long>: the Java admin client fails to
    # read the whole document when one value is text (a subscription's kept type, the
    # deduplication cursor's id ranges).
    consumer = client.subscribe(f"{T}/props", "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(f"{T}/props", producer_name="pp", batching_enabled=False)
    for i in range(3):
        producer.send(b"m%d" % i)
    api("PUT", f"{P}/props/unload")             # writes the dedup snapshot, as the 1 s tick does
    cursors = api("GET", f"{P}/props/internalStats").body["cursors"]
    producer.close()
    consumer.close()
    for name, cursor in cursors.items():
        assert all(type(v) is int for v in cursor["properties"].values()), (name, cursor)
    assert cursors["pulsar.dedup"]["properties"] == {"pp": 2}   # the highest sequence id stored
    assert cursors["ex"]["properties"] == {}


def test_partitioned_stats_fan_out_and_sum(api: Api, client: Any) -> None:
    assert api("PUT", f"{P}/ps/partitions", 2).status == 204
    producer = client.create_producer(
        f"{T}/ps", batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    for i in range(6):
        producer.send(f"m{i}".encode())
    producer.close()
    stats = api("GET", f"{P}/ps/stats").body
    assert stats["msgInCounter"] == 6
    assert stats["metadata"] == {"partitions": 2, "deleted": False}
    assert sorted(stats["partitions"]) == [f"{T}/ps-partition-0", f"{T}/ps-partition-1"]
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 6
    compact = api("GET", f"{P}/ps/partitioned-stats?perPartition=false").body
    assert compact["partitions"] == {}
    internal = api("GET", f"{P}/ps/internalStats").body
    assert internal["metadata"] == {"partitions": 2, "deleted": False}
    not_partitioned = api("GET", f"{P}/nope/partitioned-stats")
    assert not_partitioned.status == 404


def test_stats_can_exclude_publishers_and_consumers(api: Api, client: Any) -> None:
    # Pulsar's GetStatsOptions (pulsar-admin topics stats --exclude-publishers ...)
    assert api("PUT", f"{P}/ex/partitions", 2).status == 204
    consumer = client.subscribe(f"{T}/ex", "sub")
    producer = client.create_producer(f"{T}/ex")
    full = api("GET", f"{P}/ex/partitioned-stats").body
    assert len(full["publishers"]) == 2
    assert all(s["consumers"] for p in full["partitions"].values()
               for s in p["subscriptions"].values())
    bare = api("GET", f"{P}/ex/partitioned-stats?excludePublishers=true&excludeConsumers=true").body
    assert bare["publishers"] == []
    for part in bare["partitions"].values():
        assert part["publishers"] == []
        assert [s["consumers"] for s in part["subscriptions"].values()] == [[]]
    one = api("GET", f"{P}/ex-partition-0/stats?excludeConsumers=true").body
    assert len(one["publishers"]) == 1 and one["subscriptions"]["sub"]["consumers"] == []
    # maps Pulsar always reports, if empty (a client decoding into maps tells {} from absent)
    assert one["subscriptions"]["sub"]["consumersAfterMarkDeletePosition"] == {}
    assert one["subscriptions"]["sub"]["subscriptionProperties"] == {}
    producer.close()
    consumer.close()


# --- subscriptions -------------------------------------------------------------------------
def test_subscription_create_list_delete(api: Api) -> None:
    assert api("PUT", f"{P}/s1").status == 204
    assert api("PUT", f"{P}/s1/subscription/sub").status == 204
    assert api("GET", f"{P}/s1/subscriptions").body == ["sub"]
    again = api("PUT", f"{P}/s1/subscription/sub")
    assert (again.status, again.reason) == (409, "Subscription already exists for topic")
    assert api("DELETE", f"{P}/s1/subscription/sub").status == 204
    assert api("GET", f"{P}/s1/subscriptions").body == []
    gone = api("DELETE", f"{P}/s1/subscription/sub")
    assert (gone.status, gone.reason) == (404, "Subscription not found")
    no_topic = api("GET", f"{P}/nope/subscriptions")
    assert (no_topic.status, no_topic.reason) == (404, "Topic not found")


def test_subscription_created_at_earliest_sees_the_backlog(api: Api, client: Any) -> None:
    _produce(client, "s2", 5)
    assert api("PUT", f"{P}/s2/subscription/latest").status == 204
    assert api("PUT", f"{P}/s2/subscription/early", {"ledgerId": -1, "entryId": -1}).status == 204
    assert _backlog(api, "s2", "latest") == 0
    assert _backlog(api, "s2", "early") == 5


def test_subscription_on_partitioned_topic_is_created_on_every_partition(api: Api) -> None:
    assert api("PUT", f"{P}/ps2/partitions", 2).status == 204
    assert api("PUT", f"{P}/ps2/subscription/sub").status == 204
    assert api("GET", f"{P}/ps2/subscriptions").body == ["sub"]
    for i in range(2):
        assert api("GET", f"{P}/ps2-partition-{i}/subscriptions").body == ["sub"]
    assert api("POST", f"{P}/ps2/subscription/sub/skip_all").status == 204
    assert api("POST", f"{P}/ps2/subscription/sub/resetcursor/0").status == 204
    skip = api("POST", f"{P}/ps2/subscription/sub/skip/1")
    assert skip.status == 405
    assert api("DELETE", f"{P}/ps2/subscription/sub").status == 204
    assert api("GET", f"{P}/ps2/subscriptions").body == []


def test_skip_skip_all_and_reset_cursor(api: Api, client: Any) -> None:
    ids = _produce(client, "s3", 6)
    assert api("PUT", f"{P}/s3/subscription/sub", {"ledgerId": -1, "entryId": -1}).status == 204
    assert api("POST", f"{P}/s3/subscription/sub/skip/2").status == 204
    assert _backlog(api, "s3", "sub") == 4
    assert api("POST", f"{P}/s3/subscription/sub/skip_all").status == 204
    assert _backlog(api, "s3", "sub") == 0
    assert api("POST", f"{P}/s3/subscription/sub/resetcursor/0").status == 204
    assert _backlog(api, "s3", "sub") == 6
    future_ms = int(time.time() * 1000) + 60_000
    assert api("POST", f"{P}/s3/subscription/sub/resetcursor/{future_ms}").status == 204
    assert _backlog(api, "s3", "sub") == 0
    target = {"ledgerId": ids[3].ledger_id(), "entryId": ids[3].entry_id()}
    assert api("POST", f"{P}/s3/subscription/sub/resetcursor", target).status == 204
    assert _backlog(api, "s3", "sub") == 3
    excluded = {**target, "isExcluded": True}
    assert api("POST", f"{P}/s3/subscription/sub/resetcursor", excluded).status == 204
    assert _backlog(api, "s3", "sub") == 2


def test_reset_cursor_to_a_message_id_redelivers_from_it(api: Api, client: Any) -> None:
    ids = _produce(client, "s4", 4)
    consumer = client.subscribe(f"{T}/s4", "sub", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(4):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    target = {"ledgerId": ids[2].ledger_id(), "entryId": ids[2].entry_id()}
    assert api("POST", f"{P}/s4/subscription/sub/resetcursor", target).status == 204
    assert consumer.receive(timeout_millis=5000).data() == b"m2"
    consumer.close()


def test_subscription_operations_on_missing_things_are_404(api: Api) -> None:
    assert api("PUT", f"{P}/s5").status == 204
    for method, suffix, body in (("POST", "skip/1", None), ("POST", "skip_all", None),
                                 ("POST", "resetcursor/0", None),
                                 ("POST", "resetcursor", {"ledgerId": 0, "entryId": 0}),
                                 ("POST", "skipByMessageIds", {"messageIds": []})):
        reply = api(method, f"{P}/s5/subscription/none/{suffix}", body)
        assert (reply.status, reply.reason) == (404, "Subscription not found"), suffix
        no_topic = api(method, f"{P}/nope/subscription/none/{suffix}", body)
        assert (no_topic.status, no_topic.reason) == (404, "Topic not found"), suffix


def test_bad_bodies_are_400(api: Api) -> None:
    assert api("PUT", f"{P}/s6/subscription/sub").status == 204
    assert api("POST", f"{P}/s6/subscription/sub/resetcursor", {"foo": 1}).status == 400
    assert api("POST", f"{P}/s6/subscription/sub/skip/abc").status == 400
    bad = api("POST", f"{P}/s6/subscription/sub/skipByMessageIds", raw=b"not json")
    assert bad.status == 400
    empty = api("POST", f"{P}/s6/subscription/sub/skipByMessageIds")
    assert (empty.status, empty.reason) == (400, "Invalid skipByMessageIds payload: empty body")


def test_busy_subscription_and_topic_need_force(api: Api, client: Any) -> None:
    consumer = client.subscribe(f"{T}/busy", "sub")
    busy = api("DELETE", f"{P}/busy/subscription/sub")
    assert (busy.status, busy.reason) == (412, "Subscription has active connected consumers")
    producer = client.create_producer(f"{T}/busy")
    busy_topic = api("DELETE", f"{P}/busy")
    assert (busy_topic.status, busy_topic.reason) == (
        412, "Topic has active producers/subscriptions")
    assert api("DELETE", f"{P}/busy/subscription/sub?force=true").status == 204
    assert api("GET", f"{P}/busy/subscriptions").body == []
    assert api("DELETE", f"{P}/busy?force=true").status == 204
    producer.close()
    consumer.close()


# --- skip by message ids (PIP-423) -----------------------------------------------------------
def test_skip_by_message_ids_on_shared_skips_exactly_those_messages(api: Api, client: Any) -> None:
    consumer = client.subscribe(f"{T}/sk", "sub", consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=1)
    ids = _produce(client, "sk", 6)
    bodies = [
        {"type": "messageId", "messageIds": [
            {"ledgerId": ids[1].ledger_id(), "entryId": ids[1].entry_id()}]},
        [_serialize(ids[3])],
        {"type": "byteArray", "messageIds": [_serialize(ids[4])]},
    ]
    for body in bodies:
        reply = api("POST", f"{P}/sk/subscription/sub/skipByMessageIds", body)
        assert reply.status == 204, reply
    got = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            break
        got.append(msg.data())
        consumer.acknowledge(msg)
    consumer.close()
    # m0 may already sit in the client's receiver queue; the skipped ones never arrive.
    assert sorted(got) == [b"m0", b"m2", b"m5"]
    assert _backlog(api, "sk", "sub") == 0


def test_skip_by_message_ids_on_exclusive_is_405(api: Api, client: Any) -> None:
    consumer = client.subscribe(f"{T}/ex", "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    ids = _produce(client, "ex", 2)
    body = {"type": "messageId", "messageIds": [
        {"ledgerId": ids[0].ledger_id(), "entryId": ids[0].entry_id()}]}
    reply = api("POST", f"{P}/ex/subscription/sub/skipByMessageIds", body)
    assert reply.status == 405
    assert "Exclusive" in reply.reason
    consumer.close()


def test_skip_by_message_ids_on_failover_is_405(api: Api, client: Any) -> None:
    consumer = client.subscribe(f"{T}/fo", "sub", consumer_type=pulsar.ConsumerType.Failover)
    reply = api("POST", f"{P}/fo/subscription/sub/skipByMessageIds",
                {"type": "messageId", "messageIds": [{"ledgerId": 0, "entryId": 0}]})
    assert reply.status == 405
    assert "Failover" in reply.reason
    consumer.close()


def test_skip_by_message_ids_fans_out_over_partitions(api: Api, client: Any) -> None:
    assert api("PUT", f"{P}/skp/partitions", 2).status == 204
    assert api("PUT", f"{P}/skp/subscription/sub", {"ledgerId": -1, "entryId": -1}).status == 204
    producer = client.create_producer(
        f"{T}/skp", batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    ids = [producer.send(f"m{i}".encode()) for i in range(4)]
    producer.close()
    body = [_serialize(ids[0]), _serialize(ids[1])]
    assert api("POST", f"{P}/skp/subscription/sub/skipByMessageIds", body).status == 204
    stats = api("GET", f"{P}/skp/stats").body
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 2


def _serialize(message_id: Any) -> str:
    import base64
    return base64.b64encode(message_id.serialize()).decode()


# --- lookup, health, unknown paths ---------------------------------------------------------
def test_lookup_answers_this_broker(api: Api, broker: Any) -> None:
    reply = api("GET", "/lookup/v2/topic/persistent/public/default/anything")
    assert reply.status == 200
    assert reply.body["brokerUrl"] == broker.service_url
    assert reply.body["httpUrl"] == broker.web_url
    missing = api("GET", "/lookup/v2/topic/persistent/public/nope/t")
    assert (missing.status, missing.reason) == (404, "Namespace does not exist")


def test_health_is_ok(api: Api) -> None:
    reply = api("GET", "/admin/v2/brokers/health")
    assert (reply.status, reply.body) == (200, "ok")


def test_unknown_paths_get_a_json_reason(api: Api) -> None:
    reply = api("GET", "/admin/v2/nothing/here")
    assert reply.status == 404
    assert reply.reason


def test_subscription_permissions_are_granted_listed_and_revoked(api: Api) -> None:
    base = "/admin/v2/namespaces/public/default/permissions"
    assert api("GET", base + "/subscription").body == {}
    assert api("POST", base + "/subscription/audited", ["alice", "bob"]).status == 204
    assert api("GET", base + "/subscription").body == {"audited": ["alice", "bob"]}
    assert api("DELETE", base + "/audited/alice").status == 204
    assert api("GET", base + "/subscription").body == {"audited": ["bob"]}
    assert api("DELETE", base + "/audited/bob").status == 204
    assert api("GET", base + "/subscription").body == {}
    assert api("POST", base + "/subscription/audited", "alice").status == 400
    assert api("GET", "/admin/v2/namespaces/public/missing/permissions/subscription").status == 404
    assert api("GET", base).status == 200  # the role grants are still served beside them
