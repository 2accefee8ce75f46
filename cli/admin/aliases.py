"""pulsar-admin's other names for ``horae-admin`` commands, and its small commands over existing routes.

Theory of operation: pulsar-admin keeps deprecated and alternative names
(``topics set-maxProducers``, ``set-max-subscriptions``, ``set-max-unacked-messages-per-consumer``
beside ``...-on-consumer``, ``get-deduplication-enabled``); :data:`ALIASES` maps each to the
command it names, so both parse and send the same request. :data:`EXTRA` adds the commands
whose REST route Horae serves but which had no command (auto-creation overrides, subscription
permissions, schema validation, subscription properties, the namespace's topics, policies and
bundles, a topic's bundle range, partitioned internal stats). :func:`mirror_topic_policies`
then declares under ``topic-policies`` (alias ``topicPolicies``) every policy command
pulsar-admin has there that ``topics`` has: Horae keeps one level of topic policies, so both
groups send the same requests.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cli.admin.args import Builder, UsageError, namespace_path, q, topic_base
from cli.admin.rest import Request
from cli.admin.storage import parse_pairs

__all__ = ["EXTRA", "TOPIC_POLICY_COMMANDS", "add_parsers", "aliased", "mirror_topic_policies"]

#: (group, alias) -> the command it names
ALIASES: dict[tuple[str, str], str] = {
    **{("topics", f"{verb}-maxProducers"): f"{verb}-max-producers"
       for verb in ("get", "set", "remove")},
    **{("topics", f"{verb}-max-subscriptions"): f"{verb}-max-subscriptions-per-topic"
       for verb in ("get", "set", "remove")},
    **{("topics", f"{verb}-max-unacked-messages-per-{what}"):
       f"{verb}-max-unacked-messages-on-{what}"
       for verb in ("get", "set", "remove") for what in ("consumer", "subscription")},
    ("topics", "get-deduplication-enabled"): "get-deduplication",
    ("topics", "get-backlog-quota"): "get-backlog-quotas",
}

#: pulsar-admin's ``topicPolicies`` commands (those ``topics`` also has in Horae are mirrored)
TOPIC_POLICY_COMMANDS = tuple(
    f"{verb}-{stem}" for stem in (
        "message-ttl", "max-unacked-messages-per-consumer", "max-consumers-per-subscription",
        "subscription-types-enabled", "retention", "backlog-quota", "max-producers",
        "max-message-size", "deduplication", "deduplication-snapshot-interval", "persistence",
        "subscription-dispatch-rate", "replicator-dispatch-rate", "publish-rate",
        "compaction-threshold", "subscribe-rate", "max-consumers", "delayed-delivery",
        "dispatch-rate", "offload-policies", "max-unacked-messages-per-subscription",
        "inactive-topic-policies", "max-subscriptions-per-topic", "schema-compatibility-strategy",
        "auto-subscription-creation", "replication-clusters",
        "dispatcher-pause-on-ack-state-persistent")
    for verb in ("get", "set", "remove"))


def _ns(a: argparse.Namespace) -> str:
    return f"/admin/v2/namespaces/{namespace_path(a.namespace)}"


RequestOf = Callable[[argparse.Namespace], Request]


def _read(where: Callable[[argparse.Namespace], str], suffix: str) -> RequestOf:
    """GET of *suffix* under the namespace's or topic's path (*where*)."""
    return lambda a: Request("GET", where(a) + suffix)


def _remove(where: Callable[[argparse.Namespace], str], suffix: str) -> RequestOf:
    """DELETE of *suffix* under the namespace's or topic's path (*where*)."""
    return lambda a: Request("DELETE", where(a) + suffix)


def _flag(where: Callable[[argparse.Namespace], str], suffix: str) -> RequestOf:
    """POST of the ``--enable``/``--disable`` flag to *suffix* under *where*'s path."""
    return lambda a: Request("POST", where(a) + suffix, a.enable, True)


def _auto_topic_creation(a: argparse.Namespace) -> Request:
    body: dict[str, Any] = {"allowAutoTopicCreation": a.enable}
    if a.enable:
        body["topicType"] = a.type
        if a.type == "partitioned":
            body["defaultNumPartitions"] = a.num_partitions
    return Request("POST", _ns(a) + "/autoTopicCreation", body, True)


