package pgrouter_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// email is a payload of kind "email", which a Router of ints cannot decode.
type email struct{ To string }

// A Router claims only jobs of its kind: a job of another kind in its
// queue is never leased by it, and no attempt of it is counted, however
// often it claims; the Router of that kind takes it.
func TestRouterClaimsOnlyItsKind(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	ints := routerOn[int](t, db, pgrouter.Options{})
	emails := routerOn[email](t, db, pgrouter.Options{Kind: "email"})
	require.NoError(t, emails.Enqueue(ctx, "e1", email{To: "a@b"}, leaserouter.WithPriority(9)))
	require.NoError(t, ints.Enqueue(ctx, "i1", 1))
	require.NoError(t, emails.Enqueue(ctx, "e2", email{To: "c@d"}))

	for range 3 {
		ls, err := ints.TryAcquireMany(ctx, "w", 10)
		if err == nil {
			require.Len(t, ls, 1)
			require.Equal(t, "i1", ls[0].JobID)
			require.NoError(t, ls[0].Release(ctx))
		} else {
			require.ErrorIs(t, err, leaserouter.ErrNoJob)
		}
	}
	for _, id := range []string{"e1", "e2"} {
		j, ok, err := ints.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, leaserouter.StatePending, j.State, id)
		require.Zero(t, j.Attempt, "%s: no attempt burned by a Router of another kind", id)
		require.Equal(t, "email", j.Kind)
	}
	ls, err := emails.TryAcquireMany(ctx, "w", 10)
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, "e1", ls[0].JobID, "the ready order within the kind")
	require.Equal(t, email{To: "a@b"}, ls[0].Payload)
	require.Equal(t, 1, ls[0].Attempt)
}

// A Router's reads of a job of another kind return it with its Kind and
// a zero Payload, not an error for a payload of another type; its own
// jobs, and a Router of json.RawMessage, get theirs.
func TestTypedReadOfAnotherKindHasZeroPayload(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	ints := routerOn[int](t, db, pgrouter.Options{})
	emails := routerOn[email](t, db, pgrouter.Options{Kind: "email"})
	require.NoError(t, emails.Enqueue(ctx, "e", email{To: "a@b"}, leaserouter.WithMetadata(map[string]string{"k": "v"})))
	require.NoError(t, ints.Enqueue(ctx, "i", 7))

	j, ok, err := ints.Get(ctx, "e")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "email", j.Kind)
	require.Zero(t, j.Payload)
	require.Equal(t, map[string]string{"k": "v"}, j.Metadata)
	je, _, err := emails.Get(ctx, "e")
	require.NoError(t, err)
	require.Equal(t, email{To: "a@b"}, je.Payload)
	ji, _, err := emails.Get(ctx, "i")
	require.NoError(t, err)
	require.Equal(t, "", ji.Kind)
	require.Zero(t, ji.Payload)

	page, err := ints.List(ctx, leaserouter.ListParams{})
	require.NoError(t, err, "a page holding another kind's job")
	require.Len(t, page.Jobs, 2)
	require.Equal(t, "i", page.Jobs[0].ID)
	require.Equal(t, 7, page.Jobs[0].Payload)
	require.Equal(t, "email", page.Jobs[1].Kind)
	require.Zero(t, page.Jobs[1].Payload)

	rawr := routerOn[json.RawMessage](t, db, pgrouter.Options{})
	jr, _, err := rawr.Get(ctx, "e")
	require.NoError(t, err)
	require.JSONEq(t, `{"To":"a@b"}`, string(jr.Payload), "json.RawMessage takes any kind's payload")
}

