"""File names of managed ledgers and cursors: an injective, file-name-safe encoding.

Owns nothing but the mapping name -> directory/file stem. Used by the store (managed ledger
directories), the cursor files (one file per cursor) and tests; imports nothing of storage/.

Two kinds of stem, told apart by their first two characters:

- hashed: ``h-`` + 48 hex digits of the name's SHA-256, for names whose plain form would be
  too long (or empty). It cannot be decoded, so the full name is also kept inside the file or
  directory it names (NAME file, cursor file header).
- plain: the name percent-encoded (no ``/``, no ``.``), decoded by :func:`decode_name`. A plain
  stem never begins with ``h-``: a name that does has its ``h`` encoded (``%68-...``), so no
  plain stem is ever taken for a hashed one and no two names share a stem.

Older versions stored a short name beginning ``h-`` unescaped (:func:`legacy_stem`), so it
could share its stem with a long name's hash; the store and the cursor files rename such
files to :func:`encode_name`'s stem when they find them.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote, unquote

_MAX_PLAIN_NAME = 180
HASHED_PREFIX = "h-"
_ESCAPED_PREFIX = "%68-"  # "h-" with its "h" percent-encoded
_HASHED_STEM = re.compile(r"h-[0-9a-f]{48}")


def _quoted(name: str) -> str:
    return quote(name, safe="").replace(".", "%2E")


def encode_name(name: str) -> str:
    """The stem of *name*: plain (reversible) or, for long names, hashed; injective."""
    encoded = _quoted(name)
    if len(encoded) > _MAX_PLAIN_NAME or not encoded:
        return HASHED_PREFIX + hashlib.sha256(name.encode()).hexdigest()[:48]
    if encoded.startswith(HASHED_PREFIX):
        return _ESCAPED_PREFIX + encoded[len(HASHED_PREFIX):]
    return encoded


def decode_name(stem: str) -> str | None:
    """The name encode_name(name) == stem came from, or None for a hashed stem."""
    if stem.startswith(HASHED_PREFIX):
        return None
    return unquote(stem)


def legacy_stem(name: str) -> str | None:
    """The stem older versions gave *name*, when it is not :func:`encode_name`'s: a short name
    beginning ``h-`` was stored unescaped."""
    encoded = _quoted(name)
    if encoded.startswith(HASHED_PREFIX) and len(encoded) <= _MAX_PLAIN_NAME:
        return encoded
    return None


def legacy_plain_name(stem: str) -> str | None:
    """The name of a stem that can only be an older version's unescaped plain stem (it begins
    ``h-`` but is no hash); None when it may be a hash (then only the file's contents tell)."""
    if not stem.startswith(HASHED_PREFIX) or _HASHED_STEM.fullmatch(stem):
        return None
    name = unquote(stem)
    return name if legacy_stem(name) == stem else None
