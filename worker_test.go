package leaserouter_test

// Tests of Run's batches (worker.go): leasing ahead, the adaptive size, the
// cut at a batch's first heartbeat, and handing back what has not started.

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestRunBatchLeasesAhead: with short jobs and a deep backlog a worker
// leases several at once, up to Batch, and only one at a time with Batch 1.
// Every job is done once, in enqueue order, with one attempt.
func TestRunBatchLeasesAhead(t *testing.T) {
	for _, tc := range []struct {
		batch, want int
	}{{0, 64}, {8, 8}, {1, 1}} {
		t.Run(fmt.Sprint("Batch ", tc.batch), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
				const jobs = 200
				for i := range jobs {
					require.NoError(t, r.Enqueue(fmt.Sprintf("j%03d", i), ""))
				}
				var mu sync.Mutex
				var order []string
				most := 0
				h := func(_ context.Context, l *lease) error {
					leased := r.Stats().Leased
					mu.Lock()
					defer mu.Unlock()
					order = append(order, l.JobID)
					most = max(most, leased)
					return nil
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1, Batch: tc.batch}, h)
				synctest.Wait()
				st := r.Stats()
				require.Equal(t, jobs, st.Succeeded)
				require.EqualValues(t, jobs, st.LeasesGranted, "one lease per job")
				for i, id := range order {
					require.Equal(t, fmt.Sprintf("j%03d", i), id, "enqueue order")
					require.Equal(t, 1, get(t, r, id).Attempt)
				}
				// Sizes 1, 2, 4, ... up to Batch (with 200 jobs and the
				// default, ..., 32, 64, then the 73 left).
				if tc.batch == 0 {
					require.Greater(t, most, tc.want)
				} else {
					require.Equal(t, tc.want, most, "most leases held at once")
				}
				require.Empty(t, rec.ofKind(leaserouter.EventStaleRejected))
				stopRun(t, cancel, done)
			})
		})
	}
}

// batchFixture enqueues s0..s2 (short), then x (short), long and a, b:
// one worker leases [s0], [s1 s2], then [x long a b] (its batch doubles
// after each short one), and long runs for longFor, whatever its ctx says.
type batchFixture struct {
	r       *router
	rec     *recorder
	started chan string // handlers as they start
	ran     sync.Map    // job ID -> times its handler ran
}

func newBatchFixture(t *testing.T, interval, longFor time.Duration) (*batchFixture, leaserouter.WorkerOptions, leaserouter.Handler[string]) {
	fx := &batchFixture{rec: &recorder{}, started: make(chan string, 16)}
	fx.r = setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: fx.rec.record})
	for _, id := range []string{"s0", "s1", "s2", "x", "long", "a", "b"} {
		require.NoError(t, fx.r.Enqueue(id, ""))
	}
	h := func(ctx context.Context, l *lease) error {
		n, _ := fx.ran.LoadOrStore(l.JobID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		fx.started <- l.JobID
		if l.JobID == "long" {
			time.Sleep(longFor) // deaf to ctx: a handler slow to wind down
		}
		return nil
	}
	return fx, leaserouter.WorkerOptions{Workers: 1, Batch: 4, HeartbeatInterval: interval}, h
}

func (fx *batchFixture) runs(id string) int {
	n, ok := fx.ran.Load(id)
	if !ok {
		return 0
	}
	return int(n.(*atomic.Int32).Load())
}

