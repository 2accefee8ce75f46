// Max-delay rejection as the Go client sees it: the rejected send fails (send timeout), the
// connection stays, and a second producer and a consumer on the same client go on.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	"github.com/sirupsen/logrus"
)

func main() {
	lg := logrus.New()
	lg.SetLevel(logrus.ErrorLevel)
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: os.Args[1], Logger: plog.NewLoggerWithLogrus(lg)})
	must(err)
	defer client.Close()
	topic := os.Args[2]
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Type: pulsar.Shared})
	must(err)
	rejected, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 2 * time.Second})
	must(err)
	other, err := client.CreateProducer(pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	must(err)
	ctx := context.Background()
	_, err = other.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("before")})
	must(err)
	start := time.Now()
	_, err = rejected.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("far"), DeliverAfter: time.Minute})
	fmt.Printf("rejected send: err=%v after=%v\n", err, time.Since(start).Round(100*time.Millisecond))
	_, err = other.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")})
	fmt.Printf("other producer after: err=%v\n", err)
	_, err = rejected.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("rejected-producer-after")})
	fmt.Printf("rejected producer's next send: err=%v\n", err)
	for i := 0; i < 3; i++ {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		msg, err := consumer.Receive(rctx)
		cancel()
		if err != nil {
			fmt.Printf("receive: %v\n", err)
			break
		}
		fmt.Printf("received %q redelivery=%d\n", msg.Payload(), msg.RedeliveryCount())
		consumer.Ack(msg)
	}
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
