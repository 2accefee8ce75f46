"""The WebSocket API's JSON frames and query parameters, as Pulsar's documentation shows them."""

from __future__ import annotations

import base64
import json

import pytest

from broker.websocket.frames import (
    FrameError,
    MessageRef,
    WebSocketError,
    consumer_message,
    decode_message_id,
    encode_message_id,
    format_time,
    parse_consumer_command,
    parse_produce_request,
    producer_ack,
    producer_error,
)
from broker.websocket.params import (
    InvalidParams,
    consumer_options,
    producer_options,
    reader_options,
)
from protocol import pulsar_pb as pb
from protocol.sub_types import SubType


def test_documented_message_ids_decode() -> None:
    # "CAAQAw==" (the producer example's answer) and "CAMQADAA" (the consumer example)
    assert decode_message_id("CAAQAw==") == MessageRef(0, 3)
    assert decode_message_id("CAMQADAA") == MessageRef(3, 0)  # batch_size 0: not a batch
    assert encode_message_id(MessageRef(0, 3)) == "CAAQAw=="


def test_batch_message_id_round_trip() -> None:
    ref = MessageRef(12, 7, batch_index=2, batch_size=5)
    assert decode_message_id(encode_message_id(ref)) == ref


_NO_ENTRY_ID = base64.b64encode(pb.MessageIdData(ledgerId=1).SerializePartialToString()).decode()


@pytest.mark.parametrize("text", ["", "@@", base64.b64encode(b"\xff\xff").decode(), _NO_ENTRY_ID])
def test_bad_message_ids_are_refused_with_code_3(text: str) -> None:
    with pytest.raises(FrameError) as info:
        decode_message_id(text)
    assert info.value.error is WebSocketError.FailedToDeserializeFromJSON


def test_documented_producer_message() -> None:
    request = parse_produce_request(json.dumps({
        "payload": "SGVsbG8gV29ybGQ=", "properties": {"key1": "value1", "key2": "value2"},
        "context": 5}))
    assert request.payload == b"Hello World"
    assert request.properties == {"key1": "value1", "key2": "value2"}
    assert request.context == "5"  # Jackson reads the number into the String field
    full = parse_produce_request(json.dumps({
        "payload": "", "key": "k", "deliverAt": 1767225600000, "deliverAfterMs": "1500",
        "eventTime": "2021-10-29T16:01:38.967-07:00", "sequenceId": 9,
        "replicationClusters": ["a"], "disableReplication": True, "unknown": [1]}))
    assert (full.key, full.deliver_at_ms, full.deliver_after_ms, full.sequence_id) == \
        ("k", 1767225600000, 1500, 9)
    assert full.event_time_ms == 1635548498967
    assert full.replication_clusters == ("a",) and full.disable_replication


@pytest.mark.parametrize(("text", "code"), [
    ("not json", WebSocketError.FailedToDeserializeFromJSON),
    ("[1]", WebSocketError.FailedToDeserializeFromJSON),
    ('{"payload": "aA==", "properties": [1]}', WebSocketError.FailedToDeserializeFromJSON),
    ('{"payload": "aA==", "deliverAt": "soon"}', WebSocketError.FailedToDeserializeFromJSON),
    ("[" * 5000, WebSocketError.FailedToDeserializeFromJSON),
    ('{"context": "c"}', WebSocketError.PayloadEncodingError),
    ('{"payload": "@@@", "context": "c"}', WebSocketError.PayloadEncodingError),
    ('{"payload": "aA==", "eventTime": "yesterday", "context": "c"}',
     WebSocketError.PayloadEncodingError),
])
def test_refused_producer_messages_carry_pulsars_codes(text: str, code: WebSocketError) -> None:
    with pytest.raises(FrameError) as info:
        parse_produce_request(text)
    assert info.value.error is code
    if code is WebSocketError.PayloadEncodingError:
        assert info.value.context == "c"


