"""Topic names, parsed as Pulsar does (``TopicName.get``).

Accepted forms::

    t                                   -> persistent://public/default/t
    tenant/ns/t                         -> persistent://tenant/ns/t
    persistent://tenant/ns/t            (also non-persistent://)
    persistent://tenant/cluster/ns/t    (Pulsar's V1 form, namespace "tenant/cluster/ns")

A name whose local part ends in ``-partition-<n>`` is partition *n* of the partitioned topic
without that suffix. Parsing is pure and cached (names are parsed on every lookup, producer
and subscribe), and errors raise :class:`protocol.errors.InvalidTopicNameError`, which the
connection answers with ERROR InvalidTopicName.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from protocol.errors import InvalidTopicNameError

__all__ = ["PARTITION_SUFFIX", "TopicName", "is_valid_namespace", "split_namespace"]

PARTITION_SUFFIX = "-partition-"
_DOMAINS = ("persistent", "non-persistent")
# Pulsar's NamedEntity rule for tenant, namespace and cluster names.
_NAMED = re.compile(r"^[-=:.\w]+$")
_PARTITION = re.compile(r"^(.*)-partition-(\d+)$")


def _check_named(kind: str, value: str, original: str) -> None:
    if not _NAMED.match(value):
        raise InvalidTopicNameError(f"Invalid {kind} name {value!r} in topic {original!r}")


def is_valid_namespace(namespace: str) -> bool:
    """``tenant/namespace`` with both parts valid names."""
    parts = namespace.split("/")
    return len(parts) == 2 and all(_NAMED.match(p) for p in parts)


def split_namespace(namespace: str) -> tuple[str, str]:
    """``"tenant/ns"`` -> ``("tenant", "ns")``; raises InvalidTopicNameError."""
    if not is_valid_namespace(namespace):
        raise InvalidTopicNameError(f"Invalid namespace name {namespace!r}")
    tenant, ns = namespace.split("/")
    return tenant, ns


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str          # "persistent" or "non-persistent"
    tenant: str
    namespace: str       # "tenant/ns" (V1: "tenant/cluster/ns")
    local_name: str      # includes any -partition-N suffix
    partition_index: int  # -1 unless this is a partition of a partitioned topic

    @staticmethod
    def parse(name: str) -> TopicName:
        return _parse(name)

    @property
    def full(self) -> str:
        return f"{self.domain}://{self.namespace}/{self.local_name}"

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def is_persistent(self) -> bool:
        return self.domain == "persistent"

    @property
    def partitioned_parent(self) -> str:
        """Full name of the partitioned topic this is a partition of (itself otherwise)."""
        if self.partition_index < 0:
            return self.full
        base = self.local_name[: self.local_name.rindex(PARTITION_SUFFIX)]
        return f"{self.domain}://{self.namespace}/{base}"

    def partition(self, index: int) -> TopicName:
        """The name of partition *index* of this (non-partition) topic."""
        return TopicName(self.domain, self.tenant, self.namespace,
                         f"{self.local_name}{PARTITION_SUFFIX}{index}", index)

    def __str__(self) -> str:
        return self.full


@functools.lru_cache(maxsize=65536)
def _parse(name: str) -> TopicName:
    if not isinstance(name, str) or not name:
        raise InvalidTopicNameError(f"Invalid topic name {name!r}")
    original = name
    if "://" in name:
        domain, rest = name.split("://", 1)
        if domain not in _DOMAINS:
            raise InvalidTopicNameError(f"Invalid topic domain {domain!r} in {original!r}")
    else:
        domain, rest = "persistent", name
        if "/" not in rest:
            rest = f"public/default/{rest}"
        elif rest.count("/") < 2:
            raise InvalidTopicNameError(
                f"Invalid short topic name {original!r}: use 'topic' or 'tenant/namespace/topic'")
    parts = rest.split("/")
    if len(parts) < 3:
        raise InvalidTopicNameError(f"Invalid topic name {original!r}")
    if len(parts) == 3:
        tenant, ns, local = parts
        namespace = f"{tenant}/{ns}"
        _check_named("tenant", tenant, original)
        _check_named("namespace", ns, original)
    else:
        tenant, cluster, ns = parts[0], parts[1], parts[2]
        local = "/".join(parts[3:])
        for kind, value in (("tenant", tenant), ("cluster", cluster), ("namespace", ns)):
            _check_named(kind, value, original)
        namespace = f"{tenant}/{cluster}/{ns}"
    if not local or local.strip() != local:
        raise InvalidTopicNameError(f"Invalid topic name {original!r}: empty local name")
    m = _PARTITION.match(local)
    index = int(m.group(2)) if m and m.group(1) else -1
    return TopicName(domain, tenant, namespace, local, index)
