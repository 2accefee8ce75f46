"""Every encoder round-trips through FrameDecoder; the hand-assembled hot encoders equal the
protobuf-built encoding byte for byte."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import commands as c
from protocol import hot_commands
from protocol import pulsar_pb as pb
from protocol.errors import ServerError
from protocol.frames import NEED_DATA, Frame, FrameDecoder
from protocol.framing import varint
from protocol.metadata import encode_entry

T = pb.BaseCommand
ENTRY = encode_entry(pb.MessageMetadata(producer_name="p-1", sequence_id=7, publish_time=1_700_000_000_000), b"payload" * 20)

VARINT_EDGES = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**35, 2**63 - 1, 2**63, 2**64 - 1]
u64 = st.one_of(
    st.integers(min_value=0, max_value=20_000),  # the table-driven range and just past it
    st.sampled_from(VARINT_EDGES),
    st.integers(min_value=0, max_value=2**64 - 1),
)
i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
i32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def decode_one(data: bytes) -> Frame:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    frame = decoder.next_frame()
    assert frame is not NEED_DATA
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered == 0
    return frame


# (name, encoded frame, check(frame)) for every encoder
CASES: list[tuple[str, bytes, Callable[[Frame], object]]] = [
    ("connected", c.encode_connected("Horae 0.1", 20, max_message_size=5 << 20),
     lambda f: (f.command.type == T.CONNECTED and f.command.connected.server_version == "Horae 0.1"
                and f.command.connected.protocol_version == 20 and f.command.connected.max_message_size == 5 << 20)),
    ("connected_without_max", c.encode_connected("s", 12),
     lambda f: f.command.connected.protocol_version == 12 and not f.command.connected.HasField("max_message_size")),
    ("success", c.encode_success(42), lambda f: f.command.type == T.SUCCESS and f.command.success.request_id == 42),
    ("error", c.encode_error(3, ServerError.TopicNotFound, "no such topic"),
     lambda f: (f.command.type == T.ERROR and f.command.error.request_id == 3
                and f.command.error.error == pb.TopicNotFound and f.command.error.message == "no such topic")),
    ("producer_success", c.encode_producer_success(5, "standalone-0-1", 9, b"\x00\x01"),
     lambda f: (f.command.producer_success.request_id == 5 and f.command.producer_success.producer_name == "standalone-0-1"
                and f.command.producer_success.last_sequence_id == 9 and f.command.producer_success.schema_version == b"\x00\x01")),
    ("producer_success_defaults", c.encode_producer_success(5, "p"),
     lambda f: f.command.producer_success.last_sequence_id == -1 and f.command.producer_success.producer_ready),
    # The Java client reads schema_version unconditionally: a schema-less producer gets it empty.
    ("producer_success_schemaless", c.encode_producer_success(5, "p"),
     lambda f: (f.command.producer_success.HasField("schema_version")
                and f.command.producer_success.schema_version == b"")),
    ("send_receipt", c.encode_send_receipt(1, 2, 3, 4, 5),
     lambda f: (f.command.type == T.SEND_RECEIPT and f.command.send_receipt.producer_id == 1
                and f.command.send_receipt.sequence_id == 2 and f.command.send_receipt.message_id.ledgerId == 3
                and f.command.send_receipt.message_id.entryId == 4 and f.command.send_receipt.highest_sequence_id == 5)),
    ("send_error", c.encode_send_error(1, 2, ServerError.NotAllowedError, "Exceeds max allowed delivery delay of 10 milliseconds"),
     lambda f: (f.command.type == T.SEND_ERROR and f.command.send_error.error == pb.NotAllowedError
                and f.command.send_error.message.startswith("Exceeds") and f.command.send_error.sequence_id == 2)),
    ("message", c.encode_message(9, 10, 11, ENTRY, redelivery_count=2, ack_set=[-1, 3], partition=4),
     lambda f: (f.command.type == T.MESSAGE and f.command.message.consumer_id == 9
                and f.command.message.message_id.ledgerId == 10 and f.command.message.message_id.entryId == 11
                and f.command.message.message_id.partition == 4 and f.command.message.redelivery_count == 2
                and list(f.command.message.ack_set) == [-1, 3] and f.entry == ENTRY and f.checksum_valid is True)),
    ("message_known_crc", c.encode_message(9, 10, 11, ENTRY, entry_crc=crc32c(ENTRY)),
     lambda f: f.checksum_valid is True and f.entry == ENTRY and not f.command.message.HasField("redelivery_count")),
    ("message_without_checksum", c.encode_message(9, 10, 11, ENTRY, checksum=False),
     lambda f: f.checksum_valid is None and f.entry == ENTRY),
    ("ping", c.encode_ping(), lambda f: f.command.type == T.PING and f.command.HasField("ping")),
    ("pong", c.encode_pong(), lambda f: f.command.type == T.PONG and f.command.HasField("pong")),
    ("lookup_connect", c.encode_lookup_response(7, "pulsar://localhost:6650"),
     lambda f: (f.command.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Connect
                and f.command.lookupTopicResponse.brokerServiceUrl == "pulsar://localhost:6650"
                and f.command.lookupTopicResponse.authoritative and f.command.lookupTopicResponse.request_id == 7)),
    ("lookup_redirect", c.encode_lookup_response(7, "pulsar://b:6650", response="redirect", authoritative=False),
     lambda f: (f.command.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Redirect
                and not f.command.lookupTopicResponse.authoritative)),
    ("lookup_failed", c.encode_lookup_response(7, response="failed", error=ServerError.ServiceNotReady, message="later"),
     lambda f: (f.command.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
                and f.command.lookupTopicResponse.error == pb.ServiceNotReady and f.command.lookupTopicResponse.message == "later")),
    ("partitioned_metadata_response", c.encode_partitioned_metadata_response(8, 4),
     lambda f: (f.command.partitionMetadataResponse.response == pb.CommandPartitionedTopicMetadataResponse.Success
                and f.command.partitionMetadataResponse.partitions == 4 and f.command.partitionMetadataResponse.request_id == 8)),
    ("partitioned_metadata_failed", c.encode_partitioned_metadata_response(8, error=ServerError.TopicNotFound),
     lambda f: (f.command.partitionMetadataResponse.response == pb.CommandPartitionedTopicMetadataResponse.Failed
                and f.command.partitionMetadataResponse.error == pb.TopicNotFound
                and f.command.partitionMetadataResponse.message == "TopicNotFound")),
    ("close_producer", c.encode_close_producer(1, 2),
     lambda f: f.command.type == T.CLOSE_PRODUCER and f.command.close_producer.producer_id == 1 and f.command.close_producer.request_id == 2),
    ("close_consumer", c.encode_close_consumer(3, 4),
     lambda f: f.command.type == T.CLOSE_CONSUMER and f.command.close_consumer.consumer_id == 3 and f.command.close_consumer.request_id == 4),
    ("active_consumer_change", c.encode_active_consumer_change(5, True),
     lambda f: f.command.active_consumer_change.consumer_id == 5 and f.command.active_consumer_change.is_active),
    ("get_last_message_id_response", c.encode_get_last_message_id_response(6, 7, 8, partition=1, batch_index=2, mark_delete=(7, 5)),
     lambda f: (f.command.getLastMessageIdResponse.request_id == 6
                and f.command.getLastMessageIdResponse.last_message_id.ledgerId == 7
                and f.command.getLastMessageIdResponse.last_message_id.entryId == 8
                and f.command.getLastMessageIdResponse.last_message_id.partition == 1
                and f.command.getLastMessageIdResponse.last_message_id.batch_index == 2
                and f.command.getLastMessageIdResponse.consumer_mark_delete_position.entryId == 5)),
    ("get_topics_of_namespace_response", c.encode_get_topics_of_namespace_response(9, ["persistent://public/default/a", "persistent://public/default/b"]),
     lambda f: list(f.command.getTopicsOfNamespaceResponse.topics) == ["persistent://public/default/a", "persistent://public/default/b"]),
    ("get_schema_response", c.encode_get_schema_response(10, schema=pb.Schema(name="s", schema_data=b"{}", type=pb.Schema.Json), schema_version=b"\x00"),
     lambda f: (f.command.getSchemaResponse.schema.type == pb.Schema.Json and f.command.getSchemaResponse.schema_version == b"\x00"
                and f.command.getSchemaResponse.request_id == 10)),
    ("get_schema_response_error", c.encode_get_schema_response(10, error_code=ServerError.TopicNotFound, error_message="none"),
     lambda f: f.command.getSchemaResponse.error_code == pb.TopicNotFound and f.command.getSchemaResponse.error_message == "none"),
    ("end_txn_on_partition_response", c.encode_end_txn_on_partition_response(14, 1, 2, error=ServerError.NotAllowedError, message="off"),
     lambda f: (f.command.endTxnOnPartitionResponse.request_id == 14
                and (f.command.endTxnOnPartitionResponse.txnid_least_bits, f.command.endTxnOnPartitionResponse.txnid_most_bits) == (1, 2)
                and f.command.endTxnOnPartitionResponse.error == pb.NotAllowedError
                and f.command.endTxnOnPartitionResponse.message == "off")),
    ("end_txn_on_subscription_response", c.encode_end_txn_on_subscription_response(15, 3, 4, error=ServerError.NotAllowedError, message="off"),
     lambda f: (f.command.endTxnOnSubscriptionResponse.request_id == 15
                and (f.command.endTxnOnSubscriptionResponse.txnid_least_bits, f.command.endTxnOnSubscriptionResponse.txnid_most_bits) == (3, 4)
                and f.command.endTxnOnSubscriptionResponse.error == pb.NotAllowedError)),
    ("ack_response", c.encode_ack_response(11, 12, error=ServerError.UnknownError, message="x"),
     lambda f: (f.command.ackResponse.consumer_id == 11 and f.command.ackResponse.request_id == 12
                and f.command.ackResponse.HasField("error"))),
    ("consumer_stats_response", c.encode_consumer_stats_response(13, msgRateOut=1.5, consumerName="c", availablePermits=10, msgBacklog=3),
     lambda f: (f.command.consumerStatsResponse.msgRateOut == 1.5 and f.command.consumerStatsResponse.consumerName == "c"
                and f.command.consumerStatsResponse.availablePermits == 10 and f.command.consumerStatsResponse.msgBacklog == 3)),
    ("reached_end_of_topic", c.encode_reached_end_of_topic(14), lambda f: f.command.reachedEndOfTopic.consumer_id == 14),
    # client side
    ("connect", c.encode_connect(), lambda f: f.command.connect.client_version == "Horae-test" and f.command.connect.protocol_version == 20),
    ("connect_auth", c.encode_connect("x", 6, auth_method_name="none"),
     lambda f: f.command.connect.protocol_version == 6 and f.command.connect.auth_method_name == "none"),
    ("partitioned_metadata", c.encode_partitioned_metadata("persistent://public/default/t", 1),
     lambda f: f.command.partitionMetadata.topic == "persistent://public/default/t" and f.command.partitionMetadata.request_id == 1),
    ("lookup", c.encode_lookup("persistent://public/default/t", 2),
     lambda f: f.command.lookupTopic.topic.endswith("/t") and f.command.lookupTopic.request_id == 2 and not f.command.lookupTopic.authoritative),
    ("producer", c.encode_producer("t", 1, 2, "named", 1),
     lambda f: (f.command.producer.producer_name == "named" and f.command.producer.producer_access_mode == pb.Exclusive
                and f.command.producer.user_provided_producer_name)),
    ("producer_unnamed", c.encode_producer("t", 1, 2),
     lambda f: not f.command.producer.HasField("producer_name") and not f.command.producer.user_provided_producer_name),
    ("send", c.encode_send(1, 2, ENTRY),
     lambda f: (f.command.send.producer_id == 1 and f.command.send.sequence_id == 2 and not f.command.send.HasField("num_messages")
                and f.entry == ENTRY and f.checksum_valid is True)),
    ("send_batch_no_checksum", c.encode_send(1, 2, ENTRY, num_messages=5, highest_sequence_id=6, checksum=False),
     lambda f: f.command.send.num_messages == 5 and f.command.send.highest_sequence_id == 6 and f.checksum_valid is None),
    ("subscribe", c.encode_subscribe("t", "sub", pb.CommandSubscribe.Shared, 3, 4, initial_position=1, consumer_name="c"),
     lambda f: (f.command.subscribe.subType == pb.CommandSubscribe.Shared and f.command.subscribe.subscription == "sub"
                and f.command.subscribe.initialPosition == pb.CommandSubscribe.Earliest and f.command.subscribe.durable
                and f.command.subscribe.consumer_name == "c" and not f.command.subscribe.HasField("keySharedMeta"))),
    ("subscribe_reader_key_shared", c.encode_subscribe("t", "r", 3, 3, 4, durable=False, start_message_id=(5, 6), key_shared_mode=1,
                                                       hash_ranges=[(0, 32767)], allow_out_of_order_delivery=True),
     lambda f: (not f.command.subscribe.durable and f.command.subscribe.start_message_id.entryId == 6
                and f.command.subscribe.keySharedMeta.keySharedMode == pb.STICKY
                and f.command.subscribe.keySharedMeta.hashRanges[0].end == 32767
                and f.command.subscribe.keySharedMeta.allowOutOfOrderDelivery)),
    ("flow", c.encode_flow(3, 1000), lambda f: f.command.flow.consumer_id == 3 and f.command.flow.messagePermits == 1000),
    ("ack", c.encode_ack(3, [(1, 2), (1, 3)]),
     lambda f: (f.command.ack.ack_type == pb.CommandAck.Individual
                and [(m.ledgerId, m.entryId) for m in f.command.ack.message_id] == [(1, 2), (1, 3)]
                and not f.command.ack.HasField("request_id"))),
    ("ack_cumulative", c.encode_ack(3, [(1, 2)], cumulative=True, request_id=9, validation_error=2),
     lambda f: (f.command.ack.ack_type == pb.CommandAck.Cumulative and f.command.ack.request_id == 9
                and f.command.ack.validation_error == pb.CommandAck.ChecksumMismatch)),
    ("redeliver_all", c.encode_redeliver(3),
     lambda f: f.command.redeliverUnacknowledgedMessages.consumer_id == 3 and len(f.command.redeliverUnacknowledgedMessages.message_ids) == 0),
    ("redeliver_ids", c.encode_redeliver(3, [(1, 2)]),
     lambda f: f.command.redeliverUnacknowledgedMessages.message_ids[0].entryId == 2),
    ("seek_message_id", c.encode_seek(3, 4, message_id=(5, 6)),
     lambda f: f.command.seek.message_id.ledgerId == 5 and not f.command.seek.HasField("message_publish_time")),
    ("seek_publish_time", c.encode_seek(3, 4, publish_time=123),
     lambda f: f.command.seek.message_publish_time == 123 and not f.command.seek.HasField("message_id")),
    ("unsubscribe", c.encode_unsubscribe(3, 4), lambda f: f.command.unsubscribe.consumer_id == 3 and f.command.unsubscribe.request_id == 4),
    ("get_last_message_id", c.encode_get_last_message_id(3, 4), lambda f: f.command.getLastMessageId.request_id == 4),
    ("get_topics_of_namespace", c.encode_get_topics_of_namespace(1, "public/default", 2),
     lambda f: f.command.getTopicsOfNamespace.namespace == "public/default" and f.command.getTopicsOfNamespace.mode == pb.CommandGetTopicsOfNamespace.ALL),
    ("get_schema", c.encode_get_schema(1, "t", b"\x01"), lambda f: f.command.getSchema.schema_version == b"\x01"),
    ("consumer_stats", c.encode_consumer_stats(1, 2), lambda f: f.command.consumerStats.consumer_id == 2),
]


@pytest.mark.parametrize(("name", "data", "check"), CASES, ids=[case[0] for case in CASES])
def test_encoder_round_trips_through_the_decoder(name: str, data: bytes, check: Callable[[Frame], object]) -> None:
    frame = decode_one(data)
    assert check(frame), frame


def test_every_command_the_broker_sends_has_an_encoder() -> None:
    sent_types = {decode_one(data).command.type for _, data, _ in CASES}
    broker_sends = {
        T.CONNECTED, T.SUCCESS, T.ERROR, T.PRODUCER_SUCCESS, T.SEND_RECEIPT, T.SEND_ERROR, T.MESSAGE,
        T.PING, T.PONG, T.LOOKUP_RESPONSE, T.PARTITIONED_METADATA_RESPONSE, T.CLOSE_PRODUCER,
        T.CLOSE_CONSUMER, T.ACTIVE_CONSUMER_CHANGE, T.GET_LAST_MESSAGE_ID_RESPONSE,
        T.GET_TOPICS_OF_NAMESPACE_RESPONSE, T.GET_SCHEMA_RESPONSE, T.ACK_RESPONSE,
        T.CONSUMER_STATS_RESPONSE,
    }
    assert broker_sends <= sent_types


def test_frame_sizes_follow_the_wire_layout() -> None:
    simple = c.encode_success(1)
    assert int.from_bytes(simple[:4], "big") == len(simple) - 4
    assert int.from_bytes(simple[4:8], "big") == len(simple) - 8
    message = c.encode_message(1, 2, 3, ENTRY)
    command_size = int.from_bytes(message[4:8], "big")
    after_command = message[8 + command_size :]
    assert after_command[:2] == b"\x0e\x01"
    assert int.from_bytes(after_command[2:6], "big") == crc32c(ENTRY)
    assert after_command[6:] == ENTRY
    assert int.from_bytes(message[:4], "big") == len(message) - 4


def test_encoding_a_command_with_a_missing_required_field_fails() -> None:
    from google.protobuf.message import EncodeError

    cmd = pb.BaseCommand(type=T.SUCCESS)
    cmd.success.SetInParent()
    with pytest.raises(EncodeError) as info:
        c.encode_command(cmd)
    assert "request_id" in str(info.value)


@settings(max_examples=300, deadline=None)
@given(producer_id=u64, sequence_id=u64, ledger_id=u64, entry_id=u64, highest=u64)
def test_hand_assembled_send_receipt_equals_protobuf_encoding(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int
) -> None:
    fast = c.encode_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest)
    assert fast == hot_commands.reference_send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest)


@settings(max_examples=300, deadline=None)
@given(
    consumer_id=u64,
    ledger_id=u64,
    entry_id=u64,
    redelivery_count=st.integers(min_value=0, max_value=2**32 - 1),
    ack_set=st.none() | st.lists(i64, max_size=20),
    partition=st.none() | i32,
    entry=st.binary(min_size=0, max_size=300).map(lambda payload: ENTRY + payload),
)
def test_hand_assembled_message_equals_protobuf_encoding(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    redelivery_count: int,
    ack_set: list[int] | None,
    partition: int | None,
    entry: bytes,
) -> None:
    fast = c.encode_message(
        consumer_id, ledger_id, entry_id, entry, redelivery_count=redelivery_count, ack_set=ack_set, partition=partition
    )
    reference = hot_commands.reference_message(
        consumer_id, ledger_id, entry_id, entry, redelivery_count=redelivery_count, ack_set=ack_set, partition=partition
    )
    assert fast == reference
    assert decode_one(fast).checksum_valid is True


@settings(max_examples=300, deadline=None)
@given(
    consumer_id=u64,
    partition=st.none() | i32,
    frames=st.lists(
        st.tuples(u64, u64, st.binary(min_size=0, max_size=300).map(lambda p: ENTRY + p)),
        min_size=0, max_size=12),
    same_ledger=st.booleans(),
)
def test_a_run_of_messages_equals_protobuf_encoding_frame_by_frame(
    consumer_id: int, partition: int | None, frames: list[tuple[int, int, bytes]],
    same_ledger: bool,
) -> None:
    """The template encoder of a flush: every frame equals the pb-built one, byte for byte,
    for any ids (large varints included), whether the ledger changes within the run or not."""
    if same_ledger and frames:
        frames = [(frames[0][0], e, entry) for _, e, entry in frames]
    parts = hot_commands.encode_message_run_py(
        consumer_id, partition, [(lid, eid) for lid, eid, _ in frames],
        [entry for _, _, entry in frames])
    expected = [hot_commands.reference_message(consumer_id, lid, eid, entry, partition=partition)
                for lid, eid, entry in frames]
    assert b"".join(parts) == b"".join(expected)
    # each frame is whole in the buffers: its head, then its entry as a buffer of its own
    per_frame = len(parts) // len(frames) if frames else 0
    for i, (frame, (_, _, entry)) in enumerate(zip(expected, frames, strict=True)):
        buffers = parts[i * per_frame:(i + 1) * per_frame]
        assert buffers[-1] is entry and b"".join(buffers) == frame
        assert decode_one(frame).checksum_valid is True


def test_a_run_of_messages_with_ids_across_varint_sizes() -> None:
    """Deterministic edges: ids at every varint length boundary, partitions absent, 0, large
    and negative, consumer ids small and 64-bit, a ledger change in mid-run."""
    edges = [0, 1, 127, 128, 16_383, 16_384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**35,
             2**56, 2**63 - 1, 2**64 - 1]
    for consumer_id in (0, 5, 300, 2**64 - 1):
        for partition in (None, 0, 3, 2**31 - 1, -1):
            positions = [(lid, eid) for lid in (7, 2**40) for eid in edges]
            entries = [ENTRY + bytes([i % 256]) * i for i in range(len(positions))]
            expected = b"".join(
                hot_commands.reference_message(consumer_id, lid, eid, entry, partition=partition)
                for (lid, eid), entry in zip(positions, entries, strict=True))
            for encode in (c.encode_message_run, hot_commands.encode_message_run_py):
                assert b"".join(encode(consumer_id, partition, positions, entries)) == expected


@given(value=u64 | i64)
def test_varint_matches_protobuf_for_int64_and_uint64(value: int) -> None:
    field = pb.MessageIdData(ledgerId=0, entryId=0)
    encoded = varint(value)
    if value < 0:
        field.ack_set.append(value)
        assert field.SerializeToString()[-len(encoded) - 1 :] == b"\x28" + encoded
    else:
        field.ledgerId = value
        assert field.SerializeToString()[: len(encoded) + 1] == b"\x08" + encoded


def test_varint_tables_hold_every_small_varint() -> None:
    """The tables built at import: every entry equals the varint computed byte by byte."""
    from protocol.framing import LOW_14_BITS, SMALL_VARINT, _slow_varint

    assert tuple(_slow_varint(i) for i in range(1 << 14)) == SMALL_VARINT
    assert tuple(bytes((i & 0x7F | 0x80, i >> 7 | 0x80)) for i in range(1 << 14)) == LOW_14_BITS
    for value in (1 << 14, (1 << 14) + 1, (1 << 21) - 1, 1 << 21, (1 << 28) - 1):
        assert varint(value) == _slow_varint(value)