def test_producer_answers() -> None:
    # Pulsar 4.0's ProducerAck always carries its primitive errorCode and schemaVersion (0)
    assert json.loads(producer_ack("CAAQAw==", "1")) == {
        "result": "ok", "messageId": "CAAQAw==", "context": "1", "errorCode": 0,
        "schemaVersion": 0}
    assert json.loads(producer_error(WebSocketError.FailedToDeserializeFromJSON,
                                     "Failed to de-serialize from JSON", None)) == {
        "result": "send-error:3", "errorMsg": "Failed to de-serialize from JSON",
        "errorCode": 0, "schemaVersion": 0}


def test_consumer_message_shape() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1635548498967,
                            partition_key="k", event_time=1635548498000)
    md.properties.add(key="a", value="b")
    doc = json.loads(consumer_message("CAAQAw==", b"Hello World", md, None, 2))
    assert doc == {"messageId": "CAAQAw==", "payload": "SGVsbG8gV29ybGQ=",
                   "properties": {"a": "b"}, "publishTime": "2021-10-29T23:01:38.967Z",
                   "redeliveryCount": 2, "key": "k", "eventTime": "2021-10-29T23:01:38.000Z"}
    assert format_time(0) == "1970-01-01T00:00:00.000Z"


def test_consumer_commands() -> None:
    assert parse_consumer_command('{"messageId": "CAAQAw=="}').type is None
    permit = parse_consumer_command('{"type": "permit", "permitMessages": 100}')
    assert (permit.type, permit.permit_messages) == ("permit", 100)
    assert parse_consumer_command('{"type": "negativeAcknowledge", "messageId": "x"}') \
        .message_id == "x"
    for bad in ("{", '"x"', '{"permitMessages": 99999999999}'):
        with pytest.raises(FrameError) as info:
            parse_consumer_command(bad)
        assert info.value.error is WebSocketError.FailedToDeserializeFromJSON


def test_query_parameters_as_the_builders_read_them() -> None:
    p = producer_options({"sendTimeoutMillis": "500", "producerName": "me",
                          "initialSequenceId": "41", "batchingEnabled": "TRUE"})
    assert (p.send_timeout_ms, p.producer_name, p.initial_sequence_id, p.batching_enabled) == \
        (500, "me", 41, True)
    c = consumer_options({"subscriptionType": "Key_Shared", "receiverQueueSize": "5000",
                          "pullMode": "true", "negativeAckRedeliveryDelay": "10",
                          "subscriptionMode": "NonDurable"})
    assert (c.sub_type, c.receiver_queue_size, c.pull_mode, c.negative_ack_delay_ms,
            c.durable) == (SubType.Key_Shared, 1000, True, 10, False)
    assert consumer_options({}).sub_type is SubType.Exclusive
    assert reader_options({"messageId": "earliest"}).start == "earliest"
    assert reader_options({}).start == "latest"


@pytest.mark.parametrize(("make", "query", "message"), [
    (producer_options, {"sendTimeoutMillis": "x"}, 'For input string: "x"'),
    (producer_options, {"maxPendingMessages": " 5"}, 'For input string: " 5"'),
    (producer_options, {"compressionType": "BROTLI"}, "Invalid compressionType BROTLI"),
    (producer_options, {"messageRoutingMode": "Any"}, "Invalid messageRoutingMode Any"),
    (consumer_options, {"subscriptionType": "Bogus"}, "Invalid subscriptionType Bogus"),
    (consumer_options, {"ackTimeoutMillis": "10"}, "Ack timeout should be greater than 1000 ms"),
    (consumer_options, {"receiverQueueSize": "-1"}, "receiverQueueSize needs to be >= 0"),
    (consumer_options, {"receiverQueueSize": "99999999999"}, 'For input string: "99999999999"'),
    (consumer_options, {"deadLetterTopic": "dlq"}, "MaxRedeliveryCount must be > 0."),
])
def test_refused_query_parameters(make: object, query: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidParams) as info:
        make(query)  # type: ignore[operator]
    assert str(info.value) == message
