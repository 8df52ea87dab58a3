package leaserouter_test

// FuzzRouter decodes its input into a sequence of operations, runs them
// against a Router inside a testing/synctest bubble and against a small
// reference model written from the contract (fuzzModel), and compares every
// result and, after every step, every job (Get), Stats, Audit, each lease's
// Expiry and the event stream. The model is deliberately naive — it scans
// all jobs for the next deadline instead of keeping heaps — so it shares no
// machinery with the core. Run it longer with
//
//	go test -run XXX -fuzz FuzzRouter -fuzztime 10m .

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// The Router under fuzzing. Capacity is below the number of IDs so that
// ErrFull is reachable; the Backoff is deterministic (the default has jitter)
// and is 0 at attempt 3, so "Fail retries at once" is reachable too.
const (
	fuzzLD        = 10 * time.Second
	fuzzRetention = 30 * time.Second
	fuzzMaxAtt    = 3
	fuzzCapacity  = 4
	fuzzOpLen     = 4  // bytes per op: kind, a, b, c
	fuzzMaxOps    = 64 // longer inputs are cut: keeps executions, and minimizing new inputs, fast
)

func fuzzBackoff(attempt int) time.Duration { return time.Duration(attempt%3) * time.Second }

var (
	fuzzIDs     = []string{"a", "b", "c", "d", "e"}
	fuzzWorkers = []string{"w0", "w1", "w2"}
	// fuzzDelays feed WithDelay and WithRunAt(now+d); -1ns is an invalid
	// delay and a run-at in the past.
	fuzzDelays = []time.Duration{0, time.Nanosecond, time.Second, 3 * time.Second, fuzzLD - time.Nanosecond, fuzzLD, 2 * fuzzLD, -time.Nanosecond}
	fuzzSleeps = []time.Duration{time.Nanosecond, time.Second, 2 * time.Second, 5 * time.Second, fuzzLD - time.Nanosecond, fuzzLD, fuzzRetention, 2 * time.Minute}
	// fuzzMaxAtts: 0 means no WithMaxAttempts (Options.MaxAttempts applies),
	// -1 means WithMaxAttempts(0), which is invalid.
	fuzzMaxAtts = []int{0, 0, 0, 1, 2, 4, 5, -1}
)

type fuzzKind uint8

const (
	fuzzEnqueue fuzzKind = iota
	fuzzAcquire
	fuzzHeartbeat
	fuzzComplete
	fuzzFail
	fuzzRelease
	fuzzCancel
	fuzzGet
	fuzzSleep
	fuzzDeadline // sleep to a deadline of the model (expiry, run-at, purge), or 1ns before it
	fuzzClose
)

var fuzzKindNames = []string{"enqueue", "acquire", "heartbeat", "complete", "fail", "release", "cancel", "get", "sleep", "deadline", "close"}

func (k fuzzKind) String() string { return fuzzKindNames[k] }

// fuzzKinds maps an op's first byte (mod 16) to its kind. Enqueue, acquire
// and the clock get more slots so random inputs build up state; Close gets
// one, since every op after it only probes the frozen router.
var fuzzKinds = [16]fuzzKind{
	fuzzEnqueue, fuzzEnqueue, fuzzEnqueue, fuzzAcquire, fuzzAcquire, fuzzHeartbeat, fuzzComplete, fuzzFail,
	fuzzRelease, fuzzCancel, fuzzGet, fuzzSleep, fuzzSleep, fuzzDeadline, fuzzDeadline, fuzzClose,
}

type fuzzOp struct {
	kind    fuzzKind
	a, b, c byte
}

func fuzzDecode(data []byte) []fuzzOp {
	var ops []fuzzOp
	for i := 0; i+fuzzOpLen <= len(data) && len(ops) < fuzzMaxOps; i += fuzzOpLen {
		ops = append(ops, fuzzOp{fuzzKinds[data[i]%16], data[i+1], data[i+2], data[i+3]})
	}
	return ops
}

// fuzzID: byte%16 == 15 is the empty (invalid) ID, others pick from fuzzIDs.
func fuzzID(b byte) string {
	if b%16 == 15 {
		return ""
	}
	return fuzzIDs[int(b%16)%len(fuzzIDs)]
}

func fuzzProgress(b byte) []byte {
	switch b % 4 {
	case 0:
		return nil // keeps the checkpoint
	case 1:
		return []byte{} // clears it
	}
	return []byte{'p', b}
}

// fuzzFailure is a cause to pass to Fail, with the LastError it leaves and
// whether it is permanent.
type fuzzFailure struct {
	cause     error
	msg       string
	permanent bool
}

func fuzzCause(b byte) fuzzFailure {
	switch b % 4 {
	case 0:
		return fuzzFailure{nil, "unknown error", false}
	case 1:
		return fuzzFailure{errors.New("boom"), "boom", false}
	case 2:
		return fuzzFailure{leaserouter.Permanent(errors.New("bad input")), "bad input", true}
	}
	return fuzzFailure{fmt.Errorf("wrapped: %w", leaserouter.Permanent(errors.New("bad"))), "wrapped: bad", true}
}

