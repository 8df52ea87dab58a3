package pgrouter

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/periodic"
)

// Periodic is leaserouter.Periodic: a job enqueued on a Schedule, one job
// per tick (see Router.AddPeriodic).
type Periodic[T any] = leaserouter.Periodic[T]

// AddPeriodic schedules p on this Router's queue: at each tick of
// p.Schedule it enqueues the job leaserouter.TickID(p.Name, tick), with
// the payload p.Payload(tick) (the zero T if Payload is nil), p.Options
// and the tick as its run-at. It returns once p is registered (one round
// trip); the ticks are enqueued by the Router's scheduler goroutine,
// started by the first AddPeriodic and stopped (and waited for, until its
// ctx is done) by Close.
//
// Exactly one job per tick, whatever the number of processes and Routers
// that schedule p on the queue, as long as at least one of them runs at
// the tick (and gets to it before the next tick is due: a scheduler
// woken later enqueues the latest due tick, skipping older ones): every
// scheduler of the tick tries it, and the database lets one through. Each process wakes at the tick (a timer, not a poll) and
// takes the tick in a transaction that also inserts its job: it raises
// the job's last tick in the table leaserouter_periodic, whose row lock
// makes the other schedulers of the tick wait for that transaction, then
// find the tick taken (their attempt is a no-op, not an error); a
// scheduler that dies before its commit leaves the tick to the others.
// Behind that, the queue's primary key (queue, id) refuses a second job
// of the same ID. A tick is never taken twice, even after its job
// finished and was purged or deleted (the table keeps the last tick).
// The processes of a queue should give a name the same Schedule: the
// last tick taken is the name's, whichever schedule made it, and a tick
// not after it is refused. There is no
// leader to elect: River's periodic jobs could be enqueued twice around a
// change of leader (riverqueue/river#283, fixed with leadership terms in
// #1213), and asynq's scheduler enqueues a tick once per running
// scheduler (hibiken/asynq#1013, #371, #554, #395); here every process
// schedules and the database orders them.
//
// The database's clock decides, never a process's: the scheduler reads
// clock_timestamp() at each wake-up, and the statement that takes a tick
// checks on that clock, as it locks the row, that the tick is due and
// younger than Options.Retention. A tick's ID is made from the schedule's
// instant, so processes with skewed clocks agree on it; a process's timer
// is set from the offset of its clock to the database's, measured at each
// wake-up (woken early, it sleeps again; it sleeps at most 10 minutes at
// a time).
//
// Which ticks: none before p's first registration on the queue ever
// (the instant since, on the database's clock, stored in
// leaserouter_periodic by the first AddPeriodic of the queue and name in
// any process and kept by later ones): a first start does not enqueue
// the latest past tick. At each wake-up the scheduler enqueues the latest
// due tick not yet taken, if it is at or after since and younger than
// Options.Retention, and skips older ones: after every scheduler was
// down (a restart, say), the first one back enqueues at most one missed
// tick, the latest, and only if it is younger than Retention. Ticks are
// compared in the database in microseconds.
//
// Payload is called on the scheduler's goroutine, outside every lock; it
// should not block (Close waits for a call in progress until its ctx is
// done; the goroutine then ends when the call returns). A panic in it is
// recovered, counted in Stats.CallbackPanics, reported at
// level Error through Options.Logger (slog.Default() if nil), and skips
// the tick in this process, as a payload that does not encode as JSON
// does; a panic in the Schedule's Next ends p's schedule here, reported
// so (the name stays added until RemovePeriodic). A database error makes the scheduler try again after a backoff
// (100ms, doubling up to 5s; a tick's error delays only its own periodic
// job, the others go on at their ticks), each reported at level Warn through
// Options.Logger (slog.Default() if nil). An enqueued tick's job emits
// EventEnqueued and counts in Stats.Enqueued, as Enqueue's do.
//
// Errors, before any round trip: an error wrapping
// leaserouter.ErrInvalidOptions for a p that leaserouter.CheckPeriodic
// refuses, for a p.Name already added on this Router (and not removed),
// or for a negative Options.Retention (finished jobs dropped at once:
// periodic jobs are refused, as in the core); leaserouter.ErrClosed after
// Close (also when Close began during the round trip). Then an error
// wrapping the driver's if the registration failed (nothing is
// scheduled). A nil ctx means context.Background(); ctx bounds the
// registration only. Safe for concurrent use.
func (r *Router[T]) AddPeriodic(ctx context.Context, p Periodic[T]) error {
	ctx = orBackground(ctx)
	if err := leaserouter.CheckPeriodic(p.Name, p.Schedule, p.Options); err != nil {
		return err
	}
	if r.opts.Retention < 0 {
		return fmt.Errorf("%w: Periodic %s: Options.Retention is %v: finished jobs dropped at once leave no record of a tick's job",
			leaserouter.ErrInvalidOptions, contract.Quote(p.Name), r.opts.Retention)
	}
	p.Options = slices.Clone(p.Options)
	e := &periodicEntry[T]{p: p, index: -1}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return leaserouter.ErrClosed
	}
	if r.periodic.byName == nil {
		r.periodic.byName = make(map[string]*periodicEntry[T])
		r.periodic.kick = make(chan struct{}, 1)
	}
	if _, ok := r.periodic.byName[p.Name]; ok {
		r.mu.Unlock()
		return fmt.Errorf("%w: Periodic %s is already added on queue %s", leaserouter.ErrInvalidOptions,
			contract.Quote(p.Name), contract.Quote(r.opts.Queue))
	}
	r.periodic.byName[p.Name] = e // reserved: a concurrent AddPeriodic of the name is refused
	r.mu.Unlock()

	var since, now time.Time
	var last *time.Time
	offset, err := r.dbClockOffset(func() error {
		return r.db.QueryRow(ctx, addPeriodic, args{"queue": r.opts.Queue, "name": p.Name}).Scan(&since, &last, &now)
	}, &now)

	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || r.closed {
		delete(r.periodic.byName, p.Name)
		if err != nil {
			return errWrap("AddPeriodic", err)
		}
		return leaserouter.ErrClosed
	}
	e.since, e.next, e.ready = since, now, true // the scheduler plans it at once
	if last != nil {
		e.last = *last
	}
	r.periodic.offset = offset
	heap.Push(&r.periodic.due, e)
	if !r.periodic.running {
		// Under mu with closed false: Close has not begun, so its wait for
		// r.stopped comes after this Go.
		r.periodic.running = true
		done := make(chan struct{})
		r.periodic.done = done
		// Not in r.stopped: Close waits for it only until its ctx is done
		// (see stopped), as a Payload call in progress is user code.
		go func() {
			defer close(done)
			r.schedule()
		}()
	}
	r.periodic.wake()
	return nil
}

