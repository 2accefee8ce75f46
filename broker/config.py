"""Broker configuration: one frozen dataclass with Pulsar's broker.conf names, from file, env, flags.

Theory of operation
-------------------
Every setting is a field of :class:`BrokerConfig` whose metadata carries the camelCase key
used in Pulsar's ``broker.conf`` (``brokerServicePort``, ``delayedDeliveryTickTimeMillis``,
...) and a one-line doc. The field *name* is the snake_case form, so code reads
``config.broker_service_port`` while files and overrides say ``brokerServicePort``.

Sources, weakest first: the defaults below (Pulsar standalone's, unless a comment says why
not), a config file (TOML or Pulsar's broker.conf format), environment variables
(``PULSAR_PREFIX_<key>``, then ``HORAE_<key>``), then overrides (CLI flags, test fixtures) given
as a ``{camelCaseKey: value}`` mapping (:func:`broker.config_loading.load_settings`; reading
files and the environment is :mod:`broker.config_sources`). Text values (broker.conf, environment) are typed by the field
they set. Unknown keys and values of the wrong type are errors that name the key: a typo must
never be silently ignored; only keys of Pulsar's own that Horae does not implement, in a
broker.conf or a ``PULSAR_PREFIX_`` variable, are skipped and reported. The resulting object is
immutable; a changed setting means a new object (``dataclasses.replace``).

A few keys (``dataDir``, ``journalSyncData``, ``journalMaxGroupWaitMSec``) are not in Pulsar's
broker.conf because Pulsar keeps data in BookKeeper; they borrow BookKeeper's names where one
exists.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from dataclasses import dataclass, field
from typing import TypeVar

from broker.listeners import parse_listeners
from protocol import admin_names
from protocol.entry_metadata import INTERCEPTORS as ENTRY_METADATA_INTERCEPTORS
from protocol.sub_types import SubType
from storage.config import StorageConfig
from storage.diskusage import check_watermarks

__all__ = [
    "DELAYED_TRACKER_BUCKET",
    "DELAYED_TRACKER_IN_MEMORY",
    "FIELDS_BY_KEY",
    "FIELD_TYPES",
    "KEY_OF_FIELD",
    "LOG_FORMATS",
    "BrokerConfig",
    "ConfigError",
    "config_keys",
    "storage_config",
]

log = logging.getLogger("horae.config")

#: Values of ``logFormat``: human-readable lines, or one JSON object per line.
LOG_FORMATS = ("text", "json")


#: Pulsar's BacklogQuota.RetentionPolicy names (shared with the command-line clients).
BACKLOG_QUOTA_POLICIES = admin_names.BACKLOG_QUOTA_POLICIES

#: Pulsar's InactiveTopicDeleteMode names (shared with the command-line clients).
INACTIVE_TOPIC_MODES = admin_names.INACTIVE_TOPIC_DELETE_MODES
AUTO_TOPIC_TYPES = ("non-partitioned", "partitioned")


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


_T = TypeVar("_T")


def _opt(key: str, default: _T, doc: str) -> _T:
    """A setting: its broker.conf *key*, its default and its documentation (field metadata)."""
    return field(default=default, metadata={"key": key, "doc": doc})


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """All broker settings. Attribute names are snake_case; file keys are camelCase."""

    # --- network ----------------------------------------------------------------------------
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
    max_message_publish_buffer_size_in_mb: int = _opt(
        "maxMessagePublishBufferSizeInMB", 64,
        "Bytes (MiB) of publishes awaiting their receipt, broker-wide, after which no connection "
        "is read until half are answered. <= 0 (Pulsar's -1) = no limit.")
    keep_alive_interval_seconds: int = _opt(
        "keepAliveIntervalSeconds", 30,
        "The broker PINGs a connection idle this long and closes one silent for two intervals.")
    allow_auto_topic_creation: bool = _opt(
        "allowAutoTopicCreation", True, "Create a topic on first lookup, producer or consumer.")
    enable_broker_side_subscription_pattern_evaluation: bool = _opt(
        "enableBrokerSideSubscriptionPatternEvaluation", True,
        "Serve topic-list watchers (WATCH_TOPIC_LIST, advertised in CONNECTED's feature flags): "
        "pattern consumers learn of new topics at once instead of polling.")
    subscription_pattern_max_length: int = _opt(
        "subscriptionPatternMaxLength", 50,
        "Longest pattern a topic-list watcher accepts (a longer one is refused with "
        "NotAllowedError and the client polls instead).")
    allow_auto_topic_creation_type: str = _opt(
        "allowAutoTopicCreationType", "non-partitioned",
        "non-partitioned or partitioned: what an auto-created topic is (a partitioned one is "
        "made on its first partitioned-metadata lookup, with defaultNumPartitions).")
    allow_auto_subscription_creation: bool = _opt(
        "allowAutoSubscriptionCreation", True,
        "A durable SUBSCRIBE creates a missing subscription; off, it is refused with "
        "SubscriptionNotFound (namespace and topic policies override it).")
    default_num_partitions: int = _opt(
        "defaultNumPartitions", 1,
        "Partitions of a topic auto-created with allowAutoTopicCreationType=partitioned.")
    max_num_partitions_per_partitioned_topic: int = _opt(
        "maxNumPartitionsPerPartitionedTopic", 10_000,
        "Most partitions a partitioned topic may have; creating or growing one beyond is "
        "refused (REST 406, \"Number of partitions should be less than or equal to N\"). "
        "0 or less = no limit (Pulsar's default is 0; Horae's is 10,000: one node serves every "
        "partition).")
    broker_entry_metadata_interceptors: str = _opt(
        "brokerEntryMetadataInterceptors", "",
        "Comma-separated interceptors that prefix every stored entry with broker entry metadata: "
        "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor (the "
        "broker's publish time), org.apache.pulsar.common.intercept."
        "AppendIndexMetadataInterceptor (the topic's message index). Empty: none.")
    exposing_broker_entry_metadata_to_client_enabled: bool = _opt(
        "exposingBrokerEntryMetadataToClientEnabled", False,
        "Send the broker entry metadata to consumers that support it (the Java client's "
        "getBrokerPublishTime() and getIndex()); else it is stripped from what they receive.")
    broker_deduplication_enabled: bool = _opt(
        "brokerDeduplicationEnabled", True,
        "Default of the deduplication policy (namespace/topic policies override it). Pulsar's "
        "default is false; Horae's is true because the C++ client re-sends every send "
        "pipelined behind a refused one.")
    broker_deduplication_max_number_of_producers: int = _opt(
        "brokerDeduplicationMaxNumberOfProducers", 10000,
        "Most producer names whose sequence state deduplication keeps per topic (in memory and "
        "in the pulsar.dedup cursor). Past it the least recently active names without a "
        "connected producer are evicted (pulsar_broker_topic_deduplication_producers_evicted): "
        "an evicted name that comes back starts as a new one. Pulsar's key and default.")
    broker_service_compaction_threshold_in_bytes: int = _opt(
        "brokerServiceCompactionThresholdInBytes", 0,
        "Backlog bytes that trigger an automatic compaction (0: never; namespace/topic "
        "compactionThreshold override it).")
    schema_compatibility_strategy: str = _opt(
        "schemaCompatibilityStrategy", "FULL",
        "Default schema compatibility strategy (namespace/topic policies override it).")
    is_schema_validation_enforced: bool = _opt(
        "isSchemaValidationEnforced", False,
        "Refuse a producer without a schema on a topic that has one (IncompatibleSchema); the "
        "namespace/topic schemaValidationEnforced policies can turn it on too.")
    is_allow_auto_update_schema_enabled: bool = _opt(
        "isAllowAutoUpdateSchemaEnabled", True,
        "May a producer register a schema its topic does not have yet (the namespace's "
        "isAllowAutoUpdateSchema policy overrides it); when not, such a producer is refused "
        "with IncompatibleSchema.")
    active_consumer_failover_delay_time_millis: int = _opt(
        "activeConsumerFailoverDelayTimeMillis", 1000,
        "Failover: a new active consumer is told (ACTIVE_CONSUMER_CHANGE) and fed only this long "
        "after the change, as in Pulsar (the previous one's unacked messages are not sent twice "
        "at once, and a just-subscribed client has registered its consumer). 0 = at once.")
    subscription_key_shared_use_consistent_hashing: bool = _opt(
        "subscriptionKeySharedUseConsistentHashing", True,
        "Key_Shared AUTO_SPLIT assigns hash slots by consistent hashing (Pulsar's default); false "
        "= Pulsar's hash-range auto-split (each new consumer takes half of the largest range).")
    broker_delete_inactive_topics_enabled: bool = _opt(
        "brokerDeleteInactiveTopicsEnabled", False,
        "Delete a loaded non-partitioned topic inactive for "
        "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds (Pulsar's default is true; Horae's "
        "is false: a broker that deletes data by itself should be asked to).")
    broker_delete_inactive_topics_frequency_seconds: int = _opt(
        "brokerDeleteInactiveTopicsFrequencySeconds", 60, "How often inactive topics are looked for.")
    broker_delete_inactive_topics_max_inactive_duration_seconds: int = _opt(
        "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds", 60,
        "Inactivity after which a topic is deleted (namespace/topic inactiveTopicPolicies override).")
    broker_delete_inactive_topics_mode: str = _opt(
        "brokerDeleteInactiveTopicsMode", "delete_when_no_subscriptions",
        "delete_when_no_subscriptions or delete_when_subscriptions_caught_up.")
    default_retention_time_in_minutes: int = _opt(
        "defaultRetentionTimeInMinutes", 0,
        "Keep acknowledged ledgers this long (-1: forever); namespace/topic retention overrides.")
    default_retention_size_in_mb: int = _opt(
        "defaultRetentionSizeInMB", 0,
        "Keep up to this many MB of acknowledged ledgers (-1: no limit).")
    ttl_duration_default_in_seconds: int = _opt(
        "ttlDurationDefaultInSeconds", 0,
        "Message TTL when no namespace/topic messageTTL is set (0: messages never expire).")
    message_expiry_check_interval_in_minutes: int = _opt(
        "messageExpiryCheckIntervalInMinutes", 5, "How often message TTL is applied.")
    backlog_quota_check_interval_in_seconds: int = _opt(
        "backlogQuotaCheckIntervalInSeconds", 60, "How often backlog quotas are checked.")
    backlog_quota_default_limit_bytes: int = _opt(
        "backlogQuotaDefaultLimitBytes", -1,
        "destination_storage quota when no namespace/topic quota is set (-1: none).")
    backlog_quota_default_limit_second: int = _opt(
        "backlogQuotaDefaultLimitSecond", -1,
        "message_age quota (seconds) when no namespace/topic quota is set (-1: none).")
    backlog_quota_default_retention_policy: str = _opt(
        "backlogQuotaDefaultRetentionPolicy", "producer_request_hold",
        "What the default quotas do: producer_request_hold, producer_exception or "
        "consumer_backlog_eviction.")

    # --- storage (mapped into storage.config.StorageConfig) ---------------------------------
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
    managed_ledger_cache_eviction_time_threshold_millis: int = _opt(
        "managedLedgerCacheEvictionTimeThresholdMillis", 1000,
        "A cached entry not written or read for this long (ms) leaves the entry cache; once a "
        "burst has aged out, the freed memory goes back to the OS. 0: only the size bound.")
    managed_ledger_cache_for_inactive_cursors: bool = _opt(
        "managedLedgerCacheForInactiveCursors", False,
        "Also cache the new entries of a topic none of whose subscriptions has a consumer "
        "attached (Pulsar never does): a backlog drained soon after its publish is then read "
        "from memory (~10% less broker CPU per message drained) at the price of up to "
        "managedLedgerCacheSizeMB more resident memory.")
    managed_ledger_cache_eviction_interval_ms: int = _opt(
        "managedLedgerCacheEvictionIntervalMs", 100,
        "How often (ms) the entry cache's age limit is applied while it holds entries (Pulsar: "
        "10; a tick costs tens of us of the loop here).")
    journal_sync_data: bool = _opt(
        "journalSyncData", True,
        "fsync before every SEND_RECEIPT (BookKeeper's name). false is for throwaway test data only.")
    journal_max_group_wait_msec: float = _opt(
        "journalMaxGroupWaitMSec", 0.0,
        "Longest wait (ms) to gather appends into one group commit (BookKeeper's name).")
    disk_usage_threshold: float = _opt(
        "diskUsageThreshold", 0.95,
        "Disk usage fraction at which storage turns read-only and publishes are refused "
        "(BookKeeper's name; 1.0 disables the check).")
    disk_usage_lwm_threshold: float = _opt(
        "diskUsageLwmThreshold", 0.90,
        "Disk usage fraction below which a read-only store takes publishes again (BookKeeper's name).")
    disk_check_interval: int = _opt(
        "diskCheckInterval", 1000,
        "Milliseconds between disk usage checks (BookKeeper's name; its default is 10000: "
        "shorter so a fast producer cannot eat the reserve between two checks).")

    # --- transactions -----------------------------------------------------------------------
    transaction_coordinator_enabled: bool = _opt(
        "transactionCoordinatorEnabled", False,
        "Serve transactions (a coordinator, topic transaction buffers, pending acks). Off: the "
        "transaction commands are answered NotAllowed \"Transactions are not enabled.\"")
    max_active_transactions_per_coordinator: int = _opt(
        "maxActiveTransactionsPerCoordinator", 10_000,
        "Transactions open at once; NEW_TXN past it is refused. 0 (Pulsar's default, no limit "
        "there) means 100,000 here: every open transaction is a table row and a timer.")
    max_transaction_timeout_millis: int = _opt(
        "maxTransactionTimeoutMillis", 7 * 24 * 3600 * 1000,
        "Longest transaction timeout kept (Horae's key; Pulsar keeps any): a longer one a "
        "client asks for is cut to this.")
    max_pending_acks_per_transaction: int = _opt(
        "maxPendingAcksPerTransaction", 50_000,
        "Individual acknowledgements one transaction holds pending (Horae's key); an ACK past "
        "it is refused with NotAllowed.")
    max_pending_acks_per_subscription: int = _opt(
        "maxPendingAcksPerSubscription", 200_000,
        "Individual acknowledgements pending in transactions on one subscription (Horae's "
        "key); an ACK past it is refused with NotAllowed.")
    transaction_log_batched_write_enabled: bool = _opt(
        "transactionLogBatchedWriteEnabled", True,
        "Group the coordinator's log records that arrive while a write of them is in flight "
        "into one entry written when it is durable (Pulsar's default is false: its batches "
        "wait for a timer; here nothing waits that would not wait for the fsync anyway).")
    transaction_log_batched_write_max_records: int = _opt(
        "transactionLogBatchedWriteMaxRecords", 512,
        "Records in one grouped coordinator log entry at most (written at once when reached).")
    transaction_log_batched_write_max_size: int = _opt(
        "transactionLogBatchedWriteMaxSize", 4 * 1024 * 1024,
        "Bytes in one grouped coordinator log entry at most (written at once when reached).")
    transaction_log_batched_write_max_delay_in_millis: int = _opt(
        "transactionLogBatchedWriteMaxDelayInMillis", 1,
        "Longest wait (ms) of a grouped record for the write in flight before its group is "
        "written anyway (0: until that write is durable).")
    transaction_pending_ack_batched_write_enabled: bool = _opt(
        "transactionPendingAckBatchedWriteEnabled", True,
        "Group transactional acknowledgements' records that arrive while a write of them is "
        "in flight into one entry (Pulsar's default is false; see "
        "transactionLogBatchedWriteEnabled).")
    transaction_pending_ack_batched_write_max_records: int = _opt(
        "transactionPendingAckBatchedWriteMaxRecords", 512,
        "Acknowledgement records in one grouped entry at most.")
    transaction_pending_ack_batched_write_max_size: int = _opt(
        "transactionPendingAckBatchedWriteMaxSize", 4 * 1024 * 1024,
        "Bytes in one grouped acknowledgement entry at most.")
    transaction_pending_ack_batched_write_max_delay_in_millis: int = _opt(
        "transactionPendingAckBatchedWriteMaxDelayInMillis", 1,
        "Longest wait (ms) of a grouped acknowledgement record for the write in flight "
        "(0: until that write is durable).")
    transaction_buffer_snapshot_max_transaction_count: int = _opt(
        "transactionBufferSnapshotMaxTransactionCount", 1000,
        "A topic's transaction buffer writes a snapshot after this many transactions ended "
        "on it (and at unload), so a load reads only the entries after the snapshot.")
    transaction_buffer_snapshot_min_time_in_millis: int = _opt(
        "transactionBufferSnapshotMinTimeInMillis", 5000,
        "Least time (ms) between two snapshots of one topic's transaction buffer.")

    # --- delayed delivery -------------------------------------------------------------------
    delayed_delivery_enabled: bool = _opt(
        "delayedDeliveryEnabled", True, "Honour deliver_at_time on Shared and Key_Shared subscriptions.")
    delayed_delivery_tick_time_millis: int = _opt(
        "delayedDeliveryTickTimeMillis", 1000,
        "Tick (ms): the early-delivery window and timer spacing when not strict; the cancel grace.")
    is_delayed_delivery_deliver_at_time_strict: bool = _opt(
        "isDelayedDeliveryDeliverAtTimeStrict", True,
        "true (Horae's default; Pulsar's is false): never deliver early, on time to the "
        "millisecond; false: up to one tick early, as Pulsar.")
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
    delayed_delivery_read_ahead_millis: int = _opt(
        "delayedDeliveryReadAheadMillis", 200,
        "Read the first due entries of a subscription this long (ms) before a deliver time "
        "that follows a quiet spell, so their delivery does not wait for cold storage and "
        "memory (0 disables).")
    delayed_delivery_relocation_enabled: bool = _opt(
        "delayedDeliveryRelocationEnabled", True,
        "Copy long-delayed pending messages forward so the ledgers they alone hold are trimmed "
        "(false: such ledgers are kept, as Pulsar; copies already made are still released).")
    delayed_delivery_relocation_min_delay_millis: int = _opt(
        "delayedDeliveryRelocationMinDelayMillis", 300_000,
        "A ledger is copied forward only if one of its pending delayed messages is due at "
        "least this far (ms) ahead (nearer ones free the ledger soon by themselves).")
    delayed_delivery_relocation_interval_seconds: int = _opt(
        "delayedDeliveryRelocationIntervalSeconds", 30,
        "Seconds between two copy-forward runs of one topic.")

    # --- metrics ----------------------------------------------------------------------------
    metrics_export_interval_seconds: int = _opt(
        "metricsExportIntervalSeconds", 60, "Period of metric snapshots written to <dataDir>/metrics.")
    metrics_export_retention_hours: int = _opt(
        "metricsExportRetentionHours", 168, "Metric snapshot files older than this are deleted.")
    expose_topic_level_metrics_in_prometheus: bool = _opt(
        "exposeTopicLevelMetricsInPrometheus", True, "Per-topic series in /metrics (else per namespace).")

    # --- TLS (broker/security/tls.py) -------------------------------------------------------
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

    # --- authentication and authorization (broker/security/) --------------------------------
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
    authenticate_metrics_endpoint: bool = _opt(
        "authenticateMetricsEndpoint", False, "Require authentication for /metrics (Pulsar's default: no).")
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

    # --- limits for hostile or runaway clients ----------------------------------------------
    broker_max_connections: int = _opt(
        "brokerMaxConnections", 0, "Most client connections at once; more are closed at accept. 0 = no limit.")
    broker_max_connections_per_ip: int = _opt(
        "brokerMaxConnectionsPerIp", 0, "Most client connections from one IP address. 0 = no limit.")
    max_producers_per_topic: int = _opt(
        "maxProducersPerTopic", 0, "Most producers on one topic (ProducerBusy beyond). 0 = no limit.")
    dispatcher_pause_on_ack_state_persistent_enabled: bool = _opt(
        "dispatcherPauseOnAckStatePersistentEnabled", False,
        "Pause reading new entries for a subscription while its cursor holds more "
        "acknowledged ranges than managedLedgerMaxUnackedRangesToPersist (the namespace and "
        "topic policy dispatcherPauseOnAckStatePersistent override it).")
    managed_ledger_max_unacked_ranges_to_persist: int = _opt(
        "managedLedgerMaxUnackedRangesToPersist", 10000,
        "Acknowledged ranges beyond the mark-delete position a cursor may hold before "
        "dispatcherPauseOnAckStatePersistent pauses its new reads (every range is stored).")
    encryption_require_on_producer: bool = _opt(
        "encryptionRequireOnProducer", False,
        "Refuse producers that do not declare encryption, on every topic but system topics "
        "(MetadataError \"Encryption is required in <topic>\"), as the namespace policy "
        "encryptionRequired does for its namespace.")
    max_consumers_per_topic: int = _opt(
        "maxConsumersPerTopic", 0, "Most consumers on one topic (ConsumerBusy beyond). 0 = no limit.")
    max_consumers_per_subscription: int = _opt(
        "maxConsumersPerSubscription", 0,
        "Most consumers on one subscription (ConsumerBusy beyond). 0 = no limit.")
    max_topics_per_namespace: int = _opt(
        "maxTopicsPerNamespace", 0,
        "Most persistent topics (each partition counting) in one namespace; creating more is "
        "refused (NotAllowed, REST 412). 0 = no limit.")
    max_publish_rate_per_topic_in_messages: int = _opt(
        "maxPublishRatePerTopicInMessages", 0,
        "Messages per second a topic takes before its producers' connections stop being read "
        "until the second ends. 0 = no limit.")
    max_publish_rate_per_topic_in_bytes: int = _opt(
        "maxPublishRatePerTopicInBytes", 0,
        "Bytes per second a topic takes before its producers' connections stop being read "
        "until the second ends. 0 = no limit.")
    subscribe_throttling_rate_per_consumer: int = _opt(
        "subscribeThrottlingRatePerConsumer", 0,
        "SUBSCRIBEs one consumer (address, name, id) may make on a topic per "
        "subscribeRatePeriodPerConsumerInSecond; more are refused with NotAllowed. 0 = no limit.")
    subscribe_rate_period_per_consumer_in_second: int = _opt(
        "subscribeRatePeriodPerConsumerInSecond", 30,
        "The period of subscribeThrottlingRatePerConsumer, in seconds.")
    dispatch_throttling_rate_per_topic_in_msg: int = _opt(
        "dispatchThrottlingRatePerTopicInMsg", 0,
        "Messages per second dispatched at most over all of a topic's subscriptions "
        "(dispatch waits for the next second past it). 0 = no limit.")
    dispatch_throttling_rate_per_topic_in_byte: int = _opt(
        "dispatchThrottlingRatePerTopicInByte", 0,
        "Bytes per second dispatched at most over all of a topic's subscriptions. 0 = no limit.")
    dispatch_throttling_rate_per_subscription_in_msg: int = _opt(
        "dispatchThrottlingRatePerSubscriptionInMsg", 0,
        "Messages per second one subscription is dispatched at most (dispatch waits for the "
        "next second past it). 0 = no limit.")
    dispatch_throttling_rate_per_subscription_in_byte: int = _opt(
        "dispatchThrottlingRatePerSubscriptionInByte", 0,
        "Bytes per second one subscription is dispatched at most. 0 = no limit.")
    max_unacked_messages_per_consumer: int = _opt(
        "maxUnackedMessagesPerConsumer", 50000,
        "A Shared/Key_Shared consumer holding this many unacknowledged messages gets no more "
        "until it has acked half of them. 0 = no limit.")
    max_unacked_messages_per_subscription: int = _opt(
        "maxUnackedMessagesPerSubscription", 200000,
        "A Shared/Key_Shared subscription whose consumers hold this many unacknowledged "
        "messages is not dispatched to until they fall to half of it. 0 = no limit.")
    subscription_expiration_time_minutes: int = _opt(
        "subscriptionExpirationTimeMinutes", 0,
        "A subscription without consumers for this many minutes is deleted (namespace and topic "
        "subscriptionExpirationTime override it). 0 = never.")
    subscription_expiry_check_interval_in_minutes: int = _opt(
        "subscriptionExpiryCheckIntervalInMinutes", 5,
        "How often subscriptions are checked for expiration.")
    subscription_types_enabled: str = _opt(
        "subscriptionTypesEnabled", "Exclusive,Shared,Failover,Key_Shared",
        "Subscription types a SUBSCRIBE may use (others are refused with NotAllowed); "
        "namespace and topic policies override it.")
    max_subscriptions_per_topic: int = _opt(
        "maxSubscriptionsPerTopic", 0,
        "Most subscriptions on one topic (a subscribe creating one more is refused with "
        "NotAllowed). 0 = no limit.")
    handshake_timeout_seconds: float = _opt(
        "handshakeTimeoutSeconds", 10.0,
        "A connection that has not completed CONNECT (and authentication) this long after accept is closed.")
    max_http_server_connections: int = _opt(
        "maxHttpServerConnections", 2048,
        "Most open connections on the web port; more are closed at accept. 0 = no limit of its "
        "own; either way at most half the process's open-file limit.")
    http_server_accept_queue_size: int = _opt(
        "httpServerAcceptQueueSize", 8192,
        "Listen backlog of the web port (the kernel caps it at net.core.somaxconn).")
    http_server_idle_timeout_ms: int = _opt(
        "httpServerIdleTimeoutMs", 30000,
        "A web connection with no complete request head this long after it was accepted or "
        "after its last response is closed (Horae's key; Pulsar's Jetty idle timeout is 30 s).")
    http_server_request_header_timeout_ms: int = _opt(
        "httpServerRequestHeaderTimeoutMs", 10000,
        "A request head must arrive whole this long after its first byte, or the web "
        "connection is closed (Horae's key: slowloris protection).")
    web_socket_service_enabled: bool = _opt(
        "webSocketServiceEnabled", True,
        "Serve Pulsar's WebSocket API (/ws/v2/producer|consumer|reader/...) on the web port "
        "(on by default, as in Pulsar standalone).")
    web_socket_session_idle_timeout_millis: int = _opt(
        "webSocketSessionIdleTimeoutMillis", 300000,
        "A WebSocket session with nothing received or sent this long is closed (1001); 0 = never.")
    web_socket_max_text_frame_size: int = _opt(
        "webSocketMaxTextFrameSize", 1048576,
        "Largest text frame (bytes) a WebSocket client may send; a larger one closes the "
        "session (1009).")
    pulsar_channel_write_buffer_high_water_mark: int = _opt(
        "pulsarChannelWriteBufferHighWaterMark", 64 * 1024,
        "Bytes of unsent output on a binary connection above which it is not writable (Netty's "
        "WRITE_BUFFER_HIGH_WATER_MARK): no more messages are dispatched to its consumers and, "
        "with pulsarChannelPauseReceivingRequestsIfUnwritable, it is not read.")
    pulsar_channel_write_buffer_low_water_mark: int = _opt(
        "pulsarChannelWriteBufferLowWaterMark", 32 * 1024,
        "Bytes of unsent output below which a connection that was not writable is again.")
    pulsar_channel_pause_receiving_requests_if_unwritable: bool = _opt(
        "pulsarChannelPauseReceivingRequestsIfUnwritable", True,
        "Stop reading a connection while it is not writable, so a peer that never reads cannot "
        "make the broker queue answers without limit. Pulsar's default is false; Horae's is true.")

    # --- operations -------------------------------------------------------------------------
    broker_shutdown_timeout_ms: int = _opt(
        "brokerShutdownTimeoutMs", 60000,
        "Longest graceful shutdown (ms) after SIGTERM; then the process exits non-zero anyway.")
    log_format: str = _opt(
        "logFormat", "text", "Log lines as 'text' or 'json' (one object per line); --log-format.")
    health_check_timeout_ms: int = _opt(
        "healthCheckTimeoutMs", 58000,
        "Longest /admin/v2/brokers/health round trip (produce + consume on the heartbeat topic) "
        "before it answers 500; Pulsar's fixed 58 s, under the admin client's 60 s read timeout.")

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
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"logFormat must be one of {list(LOG_FORMATS)}, not {self.log_format!r}")
        if self.advertised_listeners or self.internal_listener_name:
            try:
                names = parse_listeners(self.advertised_listeners)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            if self.internal_listener_name and self.internal_listener_name not in names:
                raise ConfigError(f"internalListenerName {self.internal_listener_name!r} is not "
                                  "one of advertisedListeners")
        positive = ("max_message_size", "max_pending_publish_requests_per_connection",
                    "keep_alive_interval_seconds", "delayed_delivery_tick_time_millis",
                    "delayed_delivery_relocation_interval_seconds",
                    "metrics_export_interval_seconds", "tls_cert_refresh_check_duration_sec",
                    "authentication_refresh_check_seconds", "handshake_timeout_seconds",
                    "broker_shutdown_timeout_ms", "disk_check_interval",
                    "health_check_timeout_ms", "pulsar_channel_write_buffer_high_water_mark",
                    "http_server_accept_queue_size", "http_server_idle_timeout_ms",
                    "http_server_request_header_timeout_ms",
                    "broker_deduplication_max_number_of_producers", "default_num_partitions",
                    "web_socket_max_text_frame_size", "managed_ledger_cache_eviction_interval_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{KEY_OF_FIELD[name]} must be > 0, not {getattr(self, name)}")
        if 0 < self.max_num_partitions_per_partitioned_topic < self.default_num_partitions:
            raise ConfigError(
                f"defaultNumPartitions ({self.default_num_partitions}) must not exceed "
                f"maxNumPartitionsPerPartitionedTopic "
                f"({self.max_num_partitions_per_partitioned_topic})")
        try:
            check_watermarks(high=self.disk_usage_threshold, low=self.disk_usage_lwm_threshold)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.allow_auto_topic_creation_type not in AUTO_TOPIC_TYPES:
            raise ConfigError("allowAutoTopicCreationType must be one of "
                              f"{list(AUTO_TOPIC_TYPES)}, not "
                              f"{self.allow_auto_topic_creation_type!r}")
        unknown = set(self.subscription_types_enabled_names) - set(SubType.__members__)
        if unknown:
            raise ConfigError(f"subscriptionTypesEnabled: unknown types {sorted(unknown)}, "
                              f"expected some of {list(SubType.__members__)}")
        if self.broker_delete_inactive_topics_mode not in INACTIVE_TOPIC_MODES:
            raise ConfigError("brokerDeleteInactiveTopicsMode must be one of "
                              f"{list(INACTIVE_TOPIC_MODES)}, not "
                              f"{self.broker_delete_inactive_topics_mode!r}")
        if self.backlog_quota_default_retention_policy not in BACKLOG_QUOTA_POLICIES:
            raise ConfigError("backlogQuotaDefaultRetentionPolicy must be one of "
                              f"{list(BACKLOG_QUOTA_POLICIES)}, not "
                              f"{self.backlog_quota_default_retention_policy!r}")
        for name in ("transaction_log_batched_write_max_records",
                     "transaction_log_batched_write_max_size",
                     "transaction_pending_ack_batched_write_max_records",
                     "transaction_pending_ack_batched_write_max_size",
                     "transaction_buffer_snapshot_max_transaction_count"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{KEY_OF_FIELD[name]} must be > 0, not {getattr(self, name)}")
        for name in ("transaction_log_batched_write_max_delay_in_millis",
                     "transaction_pending_ack_batched_write_max_delay_in_millis",
                     "transaction_buffer_snapshot_min_time_in_millis",
                     "managed_ledger_cache_eviction_time_threshold_millis",
                     "delayed_delivery_read_ahead_millis"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{KEY_OF_FIELD[name]} must be >= 0, not {getattr(self, name)}")
        for name in ("message_expiry_check_interval_in_minutes",
                     "broker_delete_inactive_topics_frequency_seconds",
                     "subscription_expiry_check_interval_in_minutes",
                     "backlog_quota_check_interval_in_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{KEY_OF_FIELD[name]} must be > 0, not {getattr(self, name)}")
        if self.max_http_server_connections < 0:
            raise ConfigError("maxHttpServerConnections must be >= 0 (0 = no limit), not "
                              f"{self.max_http_server_connections}")
        if not (0 <= self.pulsar_channel_write_buffer_low_water_mark
                <= self.pulsar_channel_write_buffer_high_water_mark):
            raise ConfigError(
                "pulsarChannelWriteBufferLowWaterMark must be between 0 and "
                f"pulsarChannelWriteBufferHighWaterMark ({self.pulsar_channel_write_buffer_high_water_mark}), "
                f"not {self.pulsar_channel_write_buffer_low_water_mark}")
        unknown_interceptors = self.entry_metadata_interceptors - ENTRY_METADATA_INTERCEPTORS
        if unknown_interceptors:
            raise ConfigError(f"brokerEntryMetadataInterceptors: unknown interceptor class "
                              f"{', '.join(sorted(unknown_interceptors))} (known: "
                              f"{', '.join(sorted(ENTRY_METADATA_INTERCEPTORS))})")
        if self.max_active_transactions_per_coordinator < 0:
            raise ConfigError("maxActiveTransactionsPerCoordinator must be >= 0 (0 = 100,000), "
                              f"not {self.max_active_transactions_per_coordinator}")
        for name in ("max_transaction_timeout_millis", "max_pending_acks_per_transaction",
                     "max_pending_acks_per_subscription"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{KEY_OF_FIELD[name]} must be > 0, not {getattr(self, name)}")
        if self.delayed_delivery_relocation_min_delay_millis < 0:
            raise ConfigError("delayedDeliveryRelocationMinDelayMillis must be >= 0, not "
                              f"{self.delayed_delivery_relocation_min_delay_millis}")
        if self.delayed_delivery_max_delay_in_millis < 0:
            raise ConfigError("delayedDeliveryMaxDelayInMillis must be >= 0 (0 = no limit), "
                              f"not {self.delayed_delivery_max_delay_in_millis}")

    @property
    def entry_metadata_interceptors(self) -> frozenset[str]:
        """The class names listed in ``brokerEntryMetadataInterceptors``."""
        return frozenset(name.strip() for name in
                         self.broker_entry_metadata_interceptors.split(",") if name.strip())

    @property
    def delayed_tracker_kind(self) -> str:
        """'in-memory' or 'bucket', whichever spelling the config used."""
        return _TRACKER_ALIASES[self.delayed_delivery_tracker_factory_class_name]

    @property
    def subscription_types_enabled_names(self) -> tuple[str, ...]:
        """``subscriptionTypesEnabled`` as names (``("Exclusive", "Shared", ...)``)."""
        return tuple(name.strip() for name in self.subscription_types_enabled.split(",")
                     if name.strip())

    @property
    def data_path(self) -> pathlib.Path:
        return pathlib.Path(self.data_dir)

    def to_dict(self) -> dict[str, object]:
        """``{camelCaseKey: value}`` for every setting (e.g. for a TOML dump or the admin API)."""
        return {KEY_OF_FIELD[f.name]: getattr(self, f.name) for f in dataclasses.fields(self)}


#: Every setting's dataclass field by its broker.conf key (aliases included; see below).
FIELDS_BY_KEY = {f.metadata["key"]: f for f in dataclasses.fields(BrokerConfig)}
KEY_OF_FIELD = {f.name: key for key, f in FIELDS_BY_KEY.items()}
#: Other spellings accepted for a key: PIP-315's design names the max-delay setting
#: ``delayedDeliveryMaxDeliveryDelayInMillis``; Pulsar's broker.conf ``delayedDeliveryMaxDelayInMillis``.
_KEY_ALIASES = {"delayedDeliveryMaxDeliveryDelayInMillis": "delayedDeliveryMaxDelayInMillis"}
FIELDS_BY_KEY.update({alias: FIELDS_BY_KEY[key] for alias, key in _KEY_ALIASES.items()})
FIELD_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str}


def config_keys() -> dict[str, str]:
    """``{camelCaseKey: doc}`` of every setting, in declaration order (aliases left out)."""
    return {key: f.metadata["doc"] for key, f in FIELDS_BY_KEY.items() if key not in _KEY_ALIASES}


def storage_config(config: BrokerConfig) -> StorageConfig:
    """The storage layer's StorageConfig for *config* (broker.conf's managed-ledger and
    journal keys; storage's own defaults for the rest)."""
    return StorageConfig(
        max_entries_per_ledger=config.managed_ledger_max_entries_per_ledger,
        max_size_per_ledger_bytes=config.managed_ledger_max_size_per_ledger_mbytes * 1024 * 1024,
        max_ledger_rollover_minutes=config.managed_ledger_max_ledger_rollover_time_minutes,
        mark_delete_rate_limit_per_sec=config.managed_ledger_default_mark_delete_rate_limit,
        entry_cache_bytes=config.managed_ledger_cache_size_mb * 1024 * 1024,
        entry_cache_eviction_threshold_s=(
            config.managed_ledger_cache_eviction_time_threshold_millis / 1000),
        entry_cache_eviction_interval_s=config.managed_ledger_cache_eviction_interval_ms / 1000,
        entry_cache_for_inactive_cursors=config.managed_ledger_cache_for_inactive_cursors,
        fsync=config.journal_sync_data,
        group_commit_max_delay_ms=config.journal_max_group_wait_msec,
        disk_usage_threshold=config.disk_usage_threshold,
        disk_usage_lwm_threshold=config.disk_usage_lwm_threshold,
        disk_check_interval_ms=config.disk_check_interval,
    )
