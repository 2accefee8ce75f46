package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.junit.jupiter.api.Test;

/**
 * Broker entry metadata: on a broker with both interceptors and exposingBrokerEntryMetadataToClientEnabled,
 * {@code getBrokerPublishTime()} is the broker's clock and {@code getIndex()} the topic's message
 * index, batch-aware, in consumers and in peeked messages; on a broker without them, both are empty.
 */
class BrokerEntryMetadataTest extends BrokerTestBase {

  private static String serviceUrl() {
    return HoraeEnv.required("horae.entryMetadataServiceUrl", "HORAE_ENTRY_METADATA_SERVICE_URL");
  }

  private static String webUrl() {
    return HoraeEnv.required("horae.entryMetadataWebUrl", "HORAE_ENTRY_METADATA_WEB_URL");
  }

  /** One message, a batch of three, one message. */
  private static void publish(PulsarClient pulsar, String topic) throws Exception {
    try (Producer<String> single = pulsar.newProducer(Schema.STRING).topic(topic)
            .enableBatching(false).create();
        Producer<String> batched = pulsar.newProducer(Schema.STRING).topic(topic)
            .enableBatching(true).batchingMaxMessages(3)
            .batchingMaxPublishDelay(1, TimeUnit.MINUTES).create()) {
      single.send("m0");
      List<CompletableFuture<MessageId>> sends = new ArrayList<>();
      for (int i = 1; i <= 3; i++) {
        sends.add(batched.sendAsync("m" + i));
      }
      CompletableFuture.allOf(sends.toArray(new CompletableFuture[0])).get(20, TimeUnit.SECONDS);
      single.send("m4");
    }
  }

  @Test
  void consumersSeeTheBrokerPublishTimeAndTheBatchAwareIndex() throws Exception {
    String topic = HoraeEnv.topic("entry-metadata");
    try (PulsarClient pulsar = PulsarClient.builder().serviceUrl(serviceUrl())
            .operationTimeout(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS).build();
        Consumer<String> consumer = pulsar.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub")
            .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
      long before = System.currentTimeMillis();
      publish(pulsar, topic);
      long after = System.currentTimeMillis();
      List<Message<String>> messages = receive(consumer, 5);
      List<String> values = new ArrayList<>();
      List<Optional<Long>> indexes = new ArrayList<>();
      for (Message<String> message : messages) {
        values.add(message.getValue());
        indexes.add(message.getIndex());
        Optional<Long> brokerTime = message.getBrokerPublishTime();
        assertTrue(brokerTime.isPresent(), "no broker publish time on " + message.getValue());
        assertTrue(before <= brokerTime.get() && brokerTime.get() <= after,
            brokerTime.get() + " not within [" + before + ", " + after + "]");
        assertTrue(message.hasBrokerPublishTime());
        assertTrue(message.hasIndex());
      }
      assertEquals(List.of("m0", "m1", "m2", "m3", "m4"), values);
      assertEquals(List.of(Optional.of(0L), Optional.of(1L), Optional.of(2L), Optional.of(3L),
          Optional.of(4L)), indexes);
    }
  }

  @Test
  void peekedMessagesCarryTheEntryMetadata() throws Exception {
    String topic = HoraeEnv.topic("entry-metadata-peek");
    try (PulsarClient pulsar = PulsarClient.builder().serviceUrl(serviceUrl()).build();
        PulsarAdmin entryAdmin = PulsarAdmin.builder().serviceHttpUrl(webUrl()).build()) {
      entryAdmin.topics().createSubscription(topic, "peek", MessageId.earliest);
      publish(pulsar, topic);
      List<Message<byte[]>> peeked = entryAdmin.topics().peekMessages(topic, "peek", 1);
      assertEquals(1, peeked.size());
      assertEquals(Optional.of(0L), peeked.get(0).getIndex());
      assertTrue(peeked.get(0).getBrokerPublishTime().isPresent());
    }
  }

  @Test
  void withoutInterceptorsThereIsNone() throws Exception {
    String topic = HoraeEnv.topic("entry-metadata-off");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub")
            .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
      publish(client, topic);
      for (Message<String> message : receive(consumer, 5)) {
        assertEquals(Optional.empty(), message.getIndex());
        assertEquals(Optional.empty(), message.getBrokerPublishTime());
      }
    }
  }
}
