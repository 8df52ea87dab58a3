package leaserouter

import (
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// History: what a Router did in each of the last HistoryMinutes minutes,
// for a throughput chart without a metrics system. The counts are kept in a ring of one slot per minute, in
// constant memory, by the transitions themselves, under the lock they
// already hold.

// HistoryMinutes is how many minutes Router.History covers.
const HistoryMinutes = 60

// Minute is what a Router did in one minute of wall-clock time.
type Minute struct {
	Start         time.Time // the minute's first instant (UTC, a whole minute)
	Completed     int       // jobs completed (EventCompleted)
	Failed        int       // failed attempts (EventFailed), retried or not
	Dead          int       // jobs that became dead (EventDead)
	Expired       int       // leases that expired (EventLeaseExpired)
	StaleRejected int       // lease operations refused because the lease was lost (EventStaleRejected)
}

// histSlot is one minute of the ring: the minute's number (wall-clock
// minutes since the Unix epoch) and its counts; a slot holding an older
// minute counts nothing for the current one.
type histSlot struct {
	minute int64
	n      [contract.NumTallies]uint32
}

// history is History's ring, and the slot of the minute tally counted
// in last with that minute's span on the router's clock, so that a
// transition in the same minute (nearly every one) counts with two
// comparisons, not the divisions that find a minute's slot.
type history struct {
	ring     [HistoryMinutes]histSlot
	cur      *histSlot // the slot of the minute [from, to); nil until the first tally
	from, to int64     // cur's minute on the router's clock: from <= now < to
}

// tally counts one transition of kind k at instant now (the router's
// clock). The caller holds r.mu.
func (r *Router[T]) tally(k int, now int64) {
	h := r.hist
	if now >= h.from && now < h.to {
		h.cur.n[k]++
		return
	}
	m := r.minute(now)
	s := &h.ring[histIndex(m)]
	if s.minute != m {
		*s = histSlot{minute: m}
	}
	s.n[k]++
	// Only the minute's whole span is cached: one cut short by the ends of
	// the clock's range is found the slow way each time.
	if from := m*int64(time.Minute) - r.epochUnix; from <= now && now-from < int64(time.Minute) {
		h.cur, h.from, h.to = s, from, from+int64(time.Minute)
	}
}

// minute returns the wall-clock minute (since the Unix epoch, rounded
// down: a clock before 1970 gives negative minutes) of instant now.
func (r *Router[T]) minute(now int64) int64 {
	ns := r.epochUnix + now
	m := ns / int64(time.Minute)
	if ns%int64(time.Minute) < 0 {
		m--
	}
	return m
}

// histIndex is minute m's slot of the ring, never negative.
func histIndex(m int64) int {
	return int((m%HistoryMinutes + HistoryMinutes) % HistoryMinutes)
}

// History returns the last HistoryMinutes minutes, oldest first, the last
// being the current minute (so far), after settling what is due. A minute
// with nothing in it has zero counts. It works after Close (the minutes
// since Close count nothing) and never blocks but on the router's lock.
// Counts are per Router: on PostgreSQL, pgrouter's History counts every
// process's.
func (r *Router[T]) History() []Minute {
	r.mu.Lock()
	now := r.settleNow()
	ring := r.hist.ring
	r.unlockAndDeliver()
	cur := r.minute(now)
	out := make([]Minute, HistoryMinutes)
	for i := range out {
		m := cur - HistoryMinutes + 1 + int64(i)
		out[i].Start = time.Unix(0, m*int64(time.Minute)).UTC()
		if s := ring[histIndex(m)]; s.minute == m {
			out[i].Completed, out[i].Failed, out[i].Dead = int(s.n[contract.TallyCompleted]), int(s.n[contract.TallyFailed]), int(s.n[contract.TallyDead])
			out[i].Expired, out[i].StaleRejected = int(s.n[contract.TallyExpired]), int(s.n[contract.TallyStale])
		}
	}
	return out
}
