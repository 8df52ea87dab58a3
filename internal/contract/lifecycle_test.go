package contract

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	errTestInvalid = errors.New("test: invalid options")
	errTestClosed  = errors.New("test: closed")
)

func newTestLifecycle() *Lifecycle { return NewLifecycle(errTestInvalid, errTestClosed) }

// noClose is a closeAll with nothing to close.
func noClose(context.Context) error { return nil }

// TestLifecycleStartsOnceAndNeverAfterStop: a second Start is an error
// wrapping errInvalid, a Start after Stop is errClosed, and neither calls
// begin.
func TestLifecycleStartsOnceAndNeverAfterStop(t *testing.T) {
	l := newTestLifecycle()
	begun := 0
	begin := func([]string) []func() error { begun++; return nil }
	require.NoError(t, l.Start(begin))
	err := l.Start(begin)
	require.ErrorIs(t, err, errTestInvalid)
	require.ErrorContains(t, err, "started twice")
	require.Equal(t, 1, begun)
	require.NoError(t, l.Stop(context.Background(), noClose, nil))
	require.ErrorIs(t, l.Start(begin), errTestClosed)
	require.Equal(t, 1, begun)

	never := newTestLifecycle()
	require.NoError(t, never.Stop(context.Background(), noClose, nil))
	require.ErrorIs(t, never.Start(begin), errTestClosed)
	require.Equal(t, 1, begun)
}

// TestLifecycleRegisterRefusesWithoutAdding: Register of a name
// registered already, after Start or after Stop refuses and never calls
// add; an error of add is returned and the name stays free.
func TestLifecycleRegisterRefusesWithoutAdding(t *testing.T) {
	l := newTestLifecycle()
	var added []string
	add := func(name string) func() error {
		return func() error { added = append(added, name); return nil }
	}
	require.NoError(t, l.Register("a", add("a")))
	err := l.Register("a", add("a again"))
	require.ErrorIs(t, err, errTestInvalid)
	require.ErrorContains(t, err, `kind "a" is registered already`)

	full := errors.New("test: too many kinds")
	require.ErrorIs(t, l.Register("b", func() error { return full }), full)
	require.Equal(t, []string{"a"}, l.Kinds(), "a refused add leaves the name free")
	require.NoError(t, l.Register("b", add("b")))
	require.Equal(t, []string{"a", "b"}, l.Kinds())

	require.NoError(t, l.Start(func([]string) []func() error { return nil }))
	err = l.Register("c", add("c"))
	require.ErrorIs(t, err, errTestInvalid)
	require.ErrorContains(t, err, `Register of kind "c" after Start`)
	require.NoError(t, l.Stop(context.Background(), noClose, nil))
	require.ErrorIs(t, l.Register("d", add("d")), errTestClosed)
	require.Equal(t, []string{"a", "b"}, added)
	require.Equal(t, []string{"a", "b"}, l.Kinds())
}

// TestLifecycleKindsAreNeverWrittenAgain: a slice Kinds returned keeps
// its contents through later Registers (the claims of a started Client
// read it without the lock).
func TestLifecycleKindsAreNeverWrittenAgain(t *testing.T) {
	l := newTestLifecycle()
	ok := func() error { return nil }
	require.NoError(t, l.Register("a", ok))
	require.NoError(t, l.Register("b", ok))
	kept := l.Kinds()
	require.NoError(t, l.Register("c", ok))
	require.NoError(t, l.Register("d", ok))
	require.Equal(t, []string{"a", "b"}, kept)
	require.Equal(t, []string{"a", "b", "c", "d"}, l.Kinds())
}

