"""The benchmark peers' settings and the ratio convention, checked without starting any broker
(Apache Pulsar is never downloaded or run by the tests)."""

from __future__ import annotations

import math

import pytest

from bench.brokers import DEFAULT_PEERS, STARTERS, parse_peers
from bench.peer_table import (
    advantage,
    best,
    format_table,
    relaxed_table,
    with_relaxed,
    without_relaxed_horae,
)
from bench.pulsar_peer import standalone_conf


def test_pulsar_acknowledges_only_after_the_journal_fsync_with_dedup_on() -> None:
    conf = standalone_conf(broker_port=1, web_port=2, sync=True)
    assert conf["journalWriteData"] == "true"
    assert conf["journalSyncData"] == "true"
    assert conf["brokerDeduplicationEnabled"] == "true"
    assert conf["managedLedgerDefaultAckQuorum"] == "1"
    assert conf["bindAddress"] == conf["advertisedAddress"] == "127.0.0.1"
    assert (conf["brokerServicePort"], conf["webServicePort"]) == ("1", "2")


def test_relaxed_pulsar_differs_only_by_the_journal_fsync() -> None:
    durable = standalone_conf(broker_port=1, web_port=2, sync=True)
    relaxed = standalone_conf(broker_port=1, web_port=2, sync=False)
    assert {k for k in durable if durable[k] != relaxed[k]} == {"journalSyncData"}
    assert relaxed["journalSyncData"] == "false"


def test_parse_peers_keeps_order_drops_repeats_and_rejects_unknown_names() -> None:
    assert parse_peers("pulsar, horae,pulsar") == ["pulsar", "horae"]
    assert set(DEFAULT_PEERS) <= set(STARTERS)
    with pytest.raises(ValueError, match="kafka"):
        parse_peers("horae,kafka")
    with pytest.raises(ValueError):
        parse_peers(" , ")


def test_ratio_above_one_means_horae_is_ahead_both_ways() -> None:
    assert advantage(200.0, 100.0, lower_is_better=False) == 2.0  # Horae's rate is double
    assert advantage(1.0, 4.0, lower_is_better=True) == 4.0  # Horae's latency is a quarter
    assert advantage(0.0, 5.0, lower_is_better=True) == math.inf
    assert math.isnan(advantage(0.0, 0.0, lower_is_better=True))
    assert best([3.0, 1.0, math.nan], lower_is_better=True) == 1.0
    assert best([3.0, 1.0], lower_is_better=False) == 3.0


def test_table_has_a_ratio_column_per_peer_and_the_relaxed_pair() -> None:
    figures = {"publish (msg/s)": {"horae": [10.0], "pulsar": [5.0], "horae-nofsync": [30.0],
                                   "pulsar-nosync": [10.0]}}
    text = format_table(figures, ["horae", "pulsar", "horae-nofsync", "pulsar-nosync"], set())
    head, row = text.splitlines()[:2]
    assert "horae/pulsar" in head and "nofsync: horae/pulsar" in head
    assert row.split()[-4:] == ["2.00", "0.33", "1.00", "3.00"]


def test_relaxed_table_compares_horae_without_fsync_with_the_peers_that_never_sync() -> None:
    figures = {"publish (msg/s)": {"horae": [10.0], "pulsar-lite": [20.0],
                                   "horae-nofsync": [30.0, 25.0]},
               "broker CPU s/M msgs, publish": {"horae": [9.0], "pulsar-lite": [8.0],
                                                "horae-nofsync": [4.0]}}
    peers = ["horae", "pulsar-lite", "horae-nofsync"]
    text = relaxed_table(figures, peers, {"broker CPU s/M msgs, publish"})
    head, rate, cpu = text.splitlines()[:3]
    assert head.split()[1:] == ["horae-nofsync", "pulsar-lite", "horae-nofsync/pulsar-lite"]
    assert rate.split()[-3:] == ["30.00", "20.00", "1.50"]   # best round, Horae's relaxed / lite
    assert cpu.split()[-3:] == ["4.00", "8.00", "2.00"]      # lite's CPU / Horae's relaxed
    assert "horae " not in head                               # the synced run is not in it
    # the default table leaves the relaxed run out and keeps its ratios against Horae
    default = format_table(figures, without_relaxed_horae(peers), set())
    assert "horae-nofsync" not in default
    assert default.splitlines()[1].split()[-1] == "0.50"
    # nothing to compare without the relaxed run or without a peer that never syncs
    assert relaxed_table(figures, ["horae", "pulsar-lite"], set()) == ""
    assert relaxed_table(figures, ["horae", "horae-nofsync"], set()) == ""


def test_relaxed_option_adds_the_equal_durability_pair_once_in_order() -> None:
    assert with_relaxed(["horae"]) == ["horae", "pulsar-lite", "horae-nofsync"]
    assert with_relaxed(["horae-nofsync", "pulsar-lite", "pulsar"]) == [
        "horae-nofsync", "pulsar-lite", "pulsar"]
