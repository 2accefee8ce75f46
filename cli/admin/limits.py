"""``horae-admin`` commands for the limit and rate policies, with pulsar-admin's names and flags.

Theory of operation: each policy is a ``set-`` / ``get-`` / ``remove-`` trio on the namespace
path (``namespaces``) and on the topic path (``topics`` and ``topic-policies``, which send the
same requests: Horae keeps one level of topic policies), as in :mod:`cli.admin.policies`. The
command names and flags are pulsar-admin's, which are not always the same at both levels
(``namespaces set-max-producers-per-topic -p`` but ``topics set-max-producers -p``;
``namespaces set-max-unacked-messages-per-consumer -c`` but
``topics set-max-unacked-messages-on-consumer -m``). Counts are sent as given, so the broker
answers a negative one with Pulsar's 412 reason; subscription types are checked here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cli.admin.args import Builder, UsageError, namespace_path, topic_base
from cli.admin.rest import Request

__all__ = ["COMMANDS", "TOPIC_GROUPS", "add_parsers"]

#: the groups whose commands act on a topic's policies
TOPIC_GROUPS = ("topics", "topic-policies")
#: the name argparse reports for a command given under pulsar-admin's alias ``topicPolicies``
_ALIASES = ("topicPolicies",)

SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")

Flags = tuple[str, ...]
AddArgs = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True, slots=True)
class _Level:
    """A policy's command at one level: its stem, REST suffix and how ``set-`` reads its value."""

    stem: str
    suffix: str
    add_args: AddArgs
    body: Callable[[argparse.Namespace], object]


@dataclass(frozen=True, slots=True)
class _Policy:
    what: str                      # for the help lines
    namespace: _Level | None
    topic: _Level | None


def _count(flags: Flags, what: str) -> tuple[AddArgs, Callable[[argparse.Namespace], object]]:
    def add(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(*flags, dest="value", type=int, required=True,
                        help=f"{what} (0: no limit)")
    return add, lambda a: a.value


def _counted(stem: str, suffix: str, flags: Flags, what: str) -> _Level:
    add, body = _count(flags, what)
    return _Level(stem, suffix, add, body)


def _publish_rate_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--msg-publish-rate", "-m", dest="msgs", type=int, default=-1,
                    help="messages per second (-1: no limit)")
    sp.add_argument("--byte-publish-rate", "-b", dest="bytes", type=int, default=-1,
                    help="bytes per second (-1: no limit)")


def _publish_rate(a: argparse.Namespace) -> dict[str, int]:
    return {"publishThrottlingRateInMsg": a.msgs, "publishThrottlingRateInByte": a.bytes}


def _dispatch_rate_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--msg-dispatch-rate", "-md", dest="msgs", type=int, default=-1,
                    help="messages per period (-1: no limit)")
    sp.add_argument("--byte-dispatch-rate", "-bd", dest="bytes", type=int, default=-1,
                    help="bytes per period (-1: no limit)")
    sp.add_argument("--dispatch-rate-period", "-dt", dest="period", type=int, default=1,
                    help="the period in seconds (default 1)")
    sp.add_argument("--relative-to-publish-rate", "-rp", dest="relative", action="store_true",
                    help="the limits grow by the topic's publish rate")


def _dispatch_rate(a: argparse.Namespace) -> dict[str, Any]:
    return {"dispatchThrottlingRateInMsg": a.msgs, "dispatchThrottlingRateInByte": a.bytes,
            "ratePeriodInSecond": a.period, "relativeToPublishRate": a.relative}


def _subscribe_rate_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--subscribe-rate", "-sr", dest="rate", type=int, default=-1,
                    help="subscribes per consumer per period (-1: no limit)")
    sp.add_argument("--subscribe-rate-period", "-st", dest="period", type=int, default=30,
                    help="the period in seconds (default 30)")


def _subscribe_rate(a: argparse.Namespace) -> dict[str, int]:
    return {"subscribeThrottlingRatePerConsumer": a.rate, "ratePeriodInSecond": a.period}


def _types_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--types", "-t", required=True,
                    help="comma-separated subscription types: " + ",".join(SUBSCRIPTION_TYPES))


def _types(a: argparse.Namespace) -> list[str]:
    names = [name.strip() for name in a.types.split(",") if name.strip()]
    unknown = [name for name in names if name not in SUBSCRIPTION_TYPES]
    if unknown or not names:
        raise UsageError(f"invalid subscription types {a.types!r}: give some of "
                         + ", ".join(SUBSCRIPTION_TYPES))
    return names


def _expiration_args(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--time", "-t", dest="minutes", type=int, required=True,
                    help="minutes a subscription without consumers lives (0: for ever)")


def _same(stem: str, suffix: str, add: AddArgs,
          body: Callable[[argparse.Namespace], object]) -> tuple[_Level, _Level]:
    return _Level(stem, suffix, add, body), _Level(stem, suffix, add, body)


_rates = {
    "publish rate": _same("publish-rate", "publishRate", _publish_rate_args, _publish_rate),
    "dispatch rate (over all the topic's subscriptions)": _same(
        "dispatch-rate", "dispatchRate", _dispatch_rate_args, _dispatch_rate),
    "subscription dispatch rate": _same("subscription-dispatch-rate", "subscriptionDispatchRate",
                                        _dispatch_rate_args, _dispatch_rate),
    "subscribe rate per consumer": _same("subscribe-rate", "subscribeRate",
                                         _subscribe_rate_args, _subscribe_rate),
    "subscription types enabled": _same("subscription-types-enabled",
                                        "subscriptionTypesEnabled", _types_args, _types),
}

