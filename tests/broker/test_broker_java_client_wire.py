"""Wire facts the Pulsar Java client depends on, pinned with a raw client.

The Java client (tests/compat/test_java_client.py runs it for real) reads some optional fields
unconditionally and acts on commands the C++ client cannot handle; these tests keep Horae's
answers the way Pulsar's broker gives them.
"""

from __future__ import annotations

from typing import Any

from broker_rawclient import RawClient

from protocol import pulsar_pb as pb

T = pb.BaseCommand


def test_a_schemaless_producer_gets_an_empty_schema_version(broker: Any) -> None:
    with RawClient(broker.service_url) as raw:
        raw.handshake()
        answer = raw.create_producer("persistent://public/default/java-schemaless")
    assert answer.type == T.PRODUCER_SUCCESS
    assert answer.producer_success.HasField("schema_version")
    assert answer.producer_success.schema_version == b""
