"""Broker configuration: one frozen dataclass, loaded from TOML with Pulsar's broker.conf names.

Theory of operation
-------------------
Every setting is a field of :class:`BrokerConfig` whose metadata carries the camelCase key
used in Pulsar's ``broker.conf`` (``brokerServicePort``, ``delayedDeliveryTickTimeMillis``,
...) and a one-line doc. The field *name* is the snake_case form, so code reads
``config.broker_service_port`` while files and overrides say ``brokerServicePort``.

Sources, weakest first: the defaults below (Pulsar standalone's, unless a comment says why
not), a TOML file (:func:`load_config`), then overrides (CLI flags, test fixtures) given as a
``{camelCaseKey: value}`` mapping. Unknown keys and values of the wrong type are errors that
name the key: a typo must never be silently ignored. The resulting object is immutable; a
changed setting means a new object (``dataclasses.replace``).

A few keys (``dataDir``, ``journalSyncData``, ``journalMaxGroupWaitMSec``) are not in Pulsar's
broker.conf because Pulsar keeps data in BookKeeper; they borrow BookKeeper's names where one
exists.
"""

from __future__ import annotations

import dataclasses
import pathlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DELAYED_TRACKER_BUCKET",
    "DELAYED_TRACKER_IN_MEMORY",
    "BrokerConfig",
    "ConfigError",
    "config_keys",
    "load_config",
    "storage_config",
]


class ConfigError(ValueError):
    """A configuration file or override is invalid; the message names the key."""


#: Pulsar's class names for the two delayed-delivery trackers, and Horae's short names.
DELAYED_TRACKER_IN_MEMORY = "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory"
DELAYED_TRACKER_BUCKET = "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"
_TRACKER_ALIASES = {
    DELAYED_TRACKER_IN_MEMORY: "in-memory",
    DELAYED_TRACKER_BUCKET: "bucket",
    "in-memory": "in-memory",
    "bucket": "bucket",
}


