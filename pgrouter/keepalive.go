package pgrouter

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// KeepAlive heartbeats l every interval, for a caller that holds a lease
// outside Run, and returns a context derived from ctx that is canceled,
// with a *leaserouter.LeaseLostError as its cause, as soon as a heartbeat
// finds the lease lost, or with an error wrapping ErrLeaseLost when
// LeaseDuration has passed on the client's clock since the send time of
// the last accepted heartbeat (the database unreachable, or the Router
// closed). When the holder itself ends the lease (Complete, Fail,
// Release, Snooze return nil; a CompleteTx once its transaction commits,
// at the next round), the context is canceled at once with a
// *leaserouter.LeaseLostError whose Reason is LostCompleted, LostFailed,
// LostReleased or LostSnoozed; that end is no refusal, even when a
// heartbeat round races it (no EventStaleRejected, nothing added to
// StaleRejections or HeartbeatsRefused). The heartbeats of every lease kept alive by a Router that are
// due together go in one statement, from one goroutine per Router (see
// New), not one round trip per lease, on the heartbeat connection
// (outside the pool, one per Router, or per Client, shared with the
// heartbeat rounds of Run; made at the first heartbeat, again when it
// fails; while none can be made, a round uses the pool): they never wait for
// the caller's pool, so a lease is kept while the caller's transaction
// (Fence + CompleteTx) holds every pooled connection. After CompleteTx
// returned nil, the lease is kept for as long as its transaction is open
// (each round proves it by finding that transaction in progress on the
// database: it holds the row with the completion written), so work in
// the transaction before its commit may outlast LeaseDuration; once the
// transaction rolled back, the rounds extend the lease again or find it
// lost. A heartbeat that fails for another reason is retried at the next
// interval. Keeping alive ends when ctx is done, the returned cancel func
// is called, or the lease is lost; call cancel when done with the lease.
// cancel stops heartbeating, waits for a heartbeat round in flight with
// this lease (bounded by LeaseDuration), and cancels the context; it is
// idempotent. KeepAlive called again for the same lease keeps it alive
// for both calls, each context on its own (neither cancels the other).
// interval <= 0 means LeaseDuration/3; a positive interval
// below leaserouter.MinHeartbeatInterval is raised to it (or to
// LeaseDuration/4 if that is shorter); interval >=
// LeaseDuration, or a nil or zero l, returns a context canceled at once
// with a cause wrapping ErrInvalidOptions. A nil ctx means
// context.Background().
func KeepAlive[T any](ctx context.Context, l *Lease[T], interval time.Duration) (context.Context, context.CancelFunc) {
	if l != nil && l.via != nil { // a Client handler's view: the queue's lease acts
		return KeepAlive(ctx, l.via, interval)
	}
	ctx = orBackground(ctx)
	kctx, cancel := context.WithCancelCause(ctx)
	stop := func() { cancel(context.Canceled) }
	if l == nil || l.r == nil {
		cancel(contract.KeepAliveNilLease(leaserouter.ErrInvalidOptions))
		return kctx, stop
	}
	lease := l.r.opts.LeaseDuration
	interval = contract.HeartbeatInterval(interval, lease)
	if interval >= lease {
		cancel(contract.KeepAliveInterval(leaserouter.ErrInvalidOptions, interval, lease))
		return kctx, stop
	}
	e := l.r.keepers.add(l, interval, cancel, kctx)
	return kctx, func() {
		l.r.keepers.stop(l, e) // waits for a round in flight with this lease
		cancel(context.Canceled)
	}
}

// keepers keeps a Router's KeepAlive leases alive: one goroutine, which
// sleeps until the earliest heartbeat due and sends every due one in one
// statement (heartbeatMany).
type keepers[T any] struct {
	r    *Router[T]
	kick chan struct{} // cap 1: a lease was added

	mu    sync.Mutex
	kept  map[*Lease[T]][]*kept // a lease kept alive by several KeepAlive calls has an entry for each
	ended bool                  // the goroutine has ended (Close): nothing more is kept
}

