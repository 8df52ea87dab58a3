package routertest_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/internal/routertest"
)

// fake is a tiny in-memory backend, for proving that the suite catches a
// broken one: honest unless bug names a planted bug. It keeps what the
// rows the proof runs and the linearizability workload use (no events,
// no capacity; Fail retries at once unless Config.Backoff says
// otherwise), settling expiries on every call by a scan. A job waiting
// for its ready time is pending with a later ready time, shown as
// scheduled by Get and Stats.
type fake struct {
	bug     string // "": honest; bugStaleToken; bugShortHeartbeat
	lease   time.Duration
	maxAt   int
	backoff func(attempt int) time.Duration // nil: none
	logger  *slog.Logger                    // nil: none

	mu     sync.Mutex
	jobs   map[string]*fakeJob
	seq    int
	token  leaserouter.Token
	closed bool
	// closing: Close has begun; new work, Cancel and the periodic calls
	// are refused from then on, as on every backend, but a tick's
	// enqueue (enqueueTick) is not: that the scheduler stops is the
	// fake's own doing, checked by rows.
	closing bool
	st      leaserouter.Stats

	periodics map[string]chan struct{} // each periodic job's stop, closed by RemovePeriodic or Close
	scheduler sync.WaitGroup           // the periodic jobs' goroutines
}

const (
	// bugStaleToken: a lease operation on a leased job is accepted
	// whatever its token (the one invariant without its token check).
	bugStaleToken = "stale token accepted"
	// bugShortHeartbeat: a heartbeat sets the expiry to now plus half the
	// lease, which shortens a lease heartbeated early.
	bugShortHeartbeat = "heartbeat shortens the lease"
	// bugHalfLease: every lease (granted or heartbeated) lasts half of
	// LeaseDuration, and Expiry says so: a job is leased again while its
	// holder, by the contract, still holds a valid lease.
	bugHalfLease = "leases last half their duration"
	// bugExpireKeepsLease: ExpireNow reports a leased job's expiry but
	// leaves the lease valid (its token still accepted).
	bugExpireKeepsLease = "ExpireNow leaves the lease valid"
	// bugHolderEndUntold: a KeepAlive is not told that its holder ended
	// the lease: its context lives on, and its next heartbeat is refused
	// and counted as a stale rejection.
	bugHolderEndUntold = "KeepAlive not told of the holder's end"
	// bugPanickedTickEnqueued: a tick whose Payload panics is enqueued
	// with the zero payload instead of skipped.
	bugPanickedTickEnqueued = "a panicking Payload's tick enqueued"
	// bugCloseLeavesScheduler: Close stops the periodic jobs but does not
	// wait for a Payload call in progress.
	bugCloseLeavesScheduler = "Close does not wait for the scheduler"
	// bugRemoveStopsAll: RemovePeriodic stops every periodic job, not
	// only the one it names.
	bugRemoveStopsAll = "RemovePeriodic stops every periodic job"
	// bugBareErrors: the bad input of AcquireMany and Run gets the bare
	// ErrInvalidOptions, the right kind of error but not the message every
	// other backend gives.
	bugBareErrors = "bad input gets the bare error"
	// bugSnoozeCounts: a snoozed lease counts as an attempt, so a job
	// snoozed on its last attempt is dead.
	bugSnoozeCounts = "a snooze counts the attempt"
	// bugStoppedTickEnqueued: a tick whose Payload ran when Close began
	// (or RemovePeriodic) is enqueued all the same.
	bugStoppedTickEnqueued = "a tick whose Payload ran when Close began enqueued"
	// bugCanceledScheduledWakes: a job canceled while scheduled is made
	// pending (ready) when its run-at comes, as if it had not been
	// canceled.
	bugCanceledScheduledWakes = "a canceled scheduled job made ready at its run-at"
	// bugSnoozeDropsMetadata: a snoozed job loses its metadata.
	bugSnoozeDropsMetadata = "a snooze drops the job's metadata"
	// closeOutOfTime (no bug: what pgrouter's Close does when its
	// revocation outlasts its grace): Close revokes nothing, and returns
	// an error wrapping its ctx's that says so; the leases end at their
	// expiry.
	closeOutOfTime = "Close out of time, revoking nothing, says so"
	// bugCloseClaimsRevoked: Close revokes nothing, yet returns as if it
	// had revoked every lease it held (its ctx's error alone).
	bugCloseClaimsRevoked = "Close revokes nothing, yet returns as if it had"
)

