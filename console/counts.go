package console

import (
	"context"

	"github.com/leaserouter/leaserouter"
)

// ExactCounter is implemented by a Source whose Stats may estimate its
// counts (leaserouter.Stats.Estimated) and that can count exactly on
// demand, at a cost that grows with the queue (pgrouter's Router has
// this method). For such a source the overview shows estimated counts as
// estimates, with the instant of the statistics they come from
// (Stats.EstimatedAsOf), and a "count exactly" link that asks ExactStats
// instead of Stats for that page (authorized as ViewOverview; bounded by
// the request's ctx). A Source without it, such as Router's (whose Stats
// are exact), gets no such link.
type ExactCounter interface {
	ExactStats(ctx context.Context) (leaserouter.Stats, error)
}

// queueStats is s's Stats, or its ExactStats when exact and s has them;
// counted says which.
func queueStats(ctx context.Context, s Source, exact bool) (st leaserouter.Stats, counted bool, err error) {
	if ec, ok := s.(ExactCounter); ok && exact {
		st, err = ec.ExactStats(ctx)
		return st, true, err
	}
	st, err = s.Stats(ctx)
	return st, false, err
}
