"""``horae-admin`` commands for properties and the storage and replication policies (pulsar-admin's names and flags).

Theory of operation: each command builds one REST request, as :mod:`cli.admin.limits` does.

- properties: ``namespaces set-property -k -v``, ``get-property -k``, ``remove-property -k``,
  ``set-properties -p a=1,b=2``, ``get-properties``, ``clear-properties``; ``topics
  update-properties -p k=v`` (repeatable), ``get-properties``, ``remove-properties -k``;
- persistence (``set-persistence -e -w -a -r``), offload policies (``set-offload-policies -d
  -r -b -e -oat -oats -oae -orp``), the deduplication snapshot interval (``-i``) and the
  replicator dispatch rate (``-md -bd -dt``): ``set-``/``get-``/``remove-`` at both levels;
- namespace only: ``set-offload-threshold -s SIZE`` (or ``-t TIME`` for the time threshold),
  ``get-offload-threshold``, ``set-offload-deletion-lag -l 1h``, ``get-``, ``clear-``,
  ``set-bookie-affinity-group -pg -sg``, ``get-``, ``delete-``, ``get-clusters``,
  ``set-clusters -c``;
- topic only: ``set-replication-clusters -c c1,c2``, ``get-``, ``remove-``.

On one node these are kept and shown but change nothing (the README says so per policy).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cli.admin.args import (
    Builder,
    UsageError,
    namespace_path,
    parse_duration_ms,
    parse_size_bytes,
    q,
    topic_base,
)
from cli.admin.rest import Request

__all__ = ["COMMANDS", "add_parsers", "parse_pairs"]

AddArgs = Callable[[argparse.ArgumentParser], None]
Body = Callable[[argparse.Namespace], object]


def parse_pairs(values: list[str] | None) -> dict[str, str]:
    """``k=v`` items, each possibly a comma-separated list of them (pulsar-admin's forms)."""
    out: dict[str, str] = {}
    for value in values or []:
        for item in value.split(","):
            if not item.strip():
                continue
            key, sep, val = item.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"invalid property {item!r}: give key=value")
            out[key.strip()] = val
    return out


def _ns(a: argparse.Namespace) -> str:
    return f"/admin/v2/namespaces/{namespace_path(a.namespace)}"


def _topic(a: argparse.Namespace) -> str:
    return topic_base(a.topic)


# --- set- bodies ------------------------------------------------------------------------------
def _persistence_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--bookkeeper-ensemble", "-e", dest="ensemble", type=int, required=True,
                    help="bookies a ledger is striped over (kept; one node has one copy)")
    sp.add_argument("--bookkeeper-write-quorum", "-w", dest="write", type=int, required=True,
                    help="copies of each entry (kept; one node has one copy)")
    sp.add_argument("--bookkeeper-ack-quorum", "-a", dest="ack", type=int, required=True,
                    help="copies acknowledged before a write completes (kept)")
    sp.add_argument("--ml-mark-delete-max-rate", "-r", dest="rate", type=float, default=0.0,
                    help="mark-delete operations per second (kept)")


def _persistence(a: argparse.Namespace) -> dict[str, Any]:
    return {"bookkeeperEnsemble": a.ensemble, "bookkeeperWriteQuorum": a.write,
            "bookkeeperAckQuorum": a.ack, "managedLedgerMaxMarkDeleteRate": a.rate}


def _offload_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--driver", "-d", required=True,
                    help="S3, aws-s3, google-cloud-storage, filesystem, azureblob, aliyun-oss")
    sp.add_argument("--region", "-r", help="the bucket's region")
    sp.add_argument("--bucket", "-b", help="the bucket")
    sp.add_argument("--endpoint", "-e", help="the service endpoint")
    sp.add_argument("--offloadAfterThreshold", "-oat", dest="threshold",
                    help="offload when a topic stores more than this, e.g. 10G")
    sp.add_argument("--offloadAfterThresholdInSeconds", "-oats", dest="threshold_s", type=int,
                    help="offload ledgers older than this many seconds")
    sp.add_argument("--offloadAfterElapsed", "-oae", dest="lag",
                    help="delete offloaded ledgers locally after this long, e.g. 4h")
    sp.add_argument("--offloadedReadPriority", "-orp", dest="priority",
                    choices=("tiered-storage-first", "bookkeeper-first"),
                    help="where offloaded ledgers are read from first")


