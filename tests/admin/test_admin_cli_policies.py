"""``horae-admin`` schemas, compaction and policy commands, end to end against a broker."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from waiting import wait_until

from .conftest import Api, Cli

NS = "/admin/v2/namespaces/public/default"
T = "/admin/v2/persistent/public/default"
AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})


@pytest.fixture
def cli(broker: Any) -> Cli:
    return Cli(broker.web_url)


def test_help_lists_the_new_commands(cli: Cli) -> None:
    top = cli.run("--help").stdout
    assert "schemas" in top
    ns_help = cli.run("namespaces", "--help").stdout
    topics_help = cli.run("topics", "--help").stdout
    for verb in ("set", "get", "remove"):
        for stem in ("deduplication", "schema-compatibility-strategy", "compaction-threshold"):
            assert f"{verb}-{stem}" in ns_help
            assert f"{verb}-{stem}" in topics_help
    assert "compaction-status" in topics_help and "compact" in topics_help
    assert "create-subscription" in topics_help   # older commands are listed as well
    schemas_help = cli.run("schemas", "--help").stdout
    for name in ("get", "upload", "delete", "compatibility"):
        assert name in schemas_help


def test_namespace_deduplication_set_get_remove(cli: Cli, api: Api) -> None:
    cli.ok("namespaces", "set-deduplication", "public/default", "--disable")
    assert cli.ok("namespaces", "get-deduplication", "public/default") is False
    assert api("GET", NS).body["deduplicationEnabled"] is False
    cli.ok("namespaces", "set-deduplication", "public/default", "-e")
    assert cli.ok("namespaces", "get-deduplication", "public/default") is True
    cli.ok("namespaces", "remove-deduplication", "public/default")
    assert cli.ok("namespaces", "get-deduplication", "public/default") is None


def test_topic_deduplication_and_strategy_and_threshold(cli: Cli, api: Api) -> None:
    cli.ok("topics", "create", "t")
    cli.ok("topics", "set-deduplication", "t", "--disable")
    assert api("GET", T + "/t/deduplicationEnabled").body is False
    cli.ok("topics", "set-schema-compatibility-strategy", "t", "-s", "forward")
    assert cli.ok("topics", "get-schema-compatibility-strategy", "t") == "FORWARD"
    cli.ok("topics", "set-compaction-threshold", "t", "-t", "10M")
    assert cli.ok("topics", "get-compaction-threshold", "t") == 10 * 1024 * 1024
    cli.ok("topics", "remove-compaction-threshold", "t")
    assert cli.ok("topics", "get-compaction-threshold", "t") is None


def test_namespace_schema_strategy_is_in_the_policies_document(cli: Cli, api: Api) -> None:
    assert api("GET", NS + "/schemaCompatibilityStrategy").body == "UNDEFINED"  # unset: Pulsar's
    cli.ok("namespaces", "set-schema-compatibility-strategy", "public/default",
           "--compatibility", "BACKWARD_TRANSITIVE")
    assert cli.ok("namespaces", "get-schema-compatibility-strategy",
                  "public/default") == "BACKWARD_TRANSITIVE"
    assert api("GET", NS).body["schema_compatibility_strategy"] == "BACKWARD_TRANSITIVE"


def test_bad_values_are_usage_errors_sent_nowhere(cli: Cli) -> None:
    both = cli.run("namespaces", "set-deduplication", "public/default", "-e", "-d")
    assert both.returncode == 2
    assert "exactly one of --enable or --disable" in both.stderr
    strategy = cli.run("namespaces", "set-schema-compatibility-strategy", "public/default",
                       "-c", "SIDEWAYS")
    assert strategy.returncode == 2
    assert "invalid compatibility strategy" in strategy.stderr
    size = cli.run("topics", "set-compaction-threshold", "t", "-t", "ten")
    assert size.returncode == 2
    assert "invalid size" in size.stderr


def test_schema_upload_get_versions_delete(cli: Cli, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({"type": "AVRO", "schema": AVRO, "properties": {"k": "v"}}))
    assert cli.ok("schemas", "upload", "s", "-f", str(path)) == {"version": {"version": 0}}
    latest = cli.ok("schemas", "get", "s")
    assert latest["type"] == "AVRO"
    assert json.loads(latest["data"]) == json.loads(AVRO)
    assert latest["properties"] == {"k": "v"}
    assert cli.ok("schemas", "get", "s", "--version", "0")["version"] == 0
    assert len(cli.ok("schemas", "get", "s", "-a")["getSchemaResponses"]) == 1
    assert cli.ok("schemas", "compatibility", "s", "-f", str(path))["compatibility"] is True
    assert cli.ok("schemas", "delete", "s") == {"version": 1}
    gone = cli.run("schemas", "get", "s")
    assert gone.returncode == 1
    assert "Schema not found" in gone.stderr


def test_schema_upload_refuses_a_file_that_is_not_a_payload(cli: Cli,
                                                           tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("[1, 2]")
    proc = cli.run("schemas", "upload", "s", "-f", str(path))
    assert proc.returncode == 2
    assert "expected a JSON object" in proc.stderr
    missing = cli.run("schemas", "upload", "s", "-f", str(tmp_path / "nope.json"))
    assert missing.returncode == 2
    assert "cannot read schema file" in missing.stderr


def test_compact_and_compaction_status(cli: Cli, client: Any) -> None:
    producer = client.create_producer("persistent://public/default/c")
    for i in range(4):
        producer.send(b"v%d" % i, partition_key="k")
    producer.close()
    assert cli.ok("topics", "compaction-status", "c")["status"] == "NOT_RUN"
    cli.ok("topics", "compact", "c")
    wait_until(lambda: cli.ok("topics", "compaction-status", "c")["status"] == "SUCCESS",
               message="compaction finished")


def test_retention_ttl_quota_inactive_commands(cli: Cli, api: Api) -> None:
    cli.ok("namespaces", "set-retention", "public/default", "--time", "3h", "--size", "1G")
    assert cli.ok("namespaces", "get-retention", "public/default") == {
        "retentionTimeInMinutes": 180, "retentionSizeInMB": 1024}
    cli.ok("namespaces", "set-message-ttl", "public/default", "-ttl", "1h")
    assert api("GET", NS).body["message_ttl_in_seconds"] == 3600
    cli.ok("namespaces", "set-backlog-quota", "public/default", "-l", "10M",
           "-p", "producer_exception")
    assert cli.ok("namespaces", "get-backlog-quotas", "public/default") == {
        "destination_storage": {"limit": 10 * 1024 * 1024, "limitSize": 10 * 1024 * 1024,
                                "limitTime": -1, "policy": "producer_exception"}}
    cli.ok("namespaces", "remove-backlog-quota", "public/default")
    assert cli.ok("namespaces", "get-backlog-quotas", "public/default") == {}
    cli.ok("namespaces", "set-inactive-topic-policies", "public/default", "-e", "-t", "2m",
           "-m", "delete_when_subscriptions_caught_up")
    assert cli.ok("namespaces", "get-inactive-topic-policies", "public/default") == {
        "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
        "maxInactiveDurationSeconds": 120, "deleteWhileInactive": True}
    cli.ok("topics", "create", "pt")
    cli.ok("topics", "set-message-ttl", "pt", "-ttl", "30")
    assert api("GET", T + "/pt/messageTTL").body == 30


def test_topic_operation_commands(cli: Cli, client: Any) -> None:
    client.subscribe("persistent://public/default/ops", "s").close()
    producer = client.create_producer("persistent://public/default/ops", batching_enabled=False)
    for i in range(3):
        producer.send(b"p%d" % i)
    peeked = cli.ok("topics", "peek-messages", "ops", "-s", "s", "-n", "2")
    assert peeked.count("Message ID: ") == 2 and "|p0" in peeked and "|p1" in peeked
    assert "|p0" in cli.ok("topics", "examine-message", "ops", "-i", "earliest", "-m", "1")
    cli.ok("topics", "expire-messages", "ops", "-s", "s", "-t", "-1")   # 0 s expires nothing, as in Pulsar
    assert cli.ok("topics", "stats", "ops")["subscriptions"]["s"]["msgBacklog"] == 0
    # Closed first: a producer still reconnecting after the unload would be closed by the
    # terminate (TopicTerminated) at a moment the test does not control.
    producer.close()
    cli.ok("topics", "unload", "ops")
    last = cli.ok("topics", "terminate", "ops")
    assert last["entryId"] == 2
    cli.ok("topics", "create-partitioned-topic", "pp", "-p", "2")
    cli.ok("topics", "update-partitioned-topic", "pp", "-p", "3")
    assert cli.ok("topics", "get-partitioned-topic-metadata", "pp") == {"partitions": 3, "deleted": False}
    shrink = cli.run("topics", "update-partitioned-topic", "pp", "-p", "1")
    assert shrink.returncode == 1
    assert "can't be less than the current partitions 3" in shrink.stderr
