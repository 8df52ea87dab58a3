package routertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// Row is one rule of the contract, named after the contract's rule.
type Row struct {
	Name string
	// Needs is the capability the row needs, "" for none; Lacks tells the
	// row's capability from Caps.
	Needs string
	// Unbubbled: the row runs outside Harness.Scope (its clock real on
	// every backend), for a mechanism synctest cannot wait through.
	Unbubbled bool
	Test      func(t T, h Harness)
}

// needs reports whether c has the named capability, and the declared
// difference when it does not.
func needs(c Caps, name string) (bool, string) {
	switch name {
	case "":
		return true, ""
	case "ExactClock":
		return c.ExactClock, "the backend's clock is real: instants are probed to the nanosecond by its own tests (database time)"
	case "Capacity":
		return c.Capacity, "Capacity is not offered: the table is the queue"
	case "SerialClaims":
		return c.SerialClaims, "order is exact within one claim; concurrent claimers skip each other's locked rows"
	case "ForcedExpiry":
		return c.ForcedExpiry, "no forced expiry: leases expire by the backend's clock only, which the workload's expiries exercise"
	case "Totals":
		return c.Totals, "the backend does not declare its Stats totals exact over the workload's history"
	case "Audit":
		return c.Audit, "the backend offers no audit of its internal invariants"
	case "SharedClients":
		return c.SharedClients, "an in-process Client's job set is its own: every kind in it is registered, and no other process claims from it"
	}
	panic("routertest: unknown capability " + name)
}

// Run runs every row and the linearizability check against h, each as a
// subtest in h.Scope.
func Run(t *testing.T, h Harness) {
	for _, row := range Rows() {
		t.Run(row.Name, func(t *testing.T) {
			if ok, why := needs(h.Caps(), row.Needs); !ok {
				t.Logf("not applicable on %s (needs %s): %s", h.Name(), row.Needs, why)
				return
			}
			if row.Unbubbled {
				row.Test(t, h)
				return
			}
			h.Scope(t, func(t *testing.T) { row.Test(t, h) })
		})
	}
	t.Run("linearizable", func(t *testing.T) {
		Linearizable(t, h, h.Workload())
	})
}

// RunRow runs the row named name against h with t, for tests that run
// one row on a backend of their own.
func RunRow(t T, h Harness, name string) {
	t.Helper()
	for _, row := range Rows() {
		if row.Name == name {
			if ok, why := needs(h.Caps(), row.Needs); !ok {
				t.Logf("not applicable on %s (needs %s): %s", h.Name(), row.Needs, why)
				return
			}
			row.Test(t, h)
			return
		}
	}
	t.Errorf("routertest: no row %q", name)
	t.FailNow()
}

// open returns one handle on a fresh job set.
func open(t T, h Harness, cfg Config) Backend { return h.Open(t, cfg, 1)[0] }

func ctxOf(t T) context.Context { return t.Context() }

func tryAcquire(t T, b Backend, worker string) Lease {
	t.Helper()
	l, err := b.TryAcquire(ctxOf(t), worker)
	require.NoError(t, err)
	require.NotNil(t, l)
	return l
}

// leasedA opens one handle on a fresh job set with the default Config,
// enqueues job "a" and returns its lease, taken by worker "w": the start
// of most rows about one lease.
func leasedA(t T, h Harness) (Backend, context.Context, Lease) {
	t.Helper()
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", ""))
	return b, ctx, tryAcquire(t, b, "w")
}

func get(t T, b Backend, id string) leaserouter.Job[string] {
	t.Helper()
	j, ok, err := b.Get(ctxOf(t), id)
	require.NoError(t, err)
	require.True(t, ok, "job %q known", id)
	return j
}

func stats(t T, b Backend) leaserouter.Stats {
	t.Helper()
	s, err := b.Stats(ctxOf(t))
	require.NoError(t, err)
	return s
}

// requireLost checks that err is a *LeaseLostError for token with the
// job's current token and the reason.
func requireLost(t T, err error, token, current leaserouter.Token, reason leaserouter.LostReason) {
	t.Helper()
	var lost *leaserouter.LeaseLostError
	require.ErrorAs(t, err, &lost)
	require.ErrorIs(t, err, leaserouter.ErrLeaseLost)
	require.Equal(t, token, lost.Token, "the refused lease's token")
	require.Equal(t, current, lost.Current, "the job's current token")
	require.Equal(t, reason, lost.Reason)
}

// within reports whether the backend's clock is still before l's expiry
// (as l read it last): whether the calls a row made since l's grant,
// which have returned, all ran while l was valid. On a real clock a few
// round trips on a busy machine can outlast a short lease (Harness.Lease):
// a row checks what depends on l being valid only while within says so,
// and logs that it could not otherwise.
func within(t T, l Lease, h Harness) bool {
	if time.Now().Before(l.Expiry()) {
		return true
	}
	t.Logf("the row's calls outlasted %s's lease (%v, expiry %v): what depends on its validity is not checked",
		l.JobID(), h.Lease(), l.Expiry())
	return false
}

// requireValid holds err, what an operation of l returned, to l being
// valid: nil, or, if l's expiry has passed by now (within; the call may
// have run after it), l's expiry's refusal and nothing else.
func requireValid(t T, l Lease, err error, msg string) {
	t.Helper()
	if err != nil && !time.Now().Before(l.Expiry()) {
		requireLost(t, err, l.Token(), l.Token(), leaserouter.LostExpired)
		return
	}
	require.NoError(t, err, msg)
}

// expire lets l's lease expire on the backend's clock.
func expire(h Harness, l Lease, lease time.Duration) { h.Advance(lease + lease/4) }

// eventually advances the backend's clock in small steps until cond
// holds, failing t after 20s of the backend's clock.
func eventually(t T, h interface{ Advance(time.Duration) }, what string, cond func() bool) {
	t.Helper()
	const step = 10 * time.Millisecond
	for range int(20 * time.Second / step) {
		if cond() {
			return
		}
		h.Advance(step)
	}
	t.Errorf("not within 20s: %s", what)
	t.FailNow()
}

// events records the events a backend delivers, for reading after Close.
type events struct {
	ch chan leaserouter.Event
}

func newEvents() *events { return &events{ch: make(chan leaserouter.Event, 1024)} }

func (e *events) record(ev leaserouter.Event) { e.ch <- ev }

// drain returns the events recorded since the last drain, without waiting.
func (e *events) drain() []leaserouter.Event {
	var out []leaserouter.Event
	for {
		select {
		case ev := <-e.ch:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func kinds(evs []leaserouter.Event, id string) []leaserouter.EventKind {
	var out []leaserouter.EventKind
	for _, e := range evs {
		if e.JobID == id {
			out = append(out, e.Kind)
		}
	}
	return out
}

func first(evs []leaserouter.Event, id string, k leaserouter.EventKind) leaserouter.Event {
	for _, e := range evs {
		if e.JobID == id && e.Kind == k {
			return e
		}
	}
	return leaserouter.Event{}
}

var errBoom = errors.New("boom")

// offers returns b as a C (one of the optional interfaces a Backend may
// implement), failing t with what names the calls if b does not.
func offers[C any](t T, b Backend, what string) C {
	t.Helper()
	c, ok := b.(C)
	if !ok {
		t.Errorf("the backend %T has no %s", b, what)
		t.FailNow()
	}
	return c
}
