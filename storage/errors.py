"""Storage exceptions: what storage/ raises, and what the broker may conclude from each.

storage/ never imports protocol/: the broker maps these to ServerError codes at the seam,
in one place. The hierarchy is meant to be matched from the most specific class down:

  StorageError                   base of everything storage/ raises (ServerError.UnknownError)
    PersistenceError             an append was not made durable (ServerError.PersistenceError)
      LedgerFencedError          an earlier write/fsync failed: close and reopen the ledger
      LedgerClosedError          the managed ledger (or store) is closed
    StorageReadOnlyError         the disk is nearly full: appends refused until usage falls
                                 below the low watermark; reads, acks, trims keep working
                                 (the broker tells producers, e.g. as Pulsar's quota
                                 exceeded error, instead of reloading the topic)
    TooManyOpenFilesError        EMFILE/ENFILE: a resource limit, not a disk failure (the
                                 ledger is not fenced; retry later)
    EntryTooLargeError           an entry over the record limit (ServerError.NotAllowedError)
    CorruptRecordError           a record/file failed its CRC or framing checks
    LedgerNotFoundError          no managed ledger (or ledger) with that name or id
    CursorNotFoundError          no cursor with that name (ServerError.SubscriptionNotFound)
    SnapshotNotFoundError        no bucket snapshot with that id
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every error raised by storage/."""


class PersistenceError(StorageError):
    """An append was not made durable: a write or fsync failed (the ledger is then fenced
    and accepts no more appends until reopened), or the ledger is closed."""


class LedgerFencedError(PersistenceError):
    """An earlier write or fsync of this managed ledger failed; close and reopen it (a reopen
    starts a new ledger and cuts the failed segment back to what was synced)."""


class LedgerClosedError(PersistenceError):
    """The managed ledger or the store is closed (or closing)."""


class StorageReadOnlyError(StorageError):
    """The store is read-only because disk usage reached the high watermark; appends are
    refused until usage falls below the low watermark. Nothing is fenced."""


class TooManyOpenFilesError(StorageError):
    """The process ran out of file descriptors (EMFILE/ENFILE). Not a disk failure: the
    ledger is not fenced."""


class EntryTooLargeError(StorageError):
    """An entry is larger than a record may be (storage/segments.py MAX_RECORD_BYTES)."""


class CorruptRecordError(StorageError):
    """A record failed its CRC32C or framing check; its bytes are never returned as data."""


class LedgerNotFoundError(StorageError):
    """No managed ledger (or ledger) with that name or id."""


class CursorNotFoundError(StorageError):
    """No cursor with that name on this managed ledger."""


class SnapshotNotFoundError(StorageError):
    """No bucket snapshot with that id (or no such segment in it)."""
