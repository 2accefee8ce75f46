package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.policies.data.AutoSubscriptionCreationOverride;
import org.apache.pulsar.common.policies.data.AutoTopicCreationOverride;
import org.apache.pulsar.common.policies.data.BookieAffinityGroupData;
import org.apache.pulsar.common.policies.data.DispatchRate;
import org.apache.pulsar.common.policies.data.OffloadPolicies;
import org.apache.pulsar.common.policies.data.PersistencePolicies;
import org.apache.pulsar.common.policies.data.Policies;
import org.apache.pulsar.common.policies.data.PublishRate;
import org.apache.pulsar.common.policies.data.SchemaAutoUpdateCompatibilityStrategy;
import org.apache.pulsar.common.policies.data.SubscribeRate;
import org.apache.pulsar.common.policies.data.SubscriptionAuthMode;
import org.apache.pulsar.common.policies.data.TopicType;
import org.junit.jupiter.api.Test;

/**
 * Namespace and topic policies set through PulsarAdmin: each read back, and the limits driven past
 * by a Java client. Pulsar applies policy changes asynchronously, so reads and enforcement are
 * awaited; each test has a namespace of its own.
 */
class AdminPoliciesTest extends BrokerTestBase {

  /** A read that may fail while a policy change propagates. */
  interface Read<T> {
    T get() throws Exception;
  }

  static <T> void eventuallyEquals(String what, T expected, Read<T> read) throws InterruptedException {
    Object[] last = new Object[1];
    try {
      HoraeEnv.waitUntil(what, () -> {
        try {
          last[0] = read.get();
          return Objects.equals(expected, last[0]);
        } catch (Exception e) {
          last[0] = e;
          return false;
        }
      });
    } catch (AssertionError timedOut) {
      throw new AssertionError(what + ": expected " + expected + ", last read " + last[0], timedOut);
    }
  }

  /** Retries {@code attempt} until it throws {@code type} (a policy change is applied asynchronously). */
  static <E extends Throwable> E eventuallyThrows(String what, Class<E> type, Callable<?> attempt)
      throws InterruptedException {
    Throwable[] seen = new Throwable[1];
    HoraeEnv.waitUntil(what, () -> {
      try {
        Object made = attempt.call();
        if (made instanceof AutoCloseable closeable) {
          closeable.close();
        }
        return false;
      } catch (Throwable t) {
        seen[0] = t;
        return type.isInstance(t);
      }
    });
    return type.cast(seen[0]);
  }

  private String namespace(String stem) throws PulsarAdminException {
    String namespace = "public/" + stem + "-" + UUID.randomUUID().toString().substring(0, 8);
    admin.namespaces().createNamespace(namespace);
    return namespace;
  }