// ListParams.Kinds selects the jobs of those kinds (a Router's own have
// kind ""), pages through them, and its cursor is refused under other
// kinds.
func TestListByKinds(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	ints := routerOn[int](t, db, pgrouter.Options{})
	emails := routerOn[email](t, db, pgrouter.Options{Kind: "email"})
	sms := routerOn[int](t, db, pgrouter.Options{Kind: "sms"})
	for i := range 5 {
		require.NoError(t, ints.Enqueue(ctx, fmt.Sprint("i", i), i))
		require.NoError(t, emails.Enqueue(ctx, fmt.Sprint("e", i), email{}))
		require.NoError(t, sms.Enqueue(ctx, fmt.Sprint("s", i), i))
	}
	ids := func(p leaserouter.JobPage[int]) []string {
		var out []string
		for _, j := range p.Jobs {
			out = append(out, j.ID)
		}
		return out
	}
	page, err := ints.List(ctx, leaserouter.ListParams{Kinds: []string{""}})
	require.NoError(t, err)
	require.Equal(t, []string{"i4", "i3", "i2", "i1", "i0"}, ids(page))
	page, err = ints.List(ctx, leaserouter.ListParams{Kinds: []string{"sms", "email", "sms"}, Limit: 4})
	require.NoError(t, err)
	require.Equal(t, []string{"s4", "e4", "s3", "e3"}, ids(page))
	next, err := ints.List(ctx, leaserouter.ListParams{Kinds: []string{"email", "sms"}, Cursor: page.NextCursor, Limit: 4})
	require.NoError(t, err, "the kinds in another order are the same filter")
	require.Equal(t, []string{"s2", "e2", "s1", "e1"}, ids(next))
	_, err = ints.List(ctx, leaserouter.ListParams{Kinds: []string{"email"}, Cursor: page.NextCursor})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "a cursor of other kinds")
	page, err = ints.List(ctx, leaserouter.ListParams{Kinds: []string{"sms"}, IDPrefix: "s3"})
	require.NoError(t, err)
	require.Equal(t, []string{"s3"}, ids(page))
	page, err = ints.List(ctx, leaserouter.ListParams{Kinds: []string{"none"}})
	require.NoError(t, err)
	require.Empty(t, page.Jobs)
	_, err = ints.List(ctx, leaserouter.ListParams{Kinds: []string{"a\x00"}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
}

// A lease carries its job's metadata (Lease.Metadata), and EnqueueMany
// and EnqueueTx store kind and metadata as Enqueue does.
func TestLeaseMetadataAndBatchKinds(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	emails := routerOn[email](t, db, pgrouter.Options{Kind: "email"})
	md := leaserouter.WithMetadata(map[string]string{"traceparent": "00-x"})
	_, err := emails.EnqueueMany(ctx, []leaserouter.JobSpec[email]{{ID: "a", Options: []leaserouter.EnqueueOption{md}}, {ID: "b"}})
	require.NoError(t, err)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, emails.EnqueueTx(ctx, tx, "c", email{}, md))
	require.NoError(t, tx.Commit(ctx))
	ls, err := emails.TryAcquireMany(ctx, "w", 3)
	require.NoError(t, err)
	require.Len(t, ls, 3)
	for _, l := range ls {
		j, _, err := emails.Get(ctx, l.JobID)
		require.NoError(t, err)
		require.Equal(t, "email", j.Kind, l.JobID)
		if l.JobID == "b" {
			require.Nil(t, l.Metadata())
			require.Nil(t, j.Metadata)
		} else {
			require.Equal(t, map[string]string{"traceparent": "00-x"}, l.Metadata(), l.JobID)
			require.Equal(t, l.Metadata(), j.Metadata)
		}
	}
	leases, err := emails.Leases(ctx, 10)
	require.NoError(t, err)
	require.Len(t, leases, 3)
	for _, j := range leases {
		require.Equal(t, "email", j.Kind)
	}
	var nilLease *pgrouter.Lease[email]
	require.Nil(t, nilLease.Metadata())
}

