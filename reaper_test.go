package leaserouter_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

func TestNoHiddenTimingScheduledJob(t *testing.T) {
	for _, settle := range []bool{true, false} {
		t.Run(fmt.Sprintf("wait=%v", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				step := func(d time.Duration) {
					time.Sleep(d)
					if settle {
						synctest.Wait()
					}
				}
				r := setup(t, leaserouter.Options{LeaseDuration: time.Hour})
				t0 := time.Now()
				require.NoError(t, r.Enqueue("delay", "", leaserouter.WithDelay(10*time.Second)))
				require.NoError(t, r.Enqueue("runat", "", leaserouter.WithRunAt(t0.Add(20*time.Second))))
				require.NoError(t, r.Enqueue("get", "", leaserouter.WithDelay(30*time.Second)))

				step(10*time.Second - time.Nanosecond)
				requireNoJob(t, r)
				require.Equal(t, leaserouter.StateScheduled, get(t, r, "delay").State)
				step(time.Nanosecond)
				l := acquire(t, r, "w")
				require.Equal(t, "delay", l.JobID)

				step(10*time.Second - time.Nanosecond)
				requireNoJob(t, r)
				step(time.Nanosecond)
				l = acquire(t, r, "w")
				require.Equal(t, "runat", l.JobID)

				step(10*time.Second - time.Nanosecond)
				require.Equal(t, leaserouter.StateScheduled, get(t, r, "get").State)
				require.Equal(t, 1, r.Stats().Scheduled)
				step(time.Nanosecond)
				require.Equal(t, leaserouter.StatePending, get(t, r, "get").State, "Get settles the run-at")
				require.Equal(t, 0, r.Stats().Scheduled)
			})
		})
	}
}

func TestNoHiddenTimingLeaseExpiry(t *testing.T) {
	for _, settle := range []bool{true, false} {
		t.Run(fmt.Sprintf("wait=%v", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				step := func(d time.Duration) {
					time.Sleep(d)
					if settle {
						synctest.Wait()
					}
				}
				r := setup(t, leaserouter.Options{LeaseDuration: ld})
				for _, id := range []string{"a", "b", "c"} {
					require.NoError(t, r.Enqueue(id, ""))
				}
				t0 := time.Now()
				la, lb, lc := acquire(t, r, "wa"), acquire(t, r, "wb"), acquire(t, r, "wc")

				step(ld - time.Nanosecond)
				require.NoError(t, la.Heartbeat(nil), "valid at expiry-1ns")
				require.NoError(t, lb.Complete(), "valid at expiry-1ns")
				require.Equal(t, leaserouter.StateLeased, get(t, r, "c").State)

				step(time.Nanosecond)
				lle := requireLost(t, lc.Complete(), lc.Token, lc.Token)
				require.Equal(t, "c", lle.JobID)
				j := get(t, r, "c")
				require.Equal(t, leaserouter.StatePending, j.State, "lost at exactly its expiry")
				require.Equal(t, 1, j.Attempt)
				require.Empty(t, j.Owner)
				require.True(t, j.LeaseExpiry.IsZero())
				st := r.Stats()
				require.Equal(t, uint64(1), st.Expirations)
				require.Equal(t, uint64(1), st.StaleRejections)

				// a was extended at t0+ld-1ns to t0+2ld-1ns.
				requireTime(t, t0.Add(2*ld-time.Nanosecond), la.Expiry(), "")
				step(ld - 2*time.Nanosecond)
				j = get(t, r, "a")
				require.Equal(t, leaserouter.StateLeased, j.State)
				requireTime(t, t0.Add(2*ld-time.Nanosecond), j.LeaseExpiry, "")
				step(time.Nanosecond)
				requireLost(t, la.Heartbeat(nil), la.Token, la.Token)
				require.Equal(t, leaserouter.StatePending, get(t, r, "a").State)
				require.Equal(t, uint64(2), r.Stats().Expirations)
			})
		})
	}
}

// A refused operation on an expired lease treats the job exactly as the
// reaper would: here, with no attempts left, the job is dead.
func TestExpiredLeaseOperationSettlesLikeReaper(t *testing.T) {
	for _, settle := range []bool{true, false} {
		t.Run(fmt.Sprintf("wait=%v", settle), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{}
				r := setup(t, leaserouter.Options{LeaseDuration: ld, MaxAttempts: 1, OnEvent: rec.record})
				require.NoError(t, r.Enqueue("a", ""))
				t0 := time.Now()
				l := acquire(t, r, "w")
				time.Sleep(ld)
				if settle {
					synctest.Wait()
				}
				requireLost(t, l.Fail(errors.New("late")), l.Token, l.Token)
				j := get(t, r, "a")
				require.Equal(t, leaserouter.StateDead, j.State)
				require.NotEqual(t, "late", j.LastError, "the refused Fail changed nothing")
				require.NotEmpty(t, j.LastError, "expiry is recorded as the failure")
				st := r.Stats()
				require.Equal(t, uint64(1), st.Dead)
				require.Equal(t, uint64(1), st.Expirations)
				require.Equal(t, uint64(0), st.Retries)

				synctest.Wait()
				require.Equal(t, []string{"enqueued", "lease_acquired", "lease_expired", "dead", "stale_rejected"},
					rec.kinds("a"))
				requireTime(t, t0.Add(ld), rec.of("a")[2].Time, "lease_expired Time is the expiry instant")
			})
		})
	}
}

func TestManyLeasesExpireAtOneInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := setup(t, leaserouter.Options{LeaseDuration: ld, OnEvent: rec.record})
		const n = 1000
		for i := range n {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), ""))
		}
		t0 := time.Now()
		for range n {
			acquire(t, r, "w")
		}
		sleep(ld - time.Nanosecond)
		require.Equal(t, n, r.Stats().Leased)
		sleep(time.Nanosecond)
		// The reaper works in bounded passes but finishes them all at this instant.
		expired := rec.ofKind(leaserouter.EventLeaseExpired)
		require.Len(t, expired, n)
		for _, e := range expired {
			requireTime(t, t0.Add(ld), e.Time, "job %s", e.JobID)
		}
		st := r.Stats()
		require.Equal(t, uint64(n), st.Expirations)
		require.Equal(t, n, st.Pending)
		require.Equal(t, 0, st.Leased)
		require.NoError(t, r.Audit())
	})
}