def _offload(a: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"managedLedgerOffloadDriver": a.driver}
    s3 = a.driver.lower() in ("s3", "aws-s3")
    gcs = a.driver.lower() == "google-cloud-storage"
    prefix = "s3ManagedLedgerOffload" if s3 else "gcsManagedLedgerOffload" if gcs \
        else "managedLedgerOffload"
    for flag, suffix in ((a.region, "Region"), (a.bucket, "Bucket")):
        if flag is not None:
            body[prefix + suffix] = flag
    if a.endpoint is not None:
        body[("s3ManagedLedgerOffload" if s3 else "managedLedgerOffload")
             + "ServiceEndpoint"] = a.endpoint
    if a.threshold is not None:
        body["managedLedgerOffloadThresholdInBytes"] = parse_size_bytes(a.threshold)
    if a.threshold_s is not None:
        body["managedLedgerOffloadThresholdInSeconds"] = a.threshold_s
    if a.lag is not None:
        body["managedLedgerOffloadDeletionLagInMillis"] = parse_duration_ms(a.lag)
    if a.priority is not None:
        body["managedLedgerOffloadedReadPriority"] = a.priority
    return body


def _interval_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--interval", "-i", type=int, required=True,
                    help="seconds between deduplication snapshots (kept)")


def _rate_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--msg-dispatch-rate", "-md", dest="msgs", type=int, default=-1,
                    help="messages per period (-1: no limit)")
    sp.add_argument("--byte-dispatch-rate", "-bd", dest="bytes", type=int, default=-1,
                    help="bytes per period (-1: no limit)")
    sp.add_argument("--dispatch-rate-period", "-dt", dest="period", type=int, default=1,
                    help="the period in seconds (default 1)")
    sp.add_argument("--relative-to-publish-rate", "-rp", dest="relative", action="store_true",
                    help="relative to the publish rate")


def _rate(a: argparse.Namespace) -> dict[str, Any]:
    return {"dispatchThrottlingRateInMsg": a.msgs, "dispatchThrottlingRateInByte": a.bytes,
            "ratePeriodInSecond": a.period, "relativeToPublishRate": a.relative}


#: (stem, REST suffix, remove suffix, what, add args, body, levels)
_TRIOS: tuple[tuple[str, str, str, str, AddArgs, Body, str], ...] = (
    ("persistence", "persistence", "persistence", "persistence policies (kept, no effect)",
     _persistence_args, _persistence, "nt"),
    ("offload-policies", "offloadPolicies", "removeOffloadPolicies",
     "offload policies (kept, no tiered storage)", _offload_args, _offload, "n"),
    ("offload-policies", "offloadPolicies", "offloadPolicies",
     "offload policies (kept, no tiered storage)", _offload_args, _offload, "t"),
    ("deduplication-snapshot-interval", "deduplicationSnapshotInterval", "",
     "deduplication snapshot interval (kept)", _interval_args, lambda a: a.interval, "n"),
    ("deduplication-snapshot-interval", "deduplicationSnapshotInterval",
     "deduplicationSnapshotInterval", "deduplication snapshot interval (kept)",
     _interval_args, lambda a: a.interval, "t"),
    ("replicator-dispatch-rate", "replicatorDispatchRate", "replicatorDispatchRate",
     "replicator dispatch rate (kept, no replication)", _rate_args, _rate, "nt"),
)

#: the groups whose commands act on a topic's policies
_TOPIC_GROUPS = ("topics", "topic-policies", "topicPolicies")


def _trio(suffix: str, remove: str, body: Body,
          base: Callable[[argparse.Namespace], str]) -> dict[str, Builder]:
    return {
        "set": lambda a: Request("POST", f"{base(a)}/{suffix}", body(a), True),
        "get": lambda a: Request("GET", f"{base(a)}/{suffix}"),
        # "": Pulsar has no DELETE there; a POST without a body clears the value
        "remove": (lambda a: Request("DELETE", f"{base(a)}/{remove}")) if remove
        else (lambda a: Request("POST", f"{base(a)}/{suffix}")),
    }


