"""Properties, persistence, offload, bookie affinity, replication clusters, deduplication
snapshot interval, replicator dispatch rate and the stats timestamps: Pulsar's paths, bodies,
status codes and reasons, kept across a restart; and the ``horae-admin`` commands for them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cli.admin.main import main

from .conftest import Api, http

NS = "/admin/v2/namespaces/public/default"
T = "/admin/v2/persistent/public/default"
PERSISTENCE = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
               "managedLedgerMaxMarkDeleteRate": 10.0}
OFFLOAD = {"managedLedgerOffloadDriver": "aws-s3", "managedLedgerOffloadMaxThreads": 4,
           "managedLedgerOffloadThresholdInBytes": 1073741824,
           "s3ManagedLedgerOffloadBucket": "test-bucket", "s3ManagedLedgerOffloadRegion": "r"}


def _ok(reply: Any, status: int = 204) -> Any:
    assert reply.status == status, (reply.status, reply.body)
    return reply.body


def test_namespace_properties(api: Api) -> None:
    assert _ok(api("GET", NS + "/properties"), 200) == {}
    _ok(api("PUT", NS + "/properties", {"a": "1", "b": 2}))
    _ok(api("PUT", NS + "/property/c/3"))
    assert _ok(api("GET", NS + "/properties"), 200) == {"a": "1", "b": "2", "c": "3"}
    assert _ok(api("GET", NS + "/property/c"), 200) == "3"
    assert _ok(api("GET", NS + "/property/zz"), 200) is None
    assert _ok(api("DELETE", NS + "/property/c"), 200) == "3"
    assert _ok(api("DELETE", NS + "/property/zz"), 200) is None
    _ok(api("DELETE", NS + "/properties"))
    assert _ok(api("GET", NS + "/properties"), 200) == {}
    assert api("PUT", NS + "/properties", [1]).status == 400
    reply = api("GET", "/admin/v2/namespaces/public/nope/properties")
    assert (reply.status, reply.reason) == (404, "Namespace does not exist")


def test_topic_properties_at_creation_update_and_remove(api: Api) -> None:
    _ok(api("PUT", T + "/np", {"k1": "v1"}))
    _ok(api("PUT", T + "/pp/partitions", {"partitions": 2, "properties": {"pk": "pv"}}))
    _ok(api("PUT", T + "/bare/partitions", 2))
    assert _ok(api("GET", T + "/np/properties"), 200) == {"k1": "v1"}
    assert _ok(api("GET", T + "/pp/properties"), 200) == {"pk": "pv"}
    assert _ok(api("GET", T + "/pp-partition-0/properties"), 200) == {}
    assert _ok(api("GET", T + "/bare/properties"), 200) is None
    _ok(api("PUT", T + "/np/properties", {"k2": "v2"}))
    _ok(api("PUT", T + "/np/properties", {}))          # nothing to change
    _ok(api("DELETE", T + "/np/properties?key=k1"))
    _ok(api("DELETE", T + "/np/properties?key=absent"))
    assert _ok(api("GET", T + "/np/properties"), 200) == {"k2": "v2"}
    _ok(api("PUT", T + "/pp/properties", {"pk2": "x"}))
    _ok(api("DELETE", T + "/pp/properties?key=pk"))
    assert _ok(api("GET", T + "/pp/properties"), 200) == {"pk2": "x"}
    reply = api("GET", T + "/nope/properties")
    assert (reply.status, reply.reason) == (
        404, "Topic persistent://public/default/nope not found")
    assert api("PUT", T + "/np/properties", [1]).status == 400
    # deleting the topic takes its properties: a new topic of that name has none
    _ok(api("DELETE", T + "/np"))
    _ok(api("PUT", T + "/np"))
    assert _ok(api("GET", T + "/np/properties"), 200) == {}


def test_persistence_at_both_levels_with_pulsars_checks(api: Api) -> None:
    _ok(api("PUT", T + "/pers/partitions", 2))
    for base in (NS, T + "/pers"):
        assert _ok(api("GET", base + "/persistence"), 200) is None
        _ok(api("POST", base + "/persistence", PERSISTENCE))
        assert _ok(api("GET", base + "/persistence"), 200) == PERSISTENCE
        for body, reason in (
                ({"bookkeeperEnsemble": 6, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1},
                 "Bookkeeper-Ensemble must be <= 5 and > 0."),
                ({"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 1},
                 "Bookkeeper Ensemble (2) >= WriteQuorum (3) >= AckQuorum (1)")):
            reply = api("POST", base + "/persistence", body)
            assert (reply.status, reply.reason) == (400, reason)
    # the topic's applied value is its own, else the namespace's, else one copy
    assert _ok(api("GET", T + "/pers/persistence?applied=true"), 200) == PERSISTENCE
    _ok(api("DELETE", T + "/pers/persistence"))
    _ok(api("POST", NS + "/persistence", {}))        # Pulsar's defaults: 2, 2, 2, 0.0
    assert _ok(api("GET", T + "/pers/persistence?applied=true"), 200) == {
        "bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 2,
        "managedLedgerMaxMarkDeleteRate": 0.0}
    _ok(api("DELETE", NS + "/persistence"))
    assert _ok(api("GET", T + "/pers/persistence?applied=true"), 200)["bookkeeperEnsemble"] == 1
    reply = api("GET", T + "/pers-partition-0/offloadPolicies")
    assert (reply.status, reply.reason) == (
        412, "Not allowed to set/get topic policy for a partition")


def test_offload_policies_and_namespace_thresholds(api: Api) -> None:
    assert _ok(api("GET", NS + "/offloadThreshold"), 200) == -1
    assert _ok(api("GET", NS + "/offloadThresholdInSeconds"), 200) == -1
    assert _ok(api("GET", NS + "/offloadDeletionLagMs"), 200) is None
    assert _ok(api("GET", NS + "/offloadPolicies"), 200) is None
    # a threshold creates the offload document with Pulsar's defaults
    _ok(api("PUT", NS + "/offloadThresholdInSeconds", -60), 200)
    _ok(api("PUT", NS + "/offloadThreshold", 100))
    _ok(api("PUT", NS + "/offloadDeletionLagMs", 1000))
    doc = _ok(api("GET", NS + "/offloadPolicies"), 200)
    assert doc["managedLedgerOffloadThresholdInSeconds"] == -60
    assert doc["managedLedgerOffloadThresholdInBytes"] == 100
    assert doc["managedLedgerOffloadDeletionLagInMillis"] == 1000
    assert doc["managedLedgerOffloadMaxThreads"] == 2 and doc["s3Driver"] is False
    _ok(api("DELETE", NS + "/offloadDeletionLagMs"))
    assert _ok(api("GET", NS + "/offloadDeletionLagMs"), 200) is None
    _ok(api("DELETE", NS + "/removeOffloadPolicies"))
    assert _ok(api("GET", NS + "/offloadThreshold"), 200) == -1
    _ok(api("PUT", T + "/off/partitions", 2))
    for base in (NS, T + "/off"):
        reply = api("POST", base + "/offloadPolicies", {"managedLedgerOffloadDriver": "aws-s3"})
        assert (reply.status, reply.reason) == (
            412, "The bucket must be specified for namespace offload.")
        reply = api("POST", base + "/offloadPolicies", {})
        assert reply.status == 412 and reply.reason.startswith("The driver is not supported")
        _ok(api("POST", base + "/offloadPolicies", OFFLOAD))
        doc = _ok(api("GET", base + "/offloadPolicies"), 200)
        assert {k: doc[k] for k in OFFLOAD} == OFFLOAD and doc["s3Driver"] is True
    _ok(api("DELETE", T + "/off/offloadPolicies"))
    assert _ok(api("GET", T + "/off/offloadPolicies"), 200) is None
    assert _ok(api("GET", T + "/off/offloadPolicies?applied=true"),
               200)["managedLedgerOffloadDriver"] == "aws-s3"


def test_bookie_affinity_replication_snapshot_interval_replicator_rate(api: Api) -> None:
    aff = NS + "/persistence/bookieAffinity"
    assert api("GET", aff).status == 204
    group = {"bookkeeperAffinityGroupPrimary": "p", "bookkeeperAffinityGroupSecondary": "s"}
    _ok(api("POST", aff, group))
    assert _ok(api("GET", aff), 200) == group
    _ok(api("DELETE", aff))
    assert api("GET", aff).status == 204

    _ok(api("PUT", T + "/rep/partitions", 4))
    rep = T + "/rep/replication"
    cluster = _ok(api("GET", "/admin/v2/clusters"), 200)[0]
    assert _ok(api("GET", rep), 200) is None
    assert _ok(api("GET", rep + "?applied=true"), 200) == [cluster]
    assert _ok(api("GET", NS + "/replication"), 200) == [cluster]
    for body, status, reason in (   # set-clusters: only the local cluster is known
            ([], 412, "ClusterIds should not be null or empty"),
            (["global"], 412, "Cannot specify global in the list of replication clusters"),
            ([cluster, "other"], 403, "Invalid cluster id: other")):
        reply = api("POST", NS + "/replication", body)
        assert (reply.status, reply.reason) == (status, reason)
    _ok(api("POST", NS + "/replication", [cluster]), 200)
    assert _ok(api("GET", NS + "/replication"), 200) == [cluster]
    reply = api("POST", "/admin/v2/namespaces/public/none/replication", [cluster])
    assert reply.status == 404
    for body, status, reason in (
            ([], 412, "ClusterIds should not be null or empty"),
            (["global"], 412, "Cannot specify global in the list of replication clusters"),
            ([cluster, "other"], 403, "Invalid cluster id: other")):
        reply = api("POST", NS + "/replication", body)
        assert (reply.status, reply.reason) == (status, reason)
    assert api("POST", NS + "/replication", [cluster]).status == 200   # Pulsar's, not 204
    assert _ok(api("GET", NS + "/replication"), 200) == [cluster]
    for body, status, reason in (
            ([], 412, "ClusterIds should not be null or empty"),
            (["other"], 412,
             "Can not remove local cluster from the local topic-level replication clusters policy"),
            ([cluster, "other"], 403, "Invalid cluster id: other"),
            (["global"], 412, "Cannot specify global in the list of replication clusters")):
        reply = api("POST", rep, body)
        assert (reply.status, reply.reason) == (status, reason)
    _ok(api("POST", rep, [cluster]))
    assert _ok(api("GET", rep), 200) == [cluster]
    _ok(api("DELETE", rep))
    assert _ok(api("GET", rep), 200) is None

    for base, refusal in ((NS, "interval must be greater than or equal to 0"),
                          (T + "/rep", "interval must be 0 or more")):
        path = base + "/deduplicationSnapshotInterval"
        assert _ok(api("GET", path), 200) is None
        reply = api("POST", path, -1)
        assert (reply.status, reply.reason) == (412, refusal)
        _ok(api("POST", path, 1000))
        assert _ok(api("GET", path), 200) == 1000
        if base == NS:   # Pulsar's namespace route has no DELETE: a POST without a body clears
            reply = api("DELETE", path)
            assert (reply.status, reply.reason) == (
                412, "Invalid bundle range: deduplicationSnapshotInterval")
            _ok(api("POST", path))
        else:
            _ok(api("DELETE", path))
        assert _ok(api("GET", path), 200) is None

    rate = {"dispatchThrottlingRateInMsg": 500, "dispatchThrottlingRateInByte": 524288,
            "relativeToPublishRate": True, "ratePeriodInSecond": 60}
    path = T + "/rep/replicatorDispatchRate"
    assert _ok(api("GET", path), 200) is None
    assert _ok(api("GET", path + "?applied=true"), 200) == {
        "dispatchThrottlingRateInMsg": 0, "dispatchThrottlingRateInByte": 0,
        "relativeToPublishRate": False, "ratePeriodInSecond": 1}
    _ok(api("POST", path, rate))
    assert _ok(api("GET", path), 200) == rate
    _ok(api("POST", path, {}))                     # a replicator's missing fields are 0
    assert _ok(api("GET", path), 200)["ratePeriodInSecond"] == 0
    _ok(api("DELETE", path))
    assert _ok(api("GET", path), 200) is None


def test_schema_validation_enforced_answers_as_pulsar(api: Api) -> None:
    _ok(api("PUT", T + "/sve"))
    for base in (NS, T + "/sve"):
        path = base + "/schemaValidationEnforced"
        assert _ok(api("GET", path), 200) is False
        assert _ok(api("GET", path + "?applied=true"), 200) is False
        _ok(api("POST", path, True))
        assert _ok(api("GET", path), 200) is True
        _ok(api("POST", path, False))
    assert api("DELETE", T + "/sve/schemaValidationEnforced").status == 405
    reply = api("DELETE", NS + "/schemaValidationEnforced")
    assert (reply.status, reply.reason) == (
        412, "Invalid bundle range: schemaValidationEnforced")


def test_applied_topic_policies_fall_back_to_namespace_then_broker(api: Api) -> None:
    _ok(api("PUT", T + "/applied"))
    topic = T + "/applied"
    assert _ok(api("GET", topic + "/maxProducers"), 200) is None
    assert _ok(api("GET", topic + "/maxProducers?applied=true"), 200) == 0
    assert _ok(api("GET", topic + "/deduplicationEnabled?applied=true"), 200) is True
    _ok(api("POST", NS + "/maxProducersPerTopic", 7))
    assert _ok(api("GET", topic + "/maxProducers?applied=true"), 200) == 7
    _ok(api("POST", topic + "/maxProducers", 3))
    assert _ok(api("GET", topic + "/maxProducers?applied=true"), 200) == 3
    _ok(api("DELETE", NS + "/maxProducersPerTopic"))
    assert _ok(api("GET", topic + "/subscribeRate?applied=true"), 200) == {
        "subscribeThrottlingRatePerConsumer": 0, "ratePeriodInSecond": 30}
    assert _ok(api("GET", topic + "/maxUnackedMessagesOnConsumer?applied=true"), 200) == 50000


def test_stored_policies_and_stats_times_survive_a_restart(
        broker_factory: Any, tmp_path: Any) -> None:
    import pulsar

    data = tmp_path / "restart"
    first = broker_factory(data_dir=data)
    url = first.web_url
    assert http(url, "PUT", T + "/kept", {"k": "v"}).status == 204
    assert http(url, "PUT", T + "/kept-p/partitions",
                {"partitions": 2, "properties": {"a": "b"}}).status == 204
    assert http(url, "POST", T + "/kept/persistence", PERSISTENCE).status == 204
    assert http(url, "POST", NS + "/offloadPolicies", OFFLOAD).status == 204
    assert http(url, "PUT", NS + "/properties", {"team": "x"}).status == 204
    stats = http(url, "GET", T + "/kept/stats").body
    created = stats["topicCreationTimeStamp"]
    assert created > 0 and stats["lastPublishTimeStamp"] == 0
    parted = http(url, "GET", T + "/kept-p/partitioned-stats").body
    assert parted["topicCreationTimeStamp"] > 0 and parted["lastPublishTimeStamp"] == 0
    client = pulsar.Client(first.service_url)
    try:
        producer = client.create_producer("persistent://public/default/kept")
        producer.send(b"m")
        producer.close()
        producer = client.create_producer("persistent://public/default/kept-p")
        producer.send(b"m")
        producer.close()
    finally:
        client.close()
    published = http(url, "GET", T + "/kept/stats").body["lastPublishTimeStamp"]
    assert published >= created
    assert http(url, "GET", T + "/kept-p/partitioned-stats").body["lastPublishTimeStamp"] > 0
    first.stop()

    second = broker_factory(data_dir=data)
    url = second.web_url
    assert http(url, "GET", T + "/kept/properties").body == {"k": "v"}
    assert http(url, "GET", T + "/kept-p/properties").body == {"a": "b"}
    assert http(url, "GET", T + "/kept/persistence").body == PERSISTENCE
    assert http(url, "GET", NS + "/offloadPolicies").body["s3ManagedLedgerOffloadBucket"] == \
        "test-bucket"
    assert http(url, "GET", NS + "/properties").body == {"team": "x"}
    stats = http(url, "GET", T + "/kept/stats").body
    assert (stats["topicCreationTimeStamp"], stats["lastPublishTimeStamp"]) == (created, published)


def _cli(capsys: pytest.CaptureFixture[str], broker: Any, *argv: str) -> Any:
    code = main(["--admin-url", broker.web_url, *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = captured.out.strip()
    try:
        return json.loads(out) if out else None
    except json.JSONDecodeError:
        return out


def test_horae_admin_commands(broker: Any, api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    ns, topic = "public/default", "persistent://public/default/cli-props"
    run = lambda *argv: _cli(capsys, broker, *argv)  # noqa: E731
    run("topics", "create", topic, "-m", "a=1", "--metadata", "b=2")
    assert run("topics", "get-properties", topic) == {"a": "1", "b": "2"}
    run("topics", "update-properties", topic, "-p", "c=3")
    run("topics", "remove-properties", topic, "-k", "a")
    assert run("topics", "get-properties", topic) == {"b": "2", "c": "3"}
    run("topics", "create-partitioned-topic", topic + "-p", "-p", "2", "-m", "x=y")
    assert api("GET", T + "/cli-props-p/properties").body == {"x": "y"}
    run("namespaces", "set-properties", ns, "-p", "a=1,b=2")
    run("namespaces", "set-property", ns, "-k", "c", "-v", "3")
    assert run("namespaces", "get-property", ns, "-k", "c") == 3
    run("namespaces", "remove-property", ns, "-k", "c")
    assert run("namespaces", "get-properties", ns) == {"a": "1", "b": "2"}
    run("namespaces", "clear-properties", ns)
    assert run("namespaces", "get-properties", ns) == {}
    for group, target in (("namespaces", ns), ("topics", topic), ("topic-policies", topic)):
        run(group, "set-persistence", target, "-e", "2", "-w", "2", "-a", "1", "-r", "5")
        assert run(group, "get-persistence", target)["bookkeeperAckQuorum"] == 1
        run(group, "remove-persistence", target)
        assert run(group, "get-persistence", target) is None
        run(group, "set-offload-policies", target, "-d", "aws-s3", "-b", "bk", "-r", "eu",
            "-oat", "10M", "-oae", "1h")
        doc = run(group, "get-offload-policies", target)
        assert (doc["s3ManagedLedgerOffloadBucket"], doc["managedLedgerOffloadThresholdInBytes"],
                doc["managedLedgerOffloadDeletionLagInMillis"]) == ("bk", 10485760, 3600000)
        run(group, "remove-offload-policies", target)
        assert run(group, "get-offload-policies", target) is None
        run(group, "set-deduplication-snapshot-interval", target, "-i", "30")
        assert run(group, "get-deduplication-snapshot-interval", target) == 30
        run(group, "remove-deduplication-snapshot-interval", target)
        run(group, "set-replicator-dispatch-rate", target, "-md", "5")
        assert run(group, "get-replicator-dispatch-rate", target)[
            "dispatchThrottlingRateInMsg"] == 5
        run(group, "remove-replicator-dispatch-rate", target)
    run("namespaces", "set-offload-threshold", ns, "-s", "1M")
    assert run("namespaces", "get-offload-threshold", ns) == 1048576
    run("namespaces", "set-offload-threshold", ns, "-t", "1h")
    assert api("GET", NS + "/offloadThresholdInSeconds").body == 3600
    run("namespaces", "set-offload-deletion-lag", ns, "-l", "2h")
    assert run("namespaces", "get-offload-deletion-lag", ns) == 7200000
    run("namespaces", "clear-offload-deletion-lag", ns)
    run("namespaces", "set-bookie-affinity-group", ns, "-pg", "g1")
    assert run("namespaces", "get-bookie-affinity-group", ns) == {
        "bookkeeperAffinityGroupPrimary": "g1"}
    run("namespaces", "delete-bookie-affinity-group", ns)
    cluster = run("namespaces", "get-clusters", ns)[0]
    run("namespaces", "set-clusters", ns, "-c", cluster)
    assert main(["--admin-url", broker.web_url, "namespaces", "set-clusters", ns,
                 "--clusters", "other"]) != 0
    assert "Invalid cluster id: other" in capsys.readouterr().err
    run("topics", "set-replication-clusters", topic, "-c", cluster)
    assert run("topics", "get-replication-clusters", topic) == [cluster]
    run("topics", "remove-replication-clusters", topic)


def test_pulsar_admin_other_names_and_small_commands(
        broker: Any, api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    ns, topic = "public/default", "persistent://public/default/cli-alias"
    run = lambda *argv: _cli(capsys, broker, *argv)  # noqa: E731
    run("topics", "create", topic)
    # deprecated and alternative names send their command's request
    run("topics", "set-maxProducers", topic, "--max-producers", "4")
    assert run("topics", "get-max-producers", topic) == 4
    run("topics", "set-max-subscriptions", topic, "-m", "6")
    assert run("topics", "get-max-subscriptions-per-topic", topic) == 6
    run("topics", "set-max-unacked-messages-per-consumer", topic, "-m", "9")
    assert run("topics", "get-max-unacked-messages-on-consumer", topic) == 9
    run("topics", "disable-deduplication", topic)
    assert run("topics", "get-deduplication-enabled", topic) is False
    run("topics", "enable-deduplication", topic)
    assert run("topics", "get-deduplication", topic) is True
    # topic-policies mirrors the topic policy commands
    run("topic-policies", "set-message-ttl", topic, "-ttl", "1h")
    assert run("topicPolicies", "get-message-ttl", topic) == 3600
    run("topic-policies", "set-persistence", topic, "-e", "1", "-w", "1", "-a", "1")
    assert run("topic-policies", "get-persistence", topic)["bookkeeperEnsemble"] == 1
    run("topic-policies", "set-auto-subscription-creation", topic, "-e")
    assert run("topics", "get-auto-subscription-creation", topic) == {
        "allowAutoSubscriptionCreation": True}
    run("topics", "set-schema-validation-enforce", topic, "--enable")
    assert run("topics", "get-schema-validation-enforce", topic) is True
    run("topics", "create-subscription", topic, "-s", "sub")
    run("topics", "update-subscription-properties", topic, "-s", "sub", "-p", "a=1")
    assert run("topics", "get-subscription-properties", topic, "-s", "sub") == {"a": "1"}
    assert run("topics", "bundle-range", topic) == "0x00000000_0xffffffff"
    # namespaces
    assert topic in run("namespaces", "topics", ns)
    assert run("namespaces", "bundles", ns) == {"boundaries": ["0x00000000", "0xffffffff"],
                                                "numBundles": 1}
    assert "bundles" in run("namespaces", "policies", ns)
    run("namespaces", "set-auto-topic-creation", ns, "-e", "-t", "partitioned", "-n", "2")
    assert run("namespaces", "get-auto-topic-creation", ns) == {
        "allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2}
    run("namespaces", "remove-auto-topic-creation", ns)
    run("namespaces", "set-auto-subscription-creation", ns)
    assert run("namespaces", "get-auto-subscription-creation", ns) == {
        "allowAutoSubscriptionCreation": False}
    run("namespaces", "remove-auto-subscription-creation", ns)
    run("namespaces", "set-schema-validation-enforce", ns, "-e")
    assert run("namespaces", "get-schema-validation-enforce", ns) is True
    run("namespaces", "grant-subscription-permission", ns, "-s", "sub", "-rs", "r1,r2")
    assert sorted(run("namespaces", "subscription-permission", ns)["sub"]) == ["r1", "r2"]
    run("namespaces", "revoke-subscription-permission", ns, "-s", "sub", "-r", "r1")
    assert run("namespaces", "subscription-permission", ns)["sub"] == ["r2"]
    # tenants update replaces the tenant's info (Pulsar's POST /admin/v2/tenants/{t})
    run("tenants", "create", "upd")
    run("tenants", "update", "upd", "-r", "ops,dev")
    assert sorted(api("GET", "/admin/v2/tenants/upd").body["adminRoles"]) == ["dev", "ops"]
    assert main(["--admin-url", broker.web_url, "tenants", "update", "nope"]) != 0
    assert "Tenant nope not found" in capsys.readouterr().err
