"""bench/delayed_pulsar.py's raw-wire delayed publish against a real Horae broker (the same
frames reach Pulsar in the benchmark; a JVM here would be slow): every message confirmed, read
into the subscription's delayed index with its own deliver time, none delivered early, the
index figure read from /metrics (counts only; timing is never asserted)."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator

import pytest

from bench.brokers import Broker, start_horae
from bench.delayed import scale_deliver_times
from bench.delayed_pulsar import (
    Holder,
    PulsarRun,
    build_chunk,
    metric_series,
    metrics_text,
    publish_delayed,
    wait_read_in,
)
from bench.wire_clients import subscribe
from protocol.frames import NEED_DATA, FrameDecoder
from protocol.metadata import parse_metadata


@pytest.fixture(scope="module")
def horae(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp: pathlib.Path = tmp_path_factory.mktemp("delayed-pulsar")
    with start_horae(tmp, fsync=False) as broker:
        yield broker


def test_frames_carry_each_message_its_deliver_time_round_robin() -> None:
    items = [(i, 1000 * i) for i in range(7)]
    parts = build_chunk(items, 3, base_ms=5_000_000, publish_ms=42)
    assert [seqs for _, seqs in parts] == [[0, 1, 2], [0, 1], [0, 1]]
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(parts[1][0]))
    frames = []
    while (frame := decoder.next_frame()) is not NEED_DATA:
        frames.append(frame)
    assert [f.command.send.sequence_id for f in frames] == [0, 1]
    assert all(f.checksum_valid is not False for f in frames)
    metadata = [parse_metadata(f.entry) for f in frames]   # messages 1 and 4
    assert [m.deliver_at_time for m in metadata] == [5_001_000, 5_004_000]
    assert [m.producer_name for m in metadata] == ["dl-1", "dl-1"]


def test_metric_series_sums_one_topics_lines() -> None:
    text = "\n".join([
        '# TYPE pulsar_delayed_message_index_size_bytes gauge',
        'pulsar_delayed_message_index_size_bytes{cluster="c",topic="t1"} 10',
        'pulsar_delayed_message_index_size_bytes{cluster="c",topic="t2"} 99',
        'pulsar_delayed_message_index_loaded{cluster="c",topic="t1",bucket="a"} 3',
        'pulsar_delayed_message_index_loaded{cluster="c",topic="t1",bucket="b"} 4',
        'pulsar_delayed_message_index_loaded{cluster="c",topic="t1",subscription="s"} 7',
    ])
    assert metric_series(text, "pulsar_delayed_message_index", "t1") == {
        "pulsar_delayed_message_index_size_bytes": 10.0,
        "pulsar_delayed_message_index_loaded": 7.0}


def test_raw_wire_delayed_publish_fills_the_index(horae: Broker) -> None:
    n = 2_503   # not a multiple of the connections nor of the chunk
    topic = "persistent://public/default/delayed-wire"

    async def scenario() -> tuple[PulsarRun, int, int, dict[str, float]]:
        run = PulsarRun("dense", n)
        holder = Holder(await subscribe(horae, topic))
        try:
            base_ms = 4_000_000_000_000   # year 2096: nothing falls due
            await publish_delayed(horae, topic, scale_deliver_times("dense", n), n, run,
                                  base_ms=base_ms, connections=3, in_flight=50, chunk=1_000)
            indexed = await wait_read_in(horae, topic, n, poll_s=0.2, stable_polls=50,
                                         timeout_s=60)
            text = await asyncio.to_thread(metrics_text, horae)
            return run, indexed, holder.delivered, metric_series(
                text, "pulsar_delayed_message_index_size_bytes", topic)
        finally:
            holder.close()

    run, indexed, early, index = asyncio.run(scenario())
    assert run.published == n
    assert run.publish_s > 0 and run.broker_cpu_publish_s >= 0
    assert indexed == n
    assert early == 0
    assert index["pulsar_delayed_message_index_size_bytes"] > 0
