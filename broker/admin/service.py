"""The admin API's one dependency: named, typed operations over the broker.

Theory of operation: :func:`broker.admin.app.create_app` builds one :class:`AdminService` over
the :class:`broker.topics.service.BrokerService` and REST handlers reach the broker only
through it (:func:`broker.admin.responses.admin_of`). The broker service is private to each
part; a handler calls a named operation, never an attribute of the service. The parts, one
per concept:

- :class:`AdminTenants`: tenants, namespaces, their grants and the cluster record. Existence
  is checked here first, so an answer carries Pulsar's exact 404/409 reason whatever the
  service would raise.
- :class:`AdminTopics`: persistent and non-persistent topics, existence, partition fan-out
  (an operation Pulsar fans out over a partitioned topic applies to every partition),
  create/delete/unload and subscriptions. Loaded topics and subscriptions are handed back
  typed (:class:`broker.topics.topic.Topic`) for the per-topic operations they own.
- :class:`AdminEntries`: a topic's stored entries as the admin API reads them (one entry,
  the n-th unacknowledged one of a subscription, every position, what follows a position), so
  no handler reaches a topic's ledger or a subscription's cursor itself.
- :class:`AdminPolicies`: delayed-delivery policies (a write reaches the loaded topics) and
  the policy values a handler resolves; the :class:`broker.topics.policies.PolicyStore`
  itself for the field-by-field policy routes, and the schema registry, are handed out as
  explicit dependencies (:attr:`AdminService.policy_store`, :attr:`AdminService.schemas`).
- :class:`AdminBroker`: this broker: cluster name, URLs, readiness, broker id, health check.
- :class:`AdminTransactions`: the transaction components' figures (``transactionCoordinatorEnabled``),
  read-only, for Pulsar's v3 transactions routes.

Topic names travel as :class:`broker.topics.names.TopicName` (parsed once, from the REST path,
by :func:`topic_name`); they become strings only at the BrokerService's door. Everything here
runs on the broker loop (the web app shares it), so no locks or thread hops.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from broker import __version__
from broker.admin import errors as E
from broker.admin.healthcheck import LoopbackCredentials, run_health_check
from broker.delayed.policy import DelayPolicy, resolve_policy
from broker.delayed.schedule_view import ScheduledSources
from broker.delayed.unread import refresh
from broker.security.authorization import AuthPolicies
from broker.subscriptions.dispatchers.cursors import entry_exists
from broker.subscriptions.resets import find_by_index, find_by_publish_time
from broker.subscriptions.subscription import Subscription
from broker.topics import ledger_info
from broker.topics.heartbeat import TopicVersion
from broker.topics.names import TopicName
from broker.topics.namespace_service import NamespaceService
from broker.topics.nonpersistent import NonPersistentTopic
from broker.topics.policies import PolicyStore
from broker.topics.schemas import SchemaRegistry
from broker.topics.service import BrokerService, check_partition_limit
from broker.topics.topic import Topic
from broker.transactions.ids import TxnId
from broker.transactions.service import TransactionService
from broker.transactions.stats import (
    CoordinatorStats,
    PendingAckStats,
    TopicBufferStats,
    TransactionStats,
)
from protocol.errors import NotAllowedError, TopicNotFoundError
from storage.positions import Position

__all__ = [
    "ADMIN_KEY", "NON_PERSISTENT", "PERSISTENT", "AdminBroker", "AdminEntries", "AdminPolicies",
    "AdminService", "AdminTenants", "AdminTopics", "AdminTransactions", "topic_name",
    "txn_id_of",
]

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"


def topic_name(tenant: str, namespace: str, local: str, domain: str = PERSISTENT) -> TopicName:
    """The topic a REST path names, checked as Pulsar's validateTopicName does before anything
    is looked up: InvalidTopicNameError (412) for a name :class:`TopicName` refuses."""
    return TopicName.parse(f"{domain}://{tenant}/{namespace}/{local}")


class AdminTenants:
    """Tenants, namespaces, grants and the cluster record (see the module docstring)."""

    def __init__(self, service: BrokerService, namespaces: NamespaceService) -> None:
        self._service = service
        self._namespaces = namespaces

    async def tenants(self) -> list[str]:
        return sorted(await self._service.tenancy.list_tenants())

    async def tenant_exists(self, tenant: str) -> bool:
        return tenant in await self._service.tenancy.list_tenants()

    async def require_tenant(self, tenant: str) -> None:
        if not await self.tenant_exists(tenant):
            raise E.not_found(E.TENANT_NOT_FOUND)

    async def tenant_info(self, tenant: str) -> dict[str, Any] | None:
        return await self._service.tenancy.get_tenant(tenant)

    async def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        await self._service.tenancy.create_tenant(tenant, info)

    async def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        await self._service.tenancy.update_tenant(tenant, info)

    async def delete_tenant(self, tenant: str) -> None:
        await self._namespaces.delete_tenant(tenant)

    async def namespaces(self, tenant: str) -> list[str]:
        await self.require_tenant(tenant)
        return await self._service.tenancy.list_namespaces(tenant)

    async def has_namespaces(self, tenant: str) -> bool:
        return bool(await self._service.tenancy.list_namespaces(tenant))

    async def namespace_exists(self, tenant: str, namespace: str) -> bool:
        if not await self.tenant_exists(tenant):
            return False
        return self._service.tenancy.namespace_exists(f"{tenant}/{namespace}")

    async def require_namespace(self, tenant: str, namespace: str) -> None:
        if not await self.namespace_exists(tenant, namespace):
            raise E.not_found(E.NAMESPACE_NOT_FOUND)

    async def create_namespace(self, namespace: str, policies: dict[str, Any]) -> None:
        """*namespace* is ``tenant/ns``; *policies* Pulsar's ``Policies`` document."""
        await self._service.tenancy.create_namespace(namespace, policies)

    async def delete_namespace(self, namespace: str) -> None:
        await self._namespaces.delete_namespace(namespace)

    def auth_policies(self, namespace: str) -> AuthPolicies:
        """The namespace's grants (empty when none are stored)."""
        current = self._service.tenancy.namespace_auth(namespace)
        return current.auth_policies if current is not None else AuthPolicies()

    async def set_auth_policies(self, namespace: str, auth: AuthPolicies) -> None:
        await self._service.tenancy.set_auth_policies(namespace, auth)

    def subscription_auth_mode(self, namespace: str) -> str:
        """The namespace's ``subscription_auth_mode`` (``None`` unless set)."""
        current = self._service.tenancy.namespace_auth(namespace)
        return current.subscription_auth_mode.value if current is not None else "None"

    async def set_subscription_auth_mode(self, namespace: str, mode: str) -> None:
        await self._service.tenancy.set_subscription_auth_mode(namespace, mode)

    async def cluster_record(self, name: str) -> dict[str, Any]:
        """The stored cluster record over this broker's own URLs."""
        return await self._namespaces.get_cluster(name)

    async def set_cluster_record(self, name: str, data: dict[str, Any]) -> None:
        await self._service.tenancy.set_cluster(name, data)


