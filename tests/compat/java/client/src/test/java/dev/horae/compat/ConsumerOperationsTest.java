package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageRoutingMode;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

/** Partitioned topics, seek, the last message id and ack timeouts. */
class ConsumerOperationsTest extends BrokerTestBase {

  @Test
  void aPartitionedTopicSpreadsAndDeliversEveryMessage() throws Exception {
    String topic = HoraeEnv.topic("partitioned");
    admin.topics().createPartitionedTopic(topic, 3);
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
            .messageRoutingMode(MessageRoutingMode.RoundRobinPartition).enableBatching(false).create()) {
      Set<String> sent = new HashSet<>();
      for (int i = 0; i < 30; i++) {
        producer.send("m" + i);
        sent.add("m" + i);
      }
      List<Message<String>> received = receive(consumer, 30);
      assertEquals(sent, new HashSet<>(values(received)));
      Set<String> partitions = new HashSet<>();
      received.forEach(m -> partitions.add(m.getTopicName()));
      assertEquals(3, partitions.size(), "round robin reaches every partition: " + partitions);
    }
  }

  @Test
  void seekByMessageIdAndByTimeReplays() throws Exception {
    String topic = HoraeEnv.topic("seek");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
            .enableBatching(false).create()) {
      List<MessageId> ids = new ArrayList<>();
      for (int i = 0; i < 5; i++) {
        ids.add(producer.send("m" + i));
      }
      assertEquals(ids.get(4), consumer.getLastMessageId());
      List<Message<String>> first = receive(consumer, 5);
      consumer.seek(ids.get(2));
      // Seeking to an id makes the next message the one after it, as Pulsar's non-inclusive seek.
      assertEquals(List.of("m3", "m4"), values(receive(consumer, 2)));
      consumer.seek(first.get(0).getPublishTime());
      assertEquals(List.of("m0", "m1", "m2", "m3", "m4"), values(receive(consumer, 5)));
      consumer.seek(MessageId.earliest);
      assertEquals("m0", receive(consumer, 1).get(0).getValue());
    }
  }

  @Test
  void anUnacknowledgedMessageIsRedeliveredAfterTheAckTimeout() throws Exception {
    String topic = HoraeEnv.topic("ack-timeout");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscriptionType(SubscriptionType.Shared)
            .ackTimeout(1, TimeUnit.SECONDS).ackTimeoutTickTime(100, TimeUnit.MILLISECONDS).subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      producer.send("forgotten");
      Message<String> first = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
      assertNotNull(first);
      Message<String> again = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
      assertNotNull(again, "not redelivered after the ack timeout");
      assertEquals(first.getMessageId(), again.getMessageId());
      assertEquals(1, again.getRedeliveryCount());
      consumer.acknowledge(again);
    }
  }

  @Test
  void subscriptionPropertiesAreKeptAndShownAndUpdatedByTheAdmin() throws Exception {
    String topic = HoraeEnv.topic("sub-props");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscriptionProperties(Map.of("team", "billing"))
            .subscribe()) {
      assertEquals(Map.of("team", "billing"),
          admin.topics().getSubscriptionProperties(topic, "sub"));
      assertEquals(Map.of("team", "billing"),
          admin.topics().getStats(topic).getSubscriptions().get("sub").getSubscriptionProperties());
      admin.topics().updateSubscriptionProperties(topic, "sub", Map.of("team", "payments"));
      assertEquals(Map.of("team", "payments"),
          admin.topics().getSubscriptionProperties(topic, "sub"));
    }
  }
}
