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

// TestDurationsReadInMinutesAndHours: every duration the pages print is
// in its two largest units ("in 37m 44s", not "in 2264s").
func TestDurationsReadInMinutesAndHours(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 850 * time.Millisecond: "850ms", 4210 * time.Millisecond: "4.2s", 5 * time.Second: "5s", 12 * time.Second: "12s",
		59600 * time.Millisecond: "1m", 2264 * time.Second: "37m 44s", 240 * time.Second: "4m",
		time.Hour: "1h", 2*time.Hour + 5*time.Minute + 10*time.Second: "2h 5m",
		47*time.Hour + 59*time.Minute + 50*time.Second: "2d", 123 * time.Hour: "5d 3h",
	} {
		require.Equal(t, want, human(d), "%v", d)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.Equal(t, "in 12s", when(now.Add(12*time.Second), now))
	require.Equal(t, "4m 10s ago", when(now.Add(-250*time.Second), now))
	require.Equal(t, "3h 2m ago", ago(now.Add(-3*time.Hour-2*time.Minute), now))
	require.Equal(t, "", when(time.Time{}, now))
	require.Equal(t, "in 37m 44s", expires(now.Add(2264*time.Second), now))
	require.Equal(t, "in 2h 5m", expires(now.Add(2*time.Hour+5*time.Minute), now))
	require.Equal(t, "expired", expires(now, now), "expired at its instant")
	require.Equal(t, "expired", expires(now.Add(-time.Second), now))
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
	for _, a := range []Action{ActionRetry, ActionCancel, ActionDelete, ActionPause, ActionResume, ActionRunNow} {
		require.True(t, a.Mutates(), a)
	}
	for _, a := range []Action{ViewOverview, ViewJobs, ViewJob, ViewLeases, ViewDead, Action("other")} {
		require.False(t, a.Mutates(), a)
	}
}