class AdminTopics:
    """Topics of both domains: existence, partitions, fan-out (see the module docstring)."""

    def __init__(self, service: BrokerService, tenants: AdminTenants) -> None:
        self._service = service
        self._tenants = tenants

    # --- listing -------------------------------------------------------------------------
    async def names(self, tenant: str, namespace: str) -> list[str]:
        """Every topic of the namespace in both domains, a partitioned topic as its
        partitions (404 for an unknown namespace)."""
        await self._tenants.require_namespace(tenant, namespace)
        key = f"{tenant}/{namespace}"
        names = set(await self._service.list_topics(key))
        for parent in await self._service.list_partitioned_topics(key):
            names.discard(parent)
            tn = TopicName.parse(parent)
            names.update(tn.partition(i).full for i in range(await self.partition_count(tn)))
        return sorted(names)

    async def list_topics(self, tenant: str, namespace: str,
                          domain: str = PERSISTENT) -> list[str]:
        """Non-partitioned topics and partitions of one domain, as Pulsar's
        ``GET /admin/v2/{domain}/{t}/{ns}``."""
        return [n for n in await self.names(tenant, namespace) if n.startswith(f"{domain}://")]

    async def list_partitioned(self, tenant: str, namespace: str,
                               domain: str | None = None) -> list[str]:
        """Partitioned topics of the namespace (of *domain* only, when given)."""
        await self._tenants.require_namespace(tenant, namespace)
        names = sorted(await self._service.list_partitioned_topics(f"{tenant}/{namespace}"))
        return names if domain is None else [n for n in names if n.startswith(f"{domain}://")]

    async def stored_names(self, tenant: str, namespace: str) -> list[str]:
        """The namespace's non-partitioned topics as stored (no partitions expanded)."""
        return await self._service.list_topics(f"{tenant}/{namespace}")

    # --- existence and fan-out -----------------------------------------------------------
    async def lookup_partition_count(self, tn: TopicName) -> int:
        """Partitions as a client's lookup sees them: a missing topic is auto-created first
        (``allowAutoTopicCreationType``), as its binary lookup would create it."""
        return await self._service.lookup_partition_count(tn.full)

    async def partition_count(self, tn: TopicName) -> int:
        """Partitions of *tn* as a partitioned topic; 0 for a partition or a plain topic."""
        if tn.is_partition:
            return 0
        return await self._service.get_partition_count(tn.full)

    async def exists(self, tn: TopicName) -> bool:
        """A non-partitioned topic (or a partition) exists: loaded, or known to the store."""
        if tn.full in self._service.topics:
            return True
        tenant, _, namespace = tn.namespace.partition("/")
        if not await self._tenants.namespace_exists(tenant, namespace):
            return False
        if tn.full in await self._service.list_topics(tn.namespace):
            return True
        return tn.is_partition and tn.partition_index < await self.partition_count(
            TopicName.parse(tn.partitioned_parent))

    def loaded(self, tn: TopicName) -> Topic | None:
        """The topic when it is loaded now (nothing is loaded or created)."""
        return self._service.topics.get(tn.full)

    async def get(self, tn: TopicName, *, create: bool = False) -> Topic:
        """The loaded Topic, or 404 "Topic not found"."""
        topic = self._service.topics.get(tn.full)
        if topic is not None:
            return topic
        if tn.is_partition and tn.partition_index < await self.partition_count(
                TopicName.parse(tn.partitioned_parent)):
            create = True   # partitions of a partitioned topic exist as soon as it does
        try:
            return await self._service.get_topic(tn.full, create=create)
        except TopicNotFoundError:
            raise E.not_found(E.TOPIC_NOT_FOUND) from None

    async def targets(self, tn: TopicName) -> list[Topic]:
        """The topics an operation on *tn* applies to: its partitions when partitioned
        (Pulsar fans out), else the topic itself (404 when absent)."""
        n = await self.partition_count(tn)
        if n > 0:
            return [await self.get(tn.partition(i), create=True) for i in range(n)]
        if not await self.exists(tn):
            raise E.not_found(E.TOPIC_NOT_FOUND)
        return [await self.get(tn)]

    async def require_policy_topic(self, tn: TopicName) -> None:
        """Pulsar's check before a topic policy is read or written: 412 for a partition (its
        partitioned topic holds the policy), 404 naming the topic when it does not exist."""
        if tn.is_partition:
            raise E.precondition_failed("Not allowed to set/get topic policy for a partition")
        if await self.partition_count(tn) == 0 and not await self.exists(tn):
            raise E.not_found(f"Topic {tn.full} not found")

    async def require_topic_or_partitioned(self, tn: TopicName) -> int:
        """404 unless *tn* is a topic or a partitioned topic; returns its partition count."""
        n = await self.partition_count(tn)
        if n == 0 and not await self.exists(tn):
            raise E.not_found(E.TOPIC_NOT_FOUND)
        return n

    @staticmethod
    def subscription(topic: Topic, name: str) -> Subscription:
        sub = topic.subscriptions.get(name)
        if sub is None:
            raise E.not_found(E.SUBSCRIPTION_NOT_FOUND)
        return sub

    async def subscriptions_of(self, tn: TopicName, name: str) -> list[tuple[Topic, Subscription]]:
        """(topic, subscription) pairs for *name* on *tn* or each of its partitions."""
        return [(topic, self.subscription(topic, name)) for topic in await self.targets(tn)]

    # --- lifecycle -----------------------------------------------------------------------
    async def create(self, tn: TopicName) -> None:
        await self._service.get_topic(tn.full, create=True)

    def check_partition_limit(self, partitions: int) -> None:
        """406 beyond ``maxNumPartitionsPerPartitionedTopic``, as Pulsar answers."""
        try:
            check_partition_limit(self._service.config, partitions)
        except NotAllowedError as exc:
            raise E.RestError(406, exc.message) from None

    async def create_partitioned(self, tn: TopicName, partitions: int) -> None:
        await self._service.create_partitioned_topic(tn.full, partitions)

    async def grow_partitioned(self, tn: TopicName, partitions: int) -> None:
        await self._service.update_partitioned_topic(tn.full, partitions)

    async def delete(self, tn: TopicName, *, force: bool) -> None:
        """Delete a topic of either domain, or a partitioned topic with all its partitions."""
        await self._service.delete_topic(tn.full, force=force)

    async def unload(self, topic: Topic) -> None:
        await self._service.unload_topic(topic.full)

    def loaded_of_namespace(self, tenant: str, namespace: str) -> list[Topic]:
        """The namespace's persistent topics loaded now (partitions included): what Pulsar's
        namespace-wide operations (unload, clear-backlog, unsubscribe) reach."""
        key = f"{tenant}/{namespace}"
        return [t for t in list(self._service.topics.values()) if t.name.namespace == key]

    # --- non-persistent topics -----------------------------------------------------------
    def nonpersistent(self, tn: TopicName) -> NonPersistentTopic | None:
        """The in-memory topic when it exists (nothing is created)."""
        return self._service.nonpersistent.get(tn)

    def create_nonpersistent(self, tn: TopicName) -> None:
        self._service.get_nonpersistent_topic(tn, create=True)

    def close_nonpersistent(self, tn: TopicName) -> None:
        """Close the in-memory topic (its clients reconnect to a fresh one)."""
        self._service.nonpersistent.delete(tn.full)


