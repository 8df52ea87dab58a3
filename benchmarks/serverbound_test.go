package benchmarks

// The server-only bound: how fast the server alone drains a queue with
// pgrouter's own statements, with no client, no driver and no network in
// the way. A procedure (probeProcedure) runs, inside the server, the
// round trips Run's workers make for a no-op workload: each one
// transaction of claim_lock.sql (the claim's advisory lock), leases_end.sql
// (the previous claim's leases completed, its waiting lock form),
// settle_expired.sql, settle_scheduled.sql, claim.sql (one kind: a
// Router's claim, up to probeBatch jobs) and next_due.sql, then a commit,
// then a purge.sql of its own and a commit, until a claim finds nothing
// and no lease is left to end. Same migrated table and indexes, same
// server settings (fsync on) as the comparison with River:
//
//	cd benchmarks && go test -run '^$' -bench '^BenchmarkServerBound$' -benchtime 30000x -count 3
//
// The statements are pgrouter's files themselves (pgrouter/sql, read from
// the directory of the pgrouter package this test is built with, the
// working tree's under go.work), rendered as pgrouter renders them (the
// claim's one arm, the {lock} placeholder) and prepared on each backend's
// connection as pgx prepares them (so each keeps its plans as a client's
// connection does); the procedure runs them with EXECUTE. A change to
// those files is measured as it is, with nothing to copy here. A
// statement that gains a parameter fails the probe until probeArgs says
// what the procedure binds to it; a new statement in Run's round trip
// goes into probeRoundTrip.
//
// Client, driver and server share the machine's cores in the real runs,
// so the whole system cannot reach this bound; it says how far from the
// server alone a side is (BenchmarkBoundFraction).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// probeBatch is the claim's batch: pgrouter's default Batch ceiling.
const probeBatch = 256

// probeStatement is one of pgrouter's statements as the probe prepares
// it: its name (the file's), its text with $n ordinals, and the
// procedure's expressions bound to them, in order.
type probeStatement struct {
	name, sql string
	names     []string // the parameters' names, in order
	args      []string
}

// probeArgs are the procedure's expressions for the statements' named
// parameters (the procedure's variables: see probeProcedure).
var probeArgs = map[string]string{
	"id":           "claim_id", // claim_lock.sql
	"claim":        "claim_id",
	"queue":        "q",
	"n":            "n",
	"worker":       "'probe'",
	"lease_us":     "30000000", // the default LeaseDuration
	"kind_1":       "''",       // a Router's jobs have no kind
	"ids":          "ids",
	"tokens":       "tokens",
	"reason":       "'completed'",
	"accept_ended": "true", // as Run's completions
	"retention_us": "keep_us",
	"op":           "claim_id", // leases_end.sql's statement id: one per round, as Run's per statement
	"limit":        "1000",     // settleLimit
}

// probeRoundTrip names the statements of the procedure's round trip, in
// Run's order (claim.go's claimBatch), and the purge.
var probeRoundTrip = []string{"claim_lock", "leases_end", "settle_expired", "settle_scheduled", "claim", "next_due", "purge"}

// pgrouterSQLDir is the sql directory of the pgrouter package this test
// is built with (found from the source file of pgrouter.Migrate), or the
// working tree's beside this module.
func pgrouterSQLDir() string {
	f := runtime.FuncForPC(reflect.ValueOf(pgrouter.Migrate).Pointer())
	if f != nil {
		file, _ := f.FileLine(f.Entry())
		dir := filepath.Join(filepath.Dir(file), "sql")
		if _, err := os.Stat(filepath.Join(dir, "claim.sql")); err == nil {
			return dir
		}
	}
	return filepath.Join("..", "pgrouter", "sql")
}

