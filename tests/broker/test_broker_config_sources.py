"""Config from Pulsar's broker.conf format, TOML, and HORAE_/PULSAR_PREFIX_ environment variables."""

from __future__ import annotations

import pathlib

import pytest

from broker.config import DELAYED_TRACKER_BUCKET, ConfigError
from broker.config_loading import load_config, load_settings
from broker.config_sources import parse_broker_conf, parse_env_file

BROKER_CONF = f"""\
# Pulsar's broker.conf format: key=value, comments, empty values mean "not set"
clusterName=conf-cluster
brokerServicePort=7650
webServicePort: 9080
advertisedAddress=
! also a comment
isDelayedDeliveryDeliverAtTimeStrict=false
managedLedgerDefaultMarkDeleteRateLimit=2.5
delayedDeliveryTrackerFactoryClassName={DELAYED_TRACKER_BUCKET}
dataDir=/var/lib/\\
horae
"""


def _write(tmp_path: pathlib.Path, name: str, text: str) -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_broker_conf_lines_comments_empty_values_and_continuations() -> None:
    assert parse_broker_conf(BROKER_CONF) == {
        "clusterName": "conf-cluster",
        "brokerServicePort": "7650",
        "webServicePort": "9080",
        "isDelayedDeliveryDeliverAtTimeStrict": "false",
        "managedLedgerDefaultMarkDeleteRateLimit": "2.5",
        "delayedDeliveryTrackerFactoryClassName": DELAYED_TRACKER_BUCKET,
        "dataDir": "/var/lib/horae",
    }


def test_broker_conf_values_are_typed_by_their_setting(tmp_path: pathlib.Path) -> None:
    config = load_config(_write(tmp_path, "broker.conf", BROKER_CONF))
    assert config.cluster_name == "conf-cluster"
    assert (config.broker_service_port, config.web_service_port) == (7650, 9080)
    assert config.advertised_address == "localhost"    # empty value: the default
    assert config.is_delayed_delivery_deliver_at_time_strict is False
    assert config.managed_ledger_default_mark_delete_rate_limit == 2.5
    assert config.delayed_tracker_kind == "bucket"
    assert config.data_dir == "/var/lib/horae"


def test_pulsar_only_keys_in_broker_conf_are_skipped_and_reported(tmp_path: pathlib.Path) -> None:
    conf = _write(tmp_path, "broker.conf",
                  "metadataStoreUrl=zk:localhost:2181\nbrokerServicePort=7000\n"
                  "loadBalancerEnabled=false\n")
    loaded = load_settings(conf)
    assert loaded.config.broker_service_port == 7000
    assert loaded.ignored == {str(conf): ["metadataStoreUrl", "loadBalancerEnabled"]}


def test_a_typo_of_a_horae_key_in_broker_conf_is_an_error(tmp_path: pathlib.Path) -> None:
    conf = _write(tmp_path, "broker.conf", "brokerServicePrt=7000\n")
    with pytest.raises(ConfigError) as typo:
        load_config(conf)
    wrong_case = _write(tmp_path, "case.conf", "brokerserviceport=7000\n")
    with pytest.raises(ConfigError) as case:
        load_config(wrong_case)
    assert "'brokerServicePrt'" in str(typo.value)
    assert "did you mean 'brokerServicePort'" in str(typo.value)
    assert "did you mean 'brokerServicePort'" in str(case.value)


