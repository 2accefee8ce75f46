"""``horae-admin``: Pulsar's ``pulsar-admin`` command names over Horae's REST API.

Usage: ``horae-admin [--admin-url http://localhost:8080] <group> <command> [args]`` with
groups ``tenants``, ``namespaces``, ``topics``, ``schemas``, ``brokers`` and ``transactions``
(the policy, schema and compaction commands are declared in :mod:`cli.admin.policies`, the
broker ones in :mod:`cli.admin.brokers`, the transaction ones in :mod:`cli.admin.transactions`). Topic arguments accept short names ("t" is
persistent://public/default/t, "tenant/ns/t" too). Durations are ``500ms``, ``30s``, ``10m``,
``1h``, ``2d``, ``1w`` (a bare number is seconds).

Theory of operation: argparse builds a :class:`cli.admin.rest.Request` (method, path,
JSON body) for each command, from argument values parsed by :mod:`cli.admin.args`;
:func:`cli.admin.rest.call` sends it with urllib and this module prints a JSON answer
pretty-printed, a text answer as is, and nothing for 204. Exit codes: 0 success, 1 the server
refused (its ``reason`` goes to stderr) or could not be reached, 2 usage errors (bad
arguments, bad topic names, bad durations), as argparse does. The server's names are not
checked here beyond their shape: it answers a bad one with 412 and its reason.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
from collections.abc import Sequence
from typing import Any, NoReturn

from cli.admin import aliases as alias_commands
from cli.admin import brokers as broker_commands
from cli.admin import entry_filters as entry_filter_commands
from cli.admin import limits as limit_commands
from cli.admin import maintenance as maintenance_commands
from cli.admin import messages as message_commands
from cli.admin import policies as policy_commands
from cli.admin import resource_groups as resource_group_commands
from cli.admin import shadows as shadow_commands
from cli.admin import storage as storage_commands
from cli.admin import transactions as transaction_commands
from cli.admin.args import (
    Builder,
    UsageError,
    namespace_path,
    non_negative_int,
    parse_duration_ms,
    parse_ledger_entry,
    parse_message_id,
    parse_triplet,
    q,
    topic_base,
    topic_path,
)
from cli.admin.auth import AdminAuth, admin_auth
from cli.admin.rest import HttpError, Request, call

DEFAULT_ADMIN_URL = "http://localhost:8080"
#: What argparse reads as a value, not an option: a negative number or duration.
NEGATIVE_VALUE = re.compile(r"^-\d+(\.\d+)?(ms|s|m|h|d|w|y)?$", re.IGNORECASE)
EXIT_HTTP_ERROR = 1
EXIT_USAGE = 2


# --- commands -------------------------------------------------------------------------------
def _policy_body(args: argparse.Namespace) -> dict[str, Any]:
    if args.enable and args.disable:
        raise UsageError("use either --enable or --disable, not both")
    # Only what was given: an absent field is inherited from the next level (namespace or
    # broker config), so --max-delay alone neither resets the tick time nor re-enables a
    # delivery the namespace disabled.
    body: dict[str, Any] = {}
    if args.enable or args.disable:
        body["active"] = bool(args.enable)
    for key, value in (("tickTime", args.time), ("maxDeliveryDelayInMillis", args.max_delay),
                       ("fixedDeliveryDelayInMillis", args.fixed_delay)):
        if value is not None:
            body[key] = parse_duration_ms(value)
    if not body:  # an empty body would store {} and replace the whole policy with nothing
        raise UsageError("nothing to set: give --enable or --disable, --time, --max-delay "
                         "or --fixed-delay (each set replaces this level's whole policy)")
    return body


def _applied(args: argparse.Namespace) -> str:
    return "?applied=true" if args.applied else ""


def _skip_body(args: argparse.Namespace) -> dict[str, Any]:
    triplets = [parse_ledger_entry(m) for m in args.message_ids or ()]
    triplets += [parse_triplet(t) for t in args.triplets or ()]
    encoded = list(args.base64 or ())
    if not triplets and not encoded:
        raise UsageError("give at least one --messageId, --messageId-triplet or "
                         "--messageId-base64")
    if not encoded:
        ids = []
        for ledger, entry, batch in triplets:
            item: dict[str, int] = {"ledgerId": ledger, "entryId": entry}
            if batch is not None:
                item["batchIndex"] = batch
            ids.append(item)
        return {"type": "messageId", "messageIds": ids}
    for value in encoded:
        try:
            base64.b64decode(value, validate=True)
        except ValueError:
            raise UsageError(f"invalid base64 message id {value!r}") from None
    # Mixed forms: one request, so encode the triplets as MessageIdData too.
    for ledger, entry, batch in triplets:
        encoded.append(_encode_message_id(ledger, entry, batch))
    return {"type": "byteArray", "messageIds": encoded}


def _encode_message_id(ledger: int, entry: int, batch: int | None) -> str:
    from protocol import pulsar_pb as pb
    msg = pb.MessageIdData(ledgerId=ledger, entryId=entry)
    if batch is not None:
        msg.batch_index = batch
    return base64.b64encode(msg.SerializeToString()).decode("ascii")


def _cancel_delayed(args: argparse.Namespace) -> Request:
    """PIP-423 ``cancel-delayed-message``: ids in the query, subscriptions repeated."""
    for flag, value, low in (("--ledgerId", args.ledger_id, 0), ("--entryId", args.entry_id, 0),
                             ("--deliverAt", args.deliver_at, 1)):
        if value is not None and value < low:
            raise UsageError(f"{flag} must be >= {low}, not {value}")
    query = [("ledgerId", args.ledger_id), ("entryId", args.entry_id)]
    if args.deliver_at is not None:  # without it the broker reads it from the message
        query.append(("deliverAt", args.deliver_at))
    query += [("subscriptionNames", name) for name in _split(args.subscription_names)]
    return Request("POST", T + topic_path(args.topic) + "/cancelDelayedMessage?"
                   + urllib.parse.urlencode(query))


def _reset_cursor(args: argparse.Namespace) -> Request:
    base = f"/admin/v2/persistent/{topic_path(args.topic)}/subscription/{q(args.subscription)}"
    if bool(args.time) == bool(args.message_id):
        raise UsageError("give exactly one of --time or --messageId")
    if args.time:
        timestamp = int(time.time() * 1000) - parse_duration_ms(args.time)
        return Request("POST", f"{base}/resetcursor/{timestamp}")
    ledger, entry, batch = parse_message_id(args.message_id)
    body: dict[str, Any] = {"ledgerId": ledger, "entryId": entry,
                            "isExcluded": bool(args.exclude_message)}
    if batch is not None:
        body["batchIndex"] = batch
    return Request("POST", f"{base}/resetcursor", body, True)


def _create_subscription(args: argparse.Namespace) -> Request:
    path = (f"/admin/v2/persistent/{topic_path(args.topic)}"
            f"/subscription/{q(args.subscription)}")
    mid = args.message_id.strip().lower()
    if mid == "latest":
        return Request("PUT", path)
    if mid == "earliest":
        return Request("PUT", path, {"ledgerId": -1, "entryId": -1}, True)
    ledger, entry, _ = parse_message_id(args.message_id)
    return Request("PUT", path, {"ledgerId": ledger, "entryId": entry}, True)




def _force(args: argparse.Namespace) -> str:
    return "?force=true" if args.force else ""


def _partitioned_lookup(admin_url: str, args: argparse.Namespace, auth: AdminAuth) -> object:
    path = topic_path(args.topic)
    meta = call(admin_url, Request("GET", f"/admin/v2/persistent/{path}/partitions"), auth)
    n = int(meta.get("partitions", 0)) if isinstance(meta, dict) else 0
    full = "persistent://" + urllib.parse.unquote(path)
    names = [f"{full}-partition-{i}" for i in range(n)] if n else [full]
    out = {}
    for name in names:
        answer = call(admin_url, Request("GET", "/lookup/v2/topic/persistent/"
                                         + topic_path(name)), auth)
        out[name] = answer.get("brokerUrl") if isinstance(answer, dict) else answer
    return out


T = "/admin/v2/persistent/"

_COMMANDS: dict[tuple[str, str], Builder] = {
    **{("brokers", name): (lambda a, path=path: Request("GET", path(a)))  # type: ignore[misc]
       for name, path in broker_commands.PATHS.items()},
    ("clusters", "list"): lambda a: Request("GET", "/admin/v2/clusters"),
    ("tenants", "list"): lambda a: Request("GET", "/admin/v2/tenants"),
    ("tenants", "get"): lambda a: Request("GET", f"/admin/v2/tenants/{q(a.tenant)}"),
    ("tenants", "create"): lambda a: Request(
        "PUT", f"/admin/v2/tenants/{q(a.tenant)}",
        {"adminRoles": _split(a.admin_roles), "allowedClusters": _split(a.allowed_clusters)
         or ["standalone"]}, True),
    ("tenants", "update"): lambda a: Request(
        "POST", f"/admin/v2/tenants/{q(a.tenant)}",
        {"adminRoles": _split(a.admin_roles), "allowedClusters": _split(a.allowed_clusters)
         or ["standalone"]}, True),
    ("tenants", "delete"): lambda a: Request("DELETE", f"/admin/v2/tenants/{q(a.tenant)}"),
    ("namespaces", "list"): lambda a: Request("GET", f"/admin/v2/namespaces/{q(a.tenant)}"),
    ("namespaces", "permissions"): lambda a: Request(
        "GET", f"/admin/v2/namespaces/{namespace_path(a.namespace)}/permissions"),
    ("namespaces", "grant-permission"): lambda a: Request(
        "POST", f"/admin/v2/namespaces/{namespace_path(a.namespace)}/permissions/{q(a.role)}",
        _split(a.actions), True),
    ("namespaces", "revoke-permission"): lambda a: Request(
        "DELETE", f"/admin/v2/namespaces/{namespace_path(a.namespace)}/permissions/{q(a.role)}"),
    ("topics", "permissions"): lambda a: Request("GET", T + topic_path(a.topic) + "/permissions"),
    ("topics", "grant-permission"): lambda a: Request(
        "POST", T + topic_path(a.topic) + f"/permissions/{q(a.role)}", _split(a.actions), True),
    ("topics", "revoke-permission"): lambda a: Request(
        "DELETE", T + topic_path(a.topic) + f"/permissions/{q(a.role)}"),
    ("namespaces", "create"): lambda a: Request(
        "PUT", f"/admin/v2/namespaces/{namespace_path(a.namespace)}"),
    ("namespaces", "delete"): lambda a: Request(
        "DELETE", f"/admin/v2/namespaces/{namespace_path(a.namespace)}"),
    ("namespaces", "set-delayed-delivery"): lambda a: Request(
        "POST", f"/admin/v2/namespaces/{namespace_path(a.namespace)}/delayedDelivery",
        _policy_body(a), True),
    ("namespaces", "get-delayed-delivery"): lambda a: Request(
        "GET", f"/admin/v2/namespaces/{namespace_path(a.namespace)}/delayedDelivery"
        + _applied(a)),
    ("namespaces", "remove-delayed-delivery"): lambda a: Request(
        "DELETE", f"/admin/v2/namespaces/{namespace_path(a.namespace)}/delayedDelivery"),
    # pulsar-admin lists both domains: Pulsar's namespace topics route with mode=ALL
    ("topics", "list"): lambda a: Request(
        "GET", f"/admin/v2/namespaces/{namespace_path(a.namespace)}/topics?mode=ALL"),
    ("topics", "list-partitioned-topics"): lambda a: Request(
        "GET", T + namespace_path(a.namespace) + "/partitioned"),
    ("topics", "create"): lambda a: Request(
        "PUT", topic_base(a.topic), storage_commands.parse_pairs(a.metadata) or None,
        bool(a.metadata)),
    ("topics", "create-partitioned-topic"): lambda a: Request(
        "PUT", topic_base(a.topic) + "/partitions",
        {"partitions": a.partitions, "properties": storage_commands.parse_pairs(a.metadata)}
        if a.metadata else a.partitions, True),
    ("topics", "get-partitioned-topic-metadata"): lambda a: Request(
        "GET", topic_base(a.topic) + "/partitions"),
    ("topics", "delete"): lambda a: Request("DELETE", topic_base(a.topic) + _force(a)),
    ("topics", "delete-partitioned-topic"): lambda a: Request(
        "DELETE", topic_base(a.topic) + "/partitions" + _force(a)),
    ("topics", "stats"): lambda a: Request("GET", topic_base(a.topic) + "/stats"),
    ("topics", "partitioned-stats"): lambda a: Request(
        "GET", topic_base(a.topic) + "/partitioned-stats"
        + ("" if a.per_partition else "?perPartition=false")),
    ("topics", "stats-internal"): lambda a: Request(
        "GET", T + topic_path(a.topic) + "/internalStats"),
    ("topics", "subscriptions"): lambda a: Request(
        "GET", topic_base(a.topic) + "/subscriptions"),
    ("topics", "create-subscription"): _create_subscription,
    ("topics", "unsubscribe"): lambda a: Request(
        "DELETE", topic_base(a.topic) + f"/subscription/{q(a.subscription)}" + _force(a)),
    ("topics", "skip"): lambda a: Request(
        "POST", T + topic_path(a.topic) + f"/subscription/{q(a.subscription)}/skip/{a.count}"),
    ("topics", "skip-all"): lambda a: Request(
        "POST", T + topic_path(a.topic) + f"/subscription/{q(a.subscription)}/skip_all"),
    ("topics", "clear-backlog"): lambda a: Request(
        "POST", T + topic_path(a.topic) + f"/subscription/{q(a.subscription)}/skip_all"),
    ("topics", "reset-cursor"): _reset_cursor,
    ("topics", "skip-messages"): lambda a: Request(
        "POST", T + topic_path(a.topic) + f"/subscription/{q(a.subscription)}/skipByMessageIds",
        _skip_body(a), True),
    ("topics", "cancel-delayed-message"): _cancel_delayed,
    ("topics", "list-delayed-messages"): lambda a: _delayed_view(a, "", [
        ("limit", a.limit), ("after", a.after)]),
    ("topics", "delayed-histogram"): lambda a: _delayed_view(a, "/histogram", [
        ("boundsMs", ",".join(str(parse_duration_ms(b)) for b in _split(a.bounds))
         if a.bounds else None)]),
    ("topics", "set-delayed-delivery"): lambda a: Request(
        "POST", T + topic_path(a.topic) + "/delayedDelivery", _policy_body(a), True),
    ("topics", "get-delayed-delivery"): lambda a: Request(
        "GET", T + topic_path(a.topic) + "/delayedDelivery" + _applied(a)),
    ("topics", "remove-delayed-delivery"): lambda a: Request(
        "DELETE", T + topic_path(a.topic) + "/delayedDelivery"),
    ("topics", "lookup"): lambda a: Request("GET", "/lookup/v2/topic/persistent/"
                                            + topic_path(a.topic)),
}
_COMMANDS.update(policy_commands.COMMANDS)
_COMMANDS.update(limit_commands.COMMANDS)
_COMMANDS.update(maintenance_commands.COMMANDS)
_COMMANDS.update(storage_commands.COMMANDS)
_COMMANDS.update(alias_commands.aliased(_COMMANDS))
_COMMANDS.update({("brokers", name): build for name, build in broker_commands.CHANGES.items()})
_COMMANDS.update(transaction_commands.COMMANDS)
_COMMANDS.update(resource_group_commands.COMMANDS)
_COMMANDS.update(entry_filter_commands.COMMANDS)
_COMMANDS.update(shadow_commands.COMMANDS)
_COMMANDS.update({
    (group, "delete"): lambda a: Request("DELETE", T + topic_path(a.topic) + "/policies")
    for group in ("topic-policies", "topicPolicies")})


def _delayed_view(args: argparse.Namespace, tail: str,
                  query: list[tuple[str, object]]) -> Request:
    """The scheduled-messages listing and histogram of one subscription (GET, query given)."""
    given = [(k, v) for k, v in query if v is not None]
    return Request("GET", T + topic_path(args.topic)
                   + f"/subscription/{q(args.subscription)}/delayedMessages" + tail
                   + ("?" + urllib.parse.urlencode(given) if given else ""))


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


# --- argument parsing -----------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A negative duration ("-1h", "-30s") is a value, as a negative number is: pulsar-admin
        # accepts them where it accepts a relative time.
        self._negative_number_matcher = NEGATIVE_VALUE

    def error(self, message: str) -> NoReturn:   # argparse exits 2 on usage errors, as we want
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


#: The help line of the commands declared without one, by (group, command).
_HELP: dict[tuple[str, str], str] = {
    ("clusters", "list"): "the clusters (this broker's)",
    ("topics", "list-delayed-messages"): "a subscription's scheduled messages by due time, a "
                                         "page at a time",
    ("topics", "delayed-histogram"): "a subscription's pending delayed messages counted by due "
                                     "time",
    ("tenants", "list"): "the tenants",
    ("tenants", "get"): "a tenant's admin roles and allowed clusters",
    ("tenants", "delete"): "delete an empty tenant",
    ("tenants", "create"): "create a tenant",
    ("tenants", "update"): "replace a tenant's admin roles and allowed clusters",
    ("namespaces", "list"): "the namespaces of a tenant",
    ("namespaces", "permissions"): "the roles granted on a namespace",
    ("namespaces", "grant-permission"): "grant a role actions on a namespace",
    ("namespaces", "revoke-permission"): "revoke a role's actions on a namespace",
    ("namespaces", "create"): "create a namespace",
    ("namespaces", "delete"): "delete an empty namespace",
    ("namespaces", "get-delayed-delivery"): "the namespace's delayed-delivery policy",
    ("namespaces", "remove-delayed-delivery"): "remove the namespace's delayed-delivery policy",
    ("namespaces", "set-delayed-delivery"): "set the namespace's delayed-delivery policy",
    ("topics", "list"): "the topics of a namespace (both domains, partitions listed)",
    ("topics", "list-partitioned-topics"): "the partitioned topics of a namespace",
    ("topics", "permissions"): "the roles granted on a topic",
    ("topics", "grant-permission"): "grant a role actions on a topic",
    ("topics", "revoke-permission"): "revoke a role's actions on a topic",
    ("topics", "create"): "create a non-partitioned topic",
    ("topics", "stats"): "a topic's stats",
    ("topics", "stats-internal"): "a topic's internal stats (ledgers, cursors)",
    ("topics", "subscriptions"): "a topic's subscriptions",
    ("topics", "lookup"): "the broker serving a topic",
    ("topics", "partitioned-lookup"): "the broker serving each partition",
    ("topics", "get-partitioned-topic-metadata"): "a topic's partition count",
    ("topics", "remove-delayed-delivery"): "remove the topic's delayed-delivery policy",
    ("topics", "partitioned-stats"): "a partitioned topic's stats, summed",
    ("topics", "get-delayed-delivery"): "the topic's delayed-delivery policy",
    ("topics", "delete"): "delete a topic",
    ("topics", "delete-partitioned-topic"): "delete a partitioned topic and its partitions",
    ("topics", "create-partitioned-topic"): "create a partitioned topic",
    ("topics", "create-subscription"): "create a subscription at a position",
    ("topics", "unsubscribe"): "delete a subscription",
    ("topics", "skip"): "skip the next N messages of a subscription",
    ("topics", "skip-all"): "skip every message of a subscription",
    ("topics", "clear-backlog"): "skip every message of a subscription",
    ("topics", "reset-cursor"): "move a subscription to a time or a message id",
    ("topics", "skip-messages"): "acknowledge messages by id on a subscription (PIP-423)",
    ("topics", "set-delayed-delivery"): "set the topic's delayed-delivery policy",
}


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Lists every command in ``GROUP --help`` with its help line (from :data:`_HELP` when
    the declaration gives none)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        group = self._prog_prefix.split()[-1]
        kwargs.setdefault("help", _HELP.get((group, name), ""))
        parser: argparse.ArgumentParser = super().add_parser(name, **kwargs)
        return parser


#: The top-level options that take a value (the scan for the group a command line names).
_TOP_OPTIONS_WITH_VALUE = frozenset({"--admin-url", "--admin-service-url", "--auth-plugin",
                                     "--auth-params", "--token", "--tls-trust-cert-path"})
#: Every group and its other names (a test checks them against the parser).
_GROUP_NAMES = frozenset({"brokers", "clusters", "tenants", "namespaces", "topics", "schemas",
                          "topic-policies", "topicPolicies", "transactions", "resourcegroups"})
#: Groups whose commands are declared from another group's (topic-policies mirrors topics).
_GROUPS_ALSO_BUILT = {"topic-policies": ("topics",), "topicPolicies": ("topic-policies", "topics")}


def _named_group(argv: Sequence[str]) -> str | None:
    """The group a command line names (its first word that is neither a top-level option nor
    the value of one); None when it names none."""
    words = iter(argv)
    for word in words:
        if word in _TOP_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


class _Unused:
    """Takes the place of the command list of a group the command line does not name, and of
    everything declared on it. Declaring every command builds over 400 argparse parsers, most
    of ``horae-admin``'s start-up time; a command line needs only its own group's."""

    class _Choices(dict[str, Any]):
        def __contains__(self, key: object) -> bool:
            return True

        def __missing__(self, key: str) -> _Unused:
            return _Unused()

        def get(self, key: str, default: Any = None) -> _Unused:
            return _Unused()

    choices = _Choices()

    def __getattr__(self, name: str) -> Any:
        return self._declare

    def _declare(self, *args: Any, **kwargs: Any) -> _Unused:
        return self


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; given *argv*, only the commands of the group it names are
    declared (every group is still listed), unless it names no known group."""
    p = _Parser(prog="horae-admin", description="Administer a Horae broker (pulsar-admin style).")
    p.add_argument("--admin-url", "--admin-service-url",
                   default=os.environ.get("HORAE_ADMIN_URL", DEFAULT_ADMIN_URL),
                   help=f"admin REST API base URL (default {DEFAULT_ADMIN_URL}, "
                        "or $HORAE_ADMIN_URL)")
    p.add_argument("--auth-plugin", help="Pulsar client auth plugin class (AuthenticationToken, "
                   "AuthenticationBasic, AuthenticationTls) or token/basic/tls")
    p.add_argument("--auth-params", help="the plugin's parameters (token:<jwt>, file:///path, "
                   '{"userId":...,"password":...}, tlsCertFile:...,tlsKeyFile:...)')
    p.add_argument("--token", help="a JWT (short for the token plugin)")
    p.add_argument("--tls-trust-cert-path", help="CA file trusted for an https:// admin URL")
    p.add_argument("--tls-allow-insecure", action="store_true",
                   help="accept any server certificate (testing only)")
    groups = p.add_subparsers(dest="group", required=True, metavar="GROUP",
                              parser_class=_Parser)

    named = _named_group(argv) if argv is not None else None
    wanted = {named, *_GROUPS_ALSO_BUILT.get(named or "", ())} if named in _GROUP_NAMES else None

    def group(name: str, help_: str, aliases: Sequence[str] = ()) -> Any:
        parser = groups.add_parser(name, help=help_, aliases=aliases)
        if wanted is not None and name not in wanted:
            return _Unused()
        return parser.add_subparsers(
            dest="command", required=True, metavar="COMMAND", parser_class=_Parser,
            action=_Commands)

    broker_commands.add_parsers(group("brokers", "broker health check, brokers list, leader"))
    c = group("clusters", "clusters")
    c.add_parser("list")

    t = group("tenants", "tenants")
    t.add_parser("list")
    for name in ("get", "delete"):
        t.add_parser(name).add_argument("tenant")
    for name in ("create", "update"):
        tc = t.add_parser(name)
        tc.add_argument("tenant")
        tc.add_argument("--admin-roles", "-r", default="")
        tc.add_argument("--allowed-clusters", "-c", default="")

    n = group("namespaces", "namespaces, their permissions and policies")
    n.add_parser("list").add_argument("tenant")
    n.add_parser("permissions").add_argument("namespace", help="tenant/namespace")
    for name in ("grant-permission", "revoke-permission"):
        gp = n.add_parser(name)
        gp.add_argument("namespace", help="tenant/namespace")
        gp.add_argument("--role", required=True)
        if name == "grant-permission":
            gp.add_argument("--actions", required=True, help="comma-separated: produce,consume")
    for name in ("create", "delete", "get-delayed-delivery", "remove-delayed-delivery"):
        sp = n.add_parser(name)
        sp.add_argument("namespace", help="tenant/namespace")
        if name == "get-delayed-delivery":
            sp.add_argument("--applied", "-ap", action="store_true",
                            help="the effective policy (namespace over broker defaults)")
    _policy_args(n.add_parser("set-delayed-delivery"), "namespace", "tenant/namespace")

    tp = group("topics", "topics, subscriptions, compaction and policies")
    for name in ("list", "list-partitioned-topics"):
        tp.add_parser(name).add_argument("namespace", help="tenant/namespace")
    tp.add_parser("permissions").add_argument("topic")
    for name in ("grant-permission", "revoke-permission"):
        gp = tp.add_parser(name)
        gp.add_argument("topic")
        gp.add_argument("--role", required=True)
        if name == "grant-permission":
            gp.add_argument("--actions", required=True, help="comma-separated: produce,consume")
    cr = tp.add_parser("create")
    cr.add_argument("topic")
    cr.add_argument("--metadata", "-m", action="append",
                    help="a property of the topic, key=value (repeatable)")
    for name in ("stats", "stats-internal", "subscriptions", "lookup",
                 "partitioned-lookup", "get-partitioned-topic-metadata",
                 "remove-delayed-delivery"):
        tp.add_parser(name).add_argument("topic")
    ps = tp.add_parser("partitioned-stats")
    ps.add_argument("topic")
    ps.add_argument("--per-partition", action="store_true")
    gd = tp.add_parser("get-delayed-delivery")
    gd.add_argument("topic")
    gd.add_argument("--applied", "-ap", action="store_true",
                    help="the effective policy after topic > namespace > broker precedence")
    for name in ("delete", "delete-partitioned-topic"):
        sp = tp.add_parser(name)
        sp.add_argument("topic")
        sp.add_argument("--force", "-f", action="store_true")
    cp = tp.add_parser("create-partitioned-topic")
    cp.add_argument("topic")
    cp.add_argument("--partitions", "-p", type=int, required=True)
    cp.add_argument("--metadata", "-m", action="append",
                    help="a property of the topic, key=value (repeatable)")

    def sub_cmd(name: str) -> argparse.ArgumentParser:
        sp: argparse.ArgumentParser = tp.add_parser(name)
        sp.add_argument("topic")
        sp.add_argument("--subscription", "-s", required=True)
        return sp

    cs = sub_cmd("create-subscription")
    cs.add_argument("--messageId", "-m", dest="message_id", default="latest",
                    help="latest (default), earliest or ledgerId:entryId")
    sub_cmd("unsubscribe").add_argument("--force", "-f", action="store_true")
    sub_cmd("skip").add_argument("--count", "-n", type=non_negative_int, required=True)
    sub_cmd("skip-all")
    sub_cmd("clear-backlog")
    rc = sub_cmd("reset-cursor")
    rc.add_argument("--time", "-t", help="reset to this long ago (e.g. 10m, 1h)")
    rc.add_argument("--messageId", "-m", dest="message_id", help="ledgerId:entryId")
    rc.add_argument("--exclude-message", "-e", action="store_true",
                    help="start just after --messageId")
    ld = sub_cmd("list-delayed-messages")
    ld.add_argument("--limit", "-n", type=non_negative_int, default=None,
                    help="messages per page (server default 100, at most 1000)")
    ld.add_argument("--after", "-a", default=None,
                    help="deliverAt:ledgerId:entryId, the 'next' of the previous page")
    sub_cmd("delayed-histogram").add_argument(
        "--bounds", "-b", default=None,
        help="comma-separated bin bounds from now (e.g. 1m,1h,1d; default 1s to 30d)")
    sm = sub_cmd("skip-messages")
    sm.add_argument("--messageId", "-m", dest="message_ids", action="append",
                    help="ledgerId=entryId (PIP-423; repeatable)")
    sm.add_argument("--messageId-triplet", dest="triplets", action="append",
                    help="ledgerId:entryId:batchIndex, batchIndex -1 for the whole entry "
                    "(repeatable)")
    sm.add_argument("--messageId-base64", dest="base64", action="append",
                    help="base64 MessageIdData, as MessageId.serialize() (repeatable)")
    cd = tp.add_parser("cancel-delayed-message",
                       help="cancel a scheduled message (PIP-423); it is also acknowledged")
    cd.add_argument("topic")
    cd.add_argument("--ledgerId", "-l", dest="ledger_id", type=int, required=True)
    cd.add_argument("--entryId", "-e", dest="entry_id", type=int, required=True)
    cd.add_argument("--deliverAt", "-t", dest="deliver_at", type=int, default=None,
                    help="the message's deliver time, epoch milliseconds (checked when given; "
                         "default: read from the message)")
    cd.add_argument("--subscriptionNames", "-s", dest="subscription_names", default="",
                    help="comma-separated subscriptions (default: every Shared or Key_Shared)")
    _policy_args(tp.add_parser("set-delayed-delivery"), "topic", "topic name")
    policy_commands.add_parsers(n, tp, group("schemas", policy_commands.schema_group_help()))
    maintenance_commands.add_parsers(tp, n)
    topic_policies = group("topic-policies", "a topic's limit and rate policies (as under topics)",
                           aliases=["topicPolicies"])
    limit_commands.add_parsers(n, tp, topic_policies)
    storage_commands.add_parsers(n, tp, topic_policies)
    alias_commands.add_parsers(n, tp)
    alias_commands.mirror_topic_policies(tp, topic_policies)
    dp = topic_policies.add_parser("delete", help="delete all of a topic's policies")
    dp.add_argument("topic", help="topic name")
    dp.add_argument("--global", "-g", dest="global_", action="store_true",
                    help="the global policies (one level here: the same)")
    message_commands.add_parsers(tp)
    shadow_commands.add_parsers(tp)
    transaction_commands.add_parsers(group(
        "transactions", "transaction coordinator, buffer and pending-ack stats"))
    resource_group_commands.add_parsers(
        group("resourcegroups", "resource groups: publish and dispatch quotas of namespaces"), n)
    entry_filter_commands.add_parsers(n)
    return p


