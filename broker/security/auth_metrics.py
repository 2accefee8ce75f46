"""Counts of accepted and refused authentications, by provider, method and reason.

Theory of operation
-------------------
Pulsar's ``AuthenticationMetrics`` exports two counters that its providers increment:
``pulsar_authentication_success_total{provider_name, auth_method}`` and
``pulsar_authentication_failures_total{provider_name, auth_method, reason}``, where
``provider_name`` is the provider's short class name (``AuthenticationProviderToken``),
``auth_method`` its wire name (``token``) and ``reason`` the provider's error code
(``INVALID_TOKEN``). :class:`AuthenticationCounters` holds the same figures as plain ints,
written by :class:`broker.security.authentication.AuthenticationService` (on the event loop or in
the worker thread that checks a bcrypt password, hence the lock) and read at scrape time by
:mod:`broker.metrics.auth_families`.

Every label value comes from a fixed set: the configured providers, the method names below
(anything else a client offers is counted as ``other``) and the reason codes of
:class:`broker.security.errors.AuthenticationError`, so the table stays small whatever clients
send.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = ["NO_PROVIDER", "PROVIDER_OF_METHOD", "REFUSAL_WARN_INTERVAL_S",
           "AuthenticationCounters", "RefusalLog", "method_label"]

#: A refusal is logged at most once per this many seconds per (provider, method, reason): a
#: client retrying a bad token every few hundred milliseconds, or a flood of them, would fill the
#: log; the line after a quiet spell says how many were not logged.
REFUSAL_WARN_INTERVAL_S: Final = 10.0

#: ``provider_name`` of a refusal no provider made (no credentials and no anonymous role, or a
#: method no configured provider serves): the service that looked for one.
NO_PROVIDER: Final = "AuthenticationService"

PROVIDER_OF_METHOD: Final = {
    "token": "AuthenticationProviderToken",
    "basic": "AuthenticationProviderBasic",
    "tls": "AuthenticationProviderTls",
}

#: Wire method names Pulsar's clients send (``none`` is a client without authentication).
_KNOWN_METHODS: Final = frozenset({"none", "token", "basic", "tls", "oauth2", "sasl", "athenz",
                                   "anonymous"})


def method_label(method: str | None) -> str:
    """The ``auth_method`` label for a client-supplied method name (bounded)."""
    if method is None or method == "":
        return "none"
    return method if method in _KNOWN_METHODS else "other"


class AuthenticationCounters:
    """Success and failure counts (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._successes: dict[tuple[str, str], int] = {}
        self._failures: dict[tuple[str, str, str], int] = {}

    def success(self, provider: str, method: str) -> None:
        key = (provider, method)
        with self._lock:
            self._successes[key] = self._successes.get(key, 0) + 1

    def failure(self, provider: str, method: str, reason: str) -> None:
        key = (provider, method, reason)
        with self._lock:
            self._failures[key] = self._failures.get(key, 0) + 1

    def successes(self) -> dict[tuple[str, str], int]:
        """``(provider_name, auth_method) -> count``, a copy."""
        with self._lock:
            return dict(self._successes)

    def failures(self) -> dict[tuple[str, str, str], int]:
        """``(provider_name, auth_method, reason) -> count``, a copy."""
        with self._lock:
            return dict(self._failures)


class RefusalLog:
    """Which refusals get a WARN line (see :data:`REFUSAL_WARN_INTERVAL_S`); keys are label
    tuples from the bounded sets above."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str, str], float] = {}
        self._unlogged: dict[tuple[str, str, str], int] = {}

    def admit(self, key: tuple[str, str, str]) -> int | None:
        """None when this refusal is not to be logged; else how many were not since the last."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < REFUSAL_WARN_INTERVAL_S:
                self._unlogged[key] = self._unlogged.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._unlogged.pop(key, 0)
