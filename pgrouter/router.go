package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
)

// Router is the leaserouter contract on PostgreSQL: one queue's jobs in a
// table many processes share, leases that expire on the database's clock,
// fencing tokens the database checks. Every method is safe for concurrent
// use; every method that talks to the database takes a ctx (nil means
// context.Background()) and returns errors wrapping the driver's.
type Router[T any] struct {
	db      *pgxpool.Pool
	opts    Options
	st      *statements // the statements of opts.Schema
	channel string      // the LISTEN/NOTIFY channel of opts.Schema (schemaChannel)
	lease   int64       // LeaseDuration in microseconds
	keep    int64       // Retention in microseconds, 0 if negative (purge at once)
	cap     int64       // the most jobs of a state Stats and Queues count one by one (countCap; tests lower it)

	closing    context.Context    // done when Close starts
	startClose context.CancelFunc // ends closing

	mu          sync.Mutex
	closed      bool
	drainedDone bool                   // drained was closed
	held        map[*Lease[T]]struct{} // leases granted here and not ended by their holder
	drained     chan struct{}          // closed when held empties while closing
	stats       leaserouter.Stats      // totals since New (state counts come from the table)
	periodic    periodics[T]           // AddPeriodic's jobs and their scheduler (periodic.go)

	ev      *events  // nil unless OnEvent or Logger is set
	hist    *history // History's counts not yet in the table
	tasks   *tasks   // background work: unknown outcomes resolved, a stopping Run's last round trips
	keepers *keepers[T]
	wake    *waker
	sh      *shared                  // the listener and the heartbeat connection: the Router's own, or its Client's
	ownSh   bool                     // sh is the Router's own: Close closes it
	onIdle  func()                   // a Client's queue: called when a Run's claim finds no job (Client.Drained counts again); set before any Run
	serving atomic.Pointer[[]string] // a Client's queue: the kinds its claims serve, set at Start (claimKinds)
	stop    context.CancelFunc       // stops the background loops
	stopped sync.WaitGroup
	done    chan struct{} // closed when Close has finished
}

