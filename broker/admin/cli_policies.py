"""``horae-admin`` commands for schemas, compaction and the namespace/topic policies.

Theory of operation: pulsar-admin's names and flags, each a builder
``argparse.Namespace -> Request`` in :data:`COMMANDS`, keyed ``(group, command)``;
:func:`add_parsers` declares their arguments on the ``namespaces``, ``topics`` and ``schemas``
sub-parsers :mod:`broker.admin.cli` creates. A policy is a trio ``set-X`` / ``get-X`` /
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

from broker.admin.cli_common import (
    Builder,
    Request,
    UsageError,
    namespace_path,
    parse_size_bytes,
    topic_base,
    topic_path,
)

__all__ = ["COMMANDS", "add_parsers"]

SCHEMA_STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
                     "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE", "UNDEFINED")


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


# A policy known at both levels: (command stem, namespace suffix, topic suffix, body builder).
_TRIOS: list[tuple[str, str, str, Any]] = [
    ("deduplication", "deduplication", "deduplicationEnabled", _enable_flag),
    ("schema-compatibility-strategy", "schemaCompatibilityStrategy",
     "schemaCompatibilityStrategy", lambda a: _strategy(a.strategy)),
    ("compaction-threshold", "compactionThreshold", "compactionThreshold", _threshold),
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
    elif stem == "schema-compatibility-strategy":
        flags = ("--compatibility", "-c") if level == "namespaces" else ("--strategy", "-s")
        other = ("--strategy", "-s") if level == "namespaces" else ("--compatibility", "-c")
        sp.add_argument(*flags, *other, dest="strategy", required=True,
                        help="one of " + ", ".join(SCHEMA_STRATEGIES))
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

