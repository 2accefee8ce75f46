"""Request-body parsing of the admin API and CLI argument helpers (no broker)."""

from __future__ import annotations

import base64

import pytest

from broker.admin import bodies
from broker.admin.errors import RestError
from cli.admin.args import UsageError, parse_duration_ms, parse_message_id, topic_path
from protocol import pulsar_pb as pb


def _b64(ledger: int, entry: int, batch: int | None = None) -> str:
    msg = pb.MessageIdData(ledgerId=ledger, entryId=entry)
    if batch is not None:
        msg.batch_index = batch
    return base64.b64encode(msg.SerializeToString()).decode()


def test_skip_ids_accepts_a_bare_array_of_base64_message_ids() -> None:
    ids = bodies.parse_skip_by_message_ids([_b64(3, 7), _b64(3, 8, 2)])
    assert ids == [bodies.MessageIdRef(3, 7), bodies.MessageIdRef(3, 8, 2)]


def test_skip_ids_accepts_the_byte_array_object_form_with_or_without_type() -> None:
    typed = bodies.parse_skip_by_message_ids({"type": "byteArray", "messageIds": [_b64(1, 2)]})
    untyped = bodies.parse_skip_by_message_ids({"messageIds": [_b64(1, 2)]})
    assert typed == untyped == [bodies.MessageIdRef(1, 2)]


def test_skip_ids_accepts_message_id_objects_with_string_numbers_and_negative_batch() -> None:
    ids = bodies.parse_skip_by_message_ids({"type": "messageId", "messageIds": [
        {"ledgerId": 12345, "entryId": 100},
        {"ledgerId": "12346", "entryId": "200", "batchIndex": 5},
        {"ledgerId": 1, "entryId": 2, "batchIndex": -1},
    ]})
    assert ids == [bodies.MessageIdRef(12345, 100), bodies.MessageIdRef(12346, 200, 5),
                   bodies.MessageIdRef(1, 2)]


def test_skip_ids_decodes_what_the_official_client_serializes() -> None:
    # pulsar-client 3.13: MessageId(ledger=0, entry=0).serialize() == b"\x08\x00\x10\x00"
    ids = bodies.parse_skip_by_message_ids([base64.b64encode(b"\x08\x00\x10\x00").decode()])
    assert ids == [bodies.MessageIdRef(0, 0)]


def test_skip_ids_accepts_the_designs_ledger_to_entry_map() -> None:
    assert bodies.parse_skip_by_message_ids({"12345": "100", "12346": 200}) == [
        bodies.MessageIdRef(12345, 100), bodies.MessageIdRef(12346, 200)]
    assert bodies.parse_skip_by_message_ids({"type": "map", "messageIds": {"7": "0"}}) == [
        bodies.MessageIdRef(7, 0)]
    assert bodies.parse_skip_by_message_ids({"messageIds": {"0": "0"}}) == [
        bodies.MessageIdRef(0, 0)]


def test_skip_ids_drops_duplicates_keeping_order() -> None:
    ids = bodies.parse_skip_by_message_ids([_b64(1, 2), _b64(1, 1), _b64(1, 2)])
    assert [i.position for i in ids] == [(1, 2), (1, 1)]


@pytest.mark.parametrize(("body", "why"), [
    (None, "empty body"),
    ({"foo": 1}, "missing messageIds"),
    ({"type": "byteArray", "messageIds": {"1": "2"}}, "unsupported messageIds type"),
    ({"messageIds": 5}, "unsupported messageIds type"),
    ({"type": "other", "messageIds": []}, "unsupported type for array"),
    (42, "unsupported top-level JSON"),
    (["not base64!"], "bad base64 message id"),
    ({"type": "messageId", "messageIds": [{"ledgerId": "x", "entryId": 1}]},
     "ledgerId must be a non-negative integer, not 'x'"),
    ({"type": "messageId", "messageIds": [{"entryId": 1}]}, "missing ledgerId"),
    ({"type": "messageId", "messageIds": [{"ledgerId": 1}]}, "missing entryId"),
    ({"type": "messageId", "messageIds": [{"ledgerId": 1, "entryId": -1}]},
     "entryId must be a non-negative integer, not -1"),
    ({"-1": "2"}, "ledgerId must be a non-negative integer, not '-1'"),
    ({"12": "-3"}, "entryId must be a non-negative integer, not '-3'"),
    ({"12": None}, "missing entryId"),
    ({"12": "x"}, "entryId must be a non-negative integer, not 'x'"),
    ({"messageIds": {"1": "-2"}}, "entryId must be a non-negative integer"),
])
def test_skip_ids_rejects_bad_payloads_with_400_and_pulsars_prefix(body: object, why: str) -> None:
    with pytest.raises(RestError) as info:
        bodies.parse_skip_by_message_ids(body)
    assert info.value.status == 400
    assert info.value.reason.startswith("Invalid skipByMessageIds payload: ")
    assert why in info.value.reason