  private static String topicIn(String namespace, String stem) {
    return "persistent://" + namespace + "/" + stem + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  @Test
  void namespaceLimitsAndRatesReadBack() throws Exception {
    String ns = namespace("ns-limits");
    var n = admin.namespaces();
    n.setMaxProducersPerTopic(ns, 3);
    assertEquals(3, n.getMaxProducersPerTopic(ns));
    n.setMaxConsumersPerTopic(ns, 4);
    assertEquals(4, n.getMaxConsumersPerTopic(ns));
    n.setMaxConsumersPerSubscription(ns, 2);
    assertEquals(2, n.getMaxConsumersPerSubscription(ns));
    n.setMaxSubscriptionsPerTopic(ns, 5);
    assertEquals(5, n.getMaxSubscriptionsPerTopic(ns));
    n.setMaxUnackedMessagesPerConsumer(ns, 100);
    assertEquals(100, n.getMaxUnackedMessagesPerConsumer(ns));
    n.setMaxUnackedMessagesPerSubscription(ns, 1000);
    assertEquals(1000, n.getMaxUnackedMessagesPerSubscription(ns));
    n.setMaxTopicsPerNamespace(ns, 10);
    assertEquals(10, n.getMaxTopicsPerNamespace(ns));
    n.setSubscriptionExpirationTime(ns, 30);
    assertEquals(30, n.getSubscriptionExpirationTime(ns));

    PublishRate publish = new PublishRate(100, 1024 * 1024);
    n.setPublishRate(ns, publish);
    assertEquals(publish, n.getPublishRate(ns));
    DispatchRate dispatch = DispatchRate.builder().dispatchThrottlingRateInMsg(50)
        .dispatchThrottlingRateInByte(4096).ratePeriodInSecond(2).build();
    n.setDispatchRate(ns, dispatch);
    assertEquals(dispatch, n.getDispatchRate(ns));
    DispatchRate perSubscription = DispatchRate.builder().dispatchThrottlingRateInMsg(20)
        .dispatchThrottlingRateInByte(-1).ratePeriodInSecond(1).build();
    n.setSubscriptionDispatchRate(ns, perSubscription);
    assertEquals(perSubscription, n.getSubscriptionDispatchRate(ns));
    SubscribeRate subscribe = new SubscribeRate(7, 30);
    n.setSubscribeRate(ns, subscribe);
    assertEquals(subscribe, n.getSubscribeRate(ns));
    n.setSubscriptionTypesEnabled(ns, Set.of(SubscriptionType.Exclusive, SubscriptionType.Failover));
    assertEquals(Set.of(SubscriptionType.Exclusive, SubscriptionType.Failover), n.getSubscriptionTypesEnabled(ns));

    Policies policies = n.getPolicies(ns);
    assertEquals(3, policies.max_producers_per_topic);
    assertEquals(2, policies.max_consumers_per_subscription);
    assertEquals(5, policies.max_subscriptions_per_topic);
    assertEquals(10, policies.max_topics_per_namespace);
    assertEquals(30, policies.subscription_expiration_time_minutes);

    n.removeMaxProducersPerTopic(ns);
    assertNull(n.getMaxProducersPerTopic(ns));
    n.removeMaxConsumersPerSubscription(ns);
    assertNull(n.getMaxConsumersPerSubscription(ns));
    n.removeMaxUnackedMessagesPerConsumer(ns);
    assertNull(n.getMaxUnackedMessagesPerConsumer(ns));
    n.removeMaxTopicsPerNamespace(ns);
    assertEquals(0, n.getMaxTopicsPerNamespace(ns));
    n.removeSubscriptionExpirationTime(ns);
    assertNull(n.getSubscriptionExpirationTime(ns));
    n.removePublishRate(ns);
    assertNull(n.getPublishRate(ns));
    n.removeDispatchRate(ns);
    assertNull(n.getDispatchRate(ns));
    n.removeSubscribeRate(ns);
    assertNull(n.getSubscribeRate(ns));
    n.removeSubscriptionTypesEnabled(ns);
    assertTrue(n.getSubscriptionTypesEnabled(ns).isEmpty());

    PulsarAdminException negative = assertThrows(PulsarAdminException.PreconditionFailedException.class,
        () -> n.setMaxProducersPerTopic(ns, -1));
    assertEquals(412, negative.getStatusCode());
  }

  @Test
  void namespaceLimitsAreEnforced() throws Exception {
    String ns = namespace("ns-enforced");
    String topic = topicIn(ns, "t");
    admin.namespaces().setMaxProducersPerTopic(ns, 1);
    admin.namespaces().setMaxConsumersPerSubscription(ns, 1);
    admin.namespaces().setMaxSubscriptionsPerTopic(ns, 1);
    eventuallyEquals("the namespace limits are set", 1, () -> admin.namespaces().getMaxSubscriptionsPerTopic(ns));
    try (Producer<String> first = client.newProducer(Schema.STRING).topic(topic).create();
         Consumer<String> only = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
             .subscriptionType(SubscriptionType.Shared).subscribe()) {
      eventuallyThrows("a second producer is refused", PulsarClientException.ProducerBusyException.class,
          () -> client.newProducer(Schema.STRING).topic(topic).create());
      eventuallyThrows("a second consumer of the subscription is refused",
          PulsarClientException.ConsumerBusyException.class,
          () -> client.newConsumer(Schema.STRING).topic(topic).subscriptionName("s")
              .subscriptionType(SubscriptionType.Shared).subscribe());
      eventuallyThrows("a second subscription is refused", PulsarClientException.NotAllowedException.class,
          () -> client.newConsumer(Schema.STRING).topic(topic).subscriptionName("other").subscribe());
      first.send("still served");
      assertEquals("still served", only.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS).getValue());
    }

    String counted = namespace("ns-max-topics");
    admin.namespaces().setMaxTopicsPerNamespace(counted, 1);
    eventuallyEquals("max topics is set", 1, () -> admin.namespaces().getMaxTopicsPerNamespace(counted));
    admin.topics().createNonPartitionedTopic(topicIn(counted, "first"));
    PulsarAdminException over = assertThrows(PulsarAdminException.class,
        () -> admin.topics().createPartitionedTopic(topicIn(counted, "second"), 1));
    assertEquals(412, over.getStatusCode());
    assertEquals("Exceed maximum number of topics in namespace.", over.getHttpError());
    // a non-partitioned create is refused by the broker service: NotAllowed, which REST answers 409
    PulsarAdminException plain = assertThrows(PulsarAdminException.class,
        () -> admin.topics().createNonPartitionedTopic(topicIn(counted, "third")));
    assertEquals(409, plain.getStatusCode());
    assertEquals("Exceed maximum number of topics in namespace.", plain.getHttpError());
  }

