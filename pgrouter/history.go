package pgrouter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// History: what every process on the Router's queue did in each of the
// last leaserouter.HistoryMinutes minutes, for a throughput chart without
// a metrics system. Each process tallies its events per minute of the
// database's clock in memory (emit) and adds them to leaserouter_history
// every PollInterval; History reads the table.

// The counters of History (contract.TallyCompleted...) are in the order
// of history_add's arrays.

// history is what this process counted per minute and has not yet added
// to leaserouter_history (the maintenance loop adds it every
// PollInterval, and History before it reads).
type history struct {
	process string // this Router's name in the table: random
	mu      sync.Mutex
	pending map[int64]*[contract.NumTallies]int64 // by minute of the database's clock, as Unix minutes
}

func newHistory() *history {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &history{process: hex.EncodeToString(b[:]), pending: map[int64]*[contract.NumTallies]int64{}}
}

// tally counts the events History counts, each in the minute of its time
// (the database's instant of the transition).
func (h *history) tally(evs []leaserouter.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range evs {
		k := -1
		switch e.Kind {
		case leaserouter.EventCompleted:
			k = contract.TallyCompleted
		case leaserouter.EventFailed:
			k = contract.TallyFailed
		case leaserouter.EventDead:
			k = contract.TallyDead
		case leaserouter.EventLeaseExpired:
			k = contract.TallyExpired
		case leaserouter.EventStaleRejected:
			k = contract.TallyStale
		}
		if k >= 0 {
			h.count(k, e.Time)
		}
	}
}

// tallyEnded counts, with no events built (no hook is set), what
// completedMany reports: the leases of ls in done completed at their
// instant, the others refused at now.
func tallyEnded[T any](h *history, ls []*Lease[T], done map[leaseKey]ended, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range ls {
		if e, ok := done[keyOf(l)]; ok {
			h.count(contract.TallyCompleted, e.at)
		} else {
			h.count(contract.TallyStale, now)
		}
	}
}

// count adds one to counter k of t's minute. The caller holds h.mu.
func (h *history) count(k int, t time.Time) {
	m := minuteOf(t)
	c := h.pending[m]
	if c == nil {
		c = new([contract.NumTallies]int64)
		h.pending[m] = c
	}
	c[k]++
}

// minuteOf is t's minute as Unix minutes (rounded down).
func minuteOf(t time.Time) int64 {
	s := t.Unix()
	m := s / 60
	if s%60 < 0 {
		m--
	}
	return m
}

// take empties the pending counts into history_add's arrays.
func (h *history) take() (minutes []int64, counts [contract.NumTallies][]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for m, c := range h.pending {
		minutes = append(minutes, m)
		for k := range counts {
			counts[k] = append(counts[k], c[k])
		}
	}
	clear(h.pending)
	return minutes, counts
}

// giveBack returns counts take emptied that could not be added.
func (h *history) giveBack(minutes []int64, counts [contract.NumTallies][]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, m := range minutes {
		c := h.pending[m]
		if c == nil {
			c = new([contract.NumTallies]int64)
			h.pending[m] = c
		}
		for k := range counts {
			c[k] += counts[k][i]
		}
	}
}

// flushHistory adds this process's pending counts to leaserouter_history
// (and deletes the queue's rows older than two hours); counts it could
// not add wait for the next call.
func (r *Router[T]) flushHistory(ctx context.Context) error {
	minutes, counts := r.hist.take()
	if len(minutes) == 0 {
		return nil
	}
	_, err := r.db.Exec(ctx, r.st.historyAdd, args{"queue": r.opts.Queue, "process": r.hist.process, "minutes": minutes,
		"completed": counts[contract.TallyCompleted], "failed": counts[contract.TallyFailed], "dead": counts[contract.TallyDead],
		"expired": counts[contract.TallyExpired], "stale": counts[contract.TallyStale]})
	if err != nil {
		r.hist.giveBack(minutes, counts)
	}
	return err
}

// History returns the last leaserouter.HistoryMinutes minutes of the
// Router's queue, oldest first, the last being the database's current
// minute (so far): what every process on the queue counted (completions,
// failed attempts, jobs that became dead, leases that expired, lease
// operations refused), each in the minute of the database's clock it
// happened. Each process adds what it counted every PollInterval, and
// this one adds its own first, so another process's last PollInterval
// may not show yet; what a process counted and had not added when it
// died is lost. Two round trips. It works after Close. Errors wrap the
// driver's. Safe for concurrent use.
func (r *Router[T]) History(ctx context.Context) ([]leaserouter.Minute, error) {
	ctx = orBackground(ctx)
	if err := r.flushHistory(ctx); err != nil {
		return nil, errWrap("History", err)
	}
	rows, err := r.db.Query(ctx, r.st.historyRead, args{"queue": r.opts.Queue})
	if err != nil {
		return nil, errWrap("History", err)
	}
	defer rows.Close()
	var now int64
	got := map[int64][contract.NumTallies]int64{}
	for rows.Next() {
		var m *int64
		var c [contract.NumTallies]*int64
		if err := rows.Scan(&now, &m, &c[0], &c[1], &c[2], &c[3], &c[4]); err != nil {
			return nil, errWrap("History", err)
		}
		if m == nil {
			continue
		}
		var n [contract.NumTallies]int64
		for k := range c {
			if c[k] != nil {
				n[k] = *c[k]
			}
		}
		got[*m] = n
	}
	if err := rows.Err(); err != nil {
		return nil, errWrap("History", err)
	}
	out := make([]leaserouter.Minute, leaserouter.HistoryMinutes)
	for i := range out {
		m := now - leaserouter.HistoryMinutes + 1 + int64(i)
		n := got[m]
		out[i] = leaserouter.Minute{Start: time.Unix(m*60, 0).UTC(), Completed: int(n[contract.TallyCompleted]),
			Failed: int(n[contract.TallyFailed]), Dead: int(n[contract.TallyDead]), Expired: int(n[contract.TallyExpired]), StaleRejected: int(n[contract.TallyStale])}
	}
	return out, nil
}
