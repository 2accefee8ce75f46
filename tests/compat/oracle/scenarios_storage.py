"""REST scenarios of properties and of the storage and replication policies one node keeps.

Namespace and topic properties, persistence, offload (policies, thresholds, deletion lag),
bookie affinity, replication clusters, the deduplication snapshot interval, the replicator
dispatch rate, ``schemaValidationEnforced`` and the topic stats times: each with its unset
answer, its good and bad bodies, and its removal, as :mod:`scenarios_rest` writes them.
"""

from __future__ import annotations

from scenarios_rest import NS, SETUP, TP, WITH_TOPIC, Call, Publish, Scenario

PERSISTENCE = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
               "managedLedgerMaxMarkDeleteRate": 10.0}
OFFLOAD = {"managedLedgerOffloadDriver": "aws-s3", "managedLedgerOffloadMaxThreads": 4,
           "managedLedgerOffloadThresholdInBytes": 1073741824,
           "managedLedgerOffloadDeletionLagInMillis": 3600000,
           "s3ManagedLedgerOffloadBucket": "test-bucket", "s3ManagedLedgerOffloadRegion": "r",
           "s3ManagedLedgerOffloadServiceEndpoint": "https://s3.example"}
RATE = {"dispatchThrottlingRateInMsg": 500, "dispatchThrottlingRateInByte": 524288,
        "ratePeriodInSecond": 60, "relativeToPublishRate": True}
PARTITIONED = "/admin/v2/persistent/{t}/{ns}/{topic}-p"


def _level(name: str, base: str, path: str, good: object, bad: object, *,
           applied: bool = False, setup: list[Call] | None = None) -> Scenario:
    steps = [*(setup or SETUP),
             Call("GET", f"{base}/{path}", label="get unset"),
             Call("POST", f"{base}/{path}", good, "set"),
             Call("GET", f"{base}/{path}", label="get set"),
             Call("POST", f"{base}/{path}", bad, "set bad body"),
             Call("PUT", f"{base}/{path}", good, "set other verb"),
             Call("DELETE", f"{base}/{path}", label="remove"),
             Call("GET", f"{base}/{path}", label="get removed")]
    if applied:
        steps.append(Call("GET", f"{base}/{path}?applied=true", label="get applied"))
    return Scenario(name, steps)


