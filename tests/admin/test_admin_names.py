"""Names the admin API refuses (412, Pulsar's reasons): tenants and namespaces outside Pulsar's
ASCII ``[-=:.\\w]`` rule, topics with control characters, topic names over the length limit."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from broker.topics.names import MAX_TOPIC_NAME_LENGTH

from .conftest import Api

P = "/admin/v2/persistent/public/default"
T = "persistent://public/default"
CYRILLIC_PUBLIC = "\u0440ublic"  # its first letter is Cyrillic: it looks like "public"


def _path(*parts: str) -> str:
    return "/".join(quote(p, safe="") for p in parts)


@pytest.mark.parametrize("tenant", ["evil\n", CYRILLIC_PUBLIC, "t\u00e9", "a b", "x\x00"])
def test_tenant_names_outside_the_ascii_rule_are_412(api: Api, tenant: str) -> None:
    reply = api("PUT", "/admin/v2/tenants/" + _path(tenant), {"allowedClusters": []})
    assert reply.status == 412, reply
    assert str(reply.reason).startswith("Tenant name is not valid: ")
    assert tenant not in api("GET", "/admin/v2/tenants").body


@pytest.mark.parametrize("namespace", ["evil\n", "d\u0435fault", "a\tb"])
def test_namespace_names_outside_the_ascii_rule_are_412(api: Api, namespace: str) -> None:
    reply = api("PUT", "/admin/v2/namespaces/public/" + _path(namespace))
    assert reply.status == 412, reply
    assert str(reply.reason).startswith("Namespace name is not valid: ")
    assert f"public/{namespace}" not in api("GET", "/admin/v2/namespaces/public").body


@pytest.mark.parametrize("local", ["a\x00b", "a\rb", "a\nb", "a\x1b[31mb", "a\x7fb", "a\x85b"])
def test_topic_names_with_control_characters_are_412_and_never_stored(
        api: Api, local: str) -> None:
    reply = api("PUT", f"{P}/" + _path(local))
    assert reply.status == 412, reply
    assert "control character" in str(reply.reason)
    partitioned = api("PUT", f"{P}/" + _path(local) + "/partitions", 2)
    assert partitioned.status == 412, partitioned
    assert api("GET", P).body == []
    assert api("GET", f"{P}/partitioned").body == []


def test_topic_in_a_namespace_with_a_trailing_newline_is_412(api: Api) -> None:
    reply = api("PUT", "/admin/v2/persistent/public/" + _path("default\n", "t"))
    assert reply.status == 412, reply
    assert "Invalid namespace name" in str(reply.reason)


def test_topic_names_over_the_limit_are_412(api: Api) -> None:
    prefix_length = len(f"{T}/")
    longest = "x" * (MAX_TOPIC_NAME_LENGTH - prefix_length)
    assert api("PUT", f"{P}/{longest}").status == 204
    reply = api("PUT", f"{P}/{longest}y")
    assert reply.status == 412, reply
    assert f"more than the {MAX_TOPIC_NAME_LENGTH} allowed" in str(reply.reason)
    assert api("GET", P).body == [f"{T}/{longest}"]
