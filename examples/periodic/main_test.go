package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// line is one parsed line of the output.
type line struct {
	n     int
	id    string
	tick  time.Time
	ranAt string
	late  time.Duration
}

// parse checks the output's shape: ticks jobs, numbered in order, each ID
// TickID("report", tick) for a tick after the one before: the next one
// when exact, else a multiple of the interval later (on real time, a
// scheduler stalled past a tick enqueues only the latest it missed).
func parse(t *testing.T, out string, exact bool) []line {
	t.Helper()
	var lines []line
	for s := range strings.Lines(out) {
		var l line
		var late string
		_, err := fmt.Sscanf(s, "%d %s ran at %s %s after its tick\n", &l.n, &l.id, &l.ranAt, &late)
		require.NoError(t, err, s)
		l.late, err = time.ParseDuration(late)
		require.NoError(t, err, s)
		l.tick, err = time.Parse(time.RFC3339Nano, strings.TrimPrefix(l.id, "report@"))
		require.NoError(t, err, s)
		require.Equal(t, leaserouter.TickID("report", l.tick), l.id)
		require.GreaterOrEqual(t, l.late, time.Duration(0), "a tick's job is never ready before its tick")
		lines = append(lines, l)
	}
	require.Len(t, lines, ticks, out)
	for i, l := range lines {
		require.Equal(t, i+1, l.n)
		require.Zero(t, l.tick.UnixNano()%int64(interval), "ticks are multiples of the interval since the epoch")
		if i == 0 {
			continue
		}
		gap := l.tick.Sub(lines[i-1].tick)
		if exact {
			require.Equal(t, interval, gap, "one job per tick, none skipped, none twice")
		} else {
			require.Positive(t, gap, "none twice, in tick order")
		}
	}
	return lines
}

// TestPeriodic runs the program under testing/synctest: with fake time,
// each job runs at its tick's instant, and the output is exact. The bubble
// starts on 2000-01-01 at midnight UTC, a tick: the scheduler's first.
func TestPeriodic(t *testing.T) {
	var buf bytes.Buffer
	synctest.Test(t, func(t *testing.T) {
		require.Equal(t, 0, run(&buf), buf.String())
	})
	out := buf.String()
	t.Log("\n" + out)
	lines := parse(t, out, true)
	require.Equal(t, "report@2000-01-01T00:00:00Z", lines[0].id)
	require.Equal(t, "8 report@2000-01-01T00:00:01.75Z ran at 00:00:01.750000, 0s after its tick\n", strings.SplitAfter(out, "\n")[7])
	for _, l := range lines {
		require.Zero(t, l.late)
	}
}

// TestPeriodicRealTime runs the program on real time (about 2 s): the
// ticks and IDs are as under synctest; how late each job ran depends on the
// machine, so only its sign is checked.
func TestPeriodicRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("2 s of real time")
	}
	var buf bytes.Buffer
	require.Equal(t, 0, run(&buf), buf.String())
	t.Log("\n" + buf.String())
	parse(t, buf.String(), false)
}
