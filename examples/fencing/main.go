// Command fencing reproduces the lease-expiry race, deterministically, and
// shows a leaserouter.Fence stopping the stale writer.
//
// Worker A leases a job and stalls (a GC pause, a swapped-out process, a slow
// disk) without heartbeating. Its lease expires and worker B leases the same
// job under a higher fencing token and writes the job's result to the
// downstream resource. Then A wakes up, still believing it owns the job, and
// tries to write too. A check at the router alone cannot stop that write: A
// could have passed it just before stalling. The Fence in front of the
// resource can, because it has seen B's higher token. A's write is refused
// with a *leaserouter.StaleTokenError and its Complete with a
// *leaserouter.LeaseLostError; B completes the job. The resource holds one
// write, B's.
//
// The interleaving is forced with channels (barriers), not left to the
// scheduler or the clock, so every run prints the same trace: JSON lines with
// stable keys (event, job_id, worker_id, token, ...).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter"
)

const (
	lease    = 250 * time.Millisecond
	jobID    = "charge-42"
	resource = "account/7" // the job's payload: what it writes to, and the Fence key
)

func main() { os.Exit(run(os.Stdout, true)) }

// run plays the race, writes the trace to w as JSON lines and returns the exit
// code: 1 if anything but B's write reached the resource. withTime false drops
// the time key, so that the output is the same bytes on every run.
func run(w io.Writer, withTime bool) int {
	log := slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if !withTime && len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	if err := race(context.Background(), log); err != nil {
		log.Error("fencing demo failed", "event", "error", "err", err.Error())
		return 1
	}
	return 0
}

// store is the downstream resource the job writes to. A real one would be a
// database row with a fencing-token column; Fence.Do plays that column here.
type store struct {
	mu     sync.Mutex
	writes []write
}

type write struct {
	worker string
	token  leaserouter.Token
}

func (s *store) apply(worker string, t leaserouter.Token) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, write{worker, t})
	return nil
}

func race(ctx context.Context, log *slog.Logger) (err error) {
	r, err := leaserouter.New[string](leaserouter.Options{LeaseDuration: lease})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.Close(ctx)) }()
	if err := r.Enqueue(jobID, resource); err != nil {
		return err
	}

	var (
		fence leaserouter.Fence
		db    store
		// Barriers: A holds the lease before B asks for the job; A wakes only
		// after B has written; B completes only after A has given up.
		aLeased = make(chan struct{})
		bWrote  = make(chan struct{})
		aExited = make(chan struct{})
		errs    [2]error
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		defer close(aExited)
		errs[0] = workerA(ctx, r, &fence, &db, log, sync.OnceFunc(func() { close(aLeased) }), bWrote)
	})
	wg.Go(func() {
		errs[1] = workerB(ctx, r, &fence, &db, log, aLeased, sync.OnceFunc(func() { close(bWrote) }), aExited)
	})
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}

	db.mu.Lock()
	defer db.mu.Unlock()
	for _, w := range db.writes {
		log.Info("the resource holds this write", "event", "resource_write", "job_id", jobID,
			"worker_id", w.worker, "token", uint64(w.token))
	}
	if len(db.writes) != 1 || db.writes[0].worker != "worker-b" {
		return fmt.Errorf("want exactly one write, by worker-b; got %v", db.writes)
	}
	return nil
}

// workerA leases the job, stalls past its lease, and then tries to finish it.
func workerA(ctx context.Context, r *leaserouter.Router[string], fence *leaserouter.Fence, db *store,
	log *slog.Logger, leased func(), wake <-chan struct{}) error {
	const id = "worker-a"
	defer leased() // on every path, so that B never waits forever
	l, err := r.Acquire(ctx, id)
	if err != nil {
		return err
	}
	event(log, slog.LevelInfo, "lease acquired", "lease_acquired", id,
		slog.Uint64("token", uint64(l.Token)), slog.Int("attempt", l.Attempt))
	event(log, slog.LevelInfo, "execution started", "execution_started", id, slog.Uint64("token", uint64(l.Token)))
	event(log, slog.LevelWarn, "worker stalls: no heartbeat from now on", "worker_stalled", id, slog.Uint64("token", uint64(l.Token)))
	leased()

	// The stall. B gets the job only once A's lease has expired, and A
	// wakes only once B has written, so A always sleeps past its lease.
	<-wake

	err = fence.Do(l.Payload, l.Token, func() error { return db.apply(id, l.Token) })
	var stale *leaserouter.StaleTokenError
	switch {
	case errors.As(err, &stale):
		event(log, slog.LevelWarn, "fence refused the write of a superseded lease", "stale_write_blocked", id,
			slog.Uint64("token", uint64(l.Token)),
			slog.Uint64("stale_token", uint64(stale.Token)),
			slog.Uint64("current_token", uint64(stale.Highest)),
			slog.String("reason", "token_below_highest_admitted"))
	case err != nil:
		return err
	default:
		event(log, slog.LevelError, "stale write went through", "write_committed", id, slog.Uint64("token", uint64(l.Token)))
	}

	err = l.Complete()
	var lost *leaserouter.LeaseLostError
	if !errors.As(err, &lost) {
		return fmt.Errorf("worker-a: Complete of a lost lease returned %v, want a *LeaseLostError", err)
	}
	event(log, slog.LevelWarn, "router refused the completion of a lost lease", "completion_refused", id,
		slog.Uint64("token", uint64(lost.Token)),
		slog.Uint64("current_token", uint64(lost.Current)),
		slog.String("reason", string(lost.Reason)))
	event(log, slog.LevelInfo, "worker exits", "worker_exit", id, slog.String("reason", "stale"))
	return nil
}

// workerB takes the job over once A's lease has expired, writes, and
// completes the job once A has tried and failed.
func workerB(ctx context.Context, r *leaserouter.Router[string], fence *leaserouter.Fence, db *store,
	log *slog.Logger, aLeased <-chan struct{}, wrote func(), aExited <-chan struct{}) error {
	const id = "worker-b"
	defer wrote() // on every path, so that A never waits forever
	<-aLeased
	l, err := r.Acquire(ctx, id) // blocks until A's lease expires
	if err != nil {
		return err
	}
	event(log, slog.LevelInfo, "lease acquired", "lease_acquired", id,
		slog.Uint64("token", uint64(l.Token)), slog.Int("attempt", l.Attempt))
	event(log, slog.LevelInfo, "execution started", "execution_started", id, slog.Uint64("token", uint64(l.Token)))
	if err := fence.Do(l.Payload, l.Token, func() error { return db.apply(id, l.Token) }); err != nil {
		return err
	}
	event(log, slog.LevelInfo, "write committed", "write_committed", id, slog.Uint64("token", uint64(l.Token)))
	wrote()

	// Waiting for A only fixes the trace's order: had B completed first,
	// A would be refused all the same (reason "completed", not "superseded").
	<-aExited
	if err := l.Complete(); err != nil {
		return err
	}
	event(log, slog.LevelInfo, "job completed", "completed", id, slog.Uint64("token", uint64(l.Token)))
	event(log, slog.LevelInfo, "worker exits", "worker_exit", id, slog.String("reason", "success"))
	return nil
}

// event writes one trace record. Its keys come first in a fixed order (event,
// job_id, worker_id), then the event's own.
func event(log *slog.Logger, level slog.Level, msg, name, worker string, attrs ...slog.Attr) {
	all := append([]slog.Attr{
		slog.String("event", name), slog.String("job_id", jobID), slog.String("worker_id", worker),
	}, attrs...)
	log.LogAttrs(context.Background(), level, msg, all...)
}
