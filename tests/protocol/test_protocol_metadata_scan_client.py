"""The official client's own entries (pulsar-client 3.13) take the protobuf-free metadata check.

Each kind of message the client sends -- plain, keyed, with properties, delayed, batched,
compressed, chunked -- is published to an in-process broker whose metadata scan is watched
(in ``Topic.check_publish`` and in the producer's one-message path,
``publish_bounds.single_message``): every entry must be accepted by ``scan_publish_metadata``
(it did not decline) with the verdict ``check_publish_metadata`` gives.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pulsar
import pytest

from broker.topics import publish_bounds
from broker.topics import topic as topic_module
from protocol.metadata import check_publish_metadata
from protocol.metadata_scan import int64_value, scan_publish_metadata

Scanned = tuple[int, bool, int | None] | None


@pytest.fixture
def scanned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Scanned, tuple[int, bool, int | None]]]:
    """(what the scan returned, check_publish_metadata's verdict) of every published entry."""
    seen: list[tuple[Scanned, tuple[int, bool, int | None]]] = []

    def watched(entry: bytes, max_message_size: int) -> tuple[int, bool, bytes | None] | None:
        raw = scan_publish_metadata(entry, max_message_size)
        result = None if raw is None else (
            raw[0], raw[1], None if raw[2] is None else int64_value(raw[2]))
        md, messages, partial = check_publish_metadata(entry, max_message_size)
        at = md.deliver_at_time if md.HasField("deliver_at_time") else None
        seen.append((result, (messages, partial, at)))
        return raw

    monkeypatch.setattr(topic_module, "scan_publish_metadata", watched)
    monkeypatch.setattr(publish_bounds, "scan_publish_metadata", watched)   # the run loop's
    return seen


def send_plain(producer: Any) -> None:
    producer.send(b"plain")
    producer.send(b"keyed", partition_key="user-42", ordering_key="order-1")
    producer.send(b"props", properties={"k1": "v1", "trace": "x" * 300}, event_timestamp=17)
    producer.send(b"delayed", deliver_after=timedelta(seconds=30))


def send_batch(producer: Any) -> None:
    for index in range(20):
        producer.send_async(f"m{index}".encode(), None, partition_key=f"k{index % 2}")
    producer.flush()


CASES: dict[str, tuple[dict[str, object], Callable[[Any], None]]] = {
    "unbatched": ({"batching_enabled": False}, send_plain),
    "unbatched_lz4": ({"batching_enabled": False,
                       "compression_type": pulsar.CompressionType.LZ4}, send_plain),
    "batched": ({"batching_enabled": True, "batching_max_publish_delay_ms": 50}, send_batch),
    "batched_zstd": ({"batching_enabled": True, "batching_max_publish_delay_ms": 50,
                      "compression_type": pulsar.CompressionType.ZSTD}, send_batch),
    "chunked": ({"batching_enabled": False, "chunking_enabled": True},
                lambda producer: producer.send(bytes(range(256)) * 2000)),
    # uncompressed_size beyond maxMessageSize: the client checks only the compressed size,
    # and every chunk of a compressed message carries the whole message's uncompressed size
    "unbatched_lz4_beyond_max_size": ({"batching_enabled": False,
                                       "compression_type": pulsar.CompressionType.LZ4},
                                      lambda producer: producer.send(b"\0" * 500_000)),
    "batched_lz4_beyond_max_size": ({"batching_enabled": True,
                                     "compression_type": pulsar.CompressionType.LZ4},
                                    lambda producer: producer.send(b"\0" * 500_000)),
    "chunked_lz4": ({"batching_enabled": False, "chunking_enabled": True,
                     "compression_type": pulsar.CompressionType.LZ4},
                    lambda producer: producer.send(random.Random(7).randbytes(150_000)
                                                   + b"\0" * 1_000_000)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_official_client_entries_take_the_scan_path(
        broker_factory: Callable[..., Any], scanned: list[tuple[Scanned, tuple[int, bool, int | None]]],
        case: str) -> None:
    producer_options, send = CASES[case]
    # chunks: a message above maxMessageSize (the client reads it from CONNECTED) is split
    handle = broker_factory(config_overrides={"maxMessageSize": 100_000})
    client = pulsar.Client(handle.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(
            f"persistent://public/default/scan-{case}", **producer_options)
        send(producer)
        producer.close()
    finally:
        client.close()
    assert scanned
    assert [result for result, _ in scanned if result is None] == []
    assert [result for result, _ in scanned] == [verdict for _, verdict in scanned]
    if case.startswith("chunked"):
        assert sum(partial for _, (_, partial, _) in scanned) == len(scanned) - 1 >= 1
    if case in ("batched", "batched_zstd"):
        assert sum(messages for _, (messages, _, _) in scanned) == 20
