"""A cursor's properties (str -> str) and the bytes a cursor file holds for them.

A bucketed delayed tracker records one property per sealed bucket and changes one per seal
(and per retired bucket): 2,000 of them for 100M pending messages in 50,000-index buckets,
200,000 in 500-index ones. Encoding them all again for each save was O(properties) Python per
seal (~0.3 s of the loop at 200,000). Here each property keeps its own encoded piece, made
when it is set, and a save joins the pieces (C work, no Python per property); the joined bytes
are kept until a property changes. A cursor loaded from its file starts from the file's bytes
and makes its pieces at the first change (once per process).

Format of the properties' part of a cursor file (little endian): n_props u32, then n_props x
(key_len u32, key utf-8, value_len u32, value utf-8), in the order the properties were set.
"""

from __future__ import annotations

import struct

_U32 = struct.Struct("<I")
#: keys added since the kept bytes were made that a save hands on as pieces of their own;
#: beyond it they are joined to the kept bytes (a save's Python stays O(1) per property)
_APPEND_LIMIT = 64


def _piece(key: str, value: str) -> bytes:
    kb, vb = key.encode(), value.encode()
    return b"".join((_U32.pack(len(kb)), kb, _U32.pack(len(vb)), vb))


def encode_properties(properties: dict[str, str]) -> bytes:
    """The properties' part of a cursor file (their count, then each key and value)."""
    return b"".join((_U32.pack(len(properties)),
                     *(_piece(key, value) for key, value in properties.items())))


class CursorProperties:
    """The properties of one cursor and their encoded form (module docstring). A change costs
    O(1) Python; a new key's piece waits to be appended to the encoded bytes by the next
    :meth:`encoded`, a changed or removed one makes it join the pieces again (C work)."""

    __slots__ = ("_appended", "_blob", "_pieces", "_values")

    def __init__(self, values: dict[str, str], blob: bytes | None = None) -> None:
        """*blob*: ``encode_properties(values)`` when the caller has it (a loaded file's)."""
        self._values = dict(values)
        #: key -> its encoded (key_len, key, value_len, value), in _values' order; made at the
        #: first change or removal of a key when the cursor started from a blob
        self._pieces: dict[str, bytes] | None = None
        #: encode_properties(_values) while it is known (None: join the pieces), but for the
        #: keys in _appended (and the count at its start)
        self._blob: bytes | None = blob
        #: the pieces of the keys added since _blob was made, in order
        self._appended: list[bytes] = []
        if blob is None:
            self._ensure_pieces()

    def copy(self) -> dict[str, str]:
        return dict(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def _ensure_pieces(self) -> dict[str, bytes]:
        if self._pieces is None:
            self._pieces = {key: _piece(key, value) for key, value in self._values.items()}
        return self._pieces

    def set(self, key: str, value: str) -> None:
        """Raises UnicodeEncodeError (nothing changed) for a string UTF-8 cannot hold: the
        file could not record it."""
        piece = _piece(key, value)
        if key in self._values:             # its piece is in the middle: join again
            self._ensure_pieces()[key] = piece
            self._values[key] = value
            self._blob = None
            self._appended.clear()
            return
        if self._pieces is not None:
            self._pieces[key] = piece
        self._values[key] = value
        if self._blob is not None:          # a new key goes last: appended at the next encode
            self._appended.append(piece)

    def remove(self, key: str) -> bool:
        """True if the key was there."""
        if key not in self._values:
            return False
        del self._ensure_pieces()[key]
        del self._values[key]
        self._blob = None
        self._appended.clear()
        return True

    def encoded(self) -> bytes:
        """``encode_properties`` of the current properties: immutable (a save joins it with
        the rest of the file in another thread, later). Kept until a property changes: keys
        added since are appended to it then (one copy of it, however many were added)."""
        blob = self._blob
        if blob is None:
            pieces = self._ensure_pieces()
            blob = self._blob = b"".join((_U32.pack(len(pieces)), *pieces.values()))
        elif self._appended:
            blob = self._blob = b"".join((_U32.pack(len(self._values)), memoryview(blob)[4:],
                                          *self._appended))
            self._appended.clear()
        return blob

    def pieces(self) -> list[bytes | memoryview]:
        """``encode_properties`` of the current properties as immutable pieces to be joined
        (later, in another thread, by a save): the kept bytes with the keys added since
        appended, not copied here while they are few."""
        appended = self._appended
        if self._blob is None or len(appended) > _APPEND_LIMIT:
            return [self.encoded()]
        if not appended:
            return [self._blob]
        return [_U32.pack(len(self._values)), memoryview(self._blob)[4:], *appended]
