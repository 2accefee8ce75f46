"""Schema compatibility: can a reader schema read what a writer schema wrote (Avro resolution rules).

Theory of operation
-------------------
Pure functions, no state. :func:`check_compatible` answers for two registered schema
versions and a strategy (Pulsar's SchemaCompatibilityStrategy names), raising
:class:`SchemaIncompatible` with the reason:

- different schema types are incompatible (Pulsar: "Incompatible schema: exists schema type
  X, new schema type Y") unless the strategy is ALWAYS_COMPATIBLE;
- AVRO and JSON schemas (both carry an Avro schema definition) are checked by the Avro
  schema-resolution rules: BACKWARD = the new schema reads data written with the existing one,
  FORWARD = the existing one reads data written with the new one, FULL = both;
- PROTOBUF_NATIVE schemas must keep their root message type (Pulsar's
  ProtobufNativeSchemaCompatibilityCheck: "Protobuf root message isn't allow change!");
- other types (STRING, INT32, PROTOBUF, KEY_VALUE, ...) are compatible with themselves.

The Avro rules implemented (:func:`can_read`): same primitive or a promotion (int -> long ->
float -> double, string <-> bytes); a writer union needs every branch readable, a reader union
needs one branch that reads the writer; records by field name (a reader field missing in the
writer needs a default; writer fields the reader lacks are skipped); enums need every writer
symbol (or a reader default); arrays/maps by their items/values; fixed by size. Named types
are resolved through the names each schema defines. Record names are not compared (Pulsar's
clients name records after their classes, and Pulsar accepts renamed records).
"""

from __future__ import annotations

import json
from typing import Any

from broker import json_bounds

__all__ = ["AVRO_BASED", "SchemaIncompatible", "can_read", "check_compatible", "parse_avro"]

AVRO_BASED = frozenset({"AVRO", "JSON"})

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


class SchemaIncompatible(Exception):
    """The new schema is not compatible under the strategy; the message says why."""


def parse_avro(data: bytes) -> Any:
    """The Avro schema definition carried by an AVRO/JSON schema (raises SchemaIncompatible)."""
    try:
        return json_bounds.loads(data.decode("utf-8")) if data.strip() else "null"
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, JsonTooDeepError
        raise SchemaIncompatible(f"Invalid schema definition: {exc}") from None


def _names(schema: Any, table: dict[str, Any]) -> dict[str, Any]:
    """Every named type (record, enum, fixed) *schema* defines, by name and full name."""
    if isinstance(schema, list):
        for branch in schema:
            _names(branch, table)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed") and "name" in schema:
            name = str(schema["name"])
            table[name] = schema
            table[name.rsplit(".", 1)[-1]] = schema
            if schema.get("namespace"):
                table[f"{schema['namespace']}.{name}"] = schema
        if kind in ("record", "error"):
            for f in schema.get("fields", []):
                _names(f.get("type"), table)
        elif kind == "array":
            _names(schema.get("items"), table)
        elif kind == "map":
            _names(schema.get("values"), table)
        elif isinstance(kind, (dict, list)):
            _names(kind, table)
    return table


_COMPLEX = frozenset({"record", "error", "enum", "fixed", "array", "map"})


def _deref(schema: Any, table: dict[str, Any]) -> Any:
    """*schema* with named references resolved and ``{"type": "int", ...}`` reduced to "int"."""
    for _ in range(64):  # bounded: a chain of references, never a cycle
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            found = table.get(schema, table.get(schema.rsplit(".", 1)[-1]))
            return schema if found is None else found
        if not isinstance(schema, dict):
            return schema
        inner = schema.get("type")
        if isinstance(inner, (dict, list)) or (isinstance(inner, str) and inner not in _COMPLEX):
            schema = inner
            continue
        return schema
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    return str(schema.get("type"))


def can_read(reader: Any, writer: Any) -> str | None:
    """None when *reader* can read data written with *writer*; else the reason."""
    return _read(reader, writer, _names(reader, {}), _names(writer, {}), set())


