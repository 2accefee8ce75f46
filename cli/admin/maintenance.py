"""``horae-admin`` commands for inspecting and maintaining topics and namespaces.

Theory of operation: pulsar-admin's names and flags, each a builder ``argparse.Namespace ->
Request`` in :data:`COMMANDS` keyed ``(group, command)``; :func:`add_parsers` declares them on
the ``topics`` and ``namespaces`` sub-parsers of :mod:`cli.admin.main`:

========================================================  ====================================
``topics get-message-id T -d 2024-01-01T00:00:00Z``       ``GET .../messageid/{epoch ms}``
``topics last-message-id T``                              ``GET .../lastMessageId``
``topics get-message-id-by-index T -i N``                 ``GET .../getMessageIdByIndex?index=N``
``topics info-internal T``                                ``GET .../internal-info``
``topics get-backlog-size T -m L:E``                      ``PUT .../backlogSize``
``topics analyze-backlog T -s SUB [-p L:E]``              ``POST .../analyzeBacklog``
``topics truncate T``                                     ``DELETE .../truncate``
``topics trim-topic T``                                   ``POST .../trim``
``topics create-missed-partitions T``                     ``POST .../createMissedPartitions``
``topics expire-messages-all-subscriptions T -t 1h``      ``POST .../all_subscription/...``
``namespaces unload NS [-b BUNDLE]``                      ``PUT .../unload``
``namespaces clear-backlog NS [-s SUB] [-b B] [-force]``  ``POST .../clearBacklog[/{sub}]``
``namespaces unsubscribe NS -s SUB [-b BUNDLE]``          ``POST .../unsubscribe/{sub}``
========================================================  ====================================

``-d`` takes an ISO 8601 date-time (a zone or ``Z``; none means UTC) or epoch milliseconds.
Durations may be negative where pulsar-admin's are (an expiry of ``-1h`` expires everything).
``clear-backlog`` asks for confirmation as pulsar-admin does unless ``-force`` is given (and
refuses without it when stdin is not a terminal). No broker imports.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from cli.admin.args import (
    Builder,
    UsageError,
    namespace_path,
    parse_duration_ms,
    parse_message_id,
    q,
    topic_base,
)
from cli.admin.rest import Request

__all__ = ["COMMANDS", "add_parsers", "parse_datetime_ms"]


def parse_datetime_ms(text: str) -> int:
    """pulsar-admin's ``--datetime`` (ISO_OFFSET_DATE_TIME; a missing zone is UTC) or epoch
    milliseconds -> epoch milliseconds."""
    value = text.strip()
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"invalid date-time {text!r}: use e.g. 2024-06-28T16:53:08Z, "
                         "2024-06-28T16:53:08.123+08:00 or epoch milliseconds") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _seconds(text: str) -> int:
    """A duration (maybe negative) in whole seconds, rounded toward zero."""
    return int(parse_duration_ms(text) / 1000)


def _message_id_body(text: str) -> dict[str, int]:
    ledger, entry, _ = parse_message_id(text)
    return {"ledgerId": ledger, "entryId": entry}


def _ns(a: argparse.Namespace) -> str:
    base = f"/admin/v2/namespaces/{namespace_path(a.namespace)}"
    return base + (f"/{q(a.bundle)}" if a.bundle else "")


def _clear_backlog(a: argparse.Namespace) -> Request:
    if not a.force:
        what = f"subscription {a.subscription!r}" if a.subscription else "every subscription"
        if not sys.stdin.isatty():
            raise UsageError(f"clear-backlog of {what} in {a.namespace}: add -force to "
                             "confirm when not running interactively")
        answer = input(f"Are you sure you want to clear the backlog of {what} in "
                       f"{a.namespace}? (y/n) ")
        if answer.strip().lower() not in ("y", "yes"):
            raise UsageError("clear-backlog not confirmed")
    suffix = "/clearBacklog" + (f"/{q(a.subscription)}" if a.subscription else "")
    return Request("POST", _ns(a) + suffix)


def _analyze(a: argparse.Namespace) -> Request:
    path = topic_base(a.topic) + f"/subscription/{q(a.subscription)}/analyzeBacklog"
    if a.position:
        return Request("POST", path, _message_id_body(a.position), True)
    return Request("POST", path)


COMMANDS: dict[tuple[str, str], Builder] = {
    ("topics", "get-message-id"): lambda a: Request(
        "GET", topic_base(a.topic) + f"/messageid/{parse_datetime_ms(a.datetime)}"),
    ("topics", "last-message-id"): lambda a: Request(
        "GET", topic_base(a.topic) + "/lastMessageId"),
    ("topics", "get-message-id-by-index"): lambda a: Request(
        "GET", topic_base(a.topic) + f"/getMessageIdByIndex?index={a.index}"),
    ("topics", "info-internal"): lambda a: Request(
        "GET", topic_base(a.topic) + "/internal-info"),
    ("topics", "get-backlog-size"): lambda a: Request(
        "PUT", topic_base(a.topic) + "/backlogSize", _message_id_body(a.message_id), True),
    ("topics", "analyze-backlog"): _analyze,
    ("topics", "truncate"): lambda a: Request("DELETE", topic_base(a.topic) + "/truncate"),
    ("topics", "trim-topic"): lambda a: Request("POST", topic_base(a.topic) + "/trim"),
    ("topics", "create-missed-partitions"): lambda a: Request(
        "POST", topic_base(a.topic) + "/createMissedPartitions"),
    ("topics", "expire-messages-all-subscriptions"): lambda a: Request(
        "POST", topic_base(a.topic)
        + f"/all_subscription/expireMessages/{_seconds(a.expire_time)}"),
    ("namespaces", "unload"): lambda a: Request("PUT", _ns(a) + "/unload"),
    ("namespaces", "clear-backlog"): _clear_backlog,
    ("namespaces", "unsubscribe"): lambda a: Request(
        "POST", _ns(a) + f"/unsubscribe/{q(a.subscription)}"),
}


def add_parsers(topics: Any, namespaces: Any) -> None:
    """Declare the commands of :data:`COMMANDS` (argparse _SubParsersActions)."""
    gi = topics.add_parser("get-message-id", help="the id of the first message published at "
                           "or after a date-time")
    gi.add_argument("topic")
    gi.add_argument("--datetime", "-d", required=True,
                    help="ISO 8601, e.g. 2024-06-28T16:53:08Z, or epoch milliseconds")
    bi = topics.add_parser("get-message-id-by-index", help="the id of the entry holding a "
                           "broker entry metadata message index (PIP-415)")
    bi.add_argument("topic")
    bi.add_argument("--index", "-i", type=int, required=True,
                    help="the message index (AppendIndexMetadataInterceptor's count, from 0)")
    for name, help_ in (
            ("last-message-id", "the id of the last stored message"),
            ("info-internal", "the managed ledger's ledgers, cursors and termination"),
            ("truncate", "clear every subscription's backlog and delete every sealed ledger"),
            ("trim-topic", "delete the consumed ledgers retention does not keep"),
            ("create-missed-partitions", "create the partitions of a partitioned topic that "
                                         "do not exist yet")):
        topics.add_parser(name, help=help_).add_argument("topic")
    bs = topics.add_parser("get-backlog-size", help="bytes stored from a message id on")
    bs.add_argument("topic")
    bs.add_argument("--messageId", "-m", dest="message_id", required=True,
                    help="ledgerId:entryId")
    ab = topics.add_parser("analyze-backlog", help="a subscription's backlog in entries and "
                           "messages (at most 10000 entries read)")
    ab.add_argument("topic")
    ab.add_argument("--subscription", "-s", required=True)
    ab.add_argument("--position", "-p", help="ledgerId:entryId to start from (default: the "
                    "first unacknowledged)")
    ea = topics.add_parser("expire-messages-all-subscriptions",
                           help="acknowledge, on every subscription, messages older than a time")
    ea.add_argument("topic")
    ea.add_argument("--expireTime", "-t", dest="expire_time", required=True,
                    help="e.g. 3600 (s), 10m, 1h; negative: every message")

    def ns_command(name: str, help_: str) -> argparse.ArgumentParser:
        sp: argparse.ArgumentParser = namespaces.add_parser(name, help=help_)
        sp.add_argument("namespace", help="tenant/namespace")
        sp.add_argument("--bundle", "-b", help="the bundle (one node has one: "
                        "0x00000000_0xffffffff)")
        return sp

    ns_command("unload", "unload every loaded topic of the namespace")
    cb = ns_command("clear-backlog", "skip every message of every subscription (or of one)")
    cb.add_argument("--sub", "-s", "--subscription", dest="subscription")
    cb.add_argument("-force", "--force", dest="force", action="store_true",
                    help="do not ask for confirmation")
    ns_command("unsubscribe", "delete a subscription from every topic of the namespace") \
        .add_argument("--sub", "-s", "--subscription", dest="subscription", required=True)