class AdminEntries:
    """A loaded topic's stored entries, read for peek, examine, reset and cancel routes."""

    @staticmethod
    async def read(topic: Topic, pos: Position) -> bytes | None:
        """The stored entry at *pos* (metadata and payload), None when the topic has none."""
        entry = await topic.ledger.read_entry(pos)
        return None if entry is None else entry.data

    @staticmethod
    def exists(topic: Topic, pos: Position) -> bool:
        """*pos* is an entry the topic holds (or held)."""
        return entry_exists(topic.ledger, pos)

    @staticmethod
    def after(topic: Topic, pos: Position) -> Position:
        """The entry after *pos* (the next ledger's first when *pos* ends its ledger; the next
        entry id of an unknown ledger)."""
        return topic.ledger.next_position(pos)

    @staticmethod
    def positions(topic: Topic) -> list[Position]:
        """Every entry position of the topic's ledgers, oldest first."""
        return [Position(info.ledger_id, i)
                for info in topic.ledger.ledgers for i in range(info.entries)]

    @staticmethod
    def ledger_ids(topic: Topic) -> set[int]:
        return {info.ledger_id for info in topic.ledger.ledgers}

    @staticmethod
    async def unread_scheduled(sub: Subscription) -> tuple[ScheduledSources, int]:
        """What the subscription's tracker holds and, scanned from its backlog, the scheduled
        messages its dispatcher has not read yet (:mod:`broker.delayed.unread`), for the
        scheduled-message listing and histogram; and how many those unread ones are."""
        scan = sub.delayed.unread_scan(sub.cursor.read_position)
        last = sub.ledger.last_confirmed
        txn = sub.transaction_view()
        if txn is not None:
            last = txn.read_limit(last)   # an open transaction's entries are not scheduled yet
        await refresh(scan, sub.cursor, sub.ledger, last, schedule=sub.delayed.replacements)
        src = sub.delayed.scheduled_sources()
        return (replace(src, indexes=(*src.indexes, scan.held), not_read=scan.not_read),
                len(scan.held))

    @staticmethod
    def nth_unacked(topic: Topic, sub: Subscription, n: int) -> Position | None:
        """The *n*-th (1-based) entry after the subscription's mark-delete position that it
        has not acknowledged, None past the last confirmed entry."""
        ledger = topic.ledger
        tail = ledger.last_confirmed
        pos = sub.cursor.mark_delete_position
        while tail is not None and pos < tail:
            pos = ledger.next_position(pos)
            if not sub.cursor.is_deleted(pos):
                n -= 1
                if n == 0:
                    return pos
        return None


    # --- inspection and maintenance (Pulsar's PersistentTopicsBase) -----------------------
    @staticmethod
    async def first_published_at(topic: Topic, timestamp_ms: int) -> Position:
        """The first entry published at or after *timestamp_ms*; the position after the last
        entry when every one is older or there is none (Pulsar's message id by timestamp:
        its managed ledger's found position, which is the next one to be written then)."""
        return await find_by_publish_time(topic.ledger, timestamp_ms)

    @staticmethod
    async def entry_of_index(topic: Topic, index: int) -> Position:
        """The entry holding broker entry metadata message *index*; ``(-1, -1)`` once that
        message is no longer stored (Pulsar's message id by index)."""
        return await find_by_index(topic.ledger, index)

    @staticmethod
    def first_ledger_created_ms(topic: Topic) -> int | None:
        """When the oldest ledger the topic still has was created (None: no ledger)."""
        created = [info.created_ms for info in topic.ledger.ledgers if info.created_ms > 0]
        return min(created) if created else None

    @staticmethod
    def last_position(topic: Topic) -> Position:
        """The last stored entry; ``(current ledger, -1)`` when the topic holds none, as
        Pulsar's last message id of an empty topic."""
        return ledger_info.last_position(topic)

    @staticmethod
    def managed_ledger_info(topic: Topic) -> dict[str, Any]:
        """Pulsar's ManagedLedgerInfo (``internal-info``): ledgers, cursors, termination."""
        return ledger_info.managed_ledger_info(topic)

    @staticmethod
    def backlog_size_from(topic: Topic, pos: Position) -> int:
        """Bytes stored from *pos* (inclusive) to the end, estimated as Pulsar's
        ``getEstimatedBacklogSize``: whole ledgers after *pos*'s, and *pos*'s ledger in
        proportion to the entries from *pos* on."""
        size = 0
        for info in topic.ledger.ledgers:
            if info.ledger_id > pos.ledger_id:
                size += info.size_bytes
            elif info.ledger_id == pos.ledger_id and info.entries:
                remaining = max(0, info.entries - max(pos.entry_id, 0))
                size += info.size_bytes * remaining // info.entries
        return size

    @staticmethod
    async def analyze_backlog(topic: Topic, sub: Subscription, start: Position | None,
                              max_entries: int) -> dict[str, Any]:
        """Pulsar's AnalyzeSubscriptionBacklogResult (:func:`broker.topics.ledger_info.
        analyze_backlog`)."""
        return await ledger_info.analyze_backlog(topic, sub, start, max_entries)

    @staticmethod
    async def trim(topic: Topic, *, keep_retained: bool = True) -> None:
        """Delete the sealed ledgers every subscription has consumed now, keeping what
        retention keeps unless *keep_retained* is False (the current ledger stays)."""
        await topic.trimmer.trim_now(keep_retained=keep_retained)

    @staticmethod
    async def truncate(topic: Topic) -> None:
        """Pulsar's truncate: every subscription's backlog is cleared, then every sealed
        ledger is deleted, retention notwithstanding."""
        for sub in list(topic.subscriptions.values()):
            await sub.resets.skip_all()
        await topic.trimmer.trim_now(keep_retained=False)


