package leaserouter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/metrics"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/hook"
)

// The admin calls' bad input (rows of TestBadInput): every refusal
// changes nothing.
func badAdminRows() []badRow {
	list := func(name string, p leaserouter.ListParams) badRow {
		return badRow{name: "List/" + name, run: func(t *testing.T, fx *badFx) {
			page, err := fx.r.List(p)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			require.Empty(t, page.Jobs)
			require.Empty(t, page.NextCursor)
		}}
	}
	notFinished := func(id string) badRow {
		return badRow{name: "Retry/unfinished " + id, run: func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Retry(id), leaserouter.ErrNotFinished)
		}}
	}
	rows := []badRow{
		list("unknown state", leaserouter.ListParams{States: []leaserouter.State{leaserouter.StateDead, 6}}),
		list("state 255", leaserouter.ListParams{States: []leaserouter.State{255}}),
		list("negative limit", leaserouter.ListParams{Limit: -1}),
		list("limit past MaxListLimit", leaserouter.ListParams{Limit: leaserouter.MaxListLimit + 1}),
		list("malformed cursor", leaserouter.ListParams{Cursor: "%%%"}),
		list("truncated cursor", leaserouter.ListParams{Cursor: "AQAAAAAAAAAB"}),
		{name: "List/cursor under other filters", run: func(t *testing.T, fx *badFx) {
			page, err := fx.r.List(leaserouter.ListParams{Limit: 1})
			require.NoError(t, err)
			require.NotEmpty(t, page.NextCursor)
			_, err = fx.r.List(leaserouter.ListParams{Limit: 1, Cursor: page.NextCursor, IDPrefix: "d"})
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			require.ErrorContains(t, err, "other filters")
		}},
		{name: "List/prefix matching nothing, invalid UTF-8", run: func(t *testing.T, fx *badFx) {
			page, err := fx.r.List(leaserouter.ListParams{IDPrefix: "\xff"})
			require.NoError(t, err)
			require.Empty(t, page.Jobs)
			require.Empty(t, page.NextCursor)
		}},
		{name: "Retry/\"\"", run: func(t *testing.T, fx *badFx) {
			err := fx.r.Retry("")
			require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
			require.ErrorIs(t, err, leaserouter.ErrNotFound)
		}},
		{name: "Retry/unknown", run: func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Retry("unknown"), leaserouter.ErrNotFound)
		}},
		notFinished("pending"), notFinished("sched"), notFinished("leased"), notFinished("stale"),
		{name: "Delete/\"\"", run: func(t *testing.T, fx *badFx) {
			err := fx.r.Delete("")
			require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
			require.ErrorIs(t, err, leaserouter.ErrNotFound)
		}},
		{name: "Delete/unknown", run: func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, fx.r.Delete("unknown"), leaserouter.ErrNotFound)
		}},
		{name: "Delete/leased", run: func(t *testing.T, fx *badFx) {
			err := fx.r.Delete("leased")
			require.ErrorIs(t, err, leaserouter.ErrLeased)
			require.ErrorContains(t, err, "w-l", "the error names the holder")
			require.NoError(t, fx.l.Heartbeat(nil), "the lease is still valid")
		}, stats: func(s *leaserouter.Stats) { s.Heartbeats++ }, events: []string{"lease_extended:leased"}},
		{name: "Resume/not paused changes nothing", run: func(t *testing.T, fx *badFx) {
			require.NoError(t, fx.r.Resume())
			require.False(t, fx.r.Stats().Paused)
		}},
		{name: "History/has no side effect", run: func(t *testing.T, fx *badFx) {
			require.Equal(t, fx.r.History(), fx.r.History())
		}},
		badAfterClose("List answers", func(t *testing.T, fx *badFx) {
			page, err := fx.r.List(leaserouter.ListParams{States: []leaserouter.State{leaserouter.StateSucceeded}})
			require.NoError(t, err)
			require.Len(t, page.Jobs, 1)
			require.Equal(t, "done", page.Jobs[0].ID)
		}),
	}
	for name, call := range map[string]func(r *router) error{
		"Retry":  func(r *router) error { return r.Retry("done") },
		"Delete": func(r *router) error { return r.Delete("pending") },
		"Pause":  func(r *router) error { return r.Pause() },
		"Resume": func(r *router) error { return r.Resume() },
	} {
		rows = append(rows, badAfterClose(name+" returns ErrClosed", func(t *testing.T, fx *badFx) {
			require.ErrorIs(t, call(fx.r), leaserouter.ErrClosed)
			require.False(t, fx.r.Stats().Paused)
		}))
	}
	return rows
}

