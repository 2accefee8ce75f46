"""Metric families of authentication: Pulsar's ``AuthenticationMetrics`` counters.

Theory of operation
-------------------
The server builds the broker's :class:`broker.security.authentication.AuthenticationService`
and attaches its counters to the service with :func:`attach_authentication_counters`; every
registry of that service reads them at scrape time through :class:`AuthenticationFigures`.
Names and labels are Pulsar's, with the ``cluster`` label Pulsar adds to every series:

- ``pulsar_authentication_success_total{cluster, provider_name, auth_method}``;
- ``pulsar_authentication_failures_total{cluster, provider_name, auth_method, reason}``,
  ``reason`` being the provider's error code (``INVALID_TOKEN``, ``INVALID_AUTH_DATA``,
  ``INVALID_AUDIENCES``, ``INVALID_HEADER``, ``INVALID_CERTS``, ``INVALID_CN``) or, where no
  provider refused (``provider_name="AuthenticationService"``), ``AUTH_REQUIRED``,
  ``UNSUPPORTED_METHOD`` or ``PRINCIPAL_CHANGED``.

Both count binary CONNECTs and AUTH_RESPONSEs and REST requests alike, as Pulsar's providers
do. A family appears once something was counted.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, Metric

__all__ = ["AuthenticationFigures", "attach_authentication_counters", "authentication_families"]


class AuthenticationFigures(Protocol):
    """``broker.security.auth_metrics.AuthenticationCounters``."""

    def successes(self) -> dict[tuple[str, str], int]: ...

    def failures(self) -> dict[tuple[str, str, str], int]: ...


_ATTACHED: weakref.WeakKeyDictionary[object, AuthenticationFigures] = weakref.WeakKeyDictionary()


def attach_authentication_counters(service: object, counters: AuthenticationFigures) -> None:
    """Export *counters* with *service*'s metrics (called by the server)."""
    _ATTACHED[service] = counters


def authentication_families(service: object, cluster: str) -> Iterator[Metric]:
    """The two counters of *service* (nothing when none were attached or counted)."""
    counters: AuthenticationFigures | None = None
    with contextlib.suppress(TypeError):   # not weakly referenceable: nothing attached
        counters = _ATTACHED.get(service)
    if counters is None:
        return
    successes = counters.successes()
    if successes:
        family = CounterMetricFamily("pulsar_authentication_success", "Pulsar authentication success",
                                     labels=["cluster", "provider_name", "auth_method"])
        for (provider, method), count in sorted(successes.items()):
            family.add_metric([cluster, provider, method], float(count))
        yield family
    failures = counters.failures()
    if failures:
        family = CounterMetricFamily("pulsar_authentication_failures",
                                     "Pulsar authentication failures",
                                     labels=["cluster", "provider_name", "auth_method", "reason"])
        for (provider, method, reason), count in sorted(failures.items()):
            family.add_metric([cluster, provider, method, reason], float(count))
        yield family
