package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.horae.compat.proto.OrderProtos.Order;
import java.util.List;
import java.util.Objects;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.schema.GenericRecord;
import org.apache.pulsar.common.schema.KeyValue;
import org.apache.pulsar.common.schema.KeyValueEncodingType;
import org.apache.pulsar.common.schema.SchemaInfo;
import org.apache.pulsar.common.schema.SchemaType;
import org.junit.jupiter.api.Test;

/** Avro, JSON, Protobuf, KeyValue and AUTO_CONSUME schemas, and the registry seen from PulsarAdmin. */
class SchemaTest extends BrokerTestBase {

  /** A plain POJO, as applications use with Schema.AVRO and Schema.JSON. */
  public static class User {
    public String name;
    public int age;

    public User() {}

    User(String name, int age) {
      this.name = name;
      this.age = age;
    }

    @Override
    public boolean equals(Object other) {
      return other instanceof User u && Objects.equals(name, u.name) && age == u.age;
    }

    @Override
    public int hashCode() {
      return Objects.hash(name, age);
    }

    @Override
    public String toString() {
      return "User(" + name + ", " + age + ")";
    }
  }

  private <T> T roundTrip(Schema<T> schema, T value) throws Exception {
    String topic = HoraeEnv.topic("schema-" + schema.getSchemaInfo().getType().name().toLowerCase());
    try (Consumer<T> consumer = client.newConsumer(schema).topic(topic).subscriptionName("sub")
            .subscribe();
        Producer<T> producer = client.newProducer(schema).topic(topic).create()) {
      producer.send(value);
      return receive(consumer, 1).get(0).getValue();
    }
  }

  @Test
  void avro() throws Exception {
    User alice = new User("alice", 30);
    assertEquals(alice, roundTrip(Schema.AVRO(User.class), alice));
  }

  @Test
  void json() throws Exception {
    User bob = new User("bob", 40);
    assertEquals(bob, roundTrip(Schema.JSON(User.class), bob));
  }

  @Test
  void protobuf() throws Exception {
    Order order = Order.newBuilder().setId("o-1").setAmountCents(1234).addTags("a").addTags("b").build();
    assertEquals(order, roundTrip(Schema.PROTOBUF(Order.class), order));
  }

  @Test
  void protobufNative() throws Exception {
    Order order = Order.newBuilder().setId("o-2").setAmountCents(99).build();
    assertEquals(order, roundTrip(Schema.PROTOBUF_NATIVE(Order.class), order));
  }

  @Test
  void keyValueSeparatedAndInline() throws Exception {
    KeyValue<String, User> pair = new KeyValue<>("key", new User("carol", 50));
    for (KeyValueEncodingType encoding : List.of(KeyValueEncodingType.SEPARATED, KeyValueEncodingType.INLINE)) {
      Schema<KeyValue<String, User>> schema =
          Schema.KeyValue(Schema.STRING, Schema.JSON(User.class), encoding);
      KeyValue<String, User> back = roundTrip(schema, pair);
      assertEquals(pair.getKey(), back.getKey(), encoding.name());
      assertEquals(pair.getValue(), back.getValue(), encoding.name());
    }
  }

  @Test
  void autoConsumeReadsAvroAsGenericRecords() throws Exception {
    String topic = HoraeEnv.topic("schema-auto-consume");
    try (Producer<User> producer = client.newProducer(Schema.AVRO(User.class)).topic(topic).create();
        Consumer<GenericRecord> consumer = client.newConsumer(Schema.AUTO_CONSUME()).topic(topic)
            .subscriptionName("sub").subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
            .subscribe()) {
      producer.send(new User("dave", 60));
      Message<GenericRecord> message = receive(consumer, 1).get(0);
      GenericRecord record = message.getValue();
      assertEquals(SchemaType.AVRO, record.getSchemaType());
      assertEquals("dave", record.getField("name").toString());
      assertEquals(60, record.getField("age"));
    }
  }

  @Test
  void theRegistryKeepsTheSchemaAndRefusesAnIncompatibleOne() throws Exception {
    String topic = HoraeEnv.topic("schema-registry");
    try (Producer<User> producer = client.newProducer(Schema.AVRO(User.class)).topic(topic).create()) {
      producer.send(new User("erin", 70));
    }
    SchemaInfo stored = admin.schemas().getSchemaInfo(topic);
    assertEquals(SchemaType.AVRO, stored.getType());
    assertEquals(Schema.AVRO(User.class).getSchemaInfo().getSchemaDefinition(),
        stored.getSchemaDefinition());
    assertThrows(PulsarClientException.IncompatibleSchemaException.class,
        () -> client.newProducer(Schema.INT64).topic(topic).create());
  }
}
