"""ShadowLedger: a managed ledger that reads another one's entries and keeps its own cursors.

Theory of operation (Pulsar's ShadowManagedLedger, on one node):

- A shadow managed ledger has a directory of its own (its name, its ``cursors/``), but no
  segments: its entries are the *source* managed ledger's. The ledger list, the reader, the
  last confirmed position and the position arithmetic are the source's very objects, so
  what the source makes durable is readable through the shadow at once, with the source's
  positions (message ids are the source's).
- Its cursors are its own (a CursorSet over the shared ledger list, saved in the shadow's
  directory): a cursor of the shadow never holds the source back, and the source's cursors
  are not the shadow's. As in Pulsar, the source's retention alone decides when its ledgers
  go; a shadow cursor behind a trimmed ledger moves on to what is left.
- Nothing is appended through a shadow (``append`` / ``append_run`` raise
  LedgerClosedError), it never trims, and closing it closes its cursors only. Listeners
  added to it are the source's listeners (told after each group commit of the source) and
  are removed when the shadow closes.
- The view is valid while the source stays open: whoever closes the source closes its
  shadows first (the store keeps them apart; the broker does it). A source may itself be a
  shadow: the objects shared are then its source's, and listeners pass through it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from storage.cursor_files import CursorFiles, LoadedCursor
from storage.cursors import CursorSet
from storage.errors import LedgerClosedError
from storage.ledger import LedgerContext, ManagedLedger, positions_reader
from storage.ledger_appends import LedgerLifecycle
from storage.positions import Position
from storage.relocation import RelocatedEntries, RelocatedState
from storage.segment_file import DurableSink

__all__ = ["ShadowLedger"]

log = logging.getLogger("horae.storage")


class ShadowLedger(ManagedLedger):
    """A read view over *source* with cursors of its own (see the module docstring)."""

    def __init__(self, ctx: LedgerContext, name: str, directory: Path, source: ManagedLedger,
                 cursors: list[LoadedCursor]) -> None:
        # The data side is the source's (shared objects, never copies); not super().__init__,
        # which would recover segments and start a ledger of its own.
        self._ctx = ctx
        self.name = name
        self.directory = directory
        self.source = source
        self.entries_read = 0
        self._list = source._list
        self._ledgers = source._ledgers
        self._ledger_ids = source._ledger_ids
        self._appends = source._appends
        self.caching = source.caching   # the source's entries: cached while either reads them
        self.appends_in_flight = source.appends_in_flight   # the one store's writer
        self._reader = source._reader
        self.read_positions = positions_reader(self, self._reader)
        # Its own (empty) relocation record: the source's is read through the shared reader,
        # and counted once, with the source.
        self.relocated = RelocatedEntries(directory, RelocatedState(), fsync=ctx.config.fsync,
                                          loop=ctx.loop, pool=ctx.io_pool,
                                          read_pool=ctx.read_pool)
        self._closed = False
        self._listeners: list[Callable[[Position], None]] = []
        self.append = self._no_append
        self.append_run = self._no_append_run
        self.add_listener = self._listen
        self.remove_listener = self._unlisten
        self._cursor_set = CursorSet(
            self, CursorFiles(ctx.ops, directory / "cursors", fsync=ctx.config.fsync),
            ctx.loop, ctx.cursor_pool, ctx.ids.ensure_durable, cursors,
            on_dirty=lambda: ctx.on_cursor_dirty(self),
        )

    @property
    def source_name(self) -> str:
        return self.source.name

    def _no_append(self, data: bytes) -> asyncio.Future[Position]:
        raise LedgerClosedError(f"managed ledger {self.name} is a shadow: it takes no appends")

    def _no_append_run(self, datas: list[bytes], sink: DurableSink) -> None:
        raise LedgerClosedError(f"managed ledger {self.name} is a shadow: it takes no appends")

    def _listen(self, callback: Callable[[Position], None]) -> None:
        self._listeners.append(callback)
        self.source.add_listener(callback)

    def _unlisten(self, callback: Callable[[Position], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)
        self.source.remove_listener(callback)

    @property
    def state(self) -> LedgerLifecycle:
        return LedgerLifecycle.CLOSED if self._closed else LedgerLifecycle.OPEN

    @property
    def accepts_appends(self) -> bool:
        return False

    @property
    def fenced(self) -> bool:
        return False

    @property
    def appends_refused_read_only(self) -> int:
        return 0

    async def trim(self, up_to_ledger_id: int | None = None) -> list[int] | None:
        """The source's ledgers are the source's to delete: nothing is trimmed here."""
        return []

    async def close(self) -> None:
        """Persist the shadow's cursors and stop hearing the source. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            for callback in self._listeners:
                self.source.remove_listener(callback)
            self._listeners.clear()
            for cursor_name, error in await self._cursor_set.close():
                log.error("shadow managed ledger %s: persisting cursor %s failed: %s",
                          self.name, cursor_name, error)
        finally:
            self._ctx.on_close(self)

    @property
    def closed(self) -> bool:
        return self._closed
