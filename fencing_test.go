package leaserouter_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

func TestTokensAboveWallClockAtNew(t *testing.T) {
	// Outside a bubble: the real wall clock.
	for _, floor := range []leaserouter.Token{0, 42} {
		before := time.Now().UnixNano()
		r := setup(t, leaserouter.Options{TokenFloor: floor})
		require.NoError(t, r.Enqueue("a", ""))
		l := acquire(t, r, "w")
		require.NoError(t, l.Complete()) // first, so a failure below leaves no lease for Close to drain
		require.Greater(t, uint64(l.Token), uint64(before), "first token above the wall clock at New")
		require.LessOrEqual(t, uint64(l.Token), uint64(math.MaxInt64))
	}
}

func TestTokensExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{TokenFloor: math.MaxInt64 - 1})
		require.NoError(t, r.Enqueue("a", ""))
		require.NoError(t, r.Enqueue("b", ""))
		l := acquire(t, r, "w")
		require.Equal(t, leaserouter.Token(math.MaxInt64), l.Token, "the only token above the floor")
		require.NoError(t, l.Complete())

		l, err := r.TryAcquire("w")
		require.ErrorIs(t, err, leaserouter.ErrTokensExhausted)
		require.Nil(t, l)
		j := get(t, r, "b")
		require.Equal(t, leaserouter.StatePending, j.State, "no job is lost")
		require.Equal(t, 0, j.Attempt)
		require.Equal(t, uint64(1), r.Stats().LeasesGranted)
	})
}

func requireStale(t *testing.T, err error, key string, token, highest leaserouter.Token) {
	t.Helper()
	require.ErrorIs(t, err, leaserouter.ErrStaleToken)
	var ste *leaserouter.StaleTokenError
	require.ErrorAs(t, err, &ste)
	require.Equal(t, leaserouter.StaleTokenError{Key: key, Token: token, Highest: highest}, *ste)
}

func asStaleTokenValue(err error) (v leaserouter.StaleTokenError, ok bool, panicked any) {
	defer func() { panicked = recover() }()
	var target any = &v
	ok = errors.As(err, target)
	return v, ok, nil
}

func TestFenceAdmit(t *testing.T) {
	var f leaserouter.Fence // the zero value is ready
	require.NoError(t, f.Admit("k", 0), "a fresh key's highest token is 0")
	require.NoError(t, f.Admit("k", 5))
	require.NoError(t, f.Admit("k", 5), "equal to the highest is admitted")
	requireStale(t, f.Admit("k", 4), "k", 4, 5)
	requireStale(t, f.Admit("k", 4), "k", 4, 5)
	require.NoError(t, f.Admit("k", 7))
	requireStale(t, f.Admit("k", 5), "k", 5, 7)
	require.NoError(t, f.Admit("other", 1), "keys are independent")
	require.NoError(t, f.Admit("", 3), "any string is a key")
}

// The brief: errors.As works with a StaleTokenError value target as well.
func TestStaleTokenErrorAsValueTarget(t *testing.T) {
	var f leaserouter.Fence
	require.NoError(t, f.Admit("k", 7))
	err := f.Admit("k", 1)
	requireStale(t, err, "k", 1, 7)
	v, ok, panicked := asStaleTokenValue(err)
	require.Nil(t, panicked, "errors.As with a StaleTokenError value target panicked")
	require.True(t, ok)
	require.Equal(t, leaserouter.StaleTokenError{Key: "k", Token: 1, Highest: 7}, v)
}

func TestFenceDo(t *testing.T) {
	var f leaserouter.Fence
	var writes []leaserouter.Token
	write := func(tok leaserouter.Token) func() error {
		return func() error { writes = append(writes, tok); return nil }
	}
	require.NoError(t, f.Do("k", 10, write(10)))
	requireStale(t, f.Do("k", 9, write(9)), "k", 9, 10)
	require.Equal(t, []leaserouter.Token{10}, writes, "a stale token never writes")

	// A failed write still fences older tokens.
	boom := errors.New("disk full")
	err := f.Do("k", 20, func() error { return boom })
	require.ErrorIs(t, err, boom, "Do returns the write's error")
	requireStale(t, f.Admit("k", 15), "k", 15, 20)

	// nil write: an error, nothing recorded.
	require.ErrorIs(t, f.Do("k", 50, nil), leaserouter.ErrInvalidOptions)
	require.NoError(t, f.Admit("k", 20))

	// Forget resets the key.
	f.Forget("k")
	require.NoError(t, f.Do("k", 1, write(1)))
	require.Equal(t, []leaserouter.Token{10, 1}, writes)
	f.Forget("never-seen") // no-op
	require.NoError(t, f.Admit("never-seen", 0))
}

