"""``horae-admin topics ...`` for shadow topics: pulsar-admin's names and flags.

=====================================================  ====================================
``topics create-shadow-topic SHADOW --source|-s SRC    ``GET .../SRC/partitions``, then ``PUT
[--properties|-p k=v,...]``                            .../SHADOW`` (or ``.../partitions``
                                                       with the source's count) with the
                                                       property ``PULSAR.SHADOW_SOURCE``, as
                                                       PulsarAdmin's ``createShadowTopic``
``topics get-shadow-source SHADOW``                    ``GET .../SHADOW/properties``: the
                                                       ``PULSAR.SHADOW_SOURCE`` value
``topics set-shadow-topics SRC --topics|-t A,B``       ``PUT .../SRC/shadowTopics``
``topics get-shadow-topics SRC``                       ``GET .../SRC/shadowTopics``
``topics remove-shadow-topics SRC``                    ``DELETE .../SRC/shadowTopics``
=====================================================  ====================================
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable
from typing import Any

from cli.admin.args import UsageError, topic_path
from cli.admin.auth import AdminAuth
from cli.admin.rest import Request, call
from cli.admin.storage import parse_pairs

__all__ = ["COMMANDS", "RUNNERS", "add_parsers"]

T = "/admin/v2/persistent/"
SHADOW_SOURCE_KEY = "PULSAR.SHADOW_SOURCE"


def _full(topic: str, what: str) -> str:
    """The full persistent name of a topic argument (pulsar-admin's TopicName.get)."""
    if topic.strip().startswith("non-persistent://"):
        raise UsageError(f"{what} topic must be persistent")
    return "persistent://" + urllib.parse.unquote(topic_path(topic))


def create_shadow_topic(admin_url: str, a: argparse.Namespace, auth: AdminAuth) -> object:
    shadow = _full(a.topic, "Shadow")
    source = _full(a.source, "Source")
    meta = call(admin_url, Request("GET", T + topic_path(source) + "/partitions"), auth)
    partitions = int(meta.get("partitions", 0)) if isinstance(meta, dict) else 0
    properties = {**parse_pairs(a.properties), SHADOW_SOURCE_KEY: source}
    base = T + topic_path(shadow)
    if partitions > 0:
        body: dict[str, Any] = {"partitions": partitions, "properties": properties}
        return call(admin_url, Request("PUT", base + "/partitions", body, True), auth)
    return call(admin_url, Request("PUT", base, properties, True), auth)


def get_shadow_source(admin_url: str, a: argparse.Namespace, auth: AdminAuth) -> object:
    props = call(admin_url, Request("GET", T + topic_path(a.topic) + "/properties"), auth)
    return props.get(SHADOW_SOURCE_KEY) if isinstance(props, dict) else None


RUNNERS: dict[tuple[str, str], Callable[[str, argparse.Namespace, AdminAuth], object]] = {
    ("topics", "create-shadow-topic"): create_shadow_topic,
    ("topics", "get-shadow-source"): get_shadow_source,
}


def _shadow_topics(a: argparse.Namespace) -> str:
    return T + topic_path(a.topic) + "/shadowTopics"


COMMANDS: dict[tuple[str, str], Callable[[argparse.Namespace], Request]] = {
    ("topics", "set-shadow-topics"): lambda a: Request(
        "PUT", _shadow_topics(a), a.topics.split(","), True),
    ("topics", "get-shadow-topics"): lambda a: Request("GET", _shadow_topics(a)),
    ("topics", "remove-shadow-topics"): lambda a: Request("DELETE", _shadow_topics(a)),
}


def add_parsers(topics: Any) -> None:
    """Declare the shadow-topic commands on the ``topics`` sub-parsers."""
    sp = topics.add_parser("create-shadow-topic",
                           help="create a shadow topic for an existing source topic")
    sp.add_argument("topic", help="the shadow topic: persistent://tenant/namespace/topic")
    sp.add_argument("--source", "-s", required=True, help="source topic name")
    sp.add_argument("--properties", "-p", action="append",
                    help="key value pair properties (eg: a=a,b=b,c=c)")
    sp = topics.add_parser("get-shadow-source", help="the source topic of a shadow topic")
    sp.add_argument("topic", help="the shadow topic")
    sp = topics.add_parser("set-shadow-topics", help="set the shadow topics of a source topic")
    sp.add_argument("topic", help="the source topic")
    sp.add_argument("--topics", "-t", required=True,
                    help="shadow topic list (comma separated values)")
    for name, help_ in (("get-shadow-topics", "the shadow topics of a source topic"),
                        ("remove-shadow-topics", "remove the shadow topics of a source topic")):
        sp = topics.add_parser(name, help=help_)
        sp.add_argument("topic", help="the source topic")
