"""Policies Pulsar keeps for storage and replication: stored and shown, with no effect on one node.

Theory of operation: Pulsar's paths, bodies, status codes and reasons (``NamespacesBase`` /
``PersistentTopicsBase``, ``AdminResource.validatePersistencePolicies`` /
``validateOffloadPolicies``), kept in the policy records (:class:`broker.topics.policy_records.PolicyRecords`)
under Pulsar's ``Policies`` / ``TopicPolicies`` names, so they survive a restart and go with
their namespace or topic. Horae writes every ledger once to its own disk, has no tiered
storage, no bookies and one cluster, so none of them changes what the broker does:

- persistence (``bookkeeperEnsemble``, ``...WriteQuorum``, ``...AckQuorum``,
  ``managedLedgerMaxMarkDeleteRate``): namespace and topic ``.../persistence``; the rows of
  ``_FIELDS`` in :mod:`broker.admin.policies` serve them with :func:`persistence_body`;
- the deduplication snapshot interval and the replicator dispatch rate, likewise
  (:func:`snapshot_interval`, :func:`replicator_dispatch_rate`);
- offload: ``.../offloadPolicies`` (an OffloadPolicies document, Pulsar's defaults filled in
  as its ``OffloadPoliciesImpl`` has them), the namespace's ``offloadThreshold``,
  ``offloadThresholdInSeconds`` and ``offloadDeletionLagMs``, which Pulsar keeps inside that
  document (set one and the document exists with its defaults);
- the namespace's bookie affinity group (``.../persistence/bookieAffinity``, super-user only;
  unset answers 204 without a body. Pulsar keeps it in a namespace's local policies, which
  it writes when a bundle is first owned, and answers 404 ``Namespace local-policies does not
  exist`` before that; a Horae namespace has its one bundle from its creation);
- namespace replication clusters (``set-clusters``): only this broker's cluster is accepted;
- topic replication clusters (``.../replication``): only this broker's cluster can be named.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from broker.admin import bodies
from broker.admin import errors as E
from broker.admin.namespaces import NAMESPACE
from broker.admin.offload_fields import (
    LEGACY,
    NS_OFFLOAD,
    OFFLOAD_DRIVERS,
    S3_DRIVERS,
    THRESHOLD_S,
    merge_legacy,
    offload_defaults,
    offload_fields,
    ordered,
)
from broker.admin.policy_parsers import (
    persistence_body,
    replicator_dispatch_rate,
    snapshot_interval,
)
from broker.admin.responses import (
    admin_of,
    json_response,
    namespace_of,
    no_content,
    policy_topic_of,
)
from broker.admin.service import AdminService
from broker.admin.topics import TOPIC
from broker.topics.policy_records import PolicyRecords

__all__ = ["NS_PERSISTENCE", "TOPIC_PERSISTENCE", "add_routes", "offload_document",
           "persistence_body", "replicator_dispatch_rate", "snapshot_interval"]

NS_PERSISTENCE = "persistence"
TOPIC_PERSISTENCE = "persistence"
NS_DEDUP_SNAPSHOT = "deduplicationSnapshotInterval"
TOPIC_DEDUP_SNAPSHOT = "deduplicationSnapshotIntervalSeconds"
NS_REPLICATOR_RATE = "replicatorDispatchRate"
TOPIC_REPLICATOR_RATE = "replicatorDispatchRate"
TOPIC_OFFLOAD = "offloadPolicies"
NS_BOOKIE_AFFINITY = "bookie_affinity_group"   # Pulsar's LocalPolicies.bookieAffinityGroup
TOPIC_REPLICATION = "replicationClusters"

#: broker.conf ``managedLedgerDefaultEnsembleSize`` / ``...WriteQuorum`` / ``...AckQuorum`` /
#: ``managedLedgerDefaultMarkDeleteRateLimit``: the applied persistence of a topic set nowhere
DEFAULT_PERSISTENCE = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1,
                       "bookkeeperAckQuorum": 1, "managedLedgerMaxMarkDeleteRate": 1.0}


def _int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise E.bad_request(f"Invalid value: {name} must be a number")
    return value


# --- offload --------------------------------------------------------------------------------
def offload_policies_body(body: object) -> dict[str, Any]:
    """An OffloadPolicies set whole, checked as Pulsar's ``validateOffloadPolicies`` (412)."""
    if body is None:
        raise E.precondition_failed("The offloadPolicies must be specified for namespace offload.")
    doc = offload_fields(body)
    driver = doc.get("managedLedgerOffloadDriver")
    if not isinstance(driver, str) or driver.lower() not in [d.lower() for d in OFFLOAD_DRIVERS]:
        raise E.precondition_failed("The driver is not supported, support value: "
                                    + ",".join(OFFLOAD_DRIVERS))
    if not _bucket_valid(doc, driver.lower()):
        raise E.precondition_failed("The bucket must be specified for namespace offload.")
    return doc


