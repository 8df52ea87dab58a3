package pgrouter

// The scheduler goroutine of periodic jobs (periodic.go): its wake-ups,
// the planning of each periodic job's tick by the shared rule, the tick's
// transaction, and the database clock's offset it sleeps by.

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/periodic"
)

// schedule is the scheduler goroutine: it sleeps until the soonest next
// tick (on the local clock, corrected by the offset to the database's),
// or until AddPeriodic or RemovePeriodic changes the set, plans and
// enqueues what is due, and ends when Close begins.
func (r *Router[T]) schedule() {
	ctx := r.closing
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var retry time.Duration // the backoff after a database error; 0: none
	for {
		r.mu.Lock()
		var wait <-chan time.Time
		d, armed := retry, retry > 0
		if !armed && len(r.periodic.due) > 0 {
			d = min(r.periodic.due[0].next.Add(-r.periodic.offset).Sub(r.localNow()), periodicMaxSleep)
			armed = true
		}
		kick := r.periodic.kick
		r.mu.Unlock()
		if armed {
			timer.Reset(max(d, 0))
			wait = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-wait:
		}
		timer.Stop()
		select {
		case <-kick: // woken by the timer with a change pending: this wake-up sees it
		default:
		}
		err := r.wakeUp(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			retry = min(max(2*retry, periodicRetryMin), periodicRetryMax)
			r.logPeriodic(slog.LevelWarn, fmt.Sprintf("pgrouter: periodic jobs: %v; trying again in %v", err, retry), "")
		default:
			retry = 0
		}
	}
}

// wakeUp reads the database's clock (measuring the offset of the local
// clock), then plans and enqueues each periodic job whose next is due on
// it. It returns only the clock's error (the caller retries after a
// backoff). A database error of one periodic job's tick leaves that job
// due again after its own backoff (e.retry), reported: the others go on
// at their ticks, whatever one of them keeps failing on.
func (r *Router[T]) wakeUp(ctx context.Context) error {
	var now time.Time
	offset, err := r.dbClockOffset(func() error { return r.db.QueryRow(ctx, r.st.readClock).Scan(&now) }, &now)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.periodic.offset = offset
	var due []*periodicEntry[T]
	for len(r.periodic.due) > 0 && !r.periodic.due[0].next.After(now) {
		due = append(due, heap.Pop(&r.periodic.due).(*periodicEntry[T]))
	}
	r.mu.Unlock()
	for _, e := range due {
		if ctx.Err() != nil {
			break // Close began: the rest stay as they are
		}
		err := r.planTick(ctx, e, now)
		if err == nil {
			e.retry = 0
			continue
		}
		if ctx.Err() != nil {
			break
		}
		e.retry = min(max(2*e.retry, periodicRetryMin), periodicRetryMax)
		e.next = now.Add(e.retry) // the tick that failed is deferred: tried again then, before any younger
		r.logPeriodic(slog.LevelWarn, fmt.Sprintf("pgrouter: periodic jobs: %v; trying again in %v", err, e.retry), "")
	}
	defer r.periodic.wakes.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range due {
		// Back in due unless removed meanwhile or its schedule ended.
		if r.periodic.byName[e.p.Name] == e && !e.next.IsZero() {
			heap.Push(&r.periodic.due, e)
		}
	}
	return nil
}

// planTick plans e at now on the shared rule (periodic.Due): the tick
// it gives, if any, joins e's deferred ticks, and e.last and e.next move
// on at once, whatever becomes of that tick; then the deferred ticks are
// tried (retryDeferred). It returns the database errors of the tries, the ticks
// that failed kept to try again. A panic of the schedule (or a Next that
// does not move forward) ends e's schedule, reported: its deferred ticks are
// still tried until none is left (next zero then). A panic of Payload or
// a payload that does not encode skips the tick, reported.
func (r *Router[T]) planTick(ctx context.Context, e *periodicEntry[T], now time.Time) error {
	if !e.ended {
		plan, err := periodic.Due(e.p.Schedule, e.since, e.last, now, r.opts.Retention)
		if err == nil {
			if !plan.Tick.IsZero() {
				e.deferTick(plan.Tick)
			}
			e.last, e.next = plan.Handled, plan.Next
		} else {
			msg := fmt.Sprintf("pgrouter: periodic job %s: %v; its schedule ends in this process", contract.Quote(e.p.Name), err)
			if len(e.deferred) > 0 {
				msg += fmt.Sprintf(" (once its %d deferred ticks are taken or given up)", len(e.deferred))
			}
			if errors.Is(err, periodic.ErrStuck) {
				r.logPeriodic(slog.LevelError, msg, "")
			} else {
				r.callbackPanicked(msg, "") // Next panicked
			}
			e.ended = true
		}
	}
	if e.ended {
		e.next = time.Time{}
	}
	err := r.retryDeferred(ctx, e, now)
	e.armDeferred(now)
	return err
}

// tryTick enqueues tick of e (enqueueTick, with its Payload); locked: not
// taken, another transaction locks e's row. It returns only database
// errors; a panic of Payload or a payload that does not encode skips the
// tick, reported.
func (r *Router[T]) tryTick(ctx context.Context, e *periodicEntry[T], tick time.Time) (locked bool, err error) {
	id := leaserouter.TickID(e.p.Name, tick)
	payload, p, err := e.tickPayload(tick)
	if p != nil {
		r.callbackPanicked(contract.PayloadPanicked(e.p.Name, p), id)
		return false, nil
	}
	if err == nil {
		locked, err = r.enqueueTick(ctx, e, tick, id, payload)
	}
	if errors.Is(err, leaserouter.ErrInvalidJob) {
		r.logPeriodic(slog.LevelError, contract.TickSkipped(e.p.Name, err), id)
		return false, nil
	}
	return locked, err
}

