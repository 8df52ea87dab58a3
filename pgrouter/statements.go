package pgrouter

import (
	"context"
	"embed"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// The statements pgrouter runs, each whole in a file of sql/ (its doc at
// its head), with named parameters (@name, bound by args: a missing or
// extra name is an error, not a NULL). Each name of an object of
// pgrouter's in them is written after the marker /*schema*/
// (schemaMarker, schema.go: how to write a new file), which the
// statements of a schema (statementsFor: compiled at a schema's first
// New, once per process) replace with the quoted schema and a dot, and
// the default schema's with nothing: those are the files' text, byte for
// byte. The rules the lease statements
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
// ordinal order, keyed by the statement's text: the default schema's
// (defaultStatements) are written once, by the package's variable
// initialization, and only read after that; another schema's, compiled at
// its first New, go to compiledOther. args looks statements up there, so
// a call binds its arguments without lexing the statement again
// (pgx.StrictNamedArgs would, on every call: ~15% of a Run's client CPU).
var (
	compiled      = map[string]*positional{}
	compiledOther sync.Map // text -> *positional
)

// defaultStatements are the statements of the default schema (""): the
// text of sql/ as it is, every name resolved by the connection's
// search_path.
var defaultStatements = newStatements("")

// otherStatements holds the statements of each other schema, compiled at
// the first New (or NewClient) on it, once per process.
var otherStatements sync.Map // schema -> *statements

// statementsFor returns schema's statements (schema checked by
// checkSchema), compiling them at its first call for schema.
func statementsFor(schema string) *statements {
	if schema == "" {
		return defaultStatements
	}
	if s, ok := otherStatements.Load(schema); ok {
		return s.(*statements)
	}
	s, _ := otherStatements.LoadOrStore(schema, newStatements(schema))
	return s.(*statements)
}

// lookupCompiled is the compiled form of a statement's text, or nil.
func lookupCompiled(text string) *positional {
	if p := compiled[text]; p != nil {
		return p
	}
	if p, ok := compiledOther.Load(text); ok {
		return p.(*positional)
	}
	return nil
}

// store records p as text's compiled form for s's schema.
func (s *statements) store(text string, p *positional) {
	if s.schema == "" {
		compiled[text] = p
		return
	}
	compiledOther.Store(text, p)
}

// positional is a statement rewritten with $n ordinals.
type positional struct {
	sql   string
	names []string // names[i] is bound to $(i+1)
}

// namedParam finds the candidate @names of a statement (in comments too:
// those the rewriter does not bind are dropped).
var namedParam = regexp.MustCompile(`@[A-Za-z_][A-Za-z0-9_]*`)

// statement is the text of sql/name.sql for s's schema, compiled; a
// missing file or a statement the rewriter refuses is a build mistake,
// caught by the first test that loads the package.
func (s *statements) statement(name string) string {
	text := qualify(statementText(name), s.schema)
	p, err := compile(text)
	if err != nil {
		panic(fmt.Sprintf("pgrouter: statement %s: %v", name, err))
	}
	s.store(text, p)
	return text
}

// lockForms renders sql/name.sql, whose row lock is written {lock} in
// its one place (outside comments), as two statements, compiled: wait
// locks FOR UPDATE, waiting for a row another transaction
// holds; skip locks FOR UPDATE SKIP LOCKED, leaving such a row alone. A
// heartbeat round sends the skipping forms: it runs on the connection
// that every Run and KeepAlive of the process take turns on, so a row
// held elsewhere (an operator's statement, a caller's transaction) must
// never hold that connection.
func (s *statements) lockForms(name string) (wait, skip string) {
	text := qualify(statementText(name), s.schema)
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
		s.store(out, p)
		if s.schema == "" {
			lockFormsOf[name+lock] = out
		}
		return out
	}
	return render("FOR UPDATE"), render("FOR UPDATE SKIP LOCKED")
}

// lockFormsOf is each form lockForms rendered for the default schema,
// keyed by the statement's name and its lock (for tests: Statement).
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
	p := lookupCompiled(sql)
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

