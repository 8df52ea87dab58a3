package leaserouter_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/leaserouter/leaserouter"
)

func ExampleNew() {
	// Zero fields get their defaults; a bad field is named in the error.
	_, err := leaserouter.New[string](leaserouter.Options{LeaseDuration: -time.Second})
	fmt.Println(errors.Is(err, leaserouter.ErrInvalidOptions))
	fmt.Println(err)

	r, err := leaserouter.New[string](leaserouter.Options{
		LeaseDuration: 10 * time.Second, // a worker silent this long loses its job
		MaxAttempts:   3,                // leases a job may get before it is dead
	})
	if err != nil {
		log.Fatal(err)
	}
	// Close stops the reaper goroutine; every Router needs it.
	defer r.Close(context.Background())
	fmt.Println(r.Stats().Pending)
	// Output:
	// true
	// leaserouter: invalid options: LeaseDuration is -1s, must be > 0 (or 0 for the default 30s)
	// 0
}

func ExampleRouter_Enqueue() {
	r, err := leaserouter.New[string](leaserouter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())

	fmt.Println(r.Enqueue("invoice-7", "send"))
	// The ID is the dedup key: while the router knows it, a second
	// Enqueue changes nothing.
	err = r.Enqueue("invoice-7", "send again")
	fmt.Println(errors.Is(err, leaserouter.ErrDuplicate))
	fmt.Println(r.Enqueue("reminder-7", "send", leaserouter.WithDelay(time.Hour)))

	for _, id := range []string{"invoice-7", "reminder-7"} {
		j, _ := r.Get(id)
		fmt.Println(j.ID, j.State, j.Payload)
	}
	// Output:
	// <nil>
	// true
	// <nil>
	// invoice-7 pending send
	// reminder-7 scheduled send
}

