"""protocol.pulsar_pb is the generated pulsar_api_pb2 under a typed name.

Its stub, protocol/pulsar_pb.pyi, is regenerated with the modules by ``python proto/regenerate.py``;
tests/proto/test_generated.py fails when it is stale.
"""

from __future__ import annotations


def test_pulsar_pb_reexports_the_generated_classes() -> None:
    from protocol import pulsar_pb
    from protocol.generated import pulsar_api_pb2

    assert pulsar_pb.BaseCommand is pulsar_api_pb2.BaseCommand
    assert pulsar_pb.MessageMetadata is pulsar_api_pb2.MessageMetadata
    assert pulsar_pb.DESCRIPTOR is pulsar_api_pb2.DESCRIPTOR
