"""BrokerService: the node's registry of topics, tenants, namespaces and policies.

Theory of operation
-------------------
One BrokerService per broker, living on the broker's event loop; the binary protocol
(:mod:`broker.net.connection`), the admin REST API and the metrics collector all go through it.

* Topics are loaded on first use (:meth:`get_topic`), concurrently-safe: a second caller
  awaits the first load. A topic exists when the store knows its managed ledger, or when it
  is a partition of a partitioned topic; with ``allowAutoTopicCreation`` a producer or
  consumer creates it. Partitioned topics are metadata only (kind ``"topic"``,
  ``{"partitions": n}``); their partitions are ordinary topics.
* Tenants, namespaces, their grants and the cluster records are ``self.tenancy``
  (:class:`broker.topics.tenancy.Tenancy`; also the authorization's policy store); deleting a
  namespace or tenant deletes its topics through this service first
  (:class:`broker.topics.namespace_service.NamespaceService`, the admin API's). The broker's heartbeat namespaces
  (:mod:`broker.topics.heartbeat`, used by the health check) are never registered: their
  topics may be created, but no tenant or namespace listing shows them.
* Namespace and topic policies (deduplication, schema compatibility, compaction, retention,
  TTL, quotas, delayed delivery) are kept by ``self.policies``
  (:class:`broker.topics.policies.PolicyStore`); schemas by ``self.schemas``
  (:class:`broker.topics.schemas.SchemaRegistry`). A delayed-delivery change drops the cached
  resolved policy of the affected loaded topics (:meth:`invalidate_policies`), so it applies to
  the next message.
* Bound ports, advertised URLs, listeners and the heartbeat namespaces are ``self.addresses``
  (:class:`broker.topics.addresses.BrokerAddresses`).
* Persistent topics loaded, partitions added and topics deleted are told to
  ``self.topic_events`` (:class:`broker.topics.topic_events.TopicEvents`), which the
  connections' topic-list watchers listen to.
* One timer: a one-second tick feeding the rate meters and running the housekeeping (the
  producer-sequence snapshot and ledger trimming, :meth:`broker.topics.topic.Topic.housekeeping`)
  of the topics that moved lately, and of a slice of the idle ones
  (:class:`broker.topics.activity.TopicActivity`): idle topics cost next to nothing.
* Broker-assigned producer names are ``<cluster>-<generation>-<n>``; the generation is a
  counter in the metadata store bumped on every start, so a name is never handed out twice
  for one data directory -- producer names key the re-send deduplication, and a client
  reconnecting after a restart keeps the name it was given before.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable

from broker.config import BrokerConfig
from broker.delayed.policy import DelayPolicy
from broker.dynamic_config import DynamicConfiguration
from broker.topics import entry_metadata, shadows, termination
from broker.topics.activity import TopicActivity
from broker.topics.addresses import BrokerAddresses
from broker.topics.coordinator_assign import ensure_coordinator_assign_topic
from broker.topics.inactive import InactiveTopicSweeper
from broker.topics.live_policies import LivePolicies
from broker.topics.names import TopicName
from broker.topics.nonpersistent import NonPersistentTopic, NonPersistentTopics
from broker.topics.policies import PolicyLimitError, PolicyStore
from broker.topics.publish_refusals import PublishRefusals
from broker.topics.schemas import SchemaRegistry, schema_id
from broker.topics.storage_errors import StorageOp, storage_failure
from broker.topics.subscription_expiry import SubscriptionExpiry
from broker.topics.tenancy import Tenancy
from broker.topics.topic import Topic
from broker.topics.topic_events import TopicEvents
from broker.transactions.service import TransactionService, TxnTopic
from broker.transactions.settings import transaction_settings
from protocol.errors import (
    InvalidTopicNameError,
    NotAllowedError,
    ServiceNotReadyError,
    TopicNotFoundError,
)
from storage.errors import StorageError
from storage.metadata import MetadataStore
from storage.pacing import sleep_to_beat
from storage.snapshots import SnapshotStore
from storage.stats import StorageStats
from storage.store import SegmentStore
from storage.to_the_end import finish

__all__ = ["PARTITIONS_OVER_LIMIT", "BrokerService", "check_partition_limit"]

log = logging.getLogger("horae.service")

_instance_counter = itertools.count()

#: Pulsar's text for a partitioned topic beyond ``maxNumPartitionsPerPartitionedTopic``.
PARTITIONS_OVER_LIMIT = "Number of partitions should be less than or equal to {}"


def check_partition_limit(config: BrokerConfig, partitions: int) -> None:
    """``maxNumPartitionsPerPartitionedTopic`` (0 or less: no limit), read at each use: a
    partitioned topic with more partitions is refused (every path that makes or grows one:
    REST, and a lookup auto-creating one from a namespace's override)."""
    limit = config.max_num_partitions_per_partitioned_topic
    if 0 < limit < partitions:
        raise NotAllowedError(PARTITIONS_OVER_LIMIT.format(limit))


class BrokerService:
    def __init__(self, config: BrokerConfig, store: SegmentStore,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.config = config
        self.store = store
        self.loop = loop or asyncio.get_running_loop()
        self.topics: dict[str, Topic] = {}
        self.nonpersistent = NonPersistentTopics(  # in memory (topics/nonpersistent.py)
            self.loop, key_shared_consistent_hashing=config.subscription_key_shared_use_consistent_hashing)
        self.addresses = BrokerAddresses(config)  # bound ports, URLs, listeners, heartbeat
        self.closing = False   # set by close()
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        # Topics being closed: a reload must wait, or the store would hand back the ledger
        # that is still closing.
        self._unloading: dict[str, asyncio.Future[None]] = {}
        self.tenancy = Tenancy(store.metadata, config.cluster_name)
        self._partitioned: dict[str, int] = {}
        self.policies = PolicyStore(config, store.metadata)
        self.live_policies = LivePolicies(  # a policy change reaches loaded topics at once
            self.policies.records, self.policies.limits,
            lambda: [*self.topics.values(), *self.nonpersistent.topics.values()],
            lambda: self.policies.config,
            self.policies.resource_groups)
        self.topic_events = TopicEvents()
        self.inactive = InactiveTopicSweeper(
            self.policies, config.broker_delete_inactive_topics_frequency_seconds,
            lambda full: self.delete_topic(full))
        self.subscription_expiry = SubscriptionExpiry(
            self.policies.limits, config.subscription_expiry_check_interval_in_minutes * 60.0)
        self.schemas = SchemaRegistry(store.metadata)
        self.dynamic_config = DynamicConfiguration(config, store.metadata, self._reconfigure)
        self._instance = next(_instance_counter)  # until start() reads the generation
        self._producer_names = itertools.count()
        self._timers: list[asyncio.Task[None]] = []
        self.publish_refusals = PublishRefusals(store.disk)
        #: Transactions (transactionCoordinatorEnabled), started by start().
        self.transactions: TransactionService | None = None
        self.activity = TopicActivity(min(
            float(config.backlog_quota_check_interval_in_seconds),
            config.message_expiry_check_interval_in_minutes * 60.0))

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        md = self.store.metadata
        await self.tenancy.load()
        self._partitioned = {k: int(v.get("partitions", 0)) for k, v in await md.list("topic")
                             if int(v.get("partitions", 0)) > 0}
        generation = await md.get("broker", "generation")
        self._instance = int((generation or {}).get("value", -1)) + 1
        await md.put("broker", "generation", {"value": self._instance})
        await self.policies.load()
        await self.dynamic_config.load()
        if self.config.transaction_coordinator_enabled:
            await ensure_coordinator_assign_topic(self.tenancy, self._partitioned,
                                                  self.create_partitioned_topic)

            async def transaction_topic(name: str) -> TxnTopic | None:
                try:
                    return await self.get_topic(name, create=False)
                except TopicNotFoundError:
                    return None

            self.transactions = TransactionService(self.store, self.loop,
                                                   transaction_settings(self.config))
            await self.transactions.start(transaction_topic)
        self._timers = [self.loop.create_task(self._rates_loop())]

    def _reconfigure(self, config: BrokerConfig) -> None:
        """A dynamic setting changed (:mod:`broker.dynamic_config`): the new configuration is
        read from the next operation on; loaded topics re-resolve their delay policy and are
        handed the limits and rates now in force."""
        self.config = config
        self.policies.config = config
        self.addresses.config = config
        self.invalidate_policies(lambda t: True)
        self.live_policies.apply_all()

    async def close(self) -> None:
        """Unload every topic (producers/consumers are told to reconnect)."""
        self.closing = True
        for t in self._timers:
            t.cancel()
        # A sweep's delete in flight goes to its end before the topics and the store close.
        await asyncio.gather(*self._timers, return_exceptions=True)
        if self.transactions is not None:
            await self.transactions.close()
        for fut in list(self._loading.values()):
            with contextlib.suppress(Exception):
                await asyncio.shield(fut)
        for topic in list(self.topics.values()):
            await topic.close()
        self.topics.clear()
        self.nonpersistent.close()

    def storage_stats(self) -> StorageStats:
        """The store's counters and gauges (/metrics, the health check)."""
        return self.store.stats()

    @property
    def publish_refused(self) -> dict[str, int]:
        """Refused publishes by reason (broker/topics/publish_refusals.py)."""
        return self.publish_refusals.counts

    @property
    def snapshots(self) -> SnapshotStore:
        """The store's bucket-snapshot store (for delayed-delivery trackers)."""
        return self.store.snapshots

    @property
    def metadata(self) -> MetadataStore:
        """The metadata store (compaction results are kept there)."""
        return self.store.metadata

    def generate_producer_name(self) -> str:
        return f"{self.config.cluster_name}-{self._instance}-{next(self._producer_names)}"

    # ------------------------------------------------------------------ timers

    async def _rates_loop(self) -> None:
        while True:
            now = self.loop.time()
            self.activity.tick(now, self.topics.values())
            self.nonpersistent.sample_rates(now)
            try:
                await self.inactive.tick(now, self.topics)
                await self.subscription_expiry.tick(now, self.topics)
            except Exception:
                log.exception("inactive topic sweep failed")
            await sleep_to_beat(1.0)   # with the broker's other periodic work (storage.pacing)

    # ------------------------------------------------------------------ topics

    async def get_any_topic(self, name: str, *,
                            create: bool) -> Topic | NonPersistentTopic:
        """The topic *name* by its domain: :meth:`get_topic` or :meth:`get_nonpersistent_topic`."""
        tn = TopicName.parse(name)
        if not tn.is_persistent:
            return self.get_nonpersistent_topic(tn, create=create)
        return await self.get_topic(tn.full, create=create)

    def get_nonpersistent_topic(self, tn: TopicName, *, create: bool) -> NonPersistentTopic:
        """The in-memory topic *tn*, created on first use as :meth:`get_topic` decides."""
        topic = self.nonpersistent.get(tn)
        if topic is not None:
            return topic
        if self.closing:
            raise ServiceNotReadyError("Broker is shutting down")
        if tn.full in self._partitioned:
            raise NotAllowedError(f"{tn.full} is a partitioned topic: use its partitions")
        if not (create or self._is_existing_partition(tn)):
            raise TopicNotFoundError("Topic not found")
        if not self.tenancy.namespace_exists(tn.namespace):
            raise TopicNotFoundError(f"Namespace {tn.namespace} does not exist")
        if tn.is_partition and not self._is_existing_partition(tn) \
                and tn.partitioned_parent in self._partitioned:
            raise TopicNotFoundError(
                f"Partition {tn.partition_index} of {tn.partitioned_parent} does not exist")
        return self.nonpersistent.get_or_create(tn)

    async def get_topic(self, name: str, *, create: bool) -> Topic:
        """The loaded persistent topic *name*, loading it; creating it only if *create* (or if
        it is a partition of an existing partitioned topic). Raises TopicNotFoundError; a
        non-persistent name is NotAllowed (those are :meth:`get_nonpersistent_topic`'s)."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        tn = TopicName.parse(name)
        full = tn.full
        if not tn.is_persistent:
            raise NotAllowedError(f"{full} is a non-persistent topic")
        topic = self.topics.get(full)
        if topic is not None:
            return topic
        if self.closing:
            raise ServiceNotReadyError("Broker is shutting down")
        pending = self._loading.get(full)
        if pending is not None:
            return await asyncio.shield(pending)
        while (unloading := self._unloading.get(full)) is not None:
            await asyncio.shield(unloading)
        topic = self.topics.get(full)  # loaded by another caller meanwhile
        if topic is not None:
            return topic
        pending = self._loading.get(full)
        if pending is not None:
            return await asyncio.shield(pending)
        if full in self._partitioned:
            raise NotAllowedError(f"{full} is a partitioned topic: use its partitions")
        if not self._topic_known(tn):
            if not (create or self._is_existing_partition(tn)):
                raise TopicNotFoundError("Topic not found")
            if not self.tenancy.namespace_exists(tn.namespace) and not self.addresses.heartbeat.owns(tn.namespace):
                raise TopicNotFoundError(f"Namespace {tn.namespace} does not exist")
            if tn.is_partition and not self._is_existing_partition(tn):
                parent = tn.partitioned_parent
                if parent in self._partitioned:
                    raise TopicNotFoundError(
                        f"Partition {tn.partition_index} of {parent} does not exist")
            if not self._is_existing_partition(tn):
                self._check_max_topics(tn, 1)
        fut: asyncio.Future[Topic] = self.loop.create_future()
        self._loading[full] = fut
        try:
            try:
                ledger = await shadows.open_topic_ledger(
                    self.store, self.policies.records, tn,
                    lambda source: self.get_topic(source, create=False))
                topic = await Topic.load(self, tn, ledger)
            except StorageError as exc:
                raise storage_failure(exc, StorageOp.LOAD_TOPIC).error from exc
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()
            raise
        finally:
            del self._loading[full]
        self.topics[full] = topic
        fut.set_result(topic)
        self.topic_events.created((full,))
        return topic

    def _topic_known(self, tn: TopicName) -> bool:
        if not tn.is_persistent:
            return self.nonpersistent.get(tn) is not None
        return tn.full in self.topics or self.store.has_ledger(tn.full)

    def _is_existing_partition(self, tn: TopicName) -> bool:
        if not tn.is_partition:
            return False
        n = self._partitioned.get(tn.partitioned_parent, 0)
        return tn.partition_index < n

    async def unload_topic(self, name: str) -> None:
        """Close a loaded topic (clients reconnect and load it again, on a new ledger)."""
        topic = self.topics.pop(name, None)
        if topic is not None:
            await self._close_topic(topic)

    async def _close_topic(self, topic: Topic) -> None:
        done: asyncio.Future[None] = self.loop.create_future()
        self._unloading[topic.full] = done
        try:
            # Its shadows read its ledger: they close first and reload over the next one.
            for shadow in shadows.shadows_of(list(self.topics.values()), topic.full):
                await self.unload_topic(shadow.full)
            await topic.close()
        finally:
            del self._unloading[topic.full]
            done.set_result(None)

    def _check_max_topics(self, tn: TopicName, adding: int) -> None:
        """``maxTopicsPerNamespace`` (namespace policy over broker.conf, 0: no limit): the
        persistent topics of the namespace, each partition counting, plus *adding* may not
        pass it (NotAllowed; REST 412, 409 on a non-partitioned create), as Pulsar counts them. Counted only when a topic is
        created, never on the publish path."""
        limit = self.policies.limits.max_topics_per_namespace(tn.namespace)
        if limit <= 0:
            return
        ns = tn.namespace
        names = {n for n in set(self.store.ledger_names()) | set(self.topics) if _in_namespace(n, ns)}
        count = sum(1 for n in names if not self._is_existing_partition(TopicName.parse(n)))
        count += sum(n for parent, n in self._partitioned.items()
                     if _in_namespace(parent, ns) and TopicName.parse(parent).is_persistent)
        if count + adding > limit:
            raise PolicyLimitError("Exceed maximum number of topics in namespace.")

    async def list_topics(self, namespace: str) -> list[str]:
        """Non-partitioned topics and existing partitions of *namespace* (full names)."""
        self.tenancy.require_namespace(namespace)
        names = {n for n in self.store.ledger_names() if _in_namespace(n, namespace)}
        names.update(n for n in self.topics if _in_namespace(n, namespace))
        names.update(n for n in self.nonpersistent.topics if _in_namespace(n, namespace))
        return sorted(names)

    async def topics_of_namespace(self, namespace: str) -> list[str]:
        """What GET_TOPICS_OF_NAMESPACE answers: topics plus every partition of partitioned
        topics (the client groups partitions back itself). A namespace that does not exist has
        no topics: Pulsar lists the children of its metadata path, which answers an empty list
        (only the REST listing answers 404)."""
        if not self.tenancy.namespace_exists(namespace):
            return []
        names = set(await self.list_topics(namespace))
        for parent, n in self._partitioned.items():
            if _in_namespace(parent, namespace):
                names.update(TopicName.parse(parent).partition(i).full for i in range(n))
        return sorted(names)

    async def list_partitioned_topics(self, namespace: str) -> list[str]:
        self.tenancy.require_namespace(namespace)
        return sorted(p for p in self._partitioned if _in_namespace(p, namespace))

    async def create_partitioned_topic(self, name: str, partitions: int) -> None:
        tn = TopicName.parse(name)
        if tn.is_partition:
            raise InvalidTopicNameError(f"{tn.full} is a partition name")
        if partitions <= 0:
            raise NotAllowedError("The number of partitions must be more than 0")
        check_partition_limit(self.config, partitions)
        self.tenancy.require_namespace(tn.namespace)
        if tn.full in self._partitioned or self._topic_known(tn):
            raise NotAllowedError("This topic already exists")
        if tn.is_persistent:
            self._check_max_topics(tn, partitions)
        await self.store.metadata.put("topic", tn.full, {"partitions": partitions})
        self._partitioned[tn.full] = partitions
        if tn.is_persistent:
            self.topic_events.created(tn.partition(i).full for i in range(partitions))

    async def update_partitioned_topic(self, name: str, partitions: int) -> None:
        """Grow a partitioned topic (Pulsar never shrinks one)."""
        tn = TopicName.parse(name)
        current = self._partitioned.get(tn.full, 0)
        if current == 0:
            raise TopicNotFoundError("Partitioned topic not found")
        if partitions <= current:
            raise NotAllowedError("The number of partitions can only be increased")
        check_partition_limit(self.config, partitions)
        await self.store.metadata.put("topic", tn.full, {"partitions": partitions})
        self._partitioned[tn.full] = partitions
        if tn.is_persistent:
            self.topic_events.created(tn.partition(i).full for i in range(current, partitions))

    async def get_partition_count(self, name: str) -> int:
        """Partitions of *name*; 0 for a non-partitioned (or not yet existing) topic."""
        return self._partitioned.get(TopicName.parse(name).full, 0)

    async def lookup_partition_count(self, name: str) -> int:
        """Partitions of *name* as a client's partitioned-metadata lookup sees them: with
        ``allowAutoTopicCreationType=partitioned`` (or a namespace's ``autoTopicCreation``
        override saying so), a topic that does not exist yet (nor as a non-partitioned one, nor
        as a partition name) is created partitioned first, with ``defaultNumPartitions``, as
        Pulsar's lookup creates it."""
        tn = TopicName.parse(name)
        n = self._partitioned.get(tn.full, 0)
        auto = self.policies.auto_topic_creation(tn)
        if (n > 0 or not auto.allowed or not auto.partitioned
                or tn.is_partition or not self.tenancy.namespace_exists(tn.namespace)
                or self._topic_known(tn)):
            return n
        # beyond maxNumPartitionsPerPartitionedTopic (a namespace override's count): refused
        # to the client, not made a non-partitioned topic by the suppression below
        check_partition_limit(self.config, auto.partitions)
        # NotAllowed: created meanwhile, by another lookup or as a non-partitioned topic
        with contextlib.suppress(NotAllowedError):
            await self.create_partitioned_topic(tn.full, auto.partitions)
        return self._partitioned.get(tn.full, 0)

    async def delete_topic(self, name: str, *, force: bool = False) -> None:
        tn = TopicName.parse(name)
        full = tn.full
        n = self._partitioned.get(full, 0)
        if n > 0:
            for i in range(n):
                part = tn.partition(i)
                if self._topic_known(part):
                    await self.delete_topic(part.full, force=force)

            async def forget_partitioned() -> None:
                await self.store.metadata.delete("topic", full)
                del self._partitioned[full]
                await self._drop_topic_policy(full)
                if tn.is_persistent:  # the partitions never loaded go too (the rest went above)
                    self.topic_events.deleted(tn.partition(i).full for i in range(n))

            await finish(forget_partitioned())
            return
        if not self._topic_known(tn):
            raise TopicNotFoundError("Topic not found")
        if not tn.is_persistent:
            await self._delete_nonpersistent(tn, force=force)
            return
        topic = self.topics.get(full)
        if topic is not None:
            if not force:
                if topic.producers:
                    raise NotAllowedError("Topic has active producers")
                if any(s.consumers for s in topic.subscriptions.values()):
                    raise NotAllowedError("Topic has active subscriptions with connected consumers")
            del self.topics[full]
        # Past the checks a delete goes to its end though its caller is cancelled (the
        # service's close stops the inactive-topic sweeper; a connection's close its
        # requests): a delete that stopped after the ledger went would leave the termination
        # and policy records to a topic created again under the name.

        async def delete() -> None:
            if topic is not None:
                await self._close_topic(topic)
            await self.store.delete_ledger(full)
            if self.transactions is not None:
                self.transactions.forget_topic(full)
            await termination.forget(self.store.metadata, full)
            await entry_metadata.forget(self.store.metadata, full)
            await self._drop_topic_policy(full)
            self.topic_events.deleted((full,))

        await finish(delete())

    async def _delete_nonpersistent(self, tn: TopicName, *, force: bool) -> None:
        topic = self.nonpersistent.get(tn)
        if topic is not None and not force:
            clients = len(topic.producers) + sum(len(s.consumers)
                                                 for s in topic.subscriptions.values())
            if clients:
                raise NotAllowedError(f"Topic has {clients} connected producers/consumers")
        self.nonpersistent.delete(tn.full)
        await self._drop_topic_policy(tn.full)

    # ------------------------------------------------------------------ policies
    # (written by broker.topics.namespace_service; a write drops loaded topics' cached resolution)

    async def _drop_topic_policy(self, full: str) -> None:
        """The topic was deleted: its policies and (as Pulsar) its schema go with it."""
        await self.policies.records.drop_topic(full)
        await self.schemas.drop(schema_id(full))
        self.invalidate_policies(lambda t: full in (t.full, t.name.partitioned_parent))

    def invalidate_policies(self, match: Callable[[Topic], bool]) -> None:
        """A delayed-delivery policy changed: the loaded topics *match* picks resolve theirs
        again (:meth:`broker.topics.delivery.TopicDelivery.invalidate_policy`)."""
        for topic in list(self.topics.values()):
            if match(topic):
                topic.delivery.invalidate_policy()

    def resolve_delay_policy(self, tn: TopicName) -> DelayPolicy:
        """The effective DelayPolicy of a topic (:meth:`PolicyStore.delay_policy`)."""
        return self.policies.delay_policy(tn)


def _in_namespace(full: str, namespace: str) -> bool:
    rest = full.split("://", 1)[-1]
    return rest.startswith(namespace + "/") and "/" not in rest[len(namespace) + 1:]