  @Test
  void topicLimitsReadBackAppliedAndEnforced() throws Exception {
    String ns = namespace("topic-limits");
    String topic = topicIn(ns, "t");
    admin.topics().createNonPartitionedTopic(topic);
    admin.namespaces().setMaxConsumersPerTopic(ns, 9);
    var p = admin.topicPolicies();
    eventuallyEquals("the namespace value is applied to the topic", 9, () -> p.getMaxConsumers(topic, true));
    assertNull(p.getMaxConsumers(topic));

    p.setMaxProducers(topic, 1);
    eventuallyEquals("topic max producers", 1, () -> p.getMaxProducers(topic));
    p.setMaxConsumers(topic, 5);
    eventuallyEquals("topic max consumers", 5, () -> p.getMaxConsumers(topic, true));
    p.setMaxConsumersPerSubscription(topic, 2);
    eventuallyEquals("topic max consumers per subscription", 2, () -> p.getMaxConsumersPerSubscription(topic));
    p.setMaxSubscriptionsPerTopic(topic, 3);
    eventuallyEquals("topic max subscriptions", 3, () -> p.getMaxSubscriptionsPerTopic(topic));
    p.setMaxUnackedMessagesOnConsumer(topic, 2);
    eventuallyEquals("topic max unacked per consumer", 2, () -> p.getMaxUnackedMessagesOnConsumer(topic));
    p.setMaxUnackedMessagesOnSubscription(topic, 500);
    eventuallyEquals("topic max unacked per subscription", 500, () -> p.getMaxUnackedMessagesOnSubscription(topic));
    p.setMaxMessageSize(topic, 1024);
    eventuallyEquals("topic max message size", 1024, () -> p.getMaxMessageSize(topic));
    p.setSubscriptionTypesEnabled(topic, Set.of(SubscriptionType.Shared));
    eventuallyEquals("topic subscription types", Set.of(SubscriptionType.Shared),
        () -> p.getSubscriptionTypesEnabled(topic));
    SubscribeRate subscribe = new SubscribeRate(5, 30);
    p.setSubscribeRate(topic, subscribe);
    eventuallyEquals("topic subscribe rate", subscribe, () -> p.getSubscribeRate(topic));

    try (Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false).create();
         Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("s")
             .subscriptionType(SubscriptionType.Shared).receiverQueueSize(10).subscribe()) {
      eventuallyThrows("a second producer is refused", PulsarClientException.ProducerBusyException.class,
          () -> client.newProducer().topic(topic).create());
      eventuallyThrows("an Exclusive subscription is refused", PulsarClientException.NotAllowedException.class,
          () -> client.newConsumer().topic(topic).subscriptionName("x")
              .subscriptionType(SubscriptionType.Exclusive).subscribe());
      PulsarClientException tooBig = assertThrows(PulsarClientException.class,
          () -> producer.send(new byte[4096]));
      assertTrue(tooBig instanceof PulsarClientException.NotAllowedException, tooBig.toString());

      for (int i = 0; i < 5; i++) {
        producer.send(new byte[] {(byte) i});
      }
      Message<byte[]> one = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
      Message<byte[]> two = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
      assertNotNull(one);
      assertNotNull(two);
      assertNull(consumer.receive(1, TimeUnit.SECONDS), "a consumer at its max unacked gets no more");
      consumer.acknowledge(one);
      consumer.acknowledge(two);
      for (Message<byte[]> m : receive(consumer, 3)) {
        assertNotNull(m);
      }
    }