// Enqueue timings (op.b%6), with d = fuzzDelays[op.b/6%8].
const (
	fuzzTimingNone           = iota
	fuzzTimingDelay          // WithDelay(d)
	fuzzTimingRunAt          // WithRunAt(now+d)
	fuzzTimingZeroRunAt      // WithRunAt(time.Time{})
	fuzzTimingRunAtThenDelay // WithRunAt(now+2*LD), WithDelay(d): the delay wins
	fuzzTimingDelayThenRunAt // WithDelay(2*LD), WithRunAt(now+d): the run-at wins
	fuzzTimings
)

// ---- the reference model ----

type fuzzJob struct {
	id       string
	payload  int
	state    leaserouter.State
	prio     int
	attempt  int
	maxAtt   int
	rank     int // token rank of the latest lease (1 = the first lease the router granted); 0 if never leased
	owner    string
	seq      int
	created  time.Duration // times are since the bubble's start
	updated  time.Duration // the instant of the last transition or heartbeat
	readyAt  time.Duration
	runAt    time.Duration
	expiry   time.Duration
	purgeAt  time.Duration
	progress []byte
	lastErr  string
	ended    string     // why the latest lease ended: the Reason its holder is refused with
	lease    *fuzzLease // the current lease while leased
}

type fuzzLease struct {
	l      *leaserouter.Lease[int]
	job    *fuzzJob // the job instance it was granted on (a purged one stays here)
	rank   int
	expiry time.Duration // the last expiry it had while valid
}

type fuzzModel struct {
	now    time.Duration
	jobs   map[string]*fuzzJob
	leases []*fuzzLease
	tokens []leaserouter.Token // the router's token of rank i+1
	ranks  map[leaserouter.Token]int
	seq    int
	closed bool
	stats  leaserouter.Stats // totals; per-state counts are filled by wantStats
}

// deadline is the job's next timed transition: its lease's expiry, its
// run-at, or the end of its retention.
func (j *fuzzJob) deadline() (time.Duration, bool) {
	switch j.state {
	case leaserouter.StatePending:
		return 0, false
	case leaserouter.StateLeased:
		return j.expiry, true
	case leaserouter.StateScheduled:
		return j.runAt, true
	}
	return j.purgeAt, true
}

// settle applies every transition due at or before now, earliest first, as
// every call of the Router does first. A closed router is frozen.
func (m *fuzzModel) settle() {
	for !m.closed {
		var next *fuzzJob
		var at time.Duration
		for _, j := range m.jobs {
			d, ok := j.deadline()
			if ok && d <= m.now && (next == nil || d < at || d == at && j.seq < next.seq) {
				next, at = j, d
			}
		}
		if next == nil {
			return
		}
		switch next.state {
		case leaserouter.StateLeased:
			m.stats.Expirations++
			next.lastErr = "lease expired"
			m.endLease(next, "expired")
			m.requeue(next, at)
		case leaserouter.StateScheduled:
			m.ready(next, at)
		default:
			delete(m.jobs, next.id)
			m.stats.Purged++
		}
	}
}

func (m *fuzzModel) deadlines() []time.Duration {
	var ds []time.Duration
	for _, j := range m.jobs {
		if d, ok := j.deadline(); ok && d > m.now {
			ds = append(ds, d)
		}
	}
	slices.Sort(ds)
	return slices.Compact(ds)
}

func (m *fuzzModel) endLease(j *fuzzJob, why string) {
	j.ended, j.owner, j.lease = why, "", nil
}

func (m *fuzzModel) ready(j *fuzzJob, at time.Duration) {
	j.state, j.readyAt, j.updated = leaserouter.StatePending, at, max(j.updated, at)
}

// requeue: after expiry or Release, pending at once or dead if the attempts
// are used up.
func (m *fuzzModel) requeue(j *fuzzJob, at time.Duration) {
	if j.attempt >= j.maxAtt {
		m.kill(j, at)
		return
	}
	m.ready(j, at)
}

func (m *fuzzModel) kill(j *fuzzJob, at time.Duration) {
	if j.lastErr == "" {
		j.lastErr = "attempts exhausted"
	}
	m.stats.Dead++
	m.finish(j, leaserouter.StateDead, at)
}

func (m *fuzzModel) finish(j *fuzzJob, s leaserouter.State, at time.Duration) {
	j.state, j.updated, j.purgeAt = s, max(j.updated, at), at+fuzzRetention
}

func (m *fuzzModel) unfinished() int {
	n := 0
	for _, j := range m.jobs {
		if !j.state.Terminal() {
			n++
		}
	}
	return n
}

func (m *fuzzModel) enqueue(id string, payload, prio int, at time.Duration, maxAtt int, badDelay bool) error {
	switch {
	case id == "" || maxAtt < 0 || badDelay:
		return leaserouter.ErrInvalidJob
	case m.closed:
		return leaserouter.ErrClosed
	case m.jobs[id] != nil:
		m.stats.Duplicates++
		return leaserouter.ErrDuplicate
	case m.unfinished() >= fuzzCapacity:
		return leaserouter.ErrFull
	}
	if maxAtt == 0 {
		maxAtt = fuzzMaxAtt
	}
	m.seq++
	j := &fuzzJob{id: id, payload: payload, prio: prio, maxAtt: maxAtt, seq: m.seq, created: m.now, updated: m.now}
	if at > m.now {
		j.state, j.runAt = leaserouter.StateScheduled, at
	} else {
		m.ready(j, m.now) // a run-at in the past: ready at the enqueue time
	}
	m.jobs[id] = j
	m.stats.Enqueued++
	return nil
}

