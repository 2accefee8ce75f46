package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.DeadLetterPolicy;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;

/** Negative acks, dead-letter and retry topics, ack receipts, batch-index acks. */
class AcknowledgementTest extends BrokerTestBase {

  private Message<String> next(Consumer<String> consumer) throws PulsarClientException {
    Message<String> message = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
    assertNotNull(message, "nothing arrived on " + consumer.getTopic());
    return message;
  }

  @Test
  void aNegativelyAcknowledgedMessageComesBackWithItsRedeliveryCount() throws Exception {
    String topic = HoraeEnv.topic("nack");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscriptionType(SubscriptionType.Shared)
            .negativeAckRedeliveryDelay(100, TimeUnit.MILLISECONDS).subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      producer.send("try me");
      Message<String> first = next(consumer);
      assertEquals(0, first.getRedeliveryCount());
      consumer.negativeAcknowledge(first);
      Message<String> again = next(consumer);
      assertEquals("try me", again.getValue());
      assertEquals(first.getMessageId(), again.getMessageId());
      assertEquals(1, again.getRedeliveryCount());
      consumer.acknowledge(again);
    }
  }

  @Test
  void aMessageNackedTooOftenGoesToTheDeadLetterTopicsInitialSubscription() throws Exception {
    String topic = HoraeEnv.topic("dlq-source");
    String deadLetter = topic + "-DLQ";
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscriptionType(SubscriptionType.Shared)
            .negativeAckRedeliveryDelay(50, TimeUnit.MILLISECONDS)
            .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2)
                .deadLetterTopic(deadLetter).initialSubscriptionName("dlq-sub").build())
            .subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      producer.newMessage().key("k").property("origin", "test").value("poison").send();
      producer.send("fine");
      List<String> fine = new ArrayList<>();
      int poisonDeliveries = 0;
      while (poisonDeliveries < 3 || fine.isEmpty()) {
        Message<String> message = next(consumer);
        if (message.getValue().equals("poison")) {
          assertEquals(poisonDeliveries, message.getRedeliveryCount());
          poisonDeliveries++;
          consumer.negativeAcknowledge(message);
        } else {
          fine.add(message.getValue());
          consumer.acknowledge(message);
        }
      }
      // The dead-letter producer created "dlq-sub" when it was created, so a consumer that
      // subscribes only now (initial position Latest) still finds the message there.
      HoraeEnv.waitUntil("the dead letter is stored", () -> {
        try {
          return admin.topics().getStats(deadLetter).getMsgInCounter() == 1;
        } catch (Exception e) {
          return false;
        }
      });
      try (Consumer<String> dlq = client.newConsumer(Schema.STRING).topic(deadLetter)
          .subscriptionName("dlq-sub").subscribe()) {
        Message<String> dead = next(dlq);
        assertEquals("poison", dead.getValue());
        assertEquals("k", dead.getKey());
        assertEquals("test", dead.getProperty("origin"));
        assertEquals(topic, dead.getProperty("REAL_TOPIC"));
        dlq.acknowledge(dead);
      }
      assertEquals(List.of("fine"), fine);
    }
  }

  @Test
  void reconsumeLaterGoesThroughTheRetryTopicThenTheDeadLetterTopic() throws Exception {
    String topic = HoraeEnv.topic("retry-source");
    String retry = topic + "-RETRY";
    String deadLetter = topic + "-DLQ";
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscriptionType(SubscriptionType.Shared).enableRetry(true)
            .deadLetterPolicy(DeadLetterPolicy.builder().maxRedeliverCount(2)
                .retryLetterTopic(retry).deadLetterTopic(deadLetter)
                .initialSubscriptionName("dlq-sub").build())
            .subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      producer.send("later");
      List<String> topics = new ArrayList<>();
      for (int attempt = 0; attempt < 3; attempt++) {
        Message<String> message = next(consumer);
        assertEquals("later", message.getValue());
        topics.add(message.getTopicName());
        if (attempt > 0) {
          assertEquals(String.valueOf(attempt), message.getProperty("RECONSUMETIMES"));
        }
        consumer.reconsumeLater(message, 100, TimeUnit.MILLISECONDS);
      }
      assertEquals(List.of(topic, retry, retry), topics);
      HoraeEnv.waitUntil("the dead letter is stored", () -> {
        try {
          return admin.topics().getStats(deadLetter).getMsgInCounter() == 1;
        } catch (Exception e) {
          return false;
        }
      });
      try (Consumer<String> dlq = client.newConsumer(Schema.STRING).topic(deadLetter)
          .subscriptionName("dlq-sub").subscribe()) {
        assertEquals("later", next(dlq).getValue());
      }
    }
  }

  @Test
  void acknowledgementsWithReceiptsCompleteAndAreKept() throws Exception {
    String topic = HoraeEnv.topic("ack-receipt");
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
        .enableBatching(false).create()) {
      try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
          .subscriptionName("sub").subscriptionType(SubscriptionType.Shared)
          .isAckReceiptEnabled(true).subscribe()) {
        for (int i = 0; i < 4; i++) {
          producer.send("m" + i);
        }
        consumer.acknowledge(next(consumer));
        consumer.acknowledgeAsync(next(consumer).getMessageId()).get(10, TimeUnit.SECONDS);
        Message<String> third = next(consumer);
        Message<String> fourth = next(consumer);
        consumer.acknowledge(List.of(third.getMessageId(), fourth.getMessageId()));
      }
      producer.send("after");
      try (Consumer<String> reopened = client.newConsumer(Schema.STRING).topic(topic)
          .subscriptionName("sub").subscriptionType(SubscriptionType.Shared)
          .isAckReceiptEnabled(true).subscribe()) {
        assertEquals("after", next(reopened).getValue(), "acknowledged messages are not redelivered");
      }
    }
  }

  @Test
  void batchIndexAcknowledgementsSurviveAReconnect() throws Exception {
    String topic = HoraeEnv.topic("batch-index-ack");
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
        .enableBatching(true).batchingMaxMessages(10)
        .batchingMaxPublishDelay(1, TimeUnit.SECONDS).create()) {
      try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
          .subscriptionName("sub").subscriptionType(SubscriptionType.Shared)
          .enableBatchIndexAcknowledgment(true).isAckReceiptEnabled(true).subscribe()) {
        for (int i = 0; i < 10; i++) {
          producer.sendAsync("m" + i);
        }
        producer.flush();
        for (int i = 0; i < 10; i++) {
          Message<String> message = next(consumer);
          assertEquals("m" + i, message.getValue());
          if (i % 2 == 0) {
            consumer.acknowledge(message);
          }
        }
      }
      try (Consumer<String> reopened = client.newConsumer(Schema.STRING).topic(topic)
          .subscriptionName("sub").subscriptionType(SubscriptionType.Shared)
          .enableBatchIndexAcknowledgment(true).subscribe()) {
        List<String> redelivered = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
          Message<String> message = next(reopened);
          redelivered.add(message.getValue());
          reopened.acknowledge(message);
        }
        assertEquals(List.of("m1", "m3", "m5", "m7", "m9"), redelivered);
        producer.send("after");
        assertEquals("after", next(reopened).getValue());
        assertTrue(admin.topics().getStats(topic).getSubscriptions().containsKey("sub"));
      }
    }
  }
}