def test_base64_message_id_round_trips() -> None:
    text = bodies.message_id_to_base64(9, 4, 3, partition=2)
    assert bodies.message_id_from_base64(text) == bodies.MessageIdRef(9, 4, 3, 2)


def test_reset_cursor_data_reads_pulsars_fields() -> None:
    data = bodies.parse_reset_cursor_data(
        {"ledgerId": 5, "entryId": "6", "isExcluded": True, "partitionIndex": 1})
    assert data == bodies.ResetCursorData(5, 6, partition_index=1, is_excluded=True)


def test_reset_cursor_data_without_ids_is_a_bad_request() -> None:
    with pytest.raises(RestError) as info:
        bodies.parse_reset_cursor_data({"ledgerId": 5})
    assert info.value.status == 400


def test_subscription_start_defaults_to_latest_and_knows_earliest() -> None:
    assert bodies.parse_subscription_start(None) == ("latest", None)
    assert bodies.parse_subscription_start({"ledgerId": -1, "entryId": -1}) == ("earliest", None)
    assert bodies.parse_subscription_start({"ledgerId": 3, "entryId": 4}) == ("latest", (3, 4))
    big = 2**63 - 1
    assert bodies.parse_subscription_start({"ledgerId": big, "entryId": big}) == ("latest", None)


def test_partitions_body_must_be_an_integer() -> None:
    assert bodies.parse_partitions(4) == 4
    assert bodies.parse_partitions("4") == 4
    with pytest.raises(RestError) as info:
        bodies.parse_partitions({"n": 4})
    assert info.value.status == 400


def test_partitions_body_may_be_partitioned_topic_metadata() -> None:
    # what pulsar-admin and the Go admin client send (application/vnd.partitioned-topic-metadata+json)
    assert bodies.parse_partitions({"partitions": 3, "properties": None}) == 3
    assert bodies.parse_partitions({"partitions": 2, "properties": {}}) == 2
    assert bodies.parse_partitions({"partitions": 2}) == 2
    # the properties are kept with the topic (broker.admin.properties_routes)
    assert bodies.parse_partitions({"partitions": 2, "properties": {"owner": "x"}}) == 2


def test_bad_json_is_a_bad_request() -> None:
    with pytest.raises(RestError) as info:
        bodies.load_json(b"{nope")
    assert info.value.status == 400


@pytest.mark.parametrize(("text", "ms"), [
    ("500ms", 500), ("30s", 30_000), ("10m", 600_000), ("1h", 3_600_000), ("2d", 172_800_000),
    ("1w", 604_800_000), ("5", 5_000), ("1.5s", 1_500),
])
def test_cli_durations_parse_to_milliseconds(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


def test_cli_rejects_a_bad_duration() -> None:
    with pytest.raises(UsageError):
        parse_duration_ms("10 parsecs")


def test_cli_topic_names_accept_short_and_full_forms() -> None:
    assert topic_path("t") == "public/default/t"
    assert topic_path("acme/ns/t") == "acme/ns/t"
    assert topic_path("persistent://acme/ns/t") == "acme/ns/t"
    with pytest.raises(UsageError):
        topic_path("non-persistent://acme/ns/t")
    with pytest.raises(UsageError):
        topic_path("a/b")


def test_cli_message_ids() -> None:
    assert parse_message_id("3:4") == (3, 4, None)
    assert parse_message_id("3:4:1") == (3, 4, 1)
    with pytest.raises(UsageError):
        parse_message_id("3")
