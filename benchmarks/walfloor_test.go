package benchmarks

// The WAL floor of a leased job on PostgreSQL: what the server must log
// for a job's life in the least database a leased job queue with
// pgrouter's guarantees keeps, measured next to River and pgrouter in
// the same run on the same cluster:
//
//	cd benchmarks && go test -run '^$' -bench '^BenchmarkWALFloor$' -benchtime 30000x -count 2 -timeout 60m -v
//
// The floor is bare SQL, no pgrouter code: a table created fresh with
// only the columns a job needs (queue, id, an empty payload, state,
// priority, ready time, enqueue order, fencing token, owner, attempt,
// lease expiry, purge time), the jobs inserted in batches of
// enqueueBatch, and a drain by two worker connections, each a loop of
// one transaction per round trip that completes the batch it holds and
// claims up to floorClaim pending rows in ready order (FOR UPDATE SKIP
// LOCKED, as pgrouter's Run claims), until nothing is left. Its WAL is
// taken as BenchmarkWAL takes it (CHECKPOINT, pg_current_wal_lsn around
// the enqueue and the drain, pg_walinspect's breakdown in the log). The
// variants (floorVariants) say what each keeps and gives up.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// floorClaim is the most rows a floor worker claims a round trip;
// floorWorkers the worker connections draining (pgrouter's Run defaults).
const (
	floorClaim   = 256
	floorWorkers = 2
)

// floorVariant is one bare-SQL queue.
type floorVariant struct {
	name       string
	fillfactor int  // the table's (100: PostgreSQL's default)
	lockFirst  bool // the completion locks its rows (FOR UPDATE) before it writes them, as pgrouter's does
	hot        bool // no index on state, lease or purge time: the claim is a HOT update when the page has room
	deletes    bool // the completion deletes the row (Retention -1) instead of marking it finished
	list       listShape
}

// listShape is which of List's indexes a floorVariant keeps.
type listShape int

const (
	listNone        listShape = iota // none: List's pages would read the whole queue
	listFull                         // every page bounded: by state in enqueue order, by state and ID, the leased in enqueue order
	listLeaseSorted                  // no index of the leased in enqueue order: their pages read and sort every lease in flight
	listKeyPrefix                    // no index by state and ID: an ID prefix reads the primary key (IDs in "C" collation) across every state
)