// tickPayload is e's payload of tick: e.encode(tick) when set (its error
// wraps ErrInvalidJob), else p.Payload(tick), the zero T for a nil
// Payload; with a panic recovered.
func (e *periodicEntry[T]) tickPayload(tick time.Time) (payload T, panicked any, err error) {
	switch {
	case e.encode != nil:
		panicked = contract.Recovered(func() { payload, err = e.encode(tick) })
	case e.p.Payload != nil:
		panicked = contract.Recovered(func() { payload = e.p.Payload(tick) })
	}
	return payload, panicked, err
}

// errTickNotTaken rolls back the transaction of a tick not taken (see
// enqueueTick).
var errTickNotTaken = errors.New("pgrouter: tick not taken")

// enqueueTick takes tick of p and inserts its job id in one transaction
// (periodic_tick, then jobs_insert as EnqueueTx runs it). locked reports a
// tick whose row another transaction locks (another scheduler inside its
// tick, maybe stalled there): not taken, its outcome unknown, to be tried
// again (see retryDeferred). Otherwise nil also when the tick was not taken
// (another scheduler took it; out of its window on the database's
// clock). An error wraps ErrInvalidJob (the payload does not encode:
// nothing sent) or the driver's.
func (r *Router[T]) enqueueTick(ctx context.Context, e *periodicEntry[T], tick time.Time, id string, payload T) (locked bool, err error) {
	p := e.p
	b := batch{kind: e.kind}
	if err := addJob(&b, r, 0, id, payload, append(slices.Clip(p.Options), leaserouter.WithRunAt(tick))); err != nil {
		return false, err
	}
	// Wait for room for the events before the transaction, not while it
	// locks the periodic job's row (a slow hook would stall the job's
	// ticks in every process).
	if err := r.ev.awaitRoom(ctx); err != nil {
		return false, err
	}
	var inserted map[string]time.Time
	var purged []leaserouter.Event
	err = pgx.BeginTxFunc(ctx, r.db, readCommitted, func(tx pgx.Tx) error {
		var taken bool
		err := tx.QueryRow(ctx, r.st.takeTick, args{"queue": r.opts.Queue, "name": p.Name, "tick": tick,
			"retention_us": r.opts.Retention.Microseconds(), "lock_timeout_ms": periodicLockTimeout.Milliseconds(),
			"idle_timeout_ms": periodicIdleTimeout.Milliseconds(), "txn_timeout_ms": periodicTxnTimeout.Milliseconds()}).Scan(&taken, &locked)
		if err != nil {
			return err
		}
		if !taken {
			return errTickNotTaken
		}
		inserted, purged, err = r.insertRoomed(ctx, tx, &b) // room awaited above: no wait while locking the periodic job's row
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, r.st.tickCommit) // no lock_timeout on the COMMIT (periodic_tick_commit.sql)
		return err
	})
	if errors.Is(err, errTickNotTaken) {
		return locked, nil
	}
	if err != nil {
		return false, err
	}
	r.replacedPurged(purged)
	_, ok := inserted[id]
	r.enqueued(b.kind, b.ids, inserted)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.stats.Enqueued++
	} else {
		r.stats.Duplicates++ // the ID enqueued otherwise (by Enqueue, say): the tick is taken all the same
	}
	return false, nil
}

// dbClockOffset runs query, a round trip that scans the database's clock
// into now, and returns the offset of the database's clock to the local
// one: now less the local instant halfway through the round trip.
func (r *Router[T]) dbClockOffset(query func() error, now *time.Time) (time.Duration, error) {
	sent := r.localNow()
	if err := query(); err != nil {
		return 0, err
	}
	got := r.localNow()
	return now.Sub(sent.Add(got.Sub(sent) / 2)), nil
}

// localNow is the local clock (skewed by tests: SetClockSkew).
func (r *Router[T]) localNow() time.Time {
	return time.Now().Add(time.Duration(r.periodic.skew.Load()))
}

// callbackPanicked counts a recovered panic of user code (Payload, a
// Schedule's Next) and reports msg at level Error as the core does:
// through the delivery goroutine to the Logger, or at once to
// slog.Default() when no hook is set.
func (r *Router[T]) callbackPanicked(msg, jobID string) {
	r.mu.Lock()
	r.stats.CallbackPanics++
	r.mu.Unlock()
	if !r.ev.report(msg, jobID) {
		contract.ReportTo(slog.Default(), msg, jobID)
	}
}

// logPeriodic logs msg at level through Options.Logger, or slog.Default()
// if nil, a panic of its handler recovered.
func (r *Router[T]) logPeriodic(level slog.Level, msg, jobID string) {
	l := r.opts.Logger
	if l == nil {
		l = slog.Default()
	}
	_ = contract.Recovered(func() {
		if jobID == "" {
			l.Log(context.Background(), level, msg)
			return
		}
		l.Log(context.Background(), level, msg, "job_id", jobID)
	})
}
