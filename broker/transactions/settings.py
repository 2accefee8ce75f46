"""The transaction settings of a broker configuration, as the service takes them."""

from __future__ import annotations

from broker.config import BrokerConfig
from broker.transactions.limits import TransactionLimits
from broker.transactions.log_batch import BatchSettings
from broker.transactions.service import TransactionSettings

__all__ = ["transaction_settings"]


def transaction_settings(config: BrokerConfig) -> TransactionSettings:
    return TransactionSettings(
        log_batching=BatchSettings(
            enabled=config.transaction_log_batched_write_enabled,
            max_records=config.transaction_log_batched_write_max_records,
            max_size=config.transaction_log_batched_write_max_size,
            max_delay_ms=config.transaction_log_batched_write_max_delay_in_millis),
        pending_ack_batching=BatchSettings(
            enabled=config.transaction_pending_ack_batched_write_enabled,
            max_records=config.transaction_pending_ack_batched_write_max_records,
            max_size=config.transaction_pending_ack_batched_write_max_size,
            max_delay_ms=config.transaction_pending_ack_batched_write_max_delay_in_millis),
        snapshot_max_transactions=config.transaction_buffer_snapshot_max_transaction_count,
        snapshot_min_interval_ms=config.transaction_buffer_snapshot_min_time_in_millis,
        limits=TransactionLimits.of(
            config.max_active_transactions_per_coordinator,
            config.max_transaction_timeout_millis, config.max_pending_acks_per_transaction,
            config.max_pending_acks_per_subscription))
