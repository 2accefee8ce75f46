package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.TableView;
import org.junit.jupiter.api.Test;

/** Readers, TableView and pattern subscriptions. */
class ReaderTest extends BrokerTestBase {

  private List<MessageId> produce(String topic, int n) throws Exception {
    List<MessageId> ids = new ArrayList<>();
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
        .enableBatching(false).create()) {
      for (int i = 0; i < n; i++) {
        ids.add(producer.send("m" + i));
      }
    }
    return ids;
  }

  private static List<String> readAll(Reader<String> reader) throws Exception {
    List<String> read = new ArrayList<>();
    while (reader.hasMessageAvailable()) {
      Message<String> message = reader.readNext(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
      assertNotNull(message, "hasMessageAvailable said yes but nothing came");
      read.add(message.getValue());
    }
    return read;
  }

  @Test
  void aReaderFromEarliestReadsEverythingThenHasNothingAvailable() throws Exception {
    String topic = HoraeEnv.topic("reader-earliest");
    produce(topic, 5);
    try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic)
        .startMessageId(MessageId.earliest).create()) {
      assertEquals(List.of("m0", "m1", "m2", "m3", "m4"), readAll(reader));
      assertFalse(reader.hasMessageAvailable());
    }
  }

  @Test
  void aReaderFromAMessageIdStartsAfterItOrAtItWhenInclusive() throws Exception {
    String topic = HoraeEnv.topic("reader-id");
    List<MessageId> ids = produce(topic, 5);
    try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic)
        .startMessageId(ids.get(2)).create()) {
      assertEquals(List.of("m3", "m4"), readAll(reader));
    }
    try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic)
        .startMessageId(ids.get(2)).startMessageIdInclusive().create()) {
      assertEquals(List.of("m2", "m3", "m4"), readAll(reader));
    }
  }

  @Test
  void aReaderFromLatestSeesOnlyNewMessages() throws Exception {
    String topic = HoraeEnv.topic("reader-latest");
    produce(topic, 3);
    try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic)
        .startMessageId(MessageId.latest).create()) {
      assertFalse(reader.hasMessageAvailable());
      try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
        producer.send("new");
      }
      assertTrue(reader.hasMessageAvailable());
      assertEquals("new", reader.readNext(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS).getValue());
    }
  }

  @Test
  void aTableViewHoldsTheLatestValuePerKeyAndFollowsUpdates() throws Exception {
    String topic = HoraeEnv.topic("table-view");
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      producer.newMessage().key("k1").value("v1").send();
      producer.newMessage().key("k2").value("v2").send();
      producer.newMessage().key("k1").value("v3").send();
      try (TableView<String> table = client.newTableView(Schema.STRING).topic(topic).create()) {
        assertEquals(Map.of("k1", "v3", "k2", "v2"), Map.copyOf(toMap(table)));
        Map<String, String> seen = new ConcurrentHashMap<>();
        table.forEachAndListen(seen::put);
        producer.newMessage().key("k2").value("v4").send();
        HoraeEnv.waitUntil("the table sees k2=v4", () -> "v4".equals(table.get("k2")));
        HoraeEnv.waitUntil("the listener sees k2=v4", () -> "v4".equals(seen.get("k2")));
        assertEquals("v3", seen.get("k1"));
      }
    }
  }

  private static Map<String, String> toMap(TableView<String> table) {
    Map<String, String> map = new ConcurrentHashMap<>();
    table.forEach(map::put);
    return map;
  }

  @Test
  void aPatternSubscriptionPicksUpANewTopic() throws Exception {
    String stem = HoraeEnv.topic("pattern");
    String first = stem + "-first";
    String second = stem + "-second";
    produce(first, 1);
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING)
        .topicsPattern(stem + "-.*")
        .patternAutoDiscoveryPeriod(1, TimeUnit.SECONDS)
        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
        .subscriptionName("sub").subscribe()) {
      Message<String> fromFirst = receive(consumer, 1).get(0);
      assertEquals("m0", fromFirst.getValue());
      assertEquals(first, fromFirst.getTopicName());
      try (Producer<String> producer = client.newProducer(Schema.STRING).topic(second).create()) {
        producer.send("on the new topic");
      }
      Message<String> fromSecond = receive(consumer, 1).get(0);
      assertEquals("on the new topic", fromSecond.getValue());
      assertEquals(second, fromSecond.getTopicName());
    }
  }

  @Test
  void aPatternConsumerLearnsOfANewTopicFromItsTopicListWatcher() throws Exception {
    // A pattern within subscriptionPatternMaxLength (50) and no polling for an hour: only the
    // broker's WATCH_TOPIC_UPDATE can tell the consumer of the new topic.
    String stem = HoraeEnv.topic("w");
    String first = stem + "-1";
    String second = stem + "-2";
    produce(first, 1);
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING)
        .topicsPattern(stem + "-.*")
        .patternAutoDiscoveryPeriod(1, TimeUnit.HOURS)
        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
        .subscriptionName("sub").subscribe()) {
      assertEquals(first, receive(consumer, 1).get(0).getTopicName());
      try (Producer<String> producer = client.newProducer(Schema.STRING).topic(second).create()) {
        producer.send("pushed");
      }
      Message<String> fromSecond = receive(consumer, 1).get(0);
      assertEquals("pushed", fromSecond.getValue());
      assertEquals(second, fromSecond.getTopicName());
    }
  }
}
