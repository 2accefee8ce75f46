"""aiohttp imported without the CA bundle its HTTP client would load.

Importing ``aiohttp`` imports its client, and ``aiohttp.connector`` builds the client's two
default SSL contexts at import (aiohttp does this on purpose: no event loop may then block on
reading certificates). Each of them loads OpenSSL's default CA file, the system bundle: here
144 certificates parsed twice, ~0.13 CPU-s and ~2 MiB of RSS at every start of a broker that
serves HTTP and never makes an aiohttp request.

:func:`import_aiohttp` imports it with ``SSL_CERT_FILE`` naming a file that does not exist, so
those two contexts load no CA file; the variable is put back as it was at once. Nothing else is
changed: OpenSSL's default certificate directory is still added to those contexts (its lookups
happen at verification), the broker's own TLS contexts load the files its configuration names,
and any context made after the import sees the environment as it was.

``horae serve`` calls it first, in the main thread, before any other thread starts (the
environment is process-wide). When aiohttp is already imported (a process embedding the broker)
it does nothing.
"""

from __future__ import annotations

import os
import sys

__all__ = ["NO_CA_FILE", "import_aiohttp"]

#: What ``SSL_CERT_FILE`` names during the import: a path no file can have.
NO_CA_FILE = "/nonexistent/horae-no-ca-file"


def import_aiohttp() -> bool:
    """Import aiohttp (and its web server) without its client contexts loading the CA file.

    True when this call imported it; False when it was imported already."""
    if "aiohttp" in sys.modules:
        return False
    before = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = NO_CA_FILE
    try:
        import aiohttp.web  # noqa: F401
    finally:
        if before is None:
            del os.environ["SSL_CERT_FILE"]
        else:
            os.environ["SSL_CERT_FILE"] = before
    return True
