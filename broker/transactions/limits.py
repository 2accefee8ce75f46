"""The bounds of the transaction side, from the broker's configuration.

Theory of operation: every table the coordinator and the pending-ack stores keep grows with
what clients ask for, so each has a limit, checked before anything is logged:

- ``maxActiveTransactionsPerCoordinator`` (Pulsar's key): transactions not yet ended. Pulsar's
  default, 0, means no limit there; here 0 means :data:`ACTIVE_CEILING`, and the default is
  :data:`DEFAULT_MAX_ACTIVE`. Past it NEW_TXN is refused as Pulsar refuses it (UnknownError,
  "New txn op reach max active txn! tcId : 0").
- ``maxTransactionTimeoutMillis`` (Horae's key; Pulsar takes any timeout): a longer timeout a
  client asks for is cut to it (the transaction is aborted when it passes, as any other).
- ``maxPendingAcksPerTransaction`` / ``maxPendingAcksPerSubscription`` (Horae's keys):
  individual acknowledgements one transaction holds pending, over all its subscriptions, and
  pending on one subscription, over all transactions. An ACK past either is refused with
  NotAllowed naming the key; the transaction stays usable (it may still end).
- :data:`MAX_PARTICIPANTS` partitions and subscriptions one transaction may add (each a row
  of its metadata and of its log records); past it ADD_PARTITION_TO_TXN /
  ADD_SUBSCRIPTION_TO_TXN answer NotAllowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["ACTIVE_CEILING", "DEFAULT_LIMITS", "DEFAULT_MAX_ACTIVE", "DEFAULT_MAX_TIMEOUT_MS",
           "TransactionLimits"]

#: Open transactions when ``maxActiveTransactionsPerCoordinator`` is 0 (Pulsar's "no limit").
ACTIVE_CEILING: Final = 100_000
DEFAULT_MAX_ACTIVE: Final = 10_000
DEFAULT_MAX_TIMEOUT_MS: Final = 7 * 24 * 3600 * 1000
DEFAULT_MAX_PENDING_ACKS_PER_TRANSACTION: Final = 50_000
DEFAULT_MAX_PENDING_ACKS_PER_SUBSCRIPTION: Final = 200_000
MAX_PARTICIPANTS: Final = 10_000


@dataclass(frozen=True, slots=True)
class TransactionLimits:
    max_active: int = DEFAULT_MAX_ACTIVE
    max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS
    max_pending_acks_per_txn: int = DEFAULT_MAX_PENDING_ACKS_PER_TRANSACTION
    max_pending_acks_per_subscription: int = DEFAULT_MAX_PENDING_ACKS_PER_SUBSCRIPTION
    max_participants: int = MAX_PARTICIPANTS

    @classmethod
    def of(cls, max_active: int, max_timeout_ms: int, per_txn: int,
           per_subscription: int) -> TransactionLimits:
        """From the configured values (``maxActiveTransactionsPerCoordinator`` 0: the
        ceiling)."""
        return cls(max_active if max_active > 0 else ACTIVE_CEILING, max_timeout_ms, per_txn,
                   per_subscription)


#: The defaults (tests and embedders that set none).
DEFAULT_LIMITS: Final = TransactionLimits()