// next returns the ready job to lease: highest priority, then earliest
// ready time, then enqueue order.
func (m *fuzzModel) next() *fuzzJob {
	var best *fuzzJob
	for _, j := range m.jobs {
		if j.state != leaserouter.StatePending {
			continue
		}
		if best == nil || j.prio > best.prio ||
			j.prio == best.prio && (j.readyAt < best.readyAt || j.readyAt == best.readyAt && j.seq < best.seq) {
			best = j
		}
	}
	return best
}

// acquire leases the model's next job to worker; the caller checks the
// Router's lease against it and records it with addLease.
func (m *fuzzModel) acquire(worker string) (*fuzzJob, error) {
	if m.closed {
		return nil, leaserouter.ErrClosed
	}
	j := m.next()
	if j == nil {
		return nil, leaserouter.ErrNoJob
	}
	j.state, j.owner, j.attempt = leaserouter.StateLeased, worker, j.attempt+1
	j.expiry, j.updated = m.now+fuzzLD, m.now
	m.stats.LeasesGranted++
	return j, nil
}

func (m *fuzzModel) addLease(j *fuzzJob, l *leaserouter.Lease[int]) {
	m.tokens = append(m.tokens, l.Token)
	m.ranks[l.Token] = len(m.tokens)
	fl := &fuzzLease{l: l, job: j, rank: len(m.tokens), expiry: j.expiry}
	j.rank, j.lease = fl.rank, fl
	m.leases = append(m.leases, fl)
}

func (m *fuzzModel) token(rank int) leaserouter.Token {
	if rank == 0 {
		return 0
	}
	return m.tokens[rank-1]
}

// hold returns fl's job if fl is its valid lease (expiries are settled
// already), or the refusal the holder must get.
func (m *fuzzModel) hold(fl *fuzzLease) (*fuzzJob, error) {
	j := fl.job
	if j.state == leaserouter.StateLeased && j.lease == fl {
		return j, nil
	}
	if !m.closed { // after Close the state is frozen, counts included
		m.stats.StaleRejections++
	}
	e := &leaserouter.LeaseLostError{JobID: j.id, Token: m.token(fl.rank), Reason: leaserouter.LostReason(j.ended)}
	if j.rank != fl.rank {
		e.Reason = "superseded"
	}
	if cur := m.jobs[j.id]; cur != nil {
		e.Current = m.token(cur.rank)
	}
	return nil, e
}

func (m *fuzzModel) heartbeat(fl *fuzzLease, progress []byte) error {
	j, err := m.hold(fl)
	if err != nil {
		if !m.closed {
			m.stats.HeartbeatsRefused++
		}
		return err
	}
	j.expiry = max(j.expiry, m.now+fuzzLD)
	fl.expiry = j.expiry
	if progress != nil {
		j.progress = slices.Clone(progress)
	}
	j.updated = m.now
	m.stats.Heartbeats++
	return nil
}

func (m *fuzzModel) complete(fl *fuzzLease) error {
	j, err := m.hold(fl)
	if err != nil {
		return err
	}
	m.endLease(j, "completed")
	m.finish(j, leaserouter.StateSucceeded, m.now)
	return nil
}

func (m *fuzzModel) fail(fl *fuzzLease, msg string, permanent bool) error {
	j, err := m.hold(fl)
	if err != nil {
		return err
	}
	j.lastErr = msg
	m.endLease(j, "failed")
	if permanent || j.attempt >= j.maxAtt {
		m.kill(j, m.now)
		return nil
	}
	m.stats.Retries++
	if d := fuzzBackoff(j.attempt); d > 0 {
		j.state, j.runAt, j.updated = leaserouter.StateScheduled, m.now+d, m.now
	} else {
		m.ready(j, m.now)
	}
	return nil
}

func (m *fuzzModel) release(fl *fuzzLease) error {
	j, err := m.hold(fl)
	if err != nil {
		return err
	}
	m.endLease(j, "released")
	m.requeue(j, m.now)
	return nil
}

func (m *fuzzModel) cancel(id string) error {
	if id == "" {
		return errors.Join(leaserouter.ErrInvalidJob, leaserouter.ErrNotFound)
	}
	if m.closed {
		return leaserouter.ErrClosed
	}
	j := m.jobs[id]
	if j == nil {
		return leaserouter.ErrNotFound
	}
	switch j.state {
	case leaserouter.StateLeased:
		m.endLease(j, "canceled")
	case leaserouter.StatePending, leaserouter.StateScheduled:
	default:
		return nil // finished: nothing changes
	}
	m.finish(j, leaserouter.StateCanceled, m.now)
	return nil
}

