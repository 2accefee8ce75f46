"""Metric families of authentication: Pulsar's ``AuthenticationMetrics`` counters.

Theory of operation
-------------------
The server builds the broker's :class:`broker.security.authentication.AuthenticationService`
and hands its counters to the broker's :class:`broker.metrics.BrokerMetrics`, which reads them
at scrape time through :class:`AuthenticationFigures`.
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

from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, Metric

__all__ = ["AuthenticationFigures", "authentication_families"]


class AuthenticationFigures(Protocol):
    """``broker.security.auth_metrics.AuthenticationCounters``."""

    def successes(self) -> dict[tuple[str, str], int]: ...

    def failures(self) -> dict[tuple[str, str, str], int]: ...


def authentication_families(counters: AuthenticationFigures | None,
                            cluster: str) -> Iterator[Metric]:
    """The two counters (nothing when there are none or nothing was counted)."""
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