// kept is one lease kept alive.
type kept struct {
	interval time.Duration
	due      time.Time // its next heartbeat
	cancel   context.CancelCauseFunc
	unproven *time.Timer   // cancels at the lease's proven-until instant
	stop     func() bool   // unregisters the context.AfterFunc
	round    chan struct{} // closed when the heartbeat round it is in ends; nil if in none
}

func newKeepers[T any](r *Router[T]) *keepers[T] {
	return &keepers[T]{r: r, kick: make(chan struct{}, 1), kept: map[*Lease[T]][]*kept{}}
}

// add starts keeping l alive until kctx is done, and returns its entry
// (nil after Close). A lease kept alive twice is heartbeated for both,
// each context on its own: a later KeepAlive never
// cancels an earlier one's context.
func (k *keepers[T]) add(l *Lease[T], interval time.Duration, cancel context.CancelCauseFunc, kctx context.Context) *kept {
	e := &kept{interval: interval, due: time.Now().Add(interval), cancel: cancel}
	e.unproven = time.AfterFunc(time.Until(l.provenUntil()), func() { cancel(errUnproven) })
	k.mu.Lock()
	if k.ended {
		k.mu.Unlock()
		return nil // closed: the unproven timer ends it
	}
	k.kept[l] = append(k.kept[l], e)
	e.stop = context.AfterFunc(kctx, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.drop(l, e)
	})
	k.mu.Unlock()
	select {
	case k.kick <- struct{}{}:
	default:
	}
	return e
}

// drop stops keeping l alive for entry e (a no-op if it was dropped
// before). The caller holds k.mu.
func (k *keepers[T]) drop(l *Lease[T], e *kept) {
	es := k.kept[l]
	i := slices.Index(es, e)
	if i < 0 {
		return
	}
	if es = slices.Delete(es, i, i+1); len(es) == 0 {
		delete(k.kept, l)
	} else {
		k.kept[l] = es
	}
	e.unproven.Stop()
	if e.stop != nil {
		e.stop()
	}
}

// stop is KeepAlive's cancel func's work: it stops keeping l alive for
// e (nil: nothing kept) and waits for a heartbeat round in flight with it,
// so no heartbeat
// of this KeepAlive lands after it returns (a round's statement is
// bounded by LeaseDuration).
func (k *keepers[T]) stop(l *Lease[T], e *kept) {
	if e == nil {
		return
	}
	k.mu.Lock()
	k.drop(l, e)
	round := e.round
	k.mu.Unlock()
	if round != nil {
		<-round
	}
}

