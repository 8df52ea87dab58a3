package leaserouter_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// eventTrace is what two runs of one scenario must agree on, tokens taken
// relative to the run's first.
func eventTrace(evs []leaserouter.Event, first leaserouter.Token) []string {
	var out []string
	for _, e := range evs {
		tok := int64(0)
		if e.Token != 0 {
			tok = int64(e.Token - first)
		}
		out = append(out, fmt.Sprintf("%v %s %s a%d t%d", e.Kind, e.JobID, e.WorkerID, e.Attempt, tok))
	}
	return out
}

// TestBatchesEmitWhatSingleCallsEmit: EnqueueMany and TryAcquireMany leave
// the same jobs, leases, Stats and events, in the same order, as the single
// calls one after another.
func TestBatchesEmitWhatSingleCallsEmit(t *testing.T) {
	specs := []leaserouter.JobSpec[string]{
		{ID: "a", Payload: "pa"},
		{ID: "b", Payload: "pb", Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(5)}},
		{ID: "known", Payload: "again"},
		{ID: "c", Payload: "pc", Options: []leaserouter.EnqueueOption{leaserouter.WithDelay(time.Hour)}},
		{ID: "a", Payload: "repeat"},
		{ID: "d", Payload: "pd", Options: []leaserouter.EnqueueOption{leaserouter.WithMaxAttempts(1)}},
	}
	run := func(t *testing.T, batch bool) ([]string, leaserouter.Stats, []string) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("known", "first"))
		first := acquire(t, r, "w0")
		require.NoError(t, first.Complete())
		var leases []*lease
		if batch {
			dups, err := r.EnqueueMany(specs)
			require.NoError(t, err)
			require.Equal(t, []int{2, 4}, dups)
			leases, err = r.TryAcquireMany("w", 10)
			require.NoError(t, err)
		} else {
			for _, s := range specs {
				err := r.Enqueue(s.ID, s.Payload, s.Options...)
				if s.ID == "known" || s.Payload == "repeat" {
					require.ErrorIs(t, err, leaserouter.ErrDuplicate)
				} else {
					require.NoError(t, err)
				}
			}
			for {
				l, err := r.TryAcquire("w")
				if errors.Is(err, leaserouter.ErrNoJob) {
					break
				}
				require.NoError(t, err)
				leases = append(leases, l)
			}
		}
		var got []string
		for i, l := range leases {
			got = append(got, fmt.Sprintf("%s %s t%d", l.JobID, l.Payload, int64(l.Token-first.Token)))
			if i > 0 {
				require.Greater(t, l.Token, leases[i-1].Token, "tokens increase in slice order")
			}
		}
		synctest.Wait()
		return got, r.Stats(), eventTrace(rec.all(), first.Token)
	}
	var leases [2][]string
	var stats [2]leaserouter.Stats
	var events [2][]string
	for i, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				leases[i], stats[i], events[i] = run(t, batch)
			})
		})
	}
	require.Equal(t, []string{"b pb t1", "a pa t2", "d pd t3"}, leases[1], "priority first, then enqueue order")
	require.Equal(t, leases[0], leases[1])
	require.Equal(t, stats[0], stats[1])
	require.Equal(t, events[0], events[1])
}

// TestEnqueueManyAllOrNothing: an invalid job, a batch beyond Capacity or a
// closed router enqueue nothing and count nothing.
func TestEnqueueManyAllOrNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{Capacity: 3, OnEvent: rec.record})
		require.NoError(t, r.Enqueue("x", ""))
		synctest.Wait()
		before, nev := r.Stats(), len(rec.all())

		dups, err := r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "a"}, {ID: "x"}, {ID: ""}})
		require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
		require.ErrorContains(t, err, "batch index 2")
		require.Nil(t, dups)
		_, err = r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "a", Options: []leaserouter.EnqueueOption{leaserouter.WithDelay(-1)}}})
		require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
		require.ErrorContains(t, err, "batch index 0")

		// Two new jobs and a duplicate would make four unfinished: refused whole.
		_, err = r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "a"}, {ID: "x"}, {ID: "b"}, {ID: "c"}})
		require.ErrorIs(t, err, leaserouter.ErrFull)
		synctest.Wait()
		require.Equal(t, before, r.Stats(), "nothing counted")
		require.Len(t, rec.all(), nev, "no event")
		requireGone(t, r, "a")

		// Exactly up to Capacity is fine, duplicates included.
		dups, err = r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "a"}, {ID: "x"}, {ID: "a"}, {ID: "b"}})
		require.NoError(t, err)
		require.Equal(t, []int{1, 2}, dups)
		require.Equal(t, 3, r.Stats().Pending)

		dups, err = r.EnqueueMany(nil)
		require.NoError(t, err)
		require.Nil(t, dups)

		require.NoError(t, r.Close(context.Background()))
		_, err = r.EnqueueMany([]leaserouter.JobSpec[string]{{ID: "late"}})
		require.ErrorIs(t, err, leaserouter.ErrClosed)
		_, err = r.EnqueueMany(nil)
		require.NoError(t, err, "an empty batch does nothing, even after Close")
	})
}