// statements are the statements of one schema (Options.Schema): every
// file of sql/ with its schemaMarker replaced (qualify), compiled once.
type statements struct {
	schema string // "" for the connection's search_path

	claimLock            string
	nextDue              string
	settleExpired        string
	settleScheduled      string
	purgeDue             string
	purgeAbandoned       string
	periodicPrune        string
	vacuumDue            string
	vacuumJobs           string
	analyzeJobs          string
	lockRow              string
	lockRowOfToken       string
	endLease             string
	heartbeatLease       string
	heartbeatMany        string
	endLeases            string
	endLeasesSkipping    string
	handBackMany         string
	handBackManySkipping string
	inspectLeases        string
	leasesEnded          string
	writerOf             string
	txPending            string
	abandon              string
	asyncCommit          string
	handBackClaim        string
	undoClaimExpiry      string
	insertJobs           string
	insertNewJobs        string // insertJobs without ON CONFLICT: Router.insertRoomed
	getJob               string
	cancelJobs           string
	statsByState         string
	jobsAnalyzed         string
	jitOff               string
	fenceAdmit           string
	fenceHighest         string
	lockTokens           string
	raiseToken           string
	notifyQueue          string
	listJobs             string
	listJobsPrefix       string
	listJobsKinds        string
	settleJobs           string
	retryJobs            string
	runNowJobs           string
	deleteJobs           string
	pauseQueue           string
	queuePaused          string
	readyHead            string
	queuesStats          string
	queuesPaused         string
	listLeases           string
	leasesPage           string
	historyAdd           string
	historyRead          string
	addPeriodic          string
	takeTick             string
	tickCommit           string
	readClock            string
	clientUnfinished     string // whether a Client has an unfinished job (Drained)

	claims sync.Map // k -> the claim statement for k kinds (claim)
}

// newStatements compiles the statements of schema.
func newStatements(schema string) *statements {
	s := &statements{schema: schema}
	// Claims (claim.go).
	s.claimLock = s.statement("claim_lock")
	s.nextDue = s.statement("next_due")

	// Settling and maintenance (settle.go).
	s.settleExpired = s.statement("settle_expired")
	s.settleScheduled = s.statement("settle_scheduled")
	s.purgeDue = s.statement("purge")
	s.purgeAbandoned = s.statement("purge_abandoned")
	s.periodicPrune = s.statement("periodic_prune")
	s.vacuumDue = s.statement("vacuum_due")
	s.vacuumJobs = s.statement("vacuum")
	s.analyzeJobs = s.statement("analyze")

	// Lease operations (lease.go, leasestatement.go, keepalive.go, completetx.go, snooze.go).
	s.lockRow = s.statement("lease_lock")
	s.lockRowOfToken = s.statement("lease_lock_of_token")
	s.endLease = s.statement("lease_end")
	s.heartbeatLease = s.statement("lease_heartbeat")
	s.heartbeatMany = s.statement("leases_heartbeat")
	// Waiting for a row another transaction holds, and skipping it (a
	// heartbeat round's: see lockForms).
	s.endLeases, s.endLeasesSkipping = s.lockForms("leases_end")
	s.handBackMany, s.handBackManySkipping = s.lockForms("leases_hand_back")
	s.inspectLeases = s.statement("leases_inspect")
	s.leasesEnded = s.statement("leases_ended")
	s.writerOf = s.statement("writer_of")
	s.txPending = s.statement("tx_pending")

	// Unknown outcomes (outcome.go).
	s.abandon = s.statement("abandon")
	s.asyncCommit = s.statement("async_commit")
	s.handBackClaim = s.statement("claim_hand_back")
	s.undoClaimExpiry = s.statement("claim_undo_expiry")

	// Jobs (enqueue.go, jobs.go), fences, tokens, wake-ups.
	s.insertJobs = s.statement("jobs_insert")
	s.insertNewJobs = s.statement("jobs_insert_new")
	s.getJob = s.statement("job_get")
	s.cancelJobs = s.statement("jobs_cancel")
	s.statsByState = s.statement("job_stats")
	s.jobsAnalyzed = s.statement("jobs_analyzed")
	s.jitOff = s.statement("jit_off")
	s.fenceAdmit = s.statement("fence")
	s.fenceHighest = s.statement("fence_highest")
	s.lockTokens = s.statement("tokens_lock")
	s.raiseToken = s.statement("tokens_raise")
	s.notifyQueue = s.statement("notify")

	// The operator's side (admin.go).
	s.listJobs = s.statement("jobs_list")
	s.listJobsPrefix = s.statement("jobs_list_prefix")
	s.listJobsKinds = s.statement("jobs_list_kinds")
	s.settleJobs = s.statement("jobs_settle")
	s.retryJobs = s.statement("jobs_retry")
	s.runNowJobs = s.statement("jobs_run_now")
	s.deleteJobs = s.statement("jobs_delete")
	s.pauseQueue = s.statement("queue_pause")
	s.queuePaused = s.statement("queue_paused")
	s.readyHead = s.statement("ready_head")
	s.queuesStats = s.statement("queues_stats")
	s.queuesPaused = s.statement("queues_paused")
	s.listLeases = s.statement("leases_list")
	s.leasesPage = s.statement("leases_page")
	s.historyAdd = s.statement("history_add")
	s.historyRead = s.statement("history_read")

	// Periodic jobs (periodic.go).
	s.addPeriodic = s.statement("periodic_add")
	s.takeTick = s.statement("periodic_tick")
	s.tickCommit = s.statement("periodic_tick_commit")
	s.readClock = s.statement("periodic_clock")

	// A Client's Drained (drained.go).
	s.clientUnfinished = s.statement("client_unfinished")
	return s
}