#: The keys of the official Python client suite's CI broker config (pulsar-client-python
#: tests/test-conf/standalone-ssl.conf), set here to this test's own values: a real Pulsar
#: broker.conf must load, its Pulsar-only keys skipped and reported (some are one word away
#: from a Horae key, e.g. managedLedgerMinLedgerRolloverTimeMinutes).
SUITE_HORAE_KEYS = {
    "subscriptionKeySharedUseConsistentHashing": "true",
    "brokerServicePort": "7650", "brokerServicePortTls": "7651", "webServicePort": "9080",
    "webServicePortTls": "9443", "bindAddress": "127.0.0.1", "advertisedAddress": "localhost",
    "clusterName": "standalone", "brokerShutdownTimeoutMs": "3000",
    "brokerDeleteInactiveTopicsEnabled": "true", "tlsEnabled": "true",
    "tlsCertificateFilePath": "conf/broker-cert.pem", "tlsKeyFilePath": "conf/broker-key.pem",
    "tlsTrustCertsFilePath": "conf/cacert.pem", "tlsAllowInsecureConnection": "false",
    "anonymousUserRole": "anonymous", "authenticationEnabled": "true",
    "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderTls,"
                               "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
    "authorizationEnabled": "true", "tokenSecretKey": "file:///keys/secret.key",
    "superUserRoles": "localhost,superUser,admin", "managedLedgerCacheSizeMB": "1024",
    "managedLedgerDefaultMarkDeleteRateLimit": "0.1", "managedLedgerMaxEntriesPerLedger": "50000",
    "managedLedgerMaxLedgerRolloverTimeMinutes": "240", "keepAliveIntervalSeconds": "30",
    "allowAutoTopicCreation": "true", "maxMessageSize": "1024000",
    "backlogQuotaCheckIntervalInSeconds": "60", "brokerDeleteInactiveTopicsFrequencySeconds": "60",
    "messageExpiryCheckIntervalInMinutes": "5", "defaultRetentionTimeInMinutes": "0",
    "defaultRetentionSizeInMB": "0",
    "allowAutoTopicCreationType": "non-partitioned",
    "defaultNumPartitions": "1", "maxUnackedMessagesPerConsumer": "50000",
}
SUITE_PULSAR_ONLY_KEYS = [
    "zooKeeperSessionTimeoutMillis", "backlogQuotaCheckEnabled", "backlogQuotaDefaultLimitGB",
    "clientLibraryVersionCheckEnabled", "clientLibraryVersionCheckAllowUnversioned",
    "statusFilePath", "subscriptionRedeliveryTrackerEnabled",
    "acknowledgmentAtBatchIndexLevelEnabled", "bookkeeperClientTimeoutInSeconds",
    "bookkeeperClientSpeculativeReadTimeoutInMillis", "bookkeeperClientHealthCheckEnabled",
    "bookkeeperClientHealthCheckIntervalSeconds",
    "bookkeeperClientHealthCheckErrorThresholdPerInterval",
    "bookkeeperClientHealthCheckQuarantineTimeInSeconds", "bookkeeperClientRackawarePolicyEnabled",
    "bookkeeperClientRegionawarePolicyEnabled", "bookkeeperClientMinNumRacksPerWriteQuorum",
    "bookkeeperClientEnforceMinNumRacksPerWriteQuorum",
    "bookkeeperClientReorderReadSequenceEnabled", "managedLedgerDefaultEnsembleSize",
    "managedLedgerDefaultWriteQuorum", "managedLedgerDefaultAckQuorum",
    "managedLedgerCacheEvictionWatermark", "managedLedgerMinLedgerRolloverTimeMinutes",
    "managedLedgerCursorMaxEntriesPerLedger", "managedLedgerCursorRolloverTimeInSeconds",
    "loadBalancerEnabled", "loadBalancerPlacementStrategy",
    "loadBalancerReportUpdateThresholdPercentage", "loadBalancerReportUpdateMaxIntervalMinutes",
    "loadBalancerHostUsageCheckIntervalMinutes", "loadBalancerSheddingIntervalMinutes",
    "loadBalancerSheddingGracePeriodMinutes", "loadBalancerBrokerUnderloadedThresholdPercentage",
    "loadBalancerBrokerOverloadedThresholdPercentage",
    "loadBalancerResourceQuotaUpdateIntervalMinutes", "loadBalancerBrokerComfortLoadLevelPercentage",
    "loadBalancerAutoBundleSplitEnabled", "loadBalancerNamespaceBundleSplitIntervalMinutes",
    "loadBalancerNamespaceBundleMaxTopics", "loadBalancerNamespaceBundleMaxSessions",
    "loadBalancerNamespaceBundleMaxMsgRate", "loadBalancerNamespaceBundleMaxBandwidthMbytes",
    "loadBalancerNamespaceMaximumBundles", "replicationMetricsEnabled",
    "replicationConnectionsPerBroker", "replicationProducerQueueSize",
    "brokerServicePurgeInactiveFrequencyInSeconds",
    "topicLevelPoliciesEnabled",
]
SUITE_EMPTY_KEYS = ["zookeeperServers", "configurationStoreServers", "globalZookeeperServers",
                    "brokerClientAuthenticationPlugin", "bookkeeperClientIsolationGroups"]


