"""``horae-admin brokers ...``: pulsar-admin's broker commands (all GETs on /admin/v2/brokers).

Theory of operation: :func:`add_parsers` declares the commands on the ``brokers`` group of
:mod:`cli.admin.main`; :data:`PATHS` maps each command to the REST path it GETs, which the
CLI sends and prints like any other command. Kept apart from ``main.py`` so the broker group
grows without touching the other groups.

=============================================  =============================================
``brokers healthcheck [--topic-version V2]``   ``/admin/v2/brokers/health?topicVersion=...``
``brokers list CLUSTER``                       ``/admin/v2/brokers/{cluster}``
``brokers leader-broker``                      ``/admin/v2/brokers/leaderBroker``
=============================================  =============================================
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable
from typing import Any

__all__ = ["PATHS", "add_parsers"]

BROKERS = "/admin/v2/brokers"


def _healthcheck(args: argparse.Namespace) -> str:
    if args.topic_version is None:
        return f"{BROKERS}/health"
    return f"{BROKERS}/health?topicVersion={args.topic_version}"


PATHS: dict[str, Callable[[argparse.Namespace], str]] = {
    "healthcheck": _healthcheck,
    "list": lambda a: f"{BROKERS}/{urllib.parse.quote(a.cluster, safe='')}",
    "leader-broker": lambda a: f"{BROKERS}/leaderBroker",
}


def add_parsers(brokers: Any) -> None:
    """Declare the commands on the ``brokers`` sub-parsers (argparse's _SubParsersAction)."""
    hc = brokers.add_parser(
        "healthcheck", help="produce and consume on the heartbeat topic, check storage")
    hc.add_argument("--topic-version", "-tv", choices=("V1", "V2"), default=None,
                    help="heartbeat topic form: V1 pulsar/<cluster>/<broker> (default), "
                         "V2 pulsar/<broker>")
    brokers.add_parser("list", help="active brokers of a cluster (host:webPort)").add_argument(
        "cluster")
    brokers.add_parser("leader-broker", help="the leader broker (this one)")
