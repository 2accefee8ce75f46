package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.junit.jupiter.api.Test;

/** Shadow topics through PulsarAdmin's createShadowTopic, getShadowSource and the source's
 * shadow topic list; a consumer of the shadow reads the source's messages with their ids. */
class ShadowTopicsAdminTest extends BrokerTestBase {

  private static String unique(String stem) {
    return "persistent://public/default/" + stem + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  @Test
  void shadowTopicLifecycle() throws Exception {
    String source = unique("shadow-src");
    String shadow = source + "-shadow";
    admin.topics().createNonPartitionedTopic(source);
    MessageId first;
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(source).create()) {
      first = producer.send("before");
      admin.topics().createShadowTopic(shadow, source, Map.of("team", "a"));
      assertEquals(source, admin.topics().getShadowSource(shadow));
      assertEquals("a", admin.topics().getProperties(shadow).get("team"));
      try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(shadow)
          .subscriptionName("s")
          .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe()) {
        List<Message<String>> got = receive(consumer, 1);
        assertEquals("before", got.get(0).getValue());
        assertEquals(first, got.get(0).getMessageId());
        producer.send("after");
        assertEquals(List.of("after"), values(receive(consumer, 1)));
      }
    }

    assertNull(admin.topics().getShadowTopics(source));
    PulsarAdminException empty = assertThrows(PulsarAdminException.class,
        () -> admin.topics().setShadowTopics(source, List.of()));
    assertEquals(412, empty.getStatusCode());
    PulsarAdminException missing = assertThrows(PulsarAdminException.class,
        () -> admin.topics().setShadowTopics(source, List.of(source + "-none")));
    assertEquals(412, missing.getStatusCode());
    admin.topics().setShadowTopics(source, List.of(shadow));
    assertEquals(List.of(shadow), admin.topics().getShadowTopics(source));
    admin.topics().removeShadowTopics(source);
    assertNull(admin.topics().getShadowTopics(source));

    // a partitioned source gives a partitioned shadow with the same partition count
    String parted = unique("shadow-parted");
    admin.topics().createPartitionedTopic(parted, 2);
    admin.topics().createShadowTopic(parted + "-shadow", parted);
    assertEquals(2, admin.topics().getPartitionedTopicMetadata(parted + "-shadow").partitions);
    assertEquals(parted, admin.topics().getShadowSource(parted + "-shadow"));

    admin.topics().delete(shadow);
    assertTrue(admin.topics().getList("public/default").contains(source));
    assertThrows(PulsarAdminException.NotFoundException.class,
        () -> admin.topics().getShadowSource(shadow));
  }
}