def _policy_args(sp: argparse.ArgumentParser, dest: str, help_: str) -> None:
    sp.add_argument(dest, help=help_)
    sp.add_argument("--time", "-t",
                    help="tick time: delivery precision, e.g. 1s (default: inherited)")
    sp.add_argument("--max-delay", "--maxDelay", "-md", dest="max_delay",
                    help="max delivery delay, e.g. 10m (PIP-315); 0 = no limit "
                         "(default: inherited)")
    sp.add_argument("--fixed-delay", "--fixedDelay", "-fd", dest="fixed_delay",
                    help="fixed delivery delay applied to every message, e.g. 30s (PIP-437); "
                         "0 = none (default: inherited)")
    sp.add_argument("--enable", "-e", action="store_true", help="enable delayed delivery")
    sp.add_argument("--disable", "-d", action="store_true", help="disable delayed delivery")


def _print(result: object, *, getter: bool = False) -> None:
    """The answer as JSON; a getter with nothing set prints ``null`` as pulsar-admin does."""
    if result is None:
        if getter:
            print("null")
        return
    if isinstance(result, str):
        print(result)
    else:
        print(json.dumps(result, indent=2, sort_keys=False))


def _check_admin_url(admin_url: str) -> None:
    """``--admin-url`` is a URL with a scheme: ``localhost:8080`` alone is refused clearly
    (urllib would read ``localhost`` as the scheme)."""
    parsed = urllib.parse.urlsplit(admin_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UsageError(f"invalid --admin-url {admin_url!r}: give a URL with its scheme, "
                         f"e.g. http://{admin_url.split('://')[-1] or 'localhost:8080'}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    admin_url = args.admin_url
    try:
        try:
            auth = admin_auth(auth_plugin=args.auth_plugin, auth_params=args.auth_params,
                              token=args.token, tls_trust_cert_path=args.tls_trust_cert_path,
                              tls_allow_insecure=args.tls_allow_insecure,
                              https=admin_url.startswith("https:"))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        _check_admin_url(admin_url)
        runner = message_commands.RUNNERS.get((args.group, args.command))
        shadow_runner = shadow_commands.RUNNERS.get((args.group, args.command))
        if runner is not None:
            result: object = runner(admin_url, args, auth)
        elif shadow_runner is not None:
            result = shadow_runner(admin_url, args, auth)
        elif (args.group, args.command) == ("topics", "partitioned-lookup"):
            result = _partitioned_lookup(admin_url, args, auth)
        else:
            build = _COMMANDS.get((args.group, args.command))
            if build is None:   # topic-policies commands mirrored from topics
                build = _COMMANDS[("topics", args.command)]
            result = call(admin_url, build(args), auth)
    except UsageError as exc:
        print(f"horae-admin: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except HttpError as exc:
        print(f"horae-admin: error: {exc.reason} (HTTP {exc.status})", file=sys.stderr)
        return EXIT_HTTP_ERROR
    except urllib.error.URLError as exc:
        why = exc.reason
        if isinstance(why, ConnectionRefusedError):
            text = "connection refused (is the broker running? check --admin-url)"
        else:
            text = str(why)
        print(f"horae-admin: error: cannot reach the admin API at {admin_url}: {text}",
              file=sys.stderr)
        return EXIT_HTTP_ERROR
    except (TimeoutError, ConnectionError) as exc:
        print(f"horae-admin: error: cannot reach the admin API at {admin_url}: {exc}",
              file=sys.stderr)
        return EXIT_HTTP_ERROR
    try:
        _print(result, getter=args.command.startswith("get-"))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`horae-admin ... | head`): not an error of the admin API.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
