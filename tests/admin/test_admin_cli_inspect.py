"""``horae-admin``'s inspection, maintenance and broker configuration commands, with
pulsar-admin's names and flags, against an in-process broker."""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from typing import Any

import pytest

from cli.admin.args import UsageError, parse_duration_ms
from cli.admin.main import build_parser
from cli.admin.maintenance import parse_datetime_ms
from cli.admin.messages import hex_dump
from tests.waiting import wait_until

from .conftest import ROOT, Cli

FULL = "persistent://public/default"


def _send(client: Any, topic: str, payloads: list[bytes], *, batched: bool = False,
          properties: dict[str, str] | None = None) -> list[Any]:
    if batched:
        producer = client.create_producer(f"{FULL}/{topic}", batching_enabled=True,
                                          batching_max_messages=len(payloads),
                                          batching_max_publish_delay_ms=60_000)
        futures: list[Any] = []
        for p in payloads:
            producer.send_async(p, lambda res, mid, out=futures: out.append(mid),
                                properties=properties or {})
        producer.flush()
        wait_until(lambda: len(futures) == len(payloads))
        producer.close()
        return futures
    producer = client.create_producer(f"{FULL}/{topic}", batching_enabled=False)
    ids = [producer.send(p, properties=properties or {}) for p in payloads]
    producer.close()
    return ids


def test_peek_messages_expands_batches_and_dumps_binary_safely(client: Any, cli: Cli) -> None:
    consumer = client.subscribe(f"{FULL}/peek", "s")
    _send(client, "peek", [b"one", b"\x00\x1b[2Jtwo", b"three"], batched=True,
          properties={"k": "v"})
    _send(client, "peek", [b"four"], properties={"MixedCase": "V"})
    proc = cli.run("topics", "peek-messages", "peek", "-s", "s", "-n", "4")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count("Batch Message ID: ") == 3 and out.count("\nMessage ID: ") == 1
    assert '"k": "v"' in out and '"MixedCase": "V"' in out and "Publish time: " in out
    assert "\x1b" not in out and "|..[2Jtwo" in out    # control bytes shown as dots
    two = cli.run("topics", "peek-messages", "peek", "-s", "s", "-n", "2").stdout
    assert two.count("Batch Message ID: ") == 2 and ":1\n" in two
    more = cli.run("topics", "peek-messages", "peek", "-s", "s", "-n", "50").stdout
    assert more.count("Message ID: ") == 4      # everything there is, then it stops
    missing = cli.run("topics", "peek-messages", "no-such-topic", "-s", "s")
    assert missing.returncode == 1 and "Topic not found" in missing.stderr
    consumer.close()


def test_get_message_by_id_and_examine(client: Any, cli: Cli) -> None:
    ids = _send(client, "byid", [b"a", b"b"])
    out = cli.run("topics", "get-message-by-id", "byid", "-l", str(ids[1].ledger_id()),
                  "-e", str(ids[1].entry_id())).stdout
    assert f"Message ID: {ids[1].ledger_id()}:{ids[1].entry_id()}" in out and "|b" in out
    gone = cli.run("topics", "get-message-by-id", "byid", "-l", "999999", "-e", "0")
    assert gone.returncode == 1 and "Message not found" in gone.stderr
    for name in ("examine-message", "examine-messages"):
        first = cli.run("topics", name, "byid", "-i", "earliest", "-m", "1").stdout
        assert f"{ids[0].ledger_id()}:{ids[0].entry_id()}" in first


def test_message_ids_backlog_and_maintenance_commands(client: Any, cli: Cli) -> None:
    consumer = client.subscribe(f"{FULL}/maint", "s")
    ids = _send(client, "maint", [b"x", b"y", b"z"])
    last = cli.ok("topics", "last-message-id", "maint")
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    first = cli.ok("topics", "get-message-id", "maint", "-d", "2000-01-01T00:00:00Z")
    assert (first["ledgerId"], first["entryId"]) == (ids[0].ledger_id(), ids[0].entry_id())
    assert cli.ok("topics", "get-backlog-size", "maint", "-m",
                  f"{ids[0].ledger_id()}:0") > 0
    backlog = cli.ok("topics", "analyze-backlog", "maint", "-s", "s")
    assert (backlog["entries"], backlog["messages"]) == (3, 3)
    later = cli.ok("topics", "analyze-backlog", "maint", "-s", "s", "-p",
                   f"{ids[1].ledger_id()}:{ids[1].entry_id()}")
    assert later["entries"] == 2
    info = cli.ok("topics", "info-internal", "maint")
    assert "s" in info["cursors"]
    assert cli.ok("topics", "expire-messages-all-subscriptions", "maint", "-t", "-1h") is None
    stats = wait_until(lambda: (doc := cli.ok("topics", "stats", "maint"))
                       ["subscriptions"]["s"]["msgBacklog"] == 0 and doc)
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0
    for command in ("trim-topic", "truncate"):
        assert cli.ok("topics", command, "maint") is None
    cli.ok("topics", "create-partitioned-topic", "maintp", "-p", "2")
    assert cli.ok("topics", "create-missed-partitions", "maintp") is None
    consumer.close()