func TestFenceNil(t *testing.T) {
	var f *leaserouter.Fence
	require.Error(t, f.Admit("k", 1))
	called := false
	require.Error(t, f.Do("k", 1, func() error { called = true; return nil }))
	require.False(t, called)
	require.NotPanics(t, func() { f.Forget("k") })
}

// Concurrent Do on one key runs one write at a time, in token order: a stale
// holder never writes after a newer one.
func TestFenceDoSerialisesOneKey(t *testing.T) {
	var f leaserouter.Fence
	var (
		inside  atomic.Int32
		overlap atomic.Bool
		mu      sync.Mutex
		order   []leaserouter.Token
		refused []error
	)
	var wg sync.WaitGroup
	const goroutines, perG = 8, 50
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				tok := leaserouter.Token(i*goroutines + g + 1)
				err := f.Do("k", tok, func() error {
					if inside.Add(1) > 1 {
						overlap.Store(true)
					}
					runtime.Gosched()
					mu.Lock()
					order = append(order, tok)
					mu.Unlock()
					inside.Add(-1)
					return nil
				})
				if err != nil {
					mu.Lock()
					refused = append(refused, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.False(t, overlap.Load(), "two writes on one key overlapped")
	require.NotEmpty(t, order)
	require.True(t, slices.IsSorted(order), "writes out of token order: %v", order)
	require.Len(t, slices.Compact(slices.Clone(order)), len(order))
	require.Equal(t, goroutines*perG, len(order)+len(refused))
	for _, err := range refused {
		var ste *leaserouter.StaleTokenError
		require.ErrorAs(t, err, &ste)
		require.Greater(t, ste.Highest, ste.Token)
	}
	require.NoError(t, f.Admit("k", order[len(order)-1]))
}

// TestRaceFence: concurrent Do calls on one key with random tokens. The
// writes that run are serial and in non-decreasing token order; every
// refusal is a *StaleTokenError naming a higher token.
func TestRaceFence(t *testing.T) {
	const goroutines, per = 16, 100
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	errWrite := errors.New("write failed")

	var (
		f        leaserouter.Fence
		writes   []leaserouter.Token // appended only inside Do's write: the Fence serialises them
		ok       atomic.Int64
		failed   atomic.Int64
		refused  atomic.Int64
		fails    raceFailures
		wg       sync.WaitGroup
		start    = make(chan struct{})
		otherKey atomic.Int64 // writes on an independent key, never refused
	)
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			<-start
			for i := range per {
				// Tokens drift upwards with overlap between goroutines, so
				// both admissions and refusals are common.
				tok := leaserouter.Token(1 + 8*i + rng.IntN(64))
				fail := rng.IntN(10) == 0
				err := f.Do("k", tok, func() error {
					writes = append(writes, tok)
					if fail {
						return errWrite
					}
					return nil
				})
				var ste *leaserouter.StaleTokenError
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, errWrite):
					failed.Add(1)
				case errors.As(err, &ste) && errors.Is(err, leaserouter.ErrStaleToken):
					refused.Add(1)
					if ste.Key != "k" || ste.Token != tok || ste.Highest <= tok {
						fails.addf("token %d refused with %+v", tok, *ste)
					}
				default:
					fails.addf("token %d: unexpected %v", tok, err)
				}
				// Each goroutine's own key only ever sees its own rising tokens.
				own := fmt.Sprintf("own-%d", g)
				if err := f.Do(own, leaserouter.Token(otherKey.Add(1)), func() error { return nil }); err != nil {
					fails.addf("Do on %s: %v", own, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	fails.require(t)

	require.True(t, slices.IsSorted(writes), "writes out of token order: %v", writes)
	require.EqualValues(t, ok.Load()+failed.Load(), len(writes))
	require.EqualValues(t, goroutines*per, len(writes)+int(refused.Load()))
	require.NotEmpty(t, writes)
	highest := writes[len(writes)-1]
	require.NoError(t, f.Admit("k", highest))
	var ste *leaserouter.StaleTokenError
	require.ErrorAs(t, f.Admit("k", highest-1), &ste)
	require.Equal(t, highest, ste.Highest)
	t.Logf("%d writes (%d failed), %d refused", len(writes), failed.Load(), refused.Load())
}
