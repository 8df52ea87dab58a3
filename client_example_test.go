package leaserouter_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sync"

	"github.com/leaserouter/leaserouter"
)

type Email struct{ To, Subject string }

type Resize struct {
	Image string
	Width int
}

func ExampleNewClient() {
	ctx := context.Background()
	var mu sync.Mutex
	var done []string
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		done = append(done, s)
	}

	// Two queues: slow image work cannot hold back the emails.
	c, err := leaserouter.NewClient(leaserouter.ClientOptions{
		Queues: map[string]leaserouter.QueueConfig{
			"mail":   {Workers: 10},
			"images": {Workers: 2},
		},
		// Around every attempt of every kind, outermost first.
		Middleware: []leaserouter.Middleware{
			func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
				err := next(ctx)
				record(fmt.Sprintf("%s %s %s attempt %d: %v", a.Queue, a.Kind, a.JobID, a.Attempt, err))
				return err
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	// One kind per payload type, each with its handler and queue.
	emails, err := leaserouter.Register(c, "email", func(ctx context.Context, l *leaserouter.Lease[Email]) error {
		return nil // send l.Payload.To ...
	}, leaserouter.WithKindQueue("mail"))
	if err != nil {
		log.Fatal(err)
	}
	resizes, err := leaserouter.Register(c, "resize", func(ctx context.Context, l *leaserouter.Lease[Resize]) error {
		// A job may enqueue the next one, of another kind.
		return emails.Enqueue(ctx, "done-"+l.JobID, Email{To: "ops@example.com", Subject: l.Payload.Image})
	}, leaserouter.WithKindQueue("images"))
	if err != nil {
		log.Fatal(err)
	}

	// Jobs may be enqueued before Start: they wait.
	if err := emails.Enqueue(ctx, "welcome-1", Email{To: "ada@example.com", Subject: "Welcome"}); err != nil {
		log.Fatal(err)
	}
	if err := resizes.Enqueue(ctx, "cat.jpg", Resize{Image: "cat.jpg", Width: 640}); err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// Drained returns once every queue is empty, follow-ups included.
	if err := c.Drained(ctx); err != nil {
		log.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	slices.Sort(done)
	for _, s := range done {
		fmt.Println(s)
	}
	j, _ := c.Queue("mail").Get("done-cat.jpg")
	fmt.Println(j.Kind, j.State, j.Payload.(Email).Subject)
	// Output:
	// images resize cat.jpg attempt 1: <nil>
	// mail email done-cat.jpg attempt 1: <nil>
	// mail email welcome-1 attempt 1: <nil>
	// email succeeded cat.jpg
}