// close models Close with a context that is never done (drain: it returns
// when the last held lease expires) or already done (held leases are
// revoked: pending again, attempt kept, never dead).
func (m *fuzzModel) close(drain bool) error {
	if m.closed {
		return nil
	}
	var held []*fuzzJob
	var last time.Duration
	for _, j := range m.jobs {
		if j.state == leaserouter.StateLeased {
			held = append(held, j)
			last = max(last, j.expiry)
		}
	}
	var err error
	switch {
	case len(held) == 0:
	case drain:
		m.now = last
		m.settle()
	default:
		for _, j := range held {
			m.endLease(j, "revoked")
			m.ready(j, m.now)
		}
		err = context.Canceled
	}
	m.closed = true
	return err
}

func (m *fuzzModel) wantStats() leaserouter.Stats {
	s := m.stats
	for _, j := range m.jobs {
		switch j.state {
		case leaserouter.StatePending:
			s.Pending++
		case leaserouter.StateScheduled:
			s.Scheduled++
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
	s.Failed = s.DeadJobs // the deprecated name, filled alike
	return s
}

// ---- the harness ----

// fuzzView is a job as compared: times since the bubble's start (-1 for a
// zero time), tokens as ranks, progress as a string (nil and empty alike).
type fuzzView struct {
	ID                                   string
	Payload                              int
	State                                leaserouter.State
	Priority, Attempt, MaxAttempts       int
	Rank                                 int
	Owner                                string
	LeaseExpiry, RunAt, Created, Updated time.Duration
	Progress, LastError                  string
}

type fuzzLeaseView struct {
	JobID    string
	Payload  int
	Attempt  int
	WorkerID string
	Progress string
	Expiry   time.Duration
}

type fuzzEvents struct {
	mu  sync.Mutex
	evs []leaserouter.Event
}

func (e *fuzzEvents) record(ev leaserouter.Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

type fuzzHarness struct {
	t      *testing.T
	r      *leaserouter.Router[int]
	m      *fuzzModel
	start  time.Time
	events *fuzzEvents
	seen   int                          // events checked so far
	lastEv time.Time                    // time of the last event checked
	maxTok map[string]leaserouter.Token // per job ID: token of its latest lease_acquired
	trace  []string
}

// String gives the ops run so far, for failure messages (formatted only on
// failure).
func (h *fuzzHarness) String() string {
	return fmt.Sprintf("\nat %v after:\n  %s", h.m.now, strings.Join(h.trace, "\n  "))
}

func (h *fuzzHarness) logf(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf("%3d ", len(h.trace))+fmt.Sprintf(format, args...))
}

func (h *fuzzHarness) rel(t time.Time) time.Duration {
	if t.IsZero() {
		return -1
	}
	return t.Sub(h.start)
}

func fuzzRun(t *testing.T, data []byte) {
	events := &fuzzEvents{}
	start := time.Now()
	r, err := leaserouter.New[int](leaserouter.Options{
		LeaseDuration: fuzzLD, MaxAttempts: fuzzMaxAtt, Backoff: fuzzBackoff,
		Retention: fuzzRetention, Capacity: fuzzCapacity, OnEvent: events.record,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		// The reaper lives in the bubble: stop it even when a check failed.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = r.Close(ctx)
	})
	h := &fuzzHarness{
		t: t, r: r, start: start, events: events,
		m:      &fuzzModel{jobs: map[string]*fuzzJob{}, ranks: map[leaserouter.Token]int{}},
		maxTok: map[string]leaserouter.Token{},
	}
	ops := fuzzDecode(data)
	for i, op := range ops {
		h.step(i, op)
	}
	h.step(len(ops), fuzzOp{kind: fuzzClose, b: 1}) // draining Close; a no-op if closed already
}

// step runs one op on both sides. The model is settled at the current
// instant between steps, as every Router call settles first.
func (h *fuzzHarness) step(i int, op fuzzOp) {
	switch op.kind {
	case fuzzEnqueue:
		h.enqueue(i, op)
	case fuzzAcquire:
		h.acquire(op)
	case fuzzHeartbeat, fuzzComplete, fuzzFail, fuzzRelease:
		h.leaseOp(op)
	case fuzzCancel:
		id := fuzzID(op.a)
		h.logf("cancel %q", id)
		err := h.r.Cancel(id)
		h.requireErr(h.m.cancel(id), err)
		h.logf("  -> %v", err)
	case fuzzGet:
		id := fuzzID(op.a)
		h.logf("get %q", id)
		h.checkJob(id)
	case fuzzSleep:
		h.sleep(fuzzSleeps[int(op.a)%len(fuzzSleeps)])
	case fuzzDeadline:
		ds := h.m.deadlines()
		if len(ds) == 0 {
			h.sleep(fuzzSleeps[int(op.a)%len(fuzzSleeps)])
			break
		}
		at := ds[int(op.a)%len(ds)]
		if op.b%2 == 1 {
			at -= time.Nanosecond
		}
		h.sleep(at - h.m.now)
	case fuzzClose:
		drain := op.b%2 == 1
		h.logf("close drain=%v", drain)
		ctx, cancel := context.WithCancel(context.Background())
		if !drain {
			cancel()
		}
		err := h.r.Close(ctx)
		cancel()
		h.requireErr(h.m.close(drain), err)
	}
	synctest.Wait() // every event delivered, the reaper idle
	h.m.settle()    // what the op (a sleep) made due: Get and Stats settle it too
	h.check()
}

func (h *fuzzHarness) sleep(d time.Duration) {
	h.logf("sleep %v", d)
	time.Sleep(d)
	synctest.Wait()
	h.m.now += d
}

func (h *fuzzHarness) enqueue(payload int, op fuzzOp) {
	id, prio := fuzzID(op.a), int(op.a/16%4)-1
	timing, d := int(op.b%fuzzTimings), fuzzDelays[int(op.b/fuzzTimings)%len(fuzzDelays)]
	maxAtt := fuzzMaxAtts[op.c%8]
	runAt := func(d time.Duration) time.Time { return h.start.Add(h.m.now + d) }
	var opts []leaserouter.EnqueueOption
	if prio != 0 {
		opts = append(opts, leaserouter.WithPriority(prio))
	}
	at, badDelay := h.m.now, false
	switch timing {
	case fuzzTimingDelay:
		opts = append(opts, leaserouter.WithDelay(d))
		at, badDelay = at+d, d < 0
	case fuzzTimingRunAt:
		opts = append(opts, leaserouter.WithRunAt(runAt(d)))
		at += max(d, 0)
	case fuzzTimingZeroRunAt:
		opts = append(opts, leaserouter.WithRunAt(time.Time{}))
	case fuzzTimingRunAtThenDelay:
		opts = append(opts, leaserouter.WithRunAt(runAt(2*fuzzLD)), leaserouter.WithDelay(d))
		at, badDelay = at+d, d < 0
	case fuzzTimingDelayThenRunAt:
		opts = append(opts, leaserouter.WithDelay(2*fuzzLD), leaserouter.WithRunAt(runAt(d)))
		at += max(d, 0)
	}
	if maxAtt != 0 {
		opts = append(opts, leaserouter.WithMaxAttempts(max(maxAtt, 0)))
	}
	h.logf("enqueue %q payload=%d prio=%d timing=%d d=%v maxAtt=%d", id, payload, prio, timing, d, maxAtt)
	err := h.r.Enqueue(id, payload, opts...)
	h.logf("  -> %v", err)
	h.requireErr(h.m.enqueue(id, payload, prio, at, maxAtt, badDelay), err)
}

func (h *fuzzHarness) acquire(op fuzzOp) {
	worker := fuzzWorkers[int(op.a)%len(fuzzWorkers)]
	if op.b%4 == 3 {
		h.acquireMany(worker, int(op.c%4)+1)
		return
	}
	h.logf("acquire %s", worker)
	l, err := h.r.TryAcquire(worker)
	j, want := h.m.acquire(worker)
	h.requireErr(want, err)
	if want != nil {
		h.logf("  -> %v", err)
		require.Nil(h.t, l, "%v", h)
		return
	}
	h.granted(j, l, worker)
}

// acquireMany is TryAcquireMany(worker, max) against the model taking
// leases one by one at the same instant, up to max or its first refusal
// (the batch's error only if it is the first).
func (h *fuzzHarness) acquireMany(worker string, max int) {
	h.logf("acquire many %s max=%d", worker, max)
	ls, err := h.r.TryAcquireMany(worker, max)
	var js []*fuzzJob
	var want error
	for len(js) < max {
		j, err := h.m.acquire(worker)
		if err != nil {
			if len(js) == 0 {
				want = err
			}
			break
		}
		js = append(js, j)
	}
	h.requireErr(want, err)
	require.Len(h.t, ls, len(js), "%v", h)
	for i, j := range js {
		h.granted(j, ls[i], worker)
	}
}

// granted checks lease l against the model's grant of j and records it.
func (h *fuzzHarness) granted(j *fuzzJob, l *leaserouter.Lease[int], worker string) {
	require.NotNil(h.t, l, "%v", h)
	fuzzEqual(h.t,
		fuzzLeaseView{j.id, j.payload, j.attempt, worker, string(j.progress), j.expiry},
		fuzzLeaseView{l.JobID, l.Payload, l.Attempt, l.WorkerID, string(l.Progress), h.rel(l.Expiry())},
		"granted lease %v", h)
	if n := len(h.m.tokens); n > 0 {
		if l.Token <= h.m.tokens[n-1] {
			require.Greater(h.t, l.Token, h.m.tokens[n-1], "tokens must strictly increase %v", h)
		}
	}
	h.m.addLease(j, l)
	h.logf("  -> %q attempt %d token rank %d", j.id, j.attempt, j.rank)
}

func (h *fuzzHarness) leaseOp(op fuzzOp) {
	n := len(h.m.leases)
	if n == 0 {
		h.logf("%v: no lease yet", op.kind)
		return
	}
	// a = 0 is the latest lease, 1 the one before, ...: old leases are
	// picked often, so stale operations are common.
	fl := h.m.leases[n-1-int(op.a)%n]
	var got, want error
	switch op.kind {
	case fuzzHeartbeat:
		p := fuzzProgress(op.b)
		h.logf("heartbeat rank %d progress %q (nil %v)", fl.rank, p, p == nil)
		got = fl.l.Heartbeat(p)
		want = h.m.heartbeat(fl, p)
	case fuzzComplete:
		h.logf("complete rank %d", fl.rank)
		got = fl.l.Complete()
		want = h.m.complete(fl)
	case fuzzFail:
		f := fuzzCause(op.b)
		h.logf("fail rank %d %q permanent=%v", fl.rank, f.msg, f.permanent)
		got = fl.l.Fail(f.cause)
		want = h.m.fail(fl, f.msg, f.permanent)
	case fuzzRelease:
		h.logf("release rank %d", fl.rank)
		got = fl.l.Release()
		want = h.m.release(fl)
	}
	h.requireErr(want, got)
	h.logf("  -> %v", got)
}

// fuzzEqual is require.Equal for the hot path: testify's bookkeeping
// (t.Helper walks the stack) would be most of an execution's cost, so it
// runs only on a mismatch.
func fuzzEqual[V comparable](t *testing.T, want, got V, msgAndArgs ...any) {
	if want != got {
		t.Helper()
		require.Equal(t, want, got, msgAndArgs...)
	}
}

// requireErr compares errors by the sentinels they match and, for a lost
// lease, by every field of the LeaseLostError.
func (h *fuzzHarness) requireErr(want, got error) {
	fuzzEqual(h.t, fuzzClass(want), fuzzClass(got), "error %v %v", got, h)
	var w *leaserouter.LeaseLostError
	if errors.As(want, &w) {
		var g leaserouter.LeaseLostError
		require.ErrorAs(h.t, got, &g, "%v", h)
		require.Equal(h.t, *w, g, "LeaseLostError %v", h)
	}
}

var fuzzSentinels = []error{
	leaserouter.ErrLeaseLost, leaserouter.ErrStaleToken, leaserouter.ErrDuplicate, leaserouter.ErrNotFound,
	leaserouter.ErrNoJob, leaserouter.ErrClosed, leaserouter.ErrFull, leaserouter.ErrInvalidOptions,
	leaserouter.ErrInvalidJob, leaserouter.ErrTokensExhausted, context.Canceled,
}

func fuzzClass(err error) string {
	if err == nil {
		return "nil"
	}
	var cls []string
	for _, s := range fuzzSentinels {
		if errors.Is(err, s) {
			cls = append(cls, s.Error())
		}
	}
	if len(cls) == 0 {
		return "unclassified: " + err.Error()
	}
	return strings.Join(cls, " & ")
}

func (h *fuzzHarness) check() {
	t := h.t
	fuzzEqual(t, h.m.now, time.Since(h.start), "fake clock %v", h)
	for _, id := range fuzzIDs {
		h.checkJob(id)
	}
	if err := h.r.Audit(); err != nil {
		require.NoError(t, err, "%v", h)
	}
	got := h.r.Stats()
	readySince := time.Duration(-1) // none pending
	if j := h.m.next(); j != nil {
		readySince = j.readyAt
	}
	fuzzEqual(t, readySince, h.rel(got.ReadySince), "Stats.ReadySince %v", h)
	got.ReadySince = time.Time{}
	fuzzEqual(t, h.m.wantStats(), got, "Stats %v", h)
	for _, fl := range h.m.leases {
		fuzzEqual(t, fl.expiry, h.rel(fl.l.Expiry()), "Expiry of lease rank %d %v", fl.rank, h)
	}
	h.checkEvents()
}

func (h *fuzzHarness) checkJob(id string) {
	got, ok := h.r.Get(id)
	want := h.m.jobs[id]
	fuzzEqual(h.t, want != nil, ok, "Get(%q) found: %+v %v", id, got, h)
	if want == nil {
		return
	}
	w := fuzzView{
		ID: want.id, Payload: want.payload, State: want.state, Priority: want.prio,
		Attempt: want.attempt, MaxAttempts: want.maxAtt, Rank: want.rank, Owner: want.owner,
		LeaseExpiry: -1, RunAt: -1, Created: want.created, Updated: want.updated,
		Progress: string(want.progress), LastError: want.lastErr,
	}
	switch want.state {
	case leaserouter.StateLeased:
		w.LeaseExpiry = want.expiry
	case leaserouter.StateScheduled:
		w.RunAt = want.runAt
	}
	rank, known := h.m.ranks[got.Token]
	if !known && got.Token != 0 {
		rank = -1 // a token no lease was granted with
	}
	g := fuzzView{
		ID: got.ID, Payload: got.Payload, State: got.State, Priority: got.Priority,
		Attempt: got.Attempt, MaxAttempts: got.MaxAttempts, Rank: rank, Owner: got.Owner,
		LeaseExpiry: h.rel(got.LeaseExpiry), RunAt: h.rel(got.RunAt),
		Created: h.rel(got.CreatedAt), Updated: h.rel(got.UpdatedAt),
		Progress: string(got.Progress), LastError: got.LastError,
	}
	fuzzEqual(h.t, w, g, "Get(%q) %v", id, h)
}

// checkEvents checks the events delivered since the last step: in time
// order, and, per job, no token older than its latest lease_acquired except
// on stale_rejected (token 0 means "no lease": enqueued, duplicate, cancel
// of an unleased job).
func (h *fuzzHarness) checkEvents() {
	h.events.mu.Lock()
	evs := h.events.evs[h.seen:]
	h.seen = len(h.events.evs)
	h.events.mu.Unlock()
	for _, e := range evs {
		if e.Time.Before(h.lastEv) {
			require.Failf(h.t, "events out of time order", "event %+v before an earlier one at %v %v", e, h.rel(h.lastEv), h)
		}
		h.lastEv = e.Time
		switch {
		case e.Kind == leaserouter.EventEnqueued:
			h.maxTok[e.JobID] = 0
		case e.Kind == leaserouter.EventLeaseAcquired:
			if e.Token <= h.maxTok[e.JobID] {
				require.Failf(h.t, "lease_acquired with an old token", "event %+v %v", e, h)
			}
			h.maxTok[e.JobID] = e.Token
		case e.Kind != leaserouter.EventStaleRejected && e.Token != 0 && e.Token < h.maxTok[e.JobID]:
			require.Failf(h.t, "event with an older token", "event %v: %+v %v", e.Kind, e, h)
		}
	}
}

// ---- seeds ----

func FuzzRouter(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) { fuzzRun(t, data) })
	})
}