// TestAdminAgainstModel drives a Router with random enqueues, leases,
// completions, failures, cancels, retries, deletes and clock steps past
// the retention, and after each step checks List (every page, newest
// first, every filter) against a model of each job's state and enqueue
// order, and Audit (the enqueue order, the retention queue with the
// records Retry and Delete detached, the counts).
func TestAdminAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			r := setup(t, leaserouter.Options{LeaseDuration: time.Hour, Retention: time.Minute, MaxAttempts: 2})
			type mjob struct {
				state leaserouter.State
				seq   int
				done  time.Time // when it finished
			}
			model := map[string]*mjob{}
			held := map[string]*lease{}
			seq := 0
			ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
			for step := range 300 {
				id := ids[rng.IntN(len(ids))]
				m := model[id]
				switch op := rng.IntN(9); op {
				case 0, 1: // enqueue
					err := r.Enqueue(id, id)
					if m != nil {
						require.ErrorIs(t, err, leaserouter.ErrDuplicate)
						break
					}
					require.NoError(t, err)
					seq++
					model[id] = &mjob{state: leaserouter.StatePending, seq: seq}
				case 2: // lease
					l, err := r.TryAcquire("w")
					if err != nil {
						require.ErrorIs(t, err, leaserouter.ErrNoJob)
						break
					}
					model[l.JobID].state = leaserouter.StateLeased
					held[l.JobID] = l
				case 3, 4: // complete or fail a held lease
					l := held[id]
					if l == nil {
						break
					}
					delete(held, id)
					if op == 3 {
						require.NoError(t, l.Complete())
						m.state, m.done = leaserouter.StateSucceeded, time.Now()
					} else {
						require.NoError(t, l.Fail(leaserouter.Permanent(errors.New("boom"))))
						m.state, m.done = leaserouter.StateDead, time.Now()
					}
				case 5: // cancel
					err := r.Cancel(id)
					if m == nil {
						require.ErrorIs(t, err, leaserouter.ErrNotFound)
						break
					}
					require.NoError(t, err)
					if !m.state.Terminal() {
						m.state, m.done = leaserouter.StateCanceled, time.Now()
						delete(held, id)
					}
				case 6: // retry
					err := r.Retry(id)
					switch {
					case m == nil:
						require.ErrorIs(t, err, leaserouter.ErrNotFound)
					case !m.state.Terminal():
						require.ErrorIs(t, err, leaserouter.ErrNotFinished)
					default:
						require.NoError(t, err)
						m.state = leaserouter.StatePending
					}
				case 7: // delete
					err := r.Delete(id)
					switch {
					case m == nil:
						require.ErrorIs(t, err, leaserouter.ErrNotFound)
					case m.state == leaserouter.StateLeased:
						require.ErrorIs(t, err, leaserouter.ErrLeased)
					default:
						require.NoError(t, err)
						delete(model, id)
					}
				case 8: // time passes: finished jobs past their retention go
					sleep(time.Duration(rng.IntN(40)) * time.Second)
					for id, m := range model {
						if m.state.Terminal() && !time.Now().Before(m.done.Add(time.Minute)) {
							delete(model, id)
						}
					}
				}
				require.NoError(t, r.Audit(), "step %d", step)
				// List, every page of 3, for a random filter.
				var states []leaserouter.State
				for s := range leaserouter.State(6) {
					if rng.IntN(3) == 0 {
						states = append(states, s)
					}
				}
				var want []string
				for id, m := range model {
					if len(states) == 0 || slices.Contains(states, m.state) {
						want = append(want, id)
					}
				}
				slices.SortFunc(want, func(a, b string) int { return model[b].seq - model[a].seq })
				var got []string
				p := leaserouter.ListParams{States: states, Limit: 3}
				for {
					page, err := r.List(p)
					require.NoError(t, err)
					for _, j := range page.Jobs {
						got = append(got, j.ID)
						require.Equal(t, model[j.ID].state, j.State, "step %d: %s", step, j.ID)
					}
					if page.NextCursor == "" {
						break
					}
					p.Cursor = page.NextCursor
				}
				if want == nil {
					want = []string{}
				}
				if got == nil {
					got = []string{}
				}
				require.Equal(t, want, got, "step %d, states %v", step, states)
			}
		})
	}
}