// New returns a Router on db for opts.Queue, after checking that db's
// schema is at this module's version (run Migrate first, or MigrateTo
// for opts.Schema) and raising the
// token sequence (ALTER SEQUENCE: the role must own the schema's objects,
// as Migrate's role does) above opts.TokenFloor and the Unix time in
// nanoseconds. It starts four goroutines (three with opts.NoVacuum): one holds a connection of its
// own (not one of db's) to LISTEN for wake-ups, one is the maintenance
// loop (settling what is due and deleting finished jobs past their
// retention every PollInterval), one sends KeepAlive's heartbeats (on the
// heartbeat connection, not one of db's either, made at the first
// heartbeat and shared by KeepAlive and every Run of the Router: the
// Router holds at most these two connections outside db), and one vacuums
// and analyzes the jobs table, on a connection of db: a VACUUM (with
// ANALYZE) when the statistics count at least 10,000 dead tuples in it,
// an ANALYZE alone when at least 10,000 rows (and a tenth of the live
// ones) changed since the last; neither within 5s of the end of one
// (anyone's), nor within four times its own last one's duration, and no
// VACUUM while a transaction that began before its last one holds a
// snapshot (nothing could be removed). The dead
// index entries of claimed jobs lie where every claim's index walk
// starts, each connection keeps plans made with the statistics of their
// time, and autovacuum may come a minute or more later. VACUUM and
// ANALYZE need the table's owner, as Migrate's role is: a Router whose
// role is not a member of the owner's never runs them. Close stops them (a vacuum in progress
// is canceled).
// db's sessions must default to READ COMMITTED isolation (PostgreSQL's
// default; see the package doc's Transaction isolation): New reads
// default_transaction_isolation on one of db's connections and refuses
// any other.
// Errors: invalid options, a nil db and a db whose sessions default to
// another isolation wrap ErrInvalidOptions; an older schema (or none)
// wraps ErrSchemaOutdated; others wrap the driver's.
func New[T any](ctx context.Context, db *pgxpool.Pool, opts Options) (*Router[T], error) {
	ctx = orBackground(ctx)
	if db == nil {
		return nil, fmt.Errorf("%w: nil pool", leaserouter.ErrInvalidOptions)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := readCommittedByDefault(ctx, db); err != nil {
		return nil, err
	}
	if err := schemaReady(ctx, db, opts.Schema, opts.TokenFloor); err != nil {
		return nil, err
	}
	return newRouter[T](db, opts, nil), nil
}

// newRouter is New's Router once db and opts are checked (opts with
// defaults), on sh, or on a private shared (started here, closed by
// Close) if sh is nil.
func newRouter[T any](db *pgxpool.Pool, opts Options, sh *shared) *Router[T] {
	r := &Router[T]{
		db: db, opts: opts,
		st:      statementsFor(opts.Schema),
		channel: schemaChannel(opts.Schema),
		lease:   opts.LeaseDuration.Microseconds(),
		keep:    max(0, opts.Retention.Microseconds()),
		cap:     countCap,
		held:    make(map[*Lease[T]]struct{}),
		done:    make(chan struct{}),
		wake:    newWaker(),
		tasks:   newTasks(),
		hist:    newHistory(),
		sh:      sh,
	}
	r.ev = newEvents(opts.OnEvent, opts.Logger, func() {
		r.mu.Lock()
		r.stats.CallbackPanics++
		r.mu.Unlock()
	}, 2, &r.stopped) // the producers: the maintenance loop and the KeepAlive goroutine
	r.closing, r.startClose = context.WithCancel(context.Background())
	lctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	r.keepers = newKeepers(r)
	if r.sh == nil {
		r.sh, r.ownSh = newShared(db, opts.Schema), true
		r.sh.start(&r.stopped)
	}
	r.sh.add(opts.Queue, r.wake)
	r.stopped.Go(func() { defer r.ev.producerDone(); r.maintain(lctx) })
	if !opts.NoVacuum {
		r.stopped.Go(func() { r.vacuumLoop(lctx) })
	}
	r.stopped.Go(func() { defer r.ev.producerDone(); r.keepers.run(lctx) })
	return r
}

// readCommitted is the isolation of every transaction pgrouter begins,
// stated rather than left to the session's default_transaction_isolation:
// its statements wait for a row another transaction locks and then read
// the row as committed (a take of a periodic tick, the install of the
// tick records); at repeatable read they would read it as of their
// snapshot, or fail with a serialization failure.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// readCommittedByDefault is New's check that db's sessions run their
// single statements at READ COMMITTED: the claim, lease and settle
// statements wait for rows other transactions lock and must then read
// them as committed (at repeatable read or serializable they fail with
// 40001 instead). pgrouter sets no session setting on the caller's pool;
// the transactions it begins state their isolation (readCommitted).
func readCommittedByDefault(ctx context.Context, db *pgxpool.Pool) error {
	var iso string
	if err := db.QueryRow(ctx, "SELECT current_setting('default_transaction_isolation')").Scan(&iso); err != nil {
		return fmt.Errorf("pgrouter: New: read default_transaction_isolation: %w", err)
	}
	if iso != "read committed" {
		return fmt.Errorf("%w: the pool's sessions default to transaction isolation %q; pgrouter needs \"read committed\" (default_transaction_isolation)", leaserouter.ErrInvalidOptions, iso)
	}
	return nil
}

// raiseTokens raises the token sequence to at least floor and the Unix
// time in nanoseconds on the database's clock, never lowering it. The
// no-op ALTER SEQUENCE holds a lock that makes concurrent nextval calls
// wait until the transaction ends, so no token is issued between reading
// the sequence and setting it: it cannot go back under concurrent claims.
func raiseTokens(ctx context.Context, db *pgxpool.Pool, st *statements, floor leaserouter.Token) error {
	err := pgx.BeginTxFunc(ctx, db, readCommitted, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, st.lockTokens); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, st.raiseToken, args{"floor": int64(floor)})
		return err
	})
	if err != nil {
		return fmt.Errorf("pgrouter: New: raise the token sequence (did Migrate run?): %w", err)
	}
	return nil
}

// open returns ErrClosed after Close has begun.
func (r *Router[T]) open() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return leaserouter.ErrClosed
	}
	return nil
}

// errWrap wraps a driver error with the call's name.
func errWrap(call string, err error) error {
	if err == nil {
		return nil
	}
	var lost *leaserouter.LeaseLostError
	if errors.As(err, &lost) || errors.Is(err, leaserouter.ErrClosed) || errors.Is(err, leaserouter.ErrNoJob) ||
		errors.Is(err, leaserouter.ErrDuplicate) || errors.Is(err, leaserouter.ErrInvalidJob) ||
		errors.Is(err, leaserouter.ErrNotFound) {
		return err
	}
	return fmt.Errorf("pgrouter: %s: %w", call, err)
}