// TestRunBatchCutAtFirstHeartbeat: a long job in a batch holds the jobs
// behind it for one HeartbeatInterval at most. Then the batch is cut: the
// short job that finished before it is completed, and those waiting are
// handed back unstarted — pending at once, their lease not counted as an
// attempt (EventReleased) — so another worker takes them while the long
// one goes on, heartbeated past its LeaseDuration.
func TestRunBatchCutAtFirstHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		fx, opts, h := newBatchFixture(t, interval, 3*ld)
		r := fx.r
		// c becomes ready after a and b, and before the batch is leased.
		sleep(time.Second)
		require.NoError(t, r.Enqueue("c", ""))
		sleep(time.Second)
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, opts, h)
		synctest.Wait()
		require.Equal(t, leaserouter.StatePending, get(t, r, "c").State, "not in the batch")
		require.Equal(t, leaserouter.StateLeased, get(t, r, "x").State, "finished, its completion waits for the next step")
		require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State, "leased ahead")
		require.Equal(t, 1, get(t, r, "a").Attempt)

		sleep(interval - time.Nanosecond)
		require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State, "held until the first heartbeat is due")
		sleep(time.Nanosecond)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "x").State, "completed by the cut")
		for _, id := range []string{"a", "b"} {
			j := get(t, r, id)
			require.Equal(t, leaserouter.StatePending, j.State, id)
			require.Zero(t, j.Attempt, "%s: a lease handed back unstarted is no attempt", id)
			require.Equal(t, []string{"enqueued", "lease_acquired", "released"}, fx.rec.kinds(id))
			require.Zero(t, fx.runs(id))
		}
		// Another worker gets them at once, first attempt, in their order
		// from before they were leased: ahead of c.
		for _, id := range []string{"a", "b", "c"} {
			l := acquire(t, r, "other")
			require.Equal(t, id, l.JobID)
			require.Equal(t, 1, l.Attempt)
			require.NoError(t, l.Complete())
		}

		// The long job keeps its lease past LeaseDuration, then completes.
		sleep(3 * ld)
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "long").State)
		require.Equal(t, 1, get(t, r, "long").Attempt)
		for _, id := range []string{"s0", "s1", "s2", "x", "long"} {
			require.Equal(t, 1, fx.runs(id), id)
		}
		require.Empty(t, fx.rec.ofKind(leaserouter.EventStaleRejected))
		require.Empty(t, fx.rec.ofKind(leaserouter.EventLeaseExpired))
		stopRun(t, cancel, done)
	})
}

// TestRunBatchCutLeavesLostAlone: a job canceled while it waits its turn
// is not handed back by the cut; the others are.
func TestRunBatchCutLeavesLostAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = time.Second
		fx, opts, h := newBatchFixture(t, interval, 3*ld)
		r := fx.r
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, opts, h)
		synctest.Wait()
		require.NoError(t, r.Cancel("b"))
		sleep(interval)
		require.Equal(t, leaserouter.StatePending, get(t, r, "a").State, "handed back")
		require.Equal(t, leaserouter.StateCanceled, get(t, r, "b").State)
		require.Equal(t, []string{"enqueued", "lease_acquired", "canceled"}, fx.rec.kinds("b"))
		require.Empty(t, fx.rec.ofKind(leaserouter.EventStaleRejected))
		cancel()
		sleep(3 * ld)
		require.NoError(t, receive(t, done))
	})
}

// TestRunBatchStopHandsBack: when Run's ctx is done, or Close starts, in
// the middle of a batch whose running handler is slow to return, the jobs
// that finished are completed and those not started handed back unstarted
// at once, not when the handler returns; the running one is completed when
// it returns nil. With Close cut short, only the running one is revoked.
func TestRunBatchStopHandsBack(t *testing.T) {
	for _, how := range []string{"ctx", "Close", "Close cut short"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fx, opts, h := newBatchFixture(t, 5*time.Second, 2*time.Second)
				r := fx.r
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := goRun(ctx, r, opts, h)
				synctest.Wait()
				require.Equal(t, leaserouter.StateLeased, get(t, r, "x").State, "finished, its completion waits")
				require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State, "leased ahead")
				closed := make(chan error, 1)
				switch how {
				case "ctx":
					cancel()
				case "Close":
					go func() { closed <- r.Close(context.Background()) }()
				default:
					go func() {
						c, stop := context.WithTimeout(context.Background(), time.Second)
						defer stop()
						closed <- r.Close(c)
					}()
				}
				synctest.Wait()
				require.Equal(t, leaserouter.StateSucceeded, get(t, r, "x").State, "completed at once")
				for _, id := range []string{"a", "b"} {
					j := get(t, r, id)
					require.Equal(t, leaserouter.StatePending, j.State, id)
					require.Zero(t, j.Attempt, id)
				}
				require.Equal(t, leaserouter.StateLeased, get(t, r, "long").State, "still running")
				sleep(2 * time.Second)
				require.NoError(t, receive(t, done))
				long := get(t, r, "long")
				if how == "Close cut short" {
					require.ErrorIs(t, receive(t, closed), context.DeadlineExceeded)
					require.Equal(t, leaserouter.StatePending, long.State, "revoked")
				} else {
					if how == "Close" {
						require.NoError(t, receive(t, closed))
					}
					require.Equal(t, leaserouter.StateSucceeded, long.State)
					require.Empty(t, fx.rec.ofKind(leaserouter.EventStaleRejected))
				}
				for _, id := range []string{"a", "b"} {
					require.Zero(t, fx.runs(id), id)
				}
			})
		})
	}
}

