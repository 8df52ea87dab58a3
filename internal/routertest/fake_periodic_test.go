package routertest_test

import (
	"context"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// The fake's periodic jobs (routertest.Periodics): a goroutine per
// periodic job that sleeps until each tick, calls Payload (recovering a
// panic) and enqueues the tick's job; RemovePeriodic and Close stop it,
// and Close waits for it.

func (f *fake) AddPeriodic(_ context.Context, p leaserouter.Periodic[string]) error {
	if err := contract.CheckPeriodic(leaserouter.ErrInvalidOptions, leaserouter.ErrInvalidJob, p.Name, p.Schedule, p.Options, 0); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.closing {
		return leaserouter.ErrClosed
	}
	if f.periodics[p.Name] != nil {
		return leaserouter.ErrInvalidOptions
	}
	stop := make(chan struct{})
	f.periodics[p.Name] = stop
	f.scheduler.Go(func() { f.schedule(p, stop) })
	return nil
}

func (f *fake) RemovePeriodic(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return leaserouter.ErrClosed
	}
	stop := f.periodics[name]
	if stop == nil {
		return leaserouter.ErrNotFound
	}
	for other, stop := range f.periodics {
		if other == name || f.bug == bugRemoveStopsAll {
			close(stop)
			delete(f.periodics, other)
		}
	}
	return nil
}

// schedule enqueues p's ticks, from the first at or after now, until stop
// is closed.
func (f *fake) schedule(p leaserouter.Periodic[string], stop <-chan struct{}) {
	for tick := p.Schedule.Next(time.Now().Add(-1)); !tick.IsZero(); tick = p.Schedule.Next(tick) {
		timer := time.NewTimer(time.Until(tick))
		select {
		case <-stop:
			timer.Stop()
			return
		case <-timer.C:
		}
		payload, ok := f.payload(p, tick)
		select {
		case <-stop: // stopped while Payload ran: its tick is not enqueued
			if f.bug != bugStoppedTickEnqueued {
				return
			}
		default:
		}
		if ok {
			_ = f.enqueueTick(leaserouter.TickID(p.Name, tick), payload, p.Options)
		}
	}
}

// payload calls p.Payload for tick; ok is false if it panicked (counted):
// the tick is skipped.
func (f *fake) payload(p leaserouter.Periodic[string], tick time.Time) (v string, ok bool) {
	if p.Payload == nil {
		return "", true
	}
	defer func() {
		if v := recover(); v != nil {
			f.mu.Lock()
			f.st.CallbackPanics++
			f.mu.Unlock()
			if f.logger != nil {
				contract.ReportTo(f.logger, contract.PayloadPanicked(p.Name, v), leaserouter.TickID(p.Name, tick))
			}
			v, ok = "", f.bug == bugPanickedTickEnqueued
		}
	}()
	return p.Payload(tick), true
}
