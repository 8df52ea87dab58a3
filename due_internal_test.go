package leaserouter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

// reviewHeadsAfterSettle checks, under the lock, what settle's fast path
// relies on: no deadline of the four queues is before r.due, and after a
// settling call at this instant nothing is due (every head is after now).
// dueHeadsAfterSettle: after a settle at the current instant, no queue
// head is due and none is below r.due (the bound settle trusts to skip
// the queues).
func dueHeadsAfterSettle[T any](r *Router[T]) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phase == phaseClosed {
		return nil
	}
	now := r.now()
	if j, ok := r.leases.Peek(); ok && (j.at < r.due || j.at <= now) {
		return fmt.Errorf("lease head %d, due %d, now %d", j.at, r.due, now)
	}
	if j, ok := r.sched.Peek(); ok && (j.at < r.due || j.at <= now) {
		return fmt.Errorf("sched head %d, due %d, now %d", j.at, r.due, now)
	}
	if j, ok := r.retained.Peek(); ok && (j.at < r.due || j.at <= now) {
		return fmt.Errorf("retained head %d, due %d, now %d", j.at, r.due, now)
	}
	if k, ok := r.kept.Peek(); ok && (k.next < r.due || k.next <= now) {
		return fmt.Errorf("kept head %d, due %d, now %d", k.next, r.due, now)
	}
	return nil
}

// TestReviewDueBoundRandomOps: random operations touching every kind of
// deadline (delays, run-ats, backoffs, snoozes, leases one and many at a
// time, heartbeats, KeepAlive, expiries, retention, Retry, RunNow,
// Cancel, Delete, ExpireNow, Close) in a synctest bubble; after each, a
// Get settles and the bound and the heads are checked, with Audit.
// TestDueBoundHoldsUnderRandomOperations: r.due, which lets every call's
// settle skip the deadline queues while nothing is due, stays at or below
// every lease expiry, scheduled time, purge time and KeepAlive beat through
// random enqueues (delayed, at a time), acquires, heartbeats, completions,
// failures with backoff, snoozes, releases, KeepAlives started and stopped,
// cancels, RunNow, Retry, Delete and forced expiries: after each, a settle
// leaves no head due and Audit passes. (Without the bound's update where
// KeepAlive schedules a beat, it fails within a few dozen steps.)
func TestDueBoundHoldsUnderRandomOperations(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				d := func() time.Duration { return time.Duration(rng.IntN(5000)) * time.Millisecond }
				r, err := New[int](Options{
					LeaseDuration: 3 * time.Second,
					Retention:     time.Duration(rng.IntN(3)) * 4 * time.Second, // 0, 4s or 8s
					MaxAttempts:   3,
					Backoff:       func(int) time.Duration { return time.Duration(rng.IntN(3000)) * time.Millisecond },
				})
				if err != nil {
					t.Fatal(err)
				}
				var leases []*Lease[int]
				var cancels []context.CancelFunc
				ids := 0
				id := func() string { return fmt.Sprintf("j%d", rng.IntN(ids+1)) }
				lease := func() *Lease[int] {
					if len(leases) == 0 {
						return nil
					}
					return leases[rng.IntN(len(leases))]
				}
				for step := range 400 {
					switch op := rng.IntN(20); op {
					case 0, 1:
						ids++
						_ = r.Enqueue(fmt.Sprintf("j%d", ids), ids)
					case 2:
						ids++
						_ = r.Enqueue(fmt.Sprintf("j%d", ids), ids, WithDelay(d()))
					case 3:
						ids++
						_ = r.Enqueue(fmt.Sprintf("j%d", ids), ids, WithRunAt(time.Now().Add(d()-time.Second)))
					case 4:
						if l, err := r.TryAcquire("w"); err == nil {
							leases = append(leases, l)
						}
					case 5:
						if ls, err := r.TryAcquireMany("w", 3); err == nil {
							leases = append(leases, ls...)
						}
					case 6:
						if l := lease(); l != nil {
							_ = l.Heartbeat(nil)
						}
					case 7:
						if l := lease(); l != nil {
							_ = l.Complete()
						}
					case 8:
						if l := lease(); l != nil {
							_ = l.Fail(fmt.Errorf("x"))
						}
					case 9:
						if l := lease(); l != nil {
							_ = l.Snooze(d())
						}
					case 10:
						if l := lease(); l != nil {
							_ = l.Release()
						}
					case 11:
						if l := lease(); l != nil {
							_, cancel := KeepAlive(context.Background(), l, time.Duration(1+rng.IntN(2000))*time.Millisecond)
							cancels = append(cancels, cancel)
						}
					case 12:
						if len(cancels) > 0 {
							i := rng.IntN(len(cancels))
							cancels[i]()
							cancels = append(cancels[:i], cancels[i+1:]...)
						}
					case 13:
						_ = r.Cancel(id())
					case 14:
						_ = r.RunNow(id())
					case 15:
						_ = r.Retry(id())
					case 16:
						_ = r.Delete(id())
					case 17:
						ExpireNow(r, id())
					default:
						time.Sleep(d())
						synctest.Wait()
					}
					r.Get("j0") // settles at this instant
					if err := dueHeadsAfterSettle(r); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					if err := r.Audit(); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
				for _, c := range cancels {
					c()
				}
				_ = r.Close(context.Background())
			})
		})
	}
}
