"""Storage exceptions. storage/ never imports protocol/: the broker maps these to ServerError."""

from __future__ import annotations


class StorageError(Exception):
    """Base of every error raised by storage/."""


class PersistenceError(StorageError):
    """A write or fsync failed: the ledger is fenced and accepts no more appends until reopened."""


class CorruptRecordError(StorageError):
    """A record failed its CRC32C or framing check; its bytes are never returned as data."""


class LedgerNotFoundError(StorageError):
    """No managed ledger (or ledger) with that name or id."""


class CursorNotFoundError(StorageError):
    """No cursor with that name on this managed ledger."""


class SnapshotNotFoundError(StorageError):
    """No bucket snapshot with that id (or no such segment in it)."""
