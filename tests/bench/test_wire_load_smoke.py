"""bench/wire_load.py drives a real Horae broker end to end: every message published is
confirmed in order and drained exactly once (counts only; timing is never asserted)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from bench.brokers import Broker, start_horae
from bench.wire_load import LoadSettings, run_load


@pytest.fixture(scope="module")
def horae(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    tmp: pathlib.Path = tmp_path_factory.mktemp("wire-load")
    with start_horae(tmp) as broker:
        yield broker


def test_wire_load_unbatched_counts_add_up(horae: Broker) -> None:
    settings = LoadSettings(connections=2, in_flight=16, messages=301, permits=50,
                            ack_batch=20, timeout_s=60.0)
    result = run_load(horae, "persistent://public/default/smoke-unbatched", settings)
    assert result.entries == 301
    assert result.receipts == 301
    assert result.published == 301
    assert result.consumed == 301
    assert result.consumed_entries == 301
    assert result.duplicates == 0
    assert result.bad_checksums == 0
    assert result.figures["publish (msg/s)"] > 0
    # Horae's writer over the publish phase, from its /metrics: every entry group-committed
    # and fdatasynced (fsync is on by default)
    commit = result.group_commit
    committed = commit["entries per group commit"] * commit["group commits/s"] * result.publish_s
    assert committed >= 301 - 0.5
    assert commit["fdatasyncs/s"] > 0
    assert commit["fdatasync busy %"] > 0


def test_wire_load_batched_counts_add_up(horae: Broker) -> None:
    # 2 connections x 150 messages in entries of 7: 21 full entries and one of 3 each
    settings = LoadSettings(connections=2, in_flight=4, messages=300, batch=7, permits=40,
                            ack_batch=5, timeout_s=60.0)
    result = run_load(horae, "persistent://public/default/smoke-batched", settings)
    assert result.entries == 44
    assert result.receipts == 44
    assert result.published == 300
    assert result.consumed == 300
    assert result.consumed_entries == 44
    assert result.duplicates == 0