// RemovePeriodic stops scheduling the periodic job name in this Router;
// other processes that scheduled it go on, and its record in
// leaserouter_periodic stays (a later AddPeriodic keeps its since and
// last tick). A tick being enqueued as it is called may still be. It
// returns an error wrapping leaserouter.ErrNotFound for a name not added
// on this Router (or removed, or whose AddPeriodic has not returned), and
// leaserouter.ErrClosed after Close. It does not talk to the database.
// Safe for concurrent use.
func (r *Router[T]) RemovePeriodic(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return leaserouter.ErrClosed
	}
	e, ok := r.periodic.byName[name]
	if !ok || !e.ready {
		return fmt.Errorf("%w: no periodic job %s on queue %s", leaserouter.ErrNotFound, contract.Quote(name), contract.Quote(r.opts.Queue))
	}
	delete(r.periodic.byName, name)
	if e.index >= 0 {
		heap.Remove(&r.periodic.due, e.index)
	}
	r.periodic.wake()
	return nil
}

// periodics is a Router's periodic jobs and its scheduler's state, all
// guarded by the Router's mu.
type periodics[T any] struct {
	byName  map[string]*periodicEntry[T] // added and not removed (a reserved name too: ready false)
	due     tickHeap[T]                  // the scheduled entries, soonest next first
	kick    chan struct{}                // cap 1: the set changed, the scheduler plans again
	running bool                         // the scheduler goroutine was started
	done    chan struct{}                // closed when the scheduler goroutine ends; nil until it starts
	offset  time.Duration                // the database's clock less the local one, last measured
	skew    atomic.Int64                 // nanoseconds added to the local clock: tests only (export_test.go); not under mu
	wakes   atomic.Uint64                // wake-ups done, a test signal (export_test.go); not under mu
}