// The statements of the previous schema version (13), kept verbatim, for
// a process of that version during a rolling upgrade.
const (
	v13Insert = `WITH c AS (SELECT clock_timestamp() AS now),
old AS (
	SELECT id, token, attempt, purge_at FROM leaserouter_jobs
	WHERE queue = @queue AND id = ANY (@ids::text[]) AND state IN ('succeeded', 'failed', 'canceled')),
v AS (
	SELECT x.*, nextval('leaserouter_job_seq') AS seq
	FROM (SELECT r.id, r.priority, r.max_attempts, r.payload, r.timeout_us, c.now,
			CASE WHEN r.run_at IS NOT NULL THEN greatest(r.run_at, c.now)
				ELSE c.now + r.delay_us * interval '1 microsecond' END AS ready
		FROM unnest(@ids::text[], @priorities::bigint[], @max_attempts::integer[], @payloads::text[],
				@run_at::timestamptz[], @delay_us::bigint[], @timeout_us::bigint[])
			WITH ORDINALITY AS r(id, priority, max_attempts, payload, run_at, delay_us, timeout_us, ord), c
		ORDER BY r.ord) x),
ins AS (
	INSERT INTO leaserouter_jobs AS j (queue, id, seq, state, priority, ready_at, max_attempts, payload, timeout_us,
		timeout_of, created_at, updated_at)
	SELECT @queue, id, seq, CASE WHEN ready > now THEN 'scheduled'::leaserouter_job_state ELSE 'pending'::leaserouter_job_state END,
		priority, ready, max_attempts, payload::jsonb, timeout_us, now, now, now
	FROM v ORDER BY id
	ON CONFLICT (queue, id) DO UPDATE SET
		seq = excluded.seq, state = excluded.state, priority = excluded.priority, ready_at = excluded.ready_at,
		requeued = false, attempt = 0, max_attempts = excluded.max_attempts, token = 0, owner = '',
		lease_expires_at = NULL, ended = '', payload = excluded.payload, timeout_us = excluded.timeout_us,
		timeout_of = excluded.timeout_of,
		progress = NULL, last_error = '',
		created_at = excluded.created_at, updated_at = excluded.updated_at, purge_at = NULL
	WHERE leaserouter_past_retention(j.state, j.purge_at)
	RETURNING j.id, j.created_at, NOT (j.xmax = 0) AS replaced),
n AS (SELECT pg_notify(@channel, @queue) FROM (SELECT FROM ins LIMIT 1) one)
SELECT ins.id, ins.created_at, (SELECT count(*) FROM n), o.token, o.attempt, o.purge_at
FROM ins LEFT JOIN old o ON ins.replaced AND o.id = ins.id`
	v13Claim = `WITH picked AS (
	SELECT * FROM (SELECT queue, id, priority, ready_at, seq FROM leaserouter_jobs
		WHERE queue = @queue AND state = 'pending'
			AND NOT EXISTS (SELECT FROM leaserouter_abandoned_claims WHERE id = @claim)
			AND NOT EXISTS (SELECT FROM leaserouter_queues WHERE queue = @queue AND paused)
		ORDER BY priority DESC, ready_at, seq
		LIMIT 1024 FOR UPDATE SKIP LOCKED) w
	LIMIT (SELECT @n::bigint)),
numbered AS (
	SELECT id, nextval('leaserouter_token') AS token
	FROM (SELECT * FROM picked ORDER BY priority DESC, ready_at, seq) p),
c AS (SELECT clock_timestamp() AS now),
t AS (SELECT array_agg(id) AS ids, array_agg(token) AS tokens FROM numbered)
UPDATE leaserouter_jobs j SET
	state = 'leased', token = n.token, attempt = j.attempt + 1, owner = @worker, ended = '', claim = @claim,
	lease_expires_at = c.now + @lease_us * interval '1 microsecond', updated_at = c.now, leased_at = c.now
FROM t, unnest(t.ids, t.tokens) AS n(id, token), c
WHERE j.queue = @queue AND j.id = n.id AND n.token > 0
RETURNING j.id, j.payload, j.attempt, j.token, j.progress, j.lease_expires_at, j.updated_at, j.ready_at, j.requeued,
	CASE WHEN j.timeout_of = j.created_at THEN j.timeout_us ELSE 0 END`
)

// v13Enqueue inserts job id (payload 1) into the default queue with the
// previous version's statement, and reports whether it was inserted.
func v13Enqueue(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, id string) bool {
	t.Helper()
	rows, err := q.Query(t.Context(), v13Insert, pgx.NamedArgs{"queue": pgrouter.DefaultQueue, "channel": "leaserouter",
		"ids": []string{id}, "priorities": []int64{0}, "max_attempts": []int32{5}, "payloads": []string{"1"},
		"run_at": []*time.Time{nil}, "delay_us": []int64{0}, "timeout_us": []int64{0}})
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		n++
	}
	require.NoError(t, rows.Err())
	return n == 1
}

