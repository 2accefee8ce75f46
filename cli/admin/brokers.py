"""``horae-admin brokers ...``: pulsar-admin's broker commands (on /admin/v2/brokers).

Theory of operation: :func:`add_parsers` declares the commands on the ``brokers`` group of
:mod:`cli.admin.main`; :data:`PATHS` maps each read to the REST path it GETs and
:data:`CHANGES` the ones that change the dynamic configuration (and the shutdown) to their requests, which the
CLI sends and prints like any other command. Kept apart from ``main.py`` so the broker group
grows without touching the other groups.

=================================================  =========================================
``brokers healthcheck [--topic-version V2]``       ``GET .../health?topicVersion=...``
``brokers list CLUSTER``                           ``GET .../{cluster}``
``brokers leader-broker``                          ``GET .../leaderBroker``
``brokers list-dynamic-config``                    ``GET .../configuration``
``brokers get-all-dynamic-config``                 ``GET .../configuration/values``
``brokers update-dynamic-config --config K         ``POST .../configuration/{K}/{V}``
--value V``
``brokers delete-dynamic-config --config K``       ``DELETE .../configuration/{K}``
``brokers get-runtime-config``                     ``GET .../configuration/runtime``
``brokers get-internal-config``                    ``GET .../internal-configuration``
``brokers version``                                ``GET .../version``
``brokers shutdown [-m N] [-f]``                   ``POST .../shutdown?maxConcurrentUnloadPerSec=N
                                                   &forcedTerminateTopic=true|false``
=================================================  =========================================
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable
from typing import Any

from cli.admin.rest import Request

__all__ = ["CHANGES", "PATHS", "add_parsers"]

BROKERS = "/admin/v2/brokers"


def _healthcheck(args: argparse.Namespace) -> str:
    if args.topic_version is None:
        return f"{BROKERS}/health"
    return f"{BROKERS}/health?topicVersion={args.topic_version}"


PATHS: dict[str, Callable[[argparse.Namespace], str]] = {
    "healthcheck": _healthcheck,
    "list": lambda a: f"{BROKERS}/{urllib.parse.quote(a.cluster, safe='')}",
    "leader-broker": lambda a: f"{BROKERS}/leaderBroker",
    "list-dynamic-config": lambda a: f"{BROKERS}/configuration",
    "get-all-dynamic-config": lambda a: f"{BROKERS}/configuration/values",
    "get-runtime-config": lambda a: f"{BROKERS}/configuration/runtime",
    "get-internal-config": lambda a: f"{BROKERS}/internal-configuration",
    "version": lambda a: f"{BROKERS}/version",
    "namespaces": lambda a: (f"{BROKERS}/{urllib.parse.quote(a.cluster, safe='')}/"
                             f"{urllib.parse.quote(a.url, safe='')}/ownedNamespaces"),
    "backlog-quota-check": lambda a: f"{BROKERS}/backlog-quota-check",
}


def _config(name: str) -> str:
    return f"{BROKERS}/configuration/{urllib.parse.quote(name, safe='')}"


CHANGES: dict[str, Callable[[argparse.Namespace], Request]] = {
    "update-dynamic-config": lambda a: Request(
        "POST", _config(a.config) + "/" + urllib.parse.quote(a.value, safe="")),
    "delete-dynamic-config": lambda a: Request("DELETE", _config(a.config)),
    "shutdown": lambda a: Request(
        "POST", f"{BROKERS}/shutdown?maxConcurrentUnloadPerSec={a.max_rate}"
                f"&forcedTerminateTopic={str(a.forced).lower()}"),
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
    ns = brokers.add_parser("namespaces", help="the namespaces the broker owns (all, on one node)")
    ns.add_argument("cluster", help="cluster name")
    ns.add_argument("--url", required=True, help="the broker (host:webPort, as brokers list)")
    brokers.add_parser("backlog-quota-check", help="run the backlog-quota check of every "
                       "loaded topic now")
    for name, help_ in (
            ("list-dynamic-config", "the settings that may be changed at run time"),
            ("get-all-dynamic-config", "the dynamic settings' stored overrides"),
            ("get-runtime-config", "every setting's value in force"),
            ("get-internal-config", "where the broker keeps metadata and ledgers"),
            ("version", "the broker's version")):
        brokers.add_parser(name, help=help_)
    up = brokers.add_parser("update-dynamic-config",
                            help="change a dynamic setting now (kept across restarts)")
    up.add_argument("--config", "-c", required=True, help="the setting, e.g. maxProducersPerTopic")
    up.add_argument("--value", "-v", required=True, help="its new value")
    brokers.add_parser("delete-dynamic-config", help="drop a dynamic setting's override "
                       "(back to the configuration file's value)").add_argument(
        "--config", "-c", required=True)
    sd = brokers.add_parser("shutdown", help="shut this broker down gracefully (topics "
                            "unloaded, cursors flushed, the process exits)")
    sd.add_argument("--max-concurrent-unload-per-sec", "-m", dest="max_rate", type=int,
                    default=0, help="bundle unloads per second (0: no limit; one node has "
                                    "nothing to pace)")
    sd.add_argument("--forced-terminate-topic", "-f", dest="forced", action="store_true",
                    help="close the topics without waiting for their clients")
