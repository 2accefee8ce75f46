package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.UUID;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.common.policies.data.ResourceGroup;
import org.junit.jupiter.api.Test;

/** Resource groups and a namespace's resource group, through PulsarAdmin. */
class ResourceGroupsAdminTest extends BrokerTestBase {

  private static String unique(String stem) {
    return stem + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  private static ResourceGroup group(Integer publishMsgs, Long publishBytes, Integer dispatchMsgs,
      Long dispatchBytes) {
    ResourceGroup group = new ResourceGroup();
    group.setPublishRateInMsgs(publishMsgs);
    group.setPublishRateInBytes(publishBytes);
    group.setDispatchRateInMsgs(dispatchMsgs);
    group.setDispatchRateInBytes(dispatchBytes);
    return group;
  }

  /** Pulsar answers an empty 200 for a namespace without a group. */
  private static void assertUnset(String name) {
    assertTrue(name == null || name.isEmpty(), name);
  }

  @Test
  void resourceGroupLifecycle() throws Exception {
    String name = unique("rg");
    PulsarAdminException.NotFoundException missing = assertThrows(
        PulsarAdminException.NotFoundException.class,
        () -> admin.resourcegroups().getResourceGroup(name));
    assertEquals(404, missing.getStatusCode());

    admin.resourcegroups().createResourceGroup(name, group(10, 1024L, 20, 2048L));
    assertTrue(admin.resourcegroups().getResourceGroups().contains(name));
    ResourceGroup got = admin.resourcegroups().getResourceGroup(name);
    assertEquals(10, got.getPublishRateInMsgs());
    assertEquals(1024L, got.getPublishRateInBytes());
    assertEquals(20, got.getDispatchRateInMsgs());
    assertEquals(2048L, got.getDispatchRateInBytes());

    // an update changes the fields that are not -1
    admin.resourcegroups().updateResourceGroup(name, group(30, -1L, -1, 4096L));
    got = admin.resourcegroups().getResourceGroup(name);
    assertEquals(30, got.getPublishRateInMsgs());
    assertEquals(1024L, got.getPublishRateInBytes());
    assertEquals(20, got.getDispatchRateInMsgs());
    assertEquals(4096L, got.getDispatchRateInBytes());

    String namespace = "public/" + unique("rgns");
    admin.namespaces().createNamespace(namespace);
    assertUnset(admin.namespaces().getNamespaceResourceGroup(namespace));
    PulsarAdminException noGroup = assertThrows(PulsarAdminException.class,
        () -> admin.namespaces().setNamespaceResourceGroup(namespace, name + "-none"));
    assertEquals(412, noGroup.getStatusCode());
    admin.namespaces().setNamespaceResourceGroup(namespace, name);
    assertEquals(name, admin.namespaces().getNamespaceResourceGroup(namespace));
    assertEquals(name, admin.namespaces().getPolicies(namespace).resource_group_name);

    PulsarAdminException inUse = assertThrows(PulsarAdminException.class,
        () -> admin.resourcegroups().deleteResourceGroup(name));
    assertEquals(412, inUse.getStatusCode());
    admin.namespaces().removeNamespaceResourceGroup(namespace);
    assertUnset(admin.namespaces().getNamespaceResourceGroup(namespace));
    admin.resourcegroups().deleteResourceGroup(name);
    assertFalse(admin.resourcegroups().getResourceGroups().contains(name));
    admin.namespaces().deleteNamespace(namespace);
  }
}