def _bucket_valid(doc: dict[str, Any], driver: str) -> bool:
    if doc.get("managedLedgerOffloadBucket"):
        return True
    if driver in S3_DRIVERS:
        return bool(doc.get("s3ManagedLedgerOffloadBucket"))
    if driver == "google-cloud-storage":
        return bool(doc.get("gcsManagedLedgerOffloadBucket"))
    return driver == "filesystem"


def offload_document(stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """What GET answers: the stored document and the driver flags Pulsar derives."""
    if stored is None:
        return None
    driver = str(stored.get("managedLedgerOffloadDriver") or "").lower()
    return {**stored, "s3Driver": driver in S3_DRIVERS,
            "gcsDriver": driver == "google-cloud-storage",
            "fileSystemDriver": driver == "filesystem"}


# --- handlers -----------------------------------------------------------------------------
def _records(admin: AdminService) -> PolicyRecords:
    return admin.policy_store.records


def _applied(request: web.Request) -> bool:
    return request.query.get("applied", "false").lower() in ("1", "true")


async def _body(request: web.Request) -> object:
    return bodies.load_json(await request.read())


async def get_ns_offload(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    return json_response(offload_document(_records(admin).namespace_value(ns, NS_OFFLOAD)))


async def set_ns_offload(request: web.Request) -> web.Response:
    body = await _body(request)
    admin, ns = await namespace_of(request)
    await _write_ns_offload(_records(admin), ns, offload_policies_body(body))
    return no_content()


async def _write_ns_offload(records: PolicyRecords, ns: str, doc: dict[str, Any]) -> None:
    """Store a namespace's offload document, with the old Policies fields a create body set
    taken into it where it has no value and then dropped (Pulsar's
    ``mergeOffloadThresholdsForCompatibility``, run by every offload setter)."""
    legacy = {key: value for key in LEGACY
              if (value := records.namespace_value(ns, key)) is not None}
    await records.set_namespace_field(ns, NS_OFFLOAD, merge_legacy(doc, legacy))
    for key in legacy:
        await records.remove_namespace_field(ns, key)


async def remove_ns_offload(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    await _records(admin).remove_namespace_field(ns, NS_OFFLOAD)
    for key in LEGACY:   # Pulsar's remove clears the old fields too
        await _records(admin).remove_namespace_field(ns, key)
    return no_content()


def _ns_offload_value(name: str, legacy: str, unset: object) -> tuple[Any, Any]:
    """GET and PUT of one field inside the namespace's offload document (Pulsar keeps the
    thresholds there; setting one creates the document with its defaults). While the
    document has no value, GET reads the Policies' own old field (*legacy*) a create body may
    have set (:mod:`broker.admin.offload_fields`)."""
    async def get(request: web.Request) -> web.Response:
        admin, ns = await namespace_of(request)
        doc = _records(admin).namespace_value(ns, NS_OFFLOAD) or {}
        value = doc.get(name)
        if value is None:
            value = _records(admin).namespace_value(ns, legacy)
        return json_response(unset if value is None else value)

    async def put(request: web.Request) -> web.Response:
        body = await _body(request)
        admin, ns = await namespace_of(request)
        value = _int(name, body)
        doc = dict(_records(admin).namespace_value(ns, NS_OFFLOAD) or offload_defaults())
        doc[name] = value
        await _write_ns_offload(_records(admin), ns, ordered(doc))
        # Pulsar's offloadThresholdInSeconds resumes its async answer with nothing: 200
        return web.Response(status=200) if name == THRESHOLD_S else no_content()
    return get, put


async def clear_ns_offload_lag(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    records = _records(admin)
    doc = records.namespace_value(ns, NS_OFFLOAD)
    if any(records.namespace_value(ns, key) is not None for key in LEGACY):
        lag = "managedLedgerOffloadDeletionLagInMillis"
        cleared = {k: v for k, v in (doc or offload_defaults()).items() if k != lag}
        await _write_ns_offload(records, ns, cleared)
    elif doc is not None and "managedLedgerOffloadDeletionLagInMillis" in doc:
        doc = {k: v for k, v in doc.items() if k != "managedLedgerOffloadDeletionLagInMillis"}
        await records.set_namespace_field(ns, NS_OFFLOAD, doc)
    return no_content()


async def get_topic_offload(request: web.Request) -> web.Response:
    admin, tn = await policy_topic_of(request)
    records = _records(admin)
    value = records.topic_value(tn, TOPIC_OFFLOAD)
    if value is None and _applied(request):
        value = records.namespace_value(tn.namespace, NS_OFFLOAD) or offload_defaults()
    return json_response(offload_document(value))


async def set_topic_offload(request: web.Request) -> web.Response:
    body = await _body(request)
    admin, tn = await policy_topic_of(request)
    await _records(admin).set_topic_field(tn.full, TOPIC_OFFLOAD, offload_policies_body(body))
    return no_content()


async def remove_topic_offload(request: web.Request) -> web.Response:
    admin, tn = await policy_topic_of(request)
    await _records(admin).remove_topic_field(tn.full, TOPIC_OFFLOAD)
    return no_content()


# --- bookie affinity --------------------------------------------------------------------------
async def get_bookie_affinity(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    group = _records(admin).namespace_value(ns, NS_BOOKIE_AFFINITY)
    return json_response(group) if group is not None else no_content()


async def set_bookie_affinity(request: web.Request) -> web.Response:
    body = await _body(request)
    admin, ns = await namespace_of(request)
    if not isinstance(body, dict) or not all(
            isinstance(body.get(k, ""), str) for k in ("bookkeeperAffinityGroupPrimary",
                                                        "bookkeeperAffinityGroupSecondary")):
        raise E.bad_request("Invalid value: expected a BookieAffinityGroupData")
    group = {k: body[k] for k in ("bookkeeperAffinityGroupPrimary",
                                  "bookkeeperAffinityGroupSecondary") if k in body}
    await _records(admin).set_namespace_field(ns, NS_BOOKIE_AFFINITY, group)
    return no_content()


async def delete_bookie_affinity(request: web.Request) -> web.Response:
    admin, ns = await namespace_of(request)
    await _records(admin).remove_namespace_field(ns, NS_BOOKIE_AFFINITY)
    return no_content()


# --- replication clusters -------------------------------------------------------------------
async def get_topic_replication(request: web.Request) -> web.Response:
    admin, tn = await policy_topic_of(request)
    value = _records(admin).topic_value(tn, TOPIC_REPLICATION)
    if not value and _applied(request):
        value = [admin.broker.cluster_name]
    return json_response(value or None)


async def set_topic_replication(request: web.Request) -> web.Response:
    body = await _body(request)
    admin, tn = await policy_topic_of(request)
    if body is not None and (not isinstance(body, list)
                             or not all(isinstance(c, str) for c in body)):
        raise E.bad_request("Invalid value: expected a list of cluster names")
    if not body:
        raise E.precondition_failed("ClusterIds should not be null or empty")
    clusters = list(dict.fromkeys(body))
    if "global" in clusters:
        raise E.precondition_failed("Cannot specify global in the list of replication clusters")
    local = admin.broker.cluster_name
    if local not in clusters:
        raise E.precondition_failed(
            "Can not remove local cluster from the local topic-level replication clusters policy")
    for cluster in clusters:
        if cluster != local:
            raise E.RestError(403, f"Invalid cluster id: {cluster}")
    await _records(admin).set_topic_field(tn.full, TOPIC_REPLICATION, clusters)
    return no_content()


async def remove_topic_replication(request: web.Request) -> web.Response:
    admin, tn = await policy_topic_of(request)
    await _records(admin).remove_topic_field(tn.full, TOPIC_REPLICATION)
    return no_content()


async def get_ns_replication(request: web.Request) -> web.Response:
    admin, _ = await namespace_of(request)
    return json_response([admin.broker.cluster_name])


async def set_ns_replication(request: web.Request) -> web.Response:
    """``POST .../namespaces/{t}/{ns}/replication`` (pulsar-admin ``set-clusters``): Pulsar's
    checks in its order (412 empty, 412 ``global``, 403 an unknown cluster); on one node only the
    local cluster is known, and it is what the namespace already has, so nothing is written.
    200 without a body, as Pulsar answers."""
    body = await _body(request)
    if body is not None and (not isinstance(body, list)
                             or not all(isinstance(c, str) for c in body)):
        raise E.bad_request("Invalid value: expected a list of cluster names")
    if not body:
        raise E.precondition_failed("ClusterIds should not be null or empty")
    if "global" in body:
        raise E.precondition_failed("Cannot specify global in the list of replication clusters")
    for cluster in dict.fromkeys(body):
        if cluster != admin_of(request).broker.cluster_name:
            raise E.RestError(403, f"Invalid cluster id: {cluster}")
    await namespace_of(request)
    return web.Response(status=200)   # Pulsar answers 200 with no body


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(NAMESPACE + "/offloadPolicies", get_ns_offload)
    r.add_post(NAMESPACE + "/offloadPolicies", set_ns_offload)
    r.add_delete(NAMESPACE + "/removeOffloadPolicies", remove_ns_offload)
    for suffix, legacy in (("offloadThreshold", "offload_threshold"),
                           ("offloadThresholdInSeconds", "offload_threshold_in_seconds"),
                           ("offloadDeletionLagMs", "offload_deletion_lag_ms")):
        name, unset = LEGACY[legacy]
        get, put = _ns_offload_value(name, legacy, unset)
        r.add_get(f"{NAMESPACE}/{suffix}", get)
        r.add_put(f"{NAMESPACE}/{suffix}", put)
    r.add_delete(NAMESPACE + "/offloadDeletionLagMs", clear_ns_offload_lag)
    r.add_get(NAMESPACE + "/persistence/bookieAffinity", get_bookie_affinity)
    r.add_post(NAMESPACE + "/persistence/bookieAffinity", set_bookie_affinity)
    r.add_delete(NAMESPACE + "/persistence/bookieAffinity", delete_bookie_affinity)
    r.add_get(NAMESPACE + "/replication", get_ns_replication)
    r.add_post(NAMESPACE + "/replication", set_ns_replication)
    r.add_get(TOPIC + "/offloadPolicies", get_topic_offload)
    r.add_post(TOPIC + "/offloadPolicies", set_topic_offload)
    r.add_delete(TOPIC + "/offloadPolicies", remove_topic_offload)
    r.add_get(TOPIC + "/replication", get_topic_replication)
    r.add_post(TOPIC + "/replication", set_topic_replication)
    r.add_delete(TOPIC + "/replication", remove_topic_replication)
