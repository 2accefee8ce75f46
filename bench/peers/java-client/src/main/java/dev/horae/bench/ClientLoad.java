package dev.horae.bench;

import java.lang.management.ManagementFactory;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;

/**
 * One workload of the official Pulsar Java client against one broker, its figures printed as
 * one line of JSON on stdout (the client's own logging goes to stderr, at WARN).
 *
 * <p>Theory of operation. bench/compare_java.py starts this class as a child process once per
 * workload and broker. This side times one phase, and prints a line {@code timing} on stdout
 * just before its clock starts and {@code timed} just after it stops, at which the driver
 * reads the broker's CPU; then the JSON line.
 * Each phase first runs untimed: one message (the connection, the lookup and the topic or the
 * dispatcher), then {@code --warmup} W more through the same code as the timed ones, so that
 * the JIT has compiled the client's hot paths before the clock starts (a JVM started for one
 * phase would otherwise time its own interpreter and compilers).
 *
 * <ul>
 *   <li>{@code publish}: {@code --messages} N {@code sendAsync} calls of {@code --size} bytes,
 *       timed from the first send to the last receipt. The producer settings are those
 *       bench/compare_peer.py gives the Python client: at most 5,000 pending, the sending
 *       thread blocked when they are all out, a 120 s send timeout, and with
 *       {@code --batching} batches of at most 1,000 messages or 10 ms. {@code --subscription
 *       NAME} first creates that Shared subscription at the earliest position, so a later
 *       consume reads everything published here. Any failed send fails the run.
 *   <li>{@code consume}: a Shared consumer (receiver queue 1,000, as compare_peer.py's) on
 *       {@code --subscription}, N messages timed, each acknowledged with
 *       {@code acknowledgeAsync}. The topic must hold 1 + W + N messages: what a
 *       {@code publish} with the same W and N leaves.
 * </ul>
 *
 * <p>{@code client_cpu_s} is this JVM's CPU over the timed phase (every thread: the caller,
 * the client's IO and internal threads, JIT and GC; the JVM counts it in clock ticks of 10 ms);
 * {@code jvm_cpu_s} is its CPU from its start to the end of the phase.
 *
 * <p>Usage: {@code ClientLoad --url pulsar://HOST:PORT --workload publish|consume --topic T
 * --messages N [--warmup W] [--size BYTES] [--batching] [--subscription NAME]}; exit status 0
 * with the JSON line, 1 with a one-line reason on stderr, 2 for bad arguments.
 */
public final class ClientLoad {
    /** Longest wait for the last receipt of a publish, or for each message of a consume. */
    private static final long PHASE_TIMEOUT_S = 600;
    private static final long RECEIVE_TIMEOUT_S = 30;
    /** The lines on stdout around the timed phase: the driver reads the broker's CPU at each. */
    private static final String TIMING = "timing";
    private static final String TIMED = "timed";

    private ClientLoad() {
    }

    public static void main(String[] argv) {
        // slf4j-simple reads this when the client creates its first logger, after this line
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        Map<String, String> args;
        try {
            args = parse(argv);
        } catch (IllegalArgumentException e) {
            System.err.println("ClientLoad: " + e.getMessage());
            System.exit(2);
            return;
        }
        try (PulsarClient client = PulsarClient.builder()
                .serviceUrl(args.get("url"))
                .operationTimeout(30, TimeUnit.SECONDS)
                .build()) {
            String line = switch (args.get("workload")) {
                case "publish" -> publish(client, args);
                case "consume" -> consume(client, args);
                default -> throw new IllegalArgumentException(
                        "unknown workload " + args.get("workload"));
            };
            System.out.println(line);
        } catch (Exception e) {
            System.err.println("ClientLoad: " + args.get("workload") + " failed: " + e);
            System.exit(1);
        }
        // the client's threads are closed with it; exit now rather than wait on stray timers
        System.exit(0);
    }

    private static String publish(PulsarClient client, Map<String, String> args)
            throws Exception {
        String topic = args.get("topic");
        int n = Integer.parseInt(args.get("messages"));
        int warmup = Integer.parseInt(args.getOrDefault("warmup", "0"));
        boolean batching = args.containsKey("batching");
        String subscription = args.get("subscription");
        if (subscription != null) {
            client.newConsumer().topic(topic).subscriptionName(subscription)
                    .subscriptionType(SubscriptionType.Shared)
                    .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                    .subscribe().close();
        }
        byte[] payload = new byte[Integer.parseInt(args.getOrDefault("size", "1024"))];
        new Random().nextBytes(payload);
        try (Producer<byte[]> producer = client.newProducer()
                .topic(topic)
                .enableBatching(batching)
                .batchingMaxMessages(1000)
                .batchingMaxPublishDelay(10, TimeUnit.MILLISECONDS)
                .maxPendingMessages(5000)
                .blockIfQueueFull(true)
                .sendTimeout(120, TimeUnit.SECONDS)
                .create()) {
            producer.send(payload);
            sendAll(producer, payload, warmup);
            mark(TIMING);
            long cpu0 = processCpuNanos();
            long t0 = System.nanoTime();
            sendAll(producer, payload, n);
            long elapsed = System.nanoTime() - t0;
            long cpu = processCpuNanos() - cpu0;
            long jvmCpu = processCpuNanos();
            mark(TIMED);
            return figures("publish", batching, n, warmup, payload.length, elapsed, cpu, jvmCpu);
        }
    }

