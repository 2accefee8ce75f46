"""broker/config.py: defaults, TOML with broker.conf names, overrides, and clear errors."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from broker.config import (
    DELAYED_TRACKER_BUCKET,
    BrokerConfig,
    ConfigError,
    config_keys,
    storage_config,
)
from broker.config_loading import load_config


def test_defaults_are_pulsar_standalone_values() -> None:
    c = load_config()
    assert c.broker_service_port == 6650
    assert c.web_service_port == 8080
    assert c.bind_address == "0.0.0.0"
    assert c.advertised_address == "localhost"
    assert c.cluster_name == "standalone"
    assert c.data_dir == "./data"
    assert c.max_message_size == 5 * 1024 * 1024
    assert c.max_pending_publish_requests_per_connection == 1000
    assert c.keep_alive_interval_seconds == 30
    assert c.delayed_delivery_enabled is True
    assert c.delayed_delivery_tick_time_millis == 1000
    assert c.is_delayed_delivery_deliver_at_time_strict is True
    assert c.delayed_delivery_max_delay_in_millis == 0
    assert c.delayed_tracker_kind == "in-memory"
    assert c.delayed_delivery_min_index_count_per_bucket == 50000
    assert c.delayed_delivery_max_num_buckets == -1
    assert c.metrics_export_interval_seconds == 60
    assert c.expose_topic_level_metrics_in_prometheus is True
    assert c.allow_auto_topic_creation is True


def test_config_is_frozen_and_slotted() -> None:
    c = BrokerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.broker_service_port = 1  # type: ignore[misc]
    assert not hasattr(c, "__dict__")


def test_every_field_has_a_camel_case_key_and_a_doc() -> None:
    keys = config_keys()
    assert len(keys) == len(dataclasses.fields(BrokerConfig))
    for key, doc in keys.items():
        assert key[0].islower() and "_" not in key
        assert doc


def test_toml_file_with_broker_conf_names(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "broker.toml"
    f.write_text(
        'brokerServicePort = 7650\n'
        'webServicePort = 9080\n'
        'advertisedAddress = "broker.example"\n'
        'delayedDeliveryTickTimeMillis = 10\n'
        'isDelayedDeliveryDeliverAtTimeStrict = false\n'
        f'delayedDeliveryTrackerFactoryClassName = "{DELAYED_TRACKER_BUCKET}"\n'
        'managedLedgerDefaultMarkDeleteRateLimit = 5\n'
    )
    c = load_config(f)
    assert (c.broker_service_port, c.web_service_port) == (7650, 9080)
    assert c.advertised_address == "broker.example"
    assert c.delayed_delivery_tick_time_millis == 10
    assert c.is_delayed_delivery_deliver_at_time_strict is False
    assert c.delayed_tracker_kind == "bucket"
    assert c.managed_ledger_default_mark_delete_rate_limit == 5.0


def test_broker_table_is_accepted(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "broker.toml"
    f.write_text("[broker]\nclusterName = \"c1\"\n")
    assert load_config(f).cluster_name == "c1"


def test_overrides_beat_the_file(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "broker.toml"
    f.write_text("brokerServicePort = 7650\n")
    c = load_config(f, {"brokerServicePort": 0, "dataDir": "/x"})
    assert c.broker_service_port == 0
    assert c.data_dir == "/x"


def test_unknown_key_names_the_key_and_suggests(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "broker.toml"
    f.write_text("brokerserviceport = 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert "brokerserviceport" in str(info.value)
    assert "brokerServicePort" in str(info.value)


def test_wrong_value_type_is_an_error(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "broker.toml"
    f.write_text('maxMessageSize = "big"\n')
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert "maxMessageSize" in str(info.value)


def test_bool_is_not_accepted_as_int() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {"maxMessageSize": True})
    assert "maxMessageSize" in str(info.value)


def test_invalid_toml_and_missing_file_are_clear(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("brokerServicePort = = 1\n")
    with pytest.raises(ConfigError) as bad:
        load_config(f)
    assert "not valid TOML" in str(bad.value)
    with pytest.raises(ConfigError) as missing:
        load_config(tmp_path / "nope.toml")
    assert "not found" in str(missing.value)


@pytest.mark.parametrize("name", ["in-memory", "bucket",
                                  "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory"])
def test_tracker_factory_names_accepted(name: str) -> None:
    c = load_config(None, {"delayedDeliveryTrackerFactoryClassName": name})
    assert c.delayed_tracker_kind in ("in-memory", "bucket")


def test_unknown_tracker_factory_is_rejected() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {"delayedDeliveryTrackerFactoryClassName": "redis"})
    assert "delayedDeliveryTrackerFactoryClassName" in str(info.value)


def test_out_of_range_values_are_rejected() -> None:
    with pytest.raises(ConfigError) as port:
        load_config(None, {"brokerServicePort": 70000})
    assert "brokerServicePort" in str(port.value)
    with pytest.raises(ConfigError) as tick:
        load_config(None, {"delayedDeliveryTickTimeMillis": 0})
    assert "delayedDeliveryTickTimeMillis" in str(tick.value)


def test_storage_config_mapping() -> None:
    c = load_config(None, {"managedLedgerMaxEntriesPerLedger": 10,
                           "managedLedgerMaxSizePerLedgerMbytes": 1,
                           "managedLedgerCacheSizeMB": 2, "journalSyncData": False})
    s = storage_config(c)
    assert s.max_entries_per_ledger == 10
    assert s.max_size_per_ledger_bytes == 1024 * 1024
    assert s.entry_cache_bytes == 2 * 1024 * 1024
    assert s.fsync is False


def test_to_dict_round_trips() -> None:
    c = load_config(None, {"clusterName": "x"})
    assert load_config(None, c.to_dict()) == c


def test_broker_config_keys_map_to_the_storage_settings() -> None:
    defaults = storage_config(load_config(None, {}))
    assert (defaults.entry_cache_eviction_threshold_s,
            defaults.entry_cache_eviction_interval_s) == (1.0, 0.1)   # Pulsar's: 1 s, 10 ms
    mine = storage_config(load_config(None, {"managedLedgerCacheEvictionTimeThresholdMillis": 250,
                                             "managedLedgerCacheEvictionIntervalMs": 50}))
    assert (mine.entry_cache_eviction_threshold_s, mine.entry_cache_eviction_interval_s) == (
        0.25, 0.05)
    with pytest.raises(ConfigError, match="managedLedgerCacheEvictionTimeThresholdMillis"):
        load_config(None, {"managedLedgerCacheEvictionTimeThresholdMillis": -1})
    with pytest.raises(ConfigError, match="managedLedgerCacheEvictionIntervalMs"):
        load_config(None, {"managedLedgerCacheEvictionIntervalMs": 0})
