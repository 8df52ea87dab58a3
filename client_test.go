package leaserouter_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// newClient returns a Client stopped (revoking what is still held) when
// the test ends.
func newClient(t *testing.T, opts leaserouter.ClientOptions) *leaserouter.Client {
	t.Helper()
	c, err := leaserouter.NewClient(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// TestRouterEventsCarryDefaultQueue: a Router's events say its queue,
// DefaultQueue, and the kind "" of its jobs, as a Client's say theirs.
func TestRouterEventsCarryDefaultQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var evs []leaserouter.Event
		r := setup(t, leaserouter.Options{OnEvent: func(e leaserouter.Event) { evs = append(evs, e) }})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, r.Flush(t.Context()))
		require.Len(t, evs, 1)
		require.Equal(t, leaserouter.DefaultQueue, evs[0].Queue)
		require.Empty(t, evs[0].JobKind)
	})
}

// TestClientLoggerNamesTheQueue: a Client's Logger writes each queue's
// events with the queue's name, so that two queues' lines tell apart.
func TestClientLoggerNamesTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		c := newClient(t, leaserouter.ClientOptions{
			Options: leaserouter.Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))},
			Queues:  map[string]leaserouter.QueueConfig{"q1": {}},
		})
		k, err := leaserouter.Register(c, "k", func(context.Context, *leaserouter.Lease[int]) error { return nil }, leaserouter.WithKindQueue("q1"))
		require.NoError(t, err)
		require.NoError(t, k.Enqueue(t.Context(), "a", 1))
		require.NoError(t, c.Queue("q1").Flush(t.Context()))
		require.Contains(t, buf.String(), "queue=q1")
		require.Contains(t, buf.String(), "event=enqueued")
	})
}

// TestKindEnqueueChecksItsClient: a Kind's calls on a nil Kind, and a
// Register on a nil Client, are errors, not panics.
func TestKindEnqueueChecksItsClient(t *testing.T) {
	var k *leaserouter.Kind[int]
	require.ErrorIs(t, k.Enqueue(context.Background(), "a", 1), leaserouter.ErrInvalidOptions)
	_, err := k.EnqueueMany(context.Background(), []leaserouter.JobSpec[int]{{ID: "a"}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	_, err = leaserouter.Register(nil, "k", func(context.Context, *leaserouter.Lease[int]) error { return nil })
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	_, err = leaserouter.NewClient(leaserouter.ClientOptions{Middleware: []leaserouter.Middleware{nil}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
}

// TestRaceClient: Enqueue from many goroutines and from handlers,
// Drained, Stop and Start racing, under -race: every job enqueued and
// accepted runs once or is left pending by Stop, and no call panics.
func TestRaceClient(t *testing.T) {
	c := newClient(t, leaserouter.ClientOptions{Queues: map[string]leaserouter.QueueConfig{"a": {Workers: 4}, "b": {Workers: 4}}})
	var ran atomic.Int64
	var follow *leaserouter.Kind[int]
	first, err := leaserouter.Register(c, "first", func(ctx context.Context, l *leaserouter.Lease[int]) error {
		ran.Add(1)
		_ = follow.Enqueue(ctx, fmt.Sprint("f", l.JobID), l.Payload) // ErrClosed once Stop began
		return nil
	}, leaserouter.WithKindQueue("a"))
	require.NoError(t, err)
	follow, err = leaserouter.Register(c, "follow", func(context.Context, *leaserouter.Lease[int]) error {
		ran.Add(1)
		return nil
	}, leaserouter.WithKindQueue("b"))
	require.NoError(t, err)
	ctx := context.Background()
	var wg sync.WaitGroup
	var accepted atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if first.Enqueue(ctx, fmt.Sprint(g, "-", i), i) == nil {
					accepted.Add(1)
				}
			}
		})
	}
	wg.Go(func() { _ = c.Start(ctx) })
	wg.Go(func() { _ = c.Drained(ctx) })
	wg.Wait()
	require.NoError(t, c.Drained(ctx))
	require.EqualValues(t, 2*accepted.Load(), ran.Load(), "each job and its follow-up ran once")
	var stops sync.WaitGroup
	for range 3 {
		stops.Go(func() { require.NoError(t, c.Stop(ctx)) })
	}
	stops.Wait()
	for _, q := range c.QueueNames() {
		require.NoError(t, c.Queue(q).Audit())
	}
}

