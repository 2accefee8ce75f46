"""What the differential tests compare: the two peers, REST answers reduced to their shape,
message ids reduced to their order.

Theory of operation
-------------------
A :class:`Peer` is one broker (Horae or Pulsar standalone) by its service and web URLs. Each
scenario runs once per peer in names of its own (:func:`unique_names`: tenant, namespace, topic
prefixes that no other scenario uses), then the two records are compared:

- REST: the status code, and the body's *shape* (:func:`shape`): for an object its keys and
  the shape of each value, for a list the shapes its items have, for a scalar its JSON type.
  Values (timestamps, counters, ledger ids, broker URLs) are volatile and not compared.
- wire: the server error code (``ServerError`` name) or the command type answered.
- message ids: :func:`positions` maps each delivered id to its index among the ids the
  scenario's sends were given, so the two brokers' deliveries compare by order and count whatever
  ledger and entry numbers each gives.
"""

from __future__ import annotations

import itertools
import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

HTTP_TIMEOUT_S = 30.0
_run = itertools.count()
_PROCESS = secrets.token_hex(2)
"""Tells this test process's names from an earlier run's on a Pulsar that keeps running."""


@dataclass(frozen=True)
class Peer:
    name: str
    service_url: str
    web_url: str

    def http(self, method: str, path: str, body: Any = None, *,
             raw: bytes | None = None, content_type: str = "application/json") -> Answer:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.web_url + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:  # loopback only
                status, payload = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, exc.read()
        return Answer(status, _decode(payload))


@dataclass(frozen=True)
class Peers:
    horae: Peer
    pulsar: Peer

    def both(self) -> tuple[Peer, Peer]:
        return self.horae, self.pulsar


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any

    @property
    def shape(self) -> Any:
        return shape(self.body)


class Text(str):
    """A body that is not JSON (plain text or HTML): compared as the type ``text``."""


def _decode(payload: bytes) -> Any:
    if not payload:
        return None
    try:
        return json.loads(payload)
    except ValueError:
        return Text(payload.decode(errors="replace"))


def shape(value: Any) -> Any:
    """The JSON shape of *value*: object -> {key: shape}, list -> sorted distinct item shapes,
    scalar -> its JSON type name (``int`` and ``float`` both ``number``)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        distinct: list[Any] = []
        for item in value:
            s = shape(item)
            if s not in distinct:
                distinct.append(s)
        return sorted(distinct, key=repr)
    if isinstance(value, Text):
        return "text"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "null"


def shape_diff(horae: Any, pulsar: Any, path: str = "$") -> list[str]:
    """Where two shapes differ, one line a place (``$.a.b: horae number, pulsar string``)."""
    if isinstance(horae, dict) and isinstance(pulsar, dict):
        out = [f"{path}.{k}: only in pulsar" for k in sorted(pulsar.keys() - horae.keys())]
        out += [f"{path}.{k}: only in horae" for k in sorted(horae.keys() - pulsar.keys())]
        for key in sorted(horae.keys() & pulsar.keys()):
            out += shape_diff(horae[key], pulsar[key], f"{path}.{key}")
        return out
    if isinstance(horae, list) and isinstance(pulsar, list):
        if not horae or not pulsar or horae == pulsar:
            return []  # an empty list has no item shape to disagree with
        if len(horae) == 1 and len(pulsar) == 1:
            return shape_diff(horae[0], pulsar[0], f"{path}[]")
        return [f"{path}[]: horae {horae!r}, pulsar {pulsar!r}"]
    if horae != pulsar:
        return [f"{path}: horae {_name(horae)}, pulsar {_name(pulsar)}"]
    return []


def _name(s: Any) -> str:
    if isinstance(s, dict):
        return "object"
    if isinstance(s, list):
        return "list"
    return str(s)


def unique_names(scenario: str) -> dict[str, str]:
    """Names no other scenario run uses: ``t`` tenant, ``ns`` namespace, ``topic`` topic."""
    n = next(_run)
    slug = "".join(ch if ch.isalnum() else "-" for ch in scenario.lower())[:40].strip("-")
    return {"t": f"o{_PROCESS}{n}-{slug}", "ns": f"ns{n}", "topic": f"tp{_PROCESS}{n}-{slug}"}


def positions(received: Iterable[Any], published: list[Any]) -> list[int | str]:
    """Each received message id as its index among the published ids (``"?"`` when it is none
    of them): the order and count of a delivery, whatever ledger and entry numbers a broker
    gives."""
    keys = [_id_key(m) for m in published]
    return [keys.index(_id_key(m)) if _id_key(m) in keys else "?" for m in received]


def _id_key(message_id: Any) -> tuple[int, int, int, int]:
    return (message_id.ledger_id(), message_id.entry_id(), message_id.batch_index(),
            message_id.partition())
