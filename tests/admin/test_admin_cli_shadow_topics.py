"""``horae-admin topics`` shadow-topic commands, end to end."""

from __future__ import annotations

from .conftest import Cli

SRC = "persistent://public/default/cli-src"
SHADOW = "persistent://public/default/cli-shadow"


def test_shadow_topic_commands(cli: Cli) -> None:
    missing = cli.run("topics", "create-shadow-topic", SHADOW, "--source", SRC)
    assert missing.returncode != 0 and f"Topic {SRC} not found (HTTP 404)" in missing.stderr
    cli.ok("topics", "create", SRC)
    cli.ok("topics", "create-shadow-topic", SHADOW, "-s", "public/default/cli-src",
           "-p", "team=a,tier=b")
    assert cli.run("topics", "get-shadow-source", SHADOW).stdout.strip() == SRC
    assert cli.ok("topics", "get-properties", SHADOW) == {
        "team": "a", "tier": "b", "PULSAR.SHADOW_SOURCE": SRC}
    assert cli.run("topics", "get-shadow-topics", SRC).stdout.strip() == "null"
    cli.ok("topics", "set-shadow-topics", SRC, "--topics", SHADOW)
    assert cli.ok("topics", "get-shadow-topics", SRC) == [SHADOW]
    refused = cli.run("topics", "set-shadow-topics", SRC, "-t", "public/default/none")
    assert "Shadow topic [public/default/none] not exists. (HTTP 412)" in refused.stderr
    cli.ok("topics", "remove-shadow-topics", SRC)
    assert cli.run("topics", "get-shadow-topics", SRC).stdout.strip() == "null"
    # a partitioned source gives a partitioned shadow with its partition count
    cli.ok("topics", "create-partitioned-topic", SRC + "-p", "--partitions", "3")
    cli.ok("topics", "create-shadow-topic", SHADOW + "-p", "--source", SRC + "-p")
    assert cli.ok("topics", "get-partitioned-topic-metadata", SHADOW + "-p")["partitions"] == 3
    assert cli.run("topics", "get-shadow-source", SHADOW + "-p").stdout.strip() == SRC + "-p"
    usage = cli.run("topics", "create-shadow-topic", SHADOW)
    assert usage.returncode != 0 and "--source" in usage.stderr
    help_ = cli.run("topics", "--help").stdout
    for name in ("create-shadow-topic", "get-shadow-source", "set-shadow-topics",
                 "get-shadow-topics", "remove-shadow-topics"):
        assert name in help_
