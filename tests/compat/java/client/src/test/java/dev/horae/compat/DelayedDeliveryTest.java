package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.common.policies.data.DelayedDeliveryPolicies;
import org.junit.jupiter.api.Test;

/** deliverAfter / deliverAt on Shared, and the max-delay policy set with PulsarAdmin. */
class DelayedDeliveryTest extends BrokerTestBase {

  /** The broker under test ticks this often (delayedDeliveryTickTimeMillis): it may deliver that early. */
  private static final long TICK_MS =
      Long.parseLong(HoraeEnv.optional("horae.tickTimeMillis", "HORAE_TICK_TIME_MILLIS") == null
          ? "1000" : HoraeEnv.optional("horae.tickTimeMillis", "HORAE_TICK_TIME_MILLIS"));

  private Consumer<String> shared(String topic) throws PulsarClientException {
    return client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
        .subscriptionType(SubscriptionType.Shared).subscribe();
  }

  private static Message<String> next(Consumer<String> consumer) throws PulsarClientException {
    Message<String> message = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
    assertNotNull(message, "nothing arrived");
    consumer.acknowledge(message);
    return message;
  }

  @Test
  void deliverAfterHoldsTheMessageBackOnShared() throws Exception {
    String topic = HoraeEnv.topic("deliver-after");
    try (Consumer<String> consumer = shared(topic);
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      long sentAt = System.currentTimeMillis();
      producer.newMessage().value("delayed").deliverAfter(1500, TimeUnit.MILLISECONDS).send();
      producer.send("now");
      assertEquals("now", next(consumer).getValue(), "the undelayed message overtakes");
      Message<String> delayed = next(consumer);
      long receivedAt = System.currentTimeMillis();
      assertEquals("delayed", delayed.getValue());
      assertTrue(receivedAt >= sentAt + 1500 - TICK_MS,
          "delivered " + (receivedAt - sentAt) + " ms after sending");
    }
  }

  @Test
  void deliverAtHoldsTheMessageUntilThatTime() throws Exception {
    String topic = HoraeEnv.topic("deliver-at");
    try (Consumer<String> consumer = shared(topic);
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      long deliverAt = System.currentTimeMillis() + 1500;
      producer.newMessage().value("at").deliverAt(deliverAt).send();
      producer.send("now");
      assertEquals("now", next(consumer).getValue());
      assertEquals("at", next(consumer).getValue());
      assertTrue(System.currentTimeMillis() >= deliverAt - TICK_MS);
    }
  }

  @Test
  void exclusiveSubscriptionsDeliverDelayedMessagesAtOnce() throws Exception {
    String topic = HoraeEnv.topic("deliver-after-exclusive");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscriptionType(SubscriptionType.Exclusive).subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      producer.newMessage().value("delayed").deliverAfter(1, TimeUnit.HOURS).send();
      producer.send("now");
      assertEquals("delayed", next(consumer).getValue());
      assertEquals("now", next(consumer).getValue());
    }
  }

  @Test
  void theMaxDelayPolicyRefusesLongerDelays() throws Exception {
    String topic = HoraeEnv.topic("max-delay");
    admin.topics().createNonPartitionedTopic(topic);
    DelayedDeliveryPolicies policy = DelayedDeliveryPolicies.builder()
        .active(true).tickTime(TICK_MS).maxDeliveryDelayInMillis(2000).build();
    admin.topicPolicies().setDelayedDeliveryPolicy(topic, policy);
    HoraeEnv.waitUntil("the policy is in force", () -> {
      try {
        DelayedDeliveryPolicies applied = admin.topicPolicies().getDelayedDeliveryPolicy(topic);
        return applied != null && applied.getMaxDeliveryDelayInMillis() == 2000;
      } catch (Exception e) {
        return false;
      }
    });
    DelayedDeliveryPolicies applied = admin.topicPolicies().getDelayedDeliveryPolicy(topic);
    assertTrue(applied.isActive());
    assertEquals(TICK_MS, applied.getTickTime());
    try (Consumer<String> consumer = shared(topic);
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
            .enableBatching(false).create()) {
      ExecutionException refused = assertThrows(ExecutionException.class,
          () -> producer.newMessage().value("too late").deliverAfter(1, TimeUnit.MINUTES)
              .sendAsync().get(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS));
      assertTrue(refused.getCause() instanceof PulsarClientException.NotAllowedException,
          refused.getCause().toString());
      assertTrue(refused.getCause().getMessage().contains("Exceeds max allowed delivery delay of 2000"),
          refused.getCause().getMessage());
      producer.newMessage().value("in time").deliverAfter(500, TimeUnit.MILLISECONDS).send();
      assertEquals("in time", next(consumer).getValue());
    }
    // The rejection fails that one send only: a second producer and a consumer on the same
    // client go on, with no redelivery and no duplicate.
    try (Consumer<String> consumer = shared(topic);
        Producer<String> rejected = client.newProducer(Schema.STRING).topic(topic)
            .enableBatching(false).create();
        Producer<String> other = client.newProducer(Schema.STRING).topic(topic).create()) {
      other.send("before");
      assertThrows(ExecutionException.class,
          () -> rejected.newMessage().value("too late").deliverAfter(1, TimeUnit.MINUTES)
              .sendAsync().get(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS));
      rejected.send("after");
      other.send("other after");
      java.util.List<String> got = new java.util.ArrayList<>();
      for (int i = 0; i < 3; i++) {
        Message<String> msg = next(consumer);
        assertEquals(0, msg.getRedeliveryCount());
        got.add(msg.getValue());
        consumer.acknowledge(msg);
      }
      java.util.Collections.sort(got);
      assertEquals(java.util.List.of("after", "before", "other after"), got);
      assertEquals(null, consumer.receive(500, TimeUnit.MILLISECONDS));
    }
    admin.topicPolicies().removeDelayedDeliveryPolicy(topic);
    HoraeEnv.waitUntil("the policy is gone", () -> {
      try {
        return admin.topicPolicies().getDelayedDeliveryPolicy(topic) == null;
      } catch (Exception e) {
        return false;
      }
    });
  }
}
