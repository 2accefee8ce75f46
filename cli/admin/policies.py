"""``horae-admin`` commands for schemas, compaction and the namespace/topic policies.

Theory of operation: pulsar-admin's names and flags, each a builder
``argparse.Namespace -> Request`` in :data:`COMMANDS`, keyed ``(group, command)``;
:func:`add_parsers` declares their arguments on the ``namespaces``, ``topics`` and ``schemas``
sub-parsers :mod:`cli.admin.main` creates. A policy is a trio ``set-X`` / ``get-X`` /
``remove-X`` on the namespace path (``/admin/v2/namespaces/{t}/{ns}/<suffix>``) and on the
topic path (``/admin/v2/persistent/{t}/{ns}/{topic}/<suffix>``), as Pulsar's REST API has
them; set sends POST (PUT where Pulsar's own client does). Values are checked here, so a
typo never reaches the broker (exit code 2).
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any

from cli.admin.args import (
    Builder,
    UsageError,
    namespace_path,
    parse_duration_ms,
    parse_size_bytes,
    q,
    topic_base,
    topic_path,
)
from cli.admin.rest import Request
from protocol import admin_names

__all__ = ["COMMANDS", "add_parsers"]

SCHEMA_STRATEGIES = admin_names.SCHEMA_COMPATIBILITY_STRATEGIES


def _ns(a: argparse.Namespace) -> str:
    return f"/admin/v2/namespaces/{namespace_path(a.namespace)}"


def _topic(a: argparse.Namespace) -> str:
    return topic_base(a.topic)


def _schema_base(a: argparse.Namespace) -> str:
    return "/admin/v2/schemas/" + topic_path(a.topic)


def _enable_flag(a: argparse.Namespace) -> bool:
    if a.enable == a.disable:
        raise UsageError("give exactly one of --enable or --disable")
    return bool(a.enable)


def _payload_file(a: argparse.Namespace) -> object:
    """pulsar-admin's schema file: ``{"type": ..., "schema": ..., "properties": {...}}``."""
    try:
        doc = json.loads(pathlib.Path(a.filename).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read schema file {a.filename!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"schema file {a.filename!r} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or "type" not in doc:
        raise UsageError(f"schema file {a.filename!r}: expected a JSON object with "
                         "'type', 'schema' and 'properties'")
    return doc


def _schema_get(a: argparse.Namespace) -> Request:
    if a.version is not None and a.all_versions:
        raise UsageError("give either --version or --all-version, not both")
    if a.all_versions:
        return Request("GET", _schema_base(a) + "/schemas")
    if a.version is not None:
        return Request("GET", _schema_base(a) + f"/schema/{a.version}")
    return Request("GET", _schema_base(a) + "/schema")


def _strategy(value: str) -> str:
    name = value.strip().upper()
    if name not in SCHEMA_STRATEGIES:
        raise UsageError(f"invalid compatibility strategy {value!r}: one of "
                         + ", ".join(SCHEMA_STRATEGIES))
    return name


def _threshold(a: argparse.Namespace) -> int:
    size = parse_size_bytes(a.threshold)
    if size < 0:
        raise UsageError("the compaction threshold is 0 (off) or more bytes")
    return size


def _retention(a: argparse.Namespace) -> dict[str, int]:
    minutes = -1 if a.time.strip() == "-1" else parse_duration_ms(a.time) // 60_000
    size = parse_size_bytes(a.size)
    return {"retentionTimeInMinutes": minutes,
            "retentionSizeInMB": size if size < 0 else size // (1024 * 1024)}


def _ttl(a: argparse.Namespace) -> int:
    seconds = parse_duration_ms(a.ttl) // 1000
    if seconds < 0:
        raise UsageError("the message TTL is 0 (none) or more seconds")
    return seconds


def _quota(a: argparse.Namespace) -> dict[str, Any]:
    size = parse_size_bytes(a.limit_size) if a.limit_size else -1
    seconds = parse_duration_ms(a.limit_time) // 1000 if a.limit_time else -1
    if size < 0 and seconds < 0:
        raise UsageError("give --limitSize and/or --limitTime")
    return {"limitSize": size, "limitTime": seconds, "policy": a.policy}


def _inactive(a: argparse.Namespace) -> dict[str, Any]:
    if a.enable == a.disable:
        raise UsageError("give exactly one of --enable-delete-while-inactive or "
                         "--disable-delete-while-inactive")
    return {"inactiveTopicDeleteMode": a.delete_mode,
            "maxInactiveDurationSeconds": parse_duration_ms(a.max_inactive) // 1000,
            "deleteWhileInactive": bool(a.enable)}


# A policy known at both levels: (command stem, namespace suffix, topic suffix, body builder).
_TRIOS: list[tuple[str, str, str, Any]] = [
    ("deduplication", "deduplication", "deduplicationEnabled", _enable_flag),
    ("schema-compatibility-strategy", "schemaCompatibilityStrategy",
     "schemaCompatibilityStrategy", lambda a: _strategy(a.strategy)),
    ("compaction-threshold", "compactionThreshold", "compactionThreshold", _threshold),
    ("retention", "retention", "retention", _retention),
    ("message-ttl", "messageTTL", "messageTTL", _ttl),
    ("inactive-topic-policies", "inactiveTopicPolicies", "inactiveTopicPolicies", _inactive),
    ("delayed-delivery-replace-by-key", "delayedDeliveryReplaceByKey",
     "delayedDeliveryReplaceByKey", _enable_flag),
]

COMMANDS: dict[tuple[str, str], Builder] = {
    ("schemas", "get"): _schema_get,
    ("schemas", "upload"): lambda a: Request("POST", _schema_base(a) + "/schema",
                                             _payload_file(a), True),
    ("schemas", "compatibility"): lambda a: Request("POST", _schema_base(a) + "/compatibility",
                                                    _payload_file(a), True),
    ("schemas", "delete"): lambda a: Request(
        "DELETE", _schema_base(a) + "/schema" + ("?force=true" if a.force else "")),
    ("topics", "compact"): lambda a: Request("PUT", _topic(a) + "/compaction"),
    ("topics", "compaction-status"): lambda a: Request("GET", _topic(a) + "/compaction"),
}


def _sub(a: argparse.Namespace) -> str:
    return _topic(a) + f"/subscription/{q(a.subscription)}"


def _expire(a: argparse.Namespace) -> Request:
    seconds = parse_duration_ms(a.expire_time) // 1000
    if a.all_subscriptions:
        return Request("POST", _topic(a) + f"/all_subscription/expireMessages/{seconds}")
    if not a.subscription:
        raise UsageError("give --subscription or --all-subscriptions")
    return Request("POST", _sub(a) + f"/expireMessages/{seconds}")


def _quota_type(a: argparse.Namespace) -> str:
    return "?backlogQuotaType=" + q(a.type)


for _group, _base in (("namespaces", _ns), ("topics", _topic)):
    COMMANDS[(_group, "set-backlog-quota")] = (
        lambda b: lambda a: Request("POST", b(a) + "/backlogQuota" + _quota_type(a),
                                    _quota(a), True))(_base)
    COMMANDS[(_group, "get-backlog-quotas")] = (
        lambda b: lambda a: Request("GET", b(a) + "/backlogQuotaMap"))(_base)
    COMMANDS[(_group, "remove-backlog-quota")] = (
        lambda b: lambda a: Request("DELETE", b(a) + "/backlogQuota" + _quota_type(a)))(_base)

COMMANDS.update({
    ("topics", "unload"): lambda a: Request("PUT", _topic(a) + "/unload"),
    ("topics", "terminate"): lambda a: Request("POST", _topic(a) + "/terminate"),
    ("topics", "partitioned-terminate"): lambda a: Request(
        "POST", _topic(a) + "/terminate/partitions"),
    ("topics", "update-partitioned-topic"): lambda a: Request(
        "POST", _topic(a) + "/partitions", a.partitions, True),
    ("topics", "expire-messages"): _expire,
})


def _trio(stem: str, suffix: str, base: Any, body: Any) -> dict[str, Builder]:
    def set_(a: argparse.Namespace) -> Request:
        return Request("POST", base(a) + "/" + suffix, body(a), True)

    def get(a: argparse.Namespace) -> Request:
        return Request("GET", base(a) + "/" + suffix)

    def remove(a: argparse.Namespace) -> Request:
        return Request("DELETE", base(a) + "/" + suffix)

    return {f"set-{stem}": set_, f"get-{stem}": get, f"remove-{stem}": remove}


for _stem, _ns_suffix, _topic_suffix, _body in _TRIOS:
    for _group, _suffix, _base in (("namespaces", _ns_suffix, _ns),
                                   ("topics", _topic_suffix, _topic)):
        for _name, _builder in _trio(_stem, _suffix, _base, _body).items():
            COMMANDS[(_group, _name)] = _builder


def _set_args(sp: argparse.ArgumentParser, stem: str, level: str) -> None:
    if stem == "deduplication":
        sp.add_argument("--enable", "-e", action="store_true", help="enable deduplication")
        sp.add_argument("--disable", "-d", action="store_true", help="disable deduplication")
    elif stem == "delayed-delivery-replace-by-key":
        sp.add_argument("--enable", "-e", action="store_true",
                        help="a keyed delayed message replaces the pending one with its key; "
                             "a tombstone (the key, an empty payload) cancels it")
        sp.add_argument("--disable", "-d", action="store_true", help="turn it off")
    elif stem == "schema-compatibility-strategy":
        flags = ("--compatibility", "-c") if level == "namespaces" else ("--strategy", "-s")
        other = ("--strategy", "-s") if level == "namespaces" else ("--compatibility", "-c")
        sp.add_argument(*flags, *other, dest="strategy", required=True,
                        help="one of " + ", ".join(SCHEMA_STRATEGIES))
    elif stem == "retention":
        sp.add_argument("--time", "-t", required=True,
                        help="how long consumed messages are kept, e.g. 100m, 3h, 2d; -1 = forever")
        sp.add_argument("--size", "-s", required=True,
                        help="how much consumed data is kept, e.g. 10M, 16G; -1 = no limit")
    elif stem == "message-ttl":
        sp.add_argument("--messageTTL", "-ttl", dest="ttl", required=True,
                        help="unacknowledged messages expire after this, e.g. 3600 (s), 1h")
    elif stem == "inactive-topic-policies":
        sp.add_argument("--enable-delete-while-inactive", "-e", dest="enable",
                        action="store_true")
        sp.add_argument("--disable-delete-while-inactive", "-d", dest="disable",
                        action="store_true")
        sp.add_argument("--max-inactive-duration", "-t", dest="max_inactive", default="60s",
                        help="inactivity before deletion, e.g. 1h (default 60s)")
        sp.add_argument("--delete-mode", "-m", dest="delete_mode",
                        default="delete_when_no_subscriptions",
                        choices=admin_names.INACTIVE_TOPIC_DELETE_MODES)
    elif stem == "compaction-threshold":
        sp.add_argument("--threshold", "-t", required=True,
                        help="backlog size that triggers compaction, e.g. 10M, 1G; 0 = off")


def add_parsers(namespaces: Any, topics: Any, schemas: Any) -> None:
    """Declare the commands of :data:`COMMANDS` on the three groups' sub-parsers."""
    for stem, _, _, _ in _TRIOS:
        for level, group, dest, help_ in (("namespaces", namespaces, "namespace",
                                           "tenant/namespace"),
                                          ("topics", topics, "topic", "topic name")):
            for verb in ("set", "get", "remove"):
                sp = group.add_parser(f"{verb}-{stem}", help=f"{verb} the {level[:-1]}'s "
                                      f"{stem.replace('-', ' ')} policy")
                sp.add_argument(dest, help=help_)
                if verb == "set":
                    _set_args(sp, stem, level)
    for group, dest in ((namespaces, "namespace"), (topics, "topic")):
        sq = group.add_parser("set-backlog-quota", help="set a backlog quota")
        sq.add_argument(dest)
        sq.add_argument("--limitSize", "-l", dest="limit_size", help="e.g. 10M, 16G")
        sq.add_argument("--limitTime", "-lt", dest="limit_time", help="e.g. 3600 (s), 1h")
        sq.add_argument("--policy", "-p", required=True,
                        choices=admin_names.BACKLOG_QUOTA_POLICIES)
        sq.add_argument("--type", "-t", default="destination_storage",
                        choices=admin_names.BACKLOG_QUOTA_TYPES)
        group.add_parser("get-backlog-quotas", help="the backlog quotas").add_argument(dest)
        rq = group.add_parser("remove-backlog-quota", help="remove a backlog quota")
        rq.add_argument(dest)
        rq.add_argument("--type", "-t", default="destination_storage",
                        choices=admin_names.BACKLOG_QUOTA_TYPES)
    for name, help_ in (("unload", "unload the topic (clients reconnect)"),
                        ("terminate", "terminate the topic: no more messages"),
                        ("partitioned-terminate", "terminate every partition")):
        topics.add_parser(name, help=help_).add_argument("topic")
    up = topics.add_parser("update-partitioned-topic", help="grow a partitioned topic")
    up.add_argument("topic")
    up.add_argument("--partitions", "-p", type=int, required=True)
    em = topics.add_parser("expire-messages", help="acknowledge messages older than a time")
    em.add_argument("topic")
    em.add_argument("--subscription", "-s")
    em.add_argument("--all-subscriptions", "-a", dest="all_subscriptions", action="store_true")
    em.add_argument("--expireTime", "-t", dest="expire_time", required=True,
                    help="e.g. 3600 (s), 1h")
    for name, help_ in (("compact", "start compacting the topic (PUT .../compaction)"),
                        ("compaction-status", "status of the last compaction run")):
        topics.add_parser(name, help=help_).add_argument("topic")

    get = schemas.add_parser("get", help="the topic's schema (latest, one version or all)")
    get.add_argument("topic")
    get.add_argument("--version", "-v", type=int, help="this schema version")
    get.add_argument("--all-version", "-a", dest="all_versions", action="store_true",
                     help="every live version")
    for name, help_ in (("upload", "register a schema from a JSON file "
                                   '{"type", "schema", "properties"}'),
                        ("compatibility", "test a schema file against the registered ones")):
        sp = schemas.add_parser(name, help=help_)
        sp.add_argument("topic")
        sp.add_argument("--filename", "-f", required=True, help="the schema JSON file")
    sd = schemas.add_parser("delete", help="delete the topic's schema (a deletion marker)")
    sd.add_argument("topic")
    sd.add_argument("--force", "-f", action="store_true", help="delete every version")


def schema_group_help() -> str:
    return "schema registry: get, upload, compatibility, delete"