// Close stops the Router. It refuses new work at once (Enqueue,
// EnqueueMany, Acquire, TryAcquire and their batch forms return
// ErrClosed; blocked Acquires return ErrClosed), then waits, until ctx is
// done, for the leases this Router granted to end (holders may still
// Heartbeat, Complete, Fail and Release); an abandoned lease ends at its
// expiry (as proven by its last accepted heartbeat, on this process's
// clock). Leases still held then are revoked, in one round trip: their
// jobs are pending again at once (the attempt counted, yet never dead:
// a job revoked on its last attempt is leased once more)
// and their holders' operations are refused with ErrLeaseLost; a Run's leases not
// running (leased ahead of their turn, or finished and not yet
// completed) are not revoked: the stopping Run hands them back (the
// attempt not counted) or completes them. It then waits for
// the Router's background work (unknown outcomes being resolved, a
// stopped Run's last completions and hand-backs), ends it, stops its
// goroutines and returns nil, or ctx.Err() if ctx was done first (every
// lease still held then revoked). If the revocation failed or did not
// finish in time, the error returned wraps its failure (and ctx.Err()
// if ctx was done): those leases may be revoked, or end at their expiry.
//
// Close returns within 100ms of ctx's end, whatever the database does
// (its pool exhausted, the server stalled): the revocation and the
// background work go on until 50ms after ctx ended at most (one deadline
// for both). Leases the revocation did not end by then end at their
// expiry (their holders' operations, a Run's completions included, are
// accepted until then); background work not finished by then is
// abandoned (a claim's unknown outcome left so: its leases expire, their
// attempt counted). A ctx done already revokes at once. Get and Stats
// keep working; Cancel returns ErrClosed. Calling Close again waits for
// the first call (or ctx) and returns nil. A nil ctx means
// context.Background().
func (r *Router[T]) Close(ctx context.Context) error {
	ctx = orBackground(ctx)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		if r.ev != nil && r.ev.inHook() {
			return nil // the first Close waits for the delivery this call is part of
		}
		select {
		case <-r.done:
		case <-ctx.Done():
		}
		return nil
	}
	r.closed = true
	r.startClose()
	r.drained = make(chan struct{})
	r.checkDrained()
	r.mu.Unlock()
	r.wake.broadcast() // blocked Acquires see closed
	err := r.drain(ctx)
	// One deadline, closeGrace after ctx's end, for both: graces never add up.
	last, cancel := withGrace(ctx, closeGrace)
	defer cancel()
	rerr := r.revokeHeld(graced(last))
	if terr := r.tasks.close(last); err == nil && terr != nil {
		err = ctx.Err()
	}
	r.stop()
	if r.ownSh {
		r.sh.close()
	}
	r.periodicStopped(ctx) // cut short by ctx, it leaves the result to draining
	// The delivery goroutine ends once the others have and it has
	// delivered what is left: Close waits for every goroutine of the
	// Router's, unless ctx ends first (a hook still running: they end when
	// it returns) or Close is called from a hook (the delivery goroutine is
	// the caller: it ends after).
	eerr := r.ev.close(ctx)
	switch {
	case eerr != nil:
		if err == nil {
			err = eerr
		}
	case r.ev != nil && r.ev.inHook():
	default:
		r.stopped.Wait()
	}
	close(r.done)
	switch {
	case err == nil:
		err = rerr
	case rerr != nil:
		// ctx.Err() alone would say every lease still held was revoked.
		err = fmt.Errorf("%w; %w", err, rerr)
	}
	return err
}

// drain waits until no lease granted here is held, or until every one
// still held has passed the instant up to which a heartbeat proved it
// valid (an abandoned lease ends at its expiry: Close does not wait
// longer for it), or until ctx is done (then it returns ctx.Err()).
func (r *Router[T]) drain(ctx context.Context) error {
	for {
		r.mu.Lock()
		var last time.Time
		for l := range r.held {
			if p := l.provenUntil(); p.After(last) {
				last = p
			}
		}
		r.mu.Unlock()
		wait := time.Until(last)
		if wait <= 0 {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-r.drained:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// querier is what Enqueue needs of a pool or a caller's transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// release forgets l in the Router's held leases (Close waits for them).
func (r *Router[T]) release(l *Lease[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.held[l]; !ok {
		return
	}
	delete(r.held, l)
	r.checkDrained()
}

// holds reports whether l is a lease of this Router's not yet ended.
func (r *Router[T]) holds(l *Lease[T]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.held[l]
	return ok
}

// releaseJobs forgets this Router's leases of the jobs of ended (ID:
// the token of the lease that ended), if held: Close no longer waits for
// them.
func (r *Router[T]) releaseJobs(ended map[string]leaserouter.Token) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for l := range r.held {
		if t, ok := ended[l.JobID]; ok && t == l.Token {
			delete(r.held, l)
		}
	}
	r.checkDrained()
}

// checkDrained closes drained, once, when Close has begun and no lease is
// held. The caller holds r.mu.
func (r *Router[T]) checkDrained() {
	if r.drained != nil && len(r.held) == 0 && !r.drainedDone {
		r.drainedDone = true
		close(r.drained)
	}
}

// orBackground treats a nil ctx as context.Background(), as every call does.
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}
