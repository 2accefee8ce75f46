"""``horae-admin namespaces get-|set-|remove-entry-filters``: pulsar-admin's names and flags.

=====================================================  ====================================
``namespaces get-entry-filters T/NS``                  ``GET .../namespaces/T/NS/entryFilters``
``namespaces set-entry-filters T/NS                    ``POST`` of the same with
--entry-filters-name|-efn NAMES``                      ``{"entryFilterNames": NAMES}`` (the
                                                       broker has no entry filters: refused)
``namespaces remove-entry-filters T/NS``               ``DELETE`` of the same
=====================================================  ====================================
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from cli.admin.args import namespace_path
from cli.admin.rest import Request

__all__ = ["COMMANDS", "add_parsers"]


def _ns(a: argparse.Namespace) -> str:
    return f"/admin/v2/namespaces/{namespace_path(a.namespace)}/entryFilters"


COMMANDS: dict[tuple[str, str], Callable[[argparse.Namespace], Request]] = {
    ("namespaces", "get-entry-filters"): lambda a: Request("GET", _ns(a)),
    ("namespaces", "set-entry-filters"): lambda a: Request(
        "POST", _ns(a), {"entryFilterNames": a.entry_filters_name}, True),
    ("namespaces", "remove-entry-filters"): lambda a: Request("DELETE", _ns(a)),
}


def add_parsers(namespaces: Any) -> None:
    for name, help_ in (("get-entry-filters", "the namespace's entry filters"),
                        ("set-entry-filters", "set the namespace's entry filters"),
                        ("remove-entry-filters", "remove the namespace's entry filters")):
        sp = namespaces.add_parser(name, help=help_)
        sp.add_argument("namespace", help="tenant/namespace")
        if name == "set-entry-filters":
            sp.add_argument("--entry-filters-name", "-efn", required=True,
                            help="the entry filters' names, comma separated")
