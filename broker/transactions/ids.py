"""Transaction ids, statuses and the errors of the transaction commands.

A transaction id is Pulsar's ``TxnID(mostSigBits, leastSigBits)``: the coordinator's id in the
most significant bits, its sequence in the least. Statuses follow Pulsar's ``TxnStatus``:
OPEN -> COMMITTING -> COMMITTED, OPEN -> ABORTING -> ABORTED, nothing else.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from protocol.errors import RequestError, ServerError

__all__ = [
    "InvalidTxnStatusError",
    "TransactionConflictError",
    "TransactionCoordinatorNotFoundError",
    "TransactionNotFoundError",
    "TxnId",
    "TxnStatus",
]


class TxnId(NamedTuple):
    most: int
    least: int

    def __str__(self) -> str:
        return f"({self.most},{self.least})"


class TxnStatus(enum.Enum):
    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"

    @property
    def ended(self) -> bool:
        return self is TxnStatus.COMMITTED or self is TxnStatus.ABORTED


class TransactionCoordinatorNotFoundError(RequestError):
    default_code = ServerError.TransactionCoordinatorNotFound


class InvalidTxnStatusError(RequestError):
    default_code = ServerError.InvalidTxnStatus


class TransactionConflictError(RequestError):
    default_code = ServerError.TransactionConflict


class TransactionNotFoundError(RequestError):
    default_code = ServerError.TransactionNotFound


def invalid_status(txn: TxnId, expected: TxnStatus, actual: TxnStatus) -> InvalidTxnStatusError:
    """Pulsar's InvalidTxnStatusException text."""
    return InvalidTxnStatusError(
        f"[{txn}] Expect Txn `{txn}` to be in {expected.value} status but it is in "
        f"{actual.value} status")


def not_found(txn: TxnId, ended: TxnStatus | None = None) -> TransactionNotFoundError:
    """What Pulsar answers for an unknown transaction, and for an ended one (its coordinator
    forgets a transaction as it ends); *ended* names how it ended when that is known."""
    how = f" (it has ended: {ended.value})" if ended is not None else ""
    return TransactionNotFoundError(f"Transaction {txn} not found{how}")