// probeStatements renders and compiles the statements of probeRoundTrip
// from pgrouter's files.
func probeStatements() ([]probeStatement, error) {
	dir := pgrouterSQLDir()
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name+".sql"))
		// schema.go's qualify, for the default schema: the marker goes
		return strings.ReplaceAll(string(b), "/*schema*/", ""), err
	}
	var out []probeStatement
	for _, name := range probeRoundTrip {
		text, err := read(name)
		if err != nil {
			return nil, err
		}
		switch name {
		case "claim": // claimsql.go's renderClaim, for one kind
			arm, err := read("claim_arm")
			if err != nil {
				return nil, err
			}
			text = strings.Replace(text, "\n{arms}\n", "\n"+strings.TrimRight(strings.ReplaceAll(uncommented(arm), "{n}", "1"), "\n")+"\n", 1)
		case "leases_end": // statements.go's lockForms, the waiting form
			text = renderLock(text, "FOR UPDATE")
		}
		if p := placeholder.FindString(uncommented(text)); p != "" {
			return nil, fmt.Errorf("sql/%s.sql: placeholder %s: the probe does not render it", name, p)
		}
		s, err := compileProbe(name, text)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// placeholder is a template's placeholder ({arms}, {lock}, {n}).
var placeholder = regexp.MustCompile(`\{[a-z]+\}`)

// uncommented is text without its comment lines.
func uncommented(text string) string {
	var b strings.Builder
	for l := range strings.Lines(text) {
		if !strings.HasPrefix(l, "--") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// renderLock writes lock for the {lock} of text's code lines.
func renderLock(text, lock string) string {
	var b strings.Builder
	for l := range strings.Lines(text) {
		if !strings.HasPrefix(l, "--") {
			l = strings.Replace(l, "{lock}", lock, 1)
		}
		b.WriteString(l)
	}
	return b.String()
}

// compileProbe rewrites text's @names as $n ordinals, as pgrouter does
// (pgx's rewriter), and binds each to its expression of probeArgs.
func compileProbe(name, text string) (probeStatement, error) {
	probe := pgx.NamedArgs{}
	for _, m := range regexp.MustCompile(`@[A-Za-z_][A-Za-z0-9_]*`).FindAllString(text, -1) {
		probe[m[1:]] = m[1:]
	}
	sql, names, err := probe.RewriteQuery(context.Background(), nil, text, nil)
	if err != nil {
		return probeStatement{}, fmt.Errorf("sql/%s.sql: %w", name, err)
	}
	s := probeStatement{name: name, sql: sql}
	for _, n := range names {
		e, ok := probeArgs[n.(string)]
		if !ok {
			return probeStatement{}, fmt.Errorf("sql/%s.sql: parameter @%s: the probe binds nothing to it (probeArgs)", name, n)
		}
		s.names = append(s.names, n.(string))
		s.args = append(s.args, e)
	}
	return s, nil
}

// call is the procedure's dynamic SQL running s's prepared statement
// (probe_<name>) with its arguments: a format() expression.
func (s probeStatement) call() string {
	if len(s.args) == 0 {
		return fmt.Sprintf("'EXECUTE probe_%s'", s.name)
	}
	return fmt.Sprintf("format('EXECUTE probe_%s(%s)', %s)", s.name,
		strings.TrimSuffix(strings.Repeat("%L, ", len(s.args)), ", "), strings.Join(s.args, ", "))
}

// probeProcedure is the probe, leaserouter_probe_drain(q, n, keep_us,
// done): it drains queue q in claims of up to n, ending leases with
// retention keep_us (microseconds; 0 purges at once), and returns the
// number of leases it completed. Each backend takes claim ids of its
// own (its pid in the high half).
func probeProcedure(st []probeStatement) string {
	calls := map[string]string{}
	for _, s := range st {
		calls[s.name] = s.call()
	}
	return `
CREATE OR REPLACE PROCEDURE leaserouter_probe_drain(q text, n int, keep_us bigint, INOUT done bigint DEFAULT 0)
LANGUAGE plpgsql AS $$
DECLARE
	ids text[] := '{}';
	tokens bigint[] := '{}';
	next_ids text[];
	next_tokens bigint[];
	r record;
	claim_id bigint := pg_backend_pid()::bigint << 32;
BEGIN
	LOOP
		claim_id := claim_id + 1;
		EXECUTE ` + calls["claim_lock"] + `;
		IF cardinality(ids) > 0 THEN
			FOR r IN EXECUTE ` + calls["leases_end"] + ` LOOP
				done := done + 1;
			END LOOP;
		END IF;
		EXECUTE ` + calls["settle_expired"] + `;
		EXECUTE ` + calls["settle_scheduled"] + `;
		next_ids := '{}';
		next_tokens := '{}';
		FOR r IN EXECUTE ` + calls["claim"] + ` LOOP
			next_ids := next_ids || r.id;
			next_tokens := next_tokens || r.token;
		END LOOP;
		EXECUTE ` + calls["next_due"] + `;
		COMMIT;
		EXECUTE ` + calls["purge"] + `;
		COMMIT;
		EXIT WHEN cardinality(ids) = 0 AND cardinality(next_ids) = 0;
		ids := next_ids;
		tokens := next_tokens;
	END LOOP;
END $$`
}

// boundRetentions are the retentions the bound runs at, as
// pgrouterRetentions (the default's keep_us is DefaultRetention's).
var boundRetentions = []struct {
	name   string
	keepUS int64
}{{"Retention=default", (10 * time.Minute).Microseconds()}, {"Retention=-1", 0}}

// BenchmarkServerBound: the probe on 1 and 2 backends at once (2: the
// machine's cores, and Run's 2 workers), at the default Retention and at
// -1; b.N jobs enqueued by pgrouter first; jobs/s from the first CALL to
// the last one's return.
func BenchmarkServerBound(b *testing.B) {
	for _, ret := range boundRetentions {
		for _, backends := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/backends=%d", ret.name, backends), func(b *testing.B) {
				rate, wal := serverBoundJobs(b, pgtest.New(b), b.N, backends, ret.keepUS, nil)
				b.ReportMetric(rate, "jobs/s")
				b.ReportMetric(wal, "drain-WAL-B/job")
			})
		}
	}
}

