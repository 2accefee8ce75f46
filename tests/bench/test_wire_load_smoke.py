"""bench/wire_load.py drives a real Horae broker end to end: every message published is
confirmed in order and drained exactly once (counts only; timing is never asserted)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from bench.brokers import Broker, start_horae
from bench.wire_load import LoadResult, LoadSettings, print_table, run_load


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


def test_relaxed_horae_makes_no_fdatasync(tmp_path: pathlib.Path) -> None:
    # the relaxed run is what its label says: journalSyncData=false, no fdatasync at all
    settings = LoadSettings(connections=2, in_flight=16, messages=200, permits=50,
                            ack_batch=20, timeout_s=60.0)
    with start_horae(tmp_path, fsync=False) as broker:
        assert broker.name == "horae-nofsync"
        result = run_load(broker, "persistent://public/default/smoke-relaxed", settings)
    assert result.published == result.consumed == 200
    assert result.group_commit["group commits/s"] > 0
    assert result.group_commit["fdatasyncs/s"] == 0


def test_relaxed_run_is_printed_in_a_table_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    settings = LoadSettings(messages=100)
    results: dict[str, list[LoadResult]] = {}
    for name, seconds in (("horae", 4.0), ("pulsar-lite", 2.0), ("horae-nofsync", 1.0)):
        result = LoadResult(name, 100, 100, published=100, consumed=100, publish_s=seconds,
                            consume_s=1.0)
        result.compute_figures()
        results[name] = [result]
    print_table(settings, 1, results)
    default, relaxed = capsys.readouterr().out.split("RELAXED")
    assert "horae/pulsar-lite" in default and "horae-nofsync" not in default
    rate = next(line for line in default.splitlines() if line.startswith("publish (msg/s)"))
    assert rate.split()[-1] == "0.50"
    assert "horae-nofsync/pulsar-lite" in relaxed
    rate = next(line for line in relaxed.splitlines() if line.startswith("publish (msg/s)"))
    assert rate.split()[-3:] == ["100.00", "50.00", "2.00"]
