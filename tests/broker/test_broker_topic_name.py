"""Topic names parse like Pulsar's TopicName.get."""

from __future__ import annotations

import pytest

from broker.listeners import advertised_host, service_urls
from broker.topics.names import (
    CACHED_NAME_LENGTH,
    MAX_TOPIC_NAME_LENGTH,
    TopicName,
    is_valid_name,
    parse_cache_info,
)
from protocol.errors import InvalidTopicNameError


def test_short_name_goes_to_public_default() -> None:
    t = TopicName.parse("my-topic")
    assert t.full == "persistent://public/default/my-topic"
    assert (t.domain, t.tenant, t.namespace, t.local_name) == (
        "persistent", "public", "public/default", "my-topic")
    assert t.partition_index == -1 and not t.is_partition


def test_three_part_and_full_names() -> None:
    assert TopicName.parse("t1/ns1/x").full == "persistent://t1/ns1/x"
    t = TopicName.parse("non-persistent://t1/ns1/x")
    assert t.domain == "non-persistent" and not t.is_persistent


def test_partition_names_know_their_index_and_parent() -> None:
    t = TopicName.parse("persistent://public/default/orders-partition-3")
    assert t.is_partition and t.partition_index == 3
    assert t.partitioned_parent == "persistent://public/default/orders"
    assert TopicName.parse("orders").partition(2).full.endswith("orders-partition-2")


def test_v1_names_keep_the_cluster_in_the_namespace() -> None:
    t = TopicName.parse("persistent://tn/cluster/ns/x")
    assert t.namespace == "tn/cluster/ns" and t.local_name == "x"


@pytest.mark.parametrize("bad", [
    "", "a/b", "http://public/default/x", "persistent://public/x",
    "persistent://pub lic/default/x", "persistent://public/default/",
    "persistent://evil\n/default/x", "persistent://public/default\n/x", "evil\n/default/x",
    "persistent://\u0440ublic/default/x", "persistent://public/d\u00e9fault/x",
    "persistent://public/c\n/ns/x", "a\x00b", "persistent://public/default/a\rb",
    "persistent://public/default/a\nb", "persistent://public/default/a\x1bb",
    "persistent://public/default/a\x7fb", "persistent://public/default/a\x9fb",
])
def test_invalid_names_raise(bad: str) -> None:
    with pytest.raises(InvalidTopicNameError) as info:
        TopicName.parse(bad)
    assert info.value.code.name == "InvalidTopicName"


def service_url(advertised_address: str, port: int, local_host: str) -> str:
    return service_urls(advertised_address, local_host, broker_port=port, broker_port_tls=None,
                        web_port=8080, web_port_tls=None).broker_url


def test_lookup_advertises_the_configured_name_on_loopback() -> None:
    assert service_url("localhost", 6650, "127.0.0.1") == "pulsar://localhost:6650"
    assert service_url("127.0.0.1", 6650, "127.0.0.1") == "pulsar://127.0.0.1:6650"


def test_lookup_never_sends_a_remote_client_to_localhost() -> None:
    assert advertised_host("localhost", "10.1.2.3") == "10.1.2.3"
    assert advertised_host("localhost", "::ffff:10.1.2.3") == "10.1.2.3"
    assert advertised_host("broker.example", "10.1.2.3") == "broker.example"


def test_tenant_and_namespace_names_are_ascii_and_matched_in_full() -> None:
    assert is_valid_name("a-b=c:d.e_F9")
    for bad in ("evil\n", "\u0440ublic", "\u0661", "caf\u00e9", "", "a/b", "a b"):
        assert not is_valid_name(bad), bad


def test_local_names_keep_unicode_letters_and_spaces_inside() -> None:
    assert TopicName.parse("persistent://public/default/caf\u00e9 au lait").local_name == \
        "caf\u00e9 au lait"


def test_names_over_the_limit_are_refused_without_being_echoed() -> None:
    prefix = "persistent://public/default/"
    longest = prefix + "x" * (MAX_TOPIC_NAME_LENGTH - len(prefix))
    assert TopicName.parse(longest).full == longest
    with pytest.raises(InvalidTopicNameError) as info:
        TopicName.parse(longest + "x")
    assert len(info.value.message) < 200
    assert f"{MAX_TOPIC_NAME_LENGTH + 1} characters" in info.value.message


def test_only_short_names_that_parsed_are_cached() -> None:
    before = parse_cache_info().currsize
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse("persistent://evil\n/default/never-cached")
    TopicName.parse("persistent://public/default/" + "z" * CACHED_NAME_LENGTH)  # long: parsed
    assert parse_cache_info().currsize == before
    short = TopicName.parse("persistent://public/default/cached-once")
    assert parse_cache_info().currsize == before + 1
    assert TopicName.parse("persistent://public/default/cached-once") is short