class AdminPolicies:
    """Delayed-delivery policies and the resolved values handlers answer with."""

    def __init__(self, service: BrokerService, namespaces: NamespaceService) -> None:
        self._service = service
        self._namespaces = namespaces

    def delayed_body(self, target: str | TopicName) -> dict[str, Any] | None:
        """The delayed-delivery body stored on a namespace (``tenant/ns``) or a topic."""
        if isinstance(target, TopicName):
            return self._service.policies.delayed_body("topic", target.full)
        return self._service.policies.delayed_body("namespace", target)

    async def set_delayed(self, target: str | TopicName, body: dict[str, Any]) -> None:
        """Store a validated body; the loaded topics it covers apply it to the next message."""
        if isinstance(target, TopicName):
            await self._namespaces.set_topic_policy(target.full, body)
        else:
            await self._namespaces.set_namespace_policy(target, body)

    async def remove_delayed(self, target: str | TopicName) -> None:
        if isinstance(target, TopicName):
            await self._namespaces.remove_topic_policy(target.full)
        else:
            await self._namespaces.remove_namespace_policy(target)

    def applied_delay(self, target: str | TopicName) -> DelayPolicy:
        """The policy in force, resolved as the broker does (a partition without a body of its
        own runs under its partitioned topic's; a namespace over the broker's defaults)."""
        if isinstance(target, TopicName):
            return self._service.policies.delay_policy(target)
        return self.resolve_namespace_delay(self.delayed_body(target))

    def resolve_namespace_delay(self, body: dict[str, Any] | None) -> DelayPolicy:
        """A namespace body over the broker's defaults."""
        return resolve_policy(self._service.config, body, None)

    def schema_compatibility(self, tn: TopicName) -> str:
        """The schema compatibility strategy in force on *tn* (Pulsar's name)."""
        return self._service.policies.schema_compatibility(tn)


