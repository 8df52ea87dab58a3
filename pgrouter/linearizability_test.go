package pgrouter_test

// Linearizability of the lease contract on PostgreSQL, checked with
// porcupine (Athalye, https://github.com/anishathalye/porcupine), as the
// core's linearizability_test.go checks the in-process Router.
//
// Goroutines hammer one queue through two Routers on one database (two
// processes, as far as the database can tell) with Enqueue, TryAcquire,
// TryAcquireMany, Heartbeat, Complete, Fail, Release and Get, with real
// leases of 150ms on the database's clock. Workers heartbeat their leases
// and end them; zombies keep every lease they ever saw, never heartbeat,
// and replay them long after they expired or were superseded. Each call
// is recorded with Call and Return from one shared atomic counter, so the
// intervals respect real time.
//
// The history is partitioned by job ID and each partition is checked
// against a sequential model of one job. Expiry is the one transition no
// call makes: the database settles it whenever a call looks after the
// instant. So the model is nondeterministic: before any operation, a
// leased job may have expired (pending again with the expiry counted, or
// dead after its last attempt). Time itself is not modeled (the core's
// tests check expiry instants; here TestExpiryCheckedAtTheLock and
// TestExpiryInDatabaseTime do); everything else is: tokens strictly
// increasing per job, attempts counted, one valid lease per job, stale
// operations refused with the current token and the right reason.
// TryAcquire's ErrNoJob is left out (a statement about every partition).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

const (
	pgLinMaxAttempts = 4
	pgLinOps         = 3000 // operations per run
	pgLinMinCount    = 20   // each outcome the clean run must have exercised at least this often
	pgLinMinExpired  = 5    // refusals of expired leases (fewer: how many leases expire depends on the scheduler)
	pgLinPoolSize    = 16
	pgLinMaxPending  = 4
	pgLinLease       = 150 * time.Millisecond
)

type pgLinKind uint8

const (
	pgEnqueue pgLinKind = iota + 1
	pgAcquire
	pgHeartbeat
	pgComplete
	pgFail
	pgRelease
	pgGet
)

var pgLinKindNames = [...]string{"?", "Enqueue", "Acquire", "Heartbeat", "Complete", "Fail", "Release", "Get"}

func (k pgLinKind) String() string { return pgLinKindNames[k] }

type pgLinInput struct {
	kind  pgLinKind
	job   string
	token leaserouter.Token
}

type pgLinOutput struct {
	ok      bool
	attempt int               // Acquire: the lease's; Get: the job's
	token   leaserouter.Token // refused: LeaseLostError.Current; Get: the job's token
	refused leaserouter.Token // refused: LeaseLostError.Token
	reason  string
	state   leaserouter.State // Get
	err     string            // an error the contract does not allow: the model refuses it
}

type pgLinState struct {
	known   bool
	state   leaserouter.State
	token   leaserouter.Token
	attempt int
	ended   string
}

// pgLinAfter is where a job goes when a lease ends by expiry, Fail (zero
// backoff) or Release: pending, or dead after its last attempt.
func pgLinAfter(attempt int) leaserouter.State {
	if attempt >= pgLinMaxAttempts {
		return leaserouter.StateFailed
	}
	return leaserouter.StatePending
}

// pgLinStep is the sequential contract of one job, from a state in which
// any expiry has already happened.
func pgLinStep(s pgLinState, in pgLinInput, out pgLinOutput) (bool, pgLinState) {
	if out.err != "" {
		return false, s
	}
	switch in.kind {
	case pgEnqueue:
		if s.known {
			return !out.ok, s
		}
		return out.ok, pgLinState{known: true, state: leaserouter.StatePending}
	case pgAcquire:
		ok := out.ok && s.known && s.state == leaserouter.StatePending &&
			in.token > s.token && out.attempt == s.attempt+1 && out.attempt <= pgLinMaxAttempts
		return ok, pgLinState{known: true, state: leaserouter.StateLeased, token: in.token, attempt: out.attempt}
	case pgHeartbeat, pgComplete, pgFail, pgRelease:
		if in.token > s.token {
			return false, s
		}
		if s.state != leaserouter.StateLeased || in.token != s.token {
			reason := s.ended
			if in.token != s.token {
				reason = string(leaserouter.LostSuperseded)
			}
			return !out.ok && out.refused == in.token && out.token == s.token && out.reason == reason, s
		}
		if !out.ok {
			return false, s
		}
		switch in.kind {
		case pgComplete:
			s.state, s.ended = leaserouter.StateSucceeded, "completed"
		case pgFail:
			s.state, s.ended = pgLinAfter(s.attempt), "failed"
		case pgRelease:
			s.state, s.ended = pgLinAfter(s.attempt), "released"
		}
		return true, s
	case pgGet:
		if !s.known {
			return !out.ok, s
		}
		return out.ok && out.state == s.state && out.token == s.token && out.attempt == s.attempt, s
	}
	return false, s
}

var pgLinModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byJob := map[string]int{}
		var parts [][]porcupine.Operation
		for _, op := range history {
			id := op.Input.(pgLinInput).job
			i, ok := byJob[id]
			if !ok {
				i = len(parts)
				byJob[id] = i
				parts = append(parts, nil)
			}
			parts[i] = append(parts[i], op)
		}
		return parts
	},
	Init: func() []any { return []any{pgLinState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(pgLinState), input.(pgLinInput), output.(pgLinOutput)
		starts := []pgLinState{s}
		if s.state == leaserouter.StateLeased {
			// The lease may have expired, and been settled, before this.
			e := s
			e.state, e.ended = pgLinAfter(s.attempt), string(leaserouter.LostExpired)
			starts = append(starts, e)
		}
		var next []any
		for _, st := range starts {
			if ok, n := pgLinStep(st, in, out); ok {
				next = append(next, n)
			}
		}
		return next
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(pgLinInput), output.(pgLinOutput)
		return fmt.Sprintf("%v(%s, %d) -> %+v", in.kind, in.job, in.token, out)
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%+v", state.(pgLinState)) },
}

type pgLinHistory struct {
	clock  atomic.Int64
	budget atomic.Int64
	mu     sync.Mutex
	ops    []porcupine.Operation
	noJob  atomic.Int64
}

func (h *pgLinHistory) add(client int, in pgLinInput, out pgLinOutput, call, ret int64) {
	h.budget.Add(-1)
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

func (h *pgLinHistory) enqueue(r *pgrouter.Router[string], client int, id string) {
	call := h.clock.Add(1)
	err := r.Enqueue(context.Background(), id, id)
	ret := h.clock.Add(1)
	out := pgLinOutput{ok: err == nil}
	if err != nil && !errors.Is(err, leaserouter.ErrDuplicate) {
		out.err = err.Error()
	}
	h.add(client, pgLinInput{kind: pgEnqueue, job: id}, out, call, ret)
}

// acquire records a TryAcquireMany(max) as one acquire per lease, all
// with the call's interval (a batch is atomic).
func (h *pgLinHistory) acquire(r *pgrouter.Router[string], client int, worker string, max int) []*pgrouter.Lease[string] {
	call := h.clock.Add(1)
	ls, err := r.TryAcquireMany(context.Background(), worker, max)
	ret := h.clock.Add(1)
	switch {
	case errors.Is(err, leaserouter.ErrNoJob):
		h.noJob.Add(1)
		return nil
	case err != nil:
		h.add(client, pgLinInput{kind: pgAcquire}, pgLinOutput{err: err.Error()}, call, ret)
		return nil
	}
	for _, l := range ls {
		h.add(client, pgLinInput{kind: pgAcquire, job: l.JobID, token: l.Token}, pgLinOutput{ok: true, attempt: l.Attempt}, call, ret)
	}
	return ls
}

func (h *pgLinHistory) leaseOp(client int, kind pgLinKind, l *pgrouter.Lease[string]) error {
	ctx := context.Background()
	call := h.clock.Add(1)
	var err error
	switch kind {
	case pgHeartbeat:
		err = l.Heartbeat(ctx, nil)
	case pgComplete:
		err = l.Complete(ctx)
	case pgFail:
		err = l.Fail(ctx, errors.New("lin: attempt failed"))
	case pgRelease:
		err = l.Release(ctx)
	}
	ret := h.clock.Add(1)
	out := pgLinOutput{ok: err == nil}
	var lost *leaserouter.LeaseLostError
	switch {
	case err == nil:
	case errors.As(err, &lost):
		out.token, out.refused, out.reason = lost.Current, lost.Token, string(lost.Reason)
	default:
		out.err = err.Error()
	}
	h.add(client, pgLinInput{kind: kind, job: l.JobID, token: l.Token}, out, call, ret)
	return err
}

func (h *pgLinHistory) get(r *pgrouter.Router[string], client int, id string) {
	call := h.clock.Add(1)
	j, ok, err := r.Get(context.Background(), id)
	ret := h.clock.Add(1)
	out := pgLinOutput{ok: ok, state: j.State, token: j.Token, attempt: j.Attempt}
	if err != nil {
		out.err = err.Error()
	}
	h.add(client, pgLinInput{kind: pgGet, job: id}, out, call, ret)
}

type pgLinPool struct {
	mu     sync.Mutex
	leases [pgLinPoolSize]*pgrouter.Lease[string]
	n      int
}

func (p *pgLinPool) add(l *pgrouter.Lease[string]) {
	p.mu.Lock()
	p.leases[p.n%pgLinPoolSize] = l
	p.n++
	p.mu.Unlock()
}

func (p *pgLinPool) pick(rng *rand.Rand) *pgrouter.Lease[string] {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return nil
	}
	return p.leases[rng.IntN(min(p.n, pgLinPoolSize))]
}

type pgLinCounts struct {
	enqueued, duplicates, acquired, heartbeats, completions, ended, expired, superseded, gets int
}

func pgLinCount(ops []porcupine.Operation) pgLinCounts {
	var c pgLinCounts
	for _, op := range ops {
		in, out := op.Input.(pgLinInput), op.Output.(pgLinOutput)
		switch {
		case in.kind == pgEnqueue && out.ok:
			c.enqueued++
		case in.kind == pgEnqueue:
			c.duplicates++
		case in.kind == pgAcquire && out.ok:
			c.acquired++
		case in.kind == pgGet:
			c.gets++
		case !out.ok && out.reason == string(leaserouter.LostExpired):
			c.expired++
		case !out.ok && out.reason == string(leaserouter.LostSuperseded):
			c.superseded++
		case in.kind == pgHeartbeat && out.ok:
			c.heartbeats++
		case in.kind == pgComplete && out.ok:
			c.completions++
		case out.ok:
			c.ended++ // Fail, Release
		}
	}
	return c
}

// pgLinRun runs the workload on a fresh database and returns its
// history. With bug set, the planted bug is on (lease operations skip the
// token check), and a scripted prefix makes a superseded lease's Complete
// succeed once.
func pgLinRun(t *testing.T, seed uint64, bug bool) ([]porcupine.Operation, int64) {
	db := pgtest.New(t)
	opts := pgrouter.Options{LeaseDuration: pgLinLease, MaxAttempts: pgLinMaxAttempts,
		Backoff: func(int) time.Duration { return 0 }, PollInterval: time.Hour}
	routers := []*pgrouter.Router[string]{routerOn[string](t, db, opts), routerOn[string](t, db, opts)}
	h := &pgLinHistory{}
	h.budget.Store(pgLinOps)
	if bug {
		restore := pgrouter.PlantSkipTokenCheck()
		defer restore()
		r := routers[0]
		h.enqueue(r, 0, "bug")
		old := h.acquire(r, 0, "bug-first", 1)
		require.Len(t, old, 1)
		awaitDBTime(t, db, old[0].Expiry())
		cur := h.acquire(r, 0, "bug-second", 1)
		require.Len(t, cur, 1)
		require.Equal(t, "bug", cur[0].JobID)
		require.NoError(t, h.leaseOp(0, pgComplete, old[0]), "the planted bug should accept a superseded lease")
	}

	var (
		nextJob atomic.Int64
		pending atomic.Int64 // enqueued minus acquired, roughly: keeps few jobs live
		pool    pgLinPool
		start   = make(chan struct{})
		wg      sync.WaitGroup
	)
	take := func() bool {
		runtime.Gosched()
		return h.budget.Load() > 0
	}
	client := 0
	goroutine := func(body func(c int, r *pgrouter.Router[string], rng *rand.Rand)) {
		client++
		c := client
		r := routers[c%len(routers)]
		wg.Go(func() {
			<-start
			body(c, r, rand.New(rand.NewPCG(seed, uint64(c))))
		})
	}
	// Enqueuers: a new job while few are pending, else a recent ID again.
	for range 2 {
		goroutine(func(c int, r *pgrouter.Router[string], rng *rand.Rand) {
			for take() {
				n := nextJob.Load()
				if pending.Load() < pgLinMaxPending || n == 0 {
					n = nextJob.Add(1)
					pending.Add(1)
				} else {
					n -= int64(rng.IntN(int(min(n, 8))))
				}
				h.enqueue(r, c, fmt.Sprintf("job-%d", n))
			}
		})
	}
	// Workers: acquire, heartbeat a few times, then complete, fail or
	// release; a refused operation makes them drop the lease.
	for range 3 {
		goroutine(func(c int, r *pgrouter.Router[string], rng *rand.Rand) {
			var cur *pgrouter.Lease[string]
			for take() {
				if cur == nil {
					if ls := h.acquire(r, c, fmt.Sprintf("worker-%d", c), 1); ls != nil {
						cur = ls[0]
						pending.Add(-1)
						pool.add(cur)
					}
					continue
				}
				kind := pgHeartbeat
				switch p := rng.IntN(20); {
				case p < 5:
					kind = pgComplete
				case p < 7:
					kind = pgFail
				case p < 8:
					kind = pgRelease
				}
				if err := h.leaseOp(c, kind, cur); err != nil || kind != pgHeartbeat {
					cur = nil
				}
			}
		})
	}
	// Zombies: take leases in batches, never heartbeat them, and replay
	// their own or the pool's leases whatever became of them.
	for range 2 {
		goroutine(func(c int, r *pgrouter.Router[string], rng *rand.Rand) {
			var kept []*pgrouter.Lease[string]
			for take() {
				if rng.IntN(4) == 0 {
					for _, l := range h.acquire(r, c, fmt.Sprintf("zombie-%d", c), 1+rng.IntN(3)) {
						kept = append(kept, l)
						pending.Add(-1)
						pool.add(l)
					}
					continue
				}
				l := pool.pick(rng)
				if len(kept) > 0 && rng.IntN(2) == 0 {
					l = kept[rng.IntN(len(kept))]
				}
				if l != nil {
					_ = h.leaseOp(c, pgLinKind(int(pgHeartbeat)+rng.IntN(4)), l) // refusals are the point
				}
			}
		})
	}
	// Observer: Get of a recently leased job.
	goroutine(func(c int, r *pgrouter.Router[string], rng *rand.Rand) {
		for take() {
			if l := pool.pick(rng); l != nil {
				h.get(r, c, l.JobID)
			}
		}
	})
	close(start)
	wg.Wait()
	return h.ops, h.noJob.Load()
}

func pgLinCheck(t *testing.T, ops []porcupine.Operation, want porcupine.CheckResult) porcupine.CheckResult {
	start := time.Now()
	model := pgLinModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
	t.Logf("checked %d operations in %v: %v", len(ops), time.Since(start), res)
	if res != want {
		if f, err := os.CreateTemp("", "pgrouter-linearizability-*.html"); err == nil {
			if err := porcupine.Visualize(model, info, f); err == nil {
				t.Logf("visualization: %s", f.Name())
			}
			f.Close()
		}
	}
	return res
}

// TestLinearizable: a concurrent history of the public API on two
// Routers sharing one database, with zombies replaying expired and
// superseded leases and real leases expiring on the database's clock, is
// linearizable against the sequential contract of a job, and the run
// exercised every outcome that matters.
func TestLinearizable(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ops, noJob := pgLinRun(t, seed, false)
	c := pgLinCount(ops)
	t.Logf("history: %d operations (%d TryAcquire ErrNoJob left out); %+v", len(ops), noJob, c)
	require.Equal(t, porcupine.Ok, pgLinCheck(t, ops, porcupine.Ok), "history is not linearizable (seed %d)", seed)
	require.GreaterOrEqual(t, c.expired, pgLinMinExpired, "operations refused because the lease expired")
	require.GreaterOrEqual(t, c.superseded, pgLinMinCount, "operations refused because the lease was superseded")
	require.GreaterOrEqual(t, c.completions, pgLinMinCount, "completions accepted")
	require.GreaterOrEqual(t, c.heartbeats, pgLinMinCount, "heartbeats accepted")
}

// TestLinearizablePlantedBug: the same workload with lease operations
// that skip the token check; the checker must find the history illegal.
func TestLinearizablePlantedBug(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ops, _ := pgLinRun(t, seed, true)
	require.Equal(t, porcupine.Illegal, pgLinCheck(t, ops, porcupine.Illegal), "the checker missed the planted bug (seed %d)", seed)
}
