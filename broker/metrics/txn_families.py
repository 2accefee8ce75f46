"""Pulsar's transaction metrics (``pulsar_txn_*``), from the transaction components' figures.

Theory of operation
-------------------
With ``transactionCoordinatorEnabled`` the broker's transaction service hands out typed,
read-only figures built on demand (``broker.transactions.stats``); this module reads them
through the protocols below only (it imports no higher layer) and writes Pulsar 4.0's series,
names, types and labels as a Pulsar standalone exposes them:

- coordinator (gauges, labels ``cluster``, ``coordinator_id``): ``pulsar_txn_active_count``
  (open, committing or aborting), ``pulsar_txn_created_total``, ``pulsar_txn_committed_total``,
  ``pulsar_txn_aborted_total``, ``pulsar_txn_timeout_total``, ``pulsar_txn_append_log_total``
  (records appended to the transaction log);
- transaction buffer (gauges, labels ``cluster``, ``namespace``, ``topic``; summed by
  namespace, without ``topic``, when topic-level metrics are off, as Pulsar's other topic
  series): ``pulsar_txn_tb_active_total``, ``pulsar_txn_tb_committed_total``,
  ``pulsar_txn_tb_aborted_total``;
- pending acks (counters, labels ``namespace``, ``topic``, ``subscription``, ``status``; topic
  and subscription left out when topic-level metrics are off): ``pulsar_txn_tp_committed_count``
  and ``pulsar_txn_tp_aborted_count`` (``_total`` samples), status ``succeed``.

Nothing is written without the coordinator, as Pulsar writes none then. Pulsar's
``pulsar_txn_execution_latency_le_*`` buckets and its transaction-log buffered-writer series are
not written (Horae's coordinator keeps no per-transaction latency histogram, and its log has no
buffered writer).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.metrics.exposition import topic_namespace

__all__ = ["TransactionFigures", "transaction_families"]


class CoordinatorFigures(Protocol):
    @property
    def coordinator_id(self) -> int: ...

    @property
    def ongoing(self) -> int: ...

    @property
    def created_total(self) -> int: ...

    @property
    def committed_total(self) -> int: ...

    @property
    def aborted_total(self) -> int: ...

    @property
    def timed_out_total(self) -> int: ...

    @property
    def log_records_appended(self) -> int: ...


class BufferFigures(Protocol):
    @property
    def ongoing_txns(self) -> int: ...

    @property
    def committed_txns(self) -> int: ...

    @property
    def aborted_txns(self) -> int: ...


class PendingAckFigures(Protocol):
    @property
    def committed_txns(self) -> int: ...

    @property
    def aborted_txns(self) -> int: ...


class TransactionFigures(Protocol):
    """``broker.transactions.service.TransactionService``."""

    def coordinator_stats(self) -> CoordinatorFigures: ...

    def buffer_stats(self) -> Mapping[str, BufferFigures]: ...

    def pending_ack_stats(self) -> Mapping[tuple[str, str], PendingAckFigures]: ...


_COORDINATOR = (
    ("pulsar_txn_active_count", "Transactions open, committing or aborting", "ongoing"),
    ("pulsar_txn_created_total", "Transactions created", "created_total"),
    ("pulsar_txn_committed_total", "Transactions committed", "committed_total"),
    ("pulsar_txn_aborted_total", "Transactions aborted", "aborted_total"),
    ("pulsar_txn_timeout_total", "Transactions aborted by their timeout", "timed_out_total"),
    ("pulsar_txn_append_log_total", "Records appended to the transaction log",
     "log_records_appended"),
)
_BUFFER = (
    ("pulsar_txn_tb_active_total", "Open transactions that produced on the topic", "ongoing_txns"),
    ("pulsar_txn_tb_committed_total", "Transactions committed on the topic", "committed_txns"),
    ("pulsar_txn_tb_aborted_total", "Transactions aborted on the topic", "aborted_txns"),
)
_PENDING_ACK = (
    ("pulsar_txn_tp_committed_count", "Transactions committed on the subscription",
     "committed_txns"),
    ("pulsar_txn_tp_aborted_count", "Transactions aborted on the subscription", "aborted_txns"),
)


def transaction_families(txns: TransactionFigures | None, cluster: str,
                         topic_level: bool) -> Iterator[Metric]:
    """The ``pulsar_txn_*`` families (nothing without the coordinator)."""
    if txns is None:
        return
    coordinator = txns.coordinator_stats()
    for name, doc, attr in _COORDINATOR:
        gauge = GaugeMetricFamily(name, doc, labels=["cluster", "coordinator_id"])
        gauge.add_metric([cluster, str(coordinator.coordinator_id)],
                         float(getattr(coordinator, attr)))
        yield gauge

    buffers = txns.buffer_stats()
    for name, doc, attr in _BUFFER:
        labels = ["cluster", "namespace", "topic"] if topic_level else ["cluster", "namespace"]
        gauge = GaugeMetricFamily(name, doc, labels=labels)
        sums: dict[tuple[str, ...], float] = {}
        for topic, stats in sorted(buffers.items()):
            key = (cluster, topic_namespace(topic)) + ((topic,) if topic_level else ())
            sums[key] = sums.get(key, 0.0) + float(getattr(stats, attr))
        for key, value in sums.items():
            gauge.add_metric(list(key), value)
        yield gauge

    pending = txns.pending_ack_stats()
    for name, doc, attr in _PENDING_ACK:
        labels = (["namespace", "topic", "subscription", "status"] if topic_level
                  else ["namespace", "status"])
        counter = CounterMetricFamily(name, doc, labels=labels)
        totals: dict[tuple[str, ...], float] = {}
        for (topic, sub), sub_stats in sorted(pending.items()):
            key = ((topic_namespace(topic), topic, sub, "succeed") if topic_level
                   else (topic_namespace(topic), "succeed"))
            totals[key] = totals.get(key, 0.0) + float(getattr(sub_stats, attr))
        for key, value in totals.items():
            counter.add_metric(list(key), value)
        yield counter
