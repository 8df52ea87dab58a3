package pgrouter

import (
	"context"
	"embed"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The statements pgrouter runs, each whole in a file of sql/ (its doc at
// its head), with named parameters (@name, bound by args: a missing or
// extra name is an error, not a NULL). The rules the lease statements
// share are SQL functions, written once: leaserouter_lease_valid (the one
// invariant) and leaserouter_end_lease (how a lease ends and where its
// job goes: requeued, scheduled after a backoff or a snooze, or dead),
// of migrations 0003 and 0009, and leaserouter_hand_back (a lease handed back unstarted, as if
// never granted), of 0005; and leaserouter_past_retention (0003: a
// finished job past its retention, as good as purged), for the job
// statements.

//go:embed sql/*.sql
var statementFiles embed.FS

// compiled holds each statement's text with its @names replaced by $n
// ordinals, by pgx's own rewriter (pgx.NamedArgs), and the names in
// ordinal order, keyed by the statement's text. It is written once, by
// the package's variable initialization, and only read after that. args
// looks statements up here, so a call binds its arguments without
// lexing the statement again (pgx.StrictNamedArgs would, on every call:
// ~15% of a Run's client CPU).
var compiled = map[string]*positional{}

// positional is a statement rewritten with $n ordinals.
type positional struct {
	sql   string
	names []string // names[i] is bound to $(i+1)
}

// namedParam finds the candidate @names of a statement (in comments too:
// those the rewriter does not bind are dropped).
var namedParam = regexp.MustCompile(`@[A-Za-z_][A-Za-z0-9_]*`)

// statement is the text of sql/name.sql, compiled into compiled; a
// missing file or a statement the rewriter refuses is a build mistake,
// caught by the first test that loads the package.
func statement(name string) string {
	text := statementText(name)
	p, err := compile(text)
	if err != nil {
		panic(fmt.Sprintf("pgrouter: statement %s: %v", name, err))
	}
	compiled[text] = p
	return text
}

// lockForms renders sql/name.sql, whose row lock is written {lock} in
// its one place (outside comments), as two statements, compiled into
// compiled: wait locks FOR UPDATE, waiting for a row another transaction
// holds; skip locks FOR UPDATE SKIP LOCKED, leaving such a row alone. A
// heartbeat round sends the skipping forms: it runs on the connection
// that every Run and KeepAlive of the process take turns on, so a row
// held elsewhere (an operator's statement, a caller's transaction) must
// never hold that connection.
func lockForms(name string) (wait, skip string) {
	text := statementText(name)
	render := func(lock string) string {
		var b strings.Builder
		n := 0
		for l := range strings.Lines(text) {
			if !strings.HasPrefix(l, "--") && strings.Contains(l, "{lock}") {
				l = strings.Replace(l, "{lock}", lock, 1)
				n++
			}
			b.WriteString(l)
		}
		if n != 1 {
			panic(fmt.Sprintf("pgrouter: statement %s: %d {lock} placeholders, want 1", name, n))
		}
		out := b.String()
		p, err := compile(out)
		if err != nil {
			panic(fmt.Sprintf("pgrouter: statement %s: %v", name, err))
		}
		compiled[out] = p
		lockFormsOf[name+lock] = out
		return out
	}
	return render("FOR UPDATE"), render("FOR UPDATE SKIP LOCKED")
}

// lockFormsOf is each form lockForms rendered, keyed by the statement's
// name and its lock (for tests: Statement).
var lockFormsOf = map[string]string{}

// statementText is the text of sql/name.sql.
func statementText(name string) string {
	b, err := statementFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("pgrouter: statement %s: %v", name, err))
	}
	return string(b)
}

// compile rewrites text's @names as $n ordinals.
func compile(text string) (*positional, error) {
	probe := pgx.NamedArgs{}
	for _, m := range namedParam.FindAllString(text, -1) {
		probe[m[1:]] = m[1:]
	}
	sql, names, err := probe.RewriteQuery(context.Background(), nil, text, nil)
	if err != nil {
		return nil, err
	}
	p := &positional{sql: sql, names: make([]string, len(names))}
	for i, n := range names {
		p.names[i] = n.(string)
	}
	return p, nil
}