STORAGE_SCENARIOS: list[Scenario] = [
    Scenario("ns properties", [
        *SETUP,
        Call("GET", NS + "/properties", label="get none"),
        Call("PUT", NS + "/properties", {"a": "1", "b": "2"}, "set"),
        Call("GET", NS + "/properties", label="get set"),
        Call("PUT", NS + "/property/c/3", label="set one"),
        Call("GET", NS + "/property/c", label="get one"),
        Call("GET", NS + "/property/zz", label="get absent"),
        Call("DELETE", NS + "/property/c", label="remove one"),
        Call("DELETE", NS + "/property/zz", label="remove absent"),
        Call("DELETE", NS + "/properties", label="clear"),
        Call("GET", NS + "/properties", label="get cleared"),
        Call("PUT", NS + "/properties", [1], "set bad body"),
        Call("GET", "/admin/v2/namespaces/{t}/missing/properties", label="missing namespace"),
    ]),
    Scenario("topic properties", [
        *SETUP,
        Call("PUT", TP, {"k1": "v1"}, "create with properties"),
        Call("GET", TP + "/properties", label="get created"),
        Call("PUT", TP + "/properties", {"k2": "v2"}, "update"),
        Call("PUT", TP + "/properties", {}, "update nothing"),
        Call("DELETE", TP + "/properties?key=k1", label="remove one"),
        Call("DELETE", TP + "/properties?key=zz", label="remove absent"),
        Call("GET", TP + "/properties", label="get updated"),
        Call("PUT", TP + "/properties", [1], "update bad body"),
        Call("PUT", PARTITIONED + "/partitions", 2, "create partitioned"),
        Call("GET", PARTITIONED + "/properties", label="partitioned none"),
        Call("PUT", PARTITIONED + "/properties", {"a": "b"}, "partitioned update"),
        Call("GET", PARTITIONED + "/properties", label="partitioned get"),
        Call("GET", PARTITIONED + "-partition-0/properties", label="partition get"),
        Call("GET", TP + "-missing/properties", label="missing topic"),
    ]),
    _level("ns policy persistence", NS, "persistence", PERSISTENCE,
           {"bookkeeperEnsemble": 6, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1}),
    _level("topic policy persistence", TP, "persistence", PERSISTENCE,
           {"bookkeeperEnsemble": 2, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 1},
           applied=True, setup=WITH_TOPIC),
    Scenario("ns policy deduplicationSnapshotInterval", [
        *SETUP,
        Call("GET", NS + "/deduplicationSnapshotInterval", label="get unset"),
        Call("POST", NS + "/deduplicationSnapshotInterval", 1000, "set"),
        Call("GET", NS + "/deduplicationSnapshotInterval", label="get set"),
        Call("POST", NS + "/deduplicationSnapshotInterval", -1, "set bad body"),
        Call("PUT", NS + "/deduplicationSnapshotInterval", 5, "set other verb"),
        Call("DELETE", NS + "/deduplicationSnapshotInterval", label="no remove route"),
        Call("POST", NS + "/deduplicationSnapshotInterval", label="remove by no body"),
        Call("GET", NS + "/deduplicationSnapshotInterval", label="get removed"),
    ]),
    _level("topic policy deduplicationSnapshotInterval", TP, "deduplicationSnapshotInterval", 1000, -1,
           setup=WITH_TOPIC),
    _level("ns policy replicatorDispatchRate", NS, "replicatorDispatchRate", RATE, "x"),
    _level("topic policy replicatorDispatchRate", TP, "replicatorDispatchRate", RATE, "x",
           applied=True, setup=WITH_TOPIC),
    Scenario("ns offload", [
        *SETUP,
        Call("GET", NS + "/offloadPolicies", label="get policies unset"),
        Call("GET", NS + "/offloadThreshold", label="get threshold unset"),
        Call("GET", NS + "/offloadThresholdInSeconds", label="get time threshold unset"),
        Call("GET", NS + "/offloadDeletionLagMs", label="get lag unset"),
        Call("PUT", NS + "/offloadThresholdInSeconds", -60, "set time threshold"),
        Call("PUT", NS + "/offloadThreshold", 100, "set threshold"),
        Call("PUT", NS + "/offloadDeletionLagMs", 1000, "set lag"),
        Call("GET", NS + "/offloadThreshold", label="get threshold"),
        Call("GET", NS + "/offloadDeletionLagMs", label="get lag"),
        Call("GET", NS + "/offloadPolicies", label="get policies made by thresholds"),
        Call("DELETE", NS + "/offloadDeletionLagMs", label="clear lag"),
        Call("GET", NS + "/offloadDeletionLagMs", label="get lag cleared"),
        Call("DELETE", NS + "/removeOffloadPolicies", label="remove policies"),
        Call("GET", NS + "/offloadThreshold", label="get threshold removed"),
        Call("POST", NS + "/offloadPolicies", {"managedLedgerOffloadDriver": "aws-s3"},
             "set without bucket"),
        Call("POST", NS + "/offloadPolicies", {}, "set without driver"),
        Call("POST", NS + "/offloadPolicies", OFFLOAD, "set policies"),
        Call("GET", NS + "/offloadPolicies", label="get policies"),
        Call("GET", "/admin/v2/namespaces/{t}/missing/offloadPolicies", label="missing namespace"),
    ]),
    Scenario("topic offload", [
        *WITH_TOPIC,
        Call("GET", TP + "/offloadPolicies", label="get unset"),
        Call("POST", TP + "/offloadPolicies", {"managedLedgerOffloadDriver": "nope",
                                               "s3ManagedLedgerOffloadBucket": "b"},
             "set unknown driver"),
        Call("POST", TP + "/offloadPolicies", OFFLOAD, "set"),
        Call("GET", TP + "/offloadPolicies", label="get set"),
        Call("DELETE", TP + "/offloadPolicies", label="remove"),
        Call("GET", TP + "/offloadPolicies", label="get removed"),
        Call("POST", NS + "/offloadPolicies", OFFLOAD, "set namespace's"),
        Call("GET", TP + "/offloadPolicies?applied=true", label="get applied"),
    ]),
    Scenario("bookie affinity", [
        *SETUP,
        Call("GET", NS + "/persistence/bookieAffinity", label="get unset"),
        Call("POST", NS + "/persistence/bookieAffinity",
             {"bookkeeperAffinityGroupPrimary": "p", "bookkeeperAffinityGroupSecondary": "s"},
             "set"),
        Call("GET", NS + "/persistence/bookieAffinity", label="get set"),
        Call("DELETE", NS + "/persistence/bookieAffinity", label="remove"),
        Call("GET", NS + "/persistence/bookieAffinity", label="get removed"),
    ]),
    Scenario("replication clusters", [
        *WITH_TOPIC,
        Call("GET", NS + "/replication", label="namespace's"),
        Call("GET", TP + "/replication", label="get unset"),
        Call("GET", TP + "/replication?applied=true", label="get applied"),
        Call("POST", TP + "/replication", ["{cluster}"], "set"),
        Call("GET", TP + "/replication", label="get set"),
        Call("POST", TP + "/replication", [], "set none"),
        Call("POST", TP + "/replication", ["other"], "set without local"),
        Call("POST", TP + "/replication", ["{cluster}", "other"], "set unknown"),
        Call("POST", TP + "/replication", ["global"], "set global"),
        Call("DELETE", TP + "/replication", label="remove"),
        Call("GET", TP + "/replication", label="get removed"),
    ]),
    Scenario("policy schemaValidationEnforced", [
        *WITH_TOPIC,
        Call("GET", NS + "/schemaValidationEnforced", label="ns get unset"),
        Call("GET", NS + "/schemaValidationEnforced?applied=true", label="ns get applied"),
        Call("POST", NS + "/schemaValidationEnforced", True, "ns set"),
        Call("GET", NS + "/schemaValidationEnforced", label="ns get set"),
        Call("DELETE", NS + "/schemaValidationEnforced", label="ns remove"),
        Call("GET", TP + "/schemaValidationEnforced", label="topic get unset"),
        Call("GET", TP + "/schemaValidationEnforced?applied=true", label="topic get applied"),
        Call("POST", TP + "/schemaValidationEnforced", True, "topic set"),
        Call("GET", TP + "/schemaValidationEnforced", label="topic get set"),
        Call("DELETE", TP + "/schemaValidationEnforced", label="topic remove"),
        Call("PUT", NS + "/schemaValidationEnforced", False, "set other verb"),
        Call("PUT", TP + "/schemaValidationEnforced", False, "set other verb"),
    ]),
    Scenario("applied topic policies", [
        *WITH_TOPIC,
        *(Call("GET", f"{TP}/{path}?applied=true", label=f"applied {path}")
          for path in ("maxProducers", "maxConsumers", "maxUnackedMessagesOnConsumer",
                       "maxUnackedMessagesOnSubscription", "deduplicationEnabled",
                       "dispatchRate", "subscribeRate", "compactionThreshold")),
        Call("POST", NS + "/maxProducersPerTopic", 7, "namespace's max producers"),
        Call("GET", TP + "/maxProducers?applied=true", label="applied from namespace"),
    ]),
    Scenario("bundles", [
        *WITH_TOPIC,
        Call("GET", NS + "/bundles", label="namespace's bundles"),
        Call("GET", "/lookup/v2/topic/persistent/{t}/{ns}/{topic}/bundle", label="topic's bundle"),
        Call("GET", "/admin/v2/namespaces/{t}/missing/bundles", label="missing namespace"),
    ]),
    Scenario("stats times", [
        *WITH_TOPIC,
        Call("GET", TP + "/stats", label="topic stats"),
        Publish("{topic}"),
        Call("GET", TP + "/stats", label="published stats"),
    ]),
]