func ExampleRouter_TryAcquire() {
	r, err := leaserouter.New[string](leaserouter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())

	for _, id := range []string{"thumbnail", "resize"} {
		if err := r.Enqueue(id, id+".jpg"); err != nil {
			log.Fatal(err)
		}
	}
	if err := r.Enqueue("urgent", "logo.png", leaserouter.WithPriority(10)); err != nil {
		log.Fatal(err)
	}

	// Highest priority first, then enqueue order. Tokens are seeded from
	// the wall clock, so only their differences are shown.
	var first leaserouter.Token
	for {
		l, err := r.TryAcquire("worker-1")
		if errors.Is(err, leaserouter.ErrNoJob) {
			fmt.Println("no job ready")
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		if first == 0 {
			first = l.Token
		}
		fmt.Printf("%s (%s): attempt %d, token first+%d\n", l.JobID, l.Payload, l.Attempt, l.Token-first)
		if err := l.Complete(); err != nil {
			log.Fatal(err)
		}
		// A lease ends once: a second Complete is refused.
		fmt.Println("  again:", errors.Is(l.Complete(), leaserouter.ErrLeaseLost))
	}
	// Output:
	// urgent (logo.png): attempt 1, token first+0
	//   again: true
	// thumbnail (thumbnail.jpg): attempt 1, token first+1
	//   again: true
	// resize (resize.jpg): attempt 1, token first+2
	//   again: true
	// no job ready
}

func ExampleRouter_Run() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var completed atomic.Int32
	r, err := leaserouter.New[string](leaserouter.Options{
		Backoff: func(int) time.Duration { return 0 }, // retry at once, for the example
		OnEvent: func(e leaserouter.Event) {
			if e.Kind == leaserouter.EventCompleted && completed.Add(1) == 2 {
				stop() // both jobs done: stop Run
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())
	for _, id := range []string{"report-1", "report-2"} {
		if err := r.Enqueue(id, "Q3"); err != nil {
			log.Fatal(err)
		}
	}

	// Run heartbeats each lease in the background while the handler works,
	// and completes the job if the handler returns nil, fails it otherwise.
	// One worker keeps the output in order.
	err = r.Run(ctx, leaserouter.WorkerOptions{Workers: 1, WorkerID: "w"},
		func(ctx context.Context, l *leaserouter.Lease[string]) error {
			fmt.Printf("%s: %s attempt %d\n", l.WorkerID, l.JobID, l.Attempt)
			if l.JobID == "report-2" && l.Attempt == 1 {
				return errors.New("database busy") // retried
			}
			return nil
		})
	fmt.Println("Run returned", err)

	j, _ := r.Get("report-2")
	fmt.Println(j.ID, j.State, j.Attempt, j.LastError)
	// Output:
	// w-0: report-1 attempt 1
	// w-0: report-2 attempt 1
	// w-0: report-2 attempt 2
	// Run returned <nil>
	// report-2 succeeded 2 database busy
}

func ExampleKeepAlive() {
	r, err := leaserouter.New[string](leaserouter.Options{LeaseDuration: 200 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())
	for _, id := range []string{"backup", "export"} {
		if err := r.Enqueue(id, ""); err != nil {
			log.Fatal(err)
		}
	}

	// A job longer than its lease: KeepAlive's heartbeats hold the lease.
	l, err := r.TryAcquire("worker-1")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := leaserouter.KeepAlive(context.Background(), l, 50*time.Millisecond)
	select {
	case <-time.After(500 * time.Millisecond): // the work
		fmt.Println(l.JobID, "still leased:", ctx.Err() == nil)
	case <-ctx.Done():
		fmt.Println(l.JobID, "lost:", context.Cause(ctx))
	}
	cancel() // stop heartbeating before ending the lease
	fmt.Println(l.JobID, "complete:", l.Complete())

	// When the lease is lost (here the job is canceled), the context is
	// canceled at once, telling the work to stop.
	l, err = r.TryAcquire("worker-1")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel = leaserouter.KeepAlive(context.Background(), l, 0)
	defer cancel()
	if err := r.Cancel(l.JobID); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	fmt.Println(l.JobID, "lost:", errors.Is(context.Cause(ctx), leaserouter.ErrLeaseLost))
	// Output:
	// backup still leased: true
	// backup complete: <nil>
	// export lost: true
}

func ExampleFence() {
	// The zero Fence is ready. Each key (a resource) remembers the highest
	// token it has admitted and refuses lower ones.
	var f leaserouter.Fence
	fmt.Println(f.Admit("account/7", 2))
	fmt.Println(f.Admit("account/7", 3))
	fmt.Println(f.Admit("account/7", 2))
	fmt.Println(f.Admit("account/8", 1)) // keys are independent
	// Output:
	// <nil>
	// <nil>
	// leaserouter: stale fencing token 2 for key "account/7" (highest admitted 3)
	// <nil>
}

func ExampleFence_Do() {
	r, err := leaserouter.New[int](leaserouter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())
	if err := r.Enqueue("deposit-1", 100); err != nil {
		log.Fatal(err)
	}

	// worker-a's lease ends (Release stands in for an expiry after a long
	// stall) and worker-b leases the job again, with a higher token.
	old, err := r.TryAcquire("worker-a")
	if err != nil {
		log.Fatal(err)
	}
	if err := old.Release(); err != nil {
		log.Fatal(err)
	}
	cur, err := r.TryAcquire("worker-b")
	if err != nil {
		log.Fatal(err)
	}

	// Each holder writes through the Fence, keyed by the resource written.
	var f leaserouter.Fence
	balance := 0
	deposit := func(l *leaserouter.Lease[int]) error {
		return f.Do("account/7", l.Token, func() error {
			balance += l.Payload
			return nil
		})
	}
	fmt.Println("worker-b:", deposit(cur))
	// worker-a wakes up, unaware: its write is refused and changes nothing.
	var stale *leaserouter.StaleTokenError
	if errors.As(deposit(old), &stale) {
		fmt.Println("worker-a refused:", stale.Token == old.Token, stale.Highest == cur.Token)
	}
	fmt.Println("balance:", balance)
	fmt.Println("worker-b complete:", cur.Complete())
	// Output:
	// worker-b: <nil>
	// worker-a refused: true true
	// balance: 100
	// worker-b complete: <nil>
}

func ExampleRouter_Acquire() {
	r, err := leaserouter.New[string](leaserouter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())

	// Acquire blocks until a job is ready or ctx is done.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = r.Acquire(ctx, "worker-1")
	fmt.Println(err)

	if err := r.Enqueue("report", "q3"); err != nil {
		log.Fatal(err)
	}
	l, err := r.Acquire(context.Background(), "worker-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.JobID, l.Payload, l.WorkerID, l.Attempt)
	fmt.Println(l.Release()) // hand it back: pending again, the attempt counted
	j, _ := r.Get("report")
	fmt.Println(j.State, j.Attempt)
	// Output:
	// context deadline exceeded
	// report q3 worker-1 1
	// <nil>
	// pending 1
}

func ExampleRouter_Cancel() {
	r, err := leaserouter.New[string](leaserouter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())

	_ = r.Enqueue("export", "all")
	l, _ := r.TryAcquire("worker-1")
	fmt.Println(r.Cancel("export"))
	// The holder's lease is lost at once.
	fmt.Println(errors.Is(l.Complete(), leaserouter.ErrLeaseLost))
	fmt.Println(errors.Is(r.Cancel("nope"), leaserouter.ErrNotFound))
	j, _ := r.Get("export")
	fmt.Println(j.State)
	// Output:
	// <nil>
	// true
	// true
	// canceled
}

func ExampleRouter_Stats() {
	r, err := leaserouter.New[string](leaserouter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())

	_ = r.Enqueue("a", "")
	_ = r.Enqueue("b", "")
	_ = r.Enqueue("a", "") // refused: duplicate
	l, _ := r.TryAcquire("worker-1")
	_ = l.Heartbeat(nil)
	_ = l.Complete()
	_ = l.Heartbeat(nil) // refused: the lease has ended

	s := r.Stats()
	fmt.Println("pending", s.Pending, "succeeded", s.Succeeded)
	fmt.Println("enqueued", s.Enqueued, "duplicates", s.Duplicates, "leases", s.LeasesGranted)
	fmt.Println("heartbeats", s.Heartbeats, "refused", s.HeartbeatsRefused, "stale", s.StaleRejections)
	// Output:
	// pending 1 succeeded 1
	// enqueued 2 duplicates 1 leases 1
	// heartbeats 1 refused 1 stale 1
}

func ExampleRouter_Close() {
	r, err := leaserouter.New[string](leaserouter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_ = r.Enqueue("a", "")
	l, _ := r.TryAcquire("worker-1")

	// Close waits for granted leases until ctx is done, then revokes them.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	fmt.Println(r.Close(ctx))
	fmt.Println(errors.Is(l.Complete(), leaserouter.ErrLeaseLost))
	fmt.Println(r.Enqueue("b", ""))
	j, _ := r.Get("a") // Get and Stats still answer
	fmt.Println(j.State, j.Attempt)
	fmt.Println(r.Close(context.Background())) // again: nil
	// Output:
	// context deadline exceeded
	// true
	// leaserouter: router closed
	// pending 1
	// <nil>
}

func ExampleOptions_logger() {
	// Drop the time so the output is stable; keep every other key.
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "token" {
				return slog.Attr{}
			}
			return a
		},
	}))
	r, err := leaserouter.New[string](leaserouter.Options{Logger: log})
	if err != nil {
		panic(err)
	}
	_ = r.Enqueue("a", "")
	l, _ := r.TryAcquire("worker-1")
	_ = l.Fail(leaserouter.Permanent(errors.New("bad input")))
	_ = r.Close(context.Background()) // every record written
	// Output:
	// level=INFO msg=enqueued event=enqueued job_id=a attempt=0 worker_id=""
	// level=INFO msg=lease_acquired event=lease_acquired job_id=a attempt=1 worker_id=worker-1
	// level=INFO msg=failed event=failed job_id=a attempt=1 worker_id=worker-1 err="bad input"
	// level=WARN msg=dead event=dead job_id=a attempt=1 worker_id="" err="bad input"
}

func ExampleOptions_onEvent() {
	var kinds []string
	var runs int
	r, err := leaserouter.New[string](leaserouter.Options{
		OnEvent: func(e leaserouter.Event) {
			kinds = append(kinds, e.Kind.String()) // calls are serial: no lock needed
			if e.Kind == leaserouter.EventCompleted && e.Held >= 0 {
				runs++ // e.Held is the job's run time: feed a histogram with it
			}
		},
	})
	if err != nil {
		panic(err)
	}
	_ = r.Enqueue("a", "")
	l, _ := r.TryAcquire("worker-1")
	_ = l.Complete()
	_ = r.Close(context.Background()) // every event delivered
	fmt.Println(kinds, runs)
	// Output:
	// [enqueued lease_acquired completed] 1
}

func ExampleRouter_AddPeriodic() {
	r, err := leaserouter.New[time.Time](leaserouter.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(context.Background())

	// One job per tick, every 20ms on the epoch's grid, its payload the
	// tick. Its ID is TickID("report", tick): any other scheduler of the
	// same job set computes the same one, so a tick never gets two jobs.
	report := leaserouter.Periodic[time.Time]{
		Name:     "report",
		Schedule: leaserouter.Every(20 * time.Millisecond),
		Payload:  func(tick time.Time) time.Time { return tick },
	}
	fmt.Println(r.AddPeriodic(report))
	// A name is added once per Router.
	fmt.Println(errors.Is(r.AddPeriodic(report), leaserouter.ErrInvalidOptions))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := r.Acquire(ctx, "worker-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.JobID == leaserouter.TickID("report", l.Payload), !l.Payload.After(time.Now()))
	fmt.Println(l.Complete())

	fmt.Println(r.RemovePeriodic("report"))
	fmt.Println(errors.Is(r.RemovePeriodic("report"), leaserouter.ErrNotFound))
	fmt.Println(leaserouter.TickID("report", time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)))
	// Output:
	// <nil>
	// true
	// true true
	// <nil>
	// <nil>
	// true
	// report@2026-11-25T09:00:00Z
}