// TestRunBatchKeepsNoFinishedJobAlive: the leases of a batch share one
// allocation; once the jobs are done and dropped (Retention -1), nothing
// of Run keeps them, their payloads or the rest of the block alive while
// Run waits for more.
func TestRunBatchKeepsNoFinishedJobAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type payload struct{ _ [1 << 10]byte }
		r, err := leaserouter.New[*payload](leaserouter.Options{Retention: -1})
		require.NoError(t, err)
		defer r.Close(context.Background())
		var refs []weak.Pointer[payload]
		for i := range 300 {
			p := new(payload)
			refs = append(refs, weak.Make(p))
			require.NoError(t, r.Enqueue(fmt.Sprint(i), p))
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 2}, func(context.Context, *leaserouter.Lease[*payload]) error { return nil })
		}()
		synctest.Wait()
		require.Zero(t, r.Stats().Leased+r.Stats().Pending)
		runtime.GC()
		runtime.GC()
		alive := 0
		for _, w := range refs {
			if w.Value() != nil {
				alive++
			}
		}
		require.Zero(t, alive, "payloads of finished jobs kept alive while Run idles")
		cancel()
		synctest.Wait()
		require.NoError(t, <-done)
	})
}

// TestRunBatchLongJobKeepsFewFinishedAlive: while a long job runs, the
// leases of the worker's earlier batches that share its block (and their
// jobs and payloads) are fewer than MaxShared, whatever came before.
func TestRunBatchLongJobKeepsFewFinishedAlive(t *testing.T) {
	for _, quick := range []int{7, 31, 300} {
		t.Run(fmt.Sprint(quick, " quick jobs first"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				type payload struct{ _ [1 << 10]byte }
				r, err := leaserouter.New[*payload](leaserouter.Options{Retention: -1, LeaseDuration: ld})
				require.NoError(t, err)
				defer r.Close(context.Background())
				var refs []weak.Pointer[payload]
				for i := range quick + 1 {
					p := new(payload)
					refs = append(refs, weak.Make(p))
					require.NoError(t, r.Enqueue(fmt.Sprint(i), p))
				}
				slow := fmt.Sprint(quick)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					done <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 1}, func(ctx context.Context, l *leaserouter.Lease[*payload]) error {
						if l.JobID == slow {
							<-ctx.Done()
						}
						return nil
					})
				}()
				synctest.Wait()
				require.Equal(t, leaserouter.StateLeased, func() leaserouter.State { j, _ := r.Get(slow); return j.State }())
				runtime.GC()
				runtime.GC()
				alive := 0
				for i, w := range refs[:quick] {
					if _, known := r.Get(fmt.Sprint(i)); !known && w.Value() != nil {
						alive++ // finished, dropped, and still kept
					}
				}
				require.Less(t, alive, leaserouter.MaxShared)
				cancel()
				synctest.Wait()
				require.NoError(t, <-done)
			})
		})
	}
}