// TestClientQueueOptions: a queue's Options override the client's field
// by field (a zero field takes the client's), and its Timeout limits each
// attempt as WorkerOptions.Timeout does for Run.
func TestClientQueueOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, leaserouter.ClientOptions{
			Options: leaserouter.Options{MaxAttempts: 1, LeaseDuration: time.Minute},
			Queues: map[string]leaserouter.QueueConfig{
				"plain":   {},
				"patient": {Options: leaserouter.Options{MaxAttempts: 3, Backoff: func(int) time.Duration { return 0 }}},
				"timed":   {Timeout: time.Second},
			},
		})
		causes := make(chan error, 1)
		fail := func(ctx context.Context, l *leaserouter.Lease[int]) error {
			if l.JobID == "slow" {
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			}
			return errors.New("boom")
		}
		ks := map[string]*leaserouter.Kind[int]{}
		for _, q := range []string{"plain", "patient", "timed"} {
			k, err := leaserouter.Register(c, "k-"+q, fail, leaserouter.WithKindQueue(q))
			require.NoError(t, err)
			ks[q] = k
			require.NoError(t, k.Enqueue(t.Context(), "j", 0))
		}
		require.NoError(t, ks["timed"].Enqueue(t.Context(), "slow", 0))
		require.NoError(t, c.Start(t.Context()))
		require.NoError(t, c.Drained(t.Context()))
		for q, attempts := range map[string]int{"plain": 1, "patient": 3, "timed": 1} {
			j, ok := c.Queue(q).Get("j")
			require.True(t, ok)
			require.Equal(t, leaserouter.StateDead, j.State, q)
			require.Equal(t, attempts, j.Attempt, q)
		}
		var te *leaserouter.TimeoutError
		require.ErrorAs(t, <-causes, &te, "the queue's Timeout")
		j, _ := c.Queue("patient").Get("j")
		require.Equal(t, 3, j.MaxAttempts, "the queue's MaxAttempts")
		j, _ = c.Queue("plain").Get("j")
		require.Equal(t, 1, j.MaxAttempts, "the client's MaxAttempts")
	})
}

// TestClientLeaseActsOnTheJob: the *Lease[T] a kind's handler gets acts
// on the job in its queue, as a Router's lease does: Heartbeat stores a
// checkpoint, Expiry tells the lease's end, KeepAlive keeps it, and after
// the attempt its operations are refused.
func TestClientLeaseActsOnTheJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newClient(t, leaserouter.ClientOptions{Options: leaserouter.Options{LeaseDuration: time.Minute}})
		var kept *leaserouter.Lease[string]
		k, err := leaserouter.Register(c, "k", func(ctx context.Context, l *leaserouter.Lease[string]) error {
			kept = l
			kctx, stop := leaserouter.KeepAlive(ctx, l, 0)
			defer stop()
			if err := kctx.Err(); err != nil {
				return fmt.Errorf("KeepAlive: %w", context.Cause(kctx))
			}
			if got := l.Expiry(); !got.Equal(time.Now().Add(time.Minute)) {
				return fmt.Errorf("Expiry %v", got)
			}
			time.Sleep(3 * time.Minute) // kept alive meanwhile
			return l.Heartbeat([]byte("checkpoint"))
		})
		require.NoError(t, err)
		require.NoError(t, k.Enqueue(t.Context(), "a", "p"))
		require.NoError(t, c.Start(t.Context()))
		require.NoError(t, c.Drained(t.Context()))
		j, ok := c.Queue(leaserouter.DefaultQueue).Get("a")
		require.True(t, ok)
		require.Equal(t, leaserouter.StateSucceeded, j.State, j.LastError)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, "checkpoint", string(j.Progress))
		require.ErrorIs(t, kept.Heartbeat(nil), leaserouter.ErrLeaseLost, "refused once the attempt is over")
	})
}