// TestLifecycleRegisterAndStartAreAtomic: with Registers racing a Start,
// every Register that returned nil had added its kind before begin ran
// (begin sees it, in the backend's table too), and every one refused
// added nothing.
func TestLifecycleRegisterAndStartAreAtomic(t *testing.T) {
	for range 20 {
		l := newTestLifecycle()
		var table []string // the backend's table, guarded by l's lock
		var seen, tableAtStart []string
		var wg sync.WaitGroup
		ok := make([]bool, 16)
		for i := range ok {
			wg.Go(func() {
				name := fmt.Sprintf("k%02d", i)
				ok[i] = l.Register(name, func() error { table = append(table, name); return nil }) == nil
			})
		}
		wg.Go(func() {
			require.NoError(t, l.Start(func(kinds []string) []func() error {
				seen, tableAtStart = kinds, slices.Clone(table)
				return nil
			}))
		})
		wg.Wait()
		var registered []string
		for i, y := range ok {
			if y {
				registered = append(registered, fmt.Sprintf("k%02d", i))
			}
		}
		require.ElementsMatch(t, registered, seen)
		require.ElementsMatch(t, registered, tableAtStart)
		require.ElementsMatch(t, registered, table, "no add after Start")
		require.NoError(t, l.Stop(context.Background(), noClose, nil))
	}
}

// TestLifecycleStopWaitsForTheRunsAndReturnsTheFirstError: Stop closes,
// waits for every Run goroutine, releases, then returns the first Run
// error; an error wrapping errClosed is none.
func TestLifecycleStopWaitsForTheRunsAndReturnsTheFirstError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newTestLifecycle()
		closing := make(chan struct{})
		first := errors.New("test: tokens exhausted")
		var order []string
		var mu sync.Mutex
		note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
		require.NoError(t, l.Start(func([]string) []func() error {
			return []func() error{
				func() error { <-closing; return fmt.Errorf("%w (queue q1)", errTestClosed) },
				func() error { <-closing; time.Sleep(time.Second); note("run q2"); return first },
				func() error { <-closing; time.Sleep(2 * time.Second); note("run q3"); return errors.New("test: later") },
			}
		}))
		err := l.Stop(context.Background(), func(context.Context) error { note("close"); close(closing); return nil },
			func() { note("release") })
		require.ErrorIs(t, err, first)
		require.Equal(t, []string{"close", "run q2", "run q3", "release"}, order)
		require.NoError(t, l.Stop(context.Background(), noClose, nil), "a later Stop: nil")
	})
}

// TestLifecycleStopReturnsCloseAllsErrorFirst: closeAll's error is
// Stop's, before a Run's.
func TestLifecycleStopReturnsCloseAllsErrorFirst(t *testing.T) {
	l := newTestLifecycle()
	require.NoError(t, l.Start(func([]string) []func() error {
		return []func() error{func() error { return errors.New("test: run") }}
	}))
	closeErr := errors.New("test: close")
	require.ErrorIs(t, l.Stop(context.Background(), func(context.Context) error { return closeErr }, nil), closeErr)
}

// TestLifecycleStopIsBoundedByItsCtx: a Run that does not return holds
// Stop only until its ctx is done, then Stop returns ctx.Err() (release
// still called); the Run is waited for by the test, not by Stop.
func TestLifecycleStopIsBoundedByItsCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newTestLifecycle()
		stuck := make(chan struct{})
		defer close(stuck) // the Run ends with the test, not with Stop
		require.NoError(t, l.Start(func([]string) []func() error {
			return []func() error{func() error { <-stuck; return nil }}
		}))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		released := false
		err := l.Stop(ctx, noClose, func() { released = true })
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, time.Second, time.Since(start), "returns at its ctx's end")
		require.True(t, released)
	})
}

// TestLifecycleStopIsIdempotent: only the first Stop closes and
// releases; one made while the first works waits for it until its own
// ctx is done, and returns nil either way.
func TestLifecycleStopIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newTestLifecycle()
		var closes, releases atomic.Int32
		finish := make(chan struct{})
		firstDone := make(chan error, 1)
		go func() {
			firstDone <- l.Stop(context.Background(), func(context.Context) error {
				closes.Add(1)
				<-finish
				return nil
			}, func() { releases.Add(1) })
		}()
		synctest.Wait() // the first Stop is in closeAll

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		require.NoError(t, l.Stop(ctx, func(context.Context) error { closes.Add(1); return nil }, func() { releases.Add(1) }))
		require.Equal(t, time.Second, time.Since(start), "waited for the first until its ctx was done")

		waiting := make(chan error, 1)
		go func() { waiting <- l.Stop(context.Background(), noClose, nil) }()
		synctest.Wait()
		require.Empty(t, waiting, "waits for the first Stop")
		close(finish)
		require.NoError(t, <-firstDone)
		require.NoError(t, <-waiting)
		require.EqualValues(t, 1, closes.Load())
		require.EqualValues(t, 1, releases.Load())
	})
}

