package dev.horae.compat.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.SubscriptionType;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.pulsar.annotation.PulsarListener;
import org.springframework.pulsar.core.PulsarTemplate;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * A Spring Boot application on Horae: spring-boot-starter-pulsar's auto-configured PulsarTemplate
 * sends (a delayed send included), a {@code @PulsarListener} receives. The broker's addresses come
 * from -Dhorae.serviceUrl / HORAE_SERVICE_URL and -Dhorae.webUrl / HORAE_WEB_URL.
 */
@SpringBootTest(classes = SpringPulsarTest.App.class)
class SpringPulsarTest {
  static final String TOPIC =
      "persistent://public/default/spring-" + UUID.randomUUID().toString().substring(0, 8);
  static final int RECEIVE_TIMEOUT_S = 20;

  /** The broker under test may deliver a delayed message up to one tick early. */
  static final long TICK_MS = Long.parseLong(setting("horae.tickTimeMillis", "HORAE_TICK_TIME_MILLIS", "1000"));

  static String setting(String property, String env, String fallback) {
    String value = System.getProperty(property);
    if (value == null || value.isEmpty()) {
      value = System.getenv(env);
    }
    if (value == null || value.isEmpty()) {
      if (fallback == null) {
        throw new IllegalStateException("set -D" + property + " or " + env);
      }
      return fallback;
    }
    return value;
  }

  @DynamicPropertySource
  static void broker(DynamicPropertyRegistry registry) {
    registry.add("spring.pulsar.client.service-url",
        () -> setting("horae.serviceUrl", "HORAE_SERVICE_URL", null));
    registry.add("spring.pulsar.admin.service-url", () -> setting("horae.webUrl", "HORAE_WEB_URL", null));
    registry.add("horae.spring.topic", () -> TOPIC);
  }

  /** What the listener received, in order. */
  static final class Inbox {
    final BlockingQueue<String> received = new LinkedBlockingQueue<>();

    // Shared: the subscription type on which Pulsar applies deliverAfter / deliverAt.
    @PulsarListener(topics = "${horae.spring.topic}", subscriptionName = "spring-sub",
        subscriptionType = SubscriptionType.Shared)
    void onMessage(String message) {
      received.add(message);
    }
  }

  @SpringBootApplication
  static class App {
    @Bean
    Inbox inbox() {
      return new Inbox();
    }
  }

  @Autowired PulsarTemplate<String> template;

  @Autowired Inbox inbox;

  private String next() throws InterruptedException {
    String message = inbox.received.poll(RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
    assertNotNull(message, "the @PulsarListener received nothing");
    return message;
  }

  @Test
  void pulsarTemplateSendsAndThePulsarListenerReceives() throws Exception {
    MessageId id = template.send(TOPIC, "hello from spring");
    assertNotNull(id);
    assertEquals("hello from spring", next());

    long sentAt = System.currentTimeMillis();
    template.newMessage("later").withTopic(TOPIC)
        .withMessageCustomizer(builder -> builder.deliverAfter(1500, TimeUnit.MILLISECONDS)).send();
    template.send(TOPIC, "now");
    assertEquals("now", next(), "the undelayed message overtakes the delayed one");
    assertEquals("later", next());
    long waited = System.currentTimeMillis() - sentAt;
    assertTrue(waited >= 1500 - TICK_MS, "delivered " + waited + " ms after sending");
  }
}