// leaseFor is how long a lease granted or heartbeated now lasts.
func (f *fake) leaseFor() time.Duration {
	if f.bug == bugHalfLease {
		return f.lease / 2
	}
	return f.lease
}

type fakeJob struct {
	leaserouter.Job[string]
	seq   int
	ready time.Time
	ended leaserouter.LostReason
	wake  time.Time // bugCanceledScheduledWakes: the canceled job's run-at, when it is made pending
}

func newFake(bug string, cfg routertest.Config, lease time.Duration) *fake {
	return &fake{bug: bug, logger: cfg.Logger, lease: cmp.Or(cfg.LeaseDuration, lease), maxAt: cmp.Or(cfg.MaxAttempts, 5), backoff: cfg.Backoff,
		jobs: map[string]*fakeJob{}, periodics: map[string]chan struct{}{}, token: max(leaserouter.Token(time.Now().UnixNano()), cfg.TokenFloor)}
}

// backoffOf is Config.Backoff(attempt), never negative; 0 with no
// Backoff or when it panics (the fake counts and reports no panic).
func (f *fake) backoffOf(attempt int) (d time.Duration) {
	if f.backoff == nil {
		return 0
	}
	defer func() {
		if recover() != nil {
			d = 0
		}
	}()
	return max(f.backoff(attempt), 0)
}

// scheduled reports whether j is pending and waiting for its ready time
// (a delay, a backoff, a snooze): scheduled, as the backends show it.
func (j *fakeJob) scheduled(now time.Time) bool {
	return j.State == leaserouter.StatePending && j.ready.After(now)
}

// settle expires every lease whose expiry has come (and, with
// bugCanceledScheduledWakes, makes a canceled job pending at its run-at);
// f.mu is held.
func (f *fake) settle(now time.Time) {
	for _, j := range f.jobs {
		if j.State == leaserouter.StateCanceled && !j.wake.IsZero() && !now.Before(j.wake) {
			j.State, j.wake = leaserouter.StatePending, time.Time{}
		}
		if j.State == leaserouter.StateLeased && !now.Before(j.LeaseExpiry) {
			f.st.Expirations++
			j.LastError = "lease expired"
			f.end(j, leaserouter.LostExpired, j.LeaseExpiry, false)
		}
	}
}

// end ends j's lease: pending at once, or dead with its attempts used up.
// dead: a Permanent failure.
func (f *fake) end(j *fakeJob, why leaserouter.LostReason, at time.Time, dead bool) {
	j.State, j.ended, j.Owner, j.LeaseExpiry, j.ready = leaserouter.StatePending, why, "", time.Time{}, at
	if dead || j.Attempt >= j.MaxAttempts && why != leaserouter.LostRevoked {
		j.State = leaserouter.StateDead
		f.st.Dead++
	}
}

func (f *fake) Enqueue(_ context.Context, id, payload string, opts ...leaserouter.EnqueueOption) error {
	return f.enqueueOne(id, payload, opts, false)
}

// enqueueTick is the periodic scheduler's Enqueue: after Close has begun
// too.
func (f *fake) enqueueTick(id, payload string, opts []leaserouter.EnqueueOption) error {
	return f.enqueueOne(id, payload, opts, true)
}

func (f *fake) enqueueOne(id, payload string, opts []leaserouter.EnqueueOption, tick bool) error {
	dups, err := f.enqueueMany([]leaserouter.JobSpec[string]{{ID: id, Payload: payload, Options: opts}}, false, tick)
	if len(dups) > 0 {
		return leaserouter.ErrDuplicate
	}
	return err
}

