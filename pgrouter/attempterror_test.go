package pgrouter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// getJob returns job id as r.Get does, failing t if it is not known.
func getJob[T any](t *testing.T, r *pgrouter.Router[T], id string) leaserouter.Job[T] {
	t.Helper()
	j, ok, err := r.Get(t.Context(), id)
	require.NoError(t, err)
	require.True(t, ok, "job %q known", id)
	return j
}

// failOnce leases job id (the next ready: it must be id) as worker and
// fails the attempt with text.
func failOnce[T any](t *testing.T, r *pgrouter.Router[T], id, worker, text string) {
	t.Helper()
	l, err := r.TryAcquire(t.Context(), worker)
	require.NoError(t, err)
	require.Equal(t, id, l.JobID)
	require.NoError(t, l.Fail(t.Context(), errors.New(text)))
}

var noBackoff = pgrouter.Options{Backoff: func(int) time.Duration { return 0 }}

// TestMigrationToErrorsKeepsLastErrorWithNoRecord: a database at schema
// version 18 with a failed job is brought to 19 by Migrate; the job's
// history reads as none (its LastError stays, with no record: the
// version-18 row says nothing of the attempt but its text), and its next
// failure is recorded.
func TestMigrationToErrorsKeepsLastErrorWithNoRecord(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r, err := pgrouter.New[string](ctx, db, noBackoff)
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "old", "p"))
	failOnce(t, r, "old", "w1", "boom")
	require.NoError(t, r.Close(ctx))
	toSchemaV18(t, db)
	_, err = pgrouter.New[string](ctx, db, pgrouter.Options{})
	require.ErrorIs(t, err, pgrouter.ErrSchemaOutdated)

	require.NoError(t, pgrouter.Migrate(ctx, db))
	r = routerOn[string](t, db, noBackoff)
	j := getJob(t, r, "old")
	require.Equal(t, "boom", j.LastError, "kept")
	require.Nil(t, j.Errors, "a row of version 18: no record")
	failOnce(t, r, "old", "w2", "again")
	j = getJob(t, r, "old")
	require.Len(t, j.Errors, 1)
	require.Equal(t, leaserouter.AttemptError{Attempt: 2, At: j.Errors[0].At, Worker: "w2", Error: "again"}, j.Errors[0])
	require.Equal(t, "again", j.LastError)
}

// toSchemaV18 takes db back to schema version 18: migration 0019's
// column (and what it held), function and trigger gone.
func toSchemaV18(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	_, err := db.Exec(t.Context(), `DROP TRIGGER leaserouter_jobs_errors_reset ON leaserouter_jobs;
		DROP FUNCTION leaserouter_jobs_errors_reset(); DROP FUNCTION leaserouter_append_error;
		ALTER TABLE leaserouter_jobs DROP COLUMN errors;
		DELETE FROM leaserouter_migrations WHERE version > 18`)
	require.NoError(t, err)
	db.Reset() // no connection keeps a statement prepared on the dropped column
}

// TestAnOlderInsertOverAPurgedJobClearsItsErrors: a process of schema
// version 18 that replaces a purged job's row (its upsert sets a new
// created_at and knows no errors column) gives the new job no history,
// as this version's insert does; any other update keeps it.
func TestAnOlderInsertOverAPurgedJobClearsItsErrors(t *testing.T) {
	r, db := newRouter[string](t, noBackoff)
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "x", "p"))
	failOnce(t, r, "x", "w", "boom")
	require.Len(t, getJob(t, r, "x").Errors, 1)
	_, err := db.Exec(ctx, `UPDATE leaserouter_jobs SET created_at = created_at, updated_at = clock_timestamp() WHERE id = 'x'`)
	require.NoError(t, err)
	require.Len(t, getJob(t, r, "x").Errors, 1, "created_at unchanged: the history stays")
	// What a version-18 insert writes over a purged row, in short.
	_, err = db.Exec(ctx, `UPDATE leaserouter_jobs SET created_at = clock_timestamp(), attempt = 0, last_error = '' WHERE id = 'x'`)
	require.NoError(t, err)
	require.Nil(t, getJob(t, r, "x").Errors, "a new job: no history")
}

// TestReenqueuedPurgedJobStartsWithNoErrors: a job enqueued under the ID
// of a finished job past its retention starts with no history and an
// empty LastError, as the core's does.
func TestReenqueuedPurgedJobStartsWithNoErrors(t *testing.T) {
	opts := noBackoff
	opts.Retention = time.Minute // long enough for Get to find it on a busy machine
	opts.MaxAttempts = 1
	r, db := newRouter[string](t, opts)
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "x", "p"))
	failOnce(t, r, "x", "w", "boom")
	j := getJob(t, r, "x")
	require.Equal(t, leaserouter.StateDead, j.State)
	require.Len(t, j.Errors, 1)
	_, err := db.Exec(ctx, `UPDATE leaserouter_jobs SET purge_at = clock_timestamp() WHERE id = 'x'`) // past its retention
	require.NoError(t, err)
	require.NoError(t, r.Enqueue(ctx, "x", "p2"))
	j = getJob(t, r, "x")
	require.Equal(t, leaserouter.StatePending, j.State)
	require.Empty(t, j.LastError)
	require.Nil(t, j.Errors)
}

