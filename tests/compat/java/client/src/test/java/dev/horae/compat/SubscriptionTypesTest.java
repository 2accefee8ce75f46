package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

/** Produce and consume on each of the four subscription types. */
class SubscriptionTypesTest extends BrokerTestBase {

  @Test
  void exclusiveDeliversInOrderAndRefusesASecondConsumer() throws Exception {
    String topic = HoraeEnv.topic("exclusive");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscriptionType(SubscriptionType.Exclusive).subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      for (int i = 0; i < 10; i++) {
        producer.send("m" + i);
      }
      List<String> expected = new ArrayList<>();
      for (int i = 0; i < 10; i++) {
        expected.add("m" + i);
      }
      assertEquals(expected, values(receive(consumer, 10)));
      assertThrows(PulsarClientException.ConsumerBusyException.class,
          () -> client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
              .subscriptionType(SubscriptionType.Exclusive).subscribe());
    }
  }

  @Test
  void sharedSpreadsMessagesOverConsumers() throws Exception {
    String topic = HoraeEnv.topic("shared");
    // Small receiver queues: neither consumer can take the whole backlog alone.
    try (Consumer<String> first = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
            .subscriptionType(SubscriptionType.Shared).receiverQueueSize(5).subscribe();
        Consumer<String> second = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
            .subscriptionType(SubscriptionType.Shared).receiverQueueSize(5).subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
            .enableBatching(false).create()) {
      for (int i = 0; i < 30; i++) {
        producer.sendAsync("m" + i);
      }
      producer.flush();
      Set<String> seenByFirst = new HashSet<>();
      Set<String> seenBySecond = new HashSet<>();
      long deadline = System.nanoTime() + HoraeEnv.WAIT.toNanos();
      while (seenByFirst.size() + seenBySecond.size() < 30 && System.nanoTime() < deadline) {
        for (Consumer<String> consumer : List.of(first, second)) {
          Message<String> message = consumer.receive(100, TimeUnit.MILLISECONDS);
          if (message != null) {
            consumer.acknowledge(message);
            assertTrue((consumer == first ? seenByFirst : seenBySecond).add(message.getValue()),
                "delivered twice: " + message.getValue());
          }
        }
      }
      Set<String> all = new HashSet<>(seenByFirst);
      all.addAll(seenBySecond);
      assertEquals(30, all.size(), "every message delivered once");
      assertEquals(30, seenByFirst.size() + seenBySecond.size(), "no message to both consumers");
      assertFalse(seenByFirst.isEmpty(), "first consumer got nothing");
      assertFalse(seenBySecond.isEmpty(), "second consumer got nothing");
    }
  }

  @Test
  void failoverDeliversToOneActiveConsumerAndFailsOverWhenItLeaves() throws Exception {
    String topic = HoraeEnv.topic("failover");
    Map<String, List<String>> byConsumer = new ConcurrentHashMap<>();
    List<Consumer<String>> consumers = new ArrayList<>();
    for (String name : List.of("a", "b")) {
      consumers.add(client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
          .consumerName(name).subscriptionType(SubscriptionType.Failover)
          .messageListener((c, m) -> {
            byConsumer.computeIfAbsent(c.getConsumerName(), k -> new CopyOnWriteArrayList<>())
                .add(m.getValue());
            c.acknowledgeAsync(m);
          })
          .subscribe());
    }
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      for (int i = 0; i < 10; i++) {
        producer.send("first-" + i);
      }
      HoraeEnv.waitUntil("10 messages received",
          () -> byConsumer.values().stream().mapToInt(List::size).sum() == 10);
      assertEquals(1, byConsumer.size(), "one active consumer gets everything: " + byConsumer);
      String active = byConsumer.keySet().iterator().next();
      List<String> expected = new ArrayList<>();
      for (int i = 0; i < 10; i++) {
        expected.add("first-" + i);
      }
      assertEquals(expected, byConsumer.get(active));

      Consumer<String> leaving = consumers.stream()
          .filter(c -> c.getConsumerName().equals(active)).findFirst().orElseThrow();
      leaving.close();
      for (int i = 0; i < 5; i++) {
        producer.send("second-" + i);
      }
      String standby = active.equals("a") ? "b" : "a";
      HoraeEnv.waitUntil("the standby consumer receives",
          () -> byConsumer.getOrDefault(standby, List.of()).size() == 5);
      assertEquals(List.of("second-0", "second-1", "second-2", "second-3", "second-4"),
          byConsumer.get(standby));
    } finally {
      for (Consumer<String> consumer : consumers) {
        consumer.close();
      }
    }
  }

  @Test
  void keySharedKeepsEachKeyInOrderOnOneConsumer() throws Exception {
    String topic = HoraeEnv.topic("key-shared");
    Map<String, List<Integer>> byKey = new ConcurrentHashMap<>();
    Map<String, Set<String>> consumersOfKey = new ConcurrentHashMap<>();
    List<Consumer<Integer>> consumers = new ArrayList<>();
    for (String name : List.of("a", "b")) {
      consumers.add(client.newConsumer(Schema.INT32).topic(topic).subscriptionName("sub")
          .consumerName(name).subscriptionType(SubscriptionType.Key_Shared).receiverQueueSize(10)
          .messageListener((c, m) -> {
            byKey.computeIfAbsent(m.getKey(), k -> new CopyOnWriteArrayList<>()).add(m.getValue());
            consumersOfKey.computeIfAbsent(m.getKey(), k -> ConcurrentHashMap.newKeySet())
                .add(c.getConsumerName());
            c.acknowledgeAsync(m);
          })
          .subscribe());
    }
    try (Producer<Integer> producer = client.newProducer(Schema.INT32).topic(topic)
        .enableBatching(false).create()) {
      Map<String, List<Integer>> sent = new HashMap<>();
      for (int i = 0; i < 200; i++) {
        String key = "key-" + (i % 8);
        producer.newMessage().key(key).value(i).sendAsync();
        sent.computeIfAbsent(key, k -> new ArrayList<>()).add(i);
      }
      producer.flush();
      HoraeEnv.waitUntil("200 messages received",
          () -> byKey.values().stream().mapToInt(List::size).sum() == 200);
      assertEquals(sent, byKey, "each key's messages in the order sent");
      for (Map.Entry<String, Set<String>> entry : consumersOfKey.entrySet()) {
        assertEquals(1, entry.getValue().size(), entry.getKey() + " went to " + entry.getValue());
      }
    } finally {
      for (Consumer<Integer> consumer : consumers) {
        consumer.close();
      }
    }
  }
}
