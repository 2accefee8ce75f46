package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.TestInstance;

/** One client and one admin client per test class, on the broker named by {@link HoraeEnv}. */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
abstract class BrokerTestBase {
  protected PulsarClient client;
  protected PulsarAdmin admin;

  @BeforeAll
  void openClients() throws Exception {
    client = HoraeEnv.client();
    admin = HoraeEnv.admin();
  }

  @AfterAll
  void closeClients() throws Exception {
    if (client != null) {
      client.close();
    }
    if (admin != null) {
      admin.close();
    }
  }

  /** The next {@code n} messages, each acknowledged; fails if one does not come in time. */
  static <T> List<Message<T>> receive(Consumer<T> consumer, int n) throws PulsarClientException {
    List<Message<T>> messages = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      Message<T> message = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
      assertNotNull(message, "message " + i + " of " + n + " did not arrive on " + consumer.getTopic());
      consumer.acknowledge(message);
      messages.add(message);
    }
    return messages;
  }

  static <T> List<T> values(List<Message<T>> messages) {
    List<T> values = new ArrayList<>();
    for (Message<T> message : messages) {
      values.add(message.getValue());
    }
    return values;
  }
}