// A process of the previous version keeps working on this schema: its
// insert and claim run, its jobs have kind "" (a Router of this version
// with no Kind takes them), and when its insert replaces a purged job of
// another kind, the new job has kind "" and no metadata, not the purged
// job's (which would route it to a handler of another payload type).
func TestPreviousVersionOnKindSchema(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	emails := routerOn[email](t, db, pgrouter.Options{Kind: "email", Retention: time.Millisecond})
	ints := routerOn[int](t, db, pgrouter.Options{})
	require.NoError(t, emails.Enqueue(ctx, "x", email{To: "a@b"}, leaserouter.WithMetadata(map[string]string{"k": "v"})))
	l, err := emails.TryAcquire(ctx, "w")
	require.NoError(t, err)
	require.NoError(t, l.Complete(ctx))
	var purgeAt time.Time
	require.NoError(t, db.QueryRow(ctx, "SELECT purge_at FROM leaserouter_jobs WHERE id = 'x'").Scan(&purgeAt))
	awaitDBTime(t, db, purgeAt.Add(time.Millisecond))

	require.True(t, v13Enqueue(t, db, "x"), "the previous version's insert replaces the purged job's row")
	require.True(t, v13Enqueue(t, db, "y"))
	var kind string
	var meta *string
	require.NoError(t, db.QueryRow(ctx, "SELECT kind, metadata::text FROM leaserouter_jobs WHERE id = 'x'").Scan(&kind, &meta))
	require.Equal(t, "", kind, "the reused row's kind is its new job's")
	require.Nil(t, meta, "the reused row's metadata is its new job's")
	_, err = emails.TryAcquire(ctx, "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "the email Router never sees the previous version's jobs")

	rows, err := db.Query(ctx, v13Claim, pgx.NamedArgs{"queue": pgrouter.DefaultQueue, "n": 1, "worker": "old",
		"lease_us": time.Minute.Microseconds(), "claim": int64(7)})
	require.NoError(t, err)
	var claimed []string
	for rows.Next() {
		v, err := rows.Values()
		require.NoError(t, err)
		claimed = append(claimed, v[0].(string))
	}
	require.NoError(t, rows.Err())
	require.Len(t, claimed, 1, "the previous version's claim runs")
	l2, err := ints.TryAcquire(ctx, "w")
	require.NoError(t, err, "a Router with no Kind takes the previous version's jobs")
	require.Equal(t, 1, l2.Payload)
	require.NotEqual(t, claimed[0], l2.JobID)
	j, _, err := ints.Get(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, "", j.Kind)
	require.Nil(t, j.Metadata)
}

// List by a kind walks that kind's jobs in the index of kinds
// (leaserouter_jobs_kind_list), its generic plan too (the one a
// connection keeps), reading about a page of them, not the state's jobs
// of other kinds; its leased jobs, which that index leaves out, are a
// read of the queue's leased jobs (kindQueue leases 2,000 of k00): at
// most the leases in flight, whether the kind has many or none.
func TestListByKindWalksTheKindIndex(t *testing.T) {
	db := pgtest.New(t)
	kindQueue(t, db, true)
	_, err := db.Exec(t.Context(), `UPDATE leaserouter_jobs SET state = 'succeeded', purge_at = now() + interval '1 hour' WHERE kind IN ('k00', 'k01') AND state = 'pending'`)
	require.NoError(t, err)
	_, err = db.Exec(t.Context(), `VACUUM ANALYZE leaserouter_jobs`)
	require.NoError(t, err)
	const page = 101
	for _, c := range []struct {
		kind     string
		states   []string
		kindWalk bool // whether the plan walks leaserouter_jobs_kind_list
		reads    int  // the most rows of the table it may read
		rows     int
	}{
		{"k17", []string{"pending", "succeeded"}, true, 2*page + 16, page},
		{"k00", []string{"leased", "succeeded"}, true, 2000 + 2*page + 16, page},
		{"k17", []string{"leased"}, false, 2000 + 16, 0},
	} {
		for _, generic := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/%v/generic=%v", c.kind, c.states, generic), func(t *testing.T) {
				raw := explainStatement(t, db, "jobs_list_kinds", generic, map[string]any{"queue": "default",
					"states": c.states, "kinds": []string{c.kind}, "unkinded": false, "prefix": "",
					"before": int64(math.MaxInt64), "omit": true, "limit": int64(page)})
				var out []struct{ Plan planNode }
				require.NoError(t, json.Unmarshal(raw, &out))
				walks := out[0].Plan.count(func(p planNode) bool { return p.Index == "leaserouter_jobs_kind_list" })
				if c.kindWalk {
					require.Positive(t, walks, "no walk of the kinds' index:\n%s", raw)
				}
				read := out[0].Plan.read(func(p planNode) bool { return p.Relation == "leaserouter_jobs" })
				require.LessOrEqual(t, read, c.reads, "rows read for a page:\n%s", raw)
				require.Equal(t, float64(c.rows), out[0].Plan.Rows, "rows of the page:\n%s", raw)
			})
		}
	}
}

// Metadata round-trips through the jsonb column exactly: keys and values
// with quotes, backslashes, HTML characters JSON escapes, line separators
// and other unicode, and empty values, in Get, List and the lease; no
// metadata, or an empty map, reads back as nil.
func TestMetadataRoundTripsExactly(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r := routerOn[int](t, db, pgrouter.Options{})
	md := map[string]string{`a"b`: `c"d\e`, "<&>": "\u2028\u2029", "ключ": "値 🚀", "empty": "", " ": "\t\n"}
	require.NoError(t, r.Enqueue(ctx, "md", 1, leaserouter.WithMetadata(md)))
	require.NoError(t, r.Enqueue(ctx, "none", 2))
	require.NoError(t, r.Enqueue(ctx, "emptymap", 3, leaserouter.WithMetadata(map[string]string{})))
	j, ok, err := r.Get(ctx, "md")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, md, j.Metadata)
	for _, id := range []string{"none", "emptymap"} {
		j, ok, err := r.Get(ctx, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Nil(t, j.Metadata, id)
	}
	page, err := r.List(ctx, leaserouter.ListParams{})
	require.NoError(t, err)
	for _, j := range page.Jobs {
		if j.ID == "md" {
			require.Equal(t, md, j.Metadata)
		} else {
			require.Nil(t, j.Metadata, j.ID)
		}
	}
	for range 3 {
		l, err := r.TryAcquire(ctx, "w")
		require.NoError(t, err)
		if l.JobID == "md" {
			require.Equal(t, md, l.Metadata())
		} else {
			require.Nil(t, l.Metadata(), l.JobID)
		}
		require.NoError(t, l.Complete(ctx))
	}
}
