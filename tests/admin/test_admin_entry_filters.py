"""A namespace's entry filters, as a Pulsar broker without entry filters answers them: a create
body's names read back and can be removed; setting any name is refused (none exists)."""

from __future__ import annotations

from .conftest import Api, Cli

NS = "/admin/v2/namespaces/public/filtered"


def test_entry_filters_routes(api: Api) -> None:
    assert api("PUT", NS, {"entryFilters": {"entryFilterNames": "f1,f2"}}).status == 204
    got = api("GET", NS + "/entryFilters")
    assert (got.status, got.body) == (200, {"entryFilterNames": "f1,f2"})
    refused = api("POST", NS + "/entryFilters", {"entryFilterNames": "f1"})
    assert (refused.status, refused.reason) == (400, "Entry filter 'f1' not found")
    blank = api("POST", NS + "/entryFilters", {"entryFilterNames": " , "})
    assert (blank.status, blank.reason) == (
        400, "entryFilterNames can't be empty. To remove entry filters use the remove method.")
    assert api("DELETE", NS + "/entryFilters").status == 204
    unset = api("GET", NS + "/entryFilters")
    assert (unset.status, unset.body) == (200, None)
    assert "entryFilters" not in api("GET", NS).body
    assert api("GET", "/admin/v2/namespaces/public/missing/entryFilters").status == 404


def test_entry_filter_commands(cli: Cli) -> None:
    cli.ok("namespaces", "create", "public/ef")
    assert cli.run("namespaces", "get-entry-filters", "public/ef").stdout.strip() == "null"
    refused = cli.run("namespaces", "set-entry-filters", "public/ef", "-efn", "f1")
    assert refused.returncode != 0 and "Entry filter 'f1' not found (HTTP 400)" in refused.stderr
    cli.ok("namespaces", "remove-entry-filters", "public/ef")
    usage = cli.run("namespaces", "set-entry-filters", "public/ef")
    assert usage.returncode != 0 and "--entry-filters-name" in usage.stderr
