package pgrouter_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	listcursor "github.com/leaserouter/leaserouter/internal/cursor"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestBadInput: every call given nil, zero, negative, empty or
// unencodable input, or called after Close, returns the documented error,
// never panics and changes nothing. Each row is a subtest: a failing row
// hides none of the others.
func TestBadInput(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	//lint:ignore SA1012 a nil ctx is documented to mean context.Background()
	r, err := pgrouter.New[any](nil, db, pgrouter.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	type row struct {
		name  string
		check func(t *testing.T)
	}
	rows := []row{
		{"Migrate nil pool", func(t *testing.T) { require.Error(t, pgrouter.Migrate(ctx, nil)) }},
		{"New nil pool", func(t *testing.T) {
			_, err := pgrouter.New[int](ctx, nil, pgrouter.Options{})
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		}},
	}
	for _, o := range []pgrouter.Options{
		{LeaseDuration: -1}, {LeaseDuration: time.Microsecond}, {MaxAttempts: -1}, {MaxAttempts: math.MaxInt32 + 1},
		{PollInterval: -1}, {TokenFloor: math.MaxInt64},
	} {
		rows = append(rows, row{fmt.Sprintf("New %+v", o), func(t *testing.T) {
			_, err := pgrouter.New[int](ctx, db, o)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		}})
	}
	rows = append(rows,
		row{"Enqueue empty id", func(t *testing.T) { require.ErrorIs(t, r.Enqueue(ctx, "", 1), leaserouter.ErrInvalidJob) }},
		row{"Enqueue negative delay", func(t *testing.T) {
			require.ErrorIs(t, r.Enqueue(ctx, "a", 1, leaserouter.WithDelay(-time.Second)), leaserouter.ErrInvalidJob)
		}},
		row{"Enqueue negative timeout", func(t *testing.T) {
			require.ErrorIs(t, r.Enqueue(ctx, "a", 1, leaserouter.WithTimeout(-time.Nanosecond)), leaserouter.ErrInvalidJob)
			_, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[any]{{ID: "a", Options: []leaserouter.EnqueueOption{leaserouter.WithTimeout(-time.Second)}}})
			require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
			_, ok, err := r.Get(ctx, "a")
			require.NoError(t, err)
			require.False(t, ok, "nothing enqueued")
		}},
		row{"Run negative WorkerOptions.Timeout", func(t *testing.T) {
			err := r.Run(ctx, leaserouter.WorkerOptions{Timeout: -time.Second}, func(context.Context, *pgrouter.Lease[any]) error { return nil })
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		}},
		row{"Snooze negative delay or nil ctx", func(t *testing.T) {
			require.NoError(t, r.Enqueue(ctx, "snooze", 1))
			l, err := r.TryAcquire(ctx, "w")
			require.NoError(t, err)
			require.ErrorIs(t, l.Snooze(ctx, -1), leaserouter.ErrInvalidOptions)
			j, _, err := r.Get(ctx, "snooze")
			require.NoError(t, err)
			require.Equal(t, leaserouter.StateLeased, j.State, "a refused Snooze changes nothing")
			require.Equal(t, 1, j.Attempt)
			//lint:ignore SA1012 a nil ctx is documented to mean context.Background()
			require.NoError(t, l.Snooze(nil, 0))
			require.NoError(t, r.Delete(ctx, "snooze"))
		}},
		row{"Enqueue zero max attempts", func(t *testing.T) {
			require.ErrorIs(t, r.Enqueue(ctx, "a", 1, leaserouter.WithMaxAttempts(0)), leaserouter.ErrInvalidJob)
		}},
		row{"Enqueue unencodable payload", func(t *testing.T) {
			require.ErrorIs(t, r.Enqueue(ctx, "a", make(chan int)), leaserouter.ErrInvalidJob)
		}},
		row{"EnqueueTx nil tx", func(t *testing.T) { require.ErrorIs(t, r.EnqueueTx(ctx, nil, "a", 1), leaserouter.ErrInvalidOptions) }},
		row{"EnqueueMany nil", func(t *testing.T) {
			dups, err := r.EnqueueMany(ctx, nil)
			require.NoError(t, err)
			require.Nil(t, dups)
		}},
		row{"EnqueueMany with an invalid job", func(t *testing.T) {
			_, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[any]{{ID: "ok"}, {ID: ""}})
			require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
			require.ErrorContains(t, err, "batch index 1")
			_, ok, err := r.Get(ctx, "ok")
			require.NoError(t, err)
			require.False(t, ok, "an invalid batch enqueues nothing")
		}},
	)
	for _, max := range []int{0, -1} {
		rows = append(rows, row{fmt.Sprintf("AcquireMany max %d", max), func(t *testing.T) {
			_, err := r.TryAcquireMany(ctx, "w", max)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			_, err = r.AcquireMany(ctx, "w", max)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		}})
	}
	rows = append(rows, row{"TryAcquire nil ctx", func(t *testing.T) {
		//lint:ignore SA1012 a nil ctx is documented to mean context.Background()
		_, err := r.TryAcquire(nil, "w")
		require.ErrorIs(t, err, leaserouter.ErrNoJob)
	}})
	var nilLease *pgrouter.Lease[any]
	for name, l := range map[string]*pgrouter.Lease[any]{"nil Lease": nilLease, "zero Lease": {}} {
		rows = append(rows, row{name, func(t *testing.T) {
			var lost *leaserouter.LeaseLostError
			require.ErrorAs(t, l.Heartbeat(ctx, nil), &lost)
			require.Equal(t, leaserouter.LostNilLease, lost.Reason)
			require.ErrorAs(t, l.Complete(ctx), &lost)
			require.ErrorAs(t, l.Fail(ctx, nil), &lost)
			require.ErrorAs(t, l.Release(ctx), &lost)
			require.ErrorAs(t, l.Snooze(ctx, 0), &lost)
			require.Equal(t, leaserouter.LostNilLease, lost.Reason)
			require.ErrorIs(t, l.Snooze(ctx, -1), leaserouter.ErrInvalidOptions, "the delay is checked first")
			require.ErrorIs(t, l.CompleteTx(ctx, nil), leaserouter.ErrInvalidOptions)
			require.True(t, l.Expiry().IsZero())
			kctx, cancel := pgrouter.KeepAlive(ctx, l, 0)
			defer cancel()
			require.Error(t, kctx.Err())
			require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrInvalidOptions, "as the core's KeepAlive")
		}})
	}
	rows = append(rows,
		row{"Get empty id", func(t *testing.T) {
			_, ok, err := r.Get(ctx, "")
			require.NoError(t, err)
			require.False(t, ok)
		}},
		row{"Cancel empty id", func(t *testing.T) {
			require.ErrorIs(t, r.Cancel(ctx, ""), leaserouter.ErrInvalidJob)
			require.ErrorIs(t, r.Cancel(ctx, ""), leaserouter.ErrNotFound)
		}},
		row{"Fence empty key, token above bigint", func(t *testing.T) {
			tx, err := db.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			require.ErrorIs(t, pgrouter.Fence(ctx, tx, "", 1), leaserouter.ErrInvalidOptions)
			require.ErrorIs(t, pgrouter.Fence(ctx, tx, "k", math.MaxUint64), leaserouter.ErrInvalidOptions)
		}},
		row{"List bad state, limit, cursor or prefix", func(t *testing.T) {
			require.NoError(t, r.Enqueue(ctx, "listed", 1))
			require.NoError(t, r.Enqueue(ctx, "listed too", 1))
			good, err := r.List(ctx, leaserouter.ListParams{Limit: 1})
			require.NoError(t, err)
			require.NotEmpty(t, good.NextCursor, "the queue holds more than one job")
			for _, p := range []leaserouter.ListParams{
				{States: []leaserouter.State{leaserouter.StateCanceled + 1}},
				{States: []leaserouter.State{255}},
				{Limit: -1}, {Limit: math.MinInt}, {Limit: leaserouter.MaxListLimit + 1}, {Limit: math.MaxInt},
				{Cursor: "not a cursor"}, {Cursor: "AAAAAAAAAAAAAAAAAAAAAAA"}, {Cursor: good.NextCursor + "A"},
				{Cursor: good.NextCursor[:len(good.NextCursor)-1]},
				{Cursor: good.NextCursor, IDPrefix: "l"}, // made under no prefix
				{Cursor: good.NextCursor, States: []leaserouter.State{leaserouter.StatePending}},
				{IDPrefix: "ab\xffc"},
			} {
				res, err := r.List(ctx, p)
				require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "%+v", p)
				require.Empty(t, res.Jobs)
			}
			_, err = r.List(ctx, leaserouter.ListParams{Cursor: maxSeqCursor()})
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			require.ErrorIs(t, err, listcursor.ErrMalformed, "a cursor of this queue and filters whose enqueue order is above bigint")
			res, err := r.List(ctx, leaserouter.ListParams{IDPrefix: "a\x00"})
			require.NoError(t, err, "a prefix holding a NUL selects nothing")
			require.Empty(t, res.Jobs)
			//lint:ignore SA1012 a nil ctx is documented to mean context.Background()
			res, err = r.List(nil, leaserouter.ListParams{IDPrefix: "listed"})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 2)
		}},
		row{"Retry and Delete empty or unknown id", func(t *testing.T) {
			for _, f := range []func(context.Context, string) error{r.Retry, r.Delete} {
				require.ErrorIs(t, f(ctx, ""), leaserouter.ErrInvalidJob)
				require.ErrorIs(t, f(ctx, ""), leaserouter.ErrNotFound)
				require.ErrorIs(t, f(ctx, "a\x00b"), leaserouter.ErrNotFound)
				require.ErrorIs(t, f(ctx, "never enqueued"), leaserouter.ErrNotFound)
			}
		}},
		row{"Pause and Resume nil ctx", func(t *testing.T) {
			//lint:ignore SA1012 a nil ctx is documented to mean context.Background()
			require.NoError(t, r.Pause(nil))
			//lint:ignore SA1012 a nil ctx is documented to mean context.Background()
			require.NoError(t, r.Resume(nil))
		}},
		row{"KeepAlive interval >= LeaseDuration", func(t *testing.T) {
			require.NoError(t, r.Enqueue(ctx, "keep", 1))
			l, err := r.TryAcquire(ctx, "w")
			require.NoError(t, err)
			kctx, cancel := pgrouter.KeepAlive(ctx, l, leaserouter.DefaultLeaseDuration)
			defer cancel()
			require.ErrorIs(t, context.Cause(kctx), leaserouter.ErrInvalidOptions)
			require.NoError(t, l.Release(ctx))
		}},
	)
	for _, c := range rows {
		t.Run(c.name, c.check)
	}

	// After Close: new work is refused, reads still answer, the revoked
	// lease is refused.
	rc := routerOn[any](t, db, pgrouter.Options{Queue: "closed"})
	require.NoError(t, rc.Enqueue(ctx, "a", 1))
	l, err := rc.TryAcquire(ctx, "w")
	require.NoError(t, err)
	done, stop := context.WithCancel(ctx)
	stop()
	require.ErrorIs(t, rc.Close(done), context.Canceled)
	for _, c := range []row{
		{"after Close: Enqueue", func(t *testing.T) { require.ErrorIs(t, rc.Enqueue(ctx, "b", 1), leaserouter.ErrClosed) }},
		{"after Close: EnqueueMany", func(t *testing.T) {
			_, err := rc.EnqueueMany(ctx, []leaserouter.JobSpec[any]{{ID: "b"}})
			require.ErrorIs(t, err, leaserouter.ErrClosed)
		}},
		{"after Close: TryAcquire", func(t *testing.T) {
			_, err := rc.TryAcquire(ctx, "w")
			require.ErrorIs(t, err, leaserouter.ErrClosed)
		}},
		{"after Close: Acquire", func(t *testing.T) {
			_, err := rc.Acquire(ctx, "w")
			require.ErrorIs(t, err, leaserouter.ErrClosed)
		}},
		{"after Close: Cancel", func(t *testing.T) { require.ErrorIs(t, rc.Cancel(ctx, "a"), leaserouter.ErrClosed) }},
		{"after Close: Run", func(t *testing.T) {
			require.ErrorIs(t, rc.Run(ctx, leaserouter.WorkerOptions{}, func(context.Context, *pgrouter.Lease[any]) error { return nil }), leaserouter.ErrClosed)
		}},
		{"after Close: Get", func(t *testing.T) {
			_, ok, err := rc.Get(ctx, "a")
			require.NoError(t, err)
			require.True(t, ok)
		}},
		{"after Close: Stats", func(t *testing.T) {
			_, err := rc.Stats(ctx)
			require.NoError(t, err)
		}},
		{"after Close: List", func(t *testing.T) {
			res, err := rc.List(ctx, leaserouter.ListParams{})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
		}},
		{"after Close: Retry, Delete, Pause, Resume", func(t *testing.T) {
			require.ErrorIs(t, rc.Retry(ctx, "a"), leaserouter.ErrClosed)
			require.ErrorIs(t, rc.Delete(ctx, "a"), leaserouter.ErrClosed)
			require.ErrorIs(t, rc.Pause(ctx), leaserouter.ErrClosed)
			require.ErrorIs(t, rc.Resume(ctx), leaserouter.ErrClosed)
		}},
		{"after Close: Queues", func(t *testing.T) {
			_, err := rc.Queues(ctx)
			require.NoError(t, err)
		}},
		{"after Close: the revoked lease", func(t *testing.T) { require.ErrorIs(t, l.Complete(ctx), leaserouter.ErrLeaseLost) }},
		{"after Close: Snooze of the revoked lease", func(t *testing.T) {
			var lost *leaserouter.LeaseLostError
			require.ErrorAs(t, l.Snooze(ctx, 0), &lost)
			require.Equal(t, leaserouter.LostRevoked, lost.Reason)
		}},
		{"after Close: a second Close", func(t *testing.T) { require.NoError(t, rc.Close(ctx)) }},
	} {
		t.Run(c.name, c.check)
	}
}