// floorVariants are the queues BenchmarkWALFloor measures:
//
//   - rules: the indexes the contract needs: the primary key (queue, id)
//     (IDs unique per queue), pending rows in ready order (partial),
//     leased rows by lease expiry (partial: expired leases found without
//     a scan), finished rows by purge time (partial: retention). The
//     claim locks and updates (state, token, owner, attempt, lease
//     expiry); the completion locks, then updates to finished (default
//     retention) or deletes (Retention -1). The floor of pgrouter's
//     design: one row per job, its state in the row.
//   - rules-ff50, rules-ff30: rules with the table's fillfactor at 50 and
//     30, so the claim's and the completion's row versions can land on
//     the row's own page (an update on one page is logged with the
//     prefix and suffix it shares with the old version left out).
//   - nolock: rules with the completion a plain UPDATE (or DELETE) of
//     the rows whose token, state and expiry still match, no lock taken
//     before it; the claim as it must be (SKIP LOCKED needs its lock).
//     nolock-ff30: both levers at once, the least design 1 can write.
//   - hot, hot-ff50: the least a design could write while keeping
//     expiry findable: the only indexes the primary key and the ready
//     order over every row (no partial index, no state in any key), so
//     a claim changes no indexed column (a HOT update, given room on the
//     page); a claim skips leased rows by a filter on the heap, expired
//     leases would be found by walking the ready order's leased rows,
//     and the completion deletes, with no lock before it. Not a proposal: each claim walks past
//     every lease in flight ahead of the pending rows, an expiry pass
//     reads every lease in flight, and finished jobs cannot be kept
//     (no retention: Retention -1 only).
//   - list-ff50, list-nolock-ff30: rules-ff50 and nolock-ff30 with the
//     indexes a List of jobs by state, in enqueue order and by ID prefix,
//     needs to read a page in a time that grows neither with the table
//     nor with the leases in flight (listFull): the jobs not leased by
//     (queue, state, enqueue order) and by (queue, state, ID), the leased
//     ones by (queue, enqueue order, ID), each with the least key
//     (pgrouter's carry more columns). A leased job has one List entry,
//     not two, so a claim and each heartbeat (a new row version: its
//     lease expiry is indexed) enter one. The floor of pgrouter's
//     design (one row a job, updated in place, btree indexes) with
//     every page of the console bounded.
//   - list-leasesorted-*, list-keyprefix-*: list-ff50 and
//     list-nolock-ff30 giving up one of those bounds each, to show what
//     it is worth: the leased page, and a leased ID-prefix page, reading
//     and sorting every lease in flight of the queue (listLeaseSorted:
//     the lease expiry index gains the queue),
//     or an ID prefix read from the primary key across every state, the
//     IDs in "C" collation (listKeyPrefix: a rare state's page under a
//     common prefix reads every job with that prefix).
var floorVariants = []floorVariant{
	{name: "rules/Retention=default", fillfactor: 100, lockFirst: true},
	{name: "rules/Retention=-1", fillfactor: 100, lockFirst: true, deletes: true},
	{name: "rules-ff50/Retention=default", fillfactor: 50, lockFirst: true},
	{name: "rules-ff50/Retention=-1", fillfactor: 50, lockFirst: true, deletes: true},
	{name: "rules-ff30/Retention=default", fillfactor: 30, lockFirst: true},
	{name: "rules-ff30/Retention=-1", fillfactor: 30, lockFirst: true, deletes: true},
	{name: "nolock/Retention=default", fillfactor: 100},
	{name: "nolock/Retention=-1", fillfactor: 100, deletes: true},
	{name: "nolock-ff30/Retention=default", fillfactor: 30},
	{name: "nolock-ff30/Retention=-1", fillfactor: 30, deletes: true},
	{name: "list-ff50/Retention=default", fillfactor: 50, lockFirst: true, list: listFull},
	{name: "list-ff50/Retention=-1", fillfactor: 50, lockFirst: true, deletes: true, list: listFull},
	{name: "list-nolock-ff30/Retention=default", fillfactor: 30, list: listFull},
	{name: "list-nolock-ff30/Retention=-1", fillfactor: 30, deletes: true, list: listFull},
	{name: "list-leasesorted-ff50/Retention=default", fillfactor: 50, lockFirst: true, list: listLeaseSorted},
	{name: "list-leasesorted-nolock-ff30/Retention=default", fillfactor: 30, list: listLeaseSorted},
	{name: "list-keyprefix-ff50/Retention=default", fillfactor: 50, lockFirst: true, list: listKeyPrefix},
	{name: "list-keyprefix-nolock-ff30/Retention=default", fillfactor: 30, list: listKeyPrefix},
	{name: "hot/Retention=-1", fillfactor: 100, hot: true, deletes: true},
	{name: "hot-ff50/Retention=-1", fillfactor: 50, hot: true, deletes: true},
}