// TestStaleLeaseAfterRetryIsSuperseded: once a retried job has a newer
// lease, an operation on a lease of its run before Retry is refused with
// LostSuperseded and the job's latest token (LeaseLostError: "superseded
// whenever the job has a newer lease"), for a lease call and a KeepAlive
// alike; before the new lease it keeps its own reason.
func TestStaleLeaseAfterRetryIsSuperseded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{LeaseDuration: ld})
		require.NoError(t, r.Enqueue("a", ""))
		old := acquire(t, r, "w1")
		require.NoError(t, old.Complete())
		require.NoError(t, r.Retry("a"))
		lle := requireLost(t, old.Heartbeat(nil), old.Token, old.Token)
		require.Equal(t, leaserouter.LostCompleted, lle.Reason, "no newer lease yet")

		cur := acquire(t, r, "w2")
		require.Greater(t, cur.Token, old.Token)
		lle = requireLost(t, old.Complete(), old.Token, cur.Token)
		require.Equal(t, leaserouter.LostSuperseded, lle.Reason)
		kctx, cancel := leaserouter.KeepAlive(t.Context(), old, 0)
		defer cancel()
		<-kctx.Done()
		require.ErrorAs(t, context.Cause(kctx), &lle)
		require.Equal(t, leaserouter.LostSuperseded, lle.Reason, "KeepAlive's cause")
		require.Equal(t, cur.Token, lle.Current)
		require.NoError(t, cur.Heartbeat(nil), "the new lease is untouched")
	})
}

// TestAdminCallsConcurrentWithRun: Retry, Delete, Pause, Resume and List
// racing Run's workers and a producer leave the counts and the events in
// step (Stats.Purged and Stats.Retried against their events, each
// detached record purged without a trace) and the router whole (Audit),
// and a Resume after the last Pause lets Run finish every job.
func TestAdminCallsConcurrentWithRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder
		r := setup(t, leaserouter.Options{LeaseDuration: ld, Retention: time.Second, MaxAttempts: 2, OnEvent: rec.record})
		ctx, stop := context.WithCancel(t.Context())
		runDone := make(chan error, 1)
		go func() {
			runDone <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 3}, func(_ context.Context, l *lease) error {
				if l.Attempt == 1 && l.JobID[len(l.JobID)-1]%3 == 0 {
					return errors.New("boom")
				}
				return nil
			})
		}()
		rng := rand.New(rand.NewPCG(3, 4))
		for i := range 600 {
			id := string(rune('a'+i%26)) + string(rune('0'+i%7))
			_ = r.Enqueue(id, "")
			switch rng.IntN(6) {
			case 0:
				_ = r.Retry(id)
			case 1:
				_ = r.Delete(id)
			case 2:
				require.NoError(t, r.Pause())
			case 3:
				require.NoError(t, r.Resume())
			case 4:
				_, err := r.List(leaserouter.ListParams{Limit: 5})
				require.NoError(t, err)
			}
			if i%50 == 0 {
				sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			}
			require.NoError(t, r.Audit())
		}
		// Paused, jobs wait however long; Resume alone wakes the workers.
		require.NoError(t, r.Pause())
		synctest.Wait()
		st := r.Stats()
		before := st.Pending + st.Scheduled // the scheduled ones become pending meanwhile
		for i := range 20 {
			require.NoError(t, r.Enqueue("late"+string(rune('a'+i)), ""))
		}
		sleep(time.Minute)
		st = r.Stats()
		require.Equal(t, before+20, st.Pending+st.Scheduled, "nothing leased while paused: %+v", st)
		require.Zero(t, st.Leased, "nothing leased while paused")
		require.NoError(t, r.Resume())
		synctest.Wait()
		st = r.Stats()
		require.Zero(t, st.Pending+st.Leased, "Run finished every job after Resume: %+v", st)
		stop()
		require.NoError(t, <-runDone)
		require.NoError(t, r.Close(t.Context()))
		st = r.Stats()
		count := map[leaserouter.EventKind]uint64{}
		for _, e := range rec.all() {
			count[e.Kind]++
		}
		require.Equal(t, count[leaserouter.EventPurged], st.Purged)
		require.Equal(t, count[leaserouter.EventRetried], st.Retried)
		require.NotZero(t, st.Retried)
		require.NotZero(t, st.Purged)
		require.NoError(t, r.Audit())
	})
}