// badNames break the core's rule for IDs (valid UTF-8, no NUL, at most
// leaserouter.MaxIDBytes bytes), as the core's badinput_test.go lists
// them; problem is what the error must say of each.
var badNames = []struct{ name, id, problem string }{
	{"NUL", "a\x00b", "NUL at byte 1"},
	{"NUL alone", "\x00", "NUL at byte 0"},
	{"invalid UTF-8", "ab\xffc", "not valid UTF-8 at byte 2"},
	{"truncated rune", "ok\xe2\x82", "not valid UTF-8 at byte 2"},
	{"UTF-16 surrogate", "\xed\xa0\x80", "not valid UTF-8 at byte 0"},
	{"MaxIDBytes+1", strings.Repeat("x", leaserouter.MaxIDBytes+1), fmt.Sprintf("is %d bytes", leaserouter.MaxIDBytes+1)},
	{"MaxIDBytes+1 in 2-byte runes", strings.Repeat("é", leaserouter.MaxIDBytes/2) + "x", fmt.Sprintf("is %d bytes", leaserouter.MaxIDBytes+1)},
	{"10,000 bytes incompressible", incompressible(4, 10_000), "is 10000 bytes"},
}

// goodNames keep the rule at its edges; the last two are incompressible,
// so the database's index entries hold all of their bytes.
var goodNames = []struct{ name, id string }{
	{"MaxIDBytes of ASCII", strings.Repeat("x", leaserouter.MaxIDBytes)},
	{"MaxIDBytes of 4-byte runes", strings.Repeat("😀", leaserouter.MaxIDBytes/4)},
	{"control characters but NUL", "\x01\t\x7f"},
	{"MaxIDBytes incompressible", incompressible(1, leaserouter.MaxIDBytes)},
	{"MaxIDBytes incompressible in a queue of MaxQueueBytes", incompressible(2, leaserouter.MaxIDBytes)},
}

