"""One REST call for tests that talk to a broker's admin API: (status, decoded JSON or None).

Errors are answers here, not exceptions: a 4xx/5xx returns its status and its decoded
``{"reason": ...}`` body, so a test asserts on both. :func:`unsaved_ack_age` reads the
broker's ``/metrics`` for the oldest acknowledgement not yet in a cursor file (0: every one
saved), what a test waits for before a kill -9 that must not lose acknowledgements;
:func:`subscription_metric` reads one subscription's sample of a metric.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def http_json(base: str, method: str, path: str, raw: bytes | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(base + path, data=raw, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, payload = exc.code, exc.read()
    return status, json.loads(payload) if payload else None


def unsaved_ack_age(base: str) -> float:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    ages = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("horae_storage_oldest_unsaved_ack_age_seconds")]
    assert ages, "no unsaved-ack metric"
    return max(ages)


def subscription_metric(base: str, name: str, topic: str, sub: str) -> float | None:
    """The sample *name* of subscription *sub* of *topic* in ``/metrics`` (None: absent)."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("topic") == topic \
                    and sample.labels.get("subscription") == sub:
                return float(sample.value)
    return None
