"""``horae-admin`` set/get/remove-delayed-delivery-replace-by-key at both levels."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Api, Cli

NS = "/admin/v2/namespaces/public/default"
T = "/admin/v2/persistent/public/default"


@pytest.fixture
def cli(broker: Any) -> Cli:
    return Cli(broker.web_url)


def test_namespace_replace_by_key_set_get_remove(cli: Cli, api: Api) -> None:
    stem = "delayed-delivery-replace-by-key"
    assert cli.ok("namespaces", f"get-{stem}", "public/default") is None
    cli.ok("namespaces", f"set-{stem}", "public/default", "--enable")
    assert cli.ok("namespaces", f"get-{stem}", "public/default") is True
    assert api("GET", NS).body["delayed_delivery_replace_by_key"] is True
    cli.ok("namespaces", f"set-{stem}", "public/default", "-d")
    assert cli.ok("namespaces", f"get-{stem}", "public/default") is False
    cli.ok("namespaces", f"remove-{stem}", "public/default")
    assert cli.ok("namespaces", f"get-{stem}", "public/default") is None
    refused = cli.run("namespaces", f"set-{stem}", "public/default")
    assert refused.returncode == 2 and "--enable or --disable" in refused.stderr


def test_topic_replace_by_key_set_get_remove(cli: Cli, api: Api) -> None:
    stem = "delayed-delivery-replace-by-key"
    assert api("PUT", f"{T}/cli-rbk").status == 204
    topic = "persistent://public/default/cli-rbk"
    cli.ok("topics", f"set-{stem}", topic, "-e")
    assert cli.ok("topics", f"get-{stem}", topic) is True
    assert api("GET", f"{T}/cli-rbk/delayedDeliveryReplaceByKey").body is True
    cli.ok("topics", f"remove-{stem}", topic)
    assert cli.ok("topics", f"get-{stem}", topic) is None