def _opt(key: str, default: Any, doc: str) -> Any:
    return field(default=default, metadata={"key": key, "doc": doc})


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """All broker settings. Attribute names are snake_case; file keys are camelCase."""

    # --- network -------------------------------------------------------------------------
    broker_service_port: int = _opt(
        "brokerServicePort", 6650, "TCP port of the binary protocol (pulsar://). 0 = any free port.")
    web_service_port: int = _opt(
        "webServicePort", 8080, "HTTP port of the admin REST API, lookups and /metrics. 0 = any.")
    bind_address: str = _opt(
        "bindAddress", "0.0.0.0", "Address both listeners bind to (Pulsar binds every interface).")
    advertised_address: str = _opt(
        "advertisedAddress", "localhost",
        "Host name put in LOOKUP answers (pulsar://<advertisedAddress>:<brokerServicePort>).")
    advertised_listeners: str = _opt(
        "advertisedListeners", "",
        "Named listeners, name:pulsar://host:port,...; LOOKUPs with a listener name get its URL "
        "and an unknown name is refused.")
    internal_listener_name: str = _opt(
        "internalListenerName", "",
        "The listener answered to clients without a listener name (default: the first).")
    cluster_name: str = _opt(
        "clusterName", "standalone", "Cluster name: a metrics label and the prefix of producer names.")
    data_dir: str = _opt("dataDir", "./data", "Directory holding ledgers, cursors, metadata, metrics.")
    max_message_size: int = _opt(
        "maxMessageSize", 5 * 1024 * 1024,
        "Largest message (metadata + payload) in bytes; frames may be 10 KiB larger.")
    max_pending_publish_requests_per_connection: int = _opt(
        "maxPendingPublishRequestsPerConnection", 1000,
        "Publishes awaiting their receipt after which a connection stops being read (resumes at half).")
    keep_alive_interval_seconds: int = _opt(
        "keepAliveIntervalSeconds", 30,
        "The broker PINGs a connection idle this long and closes one silent for two intervals.")
    allow_auto_topic_creation: bool = _opt(
        "allowAutoTopicCreation", True, "Create a non-partitioned topic on first producer/consumer.")
    broker_deduplication_enabled: bool = _opt(
        "brokerDeduplicationEnabled", True,
        "Default of the deduplication policy (namespace/topic policies override it). Pulsar's "
        "default is false; Horae's is true because the C++ client re-sends every send "
        "pipelined behind a refused one.")
    broker_service_compaction_threshold_in_bytes: int = _opt(
        "brokerServiceCompactionThresholdInBytes", 0,
        "Backlog bytes that trigger an automatic compaction (0: never; namespace/topic "
        "compactionThreshold override it).")
    schema_compatibility_strategy: str = _opt(
        "schemaCompatibilityStrategy", "FULL",
        "Default schema compatibility strategy (namespace/topic policies override it).")
    broker_delete_inactive_topics_enabled: bool = _opt(
        "brokerDeleteInactiveTopicsEnabled", False,
        "Accepted for compatibility; Horae never deletes inactive topics (Pulsar's default is true).")

    # --- storage (mapped into storage.config.StorageConfig) --------------------------------
    managed_ledger_max_entries_per_ledger: int = _opt(
        "managedLedgerMaxEntriesPerLedger", 50000, "Entries after which a ledger is rolled over.")
    managed_ledger_max_size_per_ledger_mbytes: int = _opt(
        "managedLedgerMaxSizePerLedgerMbytes", 2048, "Size (MiB) after which a ledger is rolled over.")
    managed_ledger_max_ledger_rollover_time_minutes: int = _opt(
        "managedLedgerMaxLedgerRolloverTimeMinutes", 240, "Age (minutes) after which a ledger rolls over.")
    managed_ledger_default_mark_delete_rate_limit: float = _opt(
        "managedLedgerDefaultMarkDeleteRateLimit", 1.0,
        "Cursor persists per second at most (acks in between are batched; close always persists).")
    managed_ledger_cache_size_mb: int = _opt(
        "managedLedgerCacheSizeMB", 64,
        "Entry cache for tailing reads, MiB (Pulsar: 1/5 of direct memory; 64 suits one node).")
    journal_sync_data: bool = _opt(
        "journalSyncData", True,
        "fsync before every SEND_RECEIPT (BookKeeper's name). false is for throwaway test data only.")
    journal_max_group_wait_msec: float = _opt(
        "journalMaxGroupWaitMSec", 0.0,
        "Longest wait (ms) to gather appends into one group commit (BookKeeper's name).")

    # --- delayed delivery (issue 5) ------------------------------------------------------
    delayed_delivery_enabled: bool = _opt(
        "delayedDeliveryEnabled", True, "Honour deliver_at_time on Shared and Key_Shared subscriptions.")
    delayed_delivery_tick_time_millis: int = _opt(
        "delayedDeliveryTickTimeMillis", 1000, "Timer tick (ms): the delivery accuracy.")
    is_delayed_delivery_deliver_at_time_strict: bool = _opt(
        "isDelayedDeliveryDeliverAtTimeStrict", False,
        "true: never deliver early; false: up to one tick early.")
    delayed_delivery_max_delay_in_millis: int = _opt(
        "delayedDeliveryMaxDelayInMillis", 0,
        "PIP-315 max deliver_at_time - publish_time (ms); 0 = no limit.")
    delayed_delivery_tracker_factory_class_name: str = _opt(
        "delayedDeliveryTrackerFactoryClassName", DELAYED_TRACKER_IN_MEMORY,
        "Tracker: Pulsar's InMemory/Bucket factory class name, or 'in-memory' / 'bucket'.")
    delayed_delivery_min_index_count_per_bucket: int = _opt(
        "delayedDeliveryMinIndexCountPerBucket", 50000, "Bucket tracker: indexes before sealing a bucket.")
    delayed_delivery_max_time_step_per_bucket_snapshot_segment_seconds: int = _opt(
        "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds", 300,
        "Bucket tracker: time span (s) of one snapshot segment.")
    delayed_delivery_max_indexes_per_bucket_snapshot_segment: int = _opt(
        "delayedDeliveryMaxIndexesPerBucketSnapshotSegment", 5000,
        "Bucket tracker: indexes per snapshot segment (-1 = unlimited).")
    delayed_delivery_max_num_buckets: int = _opt(
        "delayedDeliveryMaxNumBuckets", -1, "Bucket tracker: merge buckets past this count (-1 = never).")
    delayed_delivery_fixed_delay_detection_lookahead: int = _opt(
        "delayedDeliveryFixedDelayDetectionLookahead", 50000,
        "In-memory tracker: lookahead for detecting a fixed delay (0 disables).")

    # --- metrics (issue 6) ---------------------------------------------------------------
    metrics_export_interval_seconds: int = _opt(
        "metricsExportIntervalSeconds", 60, "Period of metric snapshots written to <dataDir>/metrics.")
    metrics_export_retention_hours: int = _opt(
        "metricsExportRetentionHours", 168, "Metric snapshot files older than this are deleted.")
    expose_topic_level_metrics_in_prometheus: bool = _opt(
        "exposeTopicLevelMetricsInPrometheus", True, "Per-topic series in /metrics (else per namespace).")

    # --- TLS (issue 15; broker/security/tls.py) -------------------------------------------
    broker_service_port_tls: int | None = _opt(
        "brokerServicePortTls", None,
        "TCP port of the binary protocol over TLS (pulsar+ssl://); unset = no TLS listener. 0 = any.")
    web_service_port_tls: int | None = _opt(
        "webServicePortTls", None, "HTTPS port of the admin REST API; unset = no HTTPS listener. 0 = any.")
    tls_enabled: bool = _opt(
        "tlsEnabled", False,
        "Deprecated in Pulsar and accepted for its config files; TLS is on when a *PortTls is set.")
    tls_certificate_file_path: str = _opt(
        "tlsCertificateFilePath", "", "PEM file with the broker's certificate (chain) for TLS listeners.")
    tls_key_file_path: str = _opt("tlsKeyFilePath", "", "PEM file with the private key of that certificate.")
    tls_trust_certs_file_path: str = _opt(
        "tlsTrustCertsFilePath", "", "PEM file of the CA certificates that client certificates must chain to.")
    tls_allow_insecure_connection: bool = _opt(
        "tlsAllowInsecureConnection", False,
        "Without a trust file, do not ask clients for certificates. Horae never accepts an untrusted one.")
    tls_require_trusted_client_cert_on_connect: bool = _opt(
        "tlsRequireTrustedClientCertOnConnect", False,
        "Refuse TLS handshakes that do not present a certificate trusted by tlsTrustCertsFilePath.")
    tls_protocols: str = _opt(
        "tlsProtocols", "", "Comma-separated TLS versions (TLSv1.3,TLSv1.2); empty = both. Never below 1.2.")
    tls_ciphers: str = _opt(
        "tlsCiphers", "", "Comma-separated TLS 1.2 cipher suites (OpenSSL or IANA names); empty = defaults.")
    tls_cert_refresh_check_duration_sec: int = _opt(
        "tlsCertRefreshCheckDurationSec", 300,
        "Seconds between checks of the certificate files; changed files apply to new connections.")

    # --- authentication and authorization (issue 15; broker/security/) ---------------------
    authentication_enabled: bool = _opt(
        "authenticationEnabled", False, "Authenticate CONNECT and REST requests with authenticationProviders.")
    authentication_providers: str = _opt(
        "authenticationProviders", "",
        "Comma-separated Pulsar provider class names (AuthenticationProviderToken, ...Basic, ...Tls).")
    authentication_refresh_check_seconds: int = _opt(
        "authenticationRefreshCheckSeconds", 60,
        "Seconds between checks for expired credentials on a connection (then AUTH_CHALLENGE).")
    anonymous_user_role: str = _opt(
        "anonymousUserRole", "", "Role given to clients that present no credentials; empty = refuse them.")
    token_secret_key: str = _opt(
        "tokenSecretKey", "", "HMAC key for HS256 tokens: data:;base64,..., file:///path, env:VAR or a path.")
    token_public_key: str = _opt(
        "tokenPublicKey", "", "Public key (DER or PEM) for RS256/ES256 tokens, same forms as tokenSecretKey.")
    token_public_alg: str = _opt(
        "tokenPublicAlg", "RS256", "Algorithm of tokenPublicKey (RS256, RS384, RS512, PS256, ES256, ...).")
    token_auth_claim: str = _opt(
        "tokenAuthClaim", "", "Claim holding the role; empty = 'sub'.")
    token_audience_claim: str = _opt(
        "tokenAudienceClaim", "", "Claim holding the audience; empty = no audience check.")
    token_audience: str = _opt(
        "tokenAudience", "", "Audience that stands for this broker (required with tokenAudienceClaim).")
    basic_auth_conf: str = _opt(
        "basicAuthConf", "", "htpasswd users (bcrypt, apr1, crypt) as data:, file:, env:, a path or base64.")
    authorization_enabled: bool = _opt(
        "authorizationEnabled", False, "Check roles against superUserRoles, tenant adminRoles and grants.")
    authorization_provider: str = _opt(
        "authorizationProvider", "org.apache.pulsar.broker.authorization.PulsarAuthorizationProvider",
        "Accepted for compatibility; only Pulsar's default provider is implemented.")
    super_user_roles: str = _opt(
        "superUserRoles", "", "Comma-separated roles allowed every operation.")
    authorization_allow_wildcards_matching: bool = _opt(
        "authorizationAllowWildcardsMatching", False,
        "Let grants to 'prefix*' or '*suffix' roles match (Pulsar's wildcard matching).")

    def __post_init__(self) -> None:
        if self.delayed_delivery_tracker_factory_class_name not in _TRACKER_ALIASES:
            raise ConfigError(
                "delayedDeliveryTrackerFactoryClassName must be one of "
                f"{sorted(_TRACKER_ALIASES)}, not {self.delayed_delivery_tracker_factory_class_name!r}")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if (f.name.endswith(("_port", "_port_tls")) and value is not None
                    and not (isinstance(value, int) and 0 <= value <= 65535)):
                raise ConfigError(f"{f.metadata['key']} must be a port number, not {value}")
        if self.advertised_listeners or self.internal_listener_name:
            from broker.listeners import parse_listeners
            try:
                names = parse_listeners(self.advertised_listeners)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            if self.internal_listener_name and self.internal_listener_name not in names:
                raise ConfigError(f"internalListenerName {self.internal_listener_name!r} is not "
                                  "one of advertisedListeners")
        positive = ("max_message_size", "max_pending_publish_requests_per_connection",
                    "keep_alive_interval_seconds", "delayed_delivery_tick_time_millis",
                    "metrics_export_interval_seconds", "tls_cert_refresh_check_duration_sec",
                    "authentication_refresh_check_seconds")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{_KEY_OF[name]} must be > 0, not {getattr(self, name)}")

    @property
    def delayed_tracker_kind(self) -> str:
        """'in-memory' or 'bucket', whichever spelling the config used."""
        return _TRACKER_ALIASES[self.delayed_delivery_tracker_factory_class_name]

    @property
    def data_path(self) -> pathlib.Path:
        return pathlib.Path(self.data_dir)

    def with_overrides(self, overrides: Mapping[str, object]) -> BrokerConfig:
        """A copy with ``{camelCaseKey: value}`` applied (validated like a file)."""
        return dataclasses.replace(self, **_convert(overrides, source="override"))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, object]:
        """``{camelCaseKey: value}`` for every setting (e.g. for a TOML dump or the admin API)."""
        return {_KEY_OF[f.name]: getattr(self, f.name) for f in dataclasses.fields(self)}


