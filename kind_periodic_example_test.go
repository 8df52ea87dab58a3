package leaserouter_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leaserouter/leaserouter"
)

func ExampleKind_AddPeriodic() {
	ctx := context.Background()
	c, err := leaserouter.NewClient(leaserouter.ClientOptions{})
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan string, 1)
	report, err := leaserouter.Register(c, "report", func(ctx context.Context, l *leaserouter.Lease[time.Time]) error {
		if l.JobID == leaserouter.TickID("daily", l.Payload) {
			select {
			case ran <- "a report job for the tick in its ID":
			default:
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// One job of kind "report" per tick, on the kind's queue. Added
	// before Start, the ticks' jobs wait for it, as enqueued jobs do.
	err = report.AddPeriodic(leaserouter.Periodic[time.Time]{
		Name:     "daily",
		Schedule: leaserouter.Every(20 * time.Millisecond), // in earnest: Every(24 * time.Hour), or a cron schedule
		Payload:  func(tick time.Time) time.Time { return tick },
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-ran)
	fmt.Println(report.RemovePeriodic("daily"))
	fmt.Println(errors.Is(report.RemovePeriodic("daily"), leaserouter.ErrNotFound)) // removed already
	if err := c.Stop(ctx); err != nil {                                             // Stop also ends every periodic job
		log.Fatal(err)
	}
	// Output:
	// a report job for the tick in its ID
	// <nil>
	// true
}