// TestTryAcquireManyLeasesAreIndependent: each lease of a batch has its own
// token, expiry, heartbeats and end.
func TestTryAcquireManyLeasesAreIndependent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Backoff: noBackoff})
		_, err := r.TryAcquireMany("w", 4)
		require.ErrorIs(t, err, leaserouter.ErrNoJob)
		for _, max := range []int{0, -1} {
			_, err = r.TryAcquireMany("w", max)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		}
		for _, id := range []string{"a", "b", "c"} {
			require.NoError(t, r.Enqueue(id, ""))
		}
		ls, err := r.TryAcquireMany("w", 10)
		require.NoError(t, err)
		require.Len(t, ls, 3, "fewer ready than max: all of them")
		sleep(ld / 2)
		require.NoError(t, ls[0].Heartbeat(nil))
		require.NoError(t, ls[1].Complete())
		sleep(ld / 2)
		requireLost(t, ls[2].Complete(), ls[2].Token, ls[2].Token) // expired: it had no heartbeat
		require.NoError(t, ls[0].Fail(errors.New("boom")))
		require.Equal(t, leaserouter.StateSucceeded, get(t, r, "b").State)
		require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
		c := get(t, r, "c")
		require.Equal(t, leaserouter.StatePending, c.State, "c expired")
		require.Equal(t, 1, c.Attempt)
	})
}

// TestAcquireMany: it blocks until a job is ready, then takes what is ready
// up to max, and returns ctx.Err() or ErrClosed like Acquire.
func TestAcquireMany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		_, err := r.AcquireMany(context.Background(), "w", 0)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		type res struct {
			ls  []*lease
			err error
		}
		got := make(chan res, 1)
		go func() {
			ls, err := r.AcquireMany(context.Background(), "w", 2)
			got <- res{ls, err}
		}()
		sleep(time.Hour)
		requireBlocked(t, got)
		require.NoError(t, r.Enqueue("a", ""))
		synctest.Wait()
		g := receive(t, got)
		require.NoError(t, g.err)
		require.Len(t, g.ls, 1)

		for _, id := range []string{"b", "c", "d"} {
			require.NoError(t, r.Enqueue(id, ""))
		}
		ls, err := r.AcquireMany(context.Background(), "w", 2)
		require.NoError(t, err)
		require.Equal(t, []string{"b", "c"}, []string{ls[0].JobID, ls[1].JobID})

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		require.NoError(t, r.Enqueue("e", "", leaserouter.WithDelay(time.Hour)))
		_, _ = r.TryAcquire("w") // d
		_, err = r.AcquireMany(ctx, "w", 2)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		go func() {
			ls, err := r.AcquireMany(context.Background(), "w", 2)
			got <- res{ls, err}
		}()
		synctest.Wait()
		closed := goClose(context.Background(), r)
		synctest.Wait()
		require.ErrorIs(t, receive(t, got).err, leaserouter.ErrClosed)
		requireBlocked(t, closed) // draining the leases still held
	})
}

// TestMemoryReturnsAfterBatchedBurst: the memory rule holds for batches
// too. 200,000 jobs enqueued in batches of 256, one job of each batch
// long-lived (scheduled an hour out: 0.4% of the jobs), the rest drained:
// the heap held returns to at most 5% of its peak, whatever jobs of a
// batch outlive the rest. (With one allocation per batch, 88% stayed.)
func TestMemoryReturnsAfterBatchedBurst(t *testing.T) {
	const batch, batches = 256, 782 // 200,192 jobs
	payload := strings.Repeat("p", 64)
	base := heapInUse()
	r, err := leaserouter.New[string](leaserouter.Options{Retention: -1})
	require.NoError(t, err)
	defer r.Close(t.Context())
	specs := make([]leaserouter.JobSpec[string], batch)
	for b := range batches {
		for i := range specs {
			// A fresh payload each, as a real batch's would be.
			specs[i] = leaserouter.JobSpec[string]{ID: "j" + strconv.Itoa(b*batch+i), Payload: payload[:63] + strconv.Itoa(i%10)}
			if i == 0 {
				specs[i].Options = []leaserouter.EnqueueOption{leaserouter.WithDelay(time.Hour)}
			}
		}
		_, err := r.EnqueueMany(specs)
		require.NoError(t, err)
	}
	clear(specs)
	peak := heapInUse() - base
	for range batches * (batch - 1) {
		l, err := r.TryAcquire("w")
		require.NoError(t, err)
		require.NoError(t, l.Complete())
	}
	after := max(heapInUse(), base) - base
	t.Logf("peak %d KiB, after %d KiB (%.1f%%)", peak>>10, after>>10, 100*float64(after)/float64(peak))
	require.Equal(t, batches, r.Stats().Scheduled, "the long-lived jobs are still there")
	require.Less(t, after, peak/20, "heap after the burst: %d of %d bytes", after, peak)
	runtime.KeepAlive(r)
}