def _offload_threshold(a: argparse.Namespace) -> Request:
    if (a.size is None) == (a.time is None):
        raise UsageError("give --size (bytes stored) or --time (seconds), one of them")
    if a.size is not None:
        return Request("PUT", _ns(a) + "/offloadThreshold", parse_size_bytes(a.size), True)
    return Request("PUT", _ns(a) + "/offloadThresholdInSeconds",
                   parse_duration_ms(a.time) // 1000, True)


def _set_property(a: argparse.Namespace) -> Request:
    return Request("PUT", f"{_ns(a)}/property/{q(a.key)}/{q(a.value)}")


def _set_properties(a: argparse.Namespace) -> Request:
    return Request("PUT", _ns(a) + "/properties", parse_pairs(a.properties), True)


def _update_topic_properties(a: argparse.Namespace) -> Request:
    values = parse_pairs(a.properties)
    if not values:
        raise UsageError("give --property key=value")
    return Request("PUT", _topic(a) + "/properties", values, True)


def _cluster_list(a: argparse.Namespace) -> list[str]:
    return [c.strip() for c in a.clusters.split(",") if c.strip()]


def _replication(a: argparse.Namespace) -> Request:
    return Request("POST", _topic(a) + "/replication", _cluster_list(a), True)


def _affinity(a: argparse.Namespace) -> Request:
    body = {"bookkeeperAffinityGroupPrimary": a.primary}
    if a.secondary is not None:
        body["bookkeeperAffinityGroupSecondary"] = a.secondary
    return Request("POST", _ns(a) + "/persistence/bookieAffinity", body, True)


_NAMESPACE_ONLY: dict[str, tuple[str, Builder]] = {
    "set-offload-threshold": ("set the namespace's offload threshold (kept, no tiered storage)",
                              _offload_threshold),
    "get-offload-threshold": ("the namespace's offload threshold in bytes (-1: none)",
                              lambda a: Request("GET", _ns(a) + "/offloadThreshold")),
    "set-offload-deletion-lag": (
        "set how long offloaded ledgers stay (kept, no tiered storage)",
        lambda a: Request("PUT", _ns(a) + "/offloadDeletionLagMs",
                          parse_duration_ms(a.lag), True)),
    "get-offload-deletion-lag": ("the namespace's offload deletion lag in ms",
                                 lambda a: Request("GET", _ns(a) + "/offloadDeletionLagMs")),
    "clear-offload-deletion-lag": (
        "clear the namespace's offload deletion lag",
        lambda a: Request("DELETE", _ns(a) + "/offloadDeletionLagMs")),
    "set-bookie-affinity-group": ("set the bookie affinity group (kept, no bookies)", _affinity),
    "get-bookie-affinity-group": (
        "the namespace's bookie affinity group",
        lambda a: Request("GET", _ns(a) + "/persistence/bookieAffinity")),
    "delete-bookie-affinity-group": (
        "delete the namespace's bookie affinity group",
        lambda a: Request("DELETE", _ns(a) + "/persistence/bookieAffinity")),
    "get-clusters": ("the namespace's replication clusters (this broker's cluster)",
                     lambda a: Request("GET", _ns(a) + "/replication")),
    "set-clusters": ("set the namespace's replication clusters (this broker's cluster only)",
                     lambda a: Request("POST", _ns(a) + "/replication", _cluster_list(a), True)),
    "set-property": ("set one property of the namespace", _set_property),
    "get-property": ("one property of the namespace (empty: not set)",
                     lambda a: Request("GET", f"{_ns(a)}/property/{q(a.key)}")),
    "remove-property": ("remove one property of the namespace (prints its value)",
                        lambda a: Request("DELETE", f"{_ns(a)}/property/{q(a.key)}")),
    "set-properties": ("add properties to the namespace", _set_properties),
    "get-properties": ("the namespace's properties",
                       lambda a: Request("GET", _ns(a) + "/properties")),
    "clear-properties": ("remove every property of the namespace",
                         lambda a: Request("DELETE", _ns(a) + "/properties")),
}

_TOPIC_ONLY: dict[str, tuple[str, Builder]] = {
    "get-properties": ("the topic's properties", lambda a: Request("GET", _topic(a) + "/properties")),
    "update-properties": ("add or change properties of the topic", _update_topic_properties),
    "remove-properties": ("remove one property of the topic",
                          lambda a: Request("DELETE", f"{_topic(a)}/properties?key={q(a.key)}")),
    "set-replication-clusters": ("set the topic's replication clusters (this broker's cluster "
                                 "only)", _replication),
    "get-replication-clusters": ("the topic's replication clusters",
                                 lambda a: Request("GET", _topic(a) + "/replication")),
    "remove-replication-clusters": ("remove the topic's replication clusters",
                                    lambda a: Request("DELETE", _topic(a) + "/replication")),
}

COMMANDS: dict[tuple[str, str], Builder] = {}
for _stem, _suffix, _remove, _what, _add, _body, _levels in _TRIOS:
    if "n" in _levels:
        for _verb, _build in _trio(_suffix, _remove, _body, _ns).items():
            COMMANDS[("namespaces", f"{_verb}-{_stem}")] = _build
    if "t" in _levels:
        for _verb, _build in _trio(_suffix, _remove, _body, _topic).items():
            for _group in _TOPIC_GROUPS:
                COMMANDS[(_group, f"{_verb}-{_stem}")] = _build
for _name, (_, _build) in _NAMESPACE_ONLY.items():
    COMMANDS[("namespaces", _name)] = _build
for _name, (_, _build) in _TOPIC_ONLY.items():
    COMMANDS[("topics", _name)] = _build


def _namespace_only_args(name: str, sp: argparse.ArgumentParser) -> None:
    if name == "set-offload-threshold":
        sp.add_argument("--size", "-s", help="bytes stored before offloading, e.g. 10G (-1: "
                                              "never)")
        sp.add_argument("--time", "-t", help="age before offloading, e.g. 1d")
    elif name == "set-offload-deletion-lag":
        sp.add_argument("--lag", "-l", required=True, help="e.g. 4h")
    elif name == "set-bookie-affinity-group":
        sp.add_argument("--primary-group", "-pg", dest="primary", required=True,
                        help="the primary bookie group")
        sp.add_argument("--secondary-group", "-sg", dest="secondary",
                        help="the secondary bookie group")
    elif name == "set-clusters":
        sp.add_argument("--clusters", "-c", required=True,
                        help="comma-separated cluster names (this broker's cluster only)")
    elif name in ("set-property", "get-property", "remove-property"):
        sp.add_argument("--key", "-k", required=True, help="the property's key")
        if name == "set-property":
            sp.add_argument("--value", "-v", required=True, help="the property's value")
    elif name == "set-properties":
        sp.add_argument("--properties", "-p", action="append", required=True,
                        help="key=value pairs, comma-separated (a=1,b=2)")


def _topic_only_args(name: str, sp: argparse.ArgumentParser) -> None:
    if name == "update-properties":
        sp.add_argument("--property", "-p", dest="properties", action="append", required=True,
                        help="key=value (repeatable)")
    elif name == "remove-properties":
        sp.add_argument("--key", "-k", required=True, help="the property's key")
    elif name == "set-replication-clusters":
        sp.add_argument("--clusters", "-c", required=True,
                        help="comma-separated cluster names")


def add_parsers(namespaces: Any, topics: Any, *topic_groups: Any) -> None:
    """Declare the commands on the ``namespaces``, ``topics`` and other topic groups."""
    verbs = {"set": "set the {} {}", "get": "the {} {} (null: not set here)",
             "remove": "remove the {} {}"}
    for stem, _, _, what, add, _, levels in _TRIOS:
        groups: list[tuple[Any, str, str, str]] = []
        if "n" in levels:
            groups.append((namespaces, "namespace", "tenant/namespace", "namespace's"))
        if "t" in levels:
            groups += [(g, "topic", "topic name", "topic's") for g in (topics, *topic_groups)]
        for group, dest, dest_help, whose in groups:
            for verb, text in verbs.items():
                sp = group.add_parser(f"{verb}-{stem}", help=text.format(whose, what))
                sp.add_argument(dest, help=dest_help)
                if verb == "set":
                    add(sp)
    for name, (help_, _) in _NAMESPACE_ONLY.items():
        sp = namespaces.add_parser(name, help=help_)
        sp.add_argument("namespace", help="tenant/namespace")
        _namespace_only_args(name, sp)
    for name, (help_, _) in _TOPIC_ONLY.items():
        sp = topics.add_parser(name, help=help_)
        sp.add_argument("topic", help="topic name")
        _topic_only_args(name, sp)
