package pgrouter_test

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/routertest"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestKindPeriodicPayloadThatDoesNotEncodeSkipsTheTick: a Kind's tick
// whose payload does not encode as JSON gets no job, reported at level
// Error with its job ID, and the later ticks get theirs (the rows'
// payloads, strings, always encode).
func TestKindPeriodicPayloadThatDoesNotEncodeSkipsTheTick(t *testing.T) {
	logs := &routertest.LogRecorder{}
	c := newClient(t, pgtest.New(t), pgrouter.ClientOptions{Options: pgrouter.Options{Logger: slog.New(logs)}})
	k, err := pgrouter.Register(c, "k", func(context.Context, *pgrouter.Lease[float64]) error { return nil })
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		ticks []time.Time
	)
	require.NoError(t, k.AddPeriodic(t.Context(), pgrouter.Periodic[float64]{Name: "p", Schedule: leaserouter.Every(200 * time.Millisecond),
		Payload: func(tick time.Time) float64 {
			mu.Lock()
			defer mu.Unlock()
			if ticks = append(ticks, tick); len(ticks) == 1 {
				return math.NaN() // not JSON
			}
			return 1.5
		}}))
	q := c.Queue(leaserouter.DefaultQueue)
	called := func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return append([]time.Time(nil), ticks...)
	}
	eventually(t, 20*time.Second, "a later tick's job", func() bool {
		seen := called()
		if len(seen) < 2 {
			return false
		}
		_, ok, err := q.Get(t.Context(), leaserouter.TickID("p", seen[1]))
		require.NoError(t, err)
		return ok
	})
	seen := called()
	_, ok, err := q.Get(t.Context(), leaserouter.TickID("p", seen[0]))
	require.NoError(t, err)
	require.False(t, ok, "the tick whose payload does not encode has no job")
	j, _, err := q.Get(t.Context(), leaserouter.TickID("p", seen[1]))
	require.NoError(t, err)
	require.JSONEq(t, "1.5", string(j.Payload))
	require.Equal(t, "k", j.Kind)
	var reports []string
	for _, e := range logs.Errors() {
		if strings.Contains(e, "does not encode as JSON") {
			reports = append(reports, e)
		}
	}
	require.Len(t, reports, 1, "one report: %q", logs.Errors())
	require.Contains(t, reports[0], `periodic job "p"`)
	require.Contains(t, reports[0], "tick skipped")
	require.Contains(t, reports[0], "job_id="+leaserouter.TickID("p", seen[0]))
}
