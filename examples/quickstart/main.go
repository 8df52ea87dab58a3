// Command quickstart is the README's first program: one Client, one kind
// of job with its handler, one job enqueued, run and waited for. It
// prints "hello, world".
//
// The README shows this file from func main on; a test checks that it is
// the same text.
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/leaserouter/leaserouter"
)

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func main() {
	ctx := context.Background()
	c, err := leaserouter.NewClient(leaserouter.ClientOptions{})
	check(err)
	greet, err := leaserouter.Register(c, "greet", func(ctx context.Context, l *leaserouter.Lease[string]) error {
		fmt.Println("hello,", l.Payload)
		return nil // an error fails the attempt: the job is retried after a backoff
	})
	check(err)
	check(greet.Enqueue(ctx, "greet-1", "world")) // job ID, payload
	check(c.Start(ctx))                           // the workers start; Start returns at once
	check(c.Drained(ctx))                         // wait until every queue is empty
	check(c.Stop(ctx))
}
