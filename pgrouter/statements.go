package pgrouter

import (
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The statements pgrouter runs, each whole in a file of sql/ (its doc at
// its head), with named parameters (@name, bound with pgx.StrictNamedArgs:
// a missing or extra name is an error, not a NULL). The rules the lease
// statements share are SQL functions of migration 0003, written once:
// leaserouter_lease_valid (the one invariant) and leaserouter_end_lease
// (how a lease ends and where its job goes: requeued, scheduled after a
// backoff, or dead); and leaserouter_past_retention (a finished job past
// its retention, as good as purged), for the job statements.

//go:embed sql/*.sql
var statementFiles embed.FS

// statement is the text of sql/name.sql; a missing file is a build
// mistake, caught by the first test that loads the package.
func statement(name string) string {
	b, err := statementFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(fmt.Sprintf("pgrouter: statement %s: %v", name, err))
	}
	return string(b)
}

// args are a statement's named parameters.
type args = pgx.StrictNamedArgs

var (
	// Claims (claim.go).
	claimLock = statement("claim_lock")
	claimJobs = statement("claim")
	nextDue   = statement("next_due")

	// Settling and maintenance (settle.go).
	settleExpired   = statement("settle_expired")
	settleScheduled = statement("settle_scheduled")
	purgeDue        = statement("purge")
	purgeAbandoned  = statement("purge_abandoned")

	// Lease operations (lease.go, transition.go, keepalive.go, completetx.go).
	lockRow        = statement("lease_lock")
	lockRowOfToken = statement("lease_lock_of_token")
	endLease       = statement("lease_end")
	heartbeatLease = statement("lease_heartbeat")
	endLeases      = statement("leases_end")
	heartbeatMany  = statement("leases_heartbeat")
	handBackMany   = statement("leases_hand_back")
	inspectLeases  = statement("leases_inspect")
	writerOf       = statement("writer_of")
	txPending      = statement("tx_pending")

	// Unknown outcomes (outcome.go).
	abandon         = statement("abandon")
	asyncCommit     = statement("async_commit")
	handBackClaim   = statement("claim_hand_back")
	undoClaimExpiry = statement("claim_undo_expiry")

	// Jobs (enqueue.go, jobs.go), fences, tokens, wake-ups.
	insertJobs   = statement("jobs_insert")
	getJob       = statement("job_get")
	cancelJob    = statement("job_cancel")
	statsByState = statement("job_stats")
	fenceAdmit   = statement("fence")
	fenceHighest = statement("fence_highest")
	lockTokens   = statement("tokens_lock")
	raiseToken   = statement("tokens_raise")
	notifyQueue  = statement("notify")
)