def test_the_official_suites_pulsar_broker_conf_loads(tmp_path: pathlib.Path) -> None:
    lines = [f"{key}=" for key in SUITE_EMPTY_KEYS]
    lines += [f"{key}={value}" for key, value in SUITE_HORAE_KEYS.items()]
    lines += [f"{key}=1" for key in SUITE_PULSAR_ONLY_KEYS]
    conf = _write(tmp_path, "standalone-ssl.conf", "\n".join(lines) + "\n")
    loaded = load_settings(conf)
    assert loaded.ignored == {str(conf): SUITE_PULSAR_ONLY_KEYS}
    config = loaded.config
    assert (config.broker_service_port_tls, config.web_service_port_tls) == (7651, 9443)
    assert config.managed_ledger_max_ledger_rollover_time_minutes == 240
    assert config.max_message_size == 1024000 and config.authorization_enabled


@pytest.mark.parametrize(("key", "meant"), [
    ("brokerServicePortTsl", "brokerServicePortTls"),
    ("maxMesageSize", "maxMessageSize"),
    ("tlsCertificatFilePath", "tlsCertificateFilePath"),
    ("keepAliveIntervalSecond", "keepAliveIntervalSeconds"),
])
def test_a_misspelt_word_is_still_a_typo(tmp_path: pathlib.Path, key: str, meant: str) -> None:
    conf = _write(tmp_path, "broker.conf", f"{key}=1\n")
    with pytest.raises(ConfigError) as typo:
        load_config(conf)
    assert f"did you mean {meant!r}" in str(typo.value)


@pytest.mark.parametrize(("line", "wanted"), [
    ("brokerServicePort=port", "must be int, not 'port'"),
    ("journalSyncData=maybe", "must be bool, not 'maybe'"),
    ("brokerServicePort=70000", "must be a port number"),
    ("delayedDeliveryRelocationMinDelayMillis=-1", "must be >= 0"),
    ("delayedDeliveryRelocationIntervalSeconds=0", "must be > 0"),
])
def test_bad_broker_conf_values_name_the_key(tmp_path: pathlib.Path, line: str,
                                             wanted: str) -> None:
    with pytest.raises(ConfigError) as bad:
        load_config(_write(tmp_path, "broker.conf", line + "\n"))
    assert line.split("=")[0] in str(bad.value)
    assert wanted in str(bad.value)


def test_format_is_chosen_by_extension_then_by_content(tmp_path: pathlib.Path) -> None:
    toml_no_ext = load_config(_write(tmp_path, "settings", 'clusterName = "toml-c"\n'))
    conf_no_ext = load_config(_write(tmp_path, "settings2", "clusterName=conf-c\n"))
    properties = load_config(_write(tmp_path, "broker.properties", "clusterName=props\n"))
    assert (toml_no_ext.cluster_name, conf_no_ext.cluster_name) == ("toml-c", "conf-c")
    assert properties.cluster_name == "props"
    with pytest.raises(ConfigError) as bad_toml:
        load_config(_write(tmp_path, "broker.toml", "clusterName=conf-c\n"))
    assert "not valid TOML" in str(bad_toml.value)


def test_environment_sets_keys_by_camel_case_and_upper_snake_names() -> None:
    config = load_config(environ={
        "HORAE_clusterName": "env-c",
        "HORAE_BROKER_SERVICE_PORT": "7100",
        "HORAE_JOURNAL_MAX_GROUP_WAIT_MSEC": "2.5",
        "PULSAR_PREFIX_webServicePort": "9100",
        "PULSAR_PREFIX_journalSyncData": "false",
        "HORAE_CRASH_STATES": "50",         # not a setting: belongs to another tool
        "HORAE_ADMIN_URL": "http://127.0.0.1:8080",   # horae-admin's, not a setting
        "PATH": "/usr/bin",
    })
    assert config.cluster_name == "env-c"
    assert config.broker_service_port == 7100
    assert config.journal_max_group_wait_msec == 2.5
    assert config.web_service_port == 9100
    assert config.journal_sync_data is False


