"""``horae-admin resourcegroups`` and the namespace's resource group, end to end."""

from __future__ import annotations

from .conftest import Cli


def test_resource_group_commands(cli: Cli) -> None:
    assert cli.ok("resourcegroups", "list") == []
    cli.ok("resourcegroups", "create", "g", "-mp", "100", "--byte-dispatch-rate", "4096")
    assert cli.ok("resourcegroups", "get", "g") == {"publishRateInMsgs": 100,
                                                    "dispatchRateInBytes": 4096}
    cli.ok("resourcegroups", "update", "g", "--msg-dispatch-rate", "7")
    assert cli.ok("resourcegroups", "get", "g") == {
        "publishRateInMsgs": 100, "dispatchRateInBytes": 4096, "dispatchRateInMsgs": 7}
    assert cli.ok("resourcegroups", "list") == ["g"]
    cli.ok("namespaces", "create", "public/rg")
    cli.ok("namespaces", "set-resource-group", "public/rg", "-rgn", "g")
    assert cli.run("namespaces", "get-resource-group", "public/rg").stdout.strip() == "g"
    refused = cli.run("resourcegroups", "delete", "g")
    assert refused.returncode != 0 and "ResourceGroup is in use (HTTP 412)" in refused.stderr
    cli.ok("namespaces", "remove-resource-group", "public/rg")
    assert cli.run("namespaces", "get-resource-group", "public/rg").stdout.strip() == "null"
    cli.ok("resourcegroups", "delete", "g")
    missing = cli.run("namespaces", "set-resource-group", "public/rg",
                      "--resource-group-name", "g")
    assert "ResourceGroup does not exist (HTTP 412)" in missing.stderr
    usage = cli.run("namespaces", "set-resource-group", "public/rg")
    assert usage.returncode != 0 and "--resource-group-name" in usage.stderr
    help_ = cli.run("resourcegroups", "--help").stdout
    for name in ("list", "get", "create", "update", "delete"):
        assert name in help_