// TestRunBatchSkipsLostWhileWaiting: a job canceled while it waits its turn
// in a batch is never run, and nothing is refused on its account.
func TestRunBatchSkipsLostWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fx, opts, h := newBatchFixture(t, 5*time.Second, 2*time.Second)
		r := fx.r
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, opts, h)
		synctest.Wait()
		require.Equal(t, leaserouter.StateLeased, get(t, r, "a").State, "leased ahead")
		require.NoError(t, r.Cancel("a"))
		sleep(2 * time.Second)
		require.Equal(t, leaserouter.StateCanceled, get(t, r, "a").State)
		require.Zero(t, fx.runs("a"))
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "b").State)
		require.Empty(t, fx.rec.ofKind(leaserouter.EventStaleRejected))
		require.Equal(t, []string{"enqueued", "lease_acquired", "canceled"}, fx.rec.kinds("a"))
		stopRun(t, cancel, done)
	})
}

// TestRunBatchStaysSmallForLongJobs: jobs that take more than half of
// HeartbeatInterval are leased one at a time (the zero Batch is safe for
// long jobs): a second worker, or anyone, finds the rest ready.
func TestRunBatchStaysSmallForLongJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		for i := range 10 {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
		}
		var most atomic.Int64
		h := func(ctx context.Context, l *lease) error {
			most.Store(max(most.Load(), int64(r.Stats().Leased)))
			time.Sleep(ld / 3 * 2 / 3) // two thirds of the default interval
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1}, h)
		sleep(time.Minute)
		require.Equal(t, 10, r.Stats().Succeeded)
		require.EqualValues(t, 1, most.Load(), "never leased ahead")
		stopRun(t, cancel, done)
	})
}

// TestRunBatchSpreadsNewJobsOverIdleWorkers: jobs that arrive while every
// worker waits are spread over them, not taken by the first worker back
// (its share counts the workers woken for them), so slow jobs run side by
// side.
func TestRunBatchSpreadsNewJobsOverIdleWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		for i := range 100 { // short jobs first: the workers' batches grow
			require.NoError(t, r.Enqueue(fmt.Sprint("short", i), ""))
		}
		h := func(ctx context.Context, l *lease) error {
			if strings.HasPrefix(l.JobID, "slow") {
				time.Sleep(time.Second)
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 4}, h)
		synctest.Wait()
		require.Equal(t, 100, r.Stats().Succeeded)
		specs := make([]leaserouter.JobSpec[string], 4)
		for i := range specs {
			specs[i].ID = fmt.Sprint("slow", i)
		}
		_, err := r.EnqueueMany(specs)
		require.NoError(t, err)
		sleep(time.Second)
		require.Equal(t, 104, r.Stats().Succeeded, "the four slow jobs ran side by side")
		stopRun(t, cancel, done)
	})
}

// TestRunBatchHandBackKeepsRequeued: a job ready again because its lease
// expired, then leased ahead in a batch and handed back, is leased next
// as if that batch had never been: Event.Requeued, and Wait from the
// expiry.
func TestRunBatchHandBackKeepsRequeued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("e", ""))
		acquire(t, r, "crashed") // and never heard of again
		for _, id := range []string{"s0", "s1", "s2", "x", "long"} {
			require.NoError(t, r.Enqueue(id, ""))
		}
		sleep(ld) // e's lease expires: ready again, after the others
		h := func(ctx context.Context, l *lease) error {
			if l.JobID == "long" {
				<-ctx.Done()
			}
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := goRun(ctx, r, leaserouter.WorkerOptions{Workers: 1, Batch: 4, HeartbeatInterval: time.Second}, h)
		synctest.Wait()
		require.Equal(t, leaserouter.StateLeased, get(t, r, "e").State, "leased ahead, behind long")
		sleep(time.Second) // the cut hands e back
		require.Equal(t, leaserouter.StatePending, get(t, r, "e").State)
		l := acquire(t, r, "other")
		require.Equal(t, "e", l.JobID)
		require.Equal(t, 2, l.Attempt, "the expired lease counts, the one handed back does not")
		synctest.Wait() // the event is delivered
		acquired := rec.ofKind(leaserouter.EventLeaseAcquired)
		last := acquired[len(acquired)-1]
		require.Equal(t, "e", last.JobID)
		require.True(t, last.Requeued)
		require.Equal(t, time.Second, last.Wait, "from the expiry")
		require.NoError(t, l.Complete())
		stopRun(t, cancel, done)
	})
}
