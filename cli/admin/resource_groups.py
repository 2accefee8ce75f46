"""``horae-admin resourcegroups ...`` and the namespace's resource group: pulsar-admin's names and flags.

=====================================================  ====================================
``resourcegroups list``                                ``GET /admin/v2/resourcegroups``
``resourcegroups get NAME``                            ``GET .../resourcegroups/{NAME}``
``resourcegroups create|update NAME [--msg-publish-    ``PUT .../resourcegroups/{NAME}``
rate|-mp N] [--byte-publish-rate|-bp N]                (the given rates; update keeps the
[--msg-dispatch-rate|-md N] [--byte-dispatch-rate|     others)
-bd N]``
``resourcegroups delete NAME``                         ``DELETE .../resourcegroups/{NAME}``
``namespaces set-resource-group T/NS                   ``POST .../namespaces/T/NS/resourcegroup/
--resource-group-name|-rgn NAME``                      {NAME}``
``namespaces get-resource-group T/NS``                 ``GET .../namespaces/T/NS/resourcegroup``
``namespaces remove-resource-group T/NS``              ``DELETE`` of the same
=====================================================  ====================================
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cli.admin.args import namespace_path, q
from cli.admin.rest import Request

__all__ = ["COMMANDS", "add_parsers"]

GROUPS = "/admin/v2/resourcegroups"

#: pulsar-admin's flags -> the ResourceGroup body's fields
RATES = (("--msg-publish-rate", "-mp", "publishRateInMsgs", "messages published a second"),
         ("--byte-publish-rate", "-bp", "publishRateInBytes", "bytes published a second"),
         ("--msg-dispatch-rate", "-md", "dispatchRateInMsgs", "messages dispatched a second"),
         ("--byte-dispatch-rate", "-bd", "dispatchRateInBytes", "bytes dispatched a second"))


def _group(a: argparse.Namespace) -> str:
    return f"{GROUPS}/{q(a.name)}"


def _ns(a: argparse.Namespace) -> str:
    return f"/admin/v2/namespaces/{namespace_path(a.namespace)}/resourcegroup"


def _put(a: argparse.Namespace) -> Request:
    body = {field: getattr(a, field) for _, _, field, _ in RATES
            if getattr(a, field) is not None}
    return Request("PUT", _group(a), body, True)


COMMANDS: dict[tuple[str, str], Callable[[argparse.Namespace], Request]] = {
    ("resourcegroups", "list"): lambda a: Request("GET", GROUPS),
    ("resourcegroups", "get"): lambda a: Request("GET", _group(a)),
    ("resourcegroups", "create"): _put,
    ("resourcegroups", "update"): _put,
    ("resourcegroups", "delete"): lambda a: Request("DELETE", _group(a)),
    ("namespaces", "set-resource-group"): lambda a: Request(
        "POST", f"{_ns(a)}/{q(a.resource_group_name)}"),
    ("namespaces", "get-resource-group"): lambda a: Request("GET", _ns(a)),
    ("namespaces", "remove-resource-group"): lambda a: Request("DELETE", _ns(a)),
}


def add_parsers(groups: Any, namespaces: Any) -> None:
    """Declare the ``resourcegroups`` commands (on its sub-parsers) and the namespace's."""
    groups.add_parser("list", help="the resource groups' names")
    for name, help_ in (("get", "a resource group's rates"),
                        ("create", "create a resource group (-1: no limit)"),
                        ("update", "change the rates given of a resource group"),
                        ("delete", "delete a resource group no namespace uses")):
        sp = groups.add_parser(name, help=help_)
        sp.add_argument("name", help="resource group name")
        if name in ("create", "update"):
            for flag, short, field, what in RATES:
                sp.add_argument(flag, short, dest=field, type=int, default=None, help=what)
    for name, help_ in (("set-resource-group", "attach the namespace to a resource group"),
                        ("get-resource-group", "the namespace's resource group"),
                        ("remove-resource-group", "detach the namespace from its resource group")):
        sp = namespaces.add_parser(name, help=help_)
        sp.add_argument("namespace", help="tenant/namespace")
        if name == "set-resource-group":
            sp.add_argument("--resource-group-name", "-rgn", required=True,
                            help="the resource group")
