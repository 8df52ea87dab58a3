package pgrouter

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Periodic is leaserouter.Periodic: a job enqueued on a Schedule, one job
// per tick (see Router.AddPeriodic).
type Periodic[T any] = leaserouter.Periodic[T]

// AddPeriodic schedules p on this Router's queue: at each tick of
// p.Schedule it enqueues the job leaserouter.TickID(p.Name, tick), with
// the payload p.Payload(tick) (the zero T if Payload is nil), p.Options
// and the tick as its run-at. It returns once p is registered (one round
// trip, or two when another process registers the name at the same
// instant); the ticks are enqueued by the Router's scheduler goroutine,
// started by the first AddPeriodic and stopped (and waited for, until its
// ctx is done) by Close.
//
// Every process may schedule the same p on the queue, with no leader to
// elect: each tick becomes exactly one job, however many schedulers try
// it, as long as one of them runs at the tick and the tick is younger than
// Options.Retention. A tick is never taken twice, even after its job was
// purged or deleted. Give a name the same Schedule, and the queue the same
// Retention, in every process. The database's clock decides when a tick
// is due; a tick's ID is the schedule's instant, so processes with skewed
// clocks agree on it.
//
// Which ticks: none before p's first registration on the queue in any
// process (a first start does not enqueue the latest past tick). A
// scheduler woken late, or the first one back after every scheduler was
// down, enqueues only the latest due tick, if it is younger than
// Retention, and skips older ones. Ticks may be enqueued out of order.
//
// No scheduler waits for another: a process stalled inside a tick delays
// that periodic job only, and AddPeriodic never waits for it; the others
// take the tick once the server ends the stalled transaction (after 5s
// idle; a process stopped in the middle of a statement, before PostgreSQL
// 17, only once its connection is found dead). During a rolling upgrade,
// processes of a version before schema 12 may go on scheduling beside this
// one on the migrated database: each tick is still taken once. Migrating
// to schema 13 treats every tick up to the latest one taken as taken.
//
// Payload is called on the scheduler's goroutine, outside every lock, at
// each try of a tick; it should not block (Close waits for a call in
// progress until its ctx is done). A panic in it is recovered, counted in
// Stats.CallbackPanics and reported at level Error through Options.Logger
// (slog.Default() if nil), and skips the tick in this process, as a
// payload that does not encode as JSON does; a panic in the Schedule's
// Next ends p's schedule here (the name stays added until
// RemovePeriodic). A database error is retried after a backoff (100ms,
// doubling up to 5s; it delays only its own periodic job), each reported
// at level Warn. An enqueued tick's job emits EventEnqueued and counts in
// Stats.Enqueued, as Enqueue's do.
//
// Errors, before any round trip: an error wrapping
// leaserouter.ErrInvalidOptions for a p the core's AddPeriodic refuses,
// with its message (an empty Name or one that breaks the rule for IDs
// with the tick's room taken, a nil Schedule, an Every(d) with d <= 0, an
// option Enqueue would refuse, WithRunAt or WithDelay among Options), for
// a negative Options.Retention (finished jobs dropped at once leave no
// record of a tick's job), or for a p.Name already added on this Router
// (and not removed); leaserouter.ErrClosed after
// Close (also when Close began during the round trip). Then an error
// wrapping the driver's if the registration failed (nothing is
// scheduled). A nil ctx means context.Background(); ctx bounds the
// registration only. Safe for concurrent use.
func (r *Router[T]) AddPeriodic(ctx context.Context, p Periodic[T]) error {
	return r.addPeriodic(ctx, p, "", nil)
}

