"""Pulsar's dynamic broker configuration: settings an operator changes while the broker runs.

Theory of operation
-------------------
Pulsar lets a super-user override the settings marked ``dynamic`` in its ServiceConfiguration
through ``/admin/v2/brokers/configuration/{key}/{value}``; the overrides are kept in the
metadata store (``/admin/configuration``) and applied by every broker, and survive restarts.
:class:`DynamicConfiguration` is that for one node:

- :data:`DYNAMIC_KEYS` names the settings that may change: Pulsar's dynamic keys that Horae
  reads at the moment it uses them (each lookup, producer, consumer, sweep or policy
  resolution reads the broker's current :class:`BrokerConfig`), so a change applies to the
  next operation and nothing holds a stale copy. Settings read once at start-up (ports, TLS,
  storage, trackers, intervals of timers) are not dynamic, as in Pulsar.
- Overrides are stored as Pulsar stores them: the text given, under the key, in the metadata
  store (kind ``dynamic-config``), and applied at start-up over the configuration file.
- A value is applied only when it reads as the setting's type and the resulting configuration
  is valid (:class:`BrokerConfig`'s own checks). Pulsar stores a value it cannot convert and
  logs the failure when applying it; so does this class (the text is listed by
  ``configuration/values``, the setting keeps its value in force, which ``runtime`` shows).
- *apply* is the owner's hook: it receives the new configuration object (the broker swaps it
  in and refreshes what it derived from it).

Only the admin service calls it; every method runs on the broker's loop.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from broker.config import FIELD_TYPES, FIELDS_BY_KEY, BrokerConfig, ConfigError
from broker.config_loading import parse_value
from storage.metadata import MetadataStore

__all__ = ["DYNAMIC_KEYS", "REDACTED_KEYS", "DynamicConfigError", "DynamicConfiguration"]

log = logging.getLogger("horae.config")

#: Pulsar's dynamic settings (``@FieldContext(dynamic = true)``) that Horae reads at each use.
#: A key the running broker does not have is not listed (:meth:`DynamicConfiguration.names`).
DYNAMIC_KEYS: tuple[str, ...] = (
    "allowAutoTopicCreation",
    "allowAutoTopicCreationType",
    "allowAutoSubscriptionCreation",
    "defaultNumPartitions",
    "maxNumPartitionsPerPartitionedTopic",
    "brokerDeleteInactiveTopicsEnabled",
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds",
    "brokerDeleteInactiveTopicsMode",
    # topic limits and rates: loaded topics are handed the new broker default at once
    "maxPublishRatePerTopicInMessages",
    "maxPublishRatePerTopicInBytes",
    "dispatchThrottlingRatePerTopicInMsg",
    "dispatchThrottlingRatePerTopicInByte",
    "dispatchThrottlingRatePerSubscriptionInMsg",
    "dispatchThrottlingRatePerSubscriptionInByte",
    "subscribeThrottlingRatePerConsumer",
    "subscribeRatePeriodPerConsumerInSecond",
    "maxTopicsPerNamespace",
    "subscriptionTypesEnabled",
    # loaded topics are handed the new default at once (their ack-state pause limit)
    "dispatcherPauseOnAckStatePersistentEnabled",
)
# Not dynamic in Pulsar 4.0 (no ``dynamic = true``; its admin answers 412 for them), so not
# here either: maxProducersPerTopic, maxConsumersPerTopic, maxConsumersPerSubscription,
# delayedDeliveryMaxDelayInMillis.

#: Settings whose value is a secret (or names one inline): ``runtime`` shows them masked.
REDACTED_KEYS = frozenset({"tokenSecretKey", "basicAuthConf"})
_MASK = "******"

#: The metadata store's kind for the overrides (one record per key: ``{"value": text}``).
KIND = "dynamic-config"

_TRUE = frozenset({"true"})
_FALSE = frozenset({"false"})


class DynamicConfigError(Exception):
    """Refused: Pulsar's 412 reasons (not a dynamic key, or an invalid value)."""


def _typed(key: str, text: str) -> object:
    """*text* as the setting's type; ValueError when it does not read as one (a bool is
    ``true`` or ``false`` only, as Pulsar's dynamic configuration reads it)."""
    want = FIELD_TYPES.get(str(FIELDS_BY_KEY[key].type), str)
    return parse_value(want, text, true_words=_TRUE, false_words=_FALSE)


def _text(value: object) -> str:
    """A value as Pulsar's ``String.valueOf`` writes it (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


class DynamicConfiguration:
    """The stored overrides over the configuration the broker started with."""

    def __init__(self, base: BrokerConfig, metadata: MetadataStore,
                 apply: Callable[[BrokerConfig], None]) -> None:
        self._base = base
        self._metadata = metadata
        self._apply = apply
        self._overrides: dict[str, str] = {}
        self._current = base

    # --- reads -------------------------------------------------------------------------
    @staticmethod
    def names() -> list[str]:
        """The keys that may be changed at run time (Pulsar's ``GET configuration``)."""
        return [key for key in DYNAMIC_KEYS if key in FIELDS_BY_KEY]

    @classmethod
    def is_dynamic(cls, key: str) -> bool:
        return key in DYNAMIC_KEYS and key in FIELDS_BY_KEY

    def overrides(self) -> dict[str, str]:
        """The stored overrides as given (Pulsar's ``GET configuration/values``)."""
        return dict(self._overrides)

    def runtime(self) -> dict[str, str]:
        """Every setting's value in force, as text (Pulsar's ``GET configuration/runtime``);
        secrets masked."""
        out = {}
        for key, value in self._current.to_dict().items():
            text = _text(value)
            out[key] = _MASK if key in REDACTED_KEYS and text else text
        return out

    # --- changes -----------------------------------------------------------------------
    async def load(self) -> None:
        """Apply the overrides stored by an earlier run (start-up)."""
        for key, record in await self._metadata.list(KIND):
            if self.is_dynamic(key) and isinstance(record.get("value"), str):
                self._overrides[key] = record["value"]
            else:
                log.warning("ignoring the stored dynamic configuration %r: not a dynamic "
                            "setting of this broker", key)
        self._rebuild()

    async def update(self, key: str, text: str) -> None:
        """Store and apply an override; DynamicConfigError with Pulsar's reason if refused."""
        if not self.is_dynamic(key):
            raise DynamicConfigError("Can't update non-dynamic configuration")
        await self._metadata.put(KIND, key, {"value": text})
        self._overrides[key] = text
        self._rebuild()

    async def delete(self, key: str) -> None:
        """Drop an override: the setting goes back to the configuration file's value."""
        if not self.is_dynamic(key):
            raise DynamicConfigError("Can't delete non-dynamic configuration")
        await self._metadata.delete(KIND, key)
        self._overrides.pop(key, None)
        self._rebuild()

    def _rebuild(self) -> None:
        """The base configuration with every override that reads and validates applied; one
        that does not keeps the setting's previous value in force (and is logged)."""
        config = self._base
        for key, text in self._overrides.items():
            field = FIELDS_BY_KEY[key]
            try:
                changes: dict[str, Any] = {field.name: _typed(key, text)}
                config = dataclasses.replace(config, **changes)
            except (ValueError, ConfigError) as exc:
                log.warning("dynamic configuration %s=%r not applied: %s", key, text[:200],
                            exc if isinstance(exc, ConfigError) else "not a valid value")
        if config != self._current:
            self._current = config
            self._apply(config)
