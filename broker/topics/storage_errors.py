"""The one place where storage's exceptions become Pulsar's ``ServerError`` answers.

Theory of operation
-------------------
storage/ raises :mod:`storage.errors` exceptions and never imports protocol/. Whatever part of
the broker calls storage and has to answer a client (the publish path, topic load, subscribe,
seek, the admin REST API) hands the exception to :func:`storage_failure` together with the
:class:`StorageOp` it was doing, and gets back the request-scoped
:class:`protocol.errors.RequestError` to answer with (SEND_ERROR, ERROR, or an HTTP status via
the admin error middleware) and whether the topic must be reloaded.

The codes and texts follow Pulsar (``BrokerServiceException.getClientErrorCode`` and
``ServerCnx``):

===================================  ====================  =====================================
storage exception                    ServerError           why
===================================  ====================  =====================================
any, while seeking (SEEK_*)          UnknownError          ServerCnx.handleSeek answers every
                                                           failure so, "Reset subscription to
                                                           message id|publish time error: ..."
CursorNotFoundError                  SubscriptionNotFound  Pulsar's "Subscription not found"
LedgerNotFoundError                  TopicNotFound         Pulsar's "Topic not found"
StorageReadOnlyError (disk above    ProducerBlockedQuota  on the publish path: not answered
diskUsageThreshold), publishing     ExceededException     with a SEND_ERROR (the client would
                                                           close the connection); the producer
                                                           is closed and its re-creation
                                                           refused with this code, on which the
                                                           client fails its pending sends
                                                           (broker/topics/publish_refusals.py)
TooManyOpenFilesError (EMFILE)      PersistenceError      a resource limit, not a disk failure:
                                                           storage abandons the segment and
                                                           rolls over; reloading would need
                                                           more descriptors -> no reload
EntryTooLargeError                   NotAllowedError       the entry can never be stored; the
                                                           ledger is fine -> no reload
PersistenceError (write/fsync        PersistenceError      addFailed: PersistenceException; the
failed, ledger fenced or closed)                           ledger is fenced -> reload the topic
CorruptRecordError                   PersistenceError      a failed entry read (BookKeeper's
                                                           digest mismatch) is a
                                                           ManagedLedgerException
any other StorageError               PersistenceError      ManagedLedgerException ->
                                                           PersistenceException
===================================  ====================  =====================================

On the publish path a failed write (PersistenceError) or an exception that is not a
StorageError reloads the topic (nothing that failed was acknowledged; producers reconnect to a
fresh ledger); every exception is answered, none may close a connection. TooManyOpenFilesError
and EntryTooLargeError never reload (nothing is fenced), and elsewhere only storage's write
failures reload the topic.

Pure function of the exception; no IO. Imports storage.errors and protocol.errors only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from protocol.errors import (
    NotAllowedError,
    PersistenceError,
    RequestError,
    ServerError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)
from storage import errors as storage

__all__ = ["StorageFailure", "StorageOp", "storage_failure"]


class StorageOp(enum.Enum):
    """What the broker was doing when storage failed (it chooses Pulsar's text)."""

    PUBLISH = "Failed to persist the message"
    LOAD_TOPIC = "Failed to load the topic"
    SUBSCRIBE = "Failed to open the subscription"
    SEEK_MESSAGE_ID = "Reset subscription to message id error"
    SEEK_PUBLISH_TIME = "Reset subscription to publish time error"
    ADMIN = "Storage operation failed"


_SEEKS = (StorageOp.SEEK_MESSAGE_ID, StorageOp.SEEK_PUBLISH_TIME)


@dataclass(frozen=True, slots=True)
class StorageFailure:
    """The answer to a failed storage call: the request error, and whether the topic's ledger
    accepts no more appends (the topic is fenced and reloaded)."""

    error: RequestError
    reload_topic: bool
    block_producer: bool = False
    """The store is read-only (disk full): close the producer and refuse its re-creation
    instead of answering the send (publish path only)."""


def storage_failure(exc: BaseException, op: StorageOp) -> StorageFailure:
    """Map *exc*, raised by storage while doing *op*, to Pulsar's answer (module docstring)."""
    text = f"{op.value}: {exc}" if str(exc) else f"{op.value}: {type(exc).__name__}"
    publishing = op is StorageOp.PUBLISH
    if op in _SEEKS:
        return StorageFailure(RequestError(text, ServerError.UnknownError), False)
    if isinstance(exc, storage.CursorNotFoundError):
        return StorageFailure(SubscriptionNotFoundError("Subscription not found"), False)
    if isinstance(exc, storage.LedgerNotFoundError):
        return StorageFailure(TopicNotFoundError("Topic not found"), False)
    if isinstance(exc, storage.StorageReadOnlyError):
        code = (ServerError.ProducerBlockedQuotaExceededException if publishing
                else ServerError.PersistenceError)
        return StorageFailure(RequestError(text, code), False, block_producer=publishing)
    if isinstance(exc, storage.TooManyOpenFilesError):
        return StorageFailure(PersistenceError(text), False)
    if isinstance(exc, storage.EntryTooLargeError):
        return StorageFailure(NotAllowedError(text), False)
    if isinstance(exc, storage.PersistenceError):
        return StorageFailure(PersistenceError(text), True)
    return StorageFailure(PersistenceError(text), publishing)