// TestFuzzRouterCorpus keeps testdata/fuzz/FuzzRouter/seed-* equal to
// fuzzSeeds; LEASEROUTER_WRITE_CORPUS=1 rewrites them. Other files there are
// inputs the fuzzer found failing.
func TestFuzzRouterCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzRouter")
	write := os.Getenv("LEASEROUTER_WRITE_CORPUS") == "1"
	for _, s := range fuzzSeeds() {
		path := filepath.Join(dir, "seed-"+s.name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s.data)
		if write {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "run with LEASEROUTER_WRITE_CORPUS=1 to write the corpus")
		require.Equal(t, want, string(got), "%s is stale: run with LEASEROUTER_WRITE_CORPUS=1", path)
	}
}

type fuzzSeed struct {
	name string
	data []byte
}

func fuzzEnc(k fuzzKind, a, b, c byte) []byte {
	return []byte{byte(slices.Index(fuzzKinds[:], k)), a, b, c}
}

func fuzzIDByte(id string) byte {
	if id == "" {
		return 15
	}
	return byte(fuzzMustIndex(fuzzIDs, id))
}

func fuzzMustIndex[T comparable](s []T, v T) int {
	i := slices.Index(s, v)
	if i < 0 {
		panic(fmt.Sprintf("fuzz seed: %v not in %v", v, s))
	}
	return i
}

