"""JSON from peers nests at most MAX_JSON_DEPTH levels: deeper is 400 with a reason, never a
RecursionError; admin bodies are bounded in size too."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from broker import json_bounds
from broker.topics.schema_compat import SchemaIncompatible, parse_avro

P = "/admin/v2/persistent/public/default"
DEEP = b"[" * 100_000 + b"]" * 100_000


def test_loads_refuses_nesting_beyond_the_limit() -> None:
    limit = json_bounds.MAX_JSON_DEPTH
    assert json_bounds.loads("[" * limit + "]" * limit) is not None
    with pytest.raises(json_bounds.JsonTooDeepError) as refused:
        json_bounds.loads("[" * (limit + 1) + "]" * (limit + 1))
    assert f"maximum allowed ({limit})" in str(refused.value)
    with pytest.raises(json_bounds.JsonTooDeepError):
        json_bounds.loads(DEEP)


def test_brackets_inside_strings_do_not_count() -> None:
    text = '{"a": "' + "[{" * 500 + '\\"[", "b": [1, [2]]}'
    assert json_bounds.loads(text) == {"a": "[{" * 500 + '"[', "b": [1, [2]]}


def test_a_deep_schema_definition_is_invalid_not_a_recursion_error() -> None:
    with pytest.raises(SchemaIncompatible) as refused:
        parse_avro(DEEP)
    assert "nesting depth" in str(refused.value)


@pytest.mark.parametrize("path", [f"{P}/deep/partitions",
                                  f"{P}/deep/subscription/s/skipByMessageIds"])
def test_a_deeply_nested_body_is_400_with_a_reason_and_no_traceback(
        api: Any, path: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        reply = api("PUT" if path.endswith("partitions") else "POST", path, raw=DEEP)
    assert reply.status == 400
    assert reply.reason is not None and "nesting depth exceeds" in reply.reason
    assert not [r for r in caplog.records if r.exc_info]


def test_a_body_over_the_size_limit_is_413_with_a_reason(api: Any) -> None:
    reply = api("PUT", f"{P}/big/partitions", raw=b"[" + b"1," * 600_000 + b"1]")
    assert reply.status == 413
    assert reply.reason
