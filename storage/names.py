"""File names of managed ledgers and cursors: a reversible, file-name-safe encoding.

Owns nothing but the mapping name -> directory/file stem. Used by the store (managed ledger
directories), the cursor files (one file per cursor) and tests; imports nothing of storage/.
Long names are hashed (prefix "h-"): those cannot be decoded, so the full name is also kept
inside the file or directory it names (NAME file, cursor file header).
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote, unquote

_MAX_PLAIN_NAME = 180
HASHED_PREFIX = "h-"


def encode_name(name: str) -> str:
    """A file-name-safe, reversible encoding (no '/', no '.'); long names are hashed."""
    encoded = quote(name, safe="").replace(".", "%2E")
    if len(encoded) > _MAX_PLAIN_NAME or not encoded:
        return HASHED_PREFIX + hashlib.sha256(name.encode()).hexdigest()[:48]
    return encoded


def decode_name(stem: str) -> str | None:
    """The name encode_name(name) == stem came from, or None for a hashed stem."""
    if stem.startswith(HASHED_PREFIX):
        return None
    return unquote(stem)