_FIELDS = {f.metadata["key"]: f for f in dataclasses.fields(BrokerConfig)}
_KEY_OF = {f.name: key for key, f in _FIELDS.items()}
_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str}


def config_keys() -> dict[str, str]:
    """``{camelCaseKey: doc}`` of every setting, in declaration order."""
    return {key: f.metadata["doc"] for key, f in _FIELDS.items()}


def _convert(values: Mapping[str, object], *, source: str) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in values.items():
        f = _FIELDS.get(key)
        if f is None:
            hint = ""
            lowered = {k.lower(): k for k in _FIELDS}
            if key.lower() in lowered:
                hint = f" (did you mean {lowered[key.lower()]!r}?)"
            raise ConfigError(f"unknown config key {key!r} in {source}{hint}")
        ftype = f.type if isinstance(f.type, str) else f.type.__name__
        if ftype.endswith(" | None"):  # optional settings (e.g. brokerServicePortTls)
            if value is None:
                out[f.name] = value
                continue
            ftype = ftype.removesuffix(" | None")
        want = _TYPES[ftype]
        # bool is an int subclass: `maxMessageSize = true` must not become 1.
        ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise ConfigError(
                f"config key {key!r} in {source} must be {want.__name__}, "
                f"not {type(value).__name__} {value!r}")
        out[f.name] = value
    return out


