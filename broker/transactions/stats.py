"""Typed, read-only figures of the transaction components (for admin routes and metrics).

Each component builds these on demand from its own state; nothing here is kept up to date on
the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CoordinatorStats",
    "PendingAckStats",
    "TopicBufferStats",
    "TransactionStats",
]


@dataclass(frozen=True, slots=True)
class TransactionStats:
    """One transaction as the coordinator knows it (Pulsar's TransactionMetadata)."""

    txn_id: str                # "(most,least)"
    status: str                # OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED
    opened_at_ms: int          # epoch ms
    timeout_at_ms: int         # epoch ms at which an open transaction is aborted
    ended_at_ms: int           # epoch ms, 0 while not ended
    partitions: tuple[str, ...]                  # topics as the client named them
    subscriptions: tuple[tuple[str, str], ...]  # (topic as the client named it, subscription)
    owner: str                 # the role that opened it ("" without authentication)
    partition_topics: tuple[str, ...] = ()      # the full name of each of ``partitions``
    subscription_topics: tuple[str, ...] = ()   # the full topic name of each subscription


@dataclass(frozen=True, slots=True)
class CoordinatorStats:
    """Pulsar's TransactionCoordinatorStats plus the counters behind its metrics."""

    coordinator_id: int
    state: str                 # "Ready" once recovered
    least_sig_bits: int        # the last sequence handed out
    ongoing: int               # OPEN, COMMITTING or ABORTING
    created_total: int
    committed_total: int
    aborted_total: int
    timed_out_total: int
    log_records_appended: int
    log_size_bytes: int
    log_ledgers: int           # ledgers the log holds now (older ones are trimmed)
    log_first_ledger_id: int   # -1 when empty
    recovery_time_ms: int
    commit_latency_ms_sum: float
    commit_latency_count: int


@dataclass(frozen=True, slots=True)
class TopicBufferStats:
    """Pulsar's TransactionBufferStats of one topic."""

    topic: str
    state: str                 # "Ready" (recovered) or "Initializing"
    max_read_position: str     # "ledger:entry", "-1:-1" when nothing is readable yet
    ongoing_txns: int
    committed_txns: int        # since the topic's buffer was created (or recovered)
    aborted_txns: int
    hidden_entries: int        # aborted entries and markers skipped on dispatch
    held_back: bool            # an open transaction holds later entries back
    last_snapshot_ms: int = 0  # when its last snapshot was taken (0: none)
    snapshot_upto: str = ""    # "ledger:entry" the last snapshot covers ("": none)


@dataclass(frozen=True, slots=True)
class PendingAckStats:
    """Pulsar's TransactionPendingAckStats of one subscription."""

    topic: str
    subscription: str
    state: str
    ongoing_txns: int
    pending_individual_acks: int
    pending_cumulative_acks: int
    committed_txns: int
    aborted_txns: int
