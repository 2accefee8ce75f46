package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Set;
import java.util.UUID;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.common.policies.data.TenantInfo;
import org.junit.jupiter.api.Test;

/**
 * (PulsarAdmin 4.0's topic-level dispatcher-pause calls return futures, even the unsuffixed ones.)
 *
 * <p>Namespace replication clusters, dispatcherPauseOnAckStatePersistent at both levels and the
 * topic-policy refusal of a partition, called through PulsarAdmin.
 */
class AdminPolicyOpsTest extends BrokerTestBase {

  private static String unique(String stem) {
    return stem + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  private String namespace() throws Exception {
    String tenant = unique("ops");
    admin.tenants().createTenant(tenant,
        TenantInfo.builder().allowedClusters(Set.of("standalone")).build());
    String namespace = tenant + "/ns";
    admin.namespaces().createNamespace(namespace);
    return namespace;
  }

  @Test
  void namespaceReplicationClustersAcceptOnlyThisCluster() throws Exception {
    String namespace = namespace();
    assertEquals(List.of("standalone"), admin.namespaces().getNamespaceReplicationClusters(namespace));
    admin.namespaces().setNamespaceReplicationClusters(namespace, Set.of("standalone"));
    assertEquals(List.of("standalone"), admin.namespaces().getNamespaceReplicationClusters(namespace));
    PulsarAdminException unknown = assertThrows(PulsarAdminException.class,
        () -> admin.namespaces().setNamespaceReplicationClusters(namespace, Set.of("standalone", "other")));
    assertEquals(403, unknown.getStatusCode());
    PulsarAdminException global = assertThrows(PulsarAdminException.PreconditionFailedException.class,
        () -> admin.namespaces().setNamespaceReplicationClusters(namespace, Set.of("global")));
    assertEquals("Cannot specify global in the list of replication clusters", global.getMessage());
  }

  @Test
  void dispatcherPauseOnAckStatePersistentAtBothLevels() throws Exception {
    String namespace = namespace();
    String topic = "persistent://" + namespace + "/paused";
    admin.topics().createNonPartitionedTopic(topic);
    assertFalse(admin.namespaces().getDispatcherPauseOnAckStatePersistent(namespace));
    assertEquals(Boolean.FALSE, admin.topicPolicies().getDispatcherPauseOnAckStatePersistent(topic, false).get());
    admin.namespaces().setDispatcherPauseOnAckStatePersistent(namespace);
    assertTrue(admin.namespaces().getDispatcherPauseOnAckStatePersistent(namespace));
    assertEquals(Boolean.TRUE, admin.topicPolicies().getDispatcherPauseOnAckStatePersistent(topic, true).get());
    admin.namespaces().removeDispatcherPauseOnAckStatePersistent(namespace);
    assertFalse(admin.namespaces().getDispatcherPauseOnAckStatePersistent(namespace));
    admin.topicPolicies().setDispatcherPauseOnAckStatePersistent(topic).get();
    assertEquals(Boolean.TRUE, admin.topicPolicies().getDispatcherPauseOnAckStatePersistent(topic, false).get());
    admin.topicPolicies().removeDispatcherPauseOnAckStatePersistent(topic).get();
    assertEquals(Boolean.FALSE, admin.topicPolicies().getDispatcherPauseOnAckStatePersistent(topic, false).get());
  }

  @Test
  void topicPoliciesRefuseAPartitionAndNameAMissingTopic() throws Exception {
    String namespace = namespace();
    String partitioned = "persistent://" + namespace + "/parts";
    admin.topics().createPartitionedTopic(partitioned, 2);
    PulsarAdminException partition = assertThrows(PulsarAdminException.PreconditionFailedException.class,
        () -> admin.topicPolicies().setMaxProducers(partitioned + "-partition-0", 3));
    assertEquals("Not allowed to set/get topic policy for a partition", partition.getMessage());
    admin.topicPolicies().setMaxProducers(partitioned, 3);
    String missing = "persistent://" + namespace + "/missing";
    PulsarAdminException notFound = assertThrows(PulsarAdminException.NotFoundException.class,
        () -> admin.topicPolicies().getMaxProducers(missing));
    assertEquals("Topic " + missing + " not found", notFound.getMessage());
  }
}
