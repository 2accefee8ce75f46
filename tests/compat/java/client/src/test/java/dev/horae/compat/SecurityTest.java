package dev.horae.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.AuthenticationFactory;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Schema;
import org.junit.jupiter.api.Test;

/**
 * pulsar+ssl and https with a trusted CA, and token authentication on both protocols. The brokers are
 * named by horae.tls* (a TLS listener, CA file in horae.tlsTrustCerts) and horae.token* (token
 * authentication and authorization on, horae.adminToken a super-user's token, horae.foreignToken one
 * signed with another key).
 */
class SecurityTest {

  private static String roundTrip(PulsarClient client, String topic) throws PulsarClientException {
    try (Consumer<String> consumer = client.newConsumer(Schema.STRING).topic(topic)
            .subscriptionName("sub").subscribe();
        Producer<String> producer = client.newProducer(Schema.STRING).topic(topic).create()) {
      producer.send("secret");
      return consumer.receive(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS).getValue();
    }
  }

  @Test
  void tlsClientAndAdminWithATrustedCa() throws Exception {
    String ca = HoraeEnv.required("horae.tlsTrustCerts", "HORAE_TLS_TRUST_CERTS");
    String serviceUrl = HoraeEnv.required("horae.tlsServiceUrl", "HORAE_TLS_SERVICE_URL");
    assertTrue(serviceUrl.startsWith("pulsar+ssl://"), serviceUrl);
    try (PulsarClient client = PulsarClient.builder().serviceUrl(serviceUrl)
        .tlsTrustCertsFilePath(ca).operationTimeout(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS)
        .build()) {
      assertEquals("secret", roundTrip(client, HoraeEnv.topic("tls")));
    }
    try (PulsarAdmin admin = PulsarAdmin.builder()
        .serviceHttpUrl(HoraeEnv.required("horae.tlsWebUrl", "HORAE_TLS_WEB_URL"))
        .tlsTrustCertsFilePath(ca).build()) {
      assertTrue(admin.tenants().getTenants().contains("public"));
    }
  }

  @Test
  void tokenAuthenticationOnTheBinaryProtocolAndRest() throws Exception {
    String serviceUrl = HoraeEnv.required("horae.tokenServiceUrl", "HORAE_TOKEN_SERVICE_URL");
    String webUrl = HoraeEnv.required("horae.tokenWebUrl", "HORAE_TOKEN_WEB_URL");
    String token = HoraeEnv.required("horae.adminToken", "HORAE_ADMIN_TOKEN");
    String foreign = HoraeEnv.required("horae.foreignToken", "HORAE_FOREIGN_TOKEN");
    try (PulsarClient client = PulsarClient.builder().serviceUrl(serviceUrl)
        .authentication(AuthenticationFactory.token(token))
        .operationTimeout(HoraeEnv.RECEIVE_TIMEOUT_S, TimeUnit.SECONDS).build()) {
      assertEquals("secret", roundTrip(client, HoraeEnv.topic("token")));
    }
    try (PulsarClient stranger = PulsarClient.builder().serviceUrl(serviceUrl)
        .authentication(AuthenticationFactory.token(foreign))
        .operationTimeout(3, TimeUnit.SECONDS).build()) {
      PulsarClientException refused = assertThrows(PulsarClientException.class,
          () -> stranger.newProducer(Schema.STRING).topic(HoraeEnv.topic("token")).create());
      assertTrue(refused instanceof PulsarClientException.AuthenticationException
          || refused.getCause() instanceof PulsarClientException.AuthenticationException,
          refused.toString());
    }
    try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(webUrl)
        .authentication(AuthenticationFactory.token(token)).build()) {
      assertTrue(admin.tenants().getTenants().contains("public"));
    }
    try (PulsarAdmin anonymous = PulsarAdmin.builder().serviceHttpUrl(webUrl).build()) {
      assertThrows(PulsarAdminException.NotAuthorizedException.class,
          () -> anonymous.tenants().getTenants());
    }
  }
}
