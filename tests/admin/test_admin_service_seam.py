"""REST handlers reach the broker only through the typed admin service.

``broker/admin/service.py`` is the one admin module that holds the BrokerService (privately,
in each part); ``app.py`` hands it over and ``healthcheck.py`` is the probe it runs. Every
other admin module is read from its syntax tree: it neither imports ``broker.topics.service``
nor touches an attribute named ``service`` or ``_service`` on anything, nor a topic's
``ledger`` or a subscription's ``cursor`` (stored entries are read through ``AdminEntries``).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from broker.admin.service import (
    AdminBroker,
    AdminEntries,
    AdminPolicies,
    AdminService,
    AdminTenants,
    AdminTopics,
    AdminTransactions,
)

ADMIN_DIR = Path(__file__).resolve().parents[2] / "broker" / "admin"
#: The modules allowed to hold the BrokerService (see the module docstring).
HOLDERS = frozenset({"service.py", "app.py", "healthcheck.py"})
#: Most methods a part of the admin service may have (one concept each).
MAX_METHODS = 30
#: Attributes only the admin service touches.
PRIVATE = frozenset({"service", "_service", "ledger", "cursor"})


def _reach_throughs(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "broker.topics.service":
            found.append(f"line {node.lineno}: imports broker.topics.service")
    return found


def test_handlers_never_reach_the_broker_service() -> None:
    handlers = sorted(p for p in ADMIN_DIR.glob("*.py") if p.name not in HOLDERS)
    assert len(handlers) >= 15
    offenders = {p.name: found for p in handlers if (found := _reach_throughs(p))}
    assert offenders == {}


def test_the_seam_check_sees_a_reach_through(tmp_path: Path) -> None:
    sample = tmp_path / "handler.py"
    sample.write_text("async def h(admin, topic):\n    return admin.service.topics\n"
                      "def g(topic):\n    return topic.ledger.ledgers\n")
    assert _reach_throughs(sample) == ["line 2: .service", "line 4: .ledger"]


def test_admin_service_hands_out_parts_not_the_broker_service() -> None:
    fields = {f.name for f in dataclasses.fields(AdminService)}
    assert fields == {"tenants", "topics", "entries", "policies", "broker", "policy_store",
                      "schemas", "transactions"}
    for part in (AdminTenants, AdminTopics, AdminEntries, AdminPolicies, AdminBroker,
                 AdminTransactions):
        public = [name for name in vars(part) if not name.startswith("_")]
        assert "service" not in public, part
        assert len(public) <= MAX_METHODS, (part, len(public))