class AdminBroker:
    """This broker as the admin API shows it: cluster, URLs, readiness, health."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    @property
    def cluster_name(self) -> str:
        return self._service.config.cluster_name

    @property
    def closing(self) -> bool:
        return self._service.closing

    def broker_id(self) -> str:
        """Pulsar's broker id: ``<advertisedAddress>:<webServicePort>``."""
        return f"{self._service.config.advertised_address}:{self._service.addresses.web_port}"

    def web_url(self, local_host: str | None = None) -> str:
        return self._service.addresses.urls(local_host).web_url

    def lookup_answer(self, listener: str | None, local_host: str | None) -> dict[str, str]:
        """Pulsar's HTTP lookup body: the URLs a binary LOOKUP answers (the advertised
        listener named by *listener*, the host the client reached us on)."""
        urls = self._service.addresses.urls(local_host)
        broker_url = self._service.addresses.lookup_url(listener, local_host)
        return {
            "brokerUrl": broker_url,
            "brokerUrlTls": urls.broker_url_tls or "",
            "httpUrl": urls.web_url,
            "httpUrlTls": urls.web_url_tls or "",
            "nativeUrl": broker_url,
        }

    # --- configuration (Pulsar's BrokersBase) ---------------------------------------------
    def dynamic_names(self) -> list[str]:
        """The settings that may change at run time (:mod:`broker.dynamic_config`)."""
        return self._service.dynamic_config.names()

    def dynamic_overrides(self) -> dict[str, str]:
        """The stored dynamic overrides, as given."""
        return self._service.dynamic_config.overrides()

    async def update_dynamic(self, key: str, value: str) -> None:
        """Store and apply an override (DynamicConfigError: Pulsar's 412 reason)."""
        await self._service.dynamic_config.update(key, value)

    async def delete_dynamic(self, key: str) -> None:
        await self._service.dynamic_config.delete(key)

    def runtime_config(self) -> dict[str, str]:
        """Every setting's value in force, as text (secrets masked)."""
        return self._service.dynamic_config.runtime()

    def internal_config(self) -> dict[str, str]:
        """Pulsar's InternalConfigurationData: where metadata and ledgers live. One node keeps
        both in its data directory; there is no ZooKeeper or BookKeeper. As Pulsar 4.0, the
        deprecated ``zookeeperServers``/``configurationStoreServers`` repeat the metadata
        store's URL, and settings it does not have (a separate BookKeeper metadata service, a
        state storage service) are left out, not written as null."""
        data = self._service.config.data_path
        url = f"sqlite:{data / 'metadata.db'}"
        return {"zookeeperServers": url, "configurationStoreServers": url,
                "metadataStoreUrl": url, "configurationMetadataStoreUrl": url,
                "ledgersRootPath": str(data)}

    @staticmethod
    def version() -> str:
        return __version__

    async def health_check(self, version: TopicVersion, credentials: LoopbackCredentials) -> None:
        """Raise HealthCheckError unless storage and the heartbeat round trip are healthy."""
        await run_health_check(self._service, version, credentials,
                               self._service.config.health_check_timeout_ms / 1000)