// stopped waits, after Close began, for the scheduler goroutine to end
// (it ends at its next look at r.closing), or for ctx to be done: a
// Payload call in progress is user code, waited for only as long as
// Close's ctx allows (the goroutine ends when the call returns). It
// returns ctx.Err() if ctx was done first.
func (r *Router[T]) periodicStopped(ctx context.Context) error {
	r.mu.Lock()
	done := r.periodic.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wake tells the scheduler the set changed. The caller holds mu.
func (p *periodics[T]) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// periodicEntry is one periodic job of a Router. Its since, last and next
// are written by AddPeriodic before it is in due, then only by the
// scheduler, while it is out of due (popped under mu).
type periodicEntry[T any] struct {
	p     Periodic[T]
	since time.Time     // the first registration of (queue, name) ever, database clock
	last  time.Time     // the latest tick handled here, or taken by anyone as AddPeriodic read it; zero: none
	next  time.Time     // when to plan it again, database clock
	index int           // in due; -1 when out of it
	ready bool          // AddPeriodic's round trip succeeded
	retry time.Duration // the backoff after a database error of its tick; 0: none (written by the scheduler only)
}

// tickHeap orders entries by next (container/heap).
type tickHeap[T any] []*periodicEntry[T]

func (h tickHeap[T]) Len() int           { return len(h) }
func (h tickHeap[T]) Less(i, j int) bool { return h[i].next.Before(h[j].next) }
func (h tickHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *tickHeap[T]) Push(x any) {
	e := x.(*periodicEntry[T])
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *tickHeap[T]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// The scheduler's timing: it sleeps at most periodicMaxSleep at a time
// (the offset of the clocks is measured again after that: a local clock
// drifting from the database's by 500ppm, the most NTP slews, is then
// late by 0.3s at most), and after a database error it waits from
// periodicRetryMin, doubling up to periodicRetryMax.
const (
	periodicMaxSleep = 10 * time.Minute
	periodicRetryMin = 100 * time.Millisecond
	periodicRetryMax = 5 * time.Second
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
	offset, err := r.dbClockOffset(func() error { return r.db.QueryRow(ctx, readClock).Scan(&now) }, &now)
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
		e.next = now.Add(e.retry) // e.last unchanged: the tick is planned again then
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

// planTick plans e at now on the shared rule (periodic.Due) and enqueues
// the tick it gives, if any. It returns only database errors, e then
// unchanged; a panic of the schedule ends e's schedule (next zero), a
// panic of Payload or a payload that does not encode skips the tick, each
// reported.
func (r *Router[T]) planTick(ctx context.Context, e *periodicEntry[T], now time.Time) error {
	plan, err := periodic.Due(e.p.Schedule, interval, e.since, e.last, now, r.opts.Retention)
	if err != nil {
		msg := fmt.Sprintf("pgrouter: periodic job %s: %v; its schedule ends in this process", contract.Quote(e.p.Name), err)
		if errors.Is(err, periodic.ErrStuck) {
			r.logPeriodic(slog.LevelError, msg, "")
		} else {
			r.callbackPanicked(msg, "") // Next panicked
		}
		e.next = time.Time{}
		return nil
	}
	if !plan.Tick.IsZero() {
		id := leaserouter.TickID(e.p.Name, plan.Tick)
		payload, p := tickPayload(e.p, plan.Tick)
		switch {
		case p != nil:
			r.callbackPanicked(fmt.Sprintf("pgrouter: periodic job %s: Payload panicked: %v; tick %s skipped",
				contract.Quote(e.p.Name), p, plan.Tick.UTC().Format(time.RFC3339Nano)), id)
		default:
			err := r.enqueueTick(ctx, e.p, plan.Tick, id, payload)
			if errors.Is(err, leaserouter.ErrInvalidJob) {
				r.logPeriodic(slog.LevelError, fmt.Sprintf("pgrouter: periodic job %s: %v; tick skipped", contract.Quote(e.p.Name), err), id)
			} else if err != nil {
				return err
			}
		}
	}
	e.last, e.next = plan.Handled, plan.Next
	return nil
}

// interval is leaserouter.Interval for periodic.Due.
func interval(s periodic.Schedule) (time.Duration, bool) { return leaserouter.Interval(s) }

// tickPayload is p.Payload(tick), the zero T for a nil Payload, with a
// panic recovered.
func tickPayload[T any](p Periodic[T], tick time.Time) (payload T, panicked any) {
	if p.Payload == nil {
		return payload, nil
	}
	panicked = contract.Recovered(func() { payload = p.Payload(tick) })
	return payload, panicked
}

// errTickTaken rolls back the transaction of a tick taken already (or not
// to be taken: see takeTick).
var errTickTaken = errors.New("pgrouter: tick taken")

// enqueueTick takes tick of p and inserts its job id in one transaction
// (takeTick, then jobs_insert as Enqueue runs it): nil also when the tick
// was not taken (another scheduler took it; out of its window on the
// database's clock). An error wraps ErrInvalidJob (the payload does not
// encode: nothing sent) or the driver's.
func (r *Router[T]) enqueueTick(ctx context.Context, p Periodic[T], tick time.Time, id string, payload T) error {
	var b batch
	if err := addJob(&b, r, 0, id, payload, append(slices.Clip(p.Options), leaserouter.WithRunAt(tick))); err != nil {
		return err
	}
	// Wait for room for the events before the transaction, not while it
	// holds the periodic job's row (a slow hook would stall the job's
	// ticks in every process).
	if err := r.ev.awaitRoom(ctx); err != nil {
		return err
	}
	var inserted map[string]time.Time
	var purged []leaserouter.Event
	err := pgx.BeginFunc(ctx, r.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, takeTick, args{"queue": r.opts.Queue, "name": p.Name, "tick": tick,
			"retention_us": r.opts.Retention.Microseconds()})
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errTickTaken
		}
		inserted, purged, err = r.insertRoomed(ctx, tx, &b) // room awaited above: no wait holding the periodic job's row
		return err
	})
	if errors.Is(err, errTickTaken) {
		return nil
	}
	if err != nil {
		return err
	}
	r.replacedPurged(purged)
	_, ok := inserted[id]
	r.enqueued(b.ids, inserted)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.stats.Enqueued++
	} else {
		r.stats.Duplicates++ // the ID enqueued otherwise (by Enqueue, say): the tick is taken all the same
	}
	return nil
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