def _update_subscription_properties(a: argparse.Namespace) -> Request:
    values = {} if a.clear else parse_pairs(a.property)
    return Request("PUT", f"{topic_base(a.topic)}/subscription/{q(a.subscription)}/properties",
                   values, True)


def _auto_subscription(base: Callable[[argparse.Namespace], str]) -> Builder:
    return lambda a: Request("POST", base(a) + "/autoSubscriptionCreation",
                             {"allowAutoSubscriptionCreation": a.enable}, True)


def _topic(a: argparse.Namespace) -> str:
    return topic_base(a.topic)


#: (group, name) -> (help, extra arguments, the request)
EXTRA: dict[tuple[str, str], tuple[str, Callable[[argparse.ArgumentParser], None], Builder]] = {}


def _no_args(sp: argparse.ArgumentParser) -> None:
    return None


def _applied_arg(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--applied", "-ap", action="store_true",
                    help="the value in force (topic over namespace over broker)")


_PAUSE = "/dispatcherPauseOnAckStatePersistent"


def _dispatcher_pause(group: str, where: Callable[[argparse.Namespace], str]) -> dict[
        str, tuple[str, Callable[[argparse.ArgumentParser], None], Builder]]:
    """``set-``/``get-``/``remove-dispatcher-pause-on-ack-state-persistent``."""
    whose = "namespace's" if group == "namespaces" else "topic's"
    topic = group != "namespaces"
    return {
        "set": (f"pause dispatch while the {whose} acknowledgement state could not be "
                "persisted whole", _no_args, lambda a: Request("POST", where(a) + _PAUSE)),
        "get": (f"whether the {whose} dispatch pauses on unpersistable acknowledgement state",
                _applied_arg if topic else _no_args,
                lambda a: Request("GET", where(a) + _PAUSE
                                  + ("?applied=true" if getattr(a, "applied", False) else ""))),
        "remove": (f"remove the {whose} dispatcher-pause-on-ack-state policy", _no_args,
                   lambda a: Request("DELETE", where(a) + _PAUSE)),
    }


def _enable_arg(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--enable", "-e", action="store_true", help="enable (default: disable)")


def _atc_args(sp: argparse.ArgumentParser) -> None:
    group = sp.add_mutually_exclusive_group(required=True)
    group.add_argument("--enable", "-e", dest="enable", action="store_true",
                       help="topics may be created automatically")
    group.add_argument("--disable", "-d", dest="enable", action="store_false",
                       help="topics are not created automatically")
    sp.add_argument("--type", "-t", default="non-partitioned",
                    choices=("partitioned", "non-partitioned"), help="what is created")
    sp.add_argument("--num-partitions", "-n", type=int, default=None,
                    help="partitions of an automatically created partitioned topic")


def _enable_disable_args(sp: argparse.ArgumentParser) -> None:
    group = sp.add_mutually_exclusive_group(required=True)
    group.add_argument("--enable", "-e", dest="enable", action="store_true", help="enable")
    group.add_argument("--disable", "-d", dest="enable", action="store_false", help="disable")


def _autoupdate_strategy_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--compatibility", "-c", default=None,
                    help="compatibility required of new schemas a producer brings "
                         "(Full, Backward, Forward, None)")
    sp.add_argument("--disabled", "-d", action="store_true",
                    help="disable automatic schema updates")


#: pulsar-admin's --compatibility values of set-schema-autoupdate-strategy
_AUTOUPDATE = {"FULL": "Full", "BACKWARD": "Backward", "FORWARD": "Forward",
               "NONE": "AlwaysCompatible"}


def _autoupdate_strategy(a: argparse.Namespace) -> Request:
    if a.disabled:
        strategy = "AutoUpdateDisabled"
    elif (a.compatibility or "").upper() in _AUTOUPDATE:
        strategy = _AUTOUPDATE[a.compatibility.upper()]
    else:
        raise UsageError("Either --compatibility or --disabled must be specified")
    return Request("PUT", _ns(a) + "/schemaAutoUpdateCompatibilityStrategy", strategy, True)


def _auth_mode_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--subscription-auth-mode", "-m", dest="mode", required=True,
                    choices=("None", "Prefix"),
                    help="Prefix: a role may only use subscriptions named <role>-...")


