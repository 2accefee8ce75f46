"""SubType: the one subscription-type enum equals the protobuf enum, named as Pulsar names it."""

from __future__ import annotations

from protocol import pulsar_pb as pb
from protocol.sub_types import SubType


def test_sub_type_enum_equals_the_protobuf_enum() -> None:
    wire = {value.name: value.number for value in pb.CommandSubscribe.SubType.DESCRIPTOR.values}
    assert {member.name: member.value for member in SubType} == wire


def test_shared_types_share_messages_and_the_others_have_one_active_consumer() -> None:
    assert [t.name for t in SubType if t.shares_messages] == ["Shared", "Key_Shared"]
    assert [t.name for t in SubType if t.single_active] == ["Exclusive", "Failover"]