// args are a statement's named parameters, bound as pgx.StrictNamedArgs
// binds them (a missing or extra name is an error, not a NULL) but
// against the statement compiled at load.
type args map[string]any

// RewriteQuery implements pgx.QueryRewriter.
func (a args) RewriteQuery(_ context.Context, _ *pgx.Conn, sql string, _ []any) (string, []any, error) {
	p := compiled[sql]
	if p == nil {
		if c, ok := renderedClaims.Load(sql); ok {
			p = c.(*positional)
		}
	}
	if p == nil {
		return "", nil, fmt.Errorf("pgrouter: not a statement of sql/: %.40q", sql)
	}
	bound := make([]any, len(p.names))
	for i, n := range p.names {
		v, ok := a[n]
		if !ok {
			return "", nil, fmt.Errorf("pgrouter: argument @%s of the statement is not given", n)
		}
		bound[i] = v
	}
	if len(a) != len(p.names) {
		for n := range a {
			if !slices.Contains(p.names, n) {
				return "", nil, fmt.Errorf("pgrouter: argument @%s is not used by the statement", n)
			}
		}
	}
	return p.sql, bound, nil
}

var (
	// Claims (claim.go).
	claimLock = statement("claim_lock")
	nextDue   = statement("next_due")

	// Settling and maintenance (settle.go).
	settleExpired   = statement("settle_expired")
	settleScheduled = statement("settle_scheduled")
	purgeDue        = statement("purge")
	purgeAbandoned  = statement("purge_abandoned")
	periodicPrune   = statement("periodic_prune")
	vacuumDue       = statement("vacuum_due")
	vacuumJobs      = statement("vacuum")
	analyzeJobs     = statement("analyze")

	// Lease operations (lease.go, leasestatement.go, keepalive.go, completetx.go, snooze.go).
	lockRow        = statement("lease_lock")
	lockRowOfToken = statement("lease_lock_of_token")
	endLease       = statement("lease_end")
	heartbeatLease = statement("lease_heartbeat")
	heartbeatMany  = statement("leases_heartbeat")
	// Waiting for a row another transaction holds, and skipping it (a
	// heartbeat round's: see lockForms).
	endLeases, endLeasesSkipping       = lockForms("leases_end")
	handBackMany, handBackManySkipping = lockForms("leases_hand_back")
	inspectLeases                      = statement("leases_inspect")
	writerOf                           = statement("writer_of")
	txPending                          = statement("tx_pending")

	// Unknown outcomes (outcome.go).
	abandon         = statement("abandon")
	asyncCommit     = statement("async_commit")
	handBackClaim   = statement("claim_hand_back")
	undoClaimExpiry = statement("claim_undo_expiry")

	// Jobs (enqueue.go, jobs.go), fences, tokens, wake-ups.
	insertJobs   = statement("jobs_insert")
	getJob       = statement("job_get")
	cancelJobs   = statement("jobs_cancel")
	statsByState = statement("job_stats")
	jobsAnalyzed = statement("jobs_analyzed")
	jitOff       = statement("jit_off")
	fenceAdmit   = statement("fence")
	fenceHighest = statement("fence_highest")
	lockTokens   = statement("tokens_lock")
	raiseToken   = statement("tokens_raise")
	notifyQueue  = statement("notify")

	// The operator's side (admin.go).
	listJobs       = statement("jobs_list")
	listJobsPrefix = statement("jobs_list_prefix")
	listJobsKinds  = statement("jobs_list_kinds")
	settleJobs     = statement("jobs_settle")
	retryJobs      = statement("jobs_retry")
	runNowJobs     = statement("jobs_run_now")
	deleteJobs     = statement("jobs_delete")
	pauseQueue     = statement("queue_pause")
	queuePaused    = statement("queue_paused")
	readyHead      = statement("ready_head")
	queuesStats    = statement("queues_stats")
	queuesPaused   = statement("queues_paused")
	listLeases     = statement("leases_list")
	leasesPage     = statement("leases_page")
	historyAdd     = statement("history_add")
	historyRead    = statement("history_read")

	// Periodic jobs (periodic.go).
	addPeriodic = statement("periodic_add")
	takeTick    = statement("periodic_tick")
	tickCommit  = statement("periodic_tick_commit")
	readClock   = statement("periodic_clock")
)