def _read(reader: Any, writer: Any, rt: dict[str, Any], wt: dict[str, Any],
          seen: set[tuple[int, int]]) -> str | None:
    reader, writer = _deref(reader, rt), _deref(writer, wt)
    pair = (id(reader), id(writer))
    if pair in seen:  # recursive types: assume compatible on the way back in
        return None
    rk, wk = _kind(reader), _kind(writer)
    if wk == "union":
        for branch in writer:
            reason = _read(reader, branch, rt, wt, seen)
            if reason is not None:
                return reason
        return None
    if rk == "union":
        for branch in reader:
            if _read(branch, writer, rt, wt, seen) is None:
                return None
        return f"no branch of reader union {_short(reader)} reads writer {_short(writer)}"
    if rk != wk:
        if wk in _PROMOTIONS and rk in _PROMOTIONS[wk]:
            return None
        return f"reader type {rk} cannot read writer type {wk}"
    if rk in ("record", "error"):
        seen = seen | {pair}
        writer_fields = {f["name"]: f for f in writer.get("fields", [])}
        for field in reader.get("fields", []):
            source = writer_fields.get(field["name"])
            if source is None:
                for alias in field.get("aliases", []):
                    source = writer_fields.get(alias)
                    if source is not None:
                        break
            if source is None:
                if "default" not in field:
                    return f"reader field '{field['name']}' has no default and is not written"
                continue
            reason = _read(field.get("type"), source.get("type"), rt, wt, seen)
            if reason is not None:
                return f"field '{field['name']}': {reason}"
        return None
    if rk == "enum":
        missing = set(writer.get("symbols", [])) - set(reader.get("symbols", []))
        if missing and "default" not in reader:
            return f"enum symbols {sorted(missing)} are unknown to the reader"
        return None
    if rk == "array":
        return _read(reader.get("items"), writer.get("items"), rt, wt, seen)
    if rk == "map":
        return _read(reader.get("values"), writer.get("values"), rt, wt, seen)
    if rk == "fixed" and reader.get("size") != writer.get("size"):
        return f"fixed sizes differ ({reader.get('size')} != {writer.get('size')})"
    return None


def _short(schema: Any) -> str:
    text = json.dumps(schema, separators=(",", ":"))
    return text if len(text) <= 80 else text[:77] + "..."


def check_compatible(existing_type: str, existing: bytes, new_type: str, new: bytes,
                     strategy: str) -> None:
    """Raise SchemaIncompatible unless *new* may follow *existing* under *strategy*."""
    if strategy == "ALWAYS_COMPATIBLE":
        return
    if existing_type != new_type:
        raise SchemaIncompatible(f"Incompatible schema: exists schema type {existing_type}, "
                                 f"new schema type {new_type}")
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise SchemaIncompatible(f"Incompatible schema: strategy {strategy}")
    if existing_type == "PROTOBUF_NATIVE":
        _check_protobuf_native(existing, new)
        return
    if existing_type not in AVRO_BASED:
        return
    old_def, new_def = parse_avro(existing), parse_avro(new)
    checks: list[tuple[str, Any, Any]] = []
    if strategy.startswith(("BACKWARD", "FULL")):
        checks.append(("new schema cannot read data written with the existing one",
                       new_def, old_def))
    if strategy.startswith(("FORWARD", "FULL")):
        checks.append(("existing schema cannot read data written with the new one",
                       old_def, new_def))
    for what, reader, writer in checks:
        reason = can_read(reader, writer)
        if reason is not None:
            raise SchemaIncompatible(f"Incompatible schema ({strategy}): {what}: {reason}")


def _protobuf_root(data: bytes) -> str:
    """The root message type a PROTOBUF_NATIVE schema definition names (its JSON document's
    ``rootMessageTypeName``, beside the base64 ``fileDescriptorSet``)."""
    try:
        doc = json_bounds.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SchemaIncompatible(f"Invalid schema definition: {exc}") from None
    root = doc.get("rootMessageTypeName") if isinstance(doc, dict) else None
    if not isinstance(root, str):
        raise SchemaIncompatible("Invalid schema definition: no rootMessageTypeName")
    return root


def _check_protobuf_native(existing: bytes, new: bytes) -> None:
    """Pulsar's ProtobufNativeSchemaCompatibilityCheck under every checking strategy: the root
    message may not change (its fields are not compared)."""
    if _protobuf_root(existing) != _protobuf_root(new):
        raise SchemaIncompatible("Protobuf root message isn't allow change!")
