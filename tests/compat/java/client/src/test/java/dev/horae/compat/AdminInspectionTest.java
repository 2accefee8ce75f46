package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.impl.MessageIdImpl;
import org.apache.pulsar.common.conf.InternalConfigurationData;
import org.apache.pulsar.common.policies.data.NamespaceOwnershipStatus;
import org.apache.pulsar.common.stats.AnalyzeSubscriptionBacklogResult;
import org.junit.jupiter.api.Test;

/** Inspection and maintenance of topics and namespaces, properties, and the brokers' routes, through PulsarAdmin. */
class AdminInspectionTest extends BrokerTestBase {

  private List<MessageId> produce(String topic, int n) throws Exception {
    List<MessageId> ids = new ArrayList<>();
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
        .enableBatching(false).create()) {
      for (int i = 0; i < n; i++) {
        ids.add(producer.newMessage().key("k" + i).property("p", "v" + i).value("m" + i).send());
      }
    }
    return ids;
  }

  @Test
  void messagesByIdTimeAndPosition() throws Exception {
    String topic = HoraeEnv.topic("inspect");
    admin.topics().createSubscription(topic, "sub", MessageId.earliest);
    long before = System.currentTimeMillis();
    List<MessageId> ids = produce(topic, 4);

    MessageIdImpl second = (MessageIdImpl) ids.get(1);
    Message<byte[]> byId = admin.topics().getMessageById(topic, second.getLedgerId(), second.getEntryId());
    assertEquals("m1", new String(byId.getData()));
    assertEquals("k1", byId.getKey());
    assertEquals("v1", byId.getProperty("p"));
    // an entry past the end: Horae answers 404, Pulsar 4.0 a 500 from the failed read
    assertThrows(PulsarAdminException.class,
        () -> admin.topics().getMessageById(topic, second.getLedgerId(), second.getEntryId() + 100));

    assertEquals(ids.get(3), admin.topics().getLastMessageId(topic));
    MessageId atStart = admin.topics().getMessageIdByTimestamp(topic, before);
    assertEquals(ids.get(0), atStart, "the first message published at or after the time");

    List<Message<byte[]>> peeked = admin.topics().peekMessages(topic, "sub", 3);
    assertEquals(List.of("m0", "m1", "m2"), peeked.stream().map(m -> new String(m.getData())).toList());
    assertEquals("k2", peeked.get(2).getKey());
    Message<byte[]> first = admin.topics().examineMessage(topic, "earliest", 1);
    assertEquals("m0", new String(first.getData()));

    assertEquals(4, admin.topics().getStats(topic).getSubscriptions().get("sub").getMsgBacklog());
    Long backlogSize = admin.topics().getBacklogSizeByMessageId(topic, MessageId.earliest);
    assertTrue(backlogSize != null && backlogSize > 0, "backlog size " + backlogSize);
    AnalyzeSubscriptionBacklogResult analysis =
        admin.topics().analyzeSubscriptionBacklog(topic, "sub", Optional.empty());
    assertEquals(4, analysis.getMessages());
    assertEquals(4, analysis.getEntries());

    String info = admin.topics().getInternalInfo(topic);
    assertTrue(info.contains("\"version\"") || info.contains("ledgers"), info);

    admin.topics().trimTopic(topic);
    assertEquals(4, admin.topics().getStats(topic).getSubscriptions().get("sub").getMsgBacklog(),
        "a trim keeps what a subscription has not acknowledged");
  }

  @Test
  void truncateAndCreateMissedPartitions() throws Exception {
    String topic = HoraeEnv.topic("truncate");
    admin.topics().createSubscription(topic, "sub", MessageId.earliest);
    produce(topic, 3);
    admin.topics().truncate(topic);
    HoraeEnv.waitUntil("the truncated topic has no backlog", () -> {
      try {
        return admin.topics().getStats(topic).getSubscriptions().get("sub").getMsgBacklog() == 0;
      } catch (Exception e) {
        return false;
      }
    });

    String partitioned = HoraeEnv.topic("missed");
    admin.topics().createPartitionedTopic(partitioned, 2);
    admin.topics().createMissedPartitions(partitioned);
    List<String> topics = admin.topics().getList("public/default");
    assertTrue(topics.contains(partitioned + "-partition-0"), topics.toString());
    assertTrue(topics.contains(partitioned + "-partition-1"), topics.toString());
  }

  @Test
  void topicAndSubscriptionProperties() throws Exception {
    String topic = HoraeEnv.topic("props");
    admin.topics().createNonPartitionedTopic(topic, Map.of("owner", "ops"));
    assertEquals(Map.of("owner", "ops"), admin.topics().getProperties(topic));
    admin.topics().updateProperties(topic, Map.of("team", "a"));
    assertEquals(Map.of("owner", "ops", "team", "a"), admin.topics().getProperties(topic));
    admin.topics().removeProperties(topic, "owner");
    assertEquals(Map.of("team", "a"), admin.topics().getProperties(topic));

    try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName("sub")
        .subscriptionProperties(Map.of("at", "subscribe")).subscribe()) {
      assertEquals(Map.of("at", "subscribe"), admin.topics().getSubscriptionProperties(topic, "sub"));
      admin.topics().updateSubscriptionProperties(topic, "sub", Map.of("set", "later"));
      assertEquals(Map.of("set", "later"), admin.topics().getSubscriptionProperties(topic, "sub"));
      assertEquals(Map.of("set", "later"),
          admin.topics().getStats(topic).getSubscriptions().get("sub").getSubscriptionProperties());
    }
  }

  @Test
  void namespaceMaintenance() throws Exception {
    String ns = "public/maint-" + UUID.randomUUID().toString().substring(0, 8);
    admin.namespaces().createNamespace(ns);
    String a = "persistent://" + ns + "/a";
    String b = "persistent://" + ns + "/b";
    for (String topic : List.of(a, b)) {
      admin.topics().createSubscription(topic, "keep", MessageId.earliest);
      admin.topics().createSubscription(topic, "drop", MessageId.earliest);
      produce(topic, 2);
    }
    admin.namespaces().unsubscribeNamespace(ns, "drop");
    assertEquals(List.of("keep"), admin.topics().getSubscriptions(a));
    assertEquals(List.of("keep"), admin.topics().getSubscriptions(b));
    assertEquals(2, admin.topics().getStats(a).getSubscriptions().get("keep").getMsgBacklog());
    admin.namespaces().clearNamespaceBacklog(ns);
    assertEquals(0, admin.topics().getStats(a).getSubscriptions().get("keep").getMsgBacklog());
    assertEquals(0, admin.topics().getStats(b).getSubscriptions().get("keep").getMsgBacklog());
    admin.namespaces().unload(ns);
    assertEquals(2, admin.topics().getInternalStats(a).numberOfEntries, "the data survives an unload");
  }

  @Test
  void brokersConfigurationAndVersion() throws Exception {
    var brokers = admin.brokers();
    List<String> names = brokers.getDynamicConfigurationNames();
    String key = "dispatchThrottlingRatePerTopicInMsg";
    assertTrue(names.contains(key), names.toString());
    brokers.updateDynamicConfiguration(key, "1000");
    HoraeEnv.waitUntil("the dynamic value is listed", () -> {
      try {
        return "1000".equals(brokers.getAllDynamicConfigurations().get(key));
      } catch (Exception e) {
        return false;
      }
    });
    HoraeEnv.waitUntil("the dynamic value is in force", () -> {
      try {
        return "1000".equals(brokers.getRuntimeConfigurations().get(key));
      } catch (Exception e) {
        return false;
      }
    });
    brokers.deleteDynamicConfiguration(key);
    HoraeEnv.waitUntil("the dynamic value is gone", () -> {
      try {
        return !brokers.getAllDynamicConfigurations().containsKey(key);
      } catch (Exception e) {
        return false;
      }
    });
    PulsarAdminException notDynamic = assertThrows(PulsarAdminException.class,
        () -> brokers.updateDynamicConfiguration("brokerServicePort", "1"));
    assertEquals(412, notDynamic.getStatusCode());

    Map<String, String> runtime = brokers.getRuntimeConfigurations();
    assertTrue(runtime.containsKey("brokerServicePort"), runtime.keySet().toString());
    InternalConfigurationData internal = brokers.getInternalConfigurationData();
    assertNotNull(internal);
    String version = brokers.getVersion();
    assertFalse(version == null || version.isBlank());

    String broker = brokers.getActiveBrokers("standalone").get(0);
    Map<String, NamespaceOwnershipStatus> owned = brokers.getOwnedNamespaces("standalone", broker);
    assertTrue(owned.keySet().stream().anyMatch(bundle -> bundle.startsWith("public/default/")), owned.toString());
    brokers.backlogQuotaCheck();
  }
}
