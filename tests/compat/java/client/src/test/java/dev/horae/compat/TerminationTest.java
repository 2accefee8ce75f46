package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.Schema;
import org.junit.jupiter.api.Test;

/** A terminated topic: the end is reached, and no producer may come back. */
class TerminationTest extends BrokerTestBase {

  @Test
  void consumersAndReadersReachTheEndOfATerminatedTopic() throws Exception {
    String topic = HoraeEnv.topic("terminate");
    List<MessageId> ids = new ArrayList<>();
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
            .enableBatching(false).create()) {
      for (int i = 0; i < 3; i++) {
        ids.add(producer.send("m" + i));
      }
      assertFalse(consumer.hasReachedEndOfTopic());
      MessageId last = admin.topics().terminateTopic(topic);
      assertEquals(ids.get(2), last);
      assertEquals(List.of("m0", "m1", "m2"), values(receive(consumer, 3)));
      HoraeEnv.waitUntil("the consumer reaches the end of the topic", consumer::hasReachedEndOfTopic);
      assertThrows(PulsarClientException.TopicTerminatedException.class, () -> producer.send("late"));
    }
    assertThrows(PulsarClientException.TopicTerminatedException.class,
        () -> client.newProducer(Schema.STRING).topic(topic).create());
    try (Reader<String> reader = client.newReader(Schema.STRING).topic(topic)
        .startMessageId(MessageId.earliest).create()) {
      for (int i = 0; i < 3; i++) {
        Message<String> message = reader.readNext(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
        assertEquals("m" + i, message.getValue());
      }
      HoraeEnv.waitUntil("the reader reaches the end of the topic", reader::hasReachedEndOfTopic);
    }
  }
}
