package leaserouter_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter"
)

// TestCloseCutShortUnderLoadLeavesNoGoroutine: a Close cut short by its
// ctx (1ms) while two Run workers hold leases — handlers stuck until
// their lease ends, KeepAlives, leases expiring and hooks running
// meanwhile — returns with the reaper ended (no goroutine in reap as it
// returns), and once Run has returned and the events made before Close
// returned are delivered, no goroutine of the Router is left; 40 rounds
// with both cores kept busy. Real time: the race is with the scheduler.
func TestCloseCutShortUnderLoadLeavesNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var stop atomic.Bool
	var busy sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		busy.Go(func() {
			for !stop.Load() {
				runtime.Gosched()
			}
		})
	}
	defer func() { stop.Store(true); busy.Wait() }()
	for round := range 40 {
		r, err := leaserouter.New[int](leaserouter.Options{
			LeaseDuration: time.Duration(1+round%5) * time.Millisecond, // some expire while Close runs
			OnEvent:       func(leaserouter.Event) { runtime.Gosched() },
		})
		require.NoError(t, err)
		for i := range 100 {
			require.NoError(t, r.Enqueue(fmt.Sprint(i), i))
		}
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() {
			ran <- r.Run(ctx, leaserouter.WorkerOptions{Workers: 2, WorkerID: "w"}, func(ctx context.Context, l *leaserouter.Lease[int]) error {
				kctx, stop := leaserouter.KeepAlive(ctx, l, 0)
				defer stop()
				if l.Payload%2 == 0 {
					<-kctx.Done() // until the lease ends: expiry or Close's revocation
				}
				return nil
			})
		}()
		time.Sleep(time.Duration(round%3) * time.Millisecond)
		cctx, ccancel := context.WithTimeout(context.Background(), time.Millisecond)
		_ = r.Close(cctx)
		ccancel()
		require.Empty(t, goroutinesIn("leaserouter.(*Router[...]).reap("), "round %d: the reaper outlives Close", round)
		cancel()
		if err := <-ran; !errors.Is(err, leaserouter.ErrClosed) { // ErrClosed: Close came first
			require.NoError(t, err)
		}
		require.NoError(t, r.Close(context.Background()), "waits for the delivery the first Close did not")
	}
}

// goroutinesIn returns the stacks of the goroutines with fn in their stack.
func goroutinesIn(fn string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			out = append(out, g)
		}
	}
	return out
}
