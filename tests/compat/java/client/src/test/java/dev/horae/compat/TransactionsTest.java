package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.MessageIdAdv;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.apache.pulsar.client.api.transaction.TxnID;
import org.apache.pulsar.common.policies.data.TransactionBufferStats;
import org.apache.pulsar.common.policies.data.TransactionCoordinatorStats;
import org.apache.pulsar.common.policies.data.TransactionMetadata;
import org.apache.pulsar.common.policies.data.TransactionPendingAckStats;
import org.apache.pulsar.common.stats.PositionInPendingAckStats;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.TestInstance;

/**
 * The Java client's transaction API: produce and acknowledge in a transaction, commit and abort,
 * conflicts, the transaction timeout, delayed messages in a transaction, a broker without a
 * transaction coordinator, and the admin client's transaction figures (v3 transactions REST).
 *
 * <p>The broker with the coordinator ({@code transactionCoordinatorEnabled=true}) is named by
 * {@code -Dhorae.txnServiceUrl} / {@code HORAE_TXN_SERVICE_URL} (its web address, for the admin
 * client's transaction figures, by {@code HORAE_TXN_WEB_URL}); the one without it (the default)
 * is {@link HoraeEnv#serviceUrl()}, the broker of the other test classes; the test that needs it
 * is tagged {@code coordinatorDisabled}.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class TransactionsTest {
  /** A message that must not arrive is waited for this long (a negative check has to wait). */
  private static final int ABSENT_MS = 1000;

  private static final String COORDINATOR_DISABLED = "coordinatorDisabled";

  /** The broker's delayedDeliveryTickTimeMillis (1 s is Pulsar's default): it may deliver that early. */
  private static final long TICK_MS = Long.parseLong(
      HoraeEnv.optional("horae.tickTimeMillis", "HORAE_TICK_TIME_MILLIS") == null
          ? "1000" : HoraeEnv.optional("horae.tickTimeMillis", "HORAE_TICK_TIME_MILLIS"));

  /** The transactional client, opened by the first test that needs it (not by the one without). */
  private PulsarClient client;

  @BeforeEach
  void openClient(TestInfo test) throws PulsarClientException {
    if (client != null || test.getTags().contains(COORDINATOR_DISABLED)) {
      return;
    }
    client = PulsarClient.builder()
        .serviceUrl(HoraeEnv.required("horae.txnServiceUrl", "HORAE_TXN_SERVICE_URL"))
        .operationTimeout(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS)
        .enableTransaction(true)
        .build();
  }

  @AfterAll
  void closeClient() throws PulsarClientException {
    if (client != null) {
      client.close();
    }
  }

  private Transaction begin(long timeout, TimeUnit unit) throws Exception {
    return client.newTransaction().withTransactionTimeout(timeout, unit).build().get();
  }

  private Transaction begin() throws Exception {
    return begin(1, TimeUnit.MINUTES);
  }

  /** Transactional sends need the send timeout off (the Java client refuses them otherwise). */
  private Producer<String> producer(String topic) throws PulsarClientException {
    return client.newProducer(Schema.STRING).topic(topic).sendTimeout(0, TimeUnit.SECONDS).create();
  }

  private Consumer<String> consumer(String topic, SubscriptionType type) throws PulsarClientException {
    return client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
        .subscriptionType(type).subscribe();
  }

  private static Message<String> next(Consumer<String> consumer) throws PulsarClientException {
    Message<String> message = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
    assertNotNull(message, "nothing arrived on " + consumer.getTopic());
    return message;
  }

  private static void nothingMore(Consumer<String> consumer) throws PulsarClientException {
    Message<String> message = consumer.receive(ABSENT_MS, TimeUnit.MILLISECONDS);
    assertNull(message, () -> "unexpected " + message.getValue() + " on " + consumer.getTopic());
  }

  @Test
  void commitMakesTheMessagesOfTwoTopicsVisibleTogether() throws Exception {
    String topicA = HoraeEnv.topic("txn-commit-a");
    String topicB = HoraeEnv.topic("txn-commit-b");
    try (Consumer<String> consumerA = consumer(topicA, SubscriptionType.Exclusive);
        Consumer<String> consumerB = consumer(topicB, SubscriptionType.Exclusive);
        Producer<String> producerA = producer(topicA);
        Producer<String> producerB = producer(topicB)) {
      Transaction txn = begin();
      producerA.newMessage(txn).value("a1").send();
      producerA.newMessage(txn).value("a2").send();
      producerB.newMessage(txn).value("b1").send();
      nothingMore(consumerA);
      nothingMore(consumerB);
      txn.commit().get();
      assertEquals("a1", next(consumerA).getValue());
      assertEquals("a2", next(consumerA).getValue());
      assertEquals("b1", next(consumerB).getValue());
      nothingMore(consumerA);
      nothingMore(consumerB);
    }
  }

  @Test
  void abortedMessagesAreNeverDelivered() throws Exception {
    String topicA = HoraeEnv.topic("txn-abort-a");
    String topicB = HoraeEnv.topic("txn-abort-b");
    try (Consumer<String> consumerA = consumer(topicA, SubscriptionType.Exclusive);
        Consumer<String> consumerB = consumer(topicB, SubscriptionType.Exclusive);
        Producer<String> producerA = producer(topicA);
        Producer<String> producerB = producer(topicB)) {
      Transaction txn = begin();
      producerA.newMessage(txn).value("aborted-a").send();
      producerB.newMessage(txn).value("aborted-b").send();
      txn.abort().get();
      producerA.send("after-a");
      producerB.send("after-b");
      assertEquals("after-a", next(consumerA).getValue());
      assertEquals("after-b", next(consumerB).getValue());
      nothingMore(consumerA);
      nothingMore(consumerB);
    }
    // A new subscription from the earliest position does not see them either.
    try (Consumer<String> reader = client.newConsumer(Schema.STRING).topic(topicA)
        .subscriptionName("late").subscriptionInitialPosition(
            org.apache.pulsar.client.api.SubscriptionInitialPosition.Earliest).subscribe()) {
      assertEquals("after-a", next(reader).getValue());
      nothingMore(reader);
    }
  }

  @Test
  void anAckInAnAbortedTransactionIsUndoneAndTheMessageRedelivered() throws Exception {
    String topic = HoraeEnv.topic("txn-ack-abort");
    try (Producer<String> producer = producer(topic)) {
      try (Consumer<String> consumer = consumer(topic, SubscriptionType.Shared)) {
        producer.send("m1");
        Message<String> m1 = next(consumer);
        Transaction txn = begin();
        consumer.acknowledgeAsync(m1.getMessageId(), txn).get();
        txn.abort().get();
      }
      try (Consumer<String> consumer = consumer(topic, SubscriptionType.Shared)) {
        Message<String> again = next(consumer);
        assertEquals("m1", again.getValue(), "the aborted ack left the message unacknowledged");
        Transaction txn = begin();
        consumer.acknowledgeAsync(again.getMessageId(), txn).get();
        txn.commit().get();
      }
      try (Consumer<String> consumer = consumer(topic, SubscriptionType.Shared)) {
        producer.send("m2");
        assertEquals("m2", next(consumer).getValue(), "the committed ack removed m1");
        nothingMore(consumer);
      }
    }
  }

  @Test
  void twoTransactionsAckingTheSameMessageConflict() throws Exception {
    String topic = HoraeEnv.topic("txn-ack-conflict");
    try (Producer<String> producer = producer(topic)) {
      try (Consumer<String> consumer = consumer(topic, SubscriptionType.Shared)) {
        producer.send("m1");
        Message<String> m1 = next(consumer);
        Transaction first = begin();
        Transaction second = begin();
        consumer.acknowledgeAsync(m1.getMessageId(), first).get();
        ExecutionException conflict = assertThrows(ExecutionException.class,
            () -> consumer.acknowledgeAsync(m1.getMessageId(), second).get());
        assertInstanceOf(PulsarClientException.TransactionConflictException.class, conflict.getCause(),
            conflict.getCause().toString());
        first.commit().get();
        second.abort().get();
      }
      try (Consumer<String> consumer = consumer(topic, SubscriptionType.Shared)) {
        producer.send("m2");
        assertEquals("m2", next(consumer).getValue(), "the first transaction's ack stands");
        nothingMore(consumer);
      }
    }
  }

  @Test
  void twoTransactionsAckingDifferentMessagesOfOneBatchDoNotConflict() throws Exception {
    String topic = HoraeEnv.topic("txn-batch-index");
    try (Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
            .sendTimeout(0, TimeUnit.SECONDS).enableBatching(true).batchingMaxMessages(3)
            .batchingMaxPublishDelay(1, TimeUnit.MINUTES).create();
        Consumer<String> consumer = consumer(topic, SubscriptionType.Shared)) {
      List<CompletableFuture<MessageId>> sent = new ArrayList<>();
      for (int i = 0; i < 3; i++) {
        sent.add(producer.sendAsync("m" + i));
      }
      producer.flush();
      for (CompletableFuture<MessageId> id : sent) {
        id.get();
      }
      Message<String> m0 = next(consumer);
      Message<String> m1 = next(consumer);
      Message<String> m2 = next(consumer);
      Transaction first = begin();
      Transaction second = begin();
      Transaction third = begin();
      consumer.acknowledgeAsync(m0.getMessageId(), first).get();
      // Another message of the same batch entry, in another transaction: no conflict.
      consumer.acknowledgeAsync(m1.getMessageId(), second).get();
      ExecutionException conflict = assertThrows(ExecutionException.class,
          () -> consumer.acknowledgeAsync(m1.getMessageId(), third).get());
      assertInstanceOf(PulsarClientException.TransactionConflictException.class, conflict.getCause(),
          conflict.getCause().toString());
      third.abort().get();   // a transaction with a failed acknowledgement may not commit
      Transaction fourth = begin();
      consumer.acknowledgeAsync(m2.getMessageId(), fourth).get();
      first.commit().get();
      second.commit().get();
      fourth.commit().get();
    }
    try (Consumer<String> consumer = consumer(topic, SubscriptionType.Shared);
        Producer<String> producer = producer(topic)) {
      producer.send("after");
      assertEquals("after", next(consumer).getValue(), "the three commits acknowledged the batch");
      nothingMore(consumer);
    }
  }

  @Test
  void aTransactionPastItsTimeoutIsAborted() throws Exception {
    String topic = HoraeEnv.topic("txn-timeout");
    try (Consumer<String> consumer = consumer(topic, SubscriptionType.Exclusive);
        Producer<String> producer = producer(topic)) {
      Transaction txn = begin(2, TimeUnit.SECONDS);
      producer.newMessage(txn).value("timed-out").send();
      // Sent after the open transaction's message: held back until that transaction ends.
      producer.send("after");
      Message<String> after = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S + 20, TimeUnit.SECONDS);
      assertNotNull(after, "the transaction was never ended by its timeout");
      assertEquals("after", after.getValue());
      assertThrows(ExecutionException.class, () -> txn.commit().get());
      nothingMore(consumer);
    }
  }

  @Test
  void aDelayedMessageInATransactionIsScheduledAtCommit() throws Exception {
    String topic = HoraeEnv.topic("txn-delayed");
    try (Consumer<String> consumer = consumer(topic, SubscriptionType.Shared);
        Producer<String> producer = producer(topic)) {
      Transaction txn = begin();
      long sentAt = System.currentTimeMillis();
      producer.newMessage(txn).value("delayed").deliverAfter(3000, TimeUnit.MILLISECONDS).send();
      producer.newMessage(txn).value("now").send();
      txn.commit().get();
      assertEquals("now", next(consumer).getValue(), "the undelayed message of the transaction");
      Message<String> delayed = next(consumer);
      long receivedAt = System.currentTimeMillis();
      assertEquals("delayed", delayed.getValue());
      assertTrue(receivedAt >= sentAt + 3000 - TICK_MS,
          "delivered " + (receivedAt - sentAt) + " ms after sending");

      // Its time passes while the transaction is open: invisible until the commit, then due.
      Transaction late = begin();
      producer.newMessage(late).value("due").deliverAfter(200, TimeUnit.MILLISECONDS).send();
      nothingMore(consumer);
      late.commit().get();
      assertEquals("due", next(consumer).getValue());
    }
  }

  @Test
  void theAdminClientReadsTheTransactionFigures() throws Exception {
    String topic = HoraeEnv.topic("txn-admin");
    try (PulsarAdmin admin = PulsarAdmin.builder()
            .serviceHttpUrl(HoraeEnv.required("horae.txnWebUrl", "HORAE_TXN_WEB_URL")).build();
        Consumer<String> consumer = consumer(topic, SubscriptionType.Shared);
        Producer<String> producer = producer(topic)) {
      producer.send("plain");
      Message<String> plain = next(consumer);
      Transaction txn = begin(1, TimeUnit.MINUTES);
      producer.newMessage(txn).value("in-txn").send();
      consumer.acknowledgeAsync(plain.getMessageId(), txn).get();
      TxnID id = txn.getTxnID();

      Map<Integer, TransactionCoordinatorStats> coordinators =
          admin.transactions().getCoordinatorStats();
      assertTrue(coordinators.containsKey(0), coordinators.toString());
      assertTrue(coordinators.get(0).ongoingTxnSize >= 1);
      TransactionMetadata metadata = admin.transactions().getTransactionMetadata(id);
      assertEquals(id.toString(), metadata.txnId);
      assertEquals("OPEN", metadata.status);
      assertEquals(60_000, metadata.timeoutAt);
      assertTrue(metadata.producedPartitions.containsKey(topic), metadata.producedPartitions.toString());
      assertNotNull(metadata.producedPartitions.get(topic).startPosition);
      assertTrue(metadata.ackedPartitions.get(topic).containsKey("sub"), metadata.ackedPartitions.toString());
      assertTrue(admin.transactions().getSlowTransactions(0, TimeUnit.MILLISECONDS)
          .containsKey(id.toString()));
      TransactionBufferStats buffer = admin.transactions().getTransactionBufferStats(topic);
      assertEquals(1, buffer.ongoingTxnSize);
      assertEquals("Ready", buffer.state);
      TransactionPendingAckStats pending = admin.transactions().getPendingAckStats(topic, "sub");
      assertEquals(1, pending.ongoingTxnSize);
      MessageIdAdv acked = (MessageIdAdv) plain.getMessageId();
      assertEquals(PositionInPendingAckStats.State.PendingAck,
          admin.transactions().getPositionStatsInPendingAck(topic, "sub", acked.getLedgerId(),
              acked.getEntryId(), null).state);
      assertEquals(PositionInPendingAckStats.State.NotInPendingAck,
          admin.transactions().getPositionStatsInPendingAck(topic, "sub", acked.getLedgerId(),
              acked.getEntryId() + 1, null).state);
      assertNotNull(admin.transactions().getPendingAckInternalStats(topic, "sub", false)
          .pendingAckLogStats.managedLedgerName);
      assertNotNull(admin.transactions().getCoordinatorInternalStats(0, false)
          .transactionLogStats.managedLedgerInternalStats);

      txn.commit().get();
      assertEquals(0, admin.transactions().getTransactionBufferStats(topic).ongoingTxnSize);
      assertEquals(0, admin.transactions().getPendingAckStats(topic, "sub").ongoingTxnSize);
    }
  }

  @Test
  @Tag(COORDINATOR_DISABLED)
  void aBrokerWithoutTheCoordinatorRefusesATransactionalClientClearly() {
    PulsarClientException refused = assertThrows(PulsarClientException.class,
        () -> PulsarClient.builder().serviceUrl(HoraeEnv.serviceUrl())
            .operationTimeout(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS)
            .enableTransaction(true).build().close());
    String text = String.valueOf(refused.getMessage()).toLowerCase();
    assertTrue(text.contains("transaction coordinator"), refused.toString());
  }
}