// maxAllocatedPerHold installs hooks on r that measure the bytes
// allocated in each hold of its lock taken by a call that reports it
// (Locked: Get, List, Leases, lease operations...) and returns the most
// seen so far. A copy of a checkpoint or a payload made under the lock
// is an allocation of its size (large objects are counted at once).
func maxAllocatedPerHold[T any](r *leaserouter.Router[T]) func() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	allocated := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	// The hooks run under r's lock, which orders them.
	var at, most uint64
	leaserouter.SetHooks(r, &hook.Hooks{
		Locked: func() { at = allocated() },
		Unlocking: func() {
			if at != 0 {
				most, at = max(most, allocated()-at), 0
			}
		},
	})
	return func() uint64 {
		leaserouter.SetHooks(r, nil)
		return most
	}
}

// TestAdminReadsCopyNoCheckpointUnderTheLock: List, Get and Leases copy no
// checkpoint under the router's lock (a console polling a page must not
// make a healthy worker's heartbeat wait for it): each hold of the lock
// allocates far less than one of the 1 MiB checkpoints of the 16 leased
// jobs, and the page still carries a copy of each checkpoint. (Before,
// List copied the page's checkpoints in one hold: 16 MiB.)
func TestAdminReadsCopyNoCheckpointUnderTheLock(t *testing.T) {
	const n, size = 16, 1 << 20
	r := setup(t, leaserouter.Options{LeaseDuration: time.Hour})
	var held []*lease
	for i := range n {
		require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
		l := acquire(t, r, "w")
		require.NoError(t, l.Heartbeat(bytes.Repeat([]byte{byte(i)}, size)))
		held = append(held, l)
	}
	defer func() {
		for _, l := range held {
			require.NoError(t, l.Complete()) // Close would wait for them
		}
	}()
	most := maxAllocatedPerHold(r)
	page, err := r.List(leaserouter.ListParams{Limit: n})
	require.NoError(t, err)
	j := get(t, r, "0")
	leased, err := r.Leases(n)
	require.NoError(t, err)
	require.Less(t, most(), uint64(size/4), "bytes allocated in one hold of the lock")
	require.Len(t, page.Jobs, n)
	for k, j := range page.Jobs {
		require.True(t, bytes.Equal(bytes.Repeat([]byte{byte(n - 1 - k)}, size), j.Progress), "job %s's checkpoint", j.ID)
	}
	page.Jobs[0].Progress[0] = 0xff // a copy: the router's checkpoint stays
	require.Equal(t, byte(n-1), get(t, r, fmt.Sprint(n-1)).Progress[0])
	require.True(t, bytes.Equal(make([]byte, size), j.Progress), "Get's checkpoint")
	require.Len(t, leased, n)
}

// TestListOfLargePayloadValuesCopiesThemOverSeveralHolds: with a payload
// of a large value type (a 256 KiB array), List copies payload values
// over several holds of the lock, about 64 KiB per hold, so no hold grows
// with the page's payloads, and the page is whole and in order.
// (Before, one hold copied them all, growing the page under the lock.)
func TestListOfLargePayloadValuesCopiesThemOverSeveralHolds(t *testing.T) {
	type big [256 << 10]byte
	const n = 8
	r, err := leaserouter.New[big](leaserouter.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close(context.Background())) })
	p := new(big)
	for i := range n {
		p[0] = byte(i)
		require.NoError(t, r.Enqueue(fmt.Sprint(i), *p))
	}
	most := maxAllocatedPerHold(r)
	page, err := r.List(leaserouter.ListParams{Limit: n})
	require.NoError(t, err)
	held := most()
	require.Less(t, held, uint64(len(p)), "bytes allocated in one hold of the lock")
	require.Len(t, page.Jobs, n)
	for k, j := range page.Jobs {
		require.Equal(t, fmt.Sprint(n-1-k), j.ID)
		require.Equal(t, byte(n-1-k), j.Payload[0])
	}
}