func (f *fake) EnqueueMany(_ context.Context, jobs []leaserouter.JobSpec[string]) ([]int, error) {
	return f.enqueueMany(jobs, true, false)
}

// enqueueMany is EnqueueMany; batch: an invalid job's error names its
// index; tick: a periodic tick's, enqueued while Close begins.
func (f *fake) enqueueMany(jobs []leaserouter.JobSpec[string], batch, tick bool) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.closing && !tick {
		return nil, leaserouter.ErrClosed
	}
	now := time.Now()
	f.settle(now)
	settings := make([]contract.EnqueueSettings, len(jobs))
	for i, s := range jobs {
		err := contract.ReadEnqueueOptions(leaserouter.ErrInvalidJob, &settings[i], s.ID, s.Options)
		if err == nil {
			err = contract.CheckQueue(leaserouter.ErrInvalidJob, &settings[i], s.ID, leaserouter.DefaultQueue)
		}
		if err != nil && batch {
			return nil, fmt.Errorf("%w (batch index %d)", err, i)
		} else if err != nil {
			return nil, err
		}
	}
	var dups []int
	for i, s := range jobs {
		if f.jobs[s.ID] != nil {
			dups = append(dups, i)
			f.st.Duplicates++
			continue
		}
		f.seq++
		f.st.Enqueued++
		e := settings[i]
		f.jobs[s.ID] = &fakeJob{Job: leaserouter.Job[string]{ID: s.ID, Payload: s.Payload, State: leaserouter.StatePending,
			Priority: e.Priority, MaxAttempts: cmp.Or(e.MaxAttempts, f.maxAt), CreatedAt: now, UpdatedAt: now,
			Metadata: maps.Clone(e.Metadata)},
			seq: f.seq, ready: now.Add(e.Delay)}
	}
	return dups, nil
}

func (f *fake) TryAcquireMany(_ context.Context, worker string, n int) ([]routertest.Lease, error) {
	return f.tryAcquireMany(worker, n, "TryAcquireMany")
}

// tryAcquireMany is TryAcquireMany, named call in its errors.
func (f *fake) tryAcquireMany(worker string, n int, call string) ([]routertest.Lease, error) {
	if err := contract.ValidateWorkerID(leaserouter.ErrInvalidOptions, worker); err != nil {
		return nil, err
	}
	if n < 1 && f.bug == bugBareErrors {
		return nil, leaserouter.ErrInvalidOptions
	}
	if err := contract.ClaimMax(leaserouter.ErrInvalidOptions, call, n); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.closing {
		return nil, leaserouter.ErrClosed
	}
	now := time.Now()
	f.settle(now)
	var ready []*fakeJob
	for _, j := range f.jobs {
		if j.State == leaserouter.StatePending && !j.ready.After(now) {
			ready = append(ready, j)
		}
	}
	if len(ready) == 0 {
		return nil, leaserouter.ErrNoJob
	}
	slices.SortFunc(ready, func(a, b *fakeJob) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.ready.Compare(b.ready), cmp.Compare(a.seq, b.seq))
	})
	var out []routertest.Lease
	for _, j := range ready[:min(n, len(ready))] {
		f.token++
		f.st.LeasesGranted++
		j.State, j.Token, j.Owner, j.LeaseExpiry = leaserouter.StateLeased, f.token, worker, now.Add(f.leaseFor())
		j.Attempt++
		out = append(out, &fakeLease{f: f, id: j.ID, payload: j.Payload, attempt: j.Attempt, token: j.Token,
			worker: worker, progress: j.Progress, expiry: j.LeaseExpiry, meta: j.Metadata})
	}
	return out, nil
}

