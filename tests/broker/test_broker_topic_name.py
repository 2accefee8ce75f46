"""Topic names parse like Pulsar's TopicName.get."""

from __future__ import annotations

import pytest

from broker.listeners import advertised_host, service_urls
from broker.topics.names import TopicName
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


@pytest.mark.parametrize("bad", ["", "a/b", "http://public/default/x", "persistent://public/x",
                                 "persistent://pub lic/default/x", "persistent://public/default/"])
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