// BenchmarkWALFloor: WAL per job, enqueue + drain, River at MaxWorkers
// 100, pgrouter at each of pgrouterRetentions, then each of
// floorVariants, every side after River as a ratio to River's WAL of the
// same run (xRiver100-WAL; with -count above 1, the least of River's runs:
// riverLeast), the floors also to pgrouter's at the same
// retention (xFloor-pgrouter: pgrouter's WAL over the floor's). The
// floors also report their table's size per job after the enqueue
// (heap-B/job, index-B/job): what a lower fillfactor costs.
func BenchmarkWALFloor(b *testing.B) {
	var river float64
	b.Run("river/MaxWorkers=100", func(b *testing.B) {
		f := riverWAL(b, b.N, 100)
		f.report(b)
		river = riverLeast(river, f.perJob())
	})
	ratio := func(b *testing.B, f walFigures) {
		if river > 0 {
			b.ReportMetric(f.perJob()/river, "xRiver100-WAL")
		}
	}
	pgrouter := map[string]float64{} // pgrouter's WAL-B/job in this run, by retention name
	for _, retention := range pgrouterRetentions {
		b.Run("pgrouter/"+retention.name, func(b *testing.B) {
			f := pgrouterWAL(b, b.N, retention.d)
			f.report(b)
			ratio(b, f)
			pgrouter[retention.name] = f.perJob()
		})
	}
	for _, v := range floorVariants {
		b.Run("floor/"+v.name, func(b *testing.B) {
			f, size := floorWAL(b, b.N, v)
			f.report(b)
			ratio(b, f)
			_, retention, _ := strings.Cut(v.name, "/")
			if p := pgrouter[retention]; p > 0 {
				b.ReportMetric(p/f.perJob(), "xFloor-pgrouter")
			}
			b.ReportMetric(float64(size.heap)/float64(b.N), "heap-B/job")
			b.ReportMetric(float64(size.index)/float64(b.N), "index-B/job")
		})
	}
}

// TestWALFloorWorkloads runs each of floorVariants on a few jobs, so the
// suite checks the harness: every job ended (finished, or deleted at
// Retention -1), each once, and WAL measured in both phases.
func TestWALFloorWorkloads(t *testing.T) {
	const n = 700 // more than floorWorkers claims of floorClaim: both workers claim twice
	for _, v := range floorVariants {
		t.Run(v.name, func(t *testing.T) {
			f, size := floorWAL(t, n, v)
			require.Positive(t, f.enqueue, "the enqueue wrote WAL")
			require.Positive(t, f.drain, "the drain wrote WAL")
			require.Positive(t, size.heap)
			require.Positive(t, size.index)
			t.Log(f.breakdown(v.name))
		})
	}
}

// floorSize is a floor table's size after the enqueue: the heap's and
// its indexes', in bytes.
type floorSize struct{ heap, index int64 }

// floorWAL measures v's WAL for n jobs on a fresh database: the enqueue
// in batches of enqueueBatch, then floorWorkers workers until every job
// ended; it fails tb unless every job was completed exactly once.
func floorWAL(tb testing.TB, n int, v floorVariant) (walFigures, floorSize) {
	db := pgtest.New(tb)
	ctx := context.Background()
	for _, q := range v.schema() {
		if _, err := db.Exec(ctx, q); err != nil {
			tb.Fatalf("%s: %v", q, err)
		}
	}
	resetTimer(tb)
	w := startWAL(tb, db)
	for i := 0; i < n; i += enqueueBatch {
		ids := make([]string, 0, enqueueBatch)
		for j := i; j < min(n, i+enqueueBatch); j++ {
			ids = append(ids, fmt.Sprint("j", j))
		}
		if _, err := db.Exec(ctx, floorInsert, ids); err != nil {
			tb.Fatal(err)
		}
	}
	w.mark()
	var size floorSize
	if err := db.QueryRow(ctx, "SELECT pg_table_size('floor_jobs'), pg_indexes_size('floor_jobs')").Scan(&size.heap, &size.index); err != nil {
		tb.Fatal(err)
	}
	elapsed := floorDrain(tb, db, n, v)
	w.mark()
	var left, finished int
	if err := db.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE state = 3) FROM floor_jobs").Scan(&left, &finished); err != nil {
		tb.Fatal(err)
	}
	if v.deletes {
		require.Zero(tb, left, "rows left after the drain")
	} else {
		require.Equal(tb, n, finished, "finished jobs")
		require.Equal(tb, n, left, "rows")
	}
	return w.figures(n, elapsed), size
}