// TestLifecycleStopOfANeverStartedClientCloses: Stop before Start closes
// and releases and returns nil at once; Stopped says so.
func TestLifecycleStopOfANeverStartedClientCloses(t *testing.T) {
	l := newTestLifecycle()
	require.False(t, l.Stopped())
	closed, released := false, false
	var none context.Context // nil: context.Background()
	require.NoError(t, l.Stop(none, func(ctx context.Context) error { closed = ctx != nil; return nil }, func() { released = true }))
	require.True(t, closed)
	require.True(t, released)
	require.True(t, l.Stopped())
}

// TestLifecycleStartWithNoRunStopsAtOnce: a Start whose begin returns no
// Run (pgrouter with no kind) leaves nothing for Stop to wait for.
func TestLifecycleStartWithNoRunStopsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newTestLifecycle()
		require.NoError(t, l.Start(func([]string) []func() error { return nil }))
		start := time.Now()
		require.NoError(t, l.Stop(context.Background(), noClose, nil))
		require.Zero(t, time.Since(start))
	})
}

// TestHookLockMakesHooksSerial: a hook's call waits (durably blocked, as
// synctest sees it) while another holds the lock, whether through
// SerialHook or the Handler; a panic releases it.
func TestHookLockMakesHooksSerial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := NewHookLock()
		require.Nil(t, SerialHook[int](h, nil))
		inside := make(chan struct{})
		leave := make(chan struct{})
		var calls atomic.Int32
		hook := SerialHook(h, func(n int) {
			calls.Add(1)
			if n == 1 {
				close(inside)
				<-leave
			}
			if n == 3 {
				panic("test: hook panics")
			}
		})
		go hook(1)
		<-inside
		var logged atomic.Int32
		logger := slog.New(h.Handler(countingHandler{&logged})).With("queue", "q")
		go hook(2)
		go logger.Info("waits")
		synctest.Wait()
		require.EqualValues(t, 1, calls.Load(), "the second hook waits")
		require.Zero(t, logged.Load(), "the Logger waits")
		close(leave)
		synctest.Wait()
		require.EqualValues(t, 2, calls.Load())
		require.EqualValues(t, 1, logged.Load())

		require.Panics(t, func() { hook(3) })
		logger.Info("after a panic")
		require.EqualValues(t, 2, logged.Load(), "a panic released the lock")
	})
}

// countingHandler counts the records it handles.
type countingHandler struct{ n *atomic.Int32 }

func (c countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (c countingHandler) Handle(context.Context, slog.Record) error {
	c.n.Add(1)
	return nil
}
func (c countingHandler) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c countingHandler) WithGroup(string) slog.Handler      { return c }

// TestLifecycleStopWithADoneCtxAndNothingToWaitForReturnsNil: Stop with
// a ctx done already, and no Run to wait for, returns nil every time
// (a select of a closed channel and a done ctx picks either at random:
// the channel is looked at first).
func TestLifecycleStopWithADoneCtxAndNothingToWaitForReturnsNil(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		l := newTestLifecycle()
		if i%2 == 1 {
			require.NoError(t, l.Start(func([]string) []func() error { return nil }))
		}
		require.NoError(t, l.Stop(ctx, noClose, nil), "round %d", i)
	}
}

// TestLifecycleStopCutShortReturnsCtxErrOnce: a Stop whose ctx ends
// while each queue's Close waits returns ctx.Err() itself, not one
// copy per queue joined.
func TestLifecycleStopCutShortReturnsCtxErrOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l := newTestLifecycle()
	closeAll := func(ctx context.Context) error { return errors.Join(ctx.Err(), ctx.Err()) }
	require.Equal(t, context.Canceled, l.Stop(ctx, closeAll, nil))
}
