package pgrouter

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter"
)

// Close stops the Router. It refuses new work at once (Enqueue,
// EnqueueMany, Acquire, TryAcquire and their batch forms return
// ErrClosed; blocked Acquires return ErrClosed), then waits, until ctx is
// done, for the leases this Router granted to end (holders may still
// Heartbeat, Complete, Fail and Release); an abandoned lease ends at its
// expiry (as proven by its last accepted heartbeat, on this process's
// clock). Leases still held then are revoked, in one round trip: their
// jobs are pending again at once (the attempt counted) and their
// holders' operations are refused with ErrLeaseLost; a Run's leases not
// running (leased ahead of their turn, or finished and not yet
// completed) are not revoked: the stopping Run hands them back (the
// attempt not counted) or completes them. It then waits for
// the Router's background work (unknown outcomes being resolved, a
// stopped Run's last completions and hand-backs), ends it, stops its
// goroutines and returns nil, or ctx.Err() if ctx was done first.
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
	close(r.closing)
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
	r.stopped.Wait()
	if eerr := r.ev.close(ctx); err == nil {
		err = eerr
	}
	close(r.done)
	if err == nil {
		err = rerr
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

// revokeHeld makes the jobs of leases still held pending again at once
// (a Run's not running are left to the Run: see Lease.idle), trying
// until ctx is done; they stay held until that committed (valid until
// their expiry otherwise: a Run still completes them).
func (r *Router[T]) revokeHeld(ctx context.Context) error {
	r.mu.Lock()
	ls := make([]*Lease[T], 0, len(r.held))
	for l := range r.held {
		if !l.idle.Load() { // a Run's lease not running is the Run's to hand back or complete
			ls = append(ls, l)
		}
	}
	r.mu.Unlock()
	if len(ls) == 0 {
		return nil
	}
	ids, tokens := leaseKeys(ls)
	// Revoked as the core revokes: pending again at once with the attempt
	// counted, or dead if that was the last; a lease already expired is
	// left to settling, which settles it as of its expiry.
	rows, err := r.db.Query(ctx, lockLeasesBlocking+`
		UPDATE leaserouter_jobs j SET
			state = CASE WHEN j.attempt >= j.max_attempts THEN 4 ELSE 0 END,
			ready_at = clock_timestamp(), updated_at = clock_timestamp(), ended = 'revoked', owner = '',
			lease_expires_at = NULL, requeued = false,
			last_error = CASE WHEN j.attempt >= j.max_attempts AND j.last_error = '' THEN 'attempts exhausted' ELSE j.last_error END,
			purge_at = CASE WHEN j.attempt >= j.max_attempts THEN clock_timestamp() + $4 * interval '1 microsecond' END
		FROM l
		WHERE j.queue = l.queue AND j.id = l.id AND j.token = l.held AND j.state = 2
			AND j.lease_expires_at > clock_timestamp()
		RETURNING j.id, j.updated_at, j.state`, r.opts.Queue, ids, tokens, r.keep)
	if err != nil {
		return fmt.Errorf("pgrouter: Close: revoke leases: %w", err)
	}
	byID := make(map[string]*Lease[T], len(ls))
	for _, l := range ls {
		byID[l.JobID] = l
	}
	var evs []leaserouter.Event
	dead := 0
	for rows.Next() {
		var id string
		var at time.Time
		var state int16
		if err := rows.Scan(&id, &at, &state); err != nil {
			rows.Close()
			return fmt.Errorf("pgrouter: Close: revoke leases: %w", err)
		}
		e := byID[id].event(leaserouter.EventReleased, at)
		e.Err = errRevoked
		evs = append(evs, e)
		if leaserouter.State(state) == leaserouter.StateFailed {
			e.Kind, e.Held, e.Err = leaserouter.EventDead, 0, errExhausted
			evs = append(evs, e)
			dead++
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgrouter: Close: revoke leases: %w", err)
	}
	r.ev.add(evs...)
	r.mu.Lock()
	r.stats.Dead += uint64(dead)
	for _, l := range ls { // committed: revoked, or ended already
		delete(r.held, l)
	}
	r.checkDrained()
	r.mu.Unlock()
	r.notify(ctx)
	return nil
}

// errRevoked is the Err of EventReleased for a lease Close revoked.
var errRevoked = errors.New("lease revoked by Close")
