"""Topic names, parsed as Pulsar does (``TopicName.get``).

Accepted forms::

    t                                   -> persistent://public/default/t
    tenant/ns/t                         -> persistent://tenant/ns/t
    persistent://tenant/ns/t            (also non-persistent://)
    persistent://tenant/cluster/ns/t    (Pulsar's V1 form, namespace "tenant/cluster/ns")

A name whose local part ends in ``-partition-<n>`` is partition *n* of the partitioned topic
without that suffix. Errors raise :class:`protocol.errors.InvalidTopicNameError`, which the
connection answers with ERROR InvalidTopicName (the connection stays) and the admin API with
412.

Rules:

1. Tenant, namespace and cluster names follow Pulsar's ``NamedEntity``: a full match of
   ``[-=:.\\w]+`` where ``\\w`` is ASCII only, as in Java (no trailing newline, no look-alike
   letters of other scripts).
2. The local name is not empty, has no surrounding spaces and no control character (C0,
   DEL, C1): such a name would be stored, listed and logged as given.
3. A name longer than :data:`MAX_TOPIC_NAME_LENGTH` characters is refused before anything
   else looks at it (Pulsar sets no limit; a peer can send names up to the frame size).

Parsing is pure, and cached for names of at most :data:`CACHED_NAME_LENGTH` characters
(names are parsed on every lookup, producer and subscribe): only names that parsed are kept,
and the cache's size is bounded in entries and so in bytes (about 1 KiB an entry at most).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Final

from protocol.errors import InvalidTopicNameError

__all__ = [
    "CACHED_NAME_LENGTH", "MAX_TOPIC_NAME_LENGTH", "NAME_RULE", "PARTITION_SUFFIX", "TopicName",
    "is_valid_name", "is_valid_namespace", "parse_cache_info", "split_namespace",
]

PARTITION_SUFFIX = "-partition-"
#: The longest topic name accepted, in characters (the name as given, domain included).
MAX_TOPIC_NAME_LENGTH: Final = 4096
#: Names up to this many characters are cached once parsed; longer ones are parsed each time.
CACHED_NAME_LENGTH: Final = 256
#: How many parsed names the cache keeps (at most ~1 KiB each: ~16 MiB in all).
CACHED_NAMES: Final = 16384
_DOMAINS = ("persistent", "non-persistent")
# Pulsar's NamedEntity rule for tenant, namespace and cluster names (Java's \w is ASCII).
_NAMED = re.compile(r"[-=:.\w]+", re.ASCII)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_PARTITION = re.compile(r"^(.*)-partition-(\d+)$")


NAME_RULE = "only ASCII letters, digits and -=:._ are allowed"


def _check_named(kind: str, value: str, original: str) -> None:
    if not _NAMED.fullmatch(value):
        raise InvalidTopicNameError(
            f"Invalid {kind} name {value!a} in topic {original!a}: {NAME_RULE}")


def is_valid_name(name: str) -> bool:
    """A valid tenant, namespace or cluster name (Pulsar's NamedEntity rule)."""
    return _NAMED.fullmatch(name) is not None


def is_valid_namespace(namespace: str) -> bool:
    """``tenant/namespace`` with both parts valid names."""
    parts = namespace.split("/")
    return len(parts) == 2 and all(_NAMED.fullmatch(p) for p in parts)


def split_namespace(namespace: str) -> tuple[str, str]:
    """``"tenant/ns"`` -> ``("tenant", "ns")``; raises InvalidTopicNameError."""
    if not is_valid_namespace(namespace):
        raise InvalidTopicNameError(
            f"Namespace name is not valid: {namespace!a} ({NAME_RULE} in the tenant "
            "and the namespace)")
    tenant, ns = namespace.split("/")
    return tenant, ns


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str          # "persistent" or "non-persistent"
    tenant: str
    namespace: str       # "tenant/ns" (V1: "tenant/cluster/ns")
    local_name: str      # includes any -partition-N suffix
    partition_index: int  # -1 unless this is a partition of a partitioned topic
    #: :attr:`full`, formatted once (policy lookups and metrics ask for it per topic per pass).
    _full: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_full", f"{self.domain}://{self.namespace}/{self.local_name}")

    @staticmethod
    def parse(name: str) -> TopicName:
        if not isinstance(name, str):
            raise InvalidTopicNameError(f"Invalid topic name {name!r}")
        if len(name) > MAX_TOPIC_NAME_LENGTH:
            raise InvalidTopicNameError(
                f"Invalid topic name: {len(name)} characters, more than the "
                f"{MAX_TOPIC_NAME_LENGTH} allowed (it begins {name[:64]!r})")
        if len(name) <= CACHED_NAME_LENGTH:
            return _parse_cached(name)
        return _parse(name)

    @property
    def full(self) -> str:
        return self._full

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


def _parse(name: str) -> TopicName:
    if not name:
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
    control = _CONTROL.search(local)
    if control is not None:
        raise InvalidTopicNameError(
            f"Invalid topic name {original!r}: the local name contains the control character "
            f"{control.group()!r}")
    m = _PARTITION.match(local)
    index = int(m.group(2)) if m and m.group(1) else -1
    return TopicName(domain, tenant, namespace, local, index)


# Exceptions are not cached: only names that parsed are kept.
_parse_cached = functools.lru_cache(maxsize=CACHED_NAMES)(_parse)


def parse_cache_info() -> functools._CacheInfo:
    """Hits, misses and size of the cache of parsed names (for tests and diagnostics)."""
    return _parse_cached.cache_info()