// The floor's states: 1 pending, 2 leased, 3 finished.
const floorInsert = `INSERT INTO floor_jobs (queue, id, state, ready_at)
	SELECT 'default', id, 1, now() FROM unnest($1::text[]) AS u(id)`

// schema is v's table, its indexes and sequences.
func (v floorVariant) schema() []string {
	collation := "" // the database's
	if v.list == listKeyPrefix {
		collation = `COLLATE "C"` // so that the primary key serves ID-prefix ranges
	}
	s := []string{
		"CREATE SEQUENCE floor_seq",
		"CREATE SEQUENCE floor_token",
		fmt.Sprintf(`CREATE TABLE floor_jobs (
			queue text NOT NULL,
			id text %s NOT NULL,
			payload bytea NOT NULL DEFAULT '',
			state smallint NOT NULL,
			priority int NOT NULL DEFAULT 0,
			ready_at timestamptz NOT NULL,
			seq bigint NOT NULL DEFAULT nextval('floor_seq'),
			token bigint NOT NULL DEFAULT 0,
			owner text NOT NULL DEFAULT '',
			attempt int NOT NULL DEFAULT 0,
			lease_expires_at timestamptz,
			purge_at timestamptz,
			PRIMARY KEY (queue, id)) WITH (fillfactor = %d)`, collation, v.fillfactor),
	}
	if v.hot {
		return append(s, "CREATE INDEX floor_ready ON floor_jobs (queue, priority DESC, ready_at, seq)")
	}
	leased := "(lease_expires_at)"
	if v.list == listLeaseSorted {
		leased = "(queue, lease_expires_at)" // the leased page reads the queue's leases
	}
	s = append(s,
		"CREATE INDEX floor_ready ON floor_jobs (queue, priority DESC, ready_at, seq) WHERE state = 1",
		"CREATE INDEX floor_leased ON floor_jobs "+leased+" WHERE state = 2",
		"CREATE INDEX floor_purge ON floor_jobs (purge_at) WHERE state = 3")
	if v.list == listNone {
		return s
	}
	s = append(s, "CREATE INDEX floor_order ON floor_jobs (queue, state, seq) WHERE state <> 2")
	if v.list != listKeyPrefix {
		s = append(s, `CREATE INDEX floor_id ON floor_jobs (queue, state, id COLLATE "C") WHERE state <> 2`)
	}
	if v.list != listLeaseSorted {
		s = append(s, `CREATE INDEX floor_leased_order ON floor_jobs (queue, seq, id COLLATE "C") WHERE state = 2`)
	}
	return s
}

// floorClaimSQL leases up to $2 pending jobs of queue $1 to worker $3,
// in ready order, skipping rows other claims hold.
const floorClaimSQL = `WITH picked AS (
	SELECT queue, id FROM floor_jobs WHERE queue = $1 AND state = 1
	ORDER BY priority DESC, ready_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE floor_jobs j SET state = 2, token = nextval('floor_token'), owner = $3, attempt = j.attempt + 1,
	lease_expires_at = now() + interval '30 seconds'
FROM picked p WHERE j.queue = p.queue AND j.id = p.id
RETURNING j.id, j.token`

// completion is v's statement ending the leases $2, $3 (IDs and tokens)
// of queue $1: each row's token, state and expiry checked with the row
// held (locked first, in ID order, or by the write itself).
func (v floorVariant) completion() string {
	// The lease's state and expiry are checked in a CASE, which no index
	// predicate or key matches: every variant finds each row by its key
	// (a plain UPDATE was otherwise planned through the partial index of
	// leased rows, reading every lease in flight).
	valid := "j.queue = $1 AND j.id = u.id AND j.token = u.token AND CASE WHEN j.state = 2 THEN j.lease_expires_at > now() ELSE false END"
	write := "UPDATE floor_jobs j SET state = 3, owner = '', lease_expires_at = NULL, purge_at = now() + interval '24 hours'"
	if v.deletes {
		write = "DELETE FROM floor_jobs j"
	}
	using := " FROM "
	if v.deletes {
		using = " USING "
	}
	if !v.lockFirst {
		return write + using + "unnest($2::text[], $3::bigint[]) AS u(id, token) WHERE " + valid
	}
	return `WITH l AS (
	SELECT j.queue, j.id FROM (SELECT * FROM unnest($2::text[], $3::bigint[]) AS u(id, token) ORDER BY id) u,
		LATERAL (SELECT * FROM floor_jobs j WHERE ` + valid + ` FOR UPDATE) j) ` + write + using + "l WHERE j.queue = l.queue AND j.id = l.id"
}