func (f *fake) TryAcquire(_ context.Context, worker string) (routertest.Lease, error) {
	ls, err := f.tryAcquireMany(worker, 1, "TryAcquire")
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

func (f *fake) AcquireMany(ctx context.Context, worker string, n int) ([]routertest.Lease, error) {
	return f.acquireMany(ctx, worker, n, "AcquireMany")
}

// acquireMany is AcquireMany, named call in its errors.
func (f *fake) acquireMany(ctx context.Context, worker string, n int, call string) ([]routertest.Lease, error) {
	for {
		ls, err := f.tryAcquireMany(worker, n, call)
		if !errors.Is(err, leaserouter.ErrNoJob) {
			return ls, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (f *fake) Acquire(ctx context.Context, worker string) (routertest.Lease, error) {
	ls, err := f.acquireMany(ctx, worker, 1, "Acquire")
	if err != nil {
		return nil, err
	}
	return ls[0], nil
}

func (f *fake) Get(_ context.Context, id string) (leaserouter.Job[string], bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle(time.Now())
	j := f.jobs[id]
	if j == nil {
		return leaserouter.Job[string]{}, false, nil
	}
	c := j.Job
	c.Progress = slices.Clone(j.Progress)
	c.Metadata = maps.Clone(j.Metadata)
	if j.scheduled(time.Now()) {
		c.State = leaserouter.StateScheduled
	}
	return c, true, nil
}

func (f *fake) Cancel(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.closing {
		return leaserouter.ErrClosed
	}
	if err := leaserouter.ValidateID(id); err != nil {
		return fmt.Errorf("%w: %w", err, leaserouter.ErrNotFound)
	}
	j := f.jobs[id]
	if j == nil {
		return leaserouter.ErrNotFound
	}
	if !j.State.Terminal() {
		if f.bug == bugCanceledScheduledWakes && j.scheduled(time.Now()) {
			j.wake = j.ready
		}
		j.State, j.ended, j.Owner = leaserouter.StateCanceled, leaserouter.LostCanceled, ""
	}
	return nil
}

func (f *fake) Stats(context.Context) (leaserouter.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settle(time.Now())
	s := f.st
	now := time.Now()
	for _, j := range f.jobs {
		switch j.State {
		case leaserouter.StatePending:
			if j.scheduled(now) {
				s.Scheduled++
				continue
			}
			s.Pending++
		case leaserouter.StateLeased:
			s.Leased++
		case leaserouter.StateSucceeded:
			s.Succeeded++
		case leaserouter.StateDead:
			s.DeadJobs++
		case leaserouter.StateCanceled:
			s.Canceled++
		}
	}
	//lint:ignore SA1019 the deprecated name is filled for one release, as both backends do
	s.Failed = s.DeadJobs
	return s, nil
}

// Run: Workers loops of TryAcquire, the handler under a KeepAlive, then
// Complete or Fail.
func (f *fake) Run(ctx context.Context, opts leaserouter.WorkerOptions, h routertest.Handler) error {
	if f.bug == bugBareErrors && (h == nil || opts.Workers < 0 || opts.HeartbeatInterval < 0 || opts.HeartbeatInterval >= f.lease) {
		return leaserouter.ErrInvalidOptions
	}
	o := opts // checked only: the fake runs at least one loop, not GOMAXPROCS
	if err := contract.WorkerDefaults(leaserouter.ErrInvalidOptions, h == nil, f.lease,
		&o.Workers, &o.WorkerID, &o.HeartbeatInterval, &o.Batch, o.Timeout); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for i := range max(opts.Workers, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := f.TryAcquire(ctx, fmt.Sprintf("%s-%d", opts.WorkerID, i))
				if err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(time.Millisecond):
					}
					continue
				}
				hctx, stop := f.KeepAlive(ctx, l, 0)
				err = h(hctx, l)
				stop()
				if err == nil {
					_ = l.Complete(ctx)
				} else {
					_ = l.Fail(ctx, err)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

func (f *fake) KeepAlive(ctx context.Context, l routertest.Lease, interval time.Duration) (context.Context, context.CancelFunc) {
	kctx, cancel := context.WithCancelCause(ctx)
	if interval <= 0 {
		interval = f.lease / 3
	}
	if fl, ok := l.(*fakeLease); ok {
		f.mu.Lock()
		fl.keepers = append(fl.keepers, cancel)
		f.mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-t.C:
				if err := l.Heartbeat(context.Background(), nil); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	return kctx, func() { cancel(context.Canceled); <-done }
}

// Close stops the periodic jobs and waits for them, then revokes at once
// whatever is held.
func (f *fake) Close(ctx context.Context) error {
	f.mu.Lock()
	f.closing = true
	for name, stop := range f.periodics {
		close(stop)
		delete(f.periodics, name)
	}
	f.mu.Unlock()
	if f.bug != bugCloseLeavesScheduler {
		f.scheduler.Wait()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	now := time.Now()
	f.settle(now)
	switch f.bug {
	case closeOutOfTime:
		return fmt.Errorf("%w; fake: Close: revoke leases: out of time", ctx.Err())
	case bugCloseClaimsRevoked:
		return ctx.Err()
	}
	for _, j := range f.jobs {
		if j.State == leaserouter.StateLeased {
			f.end(j, leaserouter.LostRevoked, now, false)
		}
	}
	return nil
}

// ExpireNow expires id's lease now (routertest.Expirer): false if it is
// not leased.
func (f *fake) ExpireNow(_ context.Context, id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	now := time.Now()
	f.settle(now)
	j := f.jobs[id]
	if j == nil || j.State != leaserouter.StateLeased {
		return false
	}
	if f.bug == bugExpireKeepsLease {
		return true
	}
	f.st.Expirations++
	j.LastError = "lease expired"
	f.end(j, leaserouter.LostExpired, now, false)
	return true
}

type fakeLease struct {
	f        *fake
	id       string
	payload  string
	attempt  int
	token    leaserouter.Token
	worker   string
	progress []byte
	meta     map[string]string // the job's, shared
	mu       sync.Mutex
	expiry   time.Time
	keepers  []context.CancelCauseFunc // its KeepAlives' contexts; guarded by f.mu
}

// holderEnded ends l's KeepAlives as its holder ended it for reason: the
// context canceled at once with that end, no refusal. f.mu is held.
func (l *fakeLease) holderEnded(reason leaserouter.LostReason) {
	if l.f.bug == bugHolderEndUntold {
		return
	}
	end := &leaserouter.LeaseLostError{JobID: l.id, Token: l.token, Current: l.token, Reason: reason}
	for _, cancel := range l.keepers {
		cancel(end)
	}
	l.keepers = nil
}

func (l *fakeLease) JobID() string            { return l.id }
func (l *fakeLease) Payload() string          { return l.payload }
func (l *fakeLease) Attempt() int             { return l.attempt }
func (l *fakeLease) Token() leaserouter.Token { return l.token }
func (l *fakeLease) WorkerID() string         { return l.worker }
func (l *fakeLease) Progress() []byte         { return l.progress }
func (l *fakeLease) Metadata() map[string]string {
	return l.meta
}
func (l *fakeLease) Expiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// op runs do on l's job if l is valid (f.mu held), or refuses it.
func (l *fakeLease) op(do func(j *fakeJob, now time.Time)) error {
	f := l.f
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	f.settle(now)
	j := f.jobs[l.id]
	valid := j != nil && j.State == leaserouter.StateLeased && j.Token == l.token
	if f.bug == bugStaleToken {
		valid = j != nil && j.State == leaserouter.StateLeased
	}
	if !valid {
		f.st.StaleRejections++
		lost := &leaserouter.LeaseLostError{JobID: l.id, Token: l.token, Reason: leaserouter.LostSuperseded}
		if j != nil {
			lost.Current = j.Token
			if j.Token == l.token {
				lost.Reason = j.ended
			}
		}
		return lost
	}
	do(j, now)
	j.UpdatedAt = now
	return nil
}

func (l *fakeLease) Heartbeat(_ context.Context, progress []byte) error {
	return l.op(func(j *fakeJob, now time.Time) {
		exp := now.Add(l.f.leaseFor())
		if l.f.bug == bugShortHeartbeat {
			exp = now.Add(l.f.lease / 2)
		}
		j.LeaseExpiry = exp
		if progress != nil {
			j.Progress = slices.Clone(progress)
		}
		l.f.st.Heartbeats++
		l.mu.Lock()
		l.expiry = exp
		l.mu.Unlock()
	})
}

func (l *fakeLease) Complete(context.Context) error {
	return l.op(func(j *fakeJob, now time.Time) {
		j.State, j.ended, j.Owner, j.LeaseExpiry = leaserouter.StateSucceeded, leaserouter.LostCompleted, "", time.Time{}
		l.holderEnded(leaserouter.LostCompleted)
	})
}

func (l *fakeLease) Fail(_ context.Context, cause error) error {
	return l.op(func(j *fakeJob, now time.Time) {
		j.LastError = "unknown error"
		if cause != nil {
			j.LastError = cause.Error()
		}
		at := now.Add(l.f.backoffOf(j.Attempt))
		l.f.end(j, leaserouter.LostFailed, at, leaserouter.IsPermanent(cause))
		l.holderEnded(leaserouter.LostFailed)
	})
}

func (l *fakeLease) Release(context.Context) error {
	return l.op(func(j *fakeJob, now time.Time) {
		l.f.end(j, leaserouter.LostReleased, now, false)
		l.holderEnded(leaserouter.LostReleased)
	})
}

// Snooze: pending again after d (the fake has no scheduled state), the
// attempt not counted.
func (l *fakeLease) Snooze(_ context.Context, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: Snooze(%v)", leaserouter.ErrInvalidOptions, d)
	}
	return l.op(func(j *fakeJob, now time.Time) {
		j.State, j.ended, j.Owner, j.LeaseExpiry, j.ready = leaserouter.StatePending, leaserouter.LostSnoozed, "", time.Time{}, now.Add(d)
		if l.f.bug != bugSnoozeCounts {
			j.Attempt--
		} else if j.Attempt >= j.MaxAttempts {
			j.State = leaserouter.StateDead
		}
		if l.f.bug == bugSnoozeDropsMetadata {
			j.Metadata = nil
		}
		l.f.st.Snoozed++
		l.holderEnded(leaserouter.LostSnoozed)
	})
}

// fakeHarness runs the suite on fakes with bug planted, in synctest.
type fakeHarness struct{ bug string }

func (h fakeHarness) Name() string                            { return "a fake backend with bug " + fmt.Sprintf("%q", h.bug) }
func (fakeHarness) Caps() routertest.Caps                     { return routertest.Caps{ForcedExpiry: true} }
func (fakeHarness) Scope(t *testing.T, f func(t *testing.T))  { synctest.Test(t, f) }
func (fakeHarness) Lease() time.Duration                      { return 10 * time.Second }
func (fakeHarness) Workload() routertest.LinConfig            { return routertest.LinConfig{} }
func (fakeHarness) Advance(d time.Duration)                   { time.Sleep(d) }
func (fakeHarness) New(routertest.T, routertest.Config) error { return nil }

// KeptIntervals: the fake keeps no record (the interval row fails on it).
func (fakeHarness) KeptIntervals(routertest.Lease) []time.Duration { return nil }

// StallHeartbeats: the fake cannot stall one (the row waits in vain and
// fails).
func (fakeHarness) StallHeartbeats(routertest.T, routertest.Backend) (<-chan struct{}, func()) {
	return make(chan struct{}), func() {}
}
func (h fakeHarness) Open(t routertest.T, cfg routertest.Config, n int) []routertest.Backend {
	f := newFake(h.bug, cfg, h.Lease())
	t.Cleanup(func() { _ = f.Close(context.Background()) })
	bs := make([]routertest.Backend, n)
	for i := range bs {
		bs[i] = f
	}
	return bs
}
