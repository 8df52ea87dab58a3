package pgrouter

import (
	"context"
	"strings"
	"time"

	"github.com/leaserouter/leaserouter"
)

// ClaimStatements are a claim's first statement (its advisory lock on the
// claim id, $1) and the claim itself ($1 queue, $2 how many, $3 worker,
// $4 lease in microseconds, $5 claim id), for tests that run a claim's
// transaction by hand to order it against its resolver.
func ClaimStatements() (lock, claim string) {
	return defaultStatements.claimLock, defaultStatements.claim(1)
}

// ResolveClaim resolves claim id as the Router does when the claim's
// outcome is unknown, in the caller's goroutine.
func ResolveClaim[T any](ctx context.Context, r *Router[T], id int64) error {
	return r.resolveClaimOnce(ctx, id)
}

// AwaitBackground waits until the Router's background work (unknown
// outcomes being resolved, a stopped Run's last completions and
// hand-backs) is done, or ctx is: tests that read the table after Run
// returned see what Run's wind-down did, even where it went on in the
// background (a Run returns within 100ms of its ctx's end).
func AwaitBackground[T any](ctx context.Context, r *Router[T]) error { return r.tasks.wait(ctx) }

// Statement is the statement of sql/name.sql as it is sent: with $n
// ordinals, names[i] being the parameter bound to $(i+1). A statement
// rendered in two lock forms (lockForms) is its waiting form; name
// ":skip" its skipping form.
func Statement(name string) (sql string, names []string) {
	if name == "claim" { // a template: a Router's claim, of one kind
		return ClaimStatement(1)
	}
	if base, ok := strings.CutSuffix(name, ":skip"); ok { // the skipping form (lockForms)
		p := compiled[lockFormsOf[base+"FOR UPDATE SKIP LOCKED"]]
		return p.sql, p.names
	}
	if text, ok := lockFormsOf[name+"FOR UPDATE"]; ok { // the waiting form
		p := compiled[text]
		return p.sql, p.names
	}
	text, err := statementFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(err)
	}
	p := compiled[qualify(string(text), "")] // read only: compiled is written at load alone
	return p.sql, p.names
}

// SetCountCap sets the most jobs of a state r's Stats and Queues count
// one by one (countCap by default), so tests reach it with few jobs. Not
// safe while r counts.
func SetCountCap[T any](r *Router[T], n int64) { r.cap = n }

// SetClockSkew makes r's periodic scheduler read its local clock d ahead
// of the real one (behind, for a negative d), as a process whose clock
// is off would. Set it before AddPeriodic.
func SetClockSkew[T any](r *Router[T], d time.Duration) { r.periodic.skew.Store(int64(d)) }

// PeriodicWakes is how many wake-ups r's periodic scheduler has done
// (each ends after the ticks it planned were enqueued or skipped): a
// signal for tests, which read the table after it moved.
func PeriodicWakes[T any](r *Router[T]) uint64 { return r.periodic.wakes.Load() }

// PrefixEnd is prefixEnd, the end of an ID prefix's range in byte order.
func PrefixEnd(prefix string) string { return prefixEnd(prefix) }

// PrefixWalk is prefixWalk, how many of a state's newest jobs a page with
// an ID prefix walks.
func PrefixWalk(page int) int { return prefixWalk(page) }

// CountCap is countCap, the most jobs of a state Stats counts one by one.
const CountCap = countCap

// OptionsWithDefaults is o as New takes it: checked, its zero fields
// filled.
func OptionsWithDefaults(o Options) (Options, error) { return o.withDefaults() }

// WithGrace and Graced are the graces of a last round trip (tasks.go).
func WithGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	return withGrace(ctx, grace)
}

// Graced marks ctx as a grace itself (tasks.go).
func Graced(ctx context.Context) context.Context { return graced(ctx) }

// ClaimStatement is the claim statement for k kinds as it is sent (see
// Statement); its kinds are the parameters kind_1 ... kind_k.
func ClaimStatement(k int) (sql string, names []string) {
	text := defaultStatements.claim(k)
	p, _ := compiledOther.Load(text)
	return p.(*positional).sql, p.(*positional).names
}

// ClaimTemplate is the claim statement for k kinds with named
// parameters, as a reviewer reads it (the golden files).
func ClaimTemplate(k int) string { return defaultStatements.claim(k) }

// WithKinds is o serving kinds in its claim, as a Client's queue does.
func WithKinds(o Options, kinds ...string) Options { o.kinds = kinds; return o }

// CompleteSkipping is a heartbeat round's completion of ls (the skipping
// form, lockForms): how many it left for a later round, and whether its
// statement ran.
func CompleteSkipping[T any](ctx context.Context, r *Router[T], ls []*Lease[T]) (later int, ok bool) {
	l, ok := r.completeAll(ctx, r.db, ls, true)
	return len(l), ok
}

// CompleteUnread completes ls with the waiting form and reads no reply,
// as a statement whose reply was lost.
func CompleteUnread[T any](ctx context.Context, r *Router[T], ls []*Lease[T]) error {
	_, err := r.db.Exec(ctx, r.st.endLeases, r.endManyArgs(ls, "completed", true))
	return err
}

// StateLabel is s's label in the state column's enum (dbState): its
// name, but 'failed' for StateDead.
func StateLabel(s leaserouter.State) string { return dbState(s) }

// MigrateLocks are Migrate's advisory lock keys for schema (its
// transactions', its session's).
func MigrateLocks(schema string) (xact, session int64) { return migrateLocks(schema) }

// CompleteAllAfterLostReply completes ls with Run's completion statement
// (leases_end.sql, waiting for rows), as Run retries them after an
// earlier completion of theirs, with statement id op, whose reply was
// lost; it reports whether the statement ran.
func CompleteAllAfterLostReply[T any](ctx context.Context, r *Router[T], ls []*Lease[T], op int64) bool {
	r.endUnknown(ls, args{"op": op})
	_, ok := r.completeAll(ctx, r.db, ls, false)
	return ok
}

// Querier is what the Router's statements run on (a pool, a connection,
// a transaction).
type Querier = querier

// HeartbeatCompleteAfterLostReply completes ls as a heartbeat round does
// (completeAll with the skipping form, on q), after an earlier completion
// of theirs, with statement id op, whose reply was lost.
func HeartbeatCompleteAfterLostReply[T any](ctx context.Context, r *Router[T], q Querier, ls []*Lease[T], op int64) (later []*Lease[T], ok bool) {
	r.endUnknown(ls, args{"op": op})
	return r.completeAll(ctx, q, ls, true)
}