// TestClaimResolverRestoresTheErrorBeforeTheUndoneExpiry: undoing the
// expiry settlement of a lost claim's lease (nobody received it: no
// attempt) removes its record and gives the job back the LastError of
// the failure before it.
func TestClaimResolverRestoresTheErrorBeforeTheUndoneExpiry(t *testing.T) {
	const lease = 200 * time.Millisecond
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: lease, PollInterval: time.Hour})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "f", 1))
	failOnce(t, r, "f", "w", "boom")
	require.NoError(t, r.RunNow(ctx, "f")) // past its backoff
	id, _, expiry := lostClaim(t, db, 201, lease)
	require.Equal(t, "f", id)
	awaitDBTime(t, db, expiry)
	j := getJob(t, r, id) // settles the expiry
	require.Equal(t, "lease expired", j.LastError)
	require.Len(t, j.Errors, 2)
	require.NoError(t, pgrouter.ResolveClaim(ctx, r, 201))
	j = getJob(t, r, id)
	require.Equal(t, 1, j.Attempt, "the lost claim's lease not counted")
	require.Equal(t, "boom", j.LastError, "the error before the undone expiry")
	require.Len(t, j.Errors, 1)
	require.Equal(t, "boom", j.Errors[0].Error)
}

// TestClaimResolverAfterRetryRestoresTheErrorBeforeTheClaim: after a
// Retry the attempts are numbered from 1 again; undoing a lost claim's
// expiry at attempt 1 removes its record and gives back the LastError
// Retry kept (the failure before the Retry), not an empty one.
func TestClaimResolverAfterRetryRestoresTheErrorBeforeTheClaim(t *testing.T) {
	const lease = 200 * time.Millisecond
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: lease, PollInterval: time.Hour, MaxAttempts: 1})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "f", 1))
	failOnce(t, r, "f", "w", "boom")
	require.Equal(t, leaserouter.StateDead, getJob(t, r, "f").State)
	require.NoError(t, r.Retry(ctx, "f"))
	require.Equal(t, "boom", getJob(t, r, "f").LastError, "Retry keeps LastError")
	id, _, expiry := lostClaim(t, db, 301, lease)
	require.Equal(t, "f", id)
	awaitDBTime(t, db, expiry)
	require.Len(t, getJob(t, r, id).Errors, 2, "the expiry settled and recorded")
	require.NoError(t, pgrouter.ResolveClaim(ctx, r, 301))
	j := getJob(t, r, id)
	require.Len(t, j.Errors, 1)
	require.Equal(t, "boom", j.Errors[0].Error)
	require.Equal(t, "boom", j.LastError, "LastError as before the lost claim (the last record's)")
}

// TestClaimResolverRemovesOnlyTheUndoneExpirysRecord: an expiry settled
// by a process of schema version 18 leaves no record; the resolver then
// finds the record of an earlier failure last, of the same attempt number
// after a Retry, and keeps it (it is not 'lease expired' at the expiry
// instant), with LastError its error.
func TestClaimResolverRemovesOnlyTheUndoneExpirysRecord(t *testing.T) {
	const lease = 200 * time.Millisecond
	r, db := newRouter[int](t, pgrouter.Options{LeaseDuration: lease, PollInterval: time.Hour, MaxAttempts: 1})
	ctx := t.Context()
	require.NoError(t, r.Enqueue(ctx, "f", 1))
	failOnce(t, r, "f", "w", "boom")
	require.NoError(t, r.Retry(ctx, "f"))
	id, _, expiry := lostClaim(t, db, 302, lease)
	awaitDBTime(t, db, expiry)
	require.Len(t, getJob(t, r, id).Errors, 2, "the expiry settled and recorded")
	// What a version-18 settlement leaves: the same row, no record.
	_, err := db.Exec(ctx, `UPDATE leaserouter_jobs SET errors = errors - -1 WHERE id = 'f'`)
	require.NoError(t, err)
	require.NoError(t, pgrouter.ResolveClaim(ctx, r, 302))
	j := getJob(t, r, id)
	require.Len(t, j.Errors, 1, "the pre-Retry failure's record is not the undone expiry's")
	require.Equal(t, "boom", j.Errors[0].Error)
	require.Equal(t, "boom", j.LastError)
}
