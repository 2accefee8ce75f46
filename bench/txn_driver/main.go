// The transaction benchmark's workload on the official Go client (pulsar-client-go), one phase
// per run, its figures printed as one JSON object: see bench/transactions.py.
//
//	txndriver -url URL -phase publish|publish-txn|cpp|cpp-txn|commit -topic T [-n N] [-size S] [-per-txn K]
//
// publish, publish-txn: N async sends of S bytes (batching off, 1000 in flight); -txn groups
// them K to a transaction, committed once its K receipts are in. rate = N / (first send to
// last receipt or commit).
// cpp, cpp-txn (consume-process-produce): the topic holds N messages (a prefill phase sends
// them, untimed); each is received from T, sent on T-out and acknowledged; -txn does K of them
// in one transaction (sends and acks in it, then commit), the plain run waits for the K
// receipts instead. rate = N / elapsed.
// commit: N transactions, each one send of S bytes then Commit; p50/p99 of Commit (us).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

var ctx = context.Background()

func must(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
}

func newTxn(c pulsar.Client) pulsar.Transaction {
	txn, err := c.NewTransaction(5 * time.Minute)
	must(err, "new transaction")
	return txn
}

// publish sends n messages, per to a transaction when txn (per = 0: no transaction).
func publish(c pulsar.Client, topic string, n, size, per int, txn bool) float64 {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true,
		MaxPendingMessages: 1000, SendTimeout: 0})
	must(err, "producer")
	defer p.Close()
	payload := make([]byte, size)
	start := time.Now()
	for done := 0; done < n; {
		k := n - done
		if txn && per < k {
			k = per
		}
		var t pulsar.Transaction
		if txn {
			t = newTxn(c)
		}
		var wg sync.WaitGroup
		var failed error
		var mu sync.Mutex
		wg.Add(k)
		for i := 0; i < k; i++ {
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload, Transaction: t},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
					}
					wg.Done()
				})
		}
		wg.Wait()
		must(failed, "send")
		if txn {
			must(t.Commit(ctx), "commit")
		}
		done += k
	}
	return float64(n) / time.Since(start).Seconds()
}

func cpp(c pulsar.Client, topic string, n, per int, txn bool) float64 {
	cons, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "cpp",
		Type: pulsar.Shared, SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest,
		ReceiverQueueSize: 1000})
	must(err, "consumer")
	defer cons.Close()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic + "-out", DisableBatching: true,
		MaxPendingMessages: 1000, SendTimeout: 0})
	must(err, "producer")
	defer p.Close()
	start := time.Now()
	for done := 0; done < n; {
		k := per
		if k > n-done {
			k = n - done
		}
		var t pulsar.Transaction
		if txn {
			t = newTxn(c)
		}
		var wg sync.WaitGroup
		var failed error
		var mu sync.Mutex
		wg.Add(k)
		for i := 0; i < k; i++ {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			msg, err := cons.Receive(rctx)
			cancel()
			must(err, "receive")
			p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: msg.Payload(), Transaction: t},
				func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
					if err != nil {
						mu.Lock()
						failed = err
						mu.Unlock()
					}
					wg.Done()
				})
			if txn {
				must(cons.AckWithTxn(msg, t), "ack in transaction")
			} else {
				must(cons.Ack(msg), "ack")
			}
		}
		wg.Wait()
		must(failed, "send")
		if txn {
			must(t.Commit(ctx), "commit")
		}
		done += k
	}
	return float64(n) / time.Since(start).Seconds()
}

func commits(c pulsar.Client, topic string, n, size int) (float64, float64) {
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 0})
	must(err, "producer")
	defer p.Close()
	payload := make([]byte, size)
	lat := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		t := newTxn(c)
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: payload, Transaction: t})
		must(err, "send")
		start := time.Now()
		must(t.Commit(ctx), "commit")
		lat = append(lat, float64(time.Since(start).Microseconds()))
	}
	sort.Float64s(lat)
	at := func(q float64) float64 { return lat[int(q*float64(len(lat)-1))] }
	return at(0.5), at(0.99)
}

func main() {
	url := flag.String("url", "", "service URL")
	phase := flag.String("phase", "", "publish|publish-txn|prefill|cpp|cpp-txn|commit")
	topic := flag.String("topic", "", "topic")
	n := flag.Int("n", 10000, "messages (commit: transactions)")
	size := flag.Int("size", 1024, "payload bytes")
	per := flag.Int("per-txn", 100, "messages per transaction")
	flag.Parse()
	lg := logrus.New()
	lg.SetLevel(logrus.ErrorLevel)
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: *url, EnableTransaction: true,
		OperationTimeout: 30 * time.Second, Logger: plog.NewLoggerWithLogrus(lg)})
	must(err, "client")
	defer c.Close()
	out := map[string]float64{}
	switch *phase {
	case "publish":
		out["rate"] = publish(c, *topic, *n, *size, *per, false)
	case "publish-txn":
		out["rate"] = publish(c, *topic, *n, *size, *per, true)
	case "prefill":
		out["rate"] = publish(c, *topic, *n, *size, *per, false)
	case "cpp":
		out["rate"] = cpp(c, *topic, *n, *per, false)
	case "cpp-txn":
		out["rate"] = cpp(c, *topic, *n, *per, true)
	case "commit":
		out["p50_us"], out["p99_us"] = commits(c, *topic, *n, *size)
	default:
		must(fmt.Errorf("unknown phase %q", *phase), "phase")
	}
	enc, _ := json.Marshal(out)
	fmt.Println(string(enc))
}
