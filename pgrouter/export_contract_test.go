package pgrouter

import "time"

// KeptIntervals returns the intervals at which KeepAlive keeps l alive,
// one per KeepAlive call still keeping it (read-only: for tests of the
// interval rules).
func KeptIntervals[T any](l *Lease[T]) []time.Duration {
	k := l.r.keepers
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []time.Duration
	for _, e := range k.kept[l] {
		out = append(out, e.interval)
	}
	return out
}