def load_config(path: str | pathlib.Path | None = None,
                overrides: Mapping[str, object] | None = None) -> BrokerConfig:
    """Defaults, then the TOML file at *path* (if any), then *overrides*.

    The file is flat ``key = value`` with broker.conf names; a ``[broker]`` table is accepted
    too so one file can hold other sections later. Raises :class:`ConfigError`.
    """
    values: dict[str, object] = {}
    if path is not None:
        p = pathlib.Path(path)
        try:
            with p.open("rb") as fh:
                doc = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"config file {str(p)!r} not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {str(p)!r} is not valid TOML: {exc}") from None
        broker_table = doc.pop("broker", None)
        if broker_table is not None:
            if not isinstance(broker_table, dict):
                raise ConfigError(f"[broker] in {str(p)!r} must be a table")
            doc.update(broker_table)
        values.update(_convert(doc, source=repr(str(p))))
    if overrides:
        values.update(_convert(overrides, source="overrides"))
    try:
        return BrokerConfig(**values)  # type: ignore[arg-type]
    except TypeError as exc:  # pragma: no cover - _convert already checked names
        raise ConfigError(str(exc)) from None


def storage_config(config: BrokerConfig) -> Any:
    """The storage layer's StorageConfig for *config* (only the fields it knows)."""
    from storage.config import StorageConfig

    wanted: dict[str, object] = {
        "max_entries_per_ledger": config.managed_ledger_max_entries_per_ledger,
        "max_size_per_ledger_bytes": config.managed_ledger_max_size_per_ledger_mbytes * 1024 * 1024,
        "max_ledger_rollover_minutes": config.managed_ledger_max_ledger_rollover_time_minutes,
        "mark_delete_rate_limit_per_sec": config.managed_ledger_default_mark_delete_rate_limit,
        "entry_cache_bytes": config.managed_ledger_cache_size_mb * 1024 * 1024,
        "fsync": config.journal_sync_data,
        "group_commit_max_delay_ms": config.journal_max_group_wait_msec,
    }
    known = {f.name: f for f in dataclasses.fields(StorageConfig)}
    kwargs: dict[str, Any] = {}
    for name, value in wanted.items():
        if name not in known:
            continue
        ftype = known[name].type
        # Honour the storage field's declared type (an int field gets an int).
        if ftype in ("int", int) and isinstance(value, float):
            value = round(value)
        kwargs[name] = value
    return StorageConfig(**kwargs)