    /** {@code n} async sends, waiting for every receipt; any failed send fails the run. */
    private static void sendAll(Producer<byte[]> producer, byte[] payload, int n)
            throws InterruptedException {
        CountDownLatch receipts = new CountDownLatch(n);
        AtomicInteger failed = new AtomicInteger();
        AtomicReference<Throwable> firstFailure = new AtomicReference<>();
        for (int i = 0; i < n; i++) {
            producer.sendAsync(payload).whenComplete((id, error) -> {
                if (error != null) {
                    failed.incrementAndGet();
                    firstFailure.compareAndSet(null, error);
                }
                receipts.countDown();
            });
        }
        if (!receipts.await(PHASE_TIMEOUT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("only " + (n - receipts.getCount()) + " of " + n
                    + " receipts within " + PHASE_TIMEOUT_S + " s");
        }
        if (failed.get() > 0) {
            throw new IllegalStateException(failed.get() + " of " + n
                    + " sends failed, the first with " + firstFailure.get());
        }
    }

    private static String consume(PulsarClient client, Map<String, String> args)
            throws Exception {
        int n = Integer.parseInt(args.get("messages"));
        int warmup = Integer.parseInt(args.getOrDefault("warmup", "0"));
        String subscription = args.get("subscription");
        if (subscription == null) {
            throw new IllegalArgumentException("consume needs --subscription");
        }
        try (Consumer<byte[]> consumer = client.newConsumer()
                .topic(args.get("topic"))
                .subscriptionName(subscription)
                .subscriptionType(SubscriptionType.Shared)
                .subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .receiverQueueSize(1000)
                .subscribe()) {
            consumer.acknowledge(receive(consumer, 0, n));
            AtomicInteger failed = new AtomicInteger();
            receiveAll(consumer, warmup, failed);
            mark(TIMING);
            long cpu0 = processCpuNanos();
            long t0 = System.nanoTime();
            int size = receiveAll(consumer, n, failed);
            long elapsed = System.nanoTime() - t0;
            long cpu = processCpuNanos() - cpu0;
            long jvmCpu = processCpuNanos();
            mark(TIMED);
            if (failed.get() > 0) {
                throw new IllegalStateException(failed.get() + " of " + (warmup + n)
                        + " acks failed");
            }
            return figures("consume", false, n, warmup, size, elapsed, cpu, jvmCpu);
        }
    }

    /** {@code n} messages received, each acknowledged with {@code acknowledgeAsync}; failed
     *  acks counted in {@code failed}. Returns the last message's size in bytes. */
    private static int receiveAll(Consumer<byte[]> consumer, int n, AtomicInteger failed)
            throws Exception {
        int size = 0;
        for (int i = 0; i < n; i++) {
            Message<byte[]> message = receive(consumer, i, n);
            size = message.size();
            consumer.acknowledgeAsync(message).whenComplete((none, error) -> {
                if (error != null) {
                    failed.incrementAndGet();
                }
            });
        }
        return size;
    }

    private static Message<byte[]> receive(Consumer<byte[]> consumer, int index, int n)
            throws Exception {
        Message<byte[]> message = consumer.receive((int) RECEIVE_TIMEOUT_S, TimeUnit.SECONDS);
        if (message == null) {
            throw new IllegalStateException("no message within " + RECEIVE_TIMEOUT_S
                    + " s after " + index + " of " + n);
        }
        return message;
    }

    /** One line on stdout, flushed at once: the driver acts on it while this JVM goes on. */
    private static void mark(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** CPU of this JVM, every thread, in ns (the Linux process's user + system time). */
    private static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean)
                ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    private static String figures(String workload, boolean batching, int n, int warmup,
                                  int size, long elapsedNs, long cpuNs, long jvmCpuNs) {
        double seconds = elapsedNs / 1e9;
        return String.format(Locale.ROOT,
                "{\"workload\": \"%s\", \"batching\": %b, \"messages\": %d, "
                        + "\"warmup\": %d, \"size\": %d, \"seconds\": %.6f, "
                        + "\"msg_per_s\": %.1f, \"client_cpu_s\": %.6f, \"jvm_cpu_s\": %.6f}",
                workload, batching, n, warmup, size, seconds, n / seconds, cpuNs / 1e9,
                jvmCpuNs / 1e9);
    }

    /** {@code --name value} pairs, and {@code --batching} alone; the required ones and the
     *  workload's name checked. */
    private static Map<String, String> parse(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String name = argv[i];
            if (!name.startsWith("--")) {
                throw new IllegalArgumentException("expected --name, got " + name);
            }
            if (name.equals("--batching")) {
                args.put("batching", "");
            } else if (i + 1 < argv.length) {
                args.put(name.substring(2), argv[++i]);
            } else {
                throw new IllegalArgumentException(name + " needs a value");
            }
        }
        for (String required : new String[] {"url", "workload", "topic", "messages"}) {
            if (!args.containsKey(required)) {
                throw new IllegalArgumentException("--" + required + " is required");
            }
        }
        if (!args.get("workload").equals("publish") && !args.get("workload").equals("consume")) {
            throw new IllegalArgumentException("--workload is publish or consume, not "
                    + args.get("workload"));
        }
        return args;
    }
}
