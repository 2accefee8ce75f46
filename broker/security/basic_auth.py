"""htpasswd-based basic authentication (Pulsar's ``AuthenticationProviderBasic``).

Theory of operation
-------------------
``basicAuthConf`` names an htpasswd file (``data:``, ``file:``, ``env:``, a path or base64,
read once at start-up by :func:`parse_htpasswd`). Each line is ``user:hash``; blank lines and
``#`` comments are skipped, anything else malformed is a :class:`SecurityConfigError` naming the
line (Pulsar refuses the whole file too). Hashes accepted, identified at load time so an
unusable entry fails start-up rather than every login:

* bcrypt (``$2a$``, ``$2b$``, ``$2y$``; ``htpasswd -B``) via the ``bcrypt`` package;
* Apache MD5 (``$apr1$``; ``htpasswd -m``, Pulsar's documented form) and the crypt(3) family
  Pulsar's commons-codec ``Crypt`` accepts (13-character DES, ``$1$``, ``$5$``, ``$6$``) via
  ``libpass``, the maintained fork of passlib (passlib itself is unmaintained since 2020 and
  breaks with bcrypt >= 4.1); it installs under the ``passlib`` import name.

Plain-text and ``{SHA}`` entries are refused: they are not password hashes.

Credentials are ``user:password`` (binary: the auth_data bytes; REST: the ``Basic`` header's
base64). Unlike Pulsar, only the first ``:`` splits, so a password may contain ``:``.

Cost: a bcrypt check is deliberately slow (tens of ms). :class:`BasicAuthenticator` therefore
keeps a small bounded cache of recently *successful* (user, SHA-256 of password) pairs so REST
clients sending Basic on every request pay bcrypt once; failures are never cached. Callers on
the event loop should still run :meth:`BasicAuthenticator.authenticate` in a worker thread
(see ``AuthenticationService.cpu_bound``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping

from broker.security.errors import AuthenticationError, SecurityConfigError

__all__ = ["BasicAuthenticator", "decode_basic_header", "parse_htpasswd", "split_credentials"]

#: Pulsar's one text for an unknown user and a wrong password (no user enumeration).
UNKNOWN_USER_OR_BAD_PASSWORD = "Unknown user or invalid password"

_SUCCESS_CACHE_SIZE = 1024


def _bcrypt_verify(password: str, hashed: str) -> bool:
    import bcrypt

    return bcrypt.checkpw(password.encode(), hashed.encode())


def _verifier_for(hashed: str) -> Callable[[str, str], bool] | None:
    # bcrypt and passlib are imported here, once a basicAuthConf is read: a broker without
    # basic authentication never loads them (the health check imports this module).
    if hashed.startswith(("$2a$", "$2b$", "$2y$")):
        import bcrypt  # noqa: F401  (loaded with the file, not by the first check)

        return _bcrypt_verify
    from passlib.hash import apr_md5_crypt, des_crypt, md5_crypt, sha256_crypt, sha512_crypt

    for scheme in (apr_md5_crypt, md5_crypt, sha256_crypt, sha512_crypt, des_crypt):
        if scheme.identify(hashed):
            return scheme.verify  # type: ignore[no-any-return]
    return None


def parse_htpasswd(text: str) -> dict[str, str]:
    """``{user: hash}`` from htpasswd *text*; :class:`SecurityConfigError` on a bad line."""
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        if not sep or not user or not hashed or ":" in hashed:
            raise SecurityConfigError(
                f"basicAuthConf line {number}: The format of the password auth conf file is invalid")
        if _verifier_for(hashed) is None:
            raise SecurityConfigError(
                f"basicAuthConf line {number} (user {user!r}): unsupported hash; use bcrypt "
                "(htpasswd -B) or Apache MD5 (htpasswd -m)")
        users[user] = hashed
    return users


def split_credentials(data: str) -> tuple[str, str]:
    """``(user, password)`` from ``user:password``; AuthenticationError when malformed."""
    user, sep, password = data.partition(":")
    if not sep or not user:
        raise AuthenticationError("Base64 decoded params are invalid", method="basic",
                                  reason="INVALID_AUTH_DATA")
    return user, password


def decode_basic_header(header: str) -> str:
    """The ``user:password`` text of an ``Authorization: Basic ...`` header value."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise AuthenticationError(
            'Authentication token has to be started with "Basic "', method="basic",
            reason="INVALID_HEADER")
    encoded = encoded.strip()
    if not encoded or " " in encoded:
        raise AuthenticationError("Base64 encoded token is not found", method="basic",
                                  reason="INVALID_HEADER")
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise AuthenticationError(f"Base64 decoding is failure: {exc}", method="basic",
                                  reason="INVALID_HEADER") from None


class BasicAuthenticator:
    """Checks ``user:password`` against an htpasswd table (see the module doc)."""

    method_name = "basic"

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = dict(users)
        self._verified: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        self._lock = threading.Lock()  # authenticate() runs in worker threads

    def authenticate(self, credentials: str) -> str:
        """The role (the user name) for ``user:password``, or AuthenticationError."""
        user, password = split_credentials(credentials)
        hashed = self._users.get(user)
        if hashed is None:
            raise AuthenticationError(UNKNOWN_USER_OR_BAD_PASSWORD, method=self.method_name,
                                      reason="INVALID_TOKEN")
        digest = hashlib.sha256(password.encode()).digest()
        key = (user, digest)
        with self._lock:
            if key in self._verified:
                self._verified.move_to_end(key)
                return user
        verify = _verifier_for(hashed)
        assert verify is not None  # parse_htpasswd refused unknown schemes
        if not verify(password, hashed):
            raise AuthenticationError(UNKNOWN_USER_OR_BAD_PASSWORD, method=self.method_name,
                                      reason="INVALID_TOKEN")
        with self._lock:
            self._verified[key] = None
            while len(self._verified) > _SUCCESS_CACHE_SIZE:
                self._verified.popitem(last=False)
        return user
