package dev.horae.compat;

import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;

/**
 * Where the broker under test is, and the clients that talk to it.
 *
 * <p>Every address comes from a system property ({@code -Dhorae.serviceUrl=...}) or, failing that,
 * from the environment variable of the same meaning ({@code HORAE_SERVICE_URL}); the tests never start a
 * broker. Missing required settings fail the test with the name to set.
 */
public final class HoraeEnv {
  /** Bounded waits: a broker that never answers fails a test instead of hanging it. */
  public static final int RECEIVE_TIMEOUT_S = 10;

  public static final Duration WAIT = Duration.ofSeconds(20);

  private HoraeEnv() {}

  /** The setting {@code property} (system property) or {@code env} (environment), or null. */
  public static String optional(String property, String env) {
    String value = System.getProperty(property);
    if (value == null || value.isEmpty()) {
      value = System.getenv(env);
    }
    return value == null || value.isEmpty() ? null : value;
  }

  public static String required(String property, String env) {
    String value = optional(property, env);
    if (value == null) {
      throw new IllegalStateException("set -D" + property + " or " + env);
    }
    return value;
  }

  public static String serviceUrl() {
    return required("horae.serviceUrl", "HORAE_SERVICE_URL");
  }

  public static String webUrl() {
    return required("horae.webUrl", "HORAE_WEB_URL");
  }

  public static PulsarClient client() throws PulsarClientException {
    return PulsarClient.builder()
        .serviceUrl(serviceUrl())
        .operationTimeout(RECEIVE_TIMEOUT_S, TimeUnit.SECONDS)
        .build();
  }

  public static PulsarAdmin admin() throws PulsarClientException {
    return PulsarAdmin.builder().serviceHttpUrl(webUrl()).build();
  }

  /** A fresh topic name in public/default, so tests never share state. */
  public static String topic(String stem) {
    return "persistent://public/default/" + stem + "-" + UUID.randomUUID().toString().substring(0, 8);
  }

  /** Polls {@code condition} every 50 ms until it holds; fails with {@code what} after {@link #WAIT}. */
  public static void waitUntil(String what, BooleanSupplier condition) throws InterruptedException {
    long deadline = System.nanoTime() + WAIT.toNanos();
    while (!condition.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out waiting until " + what);
      }
      Thread.sleep(50);
    }
  }
}
