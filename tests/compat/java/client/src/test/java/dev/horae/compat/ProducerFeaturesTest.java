package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** Batching, chunking, compression, exclusive producers and de-duplication. */
class ProducerFeaturesTest extends BrokerTestBase {

  private Consumer<byte[]> subscribe(String topic) throws PulsarClientException {
    return client.newConsumer().topic(topic).subscriptionName("sub")
        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
  }

  @Test
  void batchedMessagesArriveInOrderWithBatchIndexes() throws Exception {
    String topic = HoraeEnv.topic("batching");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
            .enableBatching(true).batchingMaxMessages(10)
            .batchingMaxPublishDelay(1, java.util.concurrent.TimeUnit.SECONDS).create()) {
      List<CompletableFuture<MessageId>> sends = new ArrayList<>();
      List<String> expected = new ArrayList<>();
      for (int i = 0; i < 25; i++) {
        sends.add(producer.sendAsync("m" + i));
        expected.add("m" + i);
      }
      producer.flush();
      CompletableFuture.allOf(sends.toArray(new CompletableFuture[0])).get();
      List<Message<String>> received = receive(consumer, 25);
      assertEquals(expected, values(received));
      MessageIdAdv first = (MessageIdAdv) received.get(0).getMessageId();
      assertEquals(0, first.getBatchIndex());
      assertEquals(10, first.getBatchSize());
      MessageIdAdv last = (MessageIdAdv) received.get(24).getMessageId();
      assertEquals(4, last.getBatchIndex());
      assertEquals(5, last.getBatchSize());
    }
  }

  @Test
  void aMessageLargerThanMaxMessageSizeIsChunkedAndReassembled() throws Exception {
    String topic = HoraeEnv.topic("chunking");
    byte[] payload = new byte[6 * 1024 * 1024];
    new Random(42).nextBytes(payload);
    try (Consumer<byte[]> consumer = subscribe(topic);
        Producer<byte[]> producer = client.newProducer().topic(topic)
            .enableBatching(false).enableChunking(true).create()) {
      producer.send(payload);
      producer.send("after".getBytes());
      List<Message<byte[]>> received = receive(consumer, 2);
      assertArrayEquals(payload, received.get(0).getValue());
      assertEquals("after", new String(received.get(1).getValue()));
    }
    assertTrue(admin.topics().getInternalStats(topic).numberOfEntries >= 3,
        "the large message was stored as several chunks");
  }

  @Test
  void aMessageLargerThanMaxMessageSizeWithoutChunkingIsRefused() throws Exception {
    String topic = HoraeEnv.topic("no-chunking");
    try (Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(false).create()) {
      assertThrows(PulsarClientException.InvalidMessageException.class,
          () -> producer.send(new byte[6 * 1024 * 1024]));
    }
  }

  @ParameterizedTest
  @EnumSource(value = CompressionType.class, names = {"LZ4", "ZSTD", "SNAPPY", "ZLIB"})
  void compressedMessagesAreDelivered(CompressionType compression) throws Exception {
    String topic = HoraeEnv.topic("compression-" + compression.name().toLowerCase());
    String big = "horae ".repeat(2000);
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscribe();
        Producer<String> batched = client.newProducer(Schema.STRING).topic(topic)
            .compressionType(compression).enableBatching(true).create();
        Producer<String> single = client.newProducer(Schema.STRING).topic(topic)
            .compressionType(compression).enableBatching(false).create()) {
      List<String> expected = new ArrayList<>();
      for (int i = 0; i < 5; i++) {
        batched.sendAsync(big + i);
        expected.add(big + i);
      }
      batched.flush();
      single.send(big + "single");
      expected.add(big + "single");
      assertEquals(expected, values(receive(consumer, 6)));
    }
    long stored = admin.topics().getStats(topic).getBytesInCounter();
    assertTrue(stored < 6L * big.length() / 4, "stored compressed: " + stored + " bytes in");
  }

  @Test
  void anExclusiveProducerKeepsOthersOut() throws Exception {
    String topic = HoraeEnv.topic("exclusive-producer");
    try (Producer<String> owner = client.newProducer(Schema.STRING).topic(topic)
        .accessMode(ProducerAccessMode.Exclusive).create()) {
      PulsarClientException second = assertThrows(PulsarClientException.class,
          () -> client.newProducer(Schema.STRING).topic(topic)
              .accessMode(ProducerAccessMode.Exclusive).create());
      assertTrue(second instanceof PulsarClientException.ProducerFencedException, second.toString());
      PulsarClientException shared = assertThrows(PulsarClientException.class,
          () -> client.newProducer(Schema.STRING).topic(topic).create());
      assertTrue(shared instanceof PulsarClientException.ProducerBusyException, shared.toString());
      owner.send("still mine");
    }
    // Once the owner leaves, another exclusive producer may take the topic.
    try (Producer<String> next = client.newProducer(Schema.STRING).topic(topic)
        .accessMode(ProducerAccessMode.Exclusive).create()) {
      next.send("now mine");
    }
  }

  @Test
  void aResentSequenceIdIsStoredOnce() throws Exception {
    String topic = HoraeEnv.topic("dedup");
    admin.topics().createNonPartitionedTopic(topic);
    admin.topicPolicies().setDeduplicationStatus(topic, true);
    HoraeEnv.waitUntil("deduplication on", () -> {
      try {
        return Boolean.TRUE.equals(admin.topicPolicies().getDeduplicationStatus(topic));
      } catch (Exception e) {
        return false;
      }
    });
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
        .subscriptionName("sub").subscribe()) {
      try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
          .producerName("dedup-producer").enableBatching(false).create()) {
        for (long seq = 1; seq <= 3; seq++) {
          producer.newMessage().sequenceId(seq).value("m" + seq).send();
        }
      }
      try (Producer<String> again = client.newProducer(Schema.STRING).topic(topic)
          .producerName("dedup-producer").enableBatching(false).create()) {
        assertEquals(3, again.getLastSequenceId(), "the broker remembers the last sequence id");
        again.newMessage().sequenceId(2).value("m2 again").send();
        again.newMessage().sequenceId(3).value("m3 again").send();
        again.newMessage().sequenceId(4).value("m4").send();
      }
      assertEquals(List.of("m1", "m2", "m3", "m4"), values(receive(consumer, 4)));
    }
    assertEquals(4, admin.topics().getStats(topic).getMsgInCounter());
  }
}