POLICIES: tuple[_Policy, ...] = (
    _Policy("max producers per topic",
            _counted("max-producers-per-topic", "maxProducersPerTopic",
                     ("--max-producers-per-topic", "-p"), "producers per topic"),
            _counted("max-producers", "maxProducers", ("--max-producers", "-p"),
                     "producers of the topic")),
    _Policy("max consumers per topic",
            _counted("max-consumers-per-topic", "maxConsumersPerTopic",
                     ("--max-consumers-per-topic", "-c"), "consumers per topic"),
            _counted("max-consumers", "maxConsumers", ("--max-consumers", "-c"),
                     "consumers of the topic")),
    _Policy("max consumers per subscription",
            _counted("max-consumers-per-subscription", "maxConsumersPerSubscription",
                     ("--max-consumers-per-subscription", "-c"), "consumers per subscription"),
            _counted("max-consumers-per-subscription", "maxConsumersPerSubscription",
                     ("--max-consumers-per-subscription", "-c"), "consumers per subscription")),
    _Policy("max subscriptions per topic",
            _counted("max-subscriptions-per-topic", "maxSubscriptionsPerTopic",
                     ("--max-subscriptions-per-topic", "-m"), "subscriptions per topic"),
            _counted("max-subscriptions-per-topic", "maxSubscriptionsPerTopic",
                     ("--max-subscriptions-per-topic", "-m"), "subscriptions of the topic")),
    _Policy("max unacked messages per consumer",
            _counted("max-unacked-messages-per-consumer", "maxUnackedMessagesPerConsumer",
                     ("--max-unacked-messages-per-topic", "-c"),
                     "unacknowledged messages per consumer"),
            _counted("max-unacked-messages-on-consumer", "maxUnackedMessagesOnConsumer",
                     ("--maxNum", "-m"), "unacknowledged messages per consumer")),
    _Policy("max unacked messages per subscription",
            _counted("max-unacked-messages-per-subscription",
                     "maxUnackedMessagesPerSubscription",
                     ("--max-unacked-messages-per-subscription", "-c"),
                     "unacknowledged messages per subscription"),
            _counted("max-unacked-messages-on-subscription", "maxUnackedMessagesOnSubscription",
                     ("--maxNum", "-m"), "unacknowledged messages per subscription")),
    _Policy("max topics per namespace",
            _counted("max-topics-per-namespace", "maxTopicsPerNamespace",
                     ("--max-topics-per-namespace", "-t"), "topics (partitions counting)"),
            None),
    _Policy("max message size", None,
            _counted("max-message-size", "maxMessageSize", ("--max-message-size", "-m"),
                     "bytes of one message")),
    *(_Policy(what, ns, topic) for what, (ns, topic) in _rates.items()),
    _Policy("subscription expiration time (minutes)",   # no topic level in Pulsar's REST API
            _Level("subscription-expiration-time", "subscriptionExpirationTime",
                   _expiration_args, lambda a: a.minutes), None),
)


def _trio(level: _Level, base: Callable[[argparse.Namespace], str]) -> dict[str, Builder]:
    def set_(a: argparse.Namespace) -> Request:
        return Request("POST", base(a) + "/" + level.suffix, level.body(a), True)

    def get(a: argparse.Namespace) -> Request:
        return Request("GET", base(a) + "/" + level.suffix)

    def remove(a: argparse.Namespace) -> Request:
        return Request("DELETE", base(a) + "/" + level.suffix)

    return {f"set-{level.stem}": set_, f"get-{level.stem}": get,
            f"remove-{level.stem}": remove}


def _ns(a: argparse.Namespace) -> str:
    return f"/admin/v2/namespaces/{namespace_path(a.namespace)}"


def _topic(a: argparse.Namespace) -> str:
    return topic_base(a.topic)


COMMANDS: dict[tuple[str, str], Builder] = {}
for _policy in POLICIES:
    if _policy.namespace is not None:
        for _name, _build in _trio(_policy.namespace, _ns).items():
            COMMANDS[("namespaces", _name)] = _build
    if _policy.topic is not None:
        for _group in TOPIC_GROUPS + _ALIASES:
            for _name, _build in _trio(_policy.topic, _topic).items():
                COMMANDS[(_group, _name)] = _build


def add_parsers(namespaces: Any, *topic_groups: Any) -> None:
    """Declare the commands on the ``namespaces`` group's and the topic groups' sub-parsers."""
    verbs = {"set": "set the {} {}", "get": "the {} {} (null: not set here)",
             "remove": "remove the {} {} (the level above applies)"}
    for policy in POLICIES:
        levels: list[tuple[Any, _Level | None, str, str, str]] = [
            (namespaces, policy.namespace, "namespace", "tenant/namespace", "namespace's")]
        levels += [(group, policy.topic, "topic", "topic name", "topic's")
                   for group in topic_groups]
        for group, level, dest, dest_help, whose in levels:
            if level is None:
                continue
            for verb, text in verbs.items():
                sp = group.add_parser(f"{verb}-{level.stem}",
                                      help=text.format(whose, policy.what))
                sp.add_argument(dest, help=dest_help)
                if verb == "set":
                    level.add_args(sp)
