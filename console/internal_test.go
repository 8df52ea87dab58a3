package console

import (
	"testing"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

func TestNumHasThousandsSeparators(t *testing.T) {
	for in, want := range map[any]string{
		0: "0", 7: "7", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234", -12: "-12",
		uint64(10000000000): "10,000,000,000", leaserouter.Token(123456): "123,456", int64(-100000): "-100,000",
	} {
		require.Equal(t, want, num(in), "%v", in)
	}
}

func TestHumanDurations(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.Equal(t, "in 12s", when(now.Add(12*time.Second), now))
	require.Equal(t, "4m10s ago", when(now.Add(-250*time.Second), now))
	require.Equal(t, "4m ago", when(now.Add(-240*time.Second), now))
	require.Equal(t, "3h2m ago", ago(now.Add(-3*time.Hour-2*time.Minute), now))
	require.Equal(t, "5d3h ago", ago(now.Add(-123*time.Hour), now))
	require.Equal(t, "", when(time.Time{}, now))
	require.Equal(t, int64(13), until(now.Add(12100*time.Millisecond), now), "rounded up: not expired yet")
	require.Equal(t, int64(0), until(now.Add(-time.Second), now))
}

func TestChartScalesEachBand(t *testing.T) {
	hist := make([]leaserouter.Minute, leaserouter.HistoryMinutes)
	hist[10] = leaserouter.Minute{Completed: 100, Failed: 20, Dead: 1}
	hist[59] = leaserouter.Minute{Completed: 1, Expired: 4, StaleRejected: 2}
	c, tot := makeChart(hist)
	require.Equal(t, Totals{Completed: 101, Failed: 20, Dead: 1, Expired: 4, StaleRejected: 2}, tot)
	require.Equal(t, 120, c.TopMax)
	require.Equal(t, 4, c.LowMax)
	m := c.Minutes[10]
	require.InDelta(t, float64(topHeight), m.CH+m.FH, 1e-9, "the busiest minute fills the band")
	require.InDelta(t, topBase-m.CH-m.FH, m.FY, 1e-9, "failed stacked on completed")
	last := c.Minutes[59]
	require.Equal(t, 1.0, last.CH, "one completion stays visible")
	require.InDelta(t, float64(lowHeight), last.EH, 1e-9)
	require.InDelta(t, float64(lowHeight)/2, last.SH, 1e-9)
	require.Equal(t, float64((leaserouter.HistoryMinutes-1)*minuteStep), last.X, "now is the last slot")
	require.Zero(t, c.Minutes[0].CH)
}

// TestActionMutates: the actions mutate, the views do not.
func TestActionMutates(t *testing.T) {
	for _, a := range []Action{ActionRetry, ActionCancel, ActionDelete, ActionPause, ActionResume} {
		require.True(t, a.Mutates(), a)
	}
	for _, a := range []Action{ViewOverview, ViewJobs, ViewJob, ViewLeases, ViewDead, Action("other")} {
		require.False(t, a.Mutates(), a)
	}
}
