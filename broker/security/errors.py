"""The security layer's errors, each carrying the text Pulsar puts on the wire.

Theory of operation
-------------------
Three kinds, handled differently by the callers:

* :class:`SecurityConfigError` (a :class:`broker.config.ConfigError`): a key, password file or
  TLS setting cannot be used. Raised at start-up (or by a reload, which then keeps the old
  state); the message names the setting, never the secret.
* :class:`AuthenticationError`: credentials were refused. On the binary protocol the
  connection answers ``ERROR(AuthenticationError, wire_message)`` and closes; ``wire_message``
  is Pulsar's fixed "Failed to authenticate", so a client learns nothing about *why*, while
  ``detail`` (Pulsar's provider text) goes to the log. On REST it is a 401. ``reason`` is the
  provider's error code as Pulsar's providers name it (``INVALID_TOKEN``, ``INVALID_CERTS``...),
  the ``reason`` label of ``pulsar_authentication_failures_total``: a short fixed set, so the
  counter stays bounded whatever a client sends.
* :class:`AuthorizationError`: an authenticated role may not do this. Request-scoped: the
  binary protocol answers that request with ``AuthorizationError`` and keeps the connection;
  REST answers 403.
"""

from __future__ import annotations

from broker.config import ConfigError

__all__ = [
    "WIRE_AUTHENTICATION_FAILED",
    "AuthenticationError",
    "AuthorizationError",
    "SecurityConfigError",
]

#: What Pulsar 4.0's ServerCnx sends with ServerError.AuthenticationError, whatever the cause
#: (Pulsar 2.x sent "Unable to authenticate").
WIRE_AUTHENTICATION_FAILED = "Failed to authenticate"


class SecurityConfigError(ConfigError):
    """A security setting (key, password file, certificate) is unusable; names the setting."""


class AuthenticationError(Exception):
    """Credentials were refused. ``detail`` is the provider's reason (for logs and REST),
    ``reason`` its error code (for the failure counter), ``method`` the provider's wire name
    (None when no provider refused: no credentials, or a method no provider serves)."""

    def __init__(self, detail: str, *, method: str | None = None,
                 reason: str = "UNKNOWN") -> None:
        super().__init__(detail)
        self.detail = detail
        self.method = method
        self.reason = reason

    @property
    def wire_message(self) -> str:
        """The text for the binary protocol's ERROR frame (Pulsar never says why)."""
        return WIRE_AUTHENTICATION_FAILED


class AuthorizationError(Exception):
    """An authenticated role is not allowed an operation; ``str()`` is Pulsar's text."""
