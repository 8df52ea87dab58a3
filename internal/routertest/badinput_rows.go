package routertest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// rowBadInputOneMessage: the same bad call gets the same error, word for
// word, on every backend, so a program moving between backends meets the
// messages it knows (and logs that read alike): each text below is the
// whole of the error's message. rowBadInput checks the kinds of error
// (errors.Is) of a wider set of calls.
var rowBadInputOneMessage = Row{Name: "bad input/the same bad call gets the same message on every backend", Test: func(t T, h Harness) {
	b := open(t, h, Config{LeaseDuration: h.Lease()})
	ctx := ctxOf(t)
	long := strings.Repeat("x", leaserouter.MaxIDBytes+1)
	ok := func(context.Context, Lease) error { return nil }
	done, cancel := context.WithCancel(ctx)
	cancel() // a Run that got past its checks returns at once
	for _, c := range []struct {
		call string
		err  func() error
		want string
	}{
		{"Enqueue of an empty ID", func() error { return b.Enqueue(ctx, "", "") },
			"leaserouter: invalid job: empty ID"},
		{"Enqueue of an ID with NUL", func() error { return b.Enqueue(ctx, "a\x00b", "") },
			`leaserouter: invalid job: ID "a\x00b" holds NUL at byte 1`},
		{"Enqueue of an ID not UTF-8", func() error { return b.Enqueue(ctx, "ab\xffc", "") },
			`leaserouter: invalid job: ID "ab\xffc" is not valid UTF-8 at byte 2`},
		{"Enqueue of an ID over MaxIDBytes", func() error { return b.Enqueue(ctx, long, "") },
			`leaserouter: invalid job: ID "` + long[:32] + `"... is 1025 bytes, above MaxIDBytes (1024)`},
		{"Enqueue with WithMaxAttempts(0)", func() error { return b.Enqueue(ctx, "a", "", leaserouter.WithMaxAttempts(0)) },
			`leaserouter: invalid job: WithMaxAttempts(0) for job "a", must be in [1, 2147483647]`},
		{"Enqueue with a negative WithDelay", func() error { return b.Enqueue(ctx, "a", "", leaserouter.WithDelay(-time.Second)) },
			`leaserouter: invalid job: WithDelay(-1s) for job "a", must be >= 0`},
		{"EnqueueMany with a bad ID", func() error {
			_, err := b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "ok"}, {ID: "a\x00"}})
			return err
		}, `leaserouter: invalid job: ID "a\x00" holds NUL at byte 1 (batch index 1)`},
		{"Cancel of an ID with NUL", func() error { return b.Cancel(ctx, "a\x00b") },
			`leaserouter: invalid job: ID "a\x00b" holds NUL at byte 1: leaserouter: job not found`},
		{"TryAcquire by a worker ID with NUL", func() error { _, err := b.TryAcquire(ctx, "w\x00"); return err },
			`leaserouter: invalid options: worker ID "w\x00" holds NUL at byte 1`},
		{"Acquire by a worker ID not UTF-8", func() error { _, err := b.Acquire(ctx, "w\xff"); return err },
			`leaserouter: invalid options: worker ID "w\xff" is not valid UTF-8 at byte 1`},
		{"TryAcquireMany of 0", func() error { _, err := b.TryAcquireMany(ctx, "w", 0); return err },
			"leaserouter: invalid options: TryAcquireMany max is 0, must be >= 1"},
		{"AcquireMany of -1", func() error { _, err := b.AcquireMany(ctx, "w", -1); return err },
			"leaserouter: invalid options: AcquireMany max is -1, must be >= 1"},
		{"Run with a nil handler", func() error { return b.Run(done, leaserouter.WorkerOptions{}, nil) },
			"leaserouter: invalid options: nil Handler"},
		{"Run with a negative HeartbeatInterval", func() error { return b.Run(done, leaserouter.WorkerOptions{HeartbeatInterval: -1}, ok) },
			"leaserouter: invalid options: WorkerOptions.HeartbeatInterval is -1ns, must be >= 0 (0 = LeaseDuration/3)"},
		{"Run with HeartbeatInterval = LeaseDuration", func() error {
			return b.Run(done, leaserouter.WorkerOptions{HeartbeatInterval: h.Lease()}, ok)
		}, "leaserouter: invalid options: WorkerOptions.HeartbeatInterval " + h.Lease().String() + " must be < LeaseDuration " + h.Lease().String()},
		{"Run with negative Workers", func() error { return b.Run(done, leaserouter.WorkerOptions{Workers: -1}, ok) },
			"leaserouter: invalid options: WorkerOptions.Workers is -1, must be in [0, 65536] (0 = GOMAXPROCS)"},
		{"Run with a negative Batch", func() error { return b.Run(done, leaserouter.WorkerOptions{Batch: -1}, ok) },
			fmt.Sprintf("leaserouter: invalid options: WorkerOptions.Batch is -1, must be in [0, %d] (0 = %d)", leaserouter.MaxBatch, leaserouter.DefaultBatch)},
	} {
		require.EqualError(t, c.err(), c.want, c.call)
	}
	s := stats(t, b)
	require.Zero(t, s.Enqueued, "bad input stored nothing")
	require.Zero(t, s.LeasesGranted, "bad input leased nothing")
}}
