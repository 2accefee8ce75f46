"""The benchmark peers' settings and the ratio convention, checked without starting any broker
(Apache Pulsar is never downloaded or run by the tests)."""

from __future__ import annotations

import math

import pytest

from bench.brokers import DEFAULT_PEERS, STARTERS, parse_peers
from bench.peer_table import advantage, best, format_table
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