// Seed builders: leases are counted back from the latest (0).
func sEnq(id string, prio int) []byte { return sEnqX(id, prio, fuzzTimingNone, 0, 0) }

func sEnqX(id string, prio, timing int, d time.Duration, maxAtt int) []byte {
	a := fuzzIDByte(id) | byte(prio+1)<<4
	b := byte(timing + fuzzTimings*fuzzMustIndex(fuzzDelays, d))
	return fuzzEnc(fuzzEnqueue, a, b, byte(fuzzMustIndex(fuzzMaxAtts, maxAtt)))
}
func sAcq(worker int) []byte             { return fuzzEnc(fuzzAcquire, byte(worker), 0, 0) }
func sBeat(lease int, p byte) []byte     { return fuzzEnc(fuzzHeartbeat, byte(lease), p, 0) }
func sComplete(lease int) []byte         { return fuzzEnc(fuzzComplete, byte(lease), 0, 0) }
func sFail(lease int, cause byte) []byte { return fuzzEnc(fuzzFail, byte(lease), cause, 0) }
func sRelease(lease int) []byte          { return fuzzEnc(fuzzRelease, byte(lease), 0, 0) }
func sCancel(id string) []byte           { return fuzzEnc(fuzzCancel, fuzzIDByte(id), 0, 0) }
func sSleep(d time.Duration) []byte {
	return fuzzEnc(fuzzSleep, byte(fuzzMustIndex(fuzzSleeps, d)), 0, 0)
}

