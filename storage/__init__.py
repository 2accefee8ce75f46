"""Horae's local storage: managed ledgers of segment files, cursors, bucket snapshots, metadata.

storage/ never imports broker/ or protocol/ and deals in bytes only. Entry points:
SegmentStore.open(root, StorageConfig()) -> store.open_ledger(name) -> ManagedLedger.
"""

from __future__ import annotations

from storage.config import StorageConfig
from storage.cursor import ManagedCursor
from storage.cursor_files import SnapshotKey
from storage.errors import (
    CorruptRecordError,
    CursorNotFoundError,
    EntryTooLargeError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerNotFoundError,
    PersistenceError,
    SnapshotNotFoundError,
    StorageError,
    StorageReadOnlyError,
    TooManyOpenFilesError,
)
from storage.fileops import FileOps
from storage.ledger import ManagedLedger
from storage.ledger_state import LedgerInfo
from storage.metadata import MetadataStore
from storage.positions import Entry, Position
from storage.segments import RecoveryEvent
from storage.snapshots import SnapshotStore
from storage.store import OrphanSweep, RecoveryReport, SegmentStore

__all__ = [
    "CorruptRecordError",
    "CursorNotFoundError",
    "Entry",
    "EntryTooLargeError",
    "FileOps",
    "LedgerClosedError",
    "LedgerFencedError",
    "LedgerInfo",
    "LedgerNotFoundError",
    "ManagedCursor",
    "ManagedLedger",
    "MetadataStore",
    "OrphanSweep",
    "PersistenceError",
    "Position",
    "RecoveryEvent",
    "RecoveryReport",
    "SegmentStore",
    "SnapshotKey",
    "SnapshotNotFoundError",
    "SnapshotStore",
    "StorageConfig",
    "StorageError",
    "StorageReadOnlyError",
    "TooManyOpenFilesError",
]
