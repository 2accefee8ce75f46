package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import org.apache.pulsar.client.admin.LongRunningProcessStatus;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.common.naming.TopicVersion;
import org.apache.pulsar.common.policies.data.AuthAction;
import org.apache.pulsar.common.policies.data.BacklogQuota;
import org.apache.pulsar.common.policies.data.DelayedDeliveryPolicies;
import org.apache.pulsar.common.policies.data.InactiveTopicDeleteMode;
import org.apache.pulsar.common.policies.data.InactiveTopicPolicies;
import org.apache.pulsar.common.policies.data.PartitionedTopicStats;
import org.apache.pulsar.common.policies.data.PersistentTopicInternalStats;
import org.apache.pulsar.common.policies.data.Policies;
import org.apache.pulsar.common.policies.data.RetentionPolicies;
import org.apache.pulsar.common.policies.data.SchemaCompatibilityStrategy;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.apache.pulsar.common.policies.data.TopicStats;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.Test;

/** The REST routes Horae answers, called through PulsarAdmin. */
class AdminTest extends BrokerTestBase {

  private static String unique(String stem) {
    return stem + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  @Test
  void clustersAndBrokerHealth() throws Exception {
    assertTrue(admin.clusters().getClusters().contains("standalone"));
    admin.brokers().healthcheck(TopicVersion.V2);
  }

  @Test
  void tenantsAndNamespacesLifecycle() throws Exception {
    String tenant = unique("tenant");
    admin.tenants().createTenant(tenant,
        TenantInfo.builder().adminRoles(Set.of("ops")).allowedClusters(Set.of("standalone")).build());
    assertTrue(admin.tenants().getTenants().contains(tenant));
    assertEquals(Set.of("ops"), admin.tenants().getTenantInfo(tenant).getAdminRoles());
    admin.tenants().updateTenant(tenant,
        TenantInfo.builder().adminRoles(Set.of("ops", "dev")).allowedClusters(Set.of("standalone")).build());
    assertEquals(Set.of("ops", "dev"), admin.tenants().getTenantInfo(tenant).getAdminRoles());
    PulsarAdminException exists = assertThrows(PulsarAdminException.ConflictException.class,
        () -> admin.tenants().createTenant(tenant,
            TenantInfo.builder().allowedClusters(Set.of("standalone")).build()));
    assertEquals(409, exists.getStatusCode());

    String namespace = tenant + "/ns";
    admin.namespaces().createNamespace(namespace);
    assertEquals(List.of(namespace), admin.namespaces().getNamespaces(tenant));
    Policies policies = admin.namespaces().getPolicies(namespace);
    assertNotNull(policies);
    assertThrows(PulsarAdminException.NotFoundException.class,
        () -> admin.namespaces().getPolicies(tenant + "/missing"));
    assertThrows(PulsarAdminException.ConflictException.class, () -> admin.tenants().deleteTenant(tenant));

    admin.namespaces().deleteNamespace(namespace);
    assertEquals(List.of(), admin.namespaces().getNamespaces(tenant));
    admin.tenants().deleteTenant(tenant);
    assertFalse(admin.tenants().getTenants().contains(tenant));
  }

  @Test
  void namespacePolicies() throws Exception {
    String namespace = "public/" + unique("policies");
    admin.namespaces().createNamespace(namespace);
    try {
      admin.namespaces().setRetention(namespace, new RetentionPolicies(60, 100));
      assertEquals(new RetentionPolicies(60, 100), admin.namespaces().getRetention(namespace));

      admin.namespaces().setNamespaceMessageTTL(namespace, 3600);
      assertEquals(3600, admin.namespaces().getNamespaceMessageTTL(namespace));
      admin.namespaces().removeNamespaceMessageTTL(namespace);
      assertNull(admin.namespaces().getNamespaceMessageTTL(namespace));

      admin.namespaces().setDeduplicationStatus(namespace, false);
      assertEquals(false, admin.namespaces().getDeduplicationStatus(namespace));

      admin.namespaces().setSchemaCompatibilityStrategy(namespace, SchemaCompatibilityStrategy.FORWARD);
      assertEquals(SchemaCompatibilityStrategy.FORWARD,
          admin.namespaces().getSchemaCompatibilityStrategy(namespace));

      admin.namespaces().setDelayedDeliveryMessages(namespace,
          DelayedDeliveryPolicies.builder().active(true).tickTime(500).maxDeliveryDelayInMillis(60_000).build());
      DelayedDeliveryPolicies delayed = admin.namespaces().getDelayedDelivery(namespace);
      assertEquals(500, delayed.getTickTime());
      assertEquals(60_000, delayed.getMaxDeliveryDelayInMillis());
      admin.namespaces().removeDelayedDeliveryMessages(namespace);

      BacklogQuota quota = BacklogQuota.builder().limitSize(10L * 1024 * 1024)
          .retentionPolicy(BacklogQuota.RetentionPolicy.producer_request_hold).build();
      admin.namespaces().setBacklogQuota(namespace, quota);
      assertEquals(10L * 1024 * 1024, admin.namespaces().getBacklogQuotaMap(namespace)
          .get(BacklogQuota.BacklogQuotaType.destination_storage).getLimitSize());
      admin.namespaces().removeBacklogQuota(namespace);
      assertTrue(admin.namespaces().getBacklogQuotaMap(namespace).isEmpty());

      InactiveTopicPolicies inactive =
          new InactiveTopicPolicies(InactiveTopicDeleteMode.delete_when_no_subscriptions, 600, true);
      admin.namespaces().setInactiveTopicPolicies(namespace, inactive);
      assertEquals(inactive, admin.namespaces().getInactiveTopicPolicies(namespace));

      admin.namespaces().setCompactionThreshold(namespace, 1024 * 1024);
      assertEquals(1024 * 1024, admin.namespaces().getCompactionThreshold(namespace));

      admin.namespaces().grantPermissionOnNamespace(namespace, "reader", Set.of(AuthAction.consume));
      assertEquals(Set.of(AuthAction.consume), admin.namespaces().getPermissions(namespace).get("reader"));
      admin.namespaces().revokePermissionsOnNamespace(namespace, "reader");
      assertFalse(admin.namespaces().getPermissions(namespace).containsKey("reader"));

      Policies policies = admin.namespaces().getPolicies(namespace);
      assertEquals(new RetentionPolicies(60, 100), policies.retention_policies);
      assertEquals(SchemaCompatibilityStrategy.FORWARD, policies.schema_compatibility_strategy);
    } finally {
      admin.namespaces().deleteNamespace(namespace);
    }
  }

  @Test
  void topicsCreateListStatsAndDelete() throws Exception {
    String topic = HoraeEnv.topic("admin-topic");
    String partitioned = HoraeEnv.topic("admin-partitioned");
    admin.topics().createNonPartitionedTopic(topic);
    admin.topics().createPartitionedTopic(partitioned, 2);
    assertTrue(admin.topics().getList("public/default").contains(topic));
    assertTrue(admin.topics().getPartitionedTopicList("public/default").contains(partitioned));
    assertEquals(2, admin.topics().getPartitionedTopicMetadata(partitioned).partitions);
    admin.topics().updatePartitionedTopic(partitioned, 3);
    assertEquals(3, admin.topics().getPartitionedTopicMetadata(partitioned).partitions);
    assertThrows(PulsarAdminException.ConflictException.class,
        () -> admin.topics().createNonPartitionedTopic(topic));

    admin.topics().createSubscription(topic, "sub", MessageId.earliest);
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
        .enableBatching(false).create()) {
      for (int i = 0; i < 3; i++) {
        producer.send("m" + i);
      }
    }
    TopicStats stats = admin.topics().getStats(topic);
    assertEquals(3, stats.getMsgInCounter());
    assertEquals(3, stats.getSubscriptions().get("sub").getMsgBacklog());
    PersistentTopicInternalStats internal = admin.topics().getInternalStats(topic);
    assertEquals(3, internal.numberOfEntries);
    assertTrue(internal.cursors.containsKey("sub"));

    List<Message<byte[]>> peeked = admin.topics().peekMessages(topic, "sub", 2);
    assertEquals(List.of("m0", "m1"), peeked.stream().map(m -> new String(m.getData())).toList());
    Message<byte[]> examined = admin.topics().examineMessage(topic, "latest", 1);
    assertEquals("m2", new String(examined.getData()));

    admin.topics().skipMessages(topic, "sub", 1);
    assertEquals(2, admin.topics().getStats(topic).getSubscriptions().get("sub").getMsgBacklog());
    admin.topics().skipAllMessages(topic, "sub");
    assertEquals(0, admin.topics().getStats(topic).getSubscriptions().get("sub").getMsgBacklog());
    admin.topics().resetCursor(topic, "sub", MessageId.earliest);
    assertEquals(3, admin.topics().getStats(topic).getSubscriptions().get("sub").getMsgBacklog());
    admin.topics().resetCursor(topic, "sub", System.currentTimeMillis() + 60_000);
    assertEquals(0, admin.topics().getStats(topic).getSubscriptions().get("sub").getMsgBacklog());

    admin.topics().createSubscription(topic, "second", MessageId.latest);
    assertEquals(Set.of("sub", "second"), Set.copyOf(admin.topics().getSubscriptions(topic)));
    admin.topics().deleteSubscription(topic, "second");
    assertEquals(List.of("sub"), admin.topics().getSubscriptions(topic));

    admin.topics().grantPermission(topic, "app", Set.of(AuthAction.produce));
    Map<String, Set<AuthAction>> grants = admin.topics().getPermissions(topic);
    assertEquals(Set.of(AuthAction.produce), grants.get("app"));
    admin.topics().revokePermissions(topic, "app");

    admin.topicPolicies().setMessageTTL(topic, 120);
    HoraeEnv.waitUntil("the topic TTL is set", () -> {
      try {
        return Integer.valueOf(120).equals(admin.topicPolicies().getMessageTTL(topic));
      } catch (Exception e) {
        return false;
      }
    });

    admin.topics().unload(topic);
    assertEquals(3, admin.topics().getInternalStats(topic).numberOfEntries, "the data survives an unload");
    PartitionedTopicStats partitionedStats = admin.topics().getPartitionedStats(partitioned, true);
    assertEquals(3, partitionedStats.getMetadata().partitions);

    admin.topics().delete(topic);
    assertFalse(admin.topics().getList("public/default").contains(topic));
    admin.topics().deletePartitionedTopic(partitioned);
    assertFalse(admin.topics().getPartitionedTopicList("public/default").contains(partitioned));
    assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.topics().getStats(topic));
  }

  @Test
  void lookupsBrokersAndTopicOperations() throws Exception {
    String topic = HoraeEnv.topic("admin-ops");
    admin.topics().createNonPartitionedTopic(topic);
    assertEquals(HoraeEnv.serviceUrl(), admin.lookups().lookupTopic(topic));
    assertFalse(admin.brokers().getActiveBrokers("standalone").isEmpty());
    assertNotNull(admin.brokers().getLeaderBroker().getServiceUrl());

    admin.topics().createSubscription(topic, "sub", MessageId.latest);
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
        .enableBatching(false).create()) {
      producer.newMessage().key("k").value("old").send();
      producer.newMessage().key("k").value("new").send();
    }
    admin.topics().expireMessagesForAllSubscriptions(topic, 0);
    assertEquals(2, admin.topics().getStats(topic).getSubscriptions().get("sub").getMsgBacklog(),
        "a time of 0 s expires nothing (Pulsar's isEntryExpired)");
    admin.topics().expireMessagesForAllSubscriptions(topic, -1);
    HoraeEnv.waitUntil("expired messages leave the backlog", () -> {
      try {
        return admin.topics().getStats(topic).getSubscriptions().get("sub").getMsgBacklog() == 0;
      } catch (Exception e) {
        return false;
      }
    });

    admin.topics().triggerCompaction(topic);
    HoraeEnv.waitUntil("compaction succeeds", () -> {
      try {
        return admin.topics().compactionStatus(topic).status == LongRunningProcessStatus.Status.SUCCESS;
      } catch (Exception e) {
        return false;
      }
    });

    admin.topicPolicies().setRetention(topic, new RetentionPolicies(10, 10));
    HoraeEnv.waitUntil("the topic retention is set", () -> {
      try {
        return new RetentionPolicies(10, 10).equals(admin.topicPolicies().getRetention(topic));
      } catch (Exception e) {
        return false;
      }
    });
    admin.topicPolicies().setSchemaCompatibilityStrategy(topic, SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE);
    HoraeEnv.waitUntil("the topic schema strategy is set", () -> {
      try {
        return admin.topicPolicies().getSchemaCompatibilityStrategy(topic, false)
            == SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE;
      } catch (Exception e) {
        return false;
      }
    });

    String partitioned = HoraeEnv.topic("admin-terminate-partitioned");
    admin.topics().createPartitionedTopic(partitioned, 2);
    assertEquals(2, admin.topics().getPartitionedInternalStats(partitioned).partitions.size());
    assertEquals(2, admin.topics().terminatePartitionedTopic(partitioned).size());
    assertThrows(PulsarClientException.TopicTerminatedException.class,
        () -> client.newProducer(Schema.STRING).topic(partitioned + "-partition-0").create());
  }

  @Test
  void schemasThroughTheRegistryApi() throws Exception {
    String topic = HoraeEnv.topic("admin-schema");
    SchemaInfo info = Schema.AVRO(SchemaTest.User.class).getSchemaInfo();
    admin.schemas().createSchema(topic, info);
    SchemaInfo stored = admin.schemas().getSchemaInfo(topic);
    assertEquals(SchemaType.AVRO, stored.getType());
    assertEquals(info.getSchemaDefinition(), stored.getSchemaDefinition());
    assertEquals(1, admin.schemas().getAllSchemas(topic).size());
    assertTrue(admin.schemas().testCompatibility(topic, info).isCompatibility(),
        "a schema is compatible with itself");
    admin.schemas().deleteSchema(topic);
    assertThrows(PulsarAdminException.NotFoundException.class, () -> admin.schemas().getSchemaInfo(topic));
  }
}