def txn_id_of(stats: TransactionStats) -> TxnId:
    """The id of a transaction's figures (``"(most,least)"``, as :class:`TxnId` prints)."""
    most, least = stats.txn_id.strip("()").split(",")
    return TxnId(int(most), int(least))


class AdminTransactions:
    """The transaction coordinator, topic buffers and pending acks, as figures; and the one
    write an operator may order, aborting a transaction."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service

    @property
    def enabled(self) -> bool:
        """``transactionCoordinatorEnabled``: the other methods need it."""
        return self._service.transactions is not None

    def _txns(self) -> TransactionService:
        txns = self._service.transactions
        if txns is None:
            raise RuntimeError("transactions are not enabled")
        return txns

    def coordinator_ids(self) -> list[int]:
        return [self._txns().coordinator_stats().coordinator_id] if self.enabled else []

    def coordinator(self) -> CoordinatorStats:
        return self._txns().coordinator_stats()

    def low_water_mark(self) -> int:
        """The highest sequence below which every transaction has ended (Pulsar's
        lowWaterMark): one below the oldest ongoing one, else the last handed out."""
        ongoing = self._txns().ongoing_transactions()
        if not ongoing:
            return self.coordinator().least_sig_bits
        return min(txn_id_of(t).least for t in ongoing) - 1

    def transaction(self, txn: TxnId) -> TransactionStats | None:
        """An ongoing transaction, or an ended one the coordinator still remembers."""
        return self._txns().transaction(txn)

    def ongoing(self) -> list[TransactionStats]:
        return self._txns().ongoing_transactions()

    async def abort(self, txn: TxnId) -> None:
        """End *txn* as aborted, as its client's END_TXN ABORT does (both phases)."""
        await self._txns().coordinator.end(txn, commit=False)

    def buffer(self, topic: str) -> TopicBufferStats | None:
        """The transaction buffer of *topic* (None: no transaction produced on it)."""
        return self._txns().buffer_stats().get(topic)

    def in_buffer(self, topic: str, txn: TxnId) -> tuple[Position | None, bool]:
        """(first entry of *txn* on *topic* while it is open, whether it was aborted there)."""
        return self._txns().in_buffer(topic, txn)

    def pending_ack(self, topic: str, subscription: str) -> PendingAckStats | None:
        """The pending acks of a subscription (None: no transaction acknowledged on it)."""
        return self._txns().pending_ack_stats().get((topic, subscription))

    def in_pending_ack(self, topic: str, subscription: str, txn: TxnId) -> Position | None:
        """The cumulative acknowledgement *txn* holds on the subscription, if any."""
        return self._txns().cumulative_ack(topic, subscription, txn)

    def position_in_pending_ack(self, topic: str, subscription: str, pos: Position
                                ) -> tuple[bool, bool, list[int] | None] | None:
        """(*pos* at or before the subscription's mark-delete position, pending individually,
        its ack set words) for the subscription's pending-ack store; None when no transaction
        acknowledged on it (Pulsar: not ready)."""
        txns = self._txns()
        if txns.pending_ack_stats_of(topic, subscription) is None:
            return None
        loaded = self._service.topics.get(topic)
        sub = loaded.subscriptions.get(subscription) if loaded is not None else None
        deleted = sub is not None and pos <= sub.cursor.mark_delete_position
        pending, words = txns.pending_store(topic, subscription).position_state(pos)
        return deleted, pending, words

    def log_internal_stats(self) -> dict[str, Any]:
        """``{"name", "stats"}``: the transaction log's ledger (ManagedLedgerInternalStats)."""
        return self._txns().log_internal_stats()


@dataclass(frozen=True, slots=True)
class AdminService:
    """What REST handlers may ask of the broker (see the module docstring)."""

    tenants: AdminTenants
    topics: AdminTopics
    entries: AdminEntries
    policies: AdminPolicies
    broker: AdminBroker
    #: The policy fields store, for the field-by-field policy routes (its own typed API).
    policy_store: PolicyStore
    #: The schema registry, for the schema routes.
    schemas: SchemaRegistry
    transactions: AdminTransactions

    @classmethod
    def over(cls, service: BrokerService) -> AdminService:
        namespaces = NamespaceService(service)
        tenants = AdminTenants(service, namespaces)
        return cls(tenants=tenants, topics=AdminTopics(service, tenants),
                   entries=AdminEntries(), policies=AdminPolicies(service, namespaces),
                   broker=AdminBroker(service),
                   policy_store=service.policies, schemas=service.schemas,
                   transactions=AdminTransactions(service))


#: Where create_app keeps the admin service for the handlers.
ADMIN_KEY = web.AppKey("horae_admin", AdminService)