// run is the keepers' goroutine, until ctx is done.
func (k *keepers[T]) run(ctx context.Context) {
	defer func() {
		// Close has revoked what was still held: the holders are told now,
		// not when their leases can no longer be proven.
		k.mu.Lock()
		defer k.mu.Unlock()
		k.ended = true
		for l, es := range k.kept {
			for _, e := range slices.Clone(es) { // drop edits es
				k.drop(l, e)
				e.cancel(&leaserouter.LeaseLostError{JobID: l.JobID, Token: l.Token, Current: l.Token, Reason: leaserouter.LostRevoked})
			}
		}
	}()
	for {
		k.mu.Lock()
		var next time.Time
		var due []*Lease[T]
		var in []*kept // the entries of this round
		round := make(chan struct{})
		now := time.Now()
		for l, es := range k.kept {
			beat := false
			for _, e := range es {
				if !e.due.After(now) {
					beat = true
					e.due, e.round = now.Add(e.interval), round
					in = append(in, e)
				}
				if next.IsZero() || e.due.Before(next) {
					next = e.due
				}
			}
			if beat {
				due = append(due, l) // once, however many entries are due
			}
		}
		k.mu.Unlock()
		if len(due) > 0 {
			k.beat(ctx, due)
			k.mu.Lock()
			for _, e := range in {
				if e.round == round {
					e.round = nil
				}
			}
			k.mu.Unlock()
			close(round)
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-k.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// beat heartbeats ls in one statement; a lease found lost has its
// context canceled with the reason.
func (k *keepers[T]) beat(ctx context.Context, ls []*Lease[T]) {
	ctx, cancel := context.WithTimeout(ctx, k.r.opts.LeaseDuration)
	defer cancel()
	beats := &k.r.sh.beats
	if !beats.acquire(ctx) {
		return // another round held the connection throughout: retried at the next interval
	}
	defer beats.release()
	q := beats.get(ctx, k.r.db)
	sent := time.Now()
	res, err := k.r.heartbeatAll(ctx, q, ls, func(l *Lease[T]) bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return len(k.kept[l]) > 0
	})
	if err != nil {
		beats.drop(q) // may be dead: a new one next time
		return        // retried at the next interval; the timers cancel if this goes on
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for l, exp := range res.alive {
		if es := k.kept[l]; len(es) > 0 {
			l.accepted(sent, exp)
			for _, e := range es {
				e.unproven.Reset(time.Until(l.provenUntil()))
			}
		}
	}
	for l, lost := range res.lost {
		for _, e := range slices.Clone(k.kept[l]) {
			k.drop(l, e)
			e.cancel(lost)
		}
	}
	for l, end := range res.ended {
		for _, e := range slices.Clone(k.kept[l]) {
			k.drop(l, e)
			e.cancel(end)
		}
	}
}

// holderEnded ends l's KeepAlives as its holder's Complete, Fail, Release
// or Snooze (reason) returns nil: no refusal (contract.EndedByHolder),
// each context canceled at once with a *LeaseLostError whose Reason is
// that end. A round in flight with l finds it no longer
// kept.
func (k *keepers[T]) holderEnded(l *Lease[T], reason leaserouter.LostReason) {
	k.mu.Lock()
	defer k.mu.Unlock()
	es := slices.Clone(k.kept[l])
	if len(es) == 0 {
		return
	}
	end := &leaserouter.LeaseLostError{JobID: l.JobID, Token: l.Token, Current: l.Token, Reason: reason}
	for _, e := range es {
		k.drop(l, e)
		e.cancel(end)
	}
}

// ownConn is the heartbeat connection (every Run's and the KeepAlive
// goroutine's: beatConn, shared.go), outside the caller's pool, so
// heartbeats never wait for a pool whose connections the caller's
// transactions hold. It is made when first needed and made again after it
// failed. Used by the round holding beatConn's turn only; the zero value
// is ready.
type ownConn struct {
	conn *pgx.Conn // nil until made, or after it failed
}

// get returns the connection, made (again) when missing or closed with
// pool's connection settings; pool itself when a connection cannot be
// made (the round may then wait for it: better than no heartbeat).
func (c *ownConn) get(ctx context.Context, pool *pgxpool.Pool) querier {
	if c.conn != nil && c.conn.IsClosed() {
		c.conn = nil
	}
	if c.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		if err != nil {
			return pool
		}
		c.conn = conn
	}
	return c.conn
}

// drop is called after a statement on q failed: if q was the
// connection, which may be dead, it is closed (get makes a new one).
func (c *ownConn) drop(q querier) {
	if c.conn != nil && q == querier(c.conn) {
		c.close()
	}
}

// close closes the connection, if made.
func (c *ownConn) close() {
	if c.conn != nil {
		_ = c.conn.Close(context.Background())
		c.conn = nil
	}
}

// beatResult is what one heartbeat round found: the leases extended
// (with their new expiry, or the zero Time for a lease proven by its
// completion pending in the caller's open transaction: see pending),
// those lost (with why) and those ended by their holder (with how: no
// refusal); a lease in none could not be looked at (its row locked by
// another transaction).
type beatResult[T any] struct {
	alive map[*Lease[T]]time.Time
	lost  map[*Lease[T]]error
	ended map[*Lease[T]]error
}

// heartbeatAll extends ls on q in one statement. A lease whose row it
// could not lock and whose row is gone or shows another lease is lost
// too. Refusals of leases still (per still) held are counted, reported
// and released, unless the row shows the lease ended by its holder
// (res.ended); the others ended meanwhile by their holder.
func (r *Router[T]) heartbeatAll(ctx context.Context, q querier, ls []*Lease[T], still func(*Lease[T]) bool) (beatResult[T], error) {
	res := beatResult[T]{alive: map[*Lease[T]]time.Time{}, lost: map[*Lease[T]]error{}, ended: map[*Lease[T]]error{}}
	if len(ls) == 0 {
		return res, nil
	}
	byKey := make(map[leaseKey]*Lease[T], len(ls))
	for _, l := range ls {
		byKey[keyOf(l)] = l
	}
	ids, tokens := leaseKeys(ls)
	rows, err := q.Query(ctx, r.st.heartbeatMany, args{"queue": r.opts.Queue, "ids": ids, "tokens": tokens, "lease_us": r.lease})
	if err != nil {
		return res, err
	}
	seen := map[*Lease[T]]bool{}
	var evs []leaserouter.Event
	var refused []*Lease[T]
	for rows.Next() {
		var id string
		var token int64
		var exp, at *time.Time
		if err := rows.Scan(&id, &token, &exp, &at); err != nil {
			rows.Close()
			return res, err
		}
		l := byKey[leaseKey{id, leaserouter.Token(token)}]
		if l == nil {
			continue
		}
		seen[l] = true
		if exp == nil {
			refused = append(refused, l)
			continue
		}
		res.alive[l] = *exp
		if r.ev != nil {
			e := l.event(leaserouter.EventLeaseExtended, *at)
			e.Held = 0
			evs = append(evs, e)
		}
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	r.mu.Lock()
	r.stats.Heartbeats += uint64(len(res.alive))
	r.mu.Unlock()
	r.emit(evs...)
	var unseen, held []*Lease[T]
	for _, l := range ls {
		switch {
		case seen[l]:
		case l.writer() != 0:
			held = append(held, l)
		default:
			unseen = append(unseen, l)
		}
	}
	if len(held) > 0 {
		pending, err := r.pending(ctx, q, held)
		for i, l := range held {
			if err == nil && pending[i] {
				res.alive[l] = time.Time{} // locked by the caller's transaction, the completion written
			} else {
				unseen = append(unseen, l)
			}
		}
	}
	found, ierr := r.inspect(ctx, q, append(refused, unseen...))
	if ierr != nil {
		refused, unseen = nil, nil // why they were refused is unknown: the next round tells
	}
	now := time.Now()
	for _, l := range append(refused, unseen...) {
		row, ok := found[l.JobID]
		if !seen[l] && ok && stillHeld(l, row) {
			continue // locked by another transaction, still this lease's: unknown until the next round
		}
		if !still(l) {
			continue // ended by its holder during the round: not a refusal
		}
		if endedByHolder(l, row, ok) {
			res.ended[l] = l.lost(row) // ended by its holder (CompleteTx committed, say): not a refusal
			continue
		}
		e := l.lost(row)
		res.lost[l] = e
		stale := l.event(leaserouter.EventStaleRejected, now)
		stale.Held, stale.Err = 0, e
		r.emit(stale)
		r.release(l)
	}
	r.mu.Lock()
	r.stats.HeartbeatsRefused += uint64(len(res.lost))
	r.stats.StaleRejections += uint64(len(res.lost))
	r.mu.Unlock()
	return res, nil
}

// endedByHolder reports whether row (found) shows l ended by its own
// holder — completed, failed, released or snoozed with l's token — rather than
// lost: a heartbeat round that raced the holder's own operation.
func endedByHolder[T any](l *Lease[T], row opResult, found bool) bool {
	if !found || row.token == nil || leaserouter.Token(*row.token) != l.Token || row.ended == nil {
		return false
	}
	return contract.EndedByHolder(*row.ended) && !isState(row.was, leaserouter.StateLeased)
}
