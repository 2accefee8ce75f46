"""A policy change reaches loaded topics at once, as Pulsar's ``onPoliciesUpdate`` / ``onUpdate``.

Theory of operation
-------------------
:class:`LivePolicies` watches the stored policy fields
(:meth:`broker.topics.policy_records.PolicyRecords.watch`). When a namespace's fields change,
every loaded topic of the namespace (persistent and non-persistent, partitions included) is
handed its resolved limits again; when a topic's change, that topic, or the partitions of that
partitioned topic. :meth:`apply` sets what a topic and its clients hold while they live:

- the topic's publish rate (its producers' connections are held by the new rate from their
  next read) and its resource group's shared quotas (:mod:`broker.topics.resource_groups`),
  its ``maxMessageSize`` policy, its dispatch rate and its subscribe rate, and
  dispatcherPauseOnAckStatePersistent (:mod:`broker.subscriptions.ack_state_pause`), and
  the namespace's ``encryption_required``: producers attached without encryption are
  disconnected, as Pulsar's ``Producer.checkEncryption`` does (their clients reconnect and
  are refused), and from the next SEND a message without encryption keys is refused;
- each subscription's ``subscriptionDispatchRate`` and ``maxUnackedMessagesPerSubscription``
  (its dispatcher reads both at its next round);
- each consumer's ``maxUnackedMessagesPerConsumer``: a consumer held by a lower limit stops
  receiving, one released by a higher limit (or by 0, no limit) receives again; Pulsar's
  hysteresis is kept (a held consumer is released once it holds at most half of the limit).

Then each subscription with consumers is asked for a dispatch round, so a raised limit or
rate takes effect without waiting for the next message or ack. Limits that are checked when a
client arrives (producers, consumers and subscriptions per topic, consumers per subscription,
subscription types, auto-creation) need nothing here: they are resolved at each PRODUCER and
SUBSCRIBE, so the next one meets the new value, and clients already attached stay, as in Pulsar.
A dynamic change of the broker's defaults (``maxPublishRatePerTopicInMessages``, the dispatch
and subscribe rates; :mod:`broker.dynamic_config`) reaches every loaded topic the same way
(:meth:`apply_all`), as Pulsar's topics re-read them on a dynamic-configuration update.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from broker.config import BrokerConfig
from broker.subscriptions.consumer import Consumer
from broker.topics.nonpersistent import NonPersistentTopic
from broker.topics.policies import ack_state_ranges_limit, encryption_required
from broker.topics.policy_limits import LimitPolicies
from broker.topics.policy_records import PolicyRecords
from broker.topics.resource_groups import ResourceGroups
from broker.topics.topic import Topic

__all__ = ["LivePolicies"]

log = logging.getLogger("horae.policies")


class LivePolicies:
    """Hands changed limits and rates to loaded topics (module docstring)."""

    def __init__(self, records: PolicyRecords, limits: LimitPolicies,
                 loaded: Callable[[], Iterable[Topic | NonPersistentTopic]],
                 config: Callable[[], BrokerConfig],
                 groups: ResourceGroups | None = None) -> None:
        self._limits = limits
        self._config = config   # read at each apply: dynamic configuration swaps it
        self._groups = groups
        self._records = records
        self._loaded = loaded
        records.watch(self.changed)

    def changed(self, namespace: str | None, full: str | None) -> None:
        """A namespace's (or a topic's, by full name) stored fields changed."""
        for topic in list(self._loaded()):
            tn = topic.name
            if (namespace is not None and tn.namespace == namespace) or \
                    (full is not None and full in (tn.full, tn.partitioned_parent)):
                self.apply(topic)

    def apply_all(self) -> None:
        """The broker's defaults changed (a dynamic setting): every loaded topic re-resolves."""
        for topic in list(self._loaded()):
            self.apply(topic)

    def apply(self, topic: Topic | NonPersistentTopic) -> None:
        """Give *topic*, its subscriptions and consumers the limits now in force."""
        tn = topic.name
        limits = self._limits
        topic.publish_rate.rate = limits.publish_rate(tn)
        topic.subscribe_rate.rate = limits.subscribe_rate(tn)
        required = encryption_required(self._records, tn)
        if required:
            # Pulsar's Producer.checkEncryption: an unencrypted producer is disconnected (its
            # client reconnects and is refused "Encryption is required in ...")
            for producer in list(topic.producers.values()):
                if not producer.encrypted:
                    log.info("unencrypted producer %s is not allowed to produce on %s anymore",
                             producer.name, tn.full)
                    producer.disconnect()
        if self._groups is not None:
            self._groups.attach(tn.namespace, topic)
        if not isinstance(topic, Topic):
            return   # a non-persistent topic has no dispatch rates or unacked limits
        topic.max_message_size_policy = limits.topic_max_message_size(tn)
        topic.encryption_required = required
        topic.topic_dispatch.rate = limits.topic_dispatch_rate(tn)
        topic.topic_dispatch.ack_state_ranges_limit = ack_state_ranges_limit(
            self._records, self._config(), tn)
        sub_rate = limits.subscription_dispatch_rate(tn)
        sub_unacked = limits.max_unacked_messages_per_subscription(tn)
        consumer_unacked = limits.max_unacked_messages_per_consumer(tn)
        for sub in list(topic.subscriptions.values()):
            sub.dispatch_rate = sub_rate
            sub.max_unacked_messages = sub_unacked
            for consumer in sub.consumers:
                _set_consumer_limit(consumer, consumer_unacked)
            sub.on_new_entries()   # a dispatch round under the new limits


def _set_consumer_limit(consumer: Consumer, limit: int) -> None:
    consumer.max_unacked_messages = limit
    unacked = consumer.unacked_messages
    if limit <= 0:
        consumer.blocked_on_unacked = False
    elif unacked >= limit:
        consumer.blocked_on_unacked = consumer.sub_type.shares_messages
    elif consumer.blocked_on_unacked and unacked <= limit // 2:
        consumer.blocked_on_unacked = False
