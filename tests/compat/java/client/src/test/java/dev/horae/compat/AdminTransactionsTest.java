package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.Schema;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.api.transaction.Transaction;
import org.apache.pulsar.client.api.transaction.TxnID;
import org.apache.pulsar.common.policies.data.TransactionCoordinatorInfo;
import org.apache.pulsar.common.policies.data.TransactionCoordinatorStats;
import org.apache.pulsar.common.policies.data.TransactionInBufferStats;
import org.apache.pulsar.common.policies.data.TransactionInPendingAckStats;
import org.apache.pulsar.common.policies.data.TransactionMetadata;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * The transaction admin calls the figures test of {@code TransactionsTest} leaves out, on the broker
 * with the coordinator ({@code HORAE_TXN_SERVICE_URL} / {@code HORAE_TXN_WEB_URL}): the coordinator
 * list and one coordinator's stats, a transaction's place in a buffer and a pending ack, slow
 * transactions of one coordinator, scaling, and an operator's abort.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class AdminTransactionsTest {
  private PulsarClient client;
  private PulsarAdmin admin;

  @BeforeAll
  void open() throws Exception {
    client = PulsarClient.builder()
        .serviceUrl(HoraeEnv.required("horae.txnServiceUrl", "HORAE_TXN_SERVICE_URL"))
        .operationTimeout(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS)
        .enableTransaction(true)
        .build();
    admin = PulsarAdmin.builder()
        .serviceHttpUrl(HoraeEnv.required("horae.txnWebUrl", "HORAE_TXN_WEB_URL")).build();
  }

  @AfterAll
  void close() throws Exception {
    if (client != null) {
      client.close();
    }
    if (admin != null) {
      admin.close();
    }
  }

  @Test
  void coordinatorsTransactionPlacesAndAbort() throws Exception {
    String topic = HoraeEnv.topic("txn-admin-abort");
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic).subscriptionName("sub")
            .subscriptionType(SubscriptionType.Shared).subscribe();
         Producer<String> producer = client.newProducer(Schema.STRING).topic(topic)
             .sendTimeout(0, TimeUnit.SECONDS).create()) {
      producer.send("plain");
      Message<String> plain = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
      assertNotNull(plain);
      Transaction txn = client.newTransaction().withTransactionTimeout(1, TimeUnit.MINUTES).build().get();
      producer.newMessage(txn).value("in-txn").send();
      consumer.acknowledgeAsync(plain.getMessageId(), txn).get();
      TxnID id = txn.getTxnID();
      int coordinator = (int) id.getMostSigBits();

      List<TransactionCoordinatorInfo> coordinators = admin.transactions().listTransactionCoordinators();
      assertTrue(coordinators.stream().anyMatch(c -> c.getId() == coordinator), coordinators.toString());
      TransactionCoordinatorStats stats = admin.transactions().getCoordinatorStatsById(coordinator);
      assertEquals("Ready", stats.state);
      assertTrue(stats.ongoingTxnSize >= 1, "ongoing " + stats.ongoingTxnSize);
      Map<String, TransactionMetadata> slow =
          admin.transactions().getSlowTransactionsByCoordinatorId(coordinator, 1, TimeUnit.SECONDS);
      assertTrue(slow.containsKey(id.toString()), slow.keySet().toString());

      TransactionInBufferStats inBuffer = admin.transactions().getTransactionInBufferStats(id, topic);
      assertNotNull(inBuffer.startPosition, "the transaction produced on the topic");
      assertFalse(inBuffer.aborted);
      TransactionInPendingAckStats inPendingAck =
          admin.transactions().getTransactionInPendingAckStats(id, topic, "sub");
      assertNotNull(inPendingAck);

      PulsarAdminException scaleDown = assertThrows(PulsarAdminException.class,
          () -> admin.transactions().scaleTransactionCoordinators(1));
      assertEquals(406, scaleDown.getStatusCode());

      admin.transactions().abortTransaction(id);
      ExecutionException commit = assertThrows(ExecutionException.class, () -> txn.commit().get());
      assertNotNull(commit.getCause());
      producer.send("after");
      // the aborted acknowledgement gives "plain" back; "in-txn" is never delivered
      List<String> seen = new ArrayList<>();
      while (!seen.contains("after")) {
        Message<String> next = consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
        assertNotNull(next, "after " + seen);
        seen.add(next.getValue());
        consumer.acknowledge(next);
      }
      assertFalse(seen.contains("in-txn"), seen.toString());
      assertTrue(seen.size() <= 2, seen.toString());
    }
  }
}