// floorDrain runs floorWorkers workers on db until the queue is empty,
// each a loop of one transaction per round trip completing what it
// holds and claiming the next batch; it returns the drain's duration
// and fails tb unless n jobs were completed, each once.
func floorDrain(tb testing.TB, db *pgxpool.Pool, n int, v floorVariant) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	complete := v.completion()
	done := make(chan error, floorWorkers)
	counts := make([]map[string]int, floorWorkers)
	start := time.Now()
	for w := range floorWorkers {
		counts[w] = map[string]int{}
		go func() { done <- floorWorker(ctx, db, fmt.Sprint("w", w), complete, counts[w]) }()
	}
	var err error
	for range floorWorkers {
		err = cmpErr(err, <-done)
	}
	elapsed := time.Since(start)
	if err != nil {
		tb.Fatal(err)
	}
	seen := map[string]int{}
	for _, c := range counts {
		for id, k := range c {
			seen[id] += k
		}
	}
	require.Len(tb, seen, n, "jobs completed")
	for id, k := range seen {
		if k != 1 {
			tb.Fatalf("job %s completed %d times", id, k)
		}
	}
	return elapsed
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// floorWorker drains on one connection of db as worker: each round trip
// is one transaction (a batch: BEGIN, the completion of the leases it
// holds, the claim, COMMIT); it returns when a claim finds nothing and
// it holds nothing, counting in completed each job whose completion
// wrote its row.
func floorWorker(ctx context.Context, db *pgxpool.Pool, worker, complete string, completed map[string]int) error {
	conn, err := pgx.ConnectConfig(ctx, db.Config().ConnConfig)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// Index scans only: a young table's statistics (or none) made the HOT
	// variant's claim a bitmap scan and a sort of the whole queue, and
	// each statement here is to read what a floor reads, no more (as
	// pgrouter's plan-shape tests keep its own). Sorts stay allowed: the
	// completion sorts its IDs, and without sorts it walked the whole
	// primary key in ID order instead.
	if _, err := conn.Exec(ctx, `SELECT set_config('enable_seqscan', 'off', false),
		set_config('enable_bitmapscan', 'off', false)`); err != nil {
		return err
	}
	var ids []string
	var tokens []int64
	for {
		var batch pgx.Batch
		batch.Queue("BEGIN")
		if len(ids) > 0 {
			held := ids
			batch.Queue(complete, "default", ids, tokens).Exec(func(ct pgconn.CommandTag) error {
				if ct.RowsAffected() != int64(len(held)) {
					return fmt.Errorf("%s: %d of %d leases ended", worker, ct.RowsAffected(), len(held))
				}
				for _, id := range held {
					completed[id]++
				}
				return nil
			})
		}
		ids, tokens = nil, nil
		batch.Queue(floorClaimSQL, "default", floorClaim, worker).Query(func(rows pgx.Rows) error {
			var id string
			var token int64
			_, err := pgx.ForEachRow(rows, []any{&id, &token}, func() error {
				ids, tokens = append(ids, id), append(tokens, token)
				return nil
			})
			return err
		})
		batch.Queue("COMMIT")
		if err := conn.SendBatch(ctx, &batch).Close(); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
	}
}