    p.removeMaxProducers(topic);
    eventuallyEquals("topic max producers removed", null, () -> p.getMaxProducers(topic));
    p.removeMaxMessageSize(topic);
    eventuallyEquals("topic max message size removed", null, () -> p.getMaxMessageSize(topic));
    p.deleteTopicPolicies(topic);
    eventuallyEquals("every topic policy deleted", null, () -> p.getMaxConsumers(topic));
    eventuallyEquals("the namespace value applies again", 9, () -> p.getMaxConsumers(topic, true));
  }

  @Test
  void ratesThrottle() throws Exception {
    String ns = namespace("rates");
    String topic = topicIn(ns, "t");
    admin.topics().createNonPartitionedTopic(topic);
    var p = admin.topicPolicies();
    PublishRate publish = new PublishRate(2, -1);
    p.setPublishRate(topic, publish);
    eventuallyEquals("topic publish rate", publish, () -> p.getPublishRate(topic));
    DispatchRate dispatch = DispatchRate.builder().dispatchThrottlingRateInMsg(2)
        .dispatchThrottlingRateInByte(-1).ratePeriodInSecond(1).build();
    p.setDispatchRate(topic, dispatch);
    eventuallyEquals("topic dispatch rate", dispatch, () -> p.getDispatchRate(topic));
    DispatchRate perSubscription = DispatchRate.builder().dispatchThrottlingRateInMsg(3)
        .dispatchThrottlingRateInByte(-1).ratePeriodInSecond(1).build();
    p.setSubscriptionDispatchRate(topic, perSubscription);
    eventuallyEquals("topic subscription dispatch rate", perSubscription, () -> p.getSubscriptionDispatchRate(topic));

    admin.topics().createSubscription(topic, "s", MessageId.earliest);
    try (Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false).create()) {
      long start = System.nanoTime();
      for (int i = 0; i < 7; i++) {
        producer.send(new byte[] {(byte) i});
      }
      long publishMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
      assertTrue(publishMs >= 1500, "7 sends at 2/s took only " + publishMs + " ms");
    }
    // the backlog is stored before the consumer comes: its pace is the dispatch rate's alone
    try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("s").subscribe()) {
      long start = System.nanoTime();
      receive(consumer, 7);
      long dispatchMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
      assertTrue(dispatchMs >= 1500, "7 deliveries at 2/s took only " + dispatchMs + " ms");
    }
    p.removePublishRate(topic);
    eventuallyEquals("topic publish rate removed", null, () -> p.getPublishRate(topic));
    p.removeDispatchRate(topic);
    eventuallyEquals("topic dispatch rate removed", null, () -> p.getDispatchRate(topic));
  }

  @Test
  void autoCreationOverrides() throws Exception {
    String ns = namespace("auto-create");
    admin.namespaces().setAutoTopicCreation(ns, AutoTopicCreationOverride.builder()
        .allowAutoTopicCreation(true).topicType(TopicType.PARTITIONED.toString()).defaultNumPartitions(2).build());
    AutoTopicCreationOverride partitioned = admin.namespaces().getAutoTopicCreation(ns);
    assertEquals(2, partitioned.getDefaultNumPartitions());
    String auto = topicIn(ns, "auto");
    eventuallyEquals("an auto-created topic has the override's partitions", 2, () -> {
      try (Producer<byte[]> producer = client.newProducer().topic(auto).create()) {
        return admin.topics().getPartitionedTopicMetadata(auto).partitions;
      }
    });

    admin.namespaces().setAutoTopicCreation(ns,
        AutoTopicCreationOverride.builder().allowAutoTopicCreation(false).build());
    assertFalse(admin.namespaces().getAutoTopicCreation(ns).isAllowAutoTopicCreation());
    String missing = topicIn(ns, "missing");
    eventuallyThrows("a producer does not create the topic", PulsarClientException.class,
        () -> client.newProducer().topic(missing).create());
    assertFalse(admin.topics().getList(ns).contains(missing));
    admin.namespaces().removeAutoTopicCreation(ns);
    assertNull(admin.namespaces().getAutoTopicCreation(ns));

    String topic = topicIn(ns, "subs");
    admin.topics().createNonPartitionedTopic(topic);
    admin.namespaces().setAutoSubscriptionCreation(ns,
        AutoSubscriptionCreationOverride.builder().allowAutoSubscriptionCreation(false).build());
    assertFalse(admin.namespaces().getAutoSubscriptionCreation(ns).isAllowAutoSubscriptionCreation());
    eventuallyThrows("a consumer does not create its subscription", PulsarClientException.class,
        () -> client.newConsumer().topic(topic).subscriptionName("new").subscribe());
    assertFalse(admin.topics().getSubscriptions(topic).contains("new"));
    admin.topicPolicies().setAutoSubscriptionCreation(topic,
        AutoSubscriptionCreationOverride.builder().allowAutoSubscriptionCreation(true).build());
    eventuallyEquals("the topic override is set", true,
        () -> admin.topicPolicies().getAutoSubscriptionCreation(topic, false).isAllowAutoSubscriptionCreation());
    eventuallyEquals("the topic override lets the consumer create it", true, () -> {
      try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("new").subscribe()) {
        return admin.topics().getSubscriptions(topic).contains("new");
      }
    });
    admin.namespaces().removeAutoSubscriptionCreation(ns);
    assertNull(admin.namespaces().getAutoSubscriptionCreation(ns));
  }

  @Test
  void schemaPolicies() throws Exception {
    String ns = namespace("schema-policies");
    var n = admin.namespaces();
    assertTrue(n.getIsAllowAutoUpdateSchema(ns), "auto update is allowed by default");
    assertFalse(n.getSchemaValidationEnforced(ns));
    n.setSchemaAutoUpdateCompatibilityStrategy(ns, SchemaAutoUpdateCompatibilityStrategy.Forward);
    assertEquals(SchemaAutoUpdateCompatibilityStrategy.Forward, n.getSchemaAutoUpdateCompatibilityStrategy(ns));

    String topic = topicIn(ns, "t");
    client.newProducer(Schema.STRING).topic(topic).create().close();
    n.setIsAllowAutoUpdateSchema(ns, false);
    assertFalse(n.getIsAllowAutoUpdateSchema(ns));
    eventuallyThrows("a new schema is refused", PulsarClientException.IncompatibleSchemaException.class,
        () -> client.newProducer(Schema.INT64).topic(topic).create());
    n.setIsAllowAutoUpdateSchema(ns, true);

    n.setSchemaValidationEnforced(ns, true);
    assertTrue(n.getSchemaValidationEnforced(ns));
    eventuallyThrows("a producer without a schema is refused", PulsarClientException.IncompatibleSchemaException.class,
        () -> client.newProducer().topic(topic).create());
    n.setSchemaValidationEnforced(ns, false);
    assertFalse(n.getSchemaValidationEnforced(ns));
  }

  @Test
  void storageReplicationAndSecurityPolicies() throws Exception {
    String ns = namespace("storage");
    var n = admin.namespaces();
    PersistencePolicies persistence = new PersistencePolicies(1, 1, 1, 0.0);
    n.setPersistence(ns, persistence);
    assertEquals(persistence, n.getPersistence(ns));
    n.setOffloadThreshold(ns, 1024 * 1024);
    assertEquals(1024 * 1024, n.getOffloadThreshold(ns));
    n.setOffloadDeleteLag(ns, 2, TimeUnit.HOURS);
    assertEquals(TimeUnit.HOURS.toMillis(2), n.getOffloadDeleteLagMs(ns));
    n.clearOffloadDeleteLag(ns);
    assertNull(n.getOffloadDeleteLagMs(ns));
    BookieAffinityGroupData affinity = BookieAffinityGroupData.builder().bookkeeperAffinityGroupPrimary("g1").build();
    n.setBookieAffinityGroup(ns, affinity);
    assertEquals("g1", n.getBookieAffinityGroup(ns).getBookkeeperAffinityGroupPrimary());
    n.deleteBookieAffinityGroup(ns);
    n.setNamespaceReplicationClusters(ns, Set.of("standalone"));
    assertEquals(List.of("standalone"), n.getNamespaceReplicationClusters(ns));
    n.setDeduplicationSnapshotInterval(ns, 500);
    assertEquals(500, n.getDeduplicationSnapshotInterval(ns));
    n.removeDeduplicationSnapshotInterval(ns);
    assertNull(n.getDeduplicationSnapshotInterval(ns));
    DispatchRate replicator = DispatchRate.builder().dispatchThrottlingRateInMsg(10)
        .dispatchThrottlingRateInByte(-1).ratePeriodInSecond(1).build();
    n.setReplicatorDispatchRate(ns, replicator);
    assertEquals(replicator, n.getReplicatorDispatchRate(ns));
    n.removeReplicatorDispatchRate(ns);
    assertNull(n.getReplicatorDispatchRate(ns));
    n.setSubscriptionAuthMode(ns, SubscriptionAuthMode.Prefix);
    assertEquals(SubscriptionAuthMode.Prefix, n.getSubscriptionAuthMode(ns));
    n.setProperty(ns, "owner", "ops");
    n.setProperties(ns, Map.of("team", "a"));
    assertEquals("ops", n.getProperty(ns, "owner"));
    assertEquals(Map.of("owner", "ops", "team", "a"), n.getProperties(ns));
    assertEquals("ops", n.removeProperty(ns, "owner"));
    n.clearProperties(ns);
    assertTrue(n.getProperties(ns).isEmpty());

    String topic = topicIn(ns, "t");
    admin.topics().createNonPartitionedTopic(topic);
    var p = admin.topicPolicies();
    eventuallyEquals("the namespace persistence is applied to the topic", persistence,
        () -> p.getPersistence(topic, true));
    PersistencePolicies topicPersistence = new PersistencePolicies(1, 1, 1, 5.0);
    p.setPersistence(topic, topicPersistence);
    eventuallyEquals("topic persistence", topicPersistence, () -> p.getPersistence(topic));
    OffloadPolicies offload = OffloadPolicies.builder().managedLedgerOffloadDriver("aws-s3").managedLedgerOffloadBucket("b")
        .managedLedgerOffloadThresholdInBytes(1024L).build();
    p.setOffloadPolicies(topic, offload);
    eventuallyEquals("topic offload threshold", 1024L,
        () -> p.getOffloadPolicies(topic).getManagedLedgerOffloadThresholdInBytes());
    p.setDeduplicationSnapshotInterval(topic, 100);
    eventuallyEquals("topic dedup snapshot interval", 100, () -> p.getDeduplicationSnapshotInterval(topic));
    p.setReplicatorDispatchRate(topic, replicator);
    eventuallyEquals("topic replicator dispatch rate", replicator, () -> p.getReplicatorDispatchRate(topic));
    p.setReplicationClusters(topic, List.of("standalone")).get(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
    eventuallyEquals("topic replication clusters", Set.of("standalone"), () -> p.getReplicationClusters(topic, false));
    p.removePersistence(topic);
    eventuallyEquals("topic persistence removed", null, () -> p.getPersistence(topic));
    p.removeOffloadPolicies(topic);
    eventuallyEquals("topic offload removed", null, () -> p.getOffloadPolicies(topic));

    n.setEncryptionRequiredStatus(ns, true);
    assertTrue(n.getEncryptionRequiredStatus(ns));
    // the refusal is MetadataError, which the client retries until its operation timeout
    try (PulsarClient quick = PulsarClient.builder().serviceUrl(HoraeEnv.serviceUrl())
        .operationTimeout(2, TimeUnit.SECONDS).build()) {
      eventuallyThrows("an unencrypted producer is refused", PulsarClientException.class,
          () -> quick.newProducer().topic(topic).create());
    }
    assertTrue(admin.topics().getStats(topic).getPublishers().isEmpty());
    n.setEncryptionRequiredStatus(ns, false);
    assertFalse(n.getEncryptionRequiredStatus(ns));
    eventuallyEquals("an unencrypted producer is served again", true, () -> {
      try (Producer<byte[]> producer = client.newProducer().topic(topic).create()) {
        return producer.isConnected();
      }
    });
  }
}
