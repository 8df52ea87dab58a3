package pgrouter

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The jobs table's dead tuples, and vacuum.
//
// Every job leaves dead row versions behind (pending, then leased, then
// finished or deleted: a change of state moves the row between partial
// indexes, so no update is HOT), and each leaves an entry in the index
// it left. A claim walks the index of pending jobs from its start, where
// the entries of the jobs already claimed lie: dead, but there until a
// vacuum removes them (an entry once found dead is only marked so: the
// walk still reads its page). After a million jobs drained that is
// thousands of pages, over 10ms for every claim, however few jobs are
// left. Autovacuum removes them, but it visits a database once per
// autovacuum_naptime (a minute by default, a server-wide setting) and
// may be busy with other tables for longer (River #59). So the Router
// vacuums the table itself when the statistics show enough dead tuples,
// as Que's and River's users do from a clock process, and analyzes it
// (with the vacuum, or alone when enough rows changed): each connection
// keeps its plans of the statements until the table's statistics change,
// and a plan made while the table was tiny may scan the whole queue for
// each row it looks up once it is large (autoanalyze comes with
// autovacuum, as late).
//
// A snapshot kept open (a long REPEATABLE READ transaction, say) keeps
// every tuple dead since it began: no vacuum can remove them, and every
// claim visits each of them. That cost is PostgreSQL's, not the
// Router's; once the snapshot ends, the first walk marks the entries and
// the next vacuum removes them. While a snapshot older than its last
// vacuum is open, the Router does not vacuum: nothing would be removed,
// and each vacuum reads the table and takes a core from the claims.

// vacuumMinDead is how many dead tuples the jobs table must have for the
// maintenance loop to vacuum it: at ~150 entries per index page, a claim
// walks a few dozen pages of them at most.
const vacuumMinDead = 10000

// vacuumMinInterval is the least time between the end of a vacuum of the
// jobs table (anyone's) and the start of the next one by the Router;
// vacuumSpacing: the Router also waits vacuumSpacing times its own last
// vacuum's duration after it, so vacuums take at most a fifth of one
// connection's time.
const (
	vacuumMinInterval = 5 * time.Second
	vacuumSpacing     = 4
)

// vacuumCheck is how often the Router reads the table's statistics.
const vacuumCheck = time.Second

// analyzeMinChanged is how many rows of the jobs table (and a tenth of
// its live rows) must have changed since its last ANALYZE for the
// maintenance loop to analyze it: a queue grown by enqueues alone leaves
// no dead tuples, and its plans must follow its size all the same.
const analyzeMinChanged = 10000

// vacuumLoop vacuums and analyzes the jobs table when it is due
// (vacuum_due.sql), on a connection of the pool, until ctx is done (a
// vacuum in progress then is canceled). Errors wait for the next check.
func (r *Router[T]) vacuumLoop(ctx context.Context) {
	t := time.NewTicker(vacuumCheck)
	defer t.Stop()
	var (
		next      time.Time
		lastStart *time.Time // the database's clock at this Router's last vacuum
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Now().Before(next) {
			continue
		}
		var vacuum, analyze bool
		var now time.Time
		err := r.db.QueryRow(ctx, r.st.vacuumDue, args{"min_dead": vacuumMinDead, "min_changed": analyzeMinChanged,
			"interval_us": vacuumMinInterval.Microseconds(), "last_start": lastStart}).Scan(&vacuum, &analyze, &now)
		if err != nil || !vacuum && !analyze {
			continue
		}
		stmt := r.st.vacuumJobs
		if vacuum {
			lastStart = &now
		} else {
			stmt = r.st.analyzeJobs
		}
		start := time.Now()
		_, _ = r.db.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol)
		next = time.Now().Add(vacuumSpacing * time.Since(start))
	}
}
