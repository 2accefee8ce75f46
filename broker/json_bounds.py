"""JSON from peers, parsed with its nesting bounded.

Theory of operation: Python's ``json`` parser recurses once per level of nesting, so a body of
100,000 ``[`` raises ``RecursionError`` from deep inside it (and code walking a parsed value
recursively would fail the same way). :func:`loads` counts the nesting first, skipping strings
whole, and refuses past :data:`MAX_JSON_DEPTH` with :class:`JsonTooDeepError`, a ``ValueError``
as ``json.JSONDecodeError`` is, so callers map both to their "invalid" answer. The count runs
only when the text holds more brackets than the limit, so ordinary bodies pay two
``bytes.count`` calls. Used for admin request bodies (:mod:`broker.admin.bodies`) and for the
schema definitions producers and the admin API upload (:mod:`broker.topics.schema_compat`).
Pure: no IO.
"""

from __future__ import annotations

import json
import re
from typing import Final

__all__ = ["MAX_JSON_DEPTH", "JsonTooDeepError", "loads"]

MAX_JSON_DEPTH: Final = 100
"""Deepest nesting of arrays and objects accepted. Pulsar's Jackson refuses beyond 1000
(``StreamReadConstraints`` maxNestingDepth); Python recurses per level, and so does the code that
walks a schema, so Horae stops well before the interpreter's recursion limit (1000 frames). No
admin body nests beyond a few levels, nor does a real Avro schema beyond a few dozen."""

# a JSON string (skipped whole: brackets inside it do not count) or one bracket
_TOKEN: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class JsonTooDeepError(ValueError):
    """The text nests arrays and objects deeper than :data:`MAX_JSON_DEPTH`."""


def loads(raw: str | bytes) -> object:
    """``json.loads(raw)``, refusing (:class:`JsonTooDeepError`) nesting beyond
    :data:`MAX_JSON_DEPTH`; raises what ``json.loads`` raises otherwise (bytes are decoded as
    ``json.loads`` decodes them)."""
    text = raw if isinstance(raw, str) else raw.decode(json.detect_encoding(raw), "surrogatepass")
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        depth = 0
        for token in _TOKEN.finditer(text):
            char = token.group()[0]
            if char == "[" or char == "{":
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    raise JsonTooDeepError(
                        f"nesting depth exceeds the maximum allowed ({MAX_JSON_DEPTH})")
            elif char == "]" or char == "}":
                depth -= 1
    return json.loads(text)
