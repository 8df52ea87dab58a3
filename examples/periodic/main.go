// Command periodic runs a periodic job in process: Router.AddPeriodic
// enqueues one job per tick of leaserouter.Every(250ms), its payload the
// tick, and a Run worker completes them, printing each tick's job ID, when
// it ran and how long after its tick. It stops by itself after 8 ticks (about 2 s).
//
// Each job's ID is leaserouter.TickID("report", tick), so a second
// scheduler on the same job set (pgrouter's, in another process) would
// compute the same ID and its Enqueue would be refused as a duplicate:
// one job per tick without electing a leader. Its test runs it under
// testing/synctest, with fake time, instantly.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter"
)

const (
	interval = 250 * time.Millisecond
	ticks    = 8
)

func main() { os.Exit(run(os.Stdout)) }

// run adds the periodic job, works its jobs until ticks of them ran,
// writes one line per job to w, and returns the process exit code.
func run(w io.Writer) int {
	r, err := leaserouter.New[time.Time](leaserouter.Options{})
	if err != nil {
		fmt.Fprintln(w, "periodic:", err)
		return 1
	}
	defer r.Close(context.Background())
	err = r.AddPeriodic(leaserouter.Periodic[time.Time]{
		Name:     "report",
		Schedule: leaserouter.Every(interval),
		Payload:  func(tick time.Time) time.Time { return tick },
	})
	if err != nil {
		fmt.Fprintln(w, "periodic:", err)
		return 1
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var mu sync.Mutex
	done := 0
	err = r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, WorkerID: "worker"},
		func(_ context.Context, l *leaserouter.Lease[time.Time]) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			done++
			fmt.Fprintf(w, "%d %s ran at %s, %v after its tick\n", done, l.JobID,
				now.UTC().Format("15:04:05.000000"), now.Sub(l.Payload).Round(time.Microsecond))
			if done == ticks {
				stop()
			}
			return nil
		})
	if err != nil {
		fmt.Fprintln(w, "periodic:", err)
		return 1
	}
	return 0
}