def test_namespace_commands(client: Any, cli: Cli) -> None:
    consumer = client.subscribe(f"{FULL}/nsc", "s")
    _send(client, "nsc", [b"1", b"2"])
    refused = subprocess.run(
        [sys.executable, "-m", "cli.admin", "--admin-url", cli.admin_url, "namespaces",
         "clear-backlog", "public/default"], cwd=ROOT, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=30, check=False)
    assert refused.returncode == 2 and "-force" in refused.stderr
    assert cli.ok("namespaces", "clear-backlog", "public/default", "-s", "s", "-force") is None
    assert cli.ok("topics", "stats", "nsc")["subscriptions"]["s"]["msgBacklog"] == 0
    busy = cli.run("namespaces", "unsubscribe", "public/default", "-s", "s")
    assert busy.returncode == 1 and "active connected consumers" in busy.stderr
    consumer.close()
    assert cli.ok("namespaces", "unsubscribe", "public/default", "-s", "s") is None
    assert cli.ok("namespaces", "unload", "public/default") is None
    assert cli.ok("namespaces", "unload", "public/default", "-b",
                  "0x00000000_0xffffffff") is None


def test_broker_configuration_commands(cli: Cli) -> None:
    assert "defaultNumPartitions" in cli.ok("brokers", "list-dynamic-config")
    assert cli.ok("brokers", "update-dynamic-config", "--config", "defaultNumPartitions",
                  "--value", "5") is None
    assert cli.ok("brokers", "get-all-dynamic-config") == {"defaultNumPartitions": "5"}
    assert cli.ok("brokers", "get-runtime-config")["defaultNumPartitions"] == "5"
    assert cli.ok("brokers", "delete-dynamic-config", "--config", "defaultNumPartitions") is None
    assert cli.ok("brokers", "get-all-dynamic-config") == {}
    refused = cli.run("brokers", "update-dynamic-config", "--config", "webServicePort",
                      "--value", "1")
    assert refused.returncode == 1 and "Can't update non-dynamic configuration" in refused.stderr
    assert "metadataStoreUrl" in cli.ok("brokers", "get-internal-config")
    assert cli.run("brokers", "version").stdout.strip()


def test_admin_url_without_a_scheme_is_a_clear_usage_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "cli.admin", "--admin-url", "localhost:8080",
                           "tenants", "list"], cwd=ROOT, capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 2
    assert "http://localhost:8080" in proc.stderr and "--admin-url" in proc.stderr


def test_negative_durations_read_as_values() -> None:
    assert parse_duration_ms("-1h") == -3_600_000 and parse_duration_ms("-1") == -1000
    assert parse_duration_ms("2y") == 2 * 31_536_000_000
    args = build_parser().parse_args(["topics", "expire-messages-all-subscriptions", "t",
                                      "-t", "-30s"])
    assert args.expire_time == "-30s"
    args = build_parser().parse_args(["topics", "reset-cursor", "t", "-s", "s", "-t", "-5m"])
    assert args.time == "-5m"


def test_datetime_flag_reads_iso_and_epoch_ms() -> None:
    expected = int(datetime.datetime(2024, 6, 28, 16, 53, 8,
                                     tzinfo=datetime.UTC).timestamp() * 1000)
    assert parse_datetime_ms("2024-06-28T16:53:08Z") == expected
    assert parse_datetime_ms("2024-06-28T16:53:08") == expected
    assert parse_datetime_ms("2024-06-28T18:53:08+02:00") == expected
    assert parse_datetime_ms(str(expected)) == expected
    with pytest.raises(UsageError):
        parse_datetime_ms("yesterday")


def test_hex_dump_layout() -> None:
    dump = hex_dump(b"hello\x00world!\x7f\x80 and more")
    lines = dump.splitlines()
    assert lines[3].startswith("|00000000| 68 65 6c 6c 6f 00 77 6f")
    assert lines[3].endswith("|hello.world!.. a|")
    assert lines[4].startswith("|00000010| 6e 64 20 6d 6f 72 65")


def test_every_command_has_a_help_line() -> None:
    missing = []
    for group_action in build_parser()._actions:
        if not isinstance(group_action, argparse._SubParsersAction):
            continue
        for group, group_parser in group_action.choices.items():
            for action in group_parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    missing += [f"{group} {c.dest}" for c in action._choices_actions
                                if not c.help]
    assert missing == []