// TestClientOnEventMayEnqueueIntoAnotherQueue: OnEvent may call back
// into the Client, as into a Router: an Enqueue it makes never waits for
// room in the event backlog, nor a Flush for delivery, whichever queue
// it names. (The
// Client's hooks are serial: waiting for another queue's delivery, which
// waits for this OnEvent to return, would wait forever.)
func TestClientOnEventMayEnqueueIntoAnotherQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		followUp := make(chan error, 2)
		var kb *leaserouter.Kind[int]
		var c *leaserouter.Client
		c, err := leaserouter.NewClient(leaserouter.ClientOptions{
			Options: leaserouter.Options{OnEvent: func(e leaserouter.Event) {
				if e.Queue != "a" || e.Kind != leaserouter.EventEnqueued {
					return
				}
				<-release // holds the Client's hooks meanwhile: b's delivery waits, b's backlog fills
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				followUp <- kb.Enqueue(ctx, "follow-up", 0)
				followUp <- c.Queue("b").Flush(ctx)
			}},
			Queues: map[string]leaserouter.QueueConfig{"a": {}, "b": {}},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		noop := func(context.Context, *leaserouter.Lease[int]) error { return nil }
		ka, err := leaserouter.Register(c, "ka", noop, leaserouter.WithKindQueue("a"))
		require.NoError(t, err)
		kb, err = leaserouter.Register(c, "kb", noop, leaserouter.WithKindQueue("b"))
		require.NoError(t, err)
		ctx := context.Background()
		require.NoError(t, ka.Enqueue(ctx, "trigger", 0))
		synctest.Wait() // a's OnEvent holds the hooks
		// Fill b's backlog: an Enqueue of the test waits once it is full.
		for i := 0; ; i++ {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			err := kb.Enqueue(ctx, fmt.Sprint(i), 0)
			cancel()
			if err != nil {
				require.ErrorIs(t, err, context.DeadlineExceeded)
				break
			}
		}
		close(release)
		require.NoError(t, <-followUp, "the Enqueue OnEvent made")
		require.NoError(t, <-followUp, "the Flush OnEvent made")
		require.NoError(t, c.Stop(ctx))
	})
}

// TestClientNotMadeByNewClientIsAnError: a nil or zero Client, and the
// nil Queue that Client.Queue returns for a queue it does not have, give
// errors wrapping ErrInvalidOptions (or zero answers), not panics.
func TestClientNotMadeByNewClientIsAnError(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]*leaserouter.Client{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, c.Start(ctx), leaserouter.ErrInvalidOptions, "Start")
			require.ErrorIs(t, c.Drained(ctx), leaserouter.ErrInvalidOptions, "Drained")
			_, err := c.QueueStats(ctx)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "QueueStats")
			require.Nil(t, c.Queue(leaserouter.DefaultQueue), "Queue")
			require.Empty(t, c.QueueNames(), "QueueNames")
			_, err = leaserouter.Register(c, "k", func(context.Context, *leaserouter.Lease[int]) error { return nil })
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "Register")
			require.ErrorIs(t, c.Stop(ctx), leaserouter.ErrInvalidOptions, "Stop")
		})
	}
	t.Run("nil Queue", func(t *testing.T) {
		c := newClient(t, leaserouter.ClientOptions{})
		q := c.Queue("no-such-queue")
		require.Nil(t, q)
		require.Empty(t, q.Name())
		require.Zero(t, q.Stats())
		require.Empty(t, q.History())
		_, ok := q.Get("a")
		require.False(t, ok)
		_, err := q.QueueStats(ctx)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		_, err = q.List(leaserouter.ListParams{})
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		_, err = q.Leases(1)
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		for _, f := range []func(string) error{q.Retry, q.Cancel, q.Delete} {
			require.ErrorIs(t, f("a"), leaserouter.ErrInvalidOptions)
		}
		for _, f := range []func([]string, []leaserouter.State) (leaserouter.BulkResult, error){q.RetryMany, q.CancelMany, q.DeleteMany} {
			_, err := f([]string{"a"}, nil)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
		}
		require.ErrorIs(t, q.Pause(), leaserouter.ErrInvalidOptions)
		require.ErrorIs(t, q.Resume(), leaserouter.ErrInvalidOptions)
		require.ErrorIs(t, q.Flush(ctx), leaserouter.ErrInvalidOptions)
		require.ErrorIs(t, q.Audit(), leaserouter.ErrInvalidOptions)
	})
}

// TestNewClientRefusesQueueItCannotRun: a queue whose workers Run would
// refuse (a LeaseDuration too short for any heartbeat interval) is
// refused by NewClient, naming the queue, not left idle by a Start that
// returned nil (Drained would wait forever; only Stop told).
func TestNewClientRefusesQueueItCannotRun(t *testing.T) {
	c, err := leaserouter.NewClient(leaserouter.ClientOptions{Queues: map[string]leaserouter.QueueConfig{
		"fast": {Options: leaserouter.Options{LeaseDuration: time.Nanosecond}},
	}})
	if err == nil {
		startErr := c.Start(context.Background())
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		require.NoError(t, startErr)
	}
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
	require.ErrorContains(t, err, `"fast"`)
}
