package console

import (
	"fmt"

	"github.com/leaserouter/leaserouter"
)

// The overview's chart of the last hour, drawn on the server as SVG (no
// script, no image request): per minute, completions (green) and failed
// attempts (red) stacked in the upper band, expirations (orange) and stale
// rejections (purple) side by side in the lower one. Each band has its own
// scale, written at its top left; hovering a minute shows its counts (an
// SVG <title>).

// Chart geometry, in the SVG's user units (it scales to its box).
const (
	chartW     = 480
	chartH     = 128
	chartLeft  = 0
	topBase    = 76 // the upper band's baseline
	topHeight  = 62
	lowBase    = 114 // the lower band's baseline
	lowHeight  = 26
	minuteStep = chartW / leaserouter.HistoryMinutes
)

type chart struct {
	W, H             int
	Minutes          []chartMinute
	TopMax, LowMax   int
	TopBase, LowBase int
	TopY, LowY       int // where the bands' maxima sit
	Empty            bool
}

type chartMinute struct {
	X, W             float64 // the minute's slot
	CY, CH, FY, FH   float64 // completed, failed (stacked)
	EX, EY, EH       float64 // expired
	SX, SY, SH       float64 // stale rejected
	HalfW            float64
	Title            string
	Completed        int
	Failed           int
	Expired, Stale   int
	HasTop, HasLower bool
}

// Totals sums History over the hour.
type Totals struct {
	Completed, Failed, Dead, Expired, StaleRejected int
}

// makeChart draws hist (oldest first; up to HistoryMinutes are drawn, the
// latest ones) and sums it.
func makeChart(hist []leaserouter.Minute) (chart, Totals) {
	if len(hist) > leaserouter.HistoryMinutes {
		hist = hist[len(hist)-leaserouter.HistoryMinutes:]
	}
	c := chart{W: chartW, H: chartH, TopBase: topBase, LowBase: lowBase,
		TopY: topBase - topHeight, LowY: lowBase - lowHeight}
	var t Totals
	for _, m := range hist {
		t.Completed += m.Completed
		t.Failed += m.Failed
		t.Dead += m.Dead
		t.Expired += m.Expired
		t.StaleRejected += m.StaleRejected
		c.TopMax = max(c.TopMax, m.Completed+m.Failed)
		c.LowMax = max(c.LowMax, m.Expired, m.StaleRejected)
	}
	c.Empty = c.TopMax == 0 && c.LowMax == 0
	scale := func(n, most int, height float64) float64 {
		if n == 0 || most == 0 {
			return 0
		}
		return max(1, float64(n)/float64(most)*height) // a single event stays visible
	}
	first := leaserouter.HistoryMinutes - len(hist) // right-aligned: the last slot is now
	for i, m := range hist {
		x := float64(chartLeft + (first+i)*minuteStep)
		w := float64(minuteStep - 1)
		cm := chartMinute{X: x, W: w, HalfW: w / 2, Completed: m.Completed, Failed: m.Failed,
			Expired: m.Expired, Stale: m.StaleRejected}
		cm.CH = scale(m.Completed, c.TopMax, topHeight)
		cm.CY = topBase - cm.CH
		cm.FH = scale(m.Failed, c.TopMax, topHeight)
		cm.FY = cm.CY - cm.FH
		cm.EH = scale(m.Expired, c.LowMax, lowHeight)
		cm.EX, cm.EY = x, lowBase-cm.EH
		cm.SH = scale(m.StaleRejected, c.LowMax, lowHeight)
		cm.SX, cm.SY = x+w/2, lowBase-cm.SH
		cm.HasTop, cm.HasLower = cm.CH+cm.FH > 0, cm.EH+cm.SH > 0
		cm.Title = fmt.Sprintf("%s UTC: %s completed, %s failed attempts, %s dead, %s expirations, %s stale rejections",
			m.Start.UTC().Format("15:04"), num(m.Completed), num(m.Failed), num(m.Dead), num(m.Expired), num(m.StaleRejected))
		c.Minutes = append(c.Minutes, cm)
	}
	return c, t
}