def test_precedence_is_defaults_file_environment_flags(tmp_path: pathlib.Path) -> None:
    conf = _write(tmp_path, "broker.conf",
                  "clusterName=file\nbrokerServicePort=7001\nwebServicePort=9001\n"
                  "keepAliveIntervalSeconds=11\n")
    environ = {"PULSAR_PREFIX_brokerServicePort": "7002", "PULSAR_PREFIX_webServicePort": "9002",
               "HORAE_webServicePort": "9003", "HORAE_clusterName": "env"}
    config = load_config(conf, {"clusterName": "flag"}, environ=environ)
    assert config.keep_alive_interval_seconds == 11       # file beats default
    assert config.broker_service_port == 7002             # PULSAR_PREFIX_ beats file
    assert config.web_service_port == 9003                # HORAE_ beats PULSAR_PREFIX_
    assert config.cluster_name == "flag"                  # flags beat everything
    assert config.max_message_size == 5 * 1024 * 1024     # untouched default


def test_bad_environment_settings_are_errors_that_name_the_variable() -> None:
    with pytest.raises(ConfigError) as typo:
        load_config(environ={"HORAE_brokerServicePrt": "1"})
    with pytest.raises(ConfigError) as clash:
        load_config(environ={"HORAE_brokerServicePort": "1", "HORAE_BROKER_SERVICE_PORT": "2"})
    with pytest.raises(ConfigError) as bad_value:
        load_config(environ={"HORAE_brokerServicePort": "many"})
    assert "HORAE_brokerServicePrt" in str(typo.value)
    assert "did you mean HORAE_brokerServicePort" in str(typo.value)
    for misspelt, meant in (("HORAE_BROKER_SERVICE_PRT", "HORAE_BROKER_SERVICE_PORT"),
                            ("HORAE_WEB_SERVICE_PORTS", "HORAE_WEB_SERVICE_PORT"),
                            ("HORAE_DATADIR", "HORAE_DATA_DIR")):
        with pytest.raises(ConfigError) as snake_typo:
            load_config(environ={misspelt: "1"})
        assert f"environment variable {misspelt} names no config key (did you mean " \
            f"{meant}?)" in str(snake_typo.value)
    assert "HORAE_BROKER_SERVICE_PORT" in str(clash.value)
    assert "brokerServicePort" in str(bad_value.value)


def test_pulsar_prefix_keys_horae_does_not_implement_are_reported() -> None:
    loaded = load_settings(environ={"PULSAR_PREFIX_zookeeperServers": "zk:2181",
                                    "PULSAR_PREFIX_clusterName": "pc"})
    assert loaded.config.cluster_name == "pc"
    assert loaded.ignored == {"PULSAR_PREFIX_* environment variables": ["zookeeperServers"]}


def test_env_file_parsing_strips_quotes_and_comments() -> None:
    assert parse_env_file('# c\nA=1\nB="two words"\n\nC=\'x\'\n') == {
        "A": "1", "B": "two words", "C": "x"}


def test_log_format_and_shutdown_timeout_are_validated() -> None:
    with pytest.raises(ConfigError) as fmt:
        load_config(overrides={"logFormat": "xml"})
    with pytest.raises(ConfigError) as timeout:
        load_config(environ={"HORAE_brokerShutdownTimeoutMs": "0"})
    assert "logFormat" in str(fmt.value)
    assert "brokerShutdownTimeoutMs must be > 0" in str(timeout.value)


def test_dedup_max_number_of_producers_has_pulsars_default_and_is_validated() -> None:
    assert load_config(environ={}).broker_deduplication_max_number_of_producers == 10_000
    with pytest.raises(ConfigError) as cap:
        load_config(overrides={"brokerDeduplicationMaxNumberOfProducers": 0})
    assert "brokerDeduplicationMaxNumberOfProducers must be > 0" in str(cap.value)
