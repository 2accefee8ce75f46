package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.CryptoKeyReader;
import org.apache.pulsar.client.api.EncryptionKeyInfo;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.Schema;
import org.junit.jupiter.api.Test;

/** Message metadata, non-persistent topics, unsubscribe and end-to-end encryption. */
class MessageFeaturesTest extends BrokerTestBase {

  @Test
  void metadataArrivesAsSent() throws Exception {
    String topic = HoraeEnv.topic("metadata");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
            .producerName("metadata-producer").create()) {
      producer.newMessage().value("v").key("k").orderingKey("ok".getBytes(StandardCharsets.UTF_8))
          .properties(Map.of("a", "1", "b", "2")).eventTime(1_700_000_000_000L).sequenceId(42).send();
      Message<String> message = receive(consumer, 1).get(0);
      assertEquals("v", message.getValue());
      assertEquals("k", message.getKey());
      assertArrayEquals("ok".getBytes(StandardCharsets.UTF_8), message.getOrderingKey());
      assertEquals(Map.of("a", "1", "b", "2"), message.getProperties());
      assertEquals(1_700_000_000_000L, message.getEventTime());
      assertEquals(42, message.getSequenceId());
      assertEquals("metadata-producer", message.getProducerName());
      assertTrue(message.getPublishTime() > 0);
    }
  }

  @Test
  void aNonPersistentTopicDeliversToConnectedConsumers() throws Exception {
    String topic = HoraeEnv.topic("np").replace("persistent://", "non-persistent://");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      producer.send("fleeting");
      assertEquals(List.of("fleeting"), values(receive(consumer, 1)));
    }
  }

  @Test
  void unsubscribeDeletesTheSubscription() throws Exception {
    String topic = HoraeEnv.topic("unsubscribe");
    Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
        .subscriptionName("gone").subscribe();
    assertTrue(admin.topics().getSubscriptions(topic).contains("gone"));
    consumer.unsubscribe();
    consumer.close();
    assertFalse(admin.topics().getSubscriptions(topic).contains("gone"));
  }

  /** Keys made here, handed to the client as PEM, as a key file would be. */
  private static final class Keys implements CryptoKeyReader {
    private final byte[] publicPem;
    private final byte[] privatePem;

    Keys() throws Exception {
      KeyPairGenerator generator = KeyPairGenerator.getInstance("RSA");
      generator.initialize(2048);
      KeyPair pair = generator.generateKeyPair();
      publicPem = pem("PUBLIC KEY", pair.getPublic().getEncoded());
      privatePem = pem("PRIVATE KEY", pair.getPrivate().getEncoded());
    }

    private static byte[] pem(String kind, byte[] der) {
      String body = Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII)).encodeToString(der);
      return ("-----BEGIN " + kind + "-----\n" + body + "\n-----END " + kind + "-----\n")
          .getBytes(StandardCharsets.US_ASCII);
    }

    @Override
    public EncryptionKeyInfo getPublicKey(String keyName, Map<String, String> metadata) {
      return new EncryptionKeyInfo(publicPem, metadata);
    }

    @Override
    public EncryptionKeyInfo getPrivateKey(String keyName, Map<String, String> metadata) {
      return new EncryptionKeyInfo(privatePem, metadata);
    }
  }

  @Test
  void endToEndEncryptedMessagesAreDecryptedByTheConsumer() throws Exception {
    String topic = HoraeEnv.topic("encrypted");
    Keys keys = new Keys();
    admin.topics().createNonPartitionedTopic(topic);
    admin.topics().createSubscription(topic, "audit", MessageId.earliest);
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").cryptoKeyReader(keys).subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
            .addEncryptionKey("app-key").cryptoKeyReader(keys).create()) {
      producer.send("secret payload");
      producer.send("second");
      assertEquals(List.of("secret payload", "second"), values(receive(consumer, 2)));
    }
    List<Message<byte[]>> stored = admin.topics().peekMessages(topic, "audit", 1);
    assertEquals(1, stored.size());
    assertFalse(new String(stored.get(0).getData(), StandardCharsets.ISO_8859_1).contains("secret payload"),
        "the broker holds only ciphertext");
  }
}
