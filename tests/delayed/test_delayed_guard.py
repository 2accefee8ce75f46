"""The publish guard: PIP-315 max delay, PIP-437 fixed delay, precedence, fast path."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.delayed.guard import DelayTooLongError, check_and_start_publish
from broker.delayed.policy import DelayPolicy, resolve_policy
from protocol import pulsar_pb as pb
from protocol.commands import encode_send
from protocol.errors import NotAllowedError, ServerError
from protocol.frames import NEED_DATA, FrameDecoder
from protocol.metadata import encode_entry, entry_checksum, parse_entry, split_entry

PUBLISH = 1_700_000_000_000


def make_entry(deliver_at: int | None = None, payload: bytes = b"hello") -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=PUBLISH)
    md.properties.add(key="k", value="v")
    if deliver_at is not None:
        md.deliver_at_time = deliver_at
    return encode_entry(md, payload)


def policy(*, active: bool = True, max_ms: int = 0, fixed_ms: int = 0) -> DelayPolicy:
    return DelayPolicy(active=active, tick_time_ms=1000, max_delay_ms=max_ms,
                       fixed_delay_ms=fixed_ms, strict=False)


def test_no_policy_in_force_returns_the_same_bytes() -> None:
    entry = make_entry(PUBLISH + 10_000_000)
    for p in (policy(), policy(active=False, max_ms=10, fixed_ms=10)):
        result = check_and_start_publish(entry, parse_entry(entry), p)
        assert result.entry is entry
        assert result.overridden is False


def test_max_delay_rejects_with_pulsars_exact_text() -> None:
    entry = make_entry(PUBLISH + 1001)
    with pytest.raises(NotAllowedError) as info:
        check_and_start_publish(entry, parse_entry(entry), policy(max_ms=1000))
    assert str(info.value.message) == "Exceeds max allowed delivery delay of 1000 milliseconds"
    assert info.value.code == ServerError.NotAllowedError


def test_max_delay_boundary_and_messages_without_delay_pass() -> None:
    for deliver_at in (PUBLISH + 1000, PUBLISH - 5, None):
        entry = make_entry(deliver_at)
        result = check_and_start_publish(entry, parse_entry(entry), policy(max_ms=1000))
        assert result.entry is entry
        assert not result.overridden


def _rewritten(entry: bytes, fixed: int) -> tuple[bytes, bool]:
    result = check_and_start_publish(entry, parse_entry(entry), policy(fixed_ms=fixed))
    return result.entry, result.overridden


def test_fixed_delay_rewrites_a_message_without_client_delay_and_does_not_count_it() -> None:
    entry = make_entry(None)
    new, overridden = _rewritten(entry, 5000)
    assert parse_entry(new).deliver_at_time == PUBLISH + 5000
    assert overridden is False
    assert bytes(split_entry(new)[1]) == b"hello"


def test_fixed_delay_overrides_a_client_delay_and_counts_it() -> None:
    entry = make_entry(PUBLISH + 999_999)
    new, overridden = _rewritten(entry, 5000)
    info = parse_entry(new)
    assert info.deliver_at_time == PUBLISH + 5000
    assert (info.sequence_id, info.producer_name, info.publish_time) == (7, "p", PUBLISH)
    assert overridden is True


def test_fixed_delay_equal_to_the_client_delay_is_untouched() -> None:
    entry = make_entry(PUBLISH + 5000)
    new, overridden = _rewritten(entry, 5000)
    assert new is entry
    assert overridden is False


def test_rewritten_entry_travels_with_a_valid_checksum() -> None:
    new, _ = _rewritten(make_entry(PUBLISH + 3), 5000)
    frame_bytes = encode_send(1, 7, new)
    decoder = FrameDecoder()
    decoder.receive_data(frame_bytes)
    frame = decoder.next_frame()
    assert frame is not NEED_DATA
    assert frame.checksum_valid is True
    assert frame.entry == new
    assert entry_checksum(new) != entry_checksum(make_entry(PUBLISH + 3))


def test_fixed_beats_max_even_beyond_the_limit() -> None:
    config = BrokerConfig(delayed_delivery_max_delay_in_millis=1000)
    resolved = resolve_policy(config, None, {"fixedDeliveryDelayInMillis": 60_000})
    entry = make_entry(PUBLISH + 10_000_000)
    result = check_and_start_publish(entry, parse_entry(entry), resolved)
    assert parse_entry(result.entry).deliver_at_time == PUBLISH + 60_000
    assert result.overridden


def test_topic_policy_beats_namespace_beats_broker_in_the_guard() -> None:
    config = BrokerConfig(delayed_delivery_max_delay_in_millis=1000)
    entry = make_entry(PUBLISH + 1500)
    info = parse_entry(entry)
    with pytest.raises(NotAllowedError):
        check_and_start_publish(entry, info, resolve_policy(config, None, None))
    ns = {"maxDeliveryDelayInMillis": 2000}
    assert check_and_start_publish(entry, info, resolve_policy(config, ns, None)).entry is entry
    topic = {"maxDeliveryDelayInMillis": 1200}
    with pytest.raises(NotAllowedError) as err:
        check_and_start_publish(entry, info, resolve_policy(config, ns, topic))
    assert "1200 milliseconds" in err.value.message
    off = resolve_policy(config, ns, {"active": False, "maxDeliveryDelayInMillis": 1})
    assert check_and_start_publish(entry, info, off).entry is entry


def make_batch(n: int, deliver_at: int | None) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=PUBLISH,
                            num_messages_in_batch=n)
    if deliver_at is not None:
        md.deliver_at_time = deliver_at
    return encode_entry(md, b"batch")


def test_a_fixed_delay_near_int64_never_raises_and_is_clamped() -> None:
    entry = make_entry(PUBLISH + 5)
    for fixed in (2**63, 2**63 - 1 - PUBLISH + 1, 2**64):
        result = check_and_start_publish(entry, parse_entry(entry), policy(fixed_ms=fixed))
        assert parse_entry(result.entry).deliver_at_time == (1 << 63) - 1


def test_counters_count_the_messages_of_a_batch_not_the_entry() -> None:
    batch = make_batch(5, PUBLISH + 1)
    result = check_and_start_publish(batch, parse_entry(batch), policy(fixed_ms=1000))
    assert result.overridden_messages == 5
    late = make_batch(3, PUBLISH + 10_000)
    with pytest.raises(DelayTooLongError) as raised:
        check_and_start_publish(late, parse_entry(late), policy(max_ms=10))
    assert raised.value.messages == 3
    assert isinstance(raised.value, NotAllowedError)
