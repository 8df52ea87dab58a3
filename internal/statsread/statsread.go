// Package statsread is how the metrics adapters (the prometheus and otel
// modules) read a leaserouter.StatsReader: under a timeout, a panic in
// it recovered (a StatsReader may be the user's), and a queue reported
// twice refused.
package statsread

import (
	"context"
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter"
)

// Read calls src.QueueStats with a ctx of ctx bounded by timeout. A
// panic in it, its error, and a queue it reports twice are each returned
// as an error whose message starts with who ("leaserouter/otel", ...); on
// an error it returns no QueueStats.
func Read(ctx context.Context, who string, src leaserouter.StatsReader, timeout time.Duration) (qs []leaserouter.QueueStats, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			qs, err = nil, fmt.Errorf("%s: QueueStats panicked: %v", who, p) // fmt recovers a panic in p's Error or String
		}
	}()
	qs, err = src.QueueStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: QueueStats: %w", who, err)
	}
	seen := make(map[string]bool, len(qs))
	for _, q := range qs {
		if seen[q.Queue] {
			return nil, fmt.Errorf("%s: QueueStats reported queue %q twice", who, q.Queue)
		}
		seen[q.Queue] = true
	}
	return qs, nil
}