// sTo sleeps to the model's i-th future deadline, or 1ns before it.
func sTo(i int, before bool) []byte {
	var b byte
	if before {
		b = 1
	}
	return fuzzEnc(fuzzDeadline, byte(i), b, 0)
}
func sClose(drain bool) []byte {
	var b byte
	if drain {
		b = 1
	}
	return fuzzEnc(fuzzClose, 0, b, 0)
}

func fuzzSeeds() []fuzzSeed {
	seed := func(name string, ops ...[]byte) fuzzSeed { return fuzzSeed{name, slices.Concat(ops...)} }
	const (
		nilCause, boom, permanent, wrappedPermanent = 0, 1, 2, 3
		keep, clearP, p2                            = 0, 1, 2
	)
	return []fuzzSeed{
		seed("expiry-boundary",
			sEnq("a", 0), sAcq(0),
			sTo(0, true), sBeat(0, p2), // 1ns before expiry: still valid, extended
			sTo(0, true), sTo(0, false), sBeat(0, keep), // exactly at expiry: lost
			sAcq(1), sComplete(1), sComplete(0)),
		seed("retry-after-backoff",
			sEnq("a", 0), sAcq(0), sFail(0, boom),
			sTo(0, true), sAcq(0), sTo(0, false), sAcq(1), // ready exactly at the run-at
			sFail(0, nilCause), sTo(0, false), sAcq(2), sComplete(0)),
		seed("zero-backoff-retries-at-once",
			sEnqX("a", 0, fuzzTimingNone, 0, 5), sAcq(0), sFail(0, boom), sTo(0, false),
			sAcq(0), sFail(0, boom), sTo(0, false), sAcq(0), sFail(0, boom), sAcq(1), sBeat(0, p2), sRelease(0), sAcq(2)),
		seed("dead-after-max-attempts",
			sEnqX("a", 0, fuzzTimingNone, 0, 2), sEnqX("b", 0, fuzzTimingNone, 0, 1),
			sAcq(0), sSleep(fuzzLD), sAcq(1), sAcq(2), sRelease(1), sFail(0, boom), // a: expired then released; b dead by Fail
			sEnq("c", 0), sAcq(0), sFail(0, permanent), sEnq("d", 0), sAcq(1), sFail(0, wrappedPermanent),
			sEnq("e", 0), sAcq(0), sFail(0, boom), sTo(0, false), sAcq(0), sSleep(fuzzLD), sAcq(0), sSleep(fuzzLD)),
		seed("cancel-leased",
			sEnq("a", 0), sAcq(0), sCancel("a"), sBeat(0, keep), sComplete(0), sAcq(1),
			sCancel("a"), sCancel(""), sCancel("b"),
			sEnqX("b", 0, fuzzTimingDelay, time.Second, 0), sCancel("b"), sSleep(time.Second), sAcq(1)),
		seed("stale-complete-after-reacquire",
			sEnq("a", 0), sAcq(0), sSleep(fuzzLD), sAcq(1),
			sComplete(1), sFail(1, boom), sRelease(1), sBeat(1, p2),
			sRelease(0), sAcq(2), sComplete(1), sComplete(2), sComplete(0)),
		seed("priority-ordering",
			sEnq("a", 0), sEnq("b", 2), sEnq("c", -1), sEnqX("d", 2, fuzzTimingDelay, time.Second, 0),
			sAcq(0), sComplete(0), // b first; completing it makes room under Capacity
			sEnqX("e", 0, fuzzTimingRunAt, -time.Nanosecond, 0), // run-at in the past: ready now, after a
			sAcq(1), sTo(0, false), sAcq(2), sAcq(0), sAcq(1)), // a; at 1s d (priority 2), then e, then c
		seed("ready-time-ordering",
			sEnq("a", 0), sEnq("b", 0), sAcq(0), sSleep(time.Second), sAcq(1), // b leased 1s after a
			sEnqX("c", 0, fuzzTimingRunAt, 3*time.Second, 0), sEnqX("d", 0, fuzzTimingDelay, fuzzLD-time.Nanosecond, 0),
			sTo(3, false), sTo(0, false), sAcq(0), sAcq(1), sAcq(2), sAcq(0)),
		seed("retention-purge",
			sEnq("a", 0), sAcq(0), sComplete(0), sEnq("a", 0),
			sTo(0, true), sEnq("a", 0), sCancel("a"), sTo(0, false),
			sEnq("a", 1), sComplete(0), sBeat(0, keep), sAcq(1), sComplete(1)),
		seed("capacity-and-invalid-enqueue",
			sEnq("a", 0), sEnq("b", 0), sEnq("c", 0), sEnq("d", 0), sEnq("e", 0),
			sEnq("", 0), sEnqX("e", 0, fuzzTimingDelay, -time.Nanosecond, 0), sEnqX("e", 0, fuzzTimingNone, 0, -1),
			sCancel("a"), sEnqX("e", 1, fuzzTimingRunAtThenDelay, time.Second, 1),
			sEnqX("a", 0, fuzzTimingDelayThenRunAt, -time.Nanosecond, 0), sEnqX("a", 0, fuzzTimingZeroRunAt, 0, 0),
			sSleep(time.Second), sAcq(0), sAcq(0)),
		seed("close-revokes-then-frozen",
			sEnq("a", 0), sEnqX("b", 0, fuzzTimingNone, 0, 1), sEnqX("c", 0, fuzzTimingDelay, time.Second, 0),
			sAcq(0), sAcq(1), sBeat(0, p2), sClose(false),
			sBeat(0, keep), sComplete(1), sEnq("d", 0), sAcq(0), sCancel("a"), sCancel(""),
			sSleep(2*time.Minute), sClose(true)),
		seed("close-drains-until-expiry",
			sEnq("a", 0), sEnq("b", 0), sAcq(0), sSleep(time.Second), sAcq(1), sBeat(0, p2), sClose(true), sComplete(0)),
		seed("checkpoint-carried-and-cleared",
			sEnq("a", 0), sAcq(0), sBeat(0, p2), sRelease(0), sAcq(1), sBeat(0, clearP), sFail(0, boom),
			sTo(0, false), sAcq(2), sBeat(1, p2+4), sComplete(0)),
	}
}
