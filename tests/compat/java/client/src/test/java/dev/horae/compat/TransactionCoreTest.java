package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * The Java client's transaction API against a broker with transactionCoordinatorEnabled
 * ({@code HORAE_TXN_SERVICE_URL}); and a transactional client against the default broker, where
 * transactions are off, fails with Pulsar's "Transactions are not enabled." instead of hanging.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class TransactionCoreTest {
  /** A receive that must come back empty waits this long (the positive checks wait on events). */
  private static final int QUIET_MS = 500;

  private PulsarClient client;

  @BeforeAll
  void openClient() throws Exception {
    client = PulsarClient.builder()
        .serviceUrl(HoraeEnv.required("horae.txnServiceUrl", "HORAE_TXN_SERVICE_URL"))
        .operationTimeout(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS)
        .enableTransaction(true)
        .build();
  }

  @AfterAll
  void closeClient() throws Exception {
    if (client != null) {
      client.close();
    }
  }

  private Transaction newTxn() throws Exception {
    return client.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get();
  }

  private Producer<String> producer(String topic) throws PulsarClientException {
    // Transactional sends need sendTimeout 0 (the client refuses them otherwise).
    return client.newProducer(Schema.STRING).topic(topic).enableBatching(false)
        .sendTimeout(0, TimeUnit.SECONDS).create();
  }

  private Consumer<String> consumer(String topic, String sub) throws PulsarClientException {
    return client.newConsumer(Schema.STRING).topic(topic).subscriptionName(sub)
        .subscriptionType(SubscriptionType.Shared)
        .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest).subscribe();
  }

  private static Message<String> next(Consumer<String> consumer) throws PulsarClientException {
    Message<String> message = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
    assertNotNull(message, "no message on " + consumer.getTopic());
    return message;
  }

  @Test
  void producedInACommittedTransactionIsDeliveredOnlyAfterTheCommit() throws Exception {
    String topic = HoraeEnv.topic("txn-commit");
    try (Producer<String> producer = producer(topic);
        Consumer<String> consumer = consumer(topic, "sub")) {
      Transaction txn = newTxn();
      producer.newMessage(txn).value("t1").send();
      producer.newMessage(txn).value("t2").send();
      assertNull(consumer.receive(QUIET_MS, TimeUnit.MILLISECONDS), "visible before the commit");
      txn.commit().get();
      assertEquals("t1", next(consumer).getValue());
      assertEquals("t2", next(consumer).getValue());
    }
  }

  @Test
  void producedInAnAbortedTransactionIsNeverDelivered() throws Exception {
    String topic = HoraeEnv.topic("txn-abort");
    try (Producer<String> producer = producer(topic);
        Consumer<String> consumer = consumer(topic, "sub")) {
      Transaction txn = newTxn();
      producer.newMessage(txn).value("aborted").send();
      txn.abort().get();
      producer.send("plain");
      assertEquals("plain", next(consumer).getValue());
      assertThrows(ExecutionException.class, () -> txn.commit().get(),
          "an aborted transaction cannot commit");
    }
  }

  @Test
  void anAckInAnAbortedTransactionIsUndoneAndTheMessageRedelivered() throws Exception {
    String topic = HoraeEnv.topic("txn-ack-abort");
    try (Producer<String> producer = producer(topic);
        Consumer<String> consumer = consumer(topic, "sub")) {
      producer.send("m");
      Message<String> first = next(consumer);
      Transaction txn = newTxn();
      consumer.acknowledgeAsync(first.getMessageId(), txn).get();
      txn.abort().get();
      Message<String> again = next(consumer);
      assertEquals("m", again.getValue());
      assertEquals(first.getMessageId(), again.getMessageId());
      Transaction commit = newTxn();
      consumer.acknowledgeAsync(again.getMessageId(), commit).get();
      commit.commit().get();
      consumer.redeliverUnacknowledgedMessages();
      assertNull(consumer.receive(QUIET_MS, TimeUnit.MILLISECONDS), "acknowledged by the commit");
    }
  }

  @Test
  void consumeProcessProduceAcrossTwoTopicsIsExactlyOnce() throws Exception {
    String input = HoraeEnv.topic("txn-in");
    String output = HoraeEnv.topic("txn-out");
    try (Producer<String> source = producer(input);
        Consumer<String> in = consumer(input, "processor");
        Producer<String> sink = producer(output);
        Consumer<String> out = consumer(output, "reader")) {
      for (int i = 0; i < 4; i++) {
        source.send("v" + i);
      }
      List<String> committed = new ArrayList<>();
      boolean abortedOnce = false;
      while (committed.size() < 4) {
        Message<String> message = next(in);
        Transaction txn = newTxn();
        sink.newMessage(txn).value(message.getValue().toUpperCase()).send();
        in.acknowledgeAsync(message.getMessageId(), txn).get();
        if (message.getValue().equals("v1") && !abortedOnce) {
          abortedOnce = true;
          txn.abort().get();      // v1 comes again and is processed again
        } else {
          txn.commit().get();
          committed.add(message.getValue().toUpperCase());
        }
      }
      assertTrue(abortedOnce);
      List<String> produced = new ArrayList<>();
      for (int i = 0; i < 4; i++) {
        Message<String> message = next(out);
        produced.add(message.getValue());
        out.acknowledge(message);
      }
      assertEquals(committed, produced);   // each once, in commit order
      assertEquals(List.of("V0", "V1", "V2", "V3"), produced.stream().sorted().toList());
      assertNull(out.receive(QUIET_MS, TimeUnit.MILLISECONDS), "an aborted output was delivered");
      in.redeliverUnacknowledgedMessages();
      assertNull(in.receive(QUIET_MS, TimeUnit.MILLISECONDS), "an input was not acknowledged");
    }
  }

  @Test
  void aTransactionalClientAgainstABrokerWithoutTransactionsGetsPulsarsError() {
    Exception failure = assertThrows(Exception.class, () -> {
      try (PulsarClient off = PulsarClient.builder().serviceUrl(HoraeEnv.serviceUrl())
          .operationTimeout(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS)
          .enableTransaction(true).build()) {
        off.newTransaction().build().get(HoraeEnv.RECEIVE_TIMEOUT_S * 2L, TimeUnit.SECONDS);
      }
    });
    String text = String.valueOf(failure) + " " + String.valueOf(failure.getCause());
    assertTrue(text.contains("not enabled") || text.contains("NotAllowed")
        || text.contains("coordinator"), text);
  }
}
