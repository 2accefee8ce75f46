"""``horae-admin`` end to end: a subprocess against a running broker, exit codes and stderr."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pulsar
import pytest

from .conftest import CLI_TIMEOUT_S, Cli

T = "persistent://public/default"


def test_tenants_and_namespaces(cli: Cli) -> None:
    assert cli.ok("tenants", "create", "acme") is None
    assert "acme" in cli.ok("tenants", "list")
    assert "allowedClusters" in cli.ok("tenants", "get", "acme")
    cli.ok("namespaces", "create", "acme/orders")
    assert cli.ok("namespaces", "list", "acme") == ["acme/orders"]
    cli.ok("topics", "create", "acme/orders/t")
    assert cli.ok("topics", "list", "acme/orders") == ["persistent://acme/orders/t"]
    cli.ok("topics", "delete", "persistent://acme/orders/t")
    cli.ok("namespaces", "delete", "acme/orders")
    cli.ok("tenants", "delete", "acme")
    assert "acme" not in cli.ok("tenants", "list")


def test_topics_and_subscriptions(cli: Cli, client: Any) -> None:
    cli.ok("topics", "create", "t")
    assert f"{T}/t" in cli.ok("topics", "list", "public/default")
    producer = client.create_producer(f"{T}/t", batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    producer.close()
    cli.ok("topics", "create-subscription", "t", "-s", "sub", "-m", "earliest")
    assert cli.ok("topics", "subscriptions", "t") == ["sub"]
    stats = cli.ok("topics", "stats", "t")
    assert stats["msgInCounter"] == 5
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 5
    assert cli.ok("topics", "stats-internal", "t")["numberOfEntries"] == 5
    cli.ok("topics", "skip", "t", "-s", "sub", "-n", "2")
    assert cli.ok("topics", "stats", "t")["subscriptions"]["sub"]["msgBacklog"] == 3
    cli.ok("topics", "skip-messages", "t", "-s", "sub",
           "--messageId-triplet", f"{ids[3].ledger_id()}:{ids[3].entry_id()}:-1")
    assert cli.ok("topics", "stats", "t")["subscriptions"]["sub"]["msgBacklog"] == 2
    cli.ok("topics", "skip-all", "t", "-s", "sub")
    assert cli.ok("topics", "stats", "t")["subscriptions"]["sub"]["msgBacklog"] == 0
    cli.ok("topics", "reset-cursor", "t", "-s", "sub", "--time", "1h")
    assert cli.ok("topics", "stats", "t")["subscriptions"]["sub"]["msgBacklog"] == 5
    cli.ok("topics", "reset-cursor", "t", "-s", "sub",
           "--messageId", f"{ids[4].ledger_id()}:{ids[4].entry_id()}")
    assert cli.ok("topics", "stats", "t")["subscriptions"]["sub"]["msgBacklog"] == 1
    cli.ok("topics", "unsubscribe", "t", "-s", "sub")
    assert cli.ok("topics", "subscriptions", "t") == []
    cli.ok("topics", "delete", "t")


def test_skip_messages_accepts_base64_ids(cli: Cli, client: Any) -> None:
    import base64
    # receiver_queue_size=1: only m0 can be dispatched before the skip.
    consumer = client.subscribe(f"{T}/b64", "sub", consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=1)
    producer = client.create_producer(f"{T}/b64", batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(4)]
    encoded = base64.b64encode(ids[1].serialize()).decode()
    cli.ok("topics", "skip-messages", "b64", "-s", "sub", "--messageId-base64", encoded,
           "--messageId-triplet", f"{ids[2].ledger_id()}:{ids[2].entry_id()}:-1")
    got = []
    for _ in range(2):
        msg = consumer.receive(timeout_millis=5000)
        got.append(msg.data())
        consumer.acknowledge(msg)
    assert got == [b"m0", b"m3"]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=300)
    producer.close()
    consumer.close()


def test_partitioned_topics_and_lookup(cli: Cli, broker: Any) -> None:
    cli.ok("topics", "create-partitioned-topic", "pt", "-p", "2")
    assert cli.ok("topics", "list-partitioned-topics", "public/default") == [f"{T}/pt"]
    assert cli.ok("topics", "get-partitioned-topic-metadata", "pt") == {"partitions": 2, "deleted": False}
    lookup = cli.ok("topics", "partitioned-lookup", "pt")
    assert lookup == {f"{T}/pt-partition-0": broker.service_url,
                      f"{T}/pt-partition-1": broker.service_url}
    assert cli.ok("topics", "lookup", "pt-partition-0")["brokerUrl"] == broker.service_url
    assert cli.ok("topics", "partitioned-stats", "pt")["metadata"] == {"partitions": 2, "deleted": False}
    cli.ok("topics", "delete-partitioned-topic", "pt")
    assert cli.ok("topics", "list-partitioned-topics", "public/default") == []
    assert cli.ok("brokers", "healthcheck") == "ok"


def test_delayed_delivery_policies(cli: Cli) -> None:
    cli.ok("namespaces", "set-delayed-delivery", "public/default", "--time", "500ms",
           "--max-delay", "10m")
    assert cli.ok("namespaces", "get-delayed-delivery", "public/default") == {
        "tickTime": 500, "maxDeliveryDelayInMillis": 600_000}
    cli.ok("topics", "create", "dd")
    cli.ok("topics", "set-delayed-delivery", "dd", "--fixed-delay", "30s")
    applied = cli.ok("topics", "get-delayed-delivery", "dd", "--applied")
    assert applied == {"active": True, "tickTime": 500, "maxDeliveryDelayInMillis": 0,
                       "fixedDeliveryDelayInMillis": 30_000}
    cli.ok("topics", "set-delayed-delivery", "dd", "--disable")
    assert cli.ok("topics", "get-delayed-delivery", "dd") == {"active": False}
    cli.ok("topics", "remove-delayed-delivery", "dd")
    cli.ok("namespaces", "remove-delayed-delivery", "public/default")
    assert cli.ok("topics", "get-delayed-delivery", "dd") is None
    assert cli.ok("namespaces", "get-delayed-delivery", "public/default") is None


def test_server_errors_print_the_reason_and_exit_1(cli: Cli) -> None:
    missing = cli.run("topics", "stats", "nope")
    assert missing.returncode == 1
    assert "Topic not found" in missing.stderr
    assert missing.stdout == ""
    cli.ok("topics", "create", "dup")
    dup = cli.run("topics", "create", "dup")
    assert dup.returncode == 1
    assert "This topic already exists" in dup.stderr
    no_ns = cli.run("namespaces", "delete", "public/nope")
    assert no_ns.returncode == 1
    assert "Namespace does not exist" in no_ns.stderr
    no_sub = cli.run("topics", "skip-all", "dup", "-s", "none")
    assert no_sub.returncode == 1
    assert "Subscription not found" in no_sub.stderr


def test_set_delayed_delivery_sends_only_the_fields_given(cli: Cli) -> None:
    cli.ok("namespaces", "set-delayed-delivery", "public/default", "--disable")
    cli.ok("topics", "create", "only")
    cli.ok("topics", "set-delayed-delivery", "only", "--max-delay", "10m")
    assert cli.ok("topics", "get-delayed-delivery", "only") == {
        "maxDeliveryDelayInMillis": 600_000}
    applied = cli.ok("topics", "get-delayed-delivery", "only", "--applied")
    assert applied["active"] is False       # the namespace's "disabled" still holds
    cli.ok("topics", "set-delayed-delivery", "only", "--enable")
    assert cli.ok("topics", "get-delayed-delivery", "only") == {"active": True}
    assert cli.run("topics", "set-delayed-delivery", "only", "-e", "-d").returncode == 2


def test_invalid_policy_is_refused_with_412_reason(cli: Cli) -> None:
    bad = cli.run("namespaces", "set-delayed-delivery", "public/default", "--time", "0s")
    assert bad.returncode == 1
    assert "tickTime" in bad.stderr
    assert "412" in bad.stderr


def test_usage_errors_exit_2(cli: Cli) -> None:
    for args in (("topics", "bogus"), ("topics", "skip", "t", "-s", "sub"),
                 ("topics", "stats", "a/b"), ("namespaces", "create", "justone"),
                 ("namespaces", "set-delayed-delivery", "public/default", "--time", "soon"),
                 ("topics", "reset-cursor", "t", "-s", "sub"),
                 ("topics", "skip-messages", "t", "-s", "sub", "--messageId-triplet", "x")):
        proc = cli.run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "error" in proc.stderr, args


def test_connection_refused_is_a_clear_message(free_port: Any) -> None:
    proc = Cli(f"http://127.0.0.1:{free_port()}").run("tenants", "list")
    assert proc.returncode == 1
    assert "connection refused" in proc.stderr
    assert "cannot reach the admin API" in proc.stderr


def test_installed_entry_point_runs(broker: Any) -> None:
    script = pathlib.Path(sys.executable).parent / "horae-admin"
    if not script.exists():
        pytest.skip("horae-admin is not installed in this environment (pip install -e .)")
    proc = subprocess.run([str(script), "--admin-url", broker.web_url, "tenants", "list"],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "public" in json.loads(proc.stdout)


def test_brokers_healthcheck_list_and_leader(cli: Cli, broker: Any) -> None:
    me = f"127.0.0.1:{broker.web_port}"
    assert cli.ok("brokers", "healthcheck") == "ok"
    assert cli.ok("brokers", "healthcheck", "--topic-version", "V2") == "ok"
    assert cli.ok("brokers", "list", "standalone") == [me]
    assert cli.ok("brokers", "leader-broker") == {"brokerId": me, "serviceUrl": broker.web_url}
    other = cli.run("brokers", "list", "elsewhere")
    assert other.returncode == 1
    assert "Cluster does not exist: cluster=elsewhere" in other.stderr
    bad = cli.run("brokers", "healthcheck", "--topic-version", "V3")
    assert bad.returncode == 2


def test_topic_commands_take_non_persistent_names(cli: Cli, client: Any) -> None:
    name = "non-persistent://public/default/cli-np"
    client.subscribe(name, "s")
    stats = cli.ok("topics", "stats", name)
    assert "msgDropRate" in stats and "s" in stats["subscriptions"]
    assert cli.ok("topics", "subscriptions", name) == ["s"]
    assert name in cli.ok("topics", "list", "public/default")  # both domains, as pulsar-admin
