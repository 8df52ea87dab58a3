// Package periodic is the rule that decides which tick of a periodic job
// a scheduler enqueues, the same on every backend (the core's and
// pgrouter's periodic_scheduler.go): a scheduler enqueues the latest tick that is
// due and that it has not handled, never a backlog of older ones, and only
// while that tick is younger than the retention of finished jobs, so that
// the dedup record of a tick's job outlives every scheduler that could
// still enqueue it.
package periodic

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Schedule is leaserouter.Schedule (the core imports this package, so it
// cannot be named here).
type Schedule interface {
	Next(t time.Time) time.Time
}

// Plan is what a scheduler does at one wake-up.
type Plan struct {
	// Tick is the tick to enqueue now; zero for none.
	Tick time.Time
	// Skipped counts the due ticks not enqueued: older than Tick, or Tick
	// itself when too old for the retention (then Tick is zero).
	Skipped int
	// Handled is the latest tick handled after this wake-up (enqueued or
	// skipped): the last of the next call.
	Handled time.Time
	// Next is the first tick after now, when to wake; zero for none (the
	// schedule has no more ticks).
	Next time.Time
}

// maxSteps bounds the calls of Next at one wake-up: a schedule with more
// ticks than that in the window of the retention is stepped through it
// maxSteps ticks per wake-up (Due returns a Next not after now: the
// caller wakes again at once and goes on from Handled).
const maxSteps = 1 << 16

// ErrStuck: the schedule's Next did not move forward (returned an instant
// not after its argument).
var ErrStuck = errors.New("schedule's Next did not move forward")

// Due plans the wake-up at now of a scheduler that started at since and
// has handled the ticks up to last (zero: none yet): the due ticks are
// those t with since <= t <= now and t > last; the latest of them is
// enqueued if now < t + retention, the rest skipped. retention must be >
// 0. An error (ErrStuck, or a panic of Next, recovered) ends the
// schedule: the caller reports it and stops.
func Due(s Schedule, since, last, now time.Time, retention time.Duration) (p Plan, err error) {
	defer func() {
		if v := recover(); v != nil {
			p, err = Plan{}, fmt.Errorf("schedule's Next panicked: %v", v)
		}
	}()
	// Ticks older than the retention are never enqueued: start there.
	lo := now.Add(-retention)
	if lo.Before(since) {
		lo = since.Add(-1) // since itself may be a tick
	}
	if !last.IsZero() && last.After(lo) {
		lo = last
	}
	first, err := next(s, lo)
	if err != nil {
		return Plan{}, err
	}
	p.Handled = last
	if first.IsZero() || first.After(now) {
		p.Next = first
		return p, nil
	}
	// first is due; find the latest due tick.
	tick := first
	if e, ok := s.(Every); ok && e > 0 {
		d := time.Duration(e)
		// The latest multiple of d not after now: now's next, less d,
		// is exact (ticks are a fixed d apart).
		n, err := next(s, now)
		if err != nil {
			return Plan{}, err
		}
		if !n.IsZero() {
			if t := n.Add(-d); t.After(tick) {
				p.Skipped = int(t.Sub(tick) / d)
				tick = t
			}
		}
		p.Next = n
	} else {
		for steps := 0; ; steps++ {
			n, err := next(s, tick)
			if err != nil {
				return Plan{}, err
			}
			if n.IsZero() || n.After(now) || steps == maxSteps {
				p.Next = n
				break
			}
			p.Skipped++
			tick = n
		}
		if !p.Next.IsZero() && !p.Next.After(now) {
			// Stepped maxSteps and still not past now: wake at once and go on
			// from tick (handled: the skipped ones are older still).
			p.Handled = tick
			p.Skipped++
			return p, nil
		}
	}
	p.Handled = tick
	if now.Before(tick.Add(retention)) {
		p.Tick = tick
	} else {
		p.Skipped++
	}
	return p, nil
}

// next is s.Next(t), an error if it does not move forward.
func next(s Schedule, t time.Time) (time.Time, error) {
	n := s.Next(t)
	if !n.IsZero() && !n.After(t) {
		return time.Time{}, fmt.Errorf("%w: Next(%s) = %s", ErrStuck, t.Format(time.RFC3339Nano), n.Format(time.RFC3339Nano))
	}
	return n, nil
}

// Every is leaserouter.Every's Schedule: the instants that are whole
// multiples of the interval since the Unix epoch. Due computes its due
// tick at once rather than by stepping.
type Every time.Duration

// Next returns the first multiple of the interval since the Unix epoch
// after t, or the zero Time for an interval <= 0 or past the range of
// time.Time.
func (e Every) Next(t time.Time) time.Time {
	d := int64(e)
	if d <= 0 {
		return time.Time{}
	}
	// t = s*1e9 + ns nanoseconds since the epoch, in whole seconds and
	// nanoseconds so that any instant a time.Time holds is exact; its
	// remainder mod d is ((s mod d)*1e9 + ns) mod d, taken in 128 bits.
	s, ns := t.Unix(), int64(t.Nanosecond())
	sm := uint64((s%d + d) % d) // s may be negative (before 1970)
	hi, lo := bits.Mul64(sm, 1e9)
	lo, carry := bits.Add64(lo, uint64(ns), 0)
	r := int64(bits.Rem64(hi+carry, lo, uint64(d)))
	next := t.Add(time.Duration(d - r))
	if !next.After(t) { // past the range of time.Time
		return time.Time{}
	}
	return next.Round(0) // a wall instant, with no monotonic reading
}