def _sub_permission_args(grant: bool) -> Callable[[argparse.ArgumentParser], None]:
    def add(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--subscription", "-s", required=True, help="the subscription")
        if grant:
            sp.add_argument("--roles", "-rs", required=True, help="comma-separated roles")
        else:
            sp.add_argument("--role", "-r", required=True, help="the role")
    return add


def _sub_properties_args(update: bool) -> Callable[[argparse.ArgumentParser], None]:
    def add(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--subscription", "-s", required=True, help="the subscription")
        if update:
            sp.add_argument("--property", "-p", action="append", help="key=value (repeatable)")
            sp.add_argument("--clear", "-c", action="store_true", help="remove every property")
    return add


EXTRA.update({
    ("namespaces", "topics"): ("the namespace's topics", _no_args,
                               _read(_ns, "/topics")),
    ("namespaces", "policies"): ("the namespace's policies document", _no_args,
                                 lambda a: Request("GET", _ns(a))),
    ("namespaces", "bundles"): ("the namespace's bundles (one: the whole hash range)", _no_args,
                                _read(_ns, "/bundles")),
    ("namespaces", "set-auto-topic-creation"): (
        "set the namespace's auto topic creation override", _atc_args, _auto_topic_creation),
    ("namespaces", "get-auto-topic-creation"): (
        "the namespace's auto topic creation override", _no_args,
        _read(_ns, "/autoTopicCreation")),
    ("namespaces", "remove-auto-topic-creation"): (
        "remove the namespace's auto topic creation override", _no_args,
        _remove(_ns, "/autoTopicCreation")),
    ("namespaces", "set-auto-subscription-creation"): (
        "set the namespace's auto subscription creation override", _enable_arg,
        _auto_subscription(_ns)),
    ("namespaces", "get-auto-subscription-creation"): (
        "the namespace's auto subscription creation override", _no_args,
        _read(_ns, "/autoSubscriptionCreation")),
    ("namespaces", "remove-auto-subscription-creation"): (
        "remove the namespace's auto subscription creation override", _no_args,
        _remove(_ns, "/autoSubscriptionCreation")),
    ("namespaces", "get-schema-validation-enforce"): (
        "whether producers without a schema are refused", _no_args,
        _read(_ns, "/schemaValidationEnforced")),
    ("namespaces", "set-schema-validation-enforce"): (
        "refuse producers without a schema on topics with one", _enable_arg,
        _flag(_ns, "/schemaValidationEnforced")),
    ("namespaces", "get-is-allow-auto-update-schema"): (
        "whether producers may register new schemas", _no_args,
        _read(_ns, "/isAllowAutoUpdateSchema")),
    ("namespaces", "set-is-allow-auto-update-schema"): (
        "allow or refuse producers registering new schemas", _enable_disable_args,
        _flag(_ns, "/isAllowAutoUpdateSchema")),
    ("namespaces", "get-schema-autoupdate-strategy"): (
        "the schema auto-update strategy", _no_args,
        _read(_ns, "/schemaAutoUpdateCompatibilityStrategy")),
    ("namespaces", "set-schema-autoupdate-strategy"): (
        "set the schema auto-update strategy", _autoupdate_strategy_args, _autoupdate_strategy),
    ("namespaces", "get-encryption-required"): (
        "whether producers must encrypt messages", _no_args,
        _read(_ns, "/encryptionRequired")),
    ("namespaces", "set-encryption-required"): (
        "require (or not) producers to encrypt messages", _enable_disable_args,
        _flag(_ns, "/encryptionRequired")),
    ("namespaces", "get-subscription-auth-mode"): (
        "the subscription auth mode (None or Prefix)", _no_args,
        _read(_ns, "/subscriptionAuthMode")),
    ("namespaces", "set-subscription-auth-mode"): (
        "set the subscription auth mode", _auth_mode_args,
        lambda a: Request("POST", _ns(a) + "/subscriptionAuthMode", a.mode, True)),
    ("namespaces", "subscription-permission"): (
        "the roles allowed on each subscription", _no_args,
        _read(_ns, "/permissions/subscription")),
    ("namespaces", "grant-subscription-permission"): (
        "allow roles on a subscription", _sub_permission_args(True),
        lambda a: Request("POST", f"{_ns(a)}/permissions/subscription/{q(a.subscription)}",
                          [r.strip() for r in a.roles.split(",") if r.strip()], True)),
    ("namespaces", "revoke-subscription-permission"): (
        "remove a role from a subscription", _sub_permission_args(False),
        lambda a: Request("DELETE",
                          f"{_ns(a)}/permissions/{q(a.subscription)}/{q(a.role)}")),
    ("topics", "set-auto-subscription-creation"): (
        "set the topic's auto subscription creation override", _enable_arg,
        _auto_subscription(_topic)),
    ("topics", "get-auto-subscription-creation"): (
        "the topic's auto subscription creation override", _no_args,
        _read(_topic, "/autoSubscriptionCreation")),
    ("topics", "remove-auto-subscription-creation"): (
        "remove the topic's auto subscription creation override", _no_args,
        _remove(_topic, "/autoSubscriptionCreation")),
    **{(group, f"{verb}-dispatcher-pause-on-ack-state-persistent"): entry
       for group, where in (("namespaces", _ns), ("topics", _topic))
       for verb, entry in _dispatcher_pause(group, where).items()},
    ("topics", "get-schema-validation-enforce"): (
        "whether producers without a schema are refused", _no_args,
        _read(_topic, "/schemaValidationEnforced")),
    ("topics", "set-schema-validation-enforce"): (
        "refuse producers without a schema", _enable_arg,
        _flag(_topic, "/schemaValidationEnforced")),
    ("topics", "enable-deduplication"): (
        "enable deduplication (deprecated: set-deduplication --enable)", _no_args,
        lambda a: Request("POST", _topic(a) + "/deduplicationEnabled", True, True)),
    ("topics", "disable-deduplication"): (
        "disable deduplication (deprecated: set-deduplication --disable)", _no_args,
        lambda a: Request("POST", _topic(a) + "/deduplicationEnabled", False, True)),
    ("topics", "get-subscription-properties"): (
        "a subscription's properties", _sub_properties_args(False),
        lambda a: Request("GET", f"{_topic(a)}/subscription/{q(a.subscription)}/properties")),
    ("topics", "update-subscription-properties"): (
        "replace a subscription's properties", _sub_properties_args(True),
        _update_subscription_properties),
    ("topics", "partitioned-stats-internal"): (
        "every partition's internal stats", _no_args,
        _read(_topic, "/partitioned-internalStats")),
    ("topics", "bundle-range"): (
        "the namespace bundle the topic is in", _no_args,
        lambda a: Request("GET", _topic(a).replace("/admin/v2/", "/lookup/v2/topic/", 1)
                          + "/bundle")),
})


def aliased(commands: dict[tuple[str, str], Builder]) -> dict[tuple[str, str], Builder]:
    """The builders of :data:`ALIASES` and :data:`EXTRA`, given the existing *commands*."""
    out = {key: build for key, (_, _, build) in EXTRA.items()}
    for (group, alias), name in ALIASES.items():
        out[(group, alias)] = commands[(group, name)]
    return out


def add_parsers(namespaces: Any, topics: Any) -> None:
    """Declare :data:`EXTRA` and :data:`ALIASES` (the aliases copy their command's arguments)."""
    groups = {"namespaces": (namespaces, "namespace", "tenant/namespace"),
              "topics": (topics, "topic", "topic name")}
    for (group, name), (help_, add, _) in EXTRA.items():
        parser, dest, dest_help = groups[group]
        sp = parser.add_parser(name, help=help_)
        sp.add_argument(dest, help=dest_help)
        add(sp)
    for (group, alias), name in ALIASES.items():
        parser = groups[group][0]
        target = parser.choices[name]
        parser.add_parser(alias, parents=[target], add_help=False,
                          help=f"the same as {name} (pulsar-admin's other name)")


def mirror_topic_policies(topics: Any, *groups: Any) -> list[str]:
    """Declare on each of *groups* the :data:`TOPIC_POLICY_COMMANDS` that *topics* has and
    the group has not yet; the names mirrored (their requests are the ``topics`` ones)."""
    mirrored = []
    for name in TOPIC_POLICY_COMMANDS:
        target = topics.choices.get(name)
        if target is None:
            continue
        for group in groups:
            if name not in group.choices:
                group.add_parser(name, parents=[target], add_help=False,
                                 help=f"as topics {name}")
                mirrored.append(name)
    return mirrored