// incompressible is n bytes of valid UTF-8 that pglz cannot shrink:
// seeded random 3-byte runes, then ASCII to make up n.
func incompressible(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, seed))
	var b strings.Builder
	for b.Len()+3 <= n {
		b.WriteRune(rune(0x4E00 + rng.IntN(0x5000)))
	}
	for b.Len() < n {
		b.WriteByte(byte('a' + rng.IntN(26)))
	}
	return b.String()
}

// TestBadNamesGetTheCoresErrors: job IDs and worker IDs that break the
// core's rule for IDs, and fence keys and queue names that break it with
// their own limits (MaxFenceKeyBytes, MaxQueueBytes), are refused at the
// door — with the core's error, word for word, where the core has the
// call; never a driver error — and change nothing; names at the edges
// are accepted and read back whole.
func TestBadNamesGetTheCoresErrors(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	core, err := leaserouter.New[int](leaserouter.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, core.Close(context.Background())) })
	r := routerOn[int](t, db, pgrouter.Options{})
	require.NoError(t, r.Enqueue(ctx, "ready", 1))
	require.NoError(t, core.Enqueue("ready", 1))
	same := func(t *testing.T, coreErr, err, target error, problem string) {
		t.Helper()
		require.ErrorIs(t, err, target)
		require.ErrorContains(t, err, problem)
		require.Error(t, coreErr, "the core refuses it too")
		require.Equal(t, coreErr.Error(), err.Error(), "the core's error")
	}
	begin := func(t *testing.T) pgx.Tx {
		t.Helper()
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // its connection back to the pool, whatever failed
		return tx
	}
	usable := func(t *testing.T, tx pgx.Tx) {
		t.Helper()
		_, err := tx.Exec(ctx, "SELECT 1")
		require.NoError(t, err, "the transaction stays usable")
		require.NoError(t, tx.Rollback(ctx))
	}
	h := func(context.Context, *pgrouter.Lease[int]) error { return nil }
	done, cancel := context.WithCancel(ctx)
	cancel()
	for _, n := range badNames {
		t.Run(n.name, func(t *testing.T) {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second) // bounds a blocking Acquire should the check go
			defer cancel()
			same(t, core.Enqueue(n.id, 1), r.Enqueue(ctx, n.id, 1), leaserouter.ErrInvalidJob, n.problem)
			tx := begin(t)
			same(t, core.Enqueue(n.id, 1), r.EnqueueTx(ctx, tx, n.id, 1), leaserouter.ErrInvalidJob, n.problem)
			usable(t, tx)
			batch := []leaserouter.JobSpec[int]{{ID: "new"}, {ID: "new2"}, {ID: n.id}}
			_, coreErr := core.EnqueueMany(batch)
			dups, err := r.EnqueueMany(ctx, batch)
			same(t, coreErr, err, leaserouter.ErrInvalidJob, n.problem)
			require.ErrorContains(t, err, "batch index 2")
			require.Nil(t, dups)

			_, ok, err := r.Get(ctx, n.id)
			require.NoError(t, err, "a lookup of an ID that cannot exist")
			require.False(t, ok)
			err = r.Cancel(ctx, n.id)
			same(t, core.Cancel(n.id), err, leaserouter.ErrNotFound, n.problem)
			require.ErrorIs(t, err, leaserouter.ErrInvalidJob)

			_, coreErr = core.TryAcquire(n.id)
			l, err := r.TryAcquire(ctx, n.id)
			same(t, coreErr, err, leaserouter.ErrInvalidOptions, n.problem)
			require.Nil(t, l)
			_, coreErr = core.Acquire(actx, n.id)
			l, err = r.Acquire(actx, n.id)
			same(t, coreErr, err, leaserouter.ErrInvalidOptions, n.problem)
			require.Nil(t, l)
			_, coreErr = core.TryAcquireMany(n.id, 2)
			ls, err := r.TryAcquireMany(ctx, n.id, 2)
			same(t, coreErr, err, leaserouter.ErrInvalidOptions, n.problem)
			require.Empty(t, ls)
			_, coreErr = core.AcquireMany(actx, n.id, 2)
			ls, err = r.AcquireMany(actx, n.id, 2)
			same(t, coreErr, err, leaserouter.ErrInvalidOptions, n.problem)
			require.Empty(t, ls)
			opts := leaserouter.WorkerOptions{WorkerID: n.id}
			same(t, core.Run(done, opts, func(context.Context, *leaserouter.Lease[int]) error { return nil }),
				r.Run(done, opts, h), leaserouter.ErrInvalidOptions, "WorkerID")

			for _, id := range []string{"new", "new2"} {
				_, ok, err := r.Get(ctx, id)
				require.NoError(t, err)
				require.False(t, ok, "an invalid batch enqueues nothing")
			}
			j, _, err := r.Get(ctx, "ready")
			require.NoError(t, err)
			require.Equal(t, leaserouter.StatePending, j.State, "no job was leased")
			cj, _ := core.Get("ready")
			require.Equal(t, leaserouter.StatePending, cj.State, "no job was leased in the core")
		})
	}

	for i, n := range goodNames {
		t.Run(n.name, func(t *testing.T) {
			queue := fmt.Sprint("good-", i)
			if i == len(goodNames)-1 {
				queue = incompressible(3, pgrouter.MaxQueueBytes)
			}
			r := routerOn[int](t, db, pgrouter.Options{Queue: queue})
			dups, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[int]{{ID: n.id, Payload: 7}})
			require.NoError(t, err)
			require.Nil(t, dups)
			require.ErrorIs(t, r.Enqueue(ctx, n.id, 1), leaserouter.ErrDuplicate, "the same row")
			require.NoError(t, r.Enqueue(ctx, "second", 1))
			j, ok, err := r.Get(ctx, n.id)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, n.id, j.ID)
			l, err := r.TryAcquire(ctx, n.id)
			require.NoError(t, err)
			require.Equal(t, n.id, l.JobID)
			require.Equal(t, n.id, l.WorkerID)
			j, _, err = r.Get(ctx, n.id)
			require.NoError(t, err)
			require.Equal(t, n.id, j.Owner)
			tx := begin(t)
			require.NoError(t, pgrouter.Fence(ctx, tx, n.id, l.Token))
			require.NoError(t, l.CompleteTx(ctx, tx))
			require.NoError(t, tx.Commit(ctx))
			require.NoError(t, r.Cancel(ctx, n.id), "finished: nothing to cancel")
			require.NoError(t, r.Cancel(ctx, "second"))
		})
	}

	t.Run("fence keys", func(t *testing.T) {
		for _, k := range []struct{ name, key, problem string }{
			{"NUL", "k\x00", "NUL at byte 1"},
			{"invalid UTF-8", "k\xff", "not valid UTF-8 at byte 1"},
			{"UTF-16 surrogate", "\xed\xa0\x80", "not valid UTF-8 at byte 0"},
			{"MaxFenceKeyBytes+1", incompressible(5, pgrouter.MaxFenceKeyBytes+1), fmt.Sprintf("is %d bytes", pgrouter.MaxFenceKeyBytes+1)},
			{"10,000 bytes", incompressible(4, 10_000), "is 10000 bytes"},
		} {
			tx := begin(t)
			err := pgrouter.Fence(ctx, tx, k.key, 1)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, k.name)
			require.ErrorContains(t, err, k.problem, k.name)
			usable(t, tx)
		}
		for _, key := range []string{
			"doc/" + incompressible(6, leaserouter.MaxIDBytes), // a job ID with a prefix
			incompressible(7, pgrouter.MaxFenceKeyBytes),
		} {
			tx := begin(t)
			require.NoError(t, pgrouter.Fence(ctx, tx, key, 2))
			require.ErrorIs(t, pgrouter.Fence(ctx, tx, key, 1), leaserouter.ErrStaleToken)
			require.NoError(t, tx.Commit(ctx))
		}
	})

	t.Run("queue names", func(t *testing.T) {
		for _, q := range []struct{ name, queue, problem string }{
			{"NUL", "q\x00", "NUL at byte 1"},
			{"invalid UTF-8", "\xffq", "not valid UTF-8 at byte 0"},
			{"UTF-16 surrogate", "q\xed\xa0\x80", "not valid UTF-8 at byte 1"},
			{"MaxQueueBytes+1", strings.Repeat("q", pgrouter.MaxQueueBytes+1), fmt.Sprintf("is %d bytes", pgrouter.MaxQueueBytes+1)},
			{"8000 bytes (NOTIFY's payload limit)", strings.Repeat("q", 8000), "is 8000 bytes"},
		} {
			r, err := pgrouter.New[int](ctx, db, pgrouter.Options{Queue: q.queue})
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, q.name)
			require.ErrorContains(t, err, "Queue", q.name)
			require.ErrorContains(t, err, q.problem, q.name)
			require.Nil(t, r, q.name)
		}
	})
}

// maxSeqCursor is a well-formed List cursor of no filter on the default
// queue whose enqueue order is above the largest bigint: no job has it.
func maxSeqCursor() string {
	return listcursor.EncodeIn(pgrouter.DefaultQueue, math.MaxUint64, 1<<(leaserouter.StateCanceled+1)-1, "")
}