// How AddPeriodic's schedulers take their ticks (its doc says what users
// see):
//
// Exactly one job per tick, whatever the number of processes and Routers
// that schedule p on the queue, as long as at least one of them runs at
// the tick (and gets to it before the next tick is due: a scheduler
// woken later enqueues the latest due tick, skipping older ones) and
// the tick is younger than Options.Retention: every scheduler of the
// tick tries it, and the database lets one through. Each process wakes
// at the tick (a timer, not a poll) and takes the tick in a transaction
// that also inserts its job: it locks the job's row in the table
// leaserouter_periodic and inserts the tick's record in
// leaserouter_periodic_ticks, whose primary key (queue, name, tick)
// refuses a second taker; behind that, the queue's primary key (queue,
// id) refuses a second job of the same ID. A tick is never taken twice,
// even after its job finished and was purged or deleted (its record is
// kept while the taker's Retention lasts; past it no scheduler of that
// Retention takes the tick, and its taker's later ticks delete the
// record and refuse the tick for good: the processes of a queue should
// give it the same Retention). Ticks may be taken in any order (a tick
// deferred while a stalled scheduler locks its row, below, after a
// younger one). The processes of a queue should give a name the same
// Schedule: a scheduler that starts plans from the name's latest tick
// taken, whichever schedule made it. There is no leader to elect:
// River's periodic jobs could be enqueued twice around a change of
// leader (riverqueue/river#283, fixed with leadership terms in #1213),
// and asynq's scheduler enqueues a tick once per running scheduler
// (hibiken/asynq#1013, #371, #554, #395); here every process schedules
// and the database orders them.
//
// No scheduler waits for another, so a process stalled inside a tick
// (stopped, or cut off from the database while its session lives on)
// delays that periodic job only, and AddPeriodic never waits for it. A
// scheduler that finds the job's row locked by another's tick does not
// wait (FOR UPDATE SKIP LOCKED): it goes on with its other periodic jobs
// and defers the tick, trying it again after 100ms, doubling up to 1s,
// oldest first, until it is taken (the other rolled back: its process
// died), found taken (the other committed), or older than
// Options.Retention. The ticks of the job that come due meanwhile are
// deferred with it (the row is the job's: it is locked for them too), up
// to 8; past that the latest replaces the youngest kept, as for a
// scheduler woken late. A tick whose own transaction fails (a database
// error, a lost connection, its outcome unknown) is deferred the same way
// and tried again after the backoff of errors below. The tick's transaction bounds how
// long a stalled process locks the row: the server ends the session of a
// scheduler idle for 5s between statements inside it
// (idle_in_transaction_session_timeout, set for that transaction only),
// which rolls its tick back for the others, and a lock wait of its
// statements ends after 1s (lock_timeout), an error tried again after a
// backoff; its COMMIT waits for the cluster's NOTIFY lock as an
// Enqueue's does (neither bound applies to it). A process stopped in the middle of a statement (its
// messages partly sent: a large payload, say) is not idle to the server:
// on PostgreSQL 17 and later its session ends 5s into the transaction
// (transaction_timeout, set for it only); before 17 it ends only when
// the server finds the connection dead (its tcp_keepalives_* and
// tcp_user_timeout settings, for a process cut off; a process stopped on
// a live host keeps it), and that periodic job's ticks wait until then.
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
// due tick after the last it planned (at its start: after the name's
// latest tick taken), if it is at or after since and younger than
// Options.Retention, and skips older ones: after every scheduler was
// down (a restart, say), the first one back enqueues at most one missed
// tick, the latest, and only if it is younger than Retention. Ticks are
// compared in the database in microseconds. Each tick taken leaves a
// record (leaserouter_periodic_ticks) that makes it taken once; the
// records older than Options.Retention are deleted by the tick's later
// takers and by the queue's maintenance, about once a minute.
//
// Upgrading: during a rolling upgrade, processes of an older pgrouter
// (before schema version 12, which added the tick records) may go on
// scheduling beside this version's on the migrated database, with no
// change to them: such a process takes a tick by raising the job's
// last_tick alone, and from schema version 13 on the database records
// the tick for it (a trigger on leaserouter_periodic), so a tick is taken
// once whichever versions' schedulers try it, even after its job was
// deleted. A tick an older process skips once the database is at
// version 13 (woken late, it takes the latest due tick only) is still
// taken, once, by a scheduler of this version that got to it in time.
// Migrating to version 13 treats every tick up to the job's latest taken
// as taken (older processes may have taken any of them without a
// record): a tick at or before it that no one had taken is not enqueued,
// whatever kept it from being taken — kept by a scheduler of schema
// version 12 to try again (deferred after its transaction failed, or
// found locked by another transaction), or skipped by an older process.
//
// Payload is called on the scheduler's goroutine, outside every lock, at
// each try of a tick (again for a tick deferred or failed in the database); it
// should not block (Close waits for a call in progress until its ctx is
// done; the goroutine then ends when the call returns). A panic in it is
// recovered, counted in Stats.CallbackPanics, reported at
// level Error through Options.Logger (slog.Default() if nil), and skips
// the tick in this process, as a payload that does not encode as JSON
// does; a panic in the Schedule's Next ends p's schedule here, reported
// so (the name stays added until RemovePeriodic; the ticks it keeps are
// still tried until settled). A database error makes the scheduler try
// again after a backoff (100ms, doubling up to 5s; a tick's error delays
// only its own periodic job, the others go on at their ticks; the tick
// is kept and tried again before any younger), each reported at level Warn through
// Options.Logger (slog.Default() if nil). An enqueued tick's job emits
// EventEnqueued and counts in Stats.Enqueued, as Enqueue's do.
//
// addPeriodic is AddPeriodic of a periodic job whose ticks' jobs have
// kind ("": the Router's Options.Kind) and, when encode is not nil, the
// payload encode gives for a tick in place of p.Payload's (a Client's
// Kind, kind_periodic.go).
func (r *Router[T]) addPeriodic(ctx context.Context, p Periodic[T], kind string, encode func(tick time.Time) (T, error)) error {
	ctx = orBackground(ctx)
	if err := contract.CheckPeriodic(leaserouter.ErrInvalidOptions, leaserouter.ErrInvalidJob, p.Name, p.Schedule, p.Options, r.opts.Retention); err != nil {
		return err
	}
	p.Options = slices.Clone(p.Options)
	e := &periodicEntry[T]{p: p, kind: cmp.Or(kind, r.opts.Kind), encode: encode, index: -1}
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
	var offset time.Duration
	var err error
	for range 2 { // a second time when a concurrent first registration committed after the first's snapshot
		offset, err = r.dbClockOffset(func() error {
			return r.db.QueryRow(ctx, r.st.addPeriodic, args{"queue": r.opts.Queue, "name": p.Name}).Scan(&since, &last, &now)
		}, &now)
		if !errors.Is(err, pgx.ErrNoRows) {
			break
		}
	}

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
// last tick). A tick whose try is in progress as it is called may still
// be enqueued; no tick kept to try again (deferred, failed) is tried after it
// returns. It returns an error wrapping leaserouter.ErrNotFound for a name not added
// on this Router (or removed, or whose AddPeriodic has not returned), and
// leaserouter.ErrClosed after Close. It does not talk to the database.
// Safe for concurrent use.
func (r *Router[T]) RemovePeriodic(name string) error {
	return r.removePeriodic(name, r.opts.Kind)
}

// removePeriodic is RemovePeriodic of the periodic job named name whose
// ticks' jobs have kind: one of another kind (added by another Kind of a
// Client's queue) is not found.
func (r *Router[T]) removePeriodic(name, kind string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return leaserouter.ErrClosed
	}
	e, ok := r.periodic.byName[name]
	if !ok || !e.ready || e.kind != kind {
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

// periodicStopped waits, after Close began, for the scheduler goroutine
// to end (it ends at its next look at r.closing), or for ctx to be done:
// a Payload call in progress is user code, waited for only as long as
// Close's ctx allows (the goroutine ends when the call returns). As in
// the core, a wait cut short does not make Close's result: draining does.
func (r *Router[T]) periodicStopped(ctx context.Context) {
	r.mu.Lock()
	done := r.periodic.done
	r.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
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
	p        Periodic[T]
	kind     string                          // its ticks' jobs' kind
	encode   func(tick time.Time) (T, error) // a tick's payload in place of p.Payload's; nil: p.Payload's
	since    time.Time                       // the first registration of (queue, name) ever, database clock
	last     time.Time                       // the latest tick handled here, or taken by anyone as AddPeriodic read it; zero: none
	next     time.Time                       // when to plan it again, database clock
	index    int                             // in due; -1 when out of it
	ready    bool                            // AddPeriodic's round trip succeeded
	retry    time.Duration                   // the backoff after a database error of its tick; 0: none (written by the scheduler only)
	deferred []time.Time                     // ticks planned and not settled, oldest first (periodic_deferred.go; scheduler only)
	ended    bool                            // its schedule ended (Next panicked or stuck): only its deferred ticks are tried (scheduler only)
	wait     time.Duration                   // the backoff of the deferred ticks' next try; 0: none (scheduler only)
}

// tickHeap orders entries by next (container/heap).
type tickHeap[T any] []*periodicEntry[T]

// Len is heap.Interface's: the number of entries.
func (h tickHeap[T]) Len() int { return len(h) }

// Less is heap.Interface's: the entry due first is the smaller.
func (h tickHeap[T]) Less(i, j int) bool { return h[i].next.Before(h[j].next) }

// Swap is heap.Interface's, keeping each entry's index its position.
func (h tickHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

// Push is heap.Interface's: x, a *periodicEntry[T], goes last.
func (h *tickHeap[T]) Push(x any) {
	e := x.(*periodicEntry[T])
	e.index = len(*h)
	*h = append(*h, e)
}

// Pop is heap.Interface's: it removes the last entry (index -1: out of
// the heap) and returns it.
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