// TestServerBoundDrains runs the probe on a few jobs at both retentions:
// every job is completed exactly once, and at Retention -1 deleted.
func TestServerBoundDrains(t *testing.T) {
	for _, ret := range boundRetentions {
		t.Run(ret.name, func(t *testing.T) {
			rate, wal := serverBoundJobs(t, pgtest.New(t), 1000, 2, ret.keepUS, nil)
			require.Positive(t, rate)
			require.Positive(t, wal)
		})
	}
}

// serverBoundJobs enqueues n no-op jobs with pgrouter on db, drains them
// with the probe on the given number of backends (w, if not nil,
// measuring the drain), checks every job was
// completed once and none is left unfinished (none at all when keepUS is
// 0, after a last purge), and returns jobs/s and the WAL bytes per job
// of the drain (the last purge included: compare drain-WAL-B/job of
// BenchmarkWAL's pgrouter sides, which the probe should match closely
// if it does what Run does).
func serverBoundJobs(tb testing.TB, db *pgxpool.Pool, n, backends int, keepUS int64, w window) (rate, walPerJob float64) {
	st, err := probeStatements()
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	retention := time.Duration(-1)
	if keepUS > 0 {
		retention = time.Duration(keepUS) * time.Microsecond
	}
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{Retention: retention})
	if err != nil {
		tb.Fatal(err)
	}
	// The Router only migrates and enqueues: closed before the drain, so
	// its maintenance loop does not share the server with the probe.
	if err := enqueueSpecs(ctx, r, n); err != nil {
		tb.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Exec(ctx, probeProcedure(st)); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Exec(ctx, "ANALYZE leaserouter_jobs"); err != nil {
		tb.Fatal(err)
	}
	conns := make([]*pgxpool.Conn, backends)
	for i := range conns {
		if conns[i], err = db.Acquire(ctx); err != nil {
			tb.Fatal(err)
		}
		defer conns[i].Release()
		for _, s := range st {
			if _, err := conns[i].Exec(ctx, "PREPARE probe_"+s.name+" AS "+s.sql); err != nil {
				tb.Fatalf("prepare %s: %v", s.name, err)
			}
		}
	}
	done := make([]int64, backends)
	var walStart string
	if err := db.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walStart); err != nil {
		tb.Fatal(err)
	}
	resetTimer(tb)
	if w != nil {
		w.start()
	}
	start := time.Now()
	var g errgroup.Group
	for i, c := range conns {
		g.Go(func() error {
			return c.QueryRow(ctx, "CALL leaserouter_probe_drain($1, $2, $3)", pgrouter.DefaultQueue, probeBatch, keepUS).Scan(&done[i])
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
	elapsed := time.Since(start)
	if w != nil {
		w.stop(n)
	}
	var total int64
	for _, d := range done {
		total += d
	}
	// What a purge left to the other backend's (one purge of a queue at
	// a time: purge.sql), as the Router's next maintenance round would.
	purge := st[len(st)-1] // probeRoundTrip's last
	var purgeArgs []string // literals: EXECUTE takes no bind parameters
	for _, name := range purge.names {
		purgeArgs = append(purgeArgs, map[string]string{"queue": "'" + pgrouter.DefaultQueue + "'", "limit": "1000"}[name])
	}
	for keepUS == 0 {
		tag, err := conns[0].Exec(ctx, "EXECUTE probe_purge("+strings.Join(purgeArgs, ", ")+")")
		if err != nil {
			tb.Fatal(err)
		}
		if tag.RowsAffected() == 0 {
			break
		}
	}
	var wal float64
	if err := db.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", walStart).Scan(&wal); err != nil {
		tb.Fatal(err)
	}
	var left, unfinished int64
	if err := db.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE state <> 'succeeded') FROM leaserouter_jobs").Scan(&left, &unfinished); err != nil {
		tb.Fatal(err)
	}
	if total != int64(n) || unfinished != 0 || (keepUS == 0 && left != 0) {
		tb.Fatalf("probe completed %d of %d jobs; %d rows left, %d unfinished", total, n, left, unfinished)
	}
	return float64(n) / elapsed.Seconds(), wal / float64(n)
}

// enqueueSpecs enqueues n no-op jobs with EnqueueMany, enqueueBatch a
// call (IDs j0...).
func enqueueSpecs(ctx context.Context, r *pgrouter.Router[int], n int) error {
	specs := make([]leaserouter.JobSpec[int], 0, enqueueBatch)
	for i := range n {
		specs = append(specs, leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i), Payload: i})
		if len(specs) == cap(specs) || i == n-1 {
			if _, err := r.EnqueueMany(ctx, specs); err != nil {
				return err
			}
			specs = specs[:0]
		}
	}
	return nil
}
